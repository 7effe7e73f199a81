"""Validation: the tight epsilon on the held-out draw against other libraries' references.

``validate_pld.py`` compares jaxrdp's default answer with its own answers on
finer grids. This script takes the references from outside jaxrdp, on the same
held-out draw (``validate_pld.draw``, seed 2026, used for no tuning):

* from above, dp_accounting's connect-the-dots PLD accountant at its default
  interval (1e-4) and at a ladder of finer ones, ``h = c {2e-5, 1e-5, 5e-6}``
  with ``c = min(1, epsilon)`` (a resolution relative to small
  epsilons). Each is an upper bound of the truth, so the smallest is the best
  one. The sequence is not monotone: on a large-sigma configuration it fell
  down to ``h = 2e-6`` and rose again at finer intervals (0.0359221 at 2e-6,
  0.0359396 at 1.8e-7), so no extrapolation is attempted;
* from below, prv_accountant's lower bound (``eps_error = 5e-4 epsilon``), when
  it is installed and fits in memory: a lower bound computed by other code,
  looser than the tolerance.

Checks, per configuration:

* sound: jaxrdp's epsilon is at least prv_accountant's lower bound;
* tight: jaxrdp's epsilon is at most the best dp_accounting upper bound times
  (1 + 1e-5), and at most dp_accounting's default answer times (1 + 1e-6).

At delta below about 1e-9 dp_accounting's answers, default and finer, can fall below
the truth (its float64 FFT noise floor): ``validate_pld_laplace.py`` checks against an
exact reference there, and the "tight" check here then fails on dp_accounting's side.

Reported: the width of the independent bracket [prv lower, dp_accounting
best], which says how far these references pin the truth down, and jaxrdp's
place in it. ``validate_pld.py`` checks the 1e-5 claim against jaxrdp's own
certified bounds, which are far narrower.

A reference that fails (an exception, more than ``--timeout`` seconds, or more
memory than ``--memory-gb``) is reported as missing; the configuration is then
checked against what remains. References run in ``--workers`` fresh processes.

Run: PYTHONPATH=. python benchmarks/validate_pld_references.py [--n 40] [--json FILE]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from validate_pld import add_draw_arguments, draw, write_results

TOLERANCE = 1e-5
NOT_LOOSER = 1e-6
LADDER = (2e-5, 1e-5, 5e-6)
DEFAULT_INTERVAL = 1e-4


def _limit_memory(gigabytes):
  import resource

  limit = int(gigabytes * 2**30)
  resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _dp_accounting(args):
  q, sigma, steps, delta, interval = args
  from _dp_accounting import pld_epsilon

  start = time.perf_counter()
  return pld_epsilon(q, sigma, steps, delta, interval), time.perf_counter() - start


def _prv_lower(args):
  q, sigma, steps, delta, eps_error = args
  from prv_accountant import Accountant

  start = time.perf_counter()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    acc = Accountant(
      noise_multiplier=sigma,
      sampling_probability=q,
      delta=delta,
      max_compositions=int(steps),
      eps_error=eps_error,
    )
    low, _, _ = acc.compute_epsilon(int(steps))
  return float(low), time.perf_counter() - start


def _run_all(tasks, workers, timeout, memory_gb):
  """Runs (kind, i, fn, args) tasks in fresh processes; returns {(kind, i): (value, s) or None}."""
  ctx = mp.get_context("spawn")
  out = {}
  pending = list(tasks)
  while pending:
    pool = ctx.Pool(workers, initializer=_limit_memory, initargs=(memory_gb,), maxtasksperchild=1)
    handles = [(task, pool.apply_async(task[2], (task[3],))) for task in pending]
    pending = []
    hung = False
    for task, h in handles:
      kind, i = task[:2]
      if hung:  # the pool is torn down below: the rest go to a new one
        pending.append(task)
        continue
      try:
        out[(kind, i)] = h.get(timeout=timeout)
      except mp.TimeoutError:
        out[(kind, i)] = None
        hung = True
        print(f"  {kind} {i}: more than {timeout:g} s", flush=True)
      except Exception as exc:  # noqa: BLE001 (a failing reference is reported, not fatal)
        out[(kind, i)] = None
        print(f"  {kind} {i}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
      else:
        print(f"  {kind} {i}: {out[(kind, i)][0]:.9g} ({out[(kind, i)][1]:.1f} s)", flush=True)
    pool.terminate()
    pool.join()
  return out


def parse_arguments(argv, description, timeout, extra=()):
  """The draw's arguments and the reference runner's (``--workers``, ``--timeout``, ``--memory-gb``).

  ``extra``: further ``(names, keywords)`` of ``add_argument`` for the calling script.
  """
  p = argparse.ArgumentParser(description=description)
  add_draw_arguments(p)
  for names, keywords in extra:
    p.add_argument(*names, **keywords)
  p.add_argument("--workers", type=int, default=2, help="reference processes")
  p.add_argument("--timeout", type=float, default=timeout, help="seconds per reference")
  p.add_argument("--memory-gb", type=float, default=8.0, help="memory per reference process")
  return p.parse_args(argv)


def jaxrdp_on_draw(args):
  """``(q, sigma, steps, delta, PldEpsilon)``: the held-out draw and jaxrdp's default answer on it."""
  from jaxrdp.pld import pld_epsilon

  q, sigma, steps, delta = draw(args.n, args.seed)
  start = time.perf_counter()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    res = pld_epsilon(q, sigma, steps, delta)
  print(f"jaxrdp: {time.perf_counter() - start:.1f} s for {args.n} configurations", flush=True)
  return q, sigma, steps, delta, res


