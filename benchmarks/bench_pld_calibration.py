"""Benchmark: 400 tight (PLD) noise calibrations in one jaxrdp call vs one dp_accounting one.

Grid: 20 sampling rates q in geomspace(1e-3, 1e-1) x 20 epsilon targets in
linspace(0.5, 10), T = 10,000 steps, delta = 1e-5 (the grid of
``bench_calibration.py``). jaxrdp solves all 400 cells in one call of
``jaxrdp.calibrate_noise(..., accountant="pld")`` (a host search, one vectorized
``pld_epsilon`` call per round over the cells still searching);
dp_accounting's ``calibrate_dp_mechanism`` with its PLD accountant at its
default settings (``PLDAccountant()``: add/remove, value discretization
interval 1e-4; the event ``SelfComposedDpEvent(PoissonSampledDpEvent(q,
GaussianDpEvent(sigma)), T)``, its default tolerance 1e-6 in sigma) solves one
sampled cell (q nearest 0.01, target nearest 2.0), in the same process.

Correctness first, before anything is timed:
  * every cell is feasible, and every calibrated sigma meets its budget when
    epsilon is recomputed with ``jaxrdp.pld.pld_epsilon`` (no margin), while
    sigma (1 - 1e-5) does not (the calibration's documented bracket);
  * on the sampled cell, dp_accounting's sigma and jaxrdp's agree: jaxrdp's is
    never larger by more than dp_accounting's tolerance (1e-6; dp_accounting's
    PLD is pessimistic, so its sigma is the larger), dp_accounting's sigma meets
    the budget under pld_epsilon, and the two differ by less than
    dp_accounting's own accounting error moves sigma: the gap in epsilon
    between dp_accounting's and jaxrdp's accountants at jaxrdp's sigma, over
    the slope d epsilon / d sigma (``SIGMA_AGREEMENT`` x that, plus the 1e-6
    tolerance).

Also required: ``--alone`` sampled cells recomputed one per call are within
their targets (a configuration's tight epsilon does not depend on the batch it
is computed in).

Timings: the first jaxrdp call (compilation included; the seconds JAX spent
tracing, lowering and compiling are reported separately, from its compile
duration events), then the median of ``--repeats`` calls; dp_accounting's
calibration of the sampled cell, median of ``--dp-repeats`` calls. Reported:
the ratio (dp_accounting time x cells) / jaxrdp time, with and without
compilation.

Run: PYTHONPATH=. python benchmarks/bench_pld_calibration.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
import warnings

import numpy as np
from _dp_accounting import pld_epsilon as dp_accounting_epsilon
from _provenance import stamp

# A first call here measures compilation: jaxrdp's stored programs stay off (an empty
# JAXRDP_CACHE_DIR), unless the caller sets the variable.
os.environ.setdefault("JAXRDP_CACHE_DIR", "")

T = 10_000
DELTA = 1e-5
DP_TOL = 1e-6  # calibrate_dp_mechanism's default tolerance for a continuous parameter
SIGMA_AGREEMENT = 2.0  # allowed sigma gap, in units of dp_accounting's accounting error


def dp_accounting_calibration(q: float, target: float) -> float:
  import dp_accounting
  from dp_accounting import dp_event
  from dp_accounting.pld import pld_privacy_accountant

  def make_event(sigma):
    return dp_event.SelfComposedDpEvent(
      dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), T
    )

  return float(
    dp_accounting.calibrate_dp_mechanism(
      pld_privacy_accountant.PLDAccountant, make_event, target, DELTA
    )
  )


def require(condition, message):
  """A correctness check that stops the script (not an ``assert``: it survives ``python -O``)."""
  if not condition:
    raise SystemExit(f"FAILED: {message}")


def timed(fn, repeats):
  times, out = [], None
  for _ in range(repeats):
    start = time.perf_counter()
    out = fn()
    times.append(time.perf_counter() - start)
  return out, statistics.median(times), times


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="a 3 x 3 grid instead of 20 x 20")
  parser.add_argument("--repeats", type=int, default=1, help="timed jaxrdp calls after the first")
  parser.add_argument("--dp-repeats", type=int, default=3, help="timed dp_accounting calls")
  parser.add_argument(
    "--alone", type=int, default=20, help="cells recomputed one per call (checked)"
  )
  parser.add_argument("--json", help="also write the results to this JSON file")
  args = parser.parse_args(argv)

  import jax

  import jaxrdp
  from jaxrdp.calibration import _with_accountant
  from jaxrdp.pld import pld_epsilon

  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  from bench_accelerator import CompileClock

  n = 3 if args.quick else 20
  q = np.geomspace(1e-3, 1e-1, n)[:, None]
  targets = np.linspace(0.5, 10.0, n)[None, :]
  qq, tt = np.broadcast_arrays(q, targets)
  i = int(np.argmin(np.abs(np.log(q[:, 0] / 0.01))))
  j = int(np.argmin(np.abs(targets[0] - 2.0)))
  cell_q, cell_t = float(q[i, 0]), float(targets[0, j])
  load_start = os.getloadavg()
  print(
    f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs, "
    f"load average {load_start[0]:.1f}; {qq.size} cells, T = {T}, delta = {DELTA}"
  )

  # The search's rounds: one tight evaluation over the cells still searching each.
  rounds = []
  evaluate = _with_accountant._evaluate

  def counted(kind, accountant, budget, param, fixed, target_given, scheme=None):
    rounds.append(int(np.size(param)))
    return evaluate(kind, accountant, budget, param, fixed, target_given, scheme)

  def calibrate():
    rounds.clear()
    res = jaxrdp.calibrate_noise(targets, DELTA, q, T, accountant="pld")
    return jax.block_until_ready(res)

  _with_accountant._evaluate = counted
  try:
    with warnings.catch_warnings(record=True) as caught, CompileClock() as clock:
      warnings.simplefilter("always")
      start = time.perf_counter()
      res = calibrate()
      first = time.perf_counter() - start
      compile_s, compilations = clock.mark()
      first_rounds = list(rounds)

      # Correctness before timing.
      sigma = np.asarray(res.sigma)
      require(np.all(np.asarray(res.feasible)), "every cell of this grid is feasible")
      eps = np.asarray(pld_epsilon(qq, sigma, T, DELTA).epsilon)
      eps_less = np.asarray(pld_epsilon(qq, sigma * (1 - 1e-5), T, DELTA).epsilon)
      met, tight = eps <= tt, eps_less > tt
      print(
        f"checked: {int(met.sum())}/{met.size} budgets met when recomputed with pld_epsilon, "
        f"{int(tight.sum())}/{tight.size} violated at sigma (1 - 1e-5) (max rel. slack "
        f"{np.max((tt - eps) / tt):.1e}; recomputed vs returned epsilon: max rel. diff "
        f"{np.max(np.abs(eps - np.asarray(res.epsilon)) / eps):.1e})"
      )
      require(np.all(met), f"budget violated: {np.argwhere(~met).tolist()}")
      require(np.all(tight), f"not tight to 1e-5: {np.argwhere(~tight).tolist()}")
      # The same sigmas recomputed one cell per call: a configuration's tight
      # epsilon does not depend on the batch it comes in (plans in blocks of a
      # fixed shape, one program call per job), so none may exceed its target.
      sample = np.random.default_rng(0).choice(qq.size, min(args.alone, qq.size), replace=False)
      alone = np.array(
        [float(pld_epsilon(qq.flat[c], sigma.flat[c], T, DELTA).epsilon) for c in sample]
      )
      excess = alone / tt.flat[sample] - 1
      print(
        f"recomputed alone: {int(np.sum(excess > 0))} of {sample.size} sampled cells above their "
        f"target (largest excess {np.max(excess):+.1e} relative)"
      )
      require(np.all(excess <= 0), f"a cell recomputed alone exceeds its target: {excess.max()}")

      ours = float(sigma[i, j])
      ref = dp_accounting_calibration(cell_q, cell_t)
      eps_dp_at_ours = dp_accounting_epsilon(cell_q, ours, T, DELTA)
      eps_ours_at_ref = float(pld_epsilon(cell_q, ref, T, DELTA).epsilon)
      # dp_accounting's accounting error, as an error in sigma: its epsilon above
      # the tight one at jaxrdp's sigma, over the slope of epsilon in sigma.
      h = 1e-4 * ours
      up, down = (float(pld_epsilon(cell_q, x, T, DELTA).epsilon) for x in (ours + h, ours - h))
      slope = (up - down) / (2 * h)
      sigma_err = max(eps_dp_at_ours - float(eps[i, j]), 0.0) / -slope
      allowed = SIGMA_AGREEMENT * sigma_err + DP_TOL
      print(
        f"  q = {cell_q:.6g}, target {cell_t:g}: jaxrdp sigma = {ours:.8f}, dp_accounting sigma = "
        f"{ref:.8f} ({(ours / ref - 1):+.2e} rel.); dp_accounting epsilon at jaxrdp's sigma "
        f"{eps_dp_at_ours:.7f} ({eps_dp_at_ours / cell_t - 1:+.1e} rel. of the target), "
        f"pld_epsilon at dp_accounting's {eps_ours_at_ref:.7f}; sigma gap {ref - ours:.2e}, allowed "
        f"{allowed:.2e} ({SIGMA_AGREEMENT:g} x {sigma_err:.2e}, dp_accounting's epsilon error over "
        f"d eps / d sigma = {slope:.4g}, + {DP_TOL:g})"
      )
      require(ours <= ref + DP_TOL, "jaxrdp should never need more noise than dp_accounting")
      require(eps_ours_at_ref <= cell_t, "dp_accounting's sigma should meet the tight budget")
      require(ref - ours <= allowed, "the sigmas disagree by more than dp_accounting's error")

      # Timing.
      before, _ = clock.mark()
      _, jax_median, jax_times = timed(calibrate, args.repeats)
      steady_rounds = list(rounds)
      compile_later = clock.mark()[0] - before
      _, dpa_median, dpa_times = timed(
        lambda: dp_accounting_calibration(cell_q, cell_t), args.dp_repeats
      )
  finally:
    _with_accountant._evaluate = evaluate
  load_end = os.getloadavg()
  cells = qq.size
  ratio = dpa_median * cells / jax_median
  ratio_first = dpa_median * cells / first
  print()
  print(f"jaxrdp.calibrate_noise(accountant='pld'), {cells} cells in one call")
  print(
    f"  first call (compile + run):  {first:8.2f} s (JAX compile time in it: {compile_s:.2f} s)"
  )
  print(
    f"  median of {args.repeats} later calls:    {jax_median:8.2f} s  {[f'{t:.2f}' for t in jax_times]}"
    f" (JAX compile time in them: {compile_later:.2f} s)"
  )
  print(
    f"  search: {len(steady_rounds)} rounds, {sum(steady_rounds)} cell evaluations "
    f"({sum(steady_rounds) / cells:.1f} per cell)"
  )
  print(f"dp_accounting.calibrate_dp_mechanism (PLD), 1 cell (q = {cell_q:.6g}, eps = {cell_t:g})")
  print(
    f"  median of {args.dp_repeats} calls:        {dpa_median:8.2f} s  {[f'{t:.2f}' for t in dpa_times]}"
  )
  print(
    f"ratio (dp_accounting 1 cell x {cells} / jaxrdp {cells} cells): {ratio:.2f} "
    f"({ratio_first:.2f} counting jaxrdp's first call, compilation included)"
  )
  print(
    f"per cell: jaxrdp {jax_median / cells * 1e3:.1f} ms, dp_accounting {dpa_median * 1e3:.1f} ms"
  )
  print(f"load average (1 min) {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end")
  found = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
  for w in found:
    print(f"warning: {w}")
  if args.json:
    report = {
      "date": datetime.date.today().isoformat(),
      "machine": f"{platform.machine()}, {os.cpu_count()} cores",
      "device": str(jax.devices()[0]),
      "jax": jax.__version__,
      "load_average": {"start": list(load_start), "end": list(load_end)},
      "grid": {
        "q": q[:, 0].tolist(),
        "target_epsilon": targets[0].tolist(),
        "steps": T,
        "delta": DELTA,
      },
      "checks": {
        "budgets_met": int(met.sum()),
        "violated_at_sigma_times_1_minus_1e-5": int(tight.sum()),
        "max_rel_slack": float(np.max((tt - eps) / tt)),
        "recomputed_alone": {
          "cells": int(sample.size),
          "above_target": int(np.sum(excess > 0)),
          "max_rel_excess": float(np.max(excess)),
        },
      },
      "sampled_cell": {
        "q": cell_q,
        "target_epsilon": cell_t,
        "jaxrdp_sigma": ours,
        "dp_accounting_sigma": ref,
        "dp_accounting_epsilon_at_jaxrdp_sigma": eps_dp_at_ours,
        "pld_epsilon_at_dp_accounting_sigma": eps_ours_at_ref,
        "slope_depsilon_dsigma": slope,
        "dp_accounting_error_as_sigma": sigma_err,
        "allowed_sigma_gap": allowed,
      },
      "jaxrdp": {
        "cells": cells,
        "first_call_s": first,
        "compile_s": compile_s,
        "xla_compilations": compilations,
        "compile_s_in_later_calls": compile_later,
        "median_s": jax_median,
        "times_s": jax_times,
        "search_rounds_first_call": len(first_rounds),
        "search_rounds": len(steady_rounds),
        "cell_evaluations": sum(steady_rounds),
      },
      "dp_accounting": {"median_s": dpa_median, "times_s": dpa_times},
      "ratio": ratio,
      "ratio_with_first_call": ratio_first,
      "sigma": sigma.tolist(),
      "warnings": found,
    }
    with open(args.json, "w") as f:
      json.dump(stamp(report, __file__), f, indent=2)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
