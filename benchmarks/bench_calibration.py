"""Benchmark: 400 noise calibrations in one jaxrdp call vs one dp_accounting calibration.

Grid: 20 sampling rates q in geomspace(1e-3, 1e-1) x 20 epsilon targets in
linspace(0.5, 10), T = 10,000 steps, delta = 1e-5. jaxrdp solves all 400 cells in
one jitted call of ``calibrate_noise``; dp_accounting's
``calibrate_dp_mechanism`` (RdpAccountant, its default orders) solves one cell.

The script checks correctness before it times anything:
  * every jaxrdp sigma meets its budget when epsilon is recomputed, and
    sigma (1 - 1e-6) does not;
  * on a few cells, jaxrdp's sigma is at most dp_accounting's (jaxrdp's RDP is exact
    and dp_accounting's fractional-order RDP is an upper bound, over a subset of
    jaxrdp's default orders), and within a few percent of it.
Timings: compilation is reported separately; then the median of --repeats runs,
each synchronized with ``block_until_ready``; dp_accounting is timed in the same
run on the middle cell (q = 0.01, target 2.0).

Run: PYTHONPATH=. python benchmarks/bench_calibration.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import numpy as np

import jaxrdp

T = 10_000
DELTA = 1e-5


def dp_accounting_sigma(q: float, target: float) -> float:
  import dp_accounting
  from dp_accounting import dp_event, rdp

  def make_event(sigma):
    return dp_event.SelfComposedDpEvent(
      dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), T
    )

  return float(dp_accounting.calibrate_dp_mechanism(rdp.RdpAccountant, make_event, target, DELTA))


def timed(fn, repeats):
  times = []
  out = None
  for _ in range(repeats):
    start = time.perf_counter()
    out = fn()
    times.append(time.perf_counter() - start)
  return out, statistics.median(times), times


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--quick", action="store_true", help="a 5 x 5 grid instead of 20 x 20")
  args = parser.parse_args()
  n = 5 if args.quick else 20
  q = np.geomspace(1e-3, 1e-1, n)[:, None]
  targets = np.linspace(0.5, 10.0, n)[None, :]

  def calibrate():
    return jax.block_until_ready(jaxrdp.calibrate_noise(targets, DELTA, q, T))

  print(
    f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs, "
    f"load average {os.getloadavg()[0]:.1f}"
  )

  # Compile (and run) once.
  start = time.perf_counter()
  res = calibrate()
  first = time.perf_counter() - start

  # Correctness before timing.
  sigma = np.asarray(res.sigma)
  qq, tt = np.broadcast_arrays(q, targets)
  assert np.all(np.asarray(res.feasible)), "every cell of this grid is feasible"
  eps = np.asarray(jaxrdp.dpsgd_epsilon(qq, sigma, T, DELTA).epsilon)
  eps_less = np.asarray(jaxrdp.dpsgd_epsilon(qq, sigma * (1 - 1e-6), T, DELTA).epsilon)
  assert np.all(eps <= tt), "budget violated"
  assert np.all(eps_less > tt), "not tight to 1e-6"
  print(
    f"checked: {sigma.size} budgets met, all tight to 1e-6 (max rel. slack "
    f"{np.max((tt - eps) / tt):.1e})"
  )
  for i, j in ((0, 0), (n // 2, n // 2), (n - 1, n - 1)):
    ref = dp_accounting_sigma(float(q[i, 0]), float(targets[0, j]))
    ours = sigma[i, j]
    print(
      f"  q = {q[i, 0]:.4g}, eps = {targets[0, j]:.3g}: jaxrdp sigma = {ours:.6f}, "
      f"dp_accounting sigma = {ref:.6f} ({(ours / ref - 1) * 100:+.2f}%)"
    )
    assert ours <= ref * (1 + 1e-6), "jaxrdp should never need more noise than dp_accounting"

  _, jax_median, jax_times = timed(calibrate, args.repeats)
  mid_q, mid_t = 0.01, 2.0
  _, dpa_median, dpa_times = timed(lambda: dp_accounting_sigma(mid_q, mid_t), args.repeats)

  # One jitted accountant evaluation of the whole grid, for scale (no search).
  one = jax.jit(jaxrdp.dpsgd_epsilon)

  def one_pass():
    with jax.enable_x64(True):
      return jax.block_until_ready(one(qq, sigma, float(T), DELTA))

  one_pass()
  _, pass_median, _ = timed(one_pass, args.repeats)

  n_orders = len(jaxrdp.DEFAULT_ORDERS)
  print()
  print(f"jaxrdp.calibrate_noise, {sigma.size} cells in one call")
  print(f"  first call (compile + run): {first:8.2f} s")
  print(
    f"  median of {args.repeats} runs:         {jax_median:8.2f} s   {[f'{t:.2f}' for t in jax_times]}"
  )
  print(
    f"  one epsilon pass over the grid: {pass_median:.2f} s "
    f"({pass_median / (sigma.size * n_orders) * 1e6:.0f} us per (cell, order), "
    f"{n_orders} orders)"
  )
  print(f"dp_accounting.calibrate_dp_mechanism, 1 cell (q = {mid_q}, eps = {mid_t})")
  print(
    f"  median of {args.repeats} runs:         {dpa_median:8.2f} s   {[f'{t:.2f}' for t in dpa_times]}"
  )
  print(f"ratio (jaxrdp {sigma.size} cells / dp_accounting 1 cell): {jax_median / dpa_median:.2f}")
  print(
    f"per cell: jaxrdp {jax_median / sigma.size * 1e3:.1f} ms, dp_accounting "
    f"{dpa_median * 1e3:.1f} ms"
  )


if __name__ == "__main__":
  main()
