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

# Tests are marked slow by their measured cost: ``tests/durations.json`` holds each
# test's seconds (setup, call and teardown) in a full run of the suite on the 2-core
# machine, written by ``python -m pytest --write-durations``. A test that took more
# than SLOW_SECONDS there is marked slow, and ``python -m pytest -m "not slow"`` (the
# loop to run while working) leaves it out. A test not in the file counts as fast
# until the file is rewritten; an unmarked test that takes more than UNMARKED_LIMIT
# fails the run (see pytest_sessionfinish), so the marks stay true.
DURATIONS_FILE = pathlib.Path(__file__).with_name("durations.json")
SLOW_SECONDS = 1.0
UNMARKED_LIMIT = 15.0


def recorded_durations():
  """``{nodeid: seconds}`` of the committed durations file (empty without one)."""
  try:
    return json.loads(DURATIONS_FILE.read_text())["tests"]
  except FileNotFoundError:
    return {}


def _file_of(nodeid):
  return nodeid.split("::", 1)[0]


def pytest_addoption(parser):
  parser.addoption(
    "--write-durations",
    action="store_true",
    help=f"write every test's measured seconds to {DURATIONS_FILE.name} at the end of the run",
  )


def pytest_collection_modifyitems(config, items):
  del config
  recorded = recorded_durations()
  per_file = collections.Counter()
  for nodeid, seconds in recorded.items():
    per_file[_file_of(nodeid)] += seconds
  # Heaviest files first: pytest-xdist's --dist loadfile (--no-loadscope-reorder)
  # hands whole files to the two workers in collection order, so that a file's
  # module fixtures run once and its programs compile once; starting with the long
  # ones keeps one worker from finishing minutes after the other.
  items.sort(key=lambda item: -per_file[_file_of(item.nodeid)])  # stable: file order kept
  for item in items:
    if recorded.get(item.nodeid, 0.0) > SLOW_SECONDS:
      item.add_marker(pytest.mark.slow)


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
    tests = {k: round(v, 3) for k, v in sorted(_measured.items())}
    DURATIONS_FILE.write_text(
      json.dumps(
        {
          "measured": f"{datetime.date.today().isoformat()}, {platform.machine()}, "
          f"{os.cpu_count()} cores, python -m pytest --write-durations",
          "tests": tests,
        },
        indent=1,
      )
      + "\n"
    )
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
