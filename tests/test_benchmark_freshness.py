"""Every benchmark result the README quotes was measured on the code in the tree.

The scripts stamp their JSON with the jaxrdp modules the run imported and a digest of
their code (``benchmarks/_provenance.py``: syntax trees without docstrings, so comments
and documentation do not count). Here the digest is recomputed from the working tree:
a quoted result measured on other code fails, naming the script to rerun.
"""

from __future__ import annotations

import json
import pathlib
import platform
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _provenance import code_digest  # noqa: E402

# The result file each README-quoted script writes (the command the README's numbers
# came from is in benchmarks/README.md).
RESULTS = {
  "bench_grid.py": "bench_grid_cpu.json",
  "bench_pld.py": "bench_pld.json",
  "bench_pld_calibration.py": "bench_pld_calibration_cpu.json",
  "compare_accountants.py": "compare_accountants.json",
  "first_query.py": "first_query_cpu.json",
  "validate_pld.py": "validate_pld.json",
  "validate_pld_laplace.py": "validate_pld_laplace.json",
  "validate_allocation_pld.py": "validate_allocation_pld.json",
  "bench_allocation.py": "bench_allocation.json",
  "shuffle_bracket.py": "shuffle_bracket.json",
  "bench_risk.py": "bench_risk.json",
}


def _quoted_scripts():
  text = (ROOT / "README.md").read_text()
  names = set(re.findall(r"`(?:benchmarks/)?(\w+\.py)`", text))
  return sorted(n for n in names if (ROOT / "benchmarks" / n).is_file())


def test_every_quoted_script_has_its_result_file():
  quoted = _quoted_scripts()
  assert quoted, "the README quotes no benchmark script (the pattern above is stale)"
  missing = [n for n in quoted if n not in RESULTS]
  assert not missing, f"add the result files of {missing} to RESULTS"


@pytest.mark.parametrize("script", _quoted_scripts())
def test_quoted_result_was_measured_on_this_code(script):
  path = ROOT / "benchmarks" / "results" / RESULTS[script]
  result = json.loads(path.read_text())
  prov = result.get("provenance")
  assert prov, f"{path.name} has no provenance: rerun benchmarks/{script}"
  # The digest dumps syntax trees, whose form can change between Python versions.
  recorded = re.search(r"python (\d+\.\d+)", prov["machine"])
  running = ".".join(platform.python_version_tuple()[:2])
  if recorded is None or recorded.group(1) != running:
    pytest.skip(f"{path.name} was stamped under another Python version than {running}")
  digest = code_digest(prov["modules"])
  assert digest == prov["code_digest"], (
    f"{path.name} was measured on other code ({prov['date']}): rerun benchmarks/{script}"
  )
