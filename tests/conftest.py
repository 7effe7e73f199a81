"""Test configuration: float64 and strict dtype promotion for the tests only.

The library itself never touches these flags; test_precision.py checks the
x64-disabled behaviour in a subprocess.
"""

import collections
import datetime
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile

import pytest

# One persistent XLA compilation cache for the whole run, made by the controlling
# process before pytest-xdist starts its workers, so that the workers and every
# subprocess (CLI, notebooks, examples) inherit it: a program compiled once is
# read back from disk elsewhere (the SGM kernels take seconds to compile). A new
# directory per run keeps runs independent; an outer JAX_COMPILATION_CACHE_DIR is
# respected.
_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxrdp-tests-xla-")
# Every program, not only those that take a second to compile: the subprocesses
# (CLI, notebooks, examples) compile many small ones that another process has.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# jaxrdp's own cache of compiled programs (jaxrdp._core.stored_programs, on by
# default in ~/.cache/jaxrdp): one private directory per run as well, shared by the
# workers and the subprocesses, never the user's.
_OWN_PROGRAMS = "JAXRDP_CACHE_DIR" not in os.environ
if _OWN_PROGRAMS:
  os.environ["JAXRDP_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxrdp-tests-programs-")


def _with_xla_flag(flag):
  """The environment's XLA_FLAGS with ``flag`` appended."""
  return (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()


# The suite is mostly XLA compilation. LLVM's optimization level sets how long
# that takes, and almost never what the programs compute (IEEE arithmetic without
# fast-math at every level; the whole suite passed at level 1 on 2026-11-28), so
# the tests compile at level 0: less compile time, at a slower run of the compiled
# code. The exception: from level 1 up, XLA:CPU contracts products and sums into
# fused multiply-adds, which error-free transformations must be written to
# survive; test_pld_double_word.py reruns its checks at the default level in a
# fresh process. Users and the benchmark scripts run at XLA's default level.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = _with_xla_flag("--xla_backend_optimization_level=0")

# XLA:CPU's older loop emitters compile the suite's programs in about half the time
# of its default fusion emitters (the order search: 1.1 s against 2.3 s; the PLD
# job: 1.6 s against 4.3 s; measured 2026-11-28 at level 0 on the 2-core machine),
# with the same IEEE arithmetic. As with the level, the double-word checks rerun
# with the user's default flags (test_pld_double_word.py). XLA aborts the process
# on a flag it does not know, so a fresh interpreter tries the flag first: a jaxlib
# without it runs the suite with its default emitters.
_LEGACY_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def _xla_accepts(flag):
  env = dict(os.environ, XLA_FLAGS=_with_xla_flag(flag))
  env["JAX_PLATFORMS"] = "cpu"
  probe = "import jax.numpy as jnp; (jnp.zeros(2) + 1).block_until_ready()"
  try:
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, timeout=120)
  except (OSError, subprocess.SubprocessError):
    return False
  return proc.returncode == 0


if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", "") and _xla_accepts(
  _LEGACY_EMITTERS
):
  os.environ["XLA_FLAGS"] = _with_xla_flag(_LEGACY_EMITTERS)

import jax  # noqa: E402  (after the cache directory and XLA flags are in the environment)

jax.config.update("jax_enable_x64", True)

# The mpmath oracle lives beside the tests.
sys.path.insert(0, os.path.dirname(__file__))

# Tests are marked slow by their measured cost. ``tests/durations.json`` holds each
# test's seconds (setup, call and teardown) in two runs on the 2-core machine, written
# by ``--write-durations``: "full", a run of the whole suite, and "fast", a run of the
# fast loop (``-m "not slow"``). A test is marked slow when either records more than
# SLOW_SECONDS for it, and ``python -m pytest -m "not slow"`` (the loop to run while
# working) leaves it out. The fast run's table is needed because a test that is cheap
# in a full run often reads a program, or a module fixture, that a slow test paid for
# before it: without the slow tests it pays itself. A test in neither table counts as
# fast until one is rewritten; an unmarked test that takes more than UNMARKED_LIMIT
# fails the run (see pytest_sessionfinish), so the marks stay true.
DURATIONS_FILE = pathlib.Path(__file__).with_name("durations.json")
SLOW_SECONDS = 1.0
UNMARKED_LIMIT = 15.0
FAST_LOOP = "not slow"


def recorded_tables():
  """``{"full": {nodeid: seconds}, "fast": {...}}`` of the committed durations file."""
  try:
    stored = json.loads(DURATIONS_FILE.read_text())
  except FileNotFoundError:
    return {"full": {}, "fast": {}}
  return {run: stored.get(run, {}).get("tests", {}) for run in ("full", "fast")}


