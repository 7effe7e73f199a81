"""Test configuration: float64 and strict dtype promotion for the tests only.

The library itself never touches these flags; test_precision.py checks the
x64-disabled behaviour in a subprocess.
"""

import os
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

# Heaviest files first (per-file totals of `pytest --durations` in a full run of the
# suite on the 2-core machine, 2026-12-03; mostly XLA compilation, and the subprocess
# checks; test_dpsgd just before test_grad_x64_off, see below). pytest-xdist's
# --dist loadfile (--no-loadscope-reorder) hands whole files to the two workers
# in collection order, so that a file's module fixtures run once and its programs
# compile once; starting with the long ones keeps one worker from finishing
# minutes after the other (the short files at the end fill the gaps). The
# persistent cache above lets a file read back what another file compiled before
# it: test_dpsgd compiles the scalar epsilon and delta searches that
# test_grad_x64_off's subprocess then reads for its finite differences.
_HEAVY_FIRST = (
  "test_fixed_size_pld.py",
  "test_additive_delta.py",
  "test_shuffle_bracket.py",
  "test_domain_soundness.py",
  "test_cli.py",
  "test_doctests.py",
  "test_dpsgd.py",
  "test_grad_x64_off.py",
  "test_calibration.py",
  "test_risk.py",
  "test_risk_cli.py",
  "test_docs_build.py",
  "test_pld_api.py",
  "test_sgm.py",
  "test_pld_exact.py",
  "test_pld_few_steps.py",
  "test_kernel_table.py",
  "test_readme.py",
  "test_allocation_calibration.py",
  "test_sampling_schemes.py",
  "test_precision.py",
  "test_sweep.py",
  "test_training.py",
  "test_bench_scripts.py",
  "test_soundness.py",
  "test_tight_epsilon.py",
  "test_stored_programs.py",
  "test_batch_size.py",
  "test_pld_double_word.py",
  "test_allocation_pld.py",
  "test_pld_robustness.py",
  "test_accuracy.py",
  "test_regression_guard.py",
  "test_events.py",
  "test_rdp_curves.py",
  "test_quadrature_layouts.py",
  "test_pld_accuracy.py",
  "test_accountant.py",
  "test_oracle.py",
  "test_pld_calibration.py",
  "test_sgm_single_step.py",
  "test_wor_rdp.py",
  "test_sampled_step.py",
)


# The integration tests: the documentation build, the notebooks, the README's blocks,
# the benchmark scripts, the training runs and everything that starts subprocesses.
# ``python -m pytest -m "not slow"`` leaves them out (the fast unit run); the README's
# command runs everything.
_SLOW_FILES = {
  "test_bench_scripts.py",
  "test_cli.py",
  "test_docs_build.py",
  "test_doctests.py",
  "test_grad_x64_off.py",
  "test_layers.py",
  "test_precision.py",
  "test_readme.py",
  "test_stored_programs.py",
  "test_sweep_distributed.py",
  "test_training.py",
  "test_typing.py",
}


def pytest_collection_modifyitems(config, items):
  del config
  rank = {name: i for i, name in enumerate(_HEAVY_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept
  for item in items:
    if item.path.name in _SLOW_FILES:
      item.add_marker(pytest.mark.slow)


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
