"""Validation: the tight epsilon on random held-out configurations against converged references.

The claim checked (docs/guide/guarantees.md): at the default settings,
on every configuration with q in [1e-4, 1], sigma in [0.3, 50], T in [1, 1e5]
and delta in [1e-12, 1e-3], ``jaxrdp.pld.pld_epsilon`` is never below the true
epsilon and within 1e-5 relative of it.

Configurations: ``--n`` draws, log-uniform in each of q, sigma, T (rounded to
a whole number) and delta, from a fixed seed that no tuning has used. Per
configuration:

* the default answer (``rtol = 1e-5``), all configurations in one call;
* the reference: the same accountant at ``rtol = 1e-6`` and ``1e-7`` (finer
  grids). Both are certified upper bounds of the truth, so the smaller one is
  the closer; the certified lower bounds of all three runs bound the truth from
  below.

Reported per configuration: the default epsilon's excess over the reference,
relative, and whether it is above the best certified lower bound (it must be:
an upper bound below a certified lower bound would be a soundness failure).
The check passes when every excess is at most 1e-5 and every answer is above
the lower bounds. The reference itself is only as converged as the finer
grids; where the two finer answers differ by more than 1e-6 relative, the
configuration is flagged ``unconverged`` (its excess is then uncertain by that
much).

Run: PYTHONPATH=. python benchmarks/validate_pld.py [--n 40] [--seed 2026] [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
import warnings

import numpy as np
from _provenance import stamp

TOLERANCE = 1e-5
CONVERGED = 1e-6


def draw(n, seed):
  rng = np.random.default_rng(seed)

  def log_uniform(lo, hi):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))

  q = log_uniform(1e-4, 1.0)
  sigma = log_uniform(0.3, 50.0)
  steps = np.round(log_uniform(1.0, 1e5))
  delta = log_uniform(1e-12, 1e-3)
  return q, sigma, steps, delta


def add_draw_arguments(parser):
  """``--n``, ``--seed`` (the held-out draw) and ``--json``, shared by the validation scripts."""
  parser.add_argument("--n", type=int, default=40, help="configurations drawn")
  parser.add_argument("--seed", type=int, default=2026, help="seed of the draw (held out)")
  parser.add_argument("--json", help="also write the results to this JSON file")


def write_results(path, seed, fields):
  """Writes ``fields`` to the JSON file ``path``, after the date, machine and versions."""
  import jaxrdp

  out = {
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
    "python": sys.version.split()[0],
    "jaxrdp": jaxrdp.__version__,
    "seed": seed,
    **fields,
  }
  with open(path, "w") as f:
    json.dump(stamp(out, sys.argv[0]), f, indent=1)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  add_draw_arguments(p)
  args = p.parse_args(argv)

  from jaxrdp.pld import pld_epsilon

  q, sigma, steps, delta = draw(args.n, args.seed)
  runs = {}
  for rtol in (1e-5, 1e-6, 1e-7):
    start = time.perf_counter()
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)  # reported below, per configuration
      r = pld_epsilon(q, sigma, steps, delta, rtol=rtol)
    runs[rtol] = (np.asarray(r.epsilon), np.asarray(r.epsilon_lower), time.perf_counter() - start)
    print(f"rtol {rtol:g}: {runs[rtol][2]:.1f} s for {args.n} configurations", flush=True)
  up, low = runs[1e-5][0], runs[1e-5][1]
  ref = np.minimum(runs[1e-6][0], runs[1e-7][0])
  lower = np.maximum.reduce([runs[r][1] for r in runs])
  spread = np.abs(runs[1e-6][0] - runs[1e-7][0]) / np.maximum(ref, 1e-300)
  rows = []
  for i in range(args.n):
    positive = ref[i] > 0
    excess = float((up[i] - ref[i]) / ref[i]) if positive else float(up[i])
    rows.append(
      {
        "q": float(q[i]),
        "sigma": float(sigma[i]),
        "steps": int(steps[i]),
        "delta": float(delta[i]),
        "epsilon": float(up[i]),
        "epsilon_lower": float(low[i]),
        "reference": float(ref[i]),
        "best_lower": float(lower[i]),
        "excess": excess,
        "sound": bool(up[i] >= lower[i]),
        "within": bool(excess <= TOLERANCE),
        "spread": float(spread[i]),
        "converged": bool(spread[i] <= CONVERGED),
      }
    )
  print()
  print("| q | sigma | T | delta | epsilon | reference | excess | converged |")
  print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
  for r in sorted(rows, key=lambda r: -r["excess"]):
    print(
      f"| {r['q']:.3g} | {r['sigma']:.3g} | {r['steps']} | {r['delta']:.2g} | "
      f"{r['epsilon']:.7g} | {r['reference']:.7g} | {r['excess']:.1e} | "
      f"{'yes' if r['converged'] else 'no'} |"
    )
  sound = all(r["sound"] for r in rows)
  within = all(r["within"] for r in rows)
  worst = max(r["excess"] for r in rows)
  print()
  print(f"never below a certified lower bound: {sound}")
  print(f"within {TOLERANCE:g} of the reference: {within} (largest excess {worst:.2e})")
  print(f"references converged to {CONVERGED:g}: {sum(r['converged'] for r in rows)} of {args.n}")
  if args.json:
    seconds = {str(k): v[2] for k, v in runs.items()}
    write_results(
      args.json,
      args.seed,
      dict(seconds=seconds, sound=sound, within=within, largest_excess=worst, rows=rows),
    )
  return 0 if sound and within else 1


if __name__ == "__main__":
  sys.exit(main())
