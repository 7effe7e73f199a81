"""Executables stored beside JAX's persistent cache (jaxrdp._core.stored_programs).

A stored executable must give what the direct call gives, be found again by a
fresh process without tracing, never be reused for other code, shapes, static
configuration or devices, and never break a call when the file is damaged or
cannot be written.
"""

import functools
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrdp._core import stored_programs as sp


@functools.partial(jax.jit, static_argnames=("power",))
def _kernel(x, y, *, power):
  return x**power + jnp.sin(y), jnp.sort(x)  # a sort: see the test of a program already run


@pytest.fixture
def program_dir(tmp_path, monkeypatch):
  monkeypatch.setattr(sp, "program_dir", lambda: tmp_path)
  sp._LOADED.clear()  # as in a fresh process
  return tmp_path


def _call(x, y, power=3):
  with jax.enable_x64(True):
    return sp.call_stored("kernel", _kernel, lambda *out: out, (x, y), {"power": power})


def _direct(x, y, power=3):
  with jax.enable_x64(True):
    return _kernel(x, y, power=power)


def test_stored_program_equals_the_direct_call_and_is_reused(program_dir, monkeypatch):
  x, y = np.linspace(0.1, 2.0, 16), np.linspace(-1.0, 1.0, 16)
  first = _call(x, y)
  (stored,) = list(program_dir.iterdir())
  for got, want in zip(first, _direct(x, y)):
    np.testing.assert_array_equal(got, want)

  def no_tracing(*args, **kwargs):
    raise AssertionError("compiled again although a stored program exists")

  monkeypatch.setattr(sp, "_compile_and_store", no_tracing)
  sp._LOADED.clear()  # a fresh process reads the file
  again = _call(2 * x, y)  # same shapes and configuration: loaded, not traced
  for got, want in zip(again, _direct(2 * x, y)):
    np.testing.assert_array_equal(got, want)
  assert list(program_dir.iterdir()) == [stored]


def _without_metadata(compiled):
  """The compiled HLO without source locations (the instructions' metadata and
  the table of stack frames at the end)."""
  text = compiled.as_text().split("\nFileNames")[0]
  return re.sub(r", metadata=\{[^}]*\}", "", text)


def test_stored_program_is_the_program_of_the_direct_call(tmp_path):
  x, y = np.linspace(0.1, 2.0, 16), np.linspace(-1.0, 1.0, 16)
  with jax.enable_x64(True):
    stored = sp._compile_and_store(tmp_path / "p.xla", _kernel, (x, y), {"power": 3})
    direct = _kernel.lower(x, y, power=3).compile()
  assert _without_metadata(stored) == _without_metadata(direct)


def test_a_program_already_run_directly_is_still_stored(program_dir, monkeypatch):
  # JAX's in-memory cache hands back an executable the direct call has run, and an
  # XLA:CPU executable that has run a sort cannot be serialized any more.
  x, y = np.linspace(0.1, 2.0, 12), np.linspace(-1.0, 1.0, 12)
  want = _direct(x, y)
  assert not list(program_dir.iterdir())
  got = _call(x, y)
  assert len(list(program_dir.iterdir())) == 1
  for g, w in zip(got, want):
    np.testing.assert_array_equal(g, w)


def test_other_shapes_dtypes_or_static_configuration_are_other_programs(program_dir):
  x, y = np.linspace(0.1, 2.0, 16), np.linspace(-1.0, 1.0, 16)
  _call(x, y)
  _call(x, y, power=2)
  _call(x[:8], y[:8])
  _call(x.astype(np.float32), y)
  assert len(list(program_dir.iterdir())) == 4
  np.testing.assert_array_equal(_call(x, y, power=2)[0], _direct(x, y, power=2)[0])


def test_key_covers_the_source_code(program_dir, monkeypatch):
  x, y = np.ones(4), np.ones(4)
  before = sp._key("kernel", (x, y), {"power": 3})
  monkeypatch.setattr(sp, "_source_digest", lambda: "edited")
  assert sp._key("kernel", (x, y), {"power": 3}) != before


