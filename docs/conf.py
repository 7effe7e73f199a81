"""Sphinx configuration of the jaxrdp documentation.

Build (warnings are errors):

    pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html

The notebooks in ``notebooks/`` are copied into ``docs/_generated_notebooks/`` at
build time (Sphinx reads sources only below ``docs/``) and rendered from their
stored cells: nothing is executed during the build.
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
nb_execution_mode = "off"  # render the stored cells; the test suite runs the notebooks
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# -- autodoc -----------------------------------------------------------------------
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autosummary_generate = False  # the API pages list their objects explicitly
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True  # Attributes: as a field list, not a second description of each field

# -- HTML --------------------------------------------------------------------------
html_theme = "furo"
html_title = f"jaxrdp {release}"
