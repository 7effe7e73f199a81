"""One style for the whole tree: `ruff format --check` and `ruff check` (config in pyproject.toml)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_tree_is_formatted():
  ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).with_name("ruff"))
  if not pathlib.Path(ruff).exists():
    pytest.skip("ruff is not installed (it is in the test extra)")
  out = subprocess.run(
    [ruff, "format", "--check", "--diff", "."],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_tree_passes_the_lint_selection():
  # The rules are pyproject.toml's [tool.ruff.lint] selection, each ignore explained there.
  ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).with_name("ruff"))
  if not pathlib.Path(ruff).exists():
    pytest.skip("ruff is not installed (it is in the test extra)")
  out = subprocess.run(
    [ruff, "check", "--output-format", "concise", "."],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