def test_key_covers_the_device_the_host_and_xla_flags(monkeypatch):
  x, y = np.ones(4), np.ones(4)
  before = sp._key("kernel", (x, y), {"power": 3})
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
  assert sp._key("kernel", (x, y), {"power": 3}) != before
  monkeypatch.delenv("XLA_FLAGS")
  monkeypatch.setattr(sp, "_host", lambda: "x86_64:sse2")  # a host without this one's features
  assert sp._key("kernel", (x, y), {"power": 3}) != before
  monkeypatch.setattr(sp, "_device_part", lambda device: "another machine")
  assert sp._key("kernel", (x, y), {"power": 3}) != before


def test_damaged_or_unwritable_files_fall_back_to_the_direct_call(program_dir):
  x, y = np.linspace(0.1, 2.0, 16), np.linspace(-1.0, 1.0, 16)
  _call(x, y)
  (stored,) = list(program_dir.iterdir())
  stored.write_bytes(b"not a program")
  sp._LOADED.clear()  # a fresh process reads the file
  np.testing.assert_array_equal(_call(x, y)[0], _direct(x, y)[0])
  assert stored.read_bytes() != b"not a program"  # traced anew and replaced
  if os.geteuid() != 0:  # root writes through permissions
    os.chmod(program_dir, 0o500)
    stored.unlink()
    try:
      np.testing.assert_array_equal(_call(x, y)[0], _direct(x, y)[0])
    finally:
      os.chmod(program_dir, 0o700)


def test_jax_clear_caches_releases_the_loaded_executables(program_dir):
  x, y = np.ones(4), np.ones(4)
  _call(x, y)
  assert len(sp._LOADED) == 1
  jax.clear_caches()
  assert not sp._LOADED


def test_no_cache_directory_means_no_stored_program(monkeypatch, tmp_path):
  monkeypatch.setattr(sp, "program_dir", lambda: None)
  x, y = np.ones(4), np.ones(4)
  np.testing.assert_array_equal(_call(x, y)[0], _direct(x, y)[0])
  assert not list(tmp_path.iterdir())


def _cli(tmp_path):
  script = (
    "import jaxrdp.cli, sys; code = jaxrdp.cli.main("
    "['epsilon', '--q', '0.01', '--sigma', '1.0', '--steps', '1000', '--delta', '1e-5']); "
    "print('modules:', ' '.join(sorted(sys.modules)), file=sys.stderr); sys.exit(code)"
  )
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, JAXRDP_CACHE_DIR=str(tmp_path), JAX_LOG_COMPILES="1")
  env["JAX_COMPILATION_CACHE_DIR"] = ""  # the CLI's own cache, not the test session's
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  env.pop("JAX_ENABLE_X64", None)
  proc = subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout, proc.stderr


def test_a_fresh_process_answers_without_tracing_the_order_search(tmp_path):
  # The CLI turns the persistent cache on; the second process loads the stored
  # executable, and neither traces nor compiles. Its answer is the first one's.
  first, log = _cli(tmp_path)
  assert "Finished tracing _dpsgd_epsilon_f64 for" in log  # the check can fail
  assert len(list((tmp_path / "jaxrdp-programs").iterdir())) == 1
  second, log = _cli(tmp_path)
  assert "Finished tracing _dpsgd_epsilon_f64 for" not in log
  assert second == first
  # Nor does it import what a one-number query does not use: LAPACK's start-up
  # (scipy.linalg, which jax.export's call initializes), the tight accountant,
  # the training step, calibration, sweeps.
  (modules,) = [line.split()[1:] for line in log.splitlines() if line.startswith("modules:")]
  unused = (
    "scipy",
    "jaxrdp.pld",
    "jaxrdp.train._step",
    "jaxrdp.calibration",
    "jaxrdp.sweeps._sweep",
  )
  assert not [m for m in modules if m.startswith(unused)]