def recorded_durations():
  """``{nodeid: seconds}``: the larger of a test's two recorded times (what marks it)."""
  tables = recorded_tables()
  both = dict(tables["full"])
  for nodeid, seconds in tables["fast"].items():
    both[nodeid] = max(seconds, both.get(nodeid, 0.0))
  return both


def _file_of(nodeid):
  return nodeid.split("::", 1)[0]


def pytest_addoption(parser):
  parser.addoption(
    "--write-durations",
    action="store_true",
    help=f"record every test's measured seconds in {DURATIONS_FILE.name} at the end of "
    f'the run: the "full" table for a run of the whole suite, the "fast" table for '
    f'-m "{FAST_LOOP}"',
  )


def pytest_collection_modifyitems(config, items):
  del config
  recorded = recorded_durations()
  per_file = collections.Counter()
  for nodeid, seconds in recorded_tables()["full"].items():
    per_file[_file_of(nodeid)] += seconds
  # Heaviest files first: pytest-xdist's --dist loadfile (--no-loadscope-reorder)
  # hands whole files to the two workers in collection order, so that a file's
  # module fixtures run once and its programs compile once; starting with the long
  # ones keeps one worker from finishing minutes after the other.
  items.sort(key=lambda item: -per_file[_file_of(item.nodeid)])  # stable: file order kept
  for item in items:
    if recorded.get(item.nodeid, 0.0) > SLOW_SECONDS:
      item.add_marker(pytest.mark.slow)


def _write_durations(config, measured):
  """Record ``measured`` in the table of this run's kind, keeping the other table.

  A run of the whole suite replaces the "full" table; a run of some test files (paths
  given, no ``-m``) updates their entries in it, as measured alone. A fast-loop run
  updates the "fast" table test by test: a test it leaves out (marked slow by an
  earlier fast run) keeps its entry, so the marks converge over repeated fast runs. Any
  other selection (``-k``, another ``-m``) is refused.
  """
  markexpr = config.getoption("markexpr") or ""
  whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS  # no paths given
  if config.getoption("keyword") or markexpr not in ("", FAST_LOOP) or (markexpr and not whole):
    sys.stderr.write(
      f"\n--write-durations records the whole suite, some test files, or the whole "
      f'-m "{FAST_LOOP}" loop; this run selected tests otherwise and was not recorded.\n'
    )
    return
  run = "fast" if markexpr == FAST_LOOP else "full"
  try:
    stored = json.loads(DURATIONS_FILE.read_text())
  except FileNotFoundError:
    stored = {}
  previous = stored.get(run, {})
  tests = {} if run == "full" and whole else dict(previous.get("tests", {}))
  tests.update({k: round(v, 3) for k, v in measured.items()})
  note = (
    f"{datetime.date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} cores, "
    "python -m pytest" + (f' -m "{FAST_LOOP}"' if run == "fast" else "") + " --write-durations"
  )
  if not whole:
    files = sorted({_file_of(k) for k in measured})
    note = previous.get("measured", "") + f"; {note} {' '.join(files)}"
  stored[run] = {"measured": note, "tests": dict(sorted(tests.items()))}
  DURATIONS_FILE.write_text(json.dumps(stored, indent=1) + "\n")


_measured = collections.Counter()
_unmarked = set()


def pytest_runtest_logreport(report):
  """The controlling process sums each test's phases (the workers' reports reach it)."""
  _measured[report.nodeid] += report.duration
  if "slow" not in report.keywords:
    _unmarked.add(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
  config = session.config
  if hasattr(config, "workerinput") or not _measured:
    return
  if config.getoption("--write-durations"):
    _write_durations(config, _measured)
  over = sorted(
    (round(s, 1), k) for k, s in _measured.items() if k in _unmarked and s > UNMARKED_LIMIT
  )
  if over and exitstatus == 0:
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
    lines = "\n".join(f"  {s:6.1f} s  {k}" for s, k in over)
    sys.stderr.write(
      f"\nTests not marked slow took more than {UNMARKED_LIMIT:g} s; measure the suite "
      f"again (python -m pytest --write-durations) and commit {DURATIONS_FILE.name}:\n"
      f"{lines}\n"
    )


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """Drop each test file's compiled programs when it ends.

  Every compiled program of the SGM search maps about a thousand memory regions
  (XLA's CPU code), so a worker that kept all of a session's programs passed the
  kernel's limit (vm.max_map_count, 65530) and crashed. A later file that needs a
  program again reads it from the persistent cache above.
  """
  yield
  jax.clear_caches()


def pytest_unconfigure(config):
  """The controlling process removes the run's cache directory at the end."""
  if _OWN_CACHE and not hasattr(config, "workerinput"):
    shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
  if _OWN_PROGRAMS and not hasattr(config, "workerinput"):
    shutil.rmtree(os.environ["JAXRDP_CACHE_DIR"], ignore_errors=True)
