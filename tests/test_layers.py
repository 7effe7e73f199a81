"""The package's layers run one way: no subpackage imports one above it, anywhere.

The contract is in pyproject.toml ([tool.importlinter]); import-linter reads every
import statement, at module level and inside functions, so an import hidden in a
function to dodge a cycle breaks it too.
"""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_layers_contract_is_kept():
  exe = shutil.which("lint-imports") or os.path.join(
    os.path.dirname(sys.executable), "lint-imports"
  )
  if not os.path.exists(exe):
    pytest.fail("import-linter is not installed (it is in the test extra)")
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
  assert out.returncode == 0, out.stdout + out.stderr
  assert "0 broken" in out.stdout, out.stdout


def test_a_broken_layer_is_detected(tmp_path):
  # The check can fail: a copy of the contract with the layers reversed must break.
  tomllib = pytest.importorskip("tomllib")  # Python 3.11+

  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    config = tomllib.load(f)["tool"]["importlinter"]
  layers = config["contracts"][0]["layers"][::-1]
  body = "\n".join(f"    {layer}" for layer in layers)
  ini = tmp_path / "reversed.ini"
  ini.write_text(
    f"[importlinter]\nroot_package = jaxrdp\n\n[importlinter:contract:layers]\n"
    f"name = reversed\ntype = layers\nlayers =\n{body}\n"
  )
  exe = shutil.which("lint-imports") or os.path.join(
    os.path.dirname(sys.executable), "lint-imports"
  )
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run(
    [exe, "--config", str(ini)], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env
  )
  assert out.returncode != 0, out.stdout
