"""Execute the reproduction notebooks in their small configuration.

Each notebook reads JAXRDP_NOTEBOOK_SMALL=1 and shrinks its grids; a cell that
raises (including the notebooks' own assertions) fails the test. The committed
notebooks must carry no outputs.
"""

from __future__ import annotations

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The notebooks that reproduce published figures and comparisons.
NAMES = ("rdp_closed_form_bound.ipynb", "sgm_sigma_eff.ipynb", "composition_comparison.ipynb")
NOTEBOOKS = [ROOT / "notebooks" / name for name in NAMES]


def test_reproduction_notebooks_exist():
  assert all(p.is_file() for p in NOTEBOOKS), [p.name for p in NOTEBOOKS if not p.is_file()]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
  nb = nbformat.read(path, as_version=4)
  for cell in nb.cells:
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_small(path, monkeypatch):
  monkeypatch.setenv("JAXRDP_NOTEBOOK_SMALL", "1")
  monkeypatch.setenv("MPLBACKEND", "Agg")
  monkeypatch.setenv(
    "PYTHONPATH",
    os.pathsep.join(
      [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    ),
  )
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(
    nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
  )
  client.execute()
  errors = [
    o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
  ]
  assert not errors
