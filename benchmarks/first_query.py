"""The first answer in a fresh process: jaxrdp (CLI and Python API, RDP and tight) against dp_accounting.

A user who asks one epsilon pays for the interpreter, the imports, and (for
jaxrdp) tracing and compiling its programs, or loading them from its cache
(jaxrdp._core.stored_programs). This script asks the MNIST question (q =
256/60000, sigma = 1.1, 14063 steps, delta = 1e-5) four ways, each in a fresh
process:

- ``cli-rdp``: ``jaxrdp epsilon ... --json`` (the Renyi-DP accountant);
- ``cli-pld``: the same with ``--accountant pld`` (the tight accountant);
- ``api-rdp``: ``import jaxrdp; jaxrdp.dpsgd_epsilon(...)`` in a Python script;
- ``api-pld``: the same with ``accountant="pld"``;

and times each against a Python script that imports dp_accounting and asks its
RdpAccountant (for the RDP questions) or its PLDAccountant (for the tight ones,
value_discretization_interval 1e-4, its default) the same question.

- ``cold``: the first-ever call, with an empty cache directory (traces, compiles
  and stores its programs); the median over ``--cold-repeats`` runs, each with a
  fresh directory.
- ``warm``: the same process again, with the cache the cold runs left; jaxrdp's
  and dp_accounting's runs alternate (jaxrdp, then its dp_accounting
  counterpart, question after question, ``--repeats`` rounds), so that the
  machine's load weighs on both alike; medians.

The ratio reported is jaxrdp's warm time over dp_accounting's (at most 1: jaxrdp
no slower). Both sides run as Python runs by default, writing and reading
compiled bytecode (``PYTHONDONTWRITEBYTECODE`` is removed from their
environment): an installed package, dp_accounting here or a pip-installed
jaxrdp, is byte-compiled at install, and a source checkout is after its first
run (a cold one here). Before timing, it checks that both sides answer the same
configuration and that jaxrdp's epsilon is not above dp_accounting's (exact RDP
over more orders; a certified tight bound against dp_accounting's pessimistic
PLD estimate). The load average at the start and the end is recorded: on a
shared machine, compare the ratios, not the absolute times.

Usage: python benchmarks/first_query.py [--repeats 7] [--cold-repeats 2]
       [--questions cli-rdp api-pld ...] [--json PATH]
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

from _provenance import package_modules, stamp

Q, SIGMA, STEPS, DELTA = 256 / 60000, 1.1, 14063, 1e-5

_DPA = {
  "rdp": f"""
import dp_accounting
acc = dp_accounting.rdp.RdpAccountant()
event = dp_accounting.PoissonSampledDpEvent({Q!r}, dp_accounting.GaussianDpEvent({SIGMA!r}))
acc.compose(event, {STEPS})
print(repr(float(acc.get_epsilon({DELTA!r}))))
""",
  "pld": f"""
