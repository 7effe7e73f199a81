"""The accelerator benchmark runs end to end in its tiny CI configuration."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run_benchmark(script, small_flag, tmp_path):
  """``benchmarks/<script> <small_flag> --json`` in a fresh interpreter, JAX's defaults:
  its ``(stdout, report)``, after checking that it succeeded."""
  out = tmp_path / "result.json"
  env = dict(os.environ)
  env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
  env.pop("JAX_ENABLE_X64", None)
  proc = subprocess.run(
    [sys.executable, str(ROOT / "benchmarks" / script), small_flag, "--json", str(out)],
    capture_output=True,
    text=True,
    timeout=600,  # a guard against a hang: it compiles many programs, slow on a busy machine
    env=env,
    cwd=tmp_path,
  )
  assert proc.returncode == 0, proc.stdout + proc.stderr
  return proc.stdout, json.loads(out.read_text())


def test_bench_accelerator_tiny(tmp_path):
  stdout, report = _run_benchmark("bench_accelerator.py", "--tiny", tmp_path)
  tables = [[]]
  for text in stdout.splitlines():
    if text.startswith("|"):
      tables[-1].append(text)
    elif tables[-1]:
      tables.append([])
  lines, pld_lines = tables[0], tables[1]
  # Header, separator, and one row per (size, dtype).
  assert lines[0].startswith("| configurations | dtype |")
  rows = [row.split("|")[1:-1] for row in lines[2:]]
  assert [(r[0].strip(), r[1].strip()) for r in rows] == [
    ("10", "float64"),
    ("10", "float32"),
    ("100", "float64"),
    ("100", "float32"),
  ]
  assert all(r[-1].strip() == "ok" for r in rows)
  assert [r["configurations"] for r in report["rows"]] == [10, 10, 100, 100]
  for r in report["rows"]:
    assert r["ok"] and r["configurations_per_s"] > 0 and r["fraction_of_exp_throughput"] > 0
    # ns per (q, sigma, alpha) evaluation is time / (N * 156).
    assert (
      abs(r["ns_per_evaluation"] - 1e9 * r["median_s"] / (r["configurations"] * 156))
      < 1e-6 * r["ns_per_evaluation"]
    )
  # Work model: the nodes each layout evaluated, recorded per search round; the
  # light layout covers this grid (sigma >= 0.6, orders to 64) but for order 128 and up.
  model = report["work_model"]
  for key in ("light_layout_nodes", "full_layout_nodes"):
    assert set(model[key]) == {"10", "100"}
  for n in ("10", "100"):
    light, full = model["light_layout_nodes"][n], model["full_layout_nodes"][n]
    assert light > 0 and light % 272 == 0 and full % 768 == 0
    assert light + full >= model["quadratures_per_configuration"][n] * int(n) * 272
  assert model["transcendentals_per_node"] == {"light": 4, "full": 5}
  f32 = [r for r in report["rows"] if r["dtype"] == "float32"]
  # float32 output: epsilon rounded to float32 from float32-rounded inputs.
  assert all(0 <= r["float32_max_rel_err_vs_float64"] < 1e-5 for r in f32)
  # The tight (PLD) path: the MNIST check, then two cells equal to unbatched calls.
  assert pld_lines[0].startswith("| PLD configurations |")
  assert [row.split("|")[1].strip() for row in pld_lines[2:]] == ["2"]
  assert pld_lines[2].split("|")[-2].strip() == "ok"
  pld = report["pld"]
  lo, hi = pld["mnist"]["bounds"]
  assert pld["mnist"]["ok"] and lo <= pld["mnist"]["epsilon"] <= hi
  assert abs(lo - 2.381690 * (1 - 1e-7)) < 1e-12 and abs(hi - 2.381690 * (1 + 1e-5)) < 1e-12
  (row,) = pld["rows"]
  assert row["configurations"] == 2 and row["ok"] and row["max_rel_err_unbatched"] <= 1e-8
  assert row["configurations_per_s"] == 2 / row["median_s"] and row["compile_s"] > 0
  assert pld["warnings"] == []


def test_scaling_chunked_pass_equals_one_call():
  """scaling.py's chunked timing (grids above --chunk) covers every configuration once.

  25 configurations in chunks of 10 (the last padded): the epsilons must be the
  ones a single call gives, in order.
  """
  import numpy as np

  import jaxrdp

  sys.path.insert(0, str(ROOT / "benchmarks"))
  try:
    import scaling
  finally:
    sys.path.pop(0)
  q, s = scaling.grid(25)
  _, seconds, eps = scaling.time_jaxrdp_chunked(q, s, jaxrdp.DP_ACCOUNTING_ORDERS, chunk=10)
  ref = jaxrdp.dpsgd_epsilon(
    q, s, scaling.STEPS, scaling.DELTA, orders=jaxrdp.DP_ACCOUNTING_ORDERS
  ).epsilon
  assert seconds > 0 and eps.shape == (25,)
  np.testing.assert_allclose(eps, np.asarray(ref), rtol=1e-12)


@pytest.mark.slow  # a subprocess compiling the engine's Laplace programs
def test_bench_pld_laplace_small_checks_and_reports(tmp_path):
  _, report = _run_benchmark("bench_pld_laplace.py", "--small", tmp_path)
  assert report["cells"] == 2
  # (the script asserts each cell against dp_accounting's bracket before timing)
  assert report["max_relative_difference"] < 1e-5
  assert report["engine_warm_s"] > 0 and report["generic_s"] > 0
