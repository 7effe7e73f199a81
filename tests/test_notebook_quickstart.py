"""notebooks/quickstart.ipynb runs top to bottom in its small configuration."""

import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "quickstart.ipynb")


def test_notebook_is_committed_without_outputs():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  for cell in nb.cells:
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None


def test_quickstart_executes(tmp_path, monkeypatch):
  monkeypatch.setenv("JAXRDP_NOTEBOOK_SMALL", "1")
  monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
  nb = nbformat.read(NOTEBOOK, as_version=4)
  client = nbclient.NotebookClient(
    nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
  )
  client.execute()  # raises CellExecutionError with the traceback on any failure
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
  assert not [o for o in outputs if o.output_type == "error"]
  images = [o for o in outputs if "image/png" in o.get("data", {})]
  assert len(images) >= 2  # the heatmap and the curves
  text = "".join(o.get("text", "") for o in outputs)
  assert "calibrations in" in text and "SweepResult" in text
