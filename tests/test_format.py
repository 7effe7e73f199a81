"""One style for the whole tree: `ruff format --check` and `ruff check` (config in pyproject.toml)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _ruff(*args):
  """``ruff *args`` on the whole tree; skips the test when ruff is not installed."""
  ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).with_name("ruff"))
  if not pathlib.Path(ruff).exists():
    pytest.skip("ruff is not installed (it is in the test extra)")
  out = subprocess.run([ruff, *args, "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_tree_is_formatted():
  _ruff("format", "--check", "--diff")


def test_tree_passes_the_lint_selection():
  # The rules are pyproject.toml's [tool.ruff.lint] selection, each ignore explained there.
  _ruff("check", "--output-format", "concise")


def test_text_files_hold_no_control_characters():
  # A LaTeX macro written through a Python string ("\varepsilon", "\rceil", "\frac")
  # turns into a control character (vertical tab, carriage return, form feed) that
  # renders as garbage; tabs and newlines are the only ones a text file needs.
  bad = []
  for path in sorted(ROOT.rglob("*")):
    rel = path.relative_to(ROOT)
    if rel.parts[0] in {".git", ".venv", "_build"} or "_build" in rel.parts:
      continue
    if path.suffix not in {".md", ".py", ".rst", ".txt", ".toml", ".ipynb"} or not path.is_file():
      continue
    text = path.read_text(encoding="utf-8", errors="replace")
    for i, line in enumerate(text.split("\n"), 1):  # not splitlines: it splits on \v, \r
      if any(ord(c) < 32 and c != "\t" for c in line):
        bad.append(f"{rel}:{i}")
  assert not bad, f"control characters in {bad[:10]}"
