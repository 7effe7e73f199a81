"""The documentation site builds with every reference resolved, running the notebooks.

Runs the documented build, ``sphinx-build -W -n -b html docs docs/_build/html``, into a
temporary folder: warnings are errors and every cross-reference must resolve
(nitpicky). The build executes the notebooks (myst-nb), in their small configuration
(``JAXRDP_NOTEBOOK_SMALL=1``), so this file is also where the notebooks are tested: a
cell that raises (the notebooks' own assertions included) fails the build, and the
executed copies the build keeps are checked below. The notebooks run once per suite,
here, not a second time in a test of their own.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pathlib
import re
import subprocess
import sys

import pytest

# The docs extra: Sphinx and myst-nb, and what the notebooks import.
for _module in ("sphinx", "myst_nb", "matplotlib", "optax", "sklearn"):
  pytest.importorskip(_module, reason=f'{_module} is not installed (pip install -e ".[docs]")')
nbformat = pytest.importorskip("nbformat")

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Each public module and the API page that documents it.
API_PAGES = {
  "jaxrdp": "jaxrdp",
  "jaxrdp.events": "events",
  "jaxrdp.accountants": "accountants",
  "jaxrdp.pld": "pld",
  "jaxrdp.risk": "risk",
  "jaxrdp.mechanisms": "mechanisms",
  "jaxrdp.train": "train",
  "jaxrdp.classical": "classical",
  "jaxrdp.rdp": "rdp",
  "jaxrdp.calibration": "calibration",
  "jaxrdp.sweeps": "sweeps",
}


def _figures_digest():
  return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (DOCS / "figures").iterdir()}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
  """Builds the site once for the whole file: (process, html folder, executed notebooks)."""
  root = tmp_path_factory.mktemp("docs")
  out, doctrees = root / "html", root / "doctrees"
  env = dict(os.environ)
  env.setdefault("JAX_PLATFORMS", "cpu")
  env["JAXRDP_NOTEBOOK_SMALL"] = "1"
  env["JAXRDP_NOTEBOOK_FIGURE"] = str(root / "dpsgd_digits.png")
  figures = _figures_digest()
  cmd = [sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q", "-b", "html"]
  cmd += ["-d", str(doctrees), str(DOCS), str(out)]
  proc = subprocess.run(
    cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False
  )
  # myst-nb keeps the executed notebooks beside the output folder.
  executed = root / "jupyter_execute" / "_generated_notebooks"
  return {"proc": proc, "html": out, "executed": executed, "root": root, "figures": figures}


@pytest.mark.slow  # the build
def test_docs_build_with_warnings_as_errors_and_every_reference_resolved(build):
  proc = build["proc"]
  assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-8000:]
  out = build["html"]
  for page in ("index.html", "api/jaxrdp.html", "api/pld.html", "api/train.html"):
    assert (out / page).is_file(), page
  for nb in NOTEBOOKS:
    assert (out / "_generated_notebooks" / (nb.stem + ".html")).is_file(), nb.name


@pytest.mark.slow  # the build
def test_build_leaves_the_committed_figures_alone(build):
  # The full configurations write docs/figures; a build never does.
  assert _figures_digest() == build["figures"]


def test_every_public_name_has_its_api_entry():
  # nitpicky catches references to undocumented names, not names no page lists.
  pages = {name: (DOCS / "api" / f"{page}.rst").read_text() for name, page in API_PAGES.items()}
  missing = []
  for name, text in pages.items():
    for public in importlib.import_module(name).__all__:
      if f"{name}.{public}" in API_PAGES:
        continue  # a submodule: it has its own page
      if not re.search(rf"(?<![\w.]){re.escape(public)}\b", text):
        missing.append(f"{name}.{public}")
  assert not missing, f"listed in __all__ but on no API page: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
  nb = nbformat.read(path, as_version=4)
  for cell in nb.cells:
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None, path.name


def _executed(build, stem):
  path = build["executed"] / f"{stem}.ipynb"
  assert path.is_file(), f"the build did not execute {stem}.ipynb"
  nb = nbformat.read(path, as_version=4)
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
  text = "".join(o.get("text", "") for o in outputs)
  images = [o for o in outputs if "image/png" in o.get("data", {})]
  return nb, outputs, text, images


@pytest.mark.slow  # the build
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_ran_in_the_build_and_shows_its_outputs(build, path):
  assert build["proc"].returncode == 0, "the build failed (see the build test)"
  nb, outputs, _, images = _executed(build, path.stem)
  code = [c for c in nb.cells if c.cell_type == "code"]
  assert all(c.execution_count is not None for c in code), path.name
  assert not [o for o in outputs if o.output_type == "error"], path.name
  assert images, f"{path.name} shows no figure"
  page = (build["html"] / "_generated_notebooks" / f"{path.stem}.html").read_text()
  assert "<img" in page, f"the page of {path.name} shows no figure"


@pytest.mark.slow  # the build
def test_quickstart_outputs(build):
  _, _, text, images = _executed(build, "quickstart")
  assert len(images) >= 2  # the heatmap and the curves
  assert "calibrations in" in text and "SweepResult" in text


@pytest.mark.slow  # the build
def test_dpsgd_optax_outputs(build):
  _, _, text, images = _executed(build, "dpsgd_optax")
  assert "small configuration" in text
  assert "in-loop epsilon" in text and "saved" in text
  assert images  # the accuracy-against-epsilon figure, inline
  figure = build["root"] / "dpsgd_digits.png"
  assert figure.stat().st_size > 1000
  assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
