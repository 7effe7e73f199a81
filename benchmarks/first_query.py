"""One question, one fresh process: `jaxrdp epsilon` against a dp_accounting script.

A user who asks one epsilon pays for the interpreter, the imports, and (for
jaxrdp) tracing and compiling its program. This script times, in fresh
processes, in one run and interleaved:

- ``jaxrdp cold``: the CLI with an empty cache directory (traces and compiles);
- ``jaxrdp warm``: the CLI again, with the cache the cold run left (the stored
  program and its compiled executable);
- ``dp_accounting``: a Python script that imports dp_accounting and asks the
  same question of its RdpAccountant.

Both run as Python runs by default, writing and reading compiled bytecode
(``PYTHONDONTWRITEBYTECODE`` is removed from their environment): an installed
package, dp_accounting here or a pip-installed jaxrdp, is byte-compiled at
install, and a source checkout is after its first run (the cold one here).

Before timing, it checks that both print the same configuration's epsilon and
that jaxrdp's (exact RDP, more orders) is not above dp_accounting's. The warm
and dp_accounting rows are medians over ``--repeats`` runs; the cold row is
the median over ``--cold-repeats`` runs, each with a fresh cache.

Usage: python benchmarks/first_query.py [--repeats 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

Q, SIGMA, STEPS, DELTA = 256 / 60000, 1.1, 14063, 1e-5

_DPA = f"""
import dp_accounting
acc = dp_accounting.rdp.RdpAccountant()
event = dp_accounting.PoissonSampledDpEvent({Q!r}, dp_accounting.GaussianDpEvent({SIGMA!r}))
acc.compose(event, {STEPS})
print(repr(float(acc.get_epsilon({DELTA!r}))))
"""


def _cli_command():
  exe = shutil.which("jaxrdp")
  base = [exe] if exe else [sys.executable, "-m", "jaxrdp"]
  return base + [
    "epsilon",
    "--q",
    repr(Q),
    "--sigma",
    repr(SIGMA),
    "--steps",
    str(STEPS),
    "--delta",
    repr(DELTA),
    "--json",
  ]


def _env(**extra):
  env = dict(os.environ, **extra)
  env.pop("PYTHONDONTWRITEBYTECODE", None)  # see the module docstring
  return env


def _timed(cmd, env):
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
  seconds = time.perf_counter() - t0
  if proc.returncode != 0:
    raise RuntimeError(f"{cmd[:3]} failed:\n{proc.stderr[-2000:]}")
  return seconds, proc.stdout


def _jaxrdp(cache_dir):
  env = _env(JAXRDP_CACHE_DIR=cache_dir)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  seconds, out = _timed(_cli_command(), env)
  return seconds, float(json.loads(out)[0]["epsilon"])


def _dp_accounting():
  seconds, out = _timed([sys.executable, "-c", _DPA], _env())
  return seconds, float(out.strip())


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--cold-repeats", type=int, default=2)
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)

  load_start = os.getloadavg()
  work = tempfile.mkdtemp(prefix="jaxrdp-first-query-")
  try:
    cache = os.path.join(work, "warm")
    cold = []
    for i in range(args.cold_repeats):
      seconds, eps = _jaxrdp(os.path.join(work, f"cold{i}") if i else cache)
      cold.append(seconds)
    # Correctness before timing: the same question, jaxrdp no looser.
    _, eps_dpa = _dp_accounting()
    if not (eps <= eps_dpa * (1 + 1e-12) and eps >= 0.99 * eps_dpa):
      raise SystemExit(f"check failed: jaxrdp {eps!r}, dp_accounting {eps_dpa!r}")
    print(f"check: jaxrdp epsilon {eps:.6f} <= dp_accounting {eps_dpa:.6f}")
    warm, dpa = [], []
    for _ in range(args.repeats):  # interleaved, so that load affects both alike
      warm.append(_jaxrdp(cache)[0])
      dpa.append(_dp_accounting()[0])
  finally:
    shutil.rmtree(work, ignore_errors=True)

  rows = {
    "jaxrdp_cold_s": statistics.median(cold),
    "jaxrdp_warm_s": statistics.median(warm),
    "dp_accounting_s": statistics.median(dpa),
  }
  ratio = rows["dp_accounting_s"] / rows["jaxrdp_warm_s"]
  for name, value in rows.items():
    print(f"{name:>18}: {value:6.2f} s")
  print(f"warm jaxrdp query vs dp_accounting script: {ratio:.2f}x (>1: jaxrdp faster)")
  load_end = os.getloadavg()
  print(f"load average (1, 5, 15 min): {load_start} at the start, {load_end} at the end")
  result = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "machine": f"{platform.machine()} cpus={os.cpu_count()}",
    "loadavg_1min": load_end[0],
    "loadavg_start_end": [list(load_start), list(load_end)],
    "bytecode": "written and read as by default (PYTHONDONTWRITEBYTECODE unset)",
    "configuration": {"q": Q, "sigma": SIGMA, "steps": STEPS, "delta": DELTA},
    "epsilon": {"jaxrdp": eps, "dp_accounting": eps_dpa},
    "repeats": {"warm": args.repeats, "cold": args.cold_repeats},
    **rows,
    "all_s": {"cold": cold, "warm": warm, "dp_accounting": dpa},
    "ratio_dp_accounting_over_warm": ratio,
  }
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
