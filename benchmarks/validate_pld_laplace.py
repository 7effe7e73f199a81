"""Validation: the tight epsilon on the held-out draw against an exact Laplace-inversion reference.

The references of ``validate_pld_references.py`` (dp_accounting from above,
prv_accountant from below) bracket the truth only to about 5e-4, and at
delta near 1e-11 dp_accounting's own answers are not monotone in its
interval: its float64 FFT of the whole distribution has a noise floor there.
This script takes the truth from a method that has neither a grid nor that
floor: the Bromwich (Laplace) inversion of the composed privacy loss's
moment-generating function along a line through its saddle point
(``tests/laplace_oracle.py``, which shares no code with jaxrdp). It is computed
at two resolutions (``refine`` 1 and 2: twice the quadrature points and half
the inversion step); a configuration whose two answers differ by more than
``AGREE`` relative has no reference and is reported as such.

On the held-out draw (``validate_pld.draw``, seed 2026, used for no tuning):

* sound: jaxrdp's epsilon is at least the reference, less ``AGREE``;
* tight: it is at most the reference times ``1 + 1e-5``;
* reported: dp_accounting's answer at its default interval (1e-4) against
  the same reference, timed in the same run.

Each reference runs in a fresh process (``--workers``) with ``--timeout``
seconds; one that fails or runs over is reported as missing.

The references do not depend on jaxrdp (its epsilon only places the inversion
contour and the root's first bracket), and they take about 20 minutes on a
2-core machine. ``--reuse-references FILE`` takes them (the Laplace inversions
and dp_accounting's answers) from an earlier result file of this script, for
every configuration of the draw found there with the same q, sigma, steps and
delta, and computes only the rest; the result records the file and its date.

Run: PYTHONPATH=. python benchmarks/validate_pld_laplace.py [--n 40] [--json FILE]
     [--reuse-references benchmarks/results/validate_pld_laplace.json]
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from validate_pld import write_results  # noqa: E402 (after the path insert above)
from validate_pld_references import (  # noqa: E402
  DEFAULT_INTERVAL,
  _dp_accounting,
  _run_all,
  jaxrdp_on_draw,
  parse_arguments,
)

TOLERANCE = 1e-5
# Two resolutions of the reference must agree to this (relative).
AGREE = 1e-8


def _laplace(args):
  q, sigma, steps, delta, guess, refine = args
  sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
  import laplace_oracle

  start = time.perf_counter()
  value = laplace_oracle.epsilon(q, sigma, int(steps), delta, guess, refine=refine)
  return value, time.perf_counter() - start


def _earlier_references(path):
  """``({(q, sigma, steps, delta): row}, date)`` of an earlier result file of this script."""
  with open(path) as f:
    earlier = json.load(f)
  rows = {(r["q"], r["sigma"], r["steps"], r["delta"]): r for r in earlier["rows"]}
  return rows, earlier["date"]


def main(argv=None):
  args = parse_arguments(
    argv,
    __doc__.splitlines()[0],
    timeout=900.0,
    extra=[
      (
        ("--reuse-references",),
        dict(metavar="FILE", help="take the references from an earlier result file"),
      )
    ],
  )
  q, sigma, steps, delta, res = jaxrdp_on_draw(args)
  ours, lower = np.asarray(res.epsilon), np.asarray(res.epsilon_lower)
  earlier, earlier_date = (
    _earlier_references(args.reuse_references) if args.reuse_references else ({}, None)
  )

  tasks, refs = [], {}
  for i in range(args.n):
    cfg = (float(q[i]), float(sigma[i]), float(steps[i]), float(delta[i]))
    old = earlier.get((cfg[0], cfg[1], int(cfg[2]), cfg[3]))
    if old is not None:
      refs[("dp_default", i)] = None if old["dp_default"] is None else (old["dp_default"], None)
      for k, refine in enumerate((1, 2)):
        value = old["laplace"][k]
        refs[(f"laplace_{refine}", i)] = None if value is None else (value, old["laplace_s"][k])
      continue
    tasks.append(("dp_default", i, _dp_accounting, cfg + (DEFAULT_INTERVAL,)))
    # The guess only places the inversion contour and the root's first
    # bracket; the root itself is jaxrdp-independent.
    for refine in (1, 2):
      tasks.append((f"laplace_{refine}", i, _laplace, cfg + (float(ours[i]), refine)))
  if earlier:
    print(f"references of {args.n - len(tasks) // 3} configurations from {args.reuse_references}")
  refs.update(_run_all(tasks, args.workers, args.timeout, args.memory_gb))

  rows = []
  for i in range(args.n):
    e = float(ours[i])
    r1, r2 = refs.get(("laplace_1", i)), refs.get(("laplace_2", i))
    dp = refs.get(("dp_default", i))
    row = dict(q=float(q[i]), sigma=float(sigma[i]), steps=int(steps[i]), delta=float(delta[i]))
    row.update(epsilon=e, epsilon_lower=float(lower[i]), dp_default=dp and dp[0])
    row.update(laplace=[r and r[0] for r in (r1, r2)], laplace_s=[r and r[1] for r in (r1, r2)])
    if r1 and r2 and np.isfinite(r2[0]) and r2[0] > 0 and abs(r1[0] - r2[0]) <= AGREE * r2[0]:
      truth = r2[0]
      row["truth"] = truth
      row["vs_truth"] = (e - truth) / truth
      row["sound"] = bool(e >= truth * (1 - AGREE))
      row["tight"] = bool(row["vs_truth"] <= TOLERANCE)
      row["lower_sound"] = bool(row["epsilon_lower"] <= truth * (1 + AGREE))
      if dp is not None:
        row["dp_vs_truth"] = (dp[0] - truth) / truth
    rows.append(row)

  fmt = lambda v, f: "-" if v is None else format(v, f)
  print()
  print(
    "| q | sigma | T | delta | jaxrdp | reference | jaxrdp vs it | dp_accounting default vs it |"
  )
  print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
  for r in rows:
    print(
      f"| {r['q']:.3g} | {r['sigma']:.3g} | {r['steps']} | {r['delta']:.2g} | {r['epsilon']:.10g} | "
      f"{fmt(r.get('truth'), '.10g')} | {fmt(r.get('vs_truth'), '.1e')} | "
      f"{fmt(r.get('dp_vs_truth'), '.1e')} |"
    )
  have = [r for r in rows if "truth" in r]
  sound = all(r["sound"] and r["lower_sound"] for r in have)
  tight = all(r["tight"] for r in have)
  print()
  print(f"with a converged reference: {len(have)} of {args.n}")
  if have:
    vs = [r["vs_truth"] for r in have]
    print(f"never below the reference, lower bound never above it: {sound}")
    print(
      f"within {TOLERANCE:g} above it: {tight} (jaxrdp against it: {min(vs):.1e} to {max(vs):.1e})"
    )
    dv = [r["dp_vs_truth"] for r in have if "dp_vs_truth" in r]
    if dv:
      below = sum(v < -AGREE for v in dv)
      print(
        f"dp_accounting's default against it: {min(dv):.1e} to {max(dv):.1e}; "
        f"below it (an under-report) on {below} of {len(dv)}"
      )
  if args.json:
    reused = None
    if earlier:
      reused = dict(
        file=args.reuse_references, date=earlier_date, configurations=args.n - len(tasks) // 3
      )
    fields = dict(sound=sound, tight=tight, agree=AGREE, references_reused=reused, rows=rows)
    write_results(args.json, args.seed, fields)
  return 0 if sound and tight else 1


if __name__ == "__main__":
  sys.exit(main())
