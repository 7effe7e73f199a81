"""Every ```python block of README.md runs as written, each in a fresh interpreter.

A reader copies a block into a new Python session, so each block must be
self-contained: its imports, its data, nothing from the block before. A block may
opt out only by starting with the comment ``# not run by the tests: <reason>``,
which the reader sees too. A block that imports an optional package that is not
installed (optax, without the ``examples`` extra) is skipped with that package's
name; CI installs every extra, so there all blocks run.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
SKIP_MARK = re.compile(r"#\s*not run by the tests:\s*(?P<reason>\S.*)")


def _python_blocks():
  """(line number, source) of each ```python block of the README."""
  with open(README, encoding="utf-8") as f:
    lines = f.read().splitlines()
  blocks, start = [], None
  for i, line in enumerate(lines):
    if start is None and line.strip() == "```python":
      start = i + 1
    elif start is not None and line.strip() == "```":
      blocks.append((start + 1, "\n".join(lines[start:i]) + "\n"))
      start = None
  assert start is None, f"README.md: the ```python block at line {start} is not closed"
  return blocks


BLOCKS = _python_blocks()


def _top_level_imports(source):
  modules = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      modules.update(alias.name.split(".")[0] for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
      modules.add(node.module.split(".")[0])
  return modules


def test_readme_has_its_examples():
  # A floor, so that a broken extraction does not pass by finding nothing: the README
  # shows one number, a grid, a training loop and a sampler.
  assert len(BLOCKS) >= 4, [line for line, _ in BLOCKS]


@pytest.mark.parametrize("line, source", BLOCKS, ids=[f"line{line}" for line, _ in BLOCKS])
def test_readme_block_runs(line, source, tmp_path):
  first = source.lstrip().splitlines()[0] if source.strip() else ""
  mark = SKIP_MARK.match(first)
  if mark:
    pytest.skip(f"README.md line {line}: {mark['reason']}")
  missing = sorted(m for m in _top_level_imports(source) if importlib.util.find_spec(m) is None)
  if missing:
    pytest.skip(f"README.md line {line} needs {', '.join(missing)} (not installed)")
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
    [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
  )
  env.setdefault("JAX_PLATFORMS", "cpu")
  env["MPLBACKEND"] = "Agg"
  # A fresh interpreter in an empty directory: files the block writes stay out of the
  # checkout, and nothing but jaxrdp itself comes from it.
  proc = subprocess.run(
    [sys.executable, "-c", source],
    check=False,
    cwd=tmp_path,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, f"README.md line {line}:\n{source}\n{proc.stderr[-4000:]}"
