"""Reruns every benchmark the README and the documentation quote, then regenerates the tables.

    python benchmarks/run_all.py              # every script of SCRIPTS in turn, then the tables
    python benchmarks/run_all.py --dry-run    # the commands, without running them
    python benchmarks/run_all.py --only bench_pld.py compare_accountants.py
    python benchmarks/run_all.py --stale      # which results predate later code changes

A full run takes well over an hour on a 2-core CPU; run it on an otherwise idle machine,
since the ratios are measured against the competitors in the same process but absolute
times move with the load. Each script stamps its result with the commit, date, machine
and library versions (``benchmarks/_provenance.py``); the tables then read them
(``benchmarks/tables.py --write``).

``--stale`` is a listing, never a failure: for each result it names the commits after
the one that recorded it that touch a module the run imported (the jaxrdp modules and the
script itself, from the result's provenance), using ``git log``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import tables  # noqa: E402
from _provenance import module_path  # noqa: E402


@dataclass(frozen=True)
class Script:
  """A quoted benchmark: the script, its arguments, the result file it writes."""

  name: str
  args: tuple[str, ...]
  result: str
  needs: str = ""  # competitors outside the test extra, for the listing


# In the order they run: the quick validations between the long timings.
SCRIPTS = (
  Script(
    "bench_grid.py", ("--json", "benchmarks/results/bench_grid_cpu.json"), "bench_grid_cpu.json"
  ),
  Script("compare_accountants.py", (), "compare_accountants.json", "prv-accountant (optional)"),
  Script("bench_pld.py", (), "bench_pld.json"),
  Script("bench_pld_grad.py", (), "bench_pld_grad.json"),
  Script(
    "bench_pld_calibration.py",
    ("--json", "benchmarks/results/bench_pld_calibration_cpu.json"),
    "bench_pld_calibration_cpu.json",
  ),
  Script("bench_risk.py", ("--atol", "1e-4", "3e-4", "1e-3"), "bench_risk.json", "riskcal"),
  Script("bench_allocation.py", (), "bench_allocation.json", "pld-accounting"),
  Script(
    "first_query.py", ("--json", "benchmarks/results/first_query_cpu.json"), "first_query_cpu.json"
  ),
  Script(
    "validate_pld.py", ("--json", "benchmarks/results/validate_pld.json"), "validate_pld.json"
  ),
  Script(
    "validate_pld_laplace.py",
    (
      "--json",
      "benchmarks/results/validate_pld_laplace.json",
      "--reuse-references",
      "benchmarks/results/validate_pld_laplace.json",
    ),
    "validate_pld_laplace.json",
  ),
  Script("validate_allocation_pld.py", (), "validate_allocation_pld.json", "pld-accounting"),
  Script("shuffle_bracket.py", (), "shuffle_bracket.json"),
)


def command(script: Script) -> list[str]:
  """The command line of ``script``, run from the repository root."""
  return [sys.executable, f"benchmarks/{script.name}", *script.args]


def shown(script: Script) -> str:
  """The command as the documentation quotes it."""
  return shlex.join(["python", f"benchmarks/{script.name}", *script.args])


# -- Staleness -------------------------------------------------------------------------


def _git(*args: str) -> str:
  proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
  return proc.stdout.strip()


def recorded_in(result: str, run_commit: str | None) -> str | None:
  """The commit that recorded ``result``: the first after the run's commit touching the
  file (so code committed together with its result counts as measured), or None when the
  result is not committed since the run."""
  path = f"benchmarks/results/{result}"
  if run_commit:
    base = run_commit.partition("+")[0]
    later = _git("log", "--reverse", "--format=%H", f"{base}..HEAD", "--", path).split()
    if later:
      return later[0]
    return None
  last = _git("log", "-1", "--format=%H", "--", path)
  return last or None


def stale_report(script: Script) -> list[str]:
  """Lines saying whether ``script``'s result predates later changes to what it ran."""
  result = json.loads((ROOT / "benchmarks" / "results" / script.result).read_text())
  prov = result.get("provenance", {})
  commit = prov.get("commit")
  head = (
    f"{script.result} ({script.name}, run {prov.get('date', '?')} at {tables.short_commit(prov)})"
  )
  since = recorded_in(script.result, commit)
  if since is None:
    return [f"{head}: not committed since the run; nothing later to compare"]
  paths = sorted(
    str(module_path(m).relative_to(ROOT))
    for m in prov.get("modules", [])
    if module_path(m).exists()
  )
  if not paths:
    return [f"{head}: its provenance names no modules; rerun it to record them"]
  log = _git("log", "--format=%h %cs %s", f"{since}..HEAD", "--", *paths).splitlines()
  if not log:
    return [f"{head}: current (no later commit touches the {len(paths)} modules it imported)"]
  lines = [f"{head}: {len(log)} later commit(s) touch modules it imported:"]
  for entry in log:
    h = entry.split()[0]
    touched = _git("show", "--format=", "--name-only", h, "--", *paths).split()
    lines.append(f"  {entry[:100]}")
    lines.append(f"    ({', '.join(touched)})")
  return lines


# -- Main ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--dry-run", action="store_true", help="list the commands, run nothing")
  ap.add_argument("--stale", action="store_true", help="list results older than their code")
  ap.add_argument("--only", nargs="+", metavar="SCRIPT", help="run only these scripts")
  args = ap.parse_args(argv)
  chosen = SCRIPTS
  if args.only:
    unknown = sorted(set(args.only) - {s.name for s in SCRIPTS})
    if unknown:
      ap.error(f"not a quoted script: {unknown} (known: {[s.name for s in SCRIPTS]})")
    chosen = tuple(s for s in SCRIPTS if s.name in args.only)
  if args.stale:
    for script in chosen:
      print("\n".join(stale_report(script)))
    return 0
  if args.dry_run:
    for script in chosen:
      needs = f"  # needs {script.needs}" if script.needs else ""
      print(f"{shown(script)}{needs}")
    print("python benchmarks/tables.py --write")
    return 0
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
  )
  failed = []
  for script in chosen:
    print(f"$ {shown(script)}", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(command(script), cwd=ROOT, env=env, check=False)
    print(f"  exit {proc.returncode} after {time.perf_counter() - start:.0f} s", flush=True)
    if proc.returncode:
      failed.append(script.name)
  tables.main(["--write"])
  if failed:
    print(f"failed: {', '.join(failed)} (see their output above)")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
