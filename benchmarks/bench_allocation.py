"""Tight epsilon of random allocation on a 100-configuration grid: jaxrdp against pld-accounting.

Random allocation (balls-in-bins, k = 1: each epoch of t steps places every example in
one of them, uniformly at random; Feldman and Shenfeld 2025, arXiv:2502.08202, and
2026, arXiv:2602.17284) under add/remove.

1. Correctness first (the script stops if a check fails): with t = 1 the event is the
   Gaussian mechanism, whose exact epsilon (Balle and Wang 2018, arXiv:1805.06530) must
   lie in jaxrdp's certified bracket ``[epsilon_lower, epsilon]``.
2. The grid: 10 sigma = geomspace(0.8, 3) x 10 t = geomspace(20, 1000) (integers),
   10 epochs, delta = 1e-5, in one call of ``jaxrdp.dpsgd_epsilon(1 / t, sigma, 10 t,
   delta, sampling="allocation", accountant="pld")``, timed once after a first call on
   one cell, which carries the compilation and is reported apart.
3. pld-accounting 2.0 (``gaussian_allocation_epsilon_range`` at its default accuracy,
   which brackets the answer to a few percent), in this process after a warm-up call.
   It takes seconds to minutes per cell, growing with t (the JSON records the fitted
   power of t), so it is timed on one cell per t (a random sigma each: its cost
   depends little on sigma), by default at t up to 420 (``--max-t 1000`` times every t
   of the grid: over an hour), and each of the grid's cells is charged its t's time.
   With ``--max-t`` below the grid's largest t the grid's time is estimated two ways:
   a floor, where every larger t costs what the largest timed one did (pld-accounting's
   time grows with t, checked on the sample), and a power-law fit in t extrapolated to
   the untimed t; the floor is the ratio reported. Both answers are certified brackets of the same number, so on every
   timed cell they must intersect; whether jaxrdp's bracket is the narrower one on
   every cell is recorded (the ratio is at better accuracy where it is).

pld-accounting is a reference package for checking only, never a dependency: install
it beside jaxrdp to run this script (``pip install pld-accounting``).

Writes benchmarks/results/bench_allocation.json. Usage:
PYTHONPATH=. python benchmarks/bench_allocation.py [--max-t 420] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _provenance import stamp  # noqa: E402

import jaxrdp  # noqa: E402

EPOCHS = 10
DELTA = 1e-5


def gaussian_exact_epsilon(sigma, delta):
  """Epsilon of one Gaussian mechanism (sensitivity 1), by root finding on its delta."""
  from scipy import optimize, stats

  mu = 1.0 / sigma

  def excess(eps):
    return (
      stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
    ) - delta

  return optimize.brentq(excess, 0.0, 100.0, xtol=1e-14, rtol=1e-15)


def check_correctness():
  rows = []
  for sigma in (0.9, 2.0):
    r = jaxrdp.dpsgd_epsilon(1.0, sigma, 1, DELTA, sampling="allocation", accountant="pld")
    up, low = float(r.epsilon), float(r.epsilon_lower)
    exact = gaussian_exact_epsilon(sigma, DELTA)
    rows.append(
      dict(sigma=sigma, exact=exact, lower=low, upper=up, inside=bool(low <= exact <= up))
    )
  out = dict(gaussian_t1=rows, passed=all(r["inside"] for r in rows))
  print("correctness:", out, flush=True)
  return out


def grid(quick):
  k = 3 if quick else 10
  sigmas = np.geomspace(0.8, 3.0, k)
  ts = np.unique(np.round(np.geomspace(20, 1000, k)).astype(int))
  s, t = np.meshgrid(sigmas, ts, indexing="ij")
  return s.ravel(), t.ravel()


def jaxrdp_grid(s, t):
  def call(s, t):
    r = jaxrdp.dpsgd_epsilon(1.0 / t, s, t * EPOCHS, DELTA, sampling="allocation", accountant="pld")
    return np.asarray(r.epsilon, np.float64), np.asarray(r.epsilon_lower, np.float64)

  # The first call, on one cell, carries the compilation; the grid is then timed once.
  start = time.perf_counter()
  call(s[:1], t[:1])
  first = time.perf_counter() - start
  start = time.perf_counter()
  up, low = call(s, t)
  run = time.perf_counter() - start
  return (
    up,
    low,
    dict(
      cells=int(s.size),
      first_call_one_cell_s=first,
      run_s=run,
      per_config_s=run / s.size,
      all_finite=bool(np.all(np.isfinite(up))),
      largest_bracket=float(np.max(up / low - 1.0)),
      median_bracket=float(np.median(up / low - 1.0)),
    ),
  )


def pld_accounting_epsilon(sigma, t):
  from PLD_accounting import gaussian_allocation_epsilon_range

  up, low = gaussian_allocation_epsilon_range(
    delta=DELTA, sigma=float(sigma), num_steps=int(t), num_selected=1, num_epochs=EPOCHS
  )
  return float(up), float(low)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument(
    "--max-t", type=int, default=420, help="time pld-accounting on one cell per t <= this"
  )
  ap.add_argument("--quick", action="store_true", help="3 x 3 grid, pld-accounting at t <= 20")
  ap.add_argument("--json", default=str(HERE / "results" / "bench_allocation.json"))
  args = ap.parse_args(argv)
  from importlib.metadata import version

  import PLD_accounting  # noqa: F401  (fail early if it is missing)

  results = dict(pld_accounting=version("pld-accounting"), epochs=EPOCHS, delta=DELTA)
  results["correctness"] = check_correctness()
  if not results["correctness"]["passed"]:
    raise SystemExit("correctness check failed")

  s, t = grid(args.quick)
  up, low, timing = jaxrdp_grid(s, t)
  print("jaxrdp grid:", timing, flush=True)
  results["grid"] = timing
  results["grid_cells"] = [
    dict(sigma=float(a), t=int(b), epsilon=float(u), epsilon_lower=float(lo))
    for a, b, u, lo in zip(s, t, up, low)
  ]

  pld_accounting_epsilon(2.0, 10)  # imports and first-call costs stay out of the timings
  rng = np.random.default_rng(0)
  max_t = 20 if args.quick else args.max_t
  ts = np.unique(t)
  cells = []
  for tv in ts[ts <= max_t]:
    i = int(rng.choice(np.nonzero(t == tv)[0]))
    start = time.perf_counter()
    ref_up, ref_low = pld_accounting_epsilon(s[i], t[i])
    seconds = time.perf_counter() - start
    row = dict(
      sigma=float(s[i]),
      t=int(t[i]),
      pld_accounting=[ref_low, ref_up],
      pld_accounting_bracket=ref_up / ref_low - 1.0,
      pld_accounting_s=seconds,
      jaxrdp=[float(low[i]), float(up[i])],
      jaxrdp_bracket=float(up[i] / low[i] - 1.0),
      intersect=bool(low[i] <= ref_up and ref_low <= up[i]),
    )
    cells.append(row)
    print(
      f"  sigma={row['sigma']:.3g} t={row['t']}: pld-accounting [{ref_low:.5f}, {ref_up:.5f}]"
      f" ({seconds:.1f} s); jaxrdp [{low[i]:.5f}, {up[i]:.5f}]",
      flush=True,
    )
  results["pld_accounting_cells"] = cells
  if not all(c["intersect"] for c in cells):
    raise SystemExit("a jaxrdp bracket misses pld-accounting's interval")
  timed_t = np.array([c["t"] for c in cells], np.float64)
  cost = np.array([c["pld_accounting_s"] for c in cells])
  # The floor: a timed t's cells cost its timed cell's time, a larger t the largest time.
  per_t = dict(zip(timed_t.astype(int), cost))
  floor_s = float(sum(per_t.get(int(tv), cost.max()) for tv in t))
  if cost.size > 1:
    slope, icpt = np.polyfit(np.log(timed_t), np.log(cost), 1)
    fit = {int(tv): per_t.get(int(tv), float(np.exp(icpt) * tv**slope)) for tv in ts}
    fit_s = float(sum(fit[int(tv)] for tv in t))
  else:  # one timed t: no fit, the floor
    slope, fit_s = float("nan"), floor_s
  results["ratio"] = dict(
    pld_accounting_timed_s=float(cost.sum()),
    pld_accounting_grid_s_floor=floor_s,
    pld_accounting_grid_s_fit=fit_s,
    pld_accounting_time_exponent_in_t=float(slope),
    time_grows_with_t=bool(np.all(np.diff(cost) > 0)),
    jaxrdp_grid_s=timing["run_s"],
    ratio=floor_s / timing["run_s"],
    ratio_fit=fit_s / timing["run_s"],
    jaxrdp_bracket_narrower_on_every_cell=all(
      c["jaxrdp_bracket"] < c["pld_accounting_bracket"] for c in cells
    ),
    every_t_timed=bool(np.all(np.isin(ts, timed_t))),
    note="pld-accounting timed on one cell per t up to max_t (a random sigma each), each "
    "grid cell charged its t's time; an untimed larger t is charged the largest timed "
    "cost (the floor) or a power-law fit in t; jaxrdp ran the whole grid in one call",
  )
  print("ratio:", results["ratio"], flush=True)
  results = stamp(results, __file__)
  Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
  r = results["ratio"]
  if r["every_t_timed"]:
    print(f"wrote {args.json}; throughput ratio vs pld-accounting: {r['ratio']:.0f}x")
  else:
    print(
      f"wrote {args.json}; throughput ratio vs pld-accounting: at least {r['ratio']:.0f}x "
      f"(power-law estimate {r['ratio_fit']:.0f}x)"
    )


if __name__ == "__main__":
  main()
