"""What a benchmark result was measured on: commit, date, machine, library versions.

Every script whose results the README or the documentation quotes stamps its JSON with
:func:`stamp`: the git commit the run started from (``+dirty`` when the working tree had
uncommitted changes), the date, the machine, the versions of the libraries the run had
imported, and the jaxrdp modules it imported (read from ``sys.modules`` at the end of the
run). Nothing fails when the code changes afterwards: ``python benchmarks/run_all.py
--stale`` lists the results that predate later commits touching the modules they
imported, and ``python benchmarks/run_all.py`` reruns them all.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import pathlib
import platform
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Distributions whose versions a result records when the run imported them
# (import name: distribution name).
LIBRARIES = {
  "jax": "jax",
  "jaxlib": "jaxlib",
  "numpy": "numpy",
  "scipy": "scipy",
  "ml_dtypes": "ml_dtypes",
  "dp_accounting": "dp-accounting",
  "prv_accountant": "prv-accountant",
  "riskcal": "riskcal",
  "PLD_accounting": "pld-accounting",
  "mpmath": "mpmath",
}


def _git(*args: str) -> str | None:
  try:
    proc = subprocess.run(
      ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=30
    )
  except (OSError, subprocess.TimeoutExpired):
    return None
  return proc.stdout.strip() if proc.returncode == 0 else None


def current_commit() -> str | None:
  """The commit checked out, with ``+dirty`` if tracked files have uncommitted changes."""
  head = _git("rev-parse", "HEAD")
  if head is None:
    return None
  dirty = _git("status", "--porcelain", "--untracked-files=no")
  return head + ("+dirty" if dirty else "")


def library_versions() -> dict[str, str]:
  """Python's version and that of each library of :data:`LIBRARIES` imported so far."""
  versions = {"python": platform.python_version()}
  for module, dist in LIBRARIES.items():
    if module in sys.modules:
      try:
        versions[dist] = importlib.metadata.version(dist)
      except importlib.metadata.PackageNotFoundError:
        versions[dist] = getattr(sys.modules[module], "__version__", "?")
  return versions


def measured_modules(script: str | None = None) -> list[str]:
  """The jaxrdp modules imported so far (and the benchmark script itself, if named)."""
  names = sorted(m for m in sys.modules if m == "jaxrdp" or m.startswith("jaxrdp."))
  if script is not None:
    names.append("benchmarks." + pathlib.Path(script).stem)
  return names


def package_modules(script: str | None = None) -> list[str]:
  """Every module of the jaxrdp package (for a script that measures jaxrdp in
  subprocesses, whose imports this process does not see), and the script."""
  pkg = ROOT / "jaxrdp"
  names = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for p in pkg.rglob("*.py")
  )
  if script is not None:
    names.append("benchmarks." + pathlib.Path(script).stem)
  return names


def module_path(name: str) -> pathlib.Path:
  """The source file of a dotted module name of this repository (it may not exist)."""
  rel = pathlib.Path(*name.split("."))
  if (ROOT / rel).is_dir():
    return ROOT / rel / "__init__.py"
  return ROOT / rel.with_suffix(".py")


def stamp(result: dict, script: str, modules: list[str] | None = None) -> dict:
  """``result`` with the provenance of the run: commit, date, machine, library versions
  and the modules (by default those this process imported)."""
  modules = measured_modules(script) if modules is None else modules
  result = dict(result)
  result["provenance"] = {
    "commit": current_commit(),
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "machine": (
      f"{platform.machine()}, {platform.processor() or 'cpu'}, {os.cpu_count()} CPUs, "
      f"{platform.system()}, python {platform.python_version()}"
    ),
    "versions": library_versions(),
    "modules": modules,
  }
  return result