import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
acc = pld_privacy_accountant.PLDAccountant(
  dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4
)
event = dp_accounting.PoissonSampledDpEvent({Q!r}, dp_accounting.GaussianDpEvent({SIGMA!r}))
acc.compose(event, {STEPS})
print(repr(float(acc.get_epsilon({DELTA!r}))))
""",
}

_API = """
import jaxrdp
print(repr(float(jaxrdp.dpsgd_epsilon({q!r}, {sigma!r}, {steps}, {delta!r}{extra}).epsilon)))
"""

QUESTIONS = ("cli-rdp", "cli-pld", "api-rdp", "api-pld")


def _jaxrdp_command(question):
  """The command that asks ``question`` (one of QUESTIONS), and how to read its answer."""
  kind, accountant = question.split("-")
  if kind == "api":
    extra = ', accountant="pld"' if accountant == "pld" else ""
    code = _API.format(q=Q, sigma=SIGMA, steps=STEPS, delta=DELTA, extra=extra)
    return [sys.executable, "-c", code], lambda out: float(out.strip())
  exe = shutil.which("jaxrdp")
  base = [exe] if exe else [sys.executable, "-m", "jaxrdp"]
  cmd = [*base, "epsilon", "--q", repr(Q), "--sigma", repr(SIGMA), "--steps", str(STEPS)]
  cmd += ["--delta", repr(DELTA), "--json"]
  if accountant == "pld":
    cmd += ["--accountant", "pld"]
  return cmd, lambda out: float(json.loads(out)[0]["epsilon"])


def _env(**extra):
  env = dict(os.environ, **extra)
  env.pop("PYTHONDONTWRITEBYTECODE", None)  # see the module docstring
  return env


def _timed(cmd, env):
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=1800)
  seconds = time.perf_counter() - t0
  if proc.returncode != 0:
    raise RuntimeError(f"{cmd[:3]} failed:\n{proc.stderr[-2000:]}")
  return seconds, proc.stdout


def _jaxrdp(question, cache_dir):
  cmd, read = _jaxrdp_command(question)
  env = _env(JAXRDP_CACHE_DIR=cache_dir)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)  # jaxrdp's own caches only
  seconds, out = _timed(cmd, env)
  return seconds, read(out)


def _dp_accounting(accountant):
  seconds, out = _timed([sys.executable, "-c", _DPA[accountant]], _env())
  return seconds, float(out.strip())


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--cold-repeats", type=int, default=2)
  parser.add_argument("--questions", nargs="+", choices=QUESTIONS, default=list(QUESTIONS))
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)

  load_start = os.getloadavg()
  work = tempfile.mkdtemp(prefix="jaxrdp-first-query-")
  cold = {q: [] for q in args.questions}
  warm = {q: [] for q in args.questions}
  dpa = {q: [] for q in args.questions}
  eps, eps_dpa = {}, {}
  try:
    os.chmod(work, 0o700)
    caches = {}
    for question in args.questions:
      for i in range(args.cold_repeats):
        cache = os.path.join(work, f"{question}-cold{i}")
        seconds, eps[question] = _jaxrdp(question, cache)
        cold[question].append(seconds)
        caches.setdefault(question, cache)  # the first cold run's cache serves the warm ones
      print(f"{question}: cold {statistics.median(cold[question]):.2f} s", flush=True)
    # Correctness before timing: the same question, jaxrdp no looser.
    for question in args.questions:
      accountant = question.split("-")[1]
      _, eps_dpa[question] = _dp_accounting(accountant)
      e, d = eps[question], eps_dpa[question]
      if not (e <= d * (1 + 1e-12) and e >= 0.99 * d):
        raise SystemExit(f"check failed for {question}: jaxrdp {e!r}, dp_accounting {d!r}")
      print(f"check {question}: jaxrdp epsilon {e:.6f} <= dp_accounting {d:.6f}")
    for _ in range(args.repeats):  # alternating, so that load weighs on both alike
      for question in args.questions:
        warm[question].append(_jaxrdp(question, caches[question])[0])
        dpa[question].append(_dp_accounting(question.split("-")[1])[0])
  finally:
    shutil.rmtree(work, ignore_errors=True)
  load_end = os.getloadavg()

  rows = {}
  print(f"\n{'question':>9} {'cold':>7} {'warm':>7} {'dp_acc':>7} {'warm/dp_acc':>12}")
  for question in args.questions:
    row = {
      "jaxrdp_cold_s": statistics.median(cold[question]),
      "jaxrdp_warm_s": statistics.median(warm[question]),
      "dp_accounting_s": statistics.median(dpa[question]),
    }
    row["ratio_warm_over_dp_accounting"] = row["jaxrdp_warm_s"] / row["dp_accounting_s"]
    rows[question] = row
    print(
      f"{question:>9} {row['jaxrdp_cold_s']:7.2f} {row['jaxrdp_warm_s']:7.2f} "
      f"{row['dp_accounting_s']:7.2f} {row['ratio_warm_over_dp_accounting']:12.2f}"
    )
  print("(medians in seconds; ratio <= 1: jaxrdp's warm answer no slower than dp_accounting's)")
  print(f"load average (1, 5, 15 min): {load_start} at the start, {load_end} at the end")
  result = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "machine": f"{platform.machine()} cpus={os.cpu_count()}",
    "loadavg_start_end": [list(load_start), list(load_end)],
    "bytecode": "written and read as by default (PYTHONDONTWRITEBYTECODE unset)",
    "configuration": {"q": Q, "sigma": SIGMA, "steps": STEPS, "delta": DELTA},
    "epsilon": {"jaxrdp": eps, "dp_accounting": eps_dpa},
    "repeats": {"warm": args.repeats, "cold": args.cold_repeats},
    "questions": rows,
    "all_s": {"cold": cold, "warm": warm, "dp_accounting": dpa},
  }
  if args.json:
    with open(args.json, "w") as f:
      # The questions ran in subprocesses: every module of the package counts.
      json.dump(stamp(result, __file__, package_modules(__file__)), f, indent=1)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
