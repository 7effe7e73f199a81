"""Generate the SGM reference tables from the mpmath quadrature oracle.

Writes three JSON files next to this script, under ``data/``:

* ``sgm_reference.json``: ~400 points, seed 20261122, random log-uniform points plus
  deliberately chosen corners (see ``_corners``).
* ``sgm_heldout.json``: ~200 points from the same generator with seed 77031 (a
  held-out set: do not tune kernels against it).
* ``sgm_small_sigma.json``: 40 points with sigma in [0.1, 0.25] and orders 6 to 30
  (seed 20261123, ``make_small_sigma_points``), the corner where a coarser window
  placement went wrong without the other two files noticing.

Each point stores q, sigma, alpha (floats, exactly as used) and log_a, log_a_minus_1
as decimal strings with 30 significant digits, computed by
``oracle.quad_diagnostics`` at 60 digits (two quadrature passes that agree to
1e-45). For integer alpha the exact binomial sum is also computed, and the point is
rejected (the script fails) unless both agree to 1e-40 relative.

Usage (from the repository root; takes several minutes):

    PYTHONPATH=tests python tests/make_reference.py [--procs 2] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mpmath  # noqa: E402
import oracle  # noqa: E402

DPS = 60
DIGITS = 30
BINOMIAL_TOL = 1e-40
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
REFERENCE_SEED = 20261122
HELDOUT_SEED = 77031
SMALL_SIGMA_SEED = 20261123


def _loguniform(rng, lo, hi):
  return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _fractional(rng, lo, hi):
  """A non-integer alpha in (lo, hi), log-uniform in alpha - 1 for lo = 1."""
  while True:
    if lo == 1.0:
      a = 1.0 + _loguniform(rng, 1e-6, hi - 1.0)
    else:
      a = _loguniform(rng, lo, hi)
    a = float(f"{a:.10g}")
    if lo < a < hi and a != round(a):
      return a


def _random_alpha(rng):
  """About half integer orders, half fractional ones spread over four ranges."""
  if rng.uniform() < 0.5:
    return float(int(round(_loguniform(rng, 2.0, 1e4))))
  bucket = rng.integers(4)
  lo, hi = [(1.0, 1.01), (1.01, 2.0), (2.0, 20.0), (20.0, 1e4)][bucket]
  return _fractional(rng, lo, hi)


def _random_points(rng, n):
  pts = []
  for _ in range(n):
    q = float(f"{_loguniform(rng, 1e-8, 1.0):.10g}")
    sigma = float(f"{_loguniform(rng, 0.1, 1e3):.10g}")
    pts.append({"q": q, "sigma": sigma, "alpha": _random_alpha(rng), "tag": "random"})
  return pts


def _corners(rng, scale):
  """Deliberate corners; ``scale`` multiplies the number drawn from each box."""
  pts = []

  def add(q, sigma, alpha, tag):
    pts.append({"q": float(q), "sigma": float(sigma), "alpha": float(alpha), "tag": tag})

  # (a) slow-tail corner: the fractional series converges slowly (dp_accounting
  # returns inf here).
  for _ in range(int(24 * scale)):
    add(
      f"{_loguniform(rng, 0.01, 0.5):.6g}",
      f"{rng.uniform(0.3, 1.2):.6g}",
      f"{rng.uniform(1.05, 1.6):.6g}",
      "slow_tail",
    )
  # (b) tiny-RDP corner: small q, large sigma (Opacus goes negative here).
  for _ in range(int(24 * scale)):
    alpha = _random_alpha(rng) if rng.uniform() < 0.7 else 1.0 + 10.0 ** rng.uniform(-6, -2)
    add(
      f"{_loguniform(rng, 1e-8, 1e-5):.6g}",
      f"{_loguniform(rng, 10.0, 1e3):.6g}",
      f"{alpha:.10g}",
      "tiny_rdp",
    )
  # (c) sigma = 0.1 with alpha up to 1e4 (sharp bumps far from 0).
  for alpha in [2.0, 7.5, 32.0, 256.0, 1000.0, 1234.5, 1e4, 9999.5]:
    add(f"{_loguniform(rng, 1e-8, 1.0):.6g}", 0.1, alpha, "small_sigma")
  for _ in range(int(6 * scale)):
    add(
      f"{_loguniform(rng, 1e-8, 1.0):.6g}",
      f"{rng.uniform(0.1, 0.2):.6g}",
      _random_alpha(rng),
      "small_sigma",
    )
  # (d) q close to 1.
  for q in [0.9, 0.999, 1.0]:
    for _ in range(max(1, int(5 * scale))):
      add(q, f"{_loguniform(rng, 0.1, 1e3):.6g}", _random_alpha(rng), "q_near_1")
  # (e) alpha very close to 1.
  for am1 in [1e-6, 1e-3]:
    for _ in range(max(1, int(6 * scale))):
      add(
        f"{_loguniform(rng, 1e-8, 1.0):.6g}",
        f"{_loguniform(rng, 0.1, 1e3):.6g}",
        1.0 + am1,
        "alpha_near_1",
      )
  return pts


def make_points(seed, n_random, corner_scale):
  rng = np.random.default_rng(seed)
  return _corners(rng, corner_scale) + _random_points(rng, n_random)


def make_small_sigma_points(seed, n):
  """sigma in [0.1, 0.25] with orders 6 to 30 (every other one an integer), q
  log-uniform in [1e-8, 0.999]: narrow bumps at moderate orders. A 32-point grid
  for the quadrature's window placement (instead of 48) was off by up to 2.2e-10
  relative here (2026-11-23), and the random points of the other two files did not
  show it."""
  rng = np.random.default_rng(seed)
  pts = []
  for i in range(n):
    q = float(f"{_loguniform(rng, 1e-8, 0.999):.10g}")
    sigma = float(f"{_loguniform(rng, 0.1, 0.25):.10g}")
    alpha = float(rng.integers(6, 31)) if i % 2 else _fractional(rng, 6.0, 30.0)
    pts.append({"q": q, "sigma": sigma, "alpha": alpha, "tag": "small_sigma_mid_order"})
  return pts


def _fmt(x):
  if x == mpmath.mpf("-inf"):
    return "-inf"
  return mpmath.nstr(x, DIGITS)


def compute(point):
  q, sigma, alpha = point["q"], point["sigma"], point["alpha"]
  t0 = time.perf_counter()
  diag = oracle.quad_diagnostics(q, sigma, alpha, DPS)
  lm1 = oracle.log_a_minus_1_quad(q, sigma, alpha, DPS)  # closed form at q = 1
  la = oracle.log_a_quad(q, sigma, alpha, DPS)
  rec = dict(point)
  rec["log_a"] = _fmt(la)
  rec["log_a_minus_1"] = _fmt(lm1)
  with mpmath.workdps(DPS):
    rec["rel_ab"] = float(f"{diag['rel_ab']:.2e}")
    rel_q1 = abs(diag["log_a_minus_1"] - lm1) / abs(lm1) if q == 1.0 else None
  if rel_q1 is not None and not rel_q1 < BINOMIAL_TOL:
    raise oracle.OracleError(f"q = 1 closed form disagrees with quadrature ({rel_q1}) at {point}")
  if alpha == round(alpha):
    # The binomial sum at 20 more digits, so the difference measures the quadrature.
    b = oracle.log_a_minus_1_binomial(q, sigma, int(alpha), DPS + 20)
    with mpmath.workdps(DPS + 20):
      rel_b = float(abs(b - lm1) / abs(lm1))
    if not rel_b < BINOMIAL_TOL:
      raise oracle.OracleError(f"binomial sum disagrees with quadrature ({rel_b:.3g}) at {point}")
    rec["rel_binomial"] = float(f"{rel_b:.2e}")
  rec["seconds"] = round(time.perf_counter() - t0, 2)
  return rec


def _write(path, seed, records, elapsed):
  doc = {
    "description": (
      "log A_alpha and log(A_alpha - 1) of the Sampled Gaussian Mechanism "
      "(add/remove, Poisson rate q, noise multiplier sigma) from a 60-digit "
      "tanh-sinh quadrature (tests/oracle.py); integer orders cross-checked "
      "against the exact binomial sum. Generated by tests/make_reference.py."
    ),
    "seed": seed,
    "dps": DPS,
    "generation_seconds": round(elapsed, 1),
    "fields": {
      "log_a": "log A_alpha, decimal string, 30 significant digits",
      "log_a_minus_1": "log(A_alpha - 1), decimal string, 30 significant digits",
      "rel_ab": "relative disagreement of the two quadrature passes",
      "rel_binomial": "relative difference to the binomial sum (integer alpha only)",
      "tag": "random or the corner the point was chosen for",
    },
    "points": [
      {
        k: r[k]
        for k in ("q", "sigma", "alpha", "log_a", "log_a_minus_1", "tag", "rel_ab")
        if k in r
      }
      | ({"rel_binomial": r["rel_binomial"]} if "rel_binomial" in r else {})
      for r in records
    ],
  }
  with open(path, "w") as fh:
    json.dump(doc, fh, indent=0, separators=(",", ":"))
    fh.write("\n")


def run(name, seed, points, procs, limit):
  if limit:
    points = points[:: max(1, len(points) // limit)][:limit]
  t0 = time.perf_counter()
  with multiprocessing.get_context("spawn").Pool(procs) as pool:
    records = []
    for i, rec in enumerate(pool.imap(compute, points, chunksize=1)):
      records.append(rec)
      if (i + 1) % 25 == 0 or rec["seconds"] > 30:
        print(
          f"{name}: {i + 1}/{len(points)} done, {time.perf_counter() - t0:.0f}s "
          f"(last {rec['seconds']}s at q={rec['q']}, sigma={rec['sigma']}, alpha={rec['alpha']})",
          flush=True,
        )
  elapsed = time.perf_counter() - t0
  slowest = max(records, key=lambda r: r["seconds"])
  print(
    f"{name}: {len(records)} points in {elapsed:.0f}s; slowest {slowest['seconds']}s at "
    f"q={slowest['q']}, sigma={slowest['sigma']}, alpha={slowest['alpha']}; "
    f"max rel_ab {max(r['rel_ab'] for r in records):.2e}; "
    f"max rel_binomial {max(r.get('rel_binomial', 0.0) for r in records):.2e}",
    flush=True,
  )
  if not limit:
    os.makedirs(DATA_DIR, exist_ok=True)
    _write(os.path.join(DATA_DIR, name), seed, records, elapsed)
  return records


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--procs", type=int, default=2, help="worker processes (at most 2)")
  ap.add_argument(
    "--limit", type=int, default=0, help="dry run on this many points, writes nothing"
  )
  ap.add_argument("--only", choices=["reference", "heldout", "small_sigma"], default=None)
  args = ap.parse_args()
  procs = max(1, min(args.procs, 2))
  if args.only in (None, "reference"):
    run(
      "sgm_reference.json", REFERENCE_SEED, make_points(REFERENCE_SEED, 300, 1.0), procs, args.limit
    )
  if args.only in (None, "heldout"):
    run("sgm_heldout.json", HELDOUT_SEED, make_points(HELDOUT_SEED, 150, 0.5), procs, args.limit)
  if args.only in (None, "small_sigma"):
    run(
      "sgm_small_sigma.json",
      SMALL_SIGMA_SEED,
      make_small_sigma_points(SMALL_SIGMA_SEED, 40),
      procs,
      args.limit,
    )


if __name__ == "__main__":
  main()
