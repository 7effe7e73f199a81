"""Sphinx configuration of the jaxrdp documentation.

Build (warnings are errors, and every cross-reference must resolve: nitpicky below):

    pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html

The notebooks in ``notebooks/`` are copied into ``docs/_generated_notebooks/`` at
build time (Sphinx reads sources only below ``docs/``) and executed by the build
(myst-nb), so the pages show what the current code computes. They run in their small
configuration (``JAXRDP_NOTEBOOK_SMALL=1``, a few minutes in all); set
``JAXRDP_NOTEBOOK_SMALL=0`` for the full one (about three times longer). A cell that raises
fails the build. The notebooks write their files next to the copies, never into
``docs/figures``.
"""

import glob
import os
import shutil
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)
sys.path.insert(0, ROOT)  # document the checkout, even without `pip install -e .`

import jaxrdp  # noqa: E402

# -- Notebooks: copy them below the source directory -------------------------------
_NB_OUT = os.path.join(DOCS, "_generated_notebooks")
os.makedirs(_NB_OUT, exist_ok=True)
for _old in glob.glob(os.path.join(_NB_OUT, "*.ipynb")):
  if not os.path.exists(os.path.join(ROOT, "notebooks", os.path.basename(_old))):
    os.remove(_old)
for _nb in sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))):
  _dst = os.path.join(_NB_OUT, os.path.basename(_nb))
  # Copy only when changed, so incremental builds do not re-read every notebook.
  if not os.path.exists(_dst) or open(_nb, "rb").read() != open(_dst, "rb").read():
    shutil.copyfile(_nb, _dst)

# -- Project -----------------------------------------------------------------------
project = "jaxrdp"
author = "the jaxrdp authors"
copyright = "the jaxrdp authors"
release = jaxrdp.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "myst_nb",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
root_doc = "index"
# Docstrings quote names and expressions in single backticks; show them as code.
default_role = "literal"

# -- MyST and notebooks ------------------------------------------------------------
nb_execution_mode = "force"  # the notebooks are committed without outputs
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 900  # per cell
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# The kernels inherit this environment: the checkout's jaxrdp, the small configuration
# unless asked otherwise, figures shown inline (whatever MPLBACKEND the caller has), and
# dpsgd_optax's figure written next to the executed copy instead of into docs/figures.
os.environ["PYTHONPATH"] = os.pathsep.join(
  [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)
os.environ.setdefault("JAXRDP_NOTEBOOK_SMALL", "1")
os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
os.environ.setdefault("JAXRDP_NOTEBOOK_FIGURE", "dpsgd_digits.png")

# -- autodoc -----------------------------------------------------------------------
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "description"
# Signatures keep the names the source writes (every module with annotations uses
# ``from __future__ import annotations``): ``ArrayLike`` rather than its expansion
# ``Array | ndarray | bool | number | bool | int | float | complex``, ``jax.Array``
# rather than the class's home in jaxlib. The names link to JAX's documentation
# (``_EXTERNAL`` below).
autodoc_type_aliases = {
  "ArrayLike": "ArrayLike",
  "jax.Array": "jax.Array",
  "jax.Device": "jax.Device",
  "jnp.ndarray": "jax.Array",
  "np.ndarray": "numpy.ndarray",
  "Mesh": "jax.sharding.Mesh",
  "Schedule": "ArrayLike | Callable[[jax.Array], ArrayLike]",  # jaxrdp.train's q and sigma
}
autodoc_member_order = "bysource"
autosummary_generate = False  # the API pages list their objects explicitly
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True  # Attributes: as a field list, not a second description of each field
# The attributes' types come from the docstrings, not from the class annotations:
# napoleon evaluates those without the aliases above (jax.Array would show as the
# class's private home in jaxlib).
napoleon_attr_annotations = False


def _show_alias_by_name():
  """Shows an aliased annotation by its name inside unions too (``ArrayLike | None``).

  Sphinx substitutes the aliases above with a placeholder object that it unwraps
  only at the top level of an annotation; inside a union it prints the
  placeholder's repr.
  """
  from sphinx.util import inspect as sphinx_inspect

  placeholder = getattr(sphinx_inspect, "TypeAliasForwardRef", None)
  if placeholder is not None:
    placeholder.__repr__ = lambda self: self.name


_show_alias_by_name()

# -- Cross-references ------------------------------------------------------------
# Every reference must resolve (-n, with -W in the test suite). Types from other
# projects link to their documentation; the build reads no inventory over the network.
nitpicky = True
_JAX = "https://docs.jax.dev/en/latest/"
_EXTERNAL = {
  "ArrayLike": _JAX + "_autosummary/jax.typing.ArrayLike.html",
  "jax.typing.ArrayLike": _JAX + "_autosummary/jax.typing.ArrayLike.html",
  "jax.Array": _JAX + "_autosummary/jax.Array.html",
  "jax.Device": _JAX + "_autosummary/jax.Device.html",
  "jax.sharding.Mesh": _JAX + "jax.sharding.html#jax.sharding.Mesh",
  "numpy.ndarray": "https://numpy.org/doc/stable/reference/generated/numpy.ndarray.html",
  "os.PathLike": "https://docs.python.org/3/library/os.html#os.PathLike",
}
# The fields of jaxrdp's NamedTuples and dataclasses are annotated ``jax.Array``; autodoc
# names that class by where jaxlib defines it (shown as ``Array``).
import jax  # noqa: E402

_EXTERNAL[f"{jax.Array.__module__}.{jax.Array.__qualname__}"] = _EXTERNAL["jax.Array"]


def _link_external_type(app, env, node, contnode):
  """Resolves a Python reference to one of ``_EXTERNAL``'s names to its page."""
  del app, env
  if node.get("refdomain") != "py" or node.get("reftarget") not in _EXTERNAL:
    return None
  from docutils import nodes

  ref = nodes.reference("", "", internal=False, refuri=_EXTERNAL[node["reftarget"]])
  ref += contnode
  return ref


def setup(app):
  app.connect("missing-reference", _link_external_type)


# -- HTML --------------------------------------------------------------------------
html_theme = "furo"
html_title = f"jaxrdp {release}"