def main(argv=None):
  args = parse_arguments(argv, __doc__.splitlines()[0], timeout=300.0)
  q, sigma, steps, delta, res = jaxrdp_on_draw(args)
  ours = np.asarray(res.epsilon)

  try:
    import prv_accountant  # noqa: F401

    have_prv = True
  except ImportError:
    have_prv = False
  tasks = []
  for i in range(args.n):
    c = min(1.0, float(ours[i]))
    cfg = (float(q[i]), float(sigma[i]), float(steps[i]), float(delta[i]))
    tasks.append(("dp_default", i, _dp_accounting, cfg + (DEFAULT_INTERVAL,)))
    for k, h in enumerate(LADDER):
      tasks.append((f"dp_{k}", i, _dp_accounting, cfg + (h * c,)))
    if have_prv:
      tasks.append(("prv_lower", i, _prv_lower, cfg + (5e-4 * float(ours[i]),)))
  refs = _run_all(tasks, args.workers, args.timeout, args.memory_gb)

  rows = []
  for i in range(args.n):
    e = float(ours[i])
    ladder = [refs.get((f"dp_{k}", i)) for k in range(len(LADDER))]
    uppers = [v[0] for v in ladder if v is not None]
    default, low = refs.get(("dp_default", i)), refs.get(("prv_lower", i))
    row = dict(q=float(q[i]), sigma=float(sigma[i]), steps=int(steps[i]), delta=float(delta[i]))
    row.update(epsilon=e, dp_ladder=[v and v[0] for v in ladder], dp_default=default and default[0])
    row.update(prv_lower=low and low[0])
    best = min(uppers) if uppers else None
    row["dp_best"] = best
    if low is not None:
      row["sound"] = bool(e >= low[0])
    if best is not None and best > 0:
      row["vs_dp_best"] = (e - best) / best
      row["tight"] = bool(row["vs_dp_best"] <= TOLERANCE)
    if default is not None and default[0] > 0:
      row["vs_dp_default"] = (e - default[0]) / default[0]
      row["tight"] = bool(row.get("tight", True) and row["vs_dp_default"] <= NOT_LOOSER)
    if low is not None and best:
      row["bracket_width"] = (best - low[0]) / best
    rows.append(row)

  print()
  print("| q | sigma | T | delta | jaxrdp | dp_accounting best | jaxrdp vs it | prv lower |")
  print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
  for r in rows:
    fmt = lambda v, f: "failed" if v is None else format(v, f)
    print(
      f"| {r['q']:.3g} | {r['sigma']:.3g} | {r['steps']} | {r['delta']:.2g} | "
      f"{r['epsilon']:.9g} | {fmt(r['dp_best'], '.9g')} | {fmt(r.get('vs_dp_best'), '.1e')} | "
      f"{fmt(r['prv_lower'], '.7g')} |"
    )
  sound = all(r.get("sound", True) for r in rows)
  tight = all(r.get("tight", True) for r in rows)
  vs = [r["vs_dp_best"] for r in rows if "vs_dp_best" in r]
  widths = [r["bracket_width"] for r in rows if "bracket_width" in r]
  print()
  print(
    f"with a dp_accounting reference: {len(vs)} of {args.n}; with a prv lower bound: "
    f"{sum('sound' in r for r in rows)}"
  )
  print(f"never below prv_accountant's lower bound: {sound}")
  print(
    f"at most dp_accounting's best (1 + {TOLERANCE:g}) and its default (1 + {NOT_LOOSER:g}): "
    f"{tight} (jaxrdp against the best: {min(vs):.1e} to {max(vs):.1e})"
  )
  if widths:
    print(f"width of the independent bracket: {min(widths):.1e} to {max(widths):.1e} relative")
  if args.json:
    write_results(args.json, args.seed, dict(sound=sound, tight=tight, rows=rows))
  return 0 if sound and tight else 1


if __name__ == "__main__":
  sys.exit(main())
