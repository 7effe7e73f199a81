"""Executes notebooks/dpsgd_optax.ipynb in its small configuration (so it cannot rot)."""

from __future__ import annotations

import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "dpsgd_optax.ipynb"


def test_notebook_is_committed_without_outputs():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  for cell in nb.cells:
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None


def test_notebook_runs_in_small_configuration(tmp_path, monkeypatch):
  figure = tmp_path / "figure.png"
  monkeypatch.setenv("JAXRDP_NOTEBOOK_SMALL", "1")
  monkeypatch.setenv("JAXRDP_NOTEBOOK_FIGURE", str(figure))
  monkeypatch.setenv("PYTHONPATH", str(ROOT))
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  nb = nbformat.read(NOTEBOOK, as_version=4)
  client = nbclient.NotebookClient(
    nb,
    timeout=600,
    kernel_name="python3",
    resources={"metadata": {"path": str(NOTEBOOK.parent)}},
  )
  client.execute()  # raises CellExecutionError if any cell fails
  text = "\n".join(
    out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
  )
  assert "small configuration" in text
  assert "in-loop epsilon" in text and "saved" in text
  assert figure.exists() and figure.stat().st_size > 1000
  assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
