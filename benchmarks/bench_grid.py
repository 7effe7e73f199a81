"""Epsilon on the standard DP-SGD grid: jaxrdp against dp_accounting, same process.

Grid: q in geomspace(1e-3, 1e-1, 20) x sigma in linspace(0.6, 3.0, 20), T = 10,000,
delta = 1e-5, over dp_accounting's 156 default orders. The script checks
correctness first (every jaxrdp epsilon finite and never above dp_accounting's),
then reports jaxrdp's compile time separately from the median of repeated calls.

    python benchmarks/bench_grid.py [--repeats 20] [--json FILE]
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

import numpy as np
from _provenance import stamp


def main(argv=None):
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument("--repeats", type=int, default=20)
  p.add_argument(
    "--grid", type=int, default=20, help="points per axis (default 20: 400 configurations)"
  )
  p.add_argument("--json", help="also write the results to this JSON file")
  args = p.parse_args(argv)

  import dp_accounting
  import jax
  from absl import logging as absl_logging

  import jaxrdp

  # dp_accounting logs a warning for every fractional order it gives up on.
  absl_logging.set_verbosity(absl_logging.ERROR)

  q = np.geomspace(1e-3, 1e-1, args.grid)
  sigma = np.linspace(0.6, 3.0, args.grid)
  steps, delta = 10_000, 1e-5
  orders = jaxrdp.DP_ACCOUNTING_ORDERS
  qq, ss = np.meshgrid(q, sigma, indexing="ij")

  # jaxrdp: one call for the whole grid. First call = trace + compile + run.
  def run():
    res = jaxrdp.dpsgd_epsilon(qq, ss, steps, delta, orders=orders)
    return jax.block_until_ready(res)

  t0 = time.perf_counter()
  res = run()
  first = time.perf_counter() - t0
  times = []
  for _ in range(args.repeats):
    t0 = time.perf_counter()
    run()
    times.append(time.perf_counter() - t0)
  ours = np.asarray(res.epsilon)
  median = statistics.median(times)

  # dp_accounting: its RdpAccountant, one configuration at a time (as users call it).
  theirs = np.empty_like(ours)
  t0 = time.perf_counter()
  for i in range(qq.shape[0]):
    for j in range(qq.shape[1]):
      acc = dp_accounting.rdp.RdpAccountant(orders=list(orders))
      acc.compose(
        dp_accounting.PoissonSampledDpEvent(
          float(qq[i, j]), dp_accounting.GaussianDpEvent(float(ss[i, j]))
        ),
        steps,
      )
      theirs[i, j] = acc.get_epsilon(delta)
  dpa = time.perf_counter() - t0

  finite = bool(np.all(np.isfinite(ours)))
  # dp_accounting rounds too (its integer-order sums are off by up to ~3e-12
  # relative here, verified against mpmath), so "above" means beyond 1e-10.
  never_above = bool(np.all(ours <= theirs * (1 + 1e-10)))
  rel_gap = (theirs - ours) / theirs
  report = {
    "date": datetime.date.today().isoformat(),
    "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.platform()}",
    "device": str(jax.devices()[0]),
    "configurations": int(ours.size),
    "orders": int(orders.size),
    "jaxrdp_first_call_s": first,
    "jaxrdp_median_s": median,
    "dp_accounting_s": dpa,
    "speedup": dpa / median,
    "speedup_including_compile": dpa / first,
    "all_finite": finite,
    "never_above_dp_accounting": never_above,
    "max_relative_tightening": float(rel_gap.max()),
    "median_relative_tightening": float(np.median(rel_gap)),
    "jax": jax.__version__,
    "dp_accounting": getattr(dp_accounting, "__version__", "?"),
  }
  print(f"grid: {ours.size} configurations x {orders.size} orders, T={steps}, delta={delta}")
  print(f"jaxrdp first call (trace + compile + run): {first:8.3f} s")
  print(f"jaxrdp median of {args.repeats} calls:          {median:8.4f} s")
  print(f"dp_accounting (same process):             {dpa:8.3f} s")
  print(f"speedup: {dpa / median:.0f}x  (including compilation: {dpa / first:.1f}x)")
  print(
    f"all finite: {finite}; never above dp_accounting: {never_above}; "
    f"tighter by up to {100 * rel_gap.max():.2f}% (median {100 * np.median(rel_gap):.3f}%)"
  )
  if args.json:
    with open(args.json, "w") as f:
      json.dump(stamp(report, __file__), f, indent=2)
  if not (finite and never_above):
    print("FAILED accuracy checks", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
