"""Compiled programs kept in jaxrdp's private cache directory (jaxrdp._core.stored_programs).

A stored executable must give what the direct call gives, be found again by a
fresh process without tracing or compiling anything, never be reused for other
code, shapes, static configuration or devices, never break a call when the file
is damaged or cannot be written, never be read from a directory or file that
another user can write, and never change the user's JAX configuration.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def _canonical(compiled):
  """The compiled HLO with every name replaced by its order of appearance, and no
  source locations: the stored program is compiled without them (and under a name of
  its own), and XLA names instructions after them."""
  head, _, body = compiled.as_text().partition("\n")
  if "\nStackFrames\n" in body:  # the tables of source locations before the computations
    body = body.partition("\nStackFrames\n")[2].partition("\n\n")[2]
  body = re.sub(r", metadata=\{[^}]*\}", "", body)
  body = "\n".join(
    re.sub(r"[\w.\-]+: ", "p: ", line) if line.rstrip().endswith("{") and "->" in line else line
    for line in body.splitlines()
  )
  names = {}
  body = re.sub(r"%([\w.\-]+)", lambda m: "%" + names.setdefault(m.group(1), str(len(names))), body)
  body = re.sub(r"(calls=|to_apply=|condition=|body=)%", r"\1", body)
  return re.sub(r"HloModule [\w.\-]+", "HloModule m", head) + "\n" + body.strip()


def test_stored_program_is_the_program_of_the_direct_call(tmp_path):
  x, y = np.linspace(0.1, 2.0, 16), np.linspace(-1.0, 1.0, 16)
  with jax.enable_x64(True):
    stored = sp._compile_and_store(tmp_path / "p.xla", _kernel, (x, y), {"power": 3})
    direct = _kernel.lower(x, y, power=3).compile()
  assert "sort" in _canonical(stored) and "sine" in _canonical(stored)  # the check can fail
  assert _canonical(stored) == _canonical(direct)
  assert "metadata" not in stored.as_text()  # compiled without source locations


def test_a_program_already_run_directly_is_still_stored(program_dir):
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


def test_key_covers_the_source_code_and_jax_trace_context(program_dir, monkeypatch):
  x, y = np.ones(4), np.ones(4)
  before = sp._key("kernel", (x, y), {"power": 3})
  with jax.enable_x64(False):  # float64 off traces another program
    assert sp._key("kernel", (x, y), {"power": 3}) != before
  with jax.numpy_dtype_promotion("strict"):
    assert sp._key("kernel", (x, y), {"power": 3}) != before
  assert sp._key("kernel", (x, 1.0), {"power": 3}) != sp._key(
    "kernel", (x, np.ones(())), {"power": 3}
  )
  monkeypatch.setattr(sp, "_source_digest", lambda: "edited")
  assert sp._key("kernel", (x, y), {"power": 3}) != before


def test_key_covers_the_device_the_host_and_xla_flags(monkeypatch):
  x, y = np.ones(4), np.ones(4)
  before = sp._key("kernel", (x, y), {"power": 3})
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
  assert sp._key("kernel", (x, y), {"power": 3}) != before
  monkeypatch.delenv("XLA_FLAGS")
  monkeypatch.setattr(sp, "_DEVICE_PARTS", {})
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


def test_a_file_that_loads_but_does_not_run_is_replaced(program_dir, monkeypatch):
  # What XLA:CPU wrote when it serialized an executable that JAX had loaded from its
  # own persistent cache: a file that loads, then fails on its first run
  # ("NOT_FOUND: Function ... not found", raised when the result is waited for).
  # The failure must not reach the caller, and the file must go.
  x, y = np.linspace(0.1, 2.0, 16), np.linspace(-1.0, 1.0, 16)
  _call(x, y)
  sp._LOADED.clear()

  def broken(*args):
    raise RuntimeError("NOT_FOUND: Function broadcast_multiply_fusion not found")

  monkeypatch.setattr(sp, "_load", lambda path, device: broken)
  np.testing.assert_array_equal(_call(x, y)[0], _direct(x, y)[0])
  assert not list(program_dir.iterdir())  # deleted: the next process compiles anew
  assert not sp._LOADED


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


def test_stored_jit_is_the_jitted_function(program_dir):
  @functools.partial(sp.stored_jit, static_argnames=("k",))
  def f(x, pair, k=2):
    return {"sum": x * k + pair[0], "prod": pair[1] ** k}

  x, pair = np.arange(3.0), (np.ones(3), np.float32(2.0))
  with jax.enable_x64(True):
    want = jax.jit(f.__wrapped__, static_argnames="k")(x, pair, k=3)
    got = f(x, pair, 3)  # the static argument by position
    again = f(x, pair, k=3)
    traced = jax.jit(lambda x: f(x, pair, k=3))(x)  # inside a trace: the jitted function
  for out in (got, again, traced):
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(want)
    for a, b in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(want)):
      assert a.dtype == b.dtype
      np.testing.assert_array_equal(a, b)
  assert len(list(program_dir.iterdir())) == 1


# The cache directory: where, the switch, and the checks.


@pytest.fixture
def fresh_checks(monkeypatch):
  monkeypatch.setattr(sp, "_CHECKED", {})


def test_default_directory_and_the_switch(monkeypatch, tmp_path, fresh_checks):
  monkeypatch.delenv(sp.ENV_VAR, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  if sys.platform.startswith("linux"):
    assert sp.default_cache_root() == tmp_path / "xdg" / "jaxrdp"
    assert sp.program_dir() == tmp_path / "xdg" / "jaxrdp" / "programs"
    assert (tmp_path / "xdg" / "jaxrdp" / "programs").stat().st_mode & 0o077 == 0
  monkeypatch.setenv(sp.ENV_VAR, str(tmp_path / "mine"))
  assert sp.program_dir() == tmp_path / "mine" / "programs"
  monkeypatch.setenv(sp.ENV_VAR, "")
  assert sp.cache_root() is None and sp.program_dir() is None


def test_the_switch_turns_stored_programs_off(monkeypatch, tmp_path, fresh_checks):
  monkeypatch.setenv(sp.ENV_VAR, "")
  sp._LOADED.clear()
  x, y = np.ones(4), np.ones(4)
  np.testing.assert_array_equal(_call(x, y)[0], _direct(x, y)[0])
  assert not sp._LOADED


@pytest.mark.skipif(os.name != "posix", reason="POSIX ownership and modes")
@pytest.mark.parametrize("mode", [0o777, 0o722, 0o1777])
def test_a_directory_others_can_write_is_refused(monkeypatch, tmp_path, fresh_checks, mode):
  shared = tmp_path / "shared"
  shared.mkdir()
  os.chmod(shared, mode)
  monkeypatch.setenv(sp.ENV_VAR, str(shared))
  monkeypatch.setattr(sp, "_private_group", lambda gid: False)
  with pytest.warns(RuntimeWarning, match=r"shared is writable by (all users|group \d+).*pickle"):
    assert sp.program_dir() is None
  sp._LOADED.clear()
  x, y = np.ones(4), np.ones(4)
  np.testing.assert_array_equal(_call(x, y)[0], _direct(x, y)[0])  # runs without the cache
  assert list(shared.iterdir()) == []


@pytest.mark.skipif(os.name != "posix", reason="POSIX ownership and modes")
def test_a_directory_below_one_others_can_write_is_refused(monkeypatch, tmp_path, fresh_checks):
  shared = tmp_path / "shared"
  (shared / "mine").mkdir(parents=True, mode=0o700)
  os.chmod(shared, 0o777)  # not sticky: another user could rename "mine" and put theirs
  monkeypatch.setenv(sp.ENV_VAR, str(shared / "mine"))
  with pytest.warns(RuntimeWarning, match="shared is writable by all users"):
    assert sp.cache_root() is None
  os.chmod(shared, 0o1777)  # sticky, as /tmp: only the owner renames or deletes "mine"
  monkeypatch.setattr(sp, "_CHECKED", {})
  assert sp.cache_root() == shared / "mine"


@pytest.mark.skipif(os.name != "posix", reason="POSIX ownership and modes")
def test_a_directory_another_user_owns_is_refused(monkeypatch, tmp_path, fresh_checks):
  monkeypatch.setenv(sp.ENV_VAR, str(tmp_path / "theirs"))
  (tmp_path / "theirs").mkdir(mode=0o700)
  if os.geteuid() == 0:
    os.chown(tmp_path / "theirs", 12345, 12345)
  else:  # this process as another user: the directory is someone else's
    real = os.geteuid()
    monkeypatch.setattr(sp.os, "geteuid", lambda: real + 1)
  with pytest.warns(RuntimeWarning, match="theirs is owned by another user"):
    assert sp.cache_root() is None


@pytest.mark.skipif(os.name != "posix", reason="POSIX ownership and modes")
def test_a_file_others_can_write_is_not_loaded(program_dir, monkeypatch):
  x, y = np.linspace(0.1, 2.0, 16), np.linspace(-1.0, 1.0, 16)
  _call(x, y)
  (stored,) = list(program_dir.iterdir())
  assert stored.stat().st_mode & 0o077 == 0  # written private
  os.chmod(stored, 0o666)
  assert sp._read_private(stored) is None
  sp._LOADED.clear()
  compiled = []
  real = sp._compile_and_store
  monkeypatch.setattr(sp, "_compile_and_store", lambda *a: compiled.append(1) or real(*a))
  np.testing.assert_array_equal(_call(x, y)[0], _direct(x, y)[0])
  assert compiled == [1]  # not loaded: compiled again and replaced by a private file
  assert stored.stat().st_mode & 0o077 == 0


# Fresh processes.


def _python(code, cache, extra_env=None, jax_cache=""):
  env = dict(os.environ, JAXRDP_CACHE_DIR=str(cache), JAX_LOG_COMPILES="1")
  env["JAX_COMPILATION_CACHE_DIR"] = jax_cache  # none, unless the test asks for one
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  env.pop("JAX_ENABLE_X64", None)
  env.update(extra_env or {})
  proc = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout, proc.stderr


_API = """
import warnings, jax, jaxrdp
warnings.simplefilter("error")
print(repr(tuple(map(float, jaxrdp.dpsgd_epsilon(0.01, 1.0, 1000, 1e-5)))))
print(repr(tuple(map(float, jaxrdp.dpsgd_epsilon(0.01, 1.0, 1000, 1e-5, accountant="pld")))))
assert not jax.config.jax_compilation_cache_dir, "the user's JAX configuration changed"
assert not jax.config.jax_enable_x64
"""


def test_a_fresh_process_answers_both_accountants_without_compiling(tmp_path):
  # The library's own API keeps its programs by default: the second process loads
  # them, and neither traces nor compiles anything (no operation dispatched one by
  # one either). Its answers are the first one's, bit for bit.
  first, log = _python(_API, tmp_path)
  assert "Finished XLA compilation of jit(_dpsgd_epsilon_f64" in log  # the check can fail
  assert "Finished XLA compilation of jit(run_job" in log
  second, log = _python(_API, tmp_path)
  assert second == first
  assert "Finished tracing" not in log and "Finished XLA compilation" not in log, log[-2000:]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["programs"]  # nothing for JAX's cache


_STORE_OR_LOAD = """
import functools, jax, jax.numpy as jnp, numpy as np
from jaxrdp._core import stored_programs as sp
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

@functools.partial(jax.jit, static_argnames=("k",))
def f(x, y, k):
  return jnp.exp(x)[:, None] * jnp.log1p(y)[None, :] * k, jnp.sort(x)

x, y = np.linspace(0.1, 2.0, 8), np.linspace(0.0, 1.0, 8)
want = jax.block_until_ready(f(x, y, k=3))  # the direct call: JAX's cache gets its executable
got = sp.call_stored("f", f, lambda *out: out, (x, y), {"k": 3})
for g, w in zip(got, want):
  np.testing.assert_array_equal(g, w)
print("kept:", len(sp._LOADED))
"""


def test_a_program_jax_loaded_from_its_own_cache_is_not_stored_again(tmp_path):
  # The crash of `jaxrdp calibrate ...` then `jaxrdp epsilon ... --capacity ...` on a
  # fresh JAXRDP_CACHE_DIR ("NOT_FOUND: Function broadcast_multiply_fusion not
  # found"): with JAX's persistent cache on (the CLI turns it on), the compilation
  # of a program for storing was answered from JAX's cache, with an executable JAX
  # had loaded from disk, and XLA:CPU serializes such an executable without all of
  # its code. The next process loaded the file and failed on its first run.
  cache, jax_cache = tmp_path / "jaxrdp", str(tmp_path / "jax")
  out, _ = _python(_STORE_OR_LOAD, cache, jax_cache=jax_cache)  # compiles and stores
  (stored,) = (cache / "programs").iterdir()
  written = stored.stat()
  out, log = _python(_STORE_OR_LOAD, cache, jax_cache=jax_cache)  # loads and runs it
  assert out.strip() == "kept: 1", log[-2000:]  # loaded and kept, not deleted as broken
  assert stored.stat().st_ino == written.st_ino  # nor replaced
  assert "Compiling f_" not in log and "Finished tracing f_" not in log


def test_the_cli_answers_without_tracing_the_order_search(tmp_path):
  # The second process loads the stored executable, and neither traces nor
  # compiles. Its answer is the first one's.
  code = (
    "import jaxrdp.cli, sys; code = jaxrdp.cli.main("
    "['epsilon', '--q', '0.01', '--sigma', '1.0', '--steps', '1000', '--delta', '1e-5']); "
    "print('modules:', ' '.join(sorted(sys.modules)), file=sys.stderr); sys.exit(code)"
  )
  first, log = _python(code, tmp_path)
  assert "Finished tracing _dpsgd_epsilon_f64" in log  # the check can fail
  assert len(list((tmp_path / "programs").iterdir())) == 1
  assert (tmp_path / "xla").is_dir()  # JAX's cache, for the command's other programs
  second, log = _python(code, tmp_path)
  assert "Finished tracing _dpsgd_epsilon_f64" not in log
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


@pytest.mark.parametrize("missing", ["module", "name"])
@pytest.mark.parametrize("private", ["lib", "config"])
def test_a_jax_without_a_private_name_makes_the_call_directly(
  program_dir, monkeypatch, missing, private
):
  # The key reads private names of JAX (jax._src.lib.xla_client, jax._src.config's
  # trace context); a JAX without one (its module, or the name in it) stores and loads
  # nothing, warns nothing, and gives the direct call's answers.
  import types
  import warnings

  real, compile_and_store = sp.import_module, sp._compile_and_store

  def without(path):
    if path == f"jax._src.{private}":
      if missing == "module":
        raise ModuleNotFoundError(f"No module named {path!r}")
      return types.ModuleType(path)  # the module, without the name
    return real(path)

  monkeypatch.setattr(sp, "import_module", without)
  monkeypatch.setattr(sp, "_DEVICE_PARTS", {})  # as in a fresh process
  monkeypatch.setattr(
    sp, "_compile_and_store", lambda *a: pytest.fail("compiled for storing without a key")
  )
  x, y = np.linspace(0.1, 2.0, 16), np.linspace(-1.0, 1.0, 16)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = _call(x, y)
    again = _call(x, y)
  assert caught == []
  assert list(program_dir.iterdir()) == []  # nothing stored
  assert not sp._LOADED
  for out in (got, again):
    for a, b in zip(out, _direct(x, y)):
      np.testing.assert_array_equal(a, b)
  # The names are read through sp._private: with them back, the program is stored.
  monkeypatch.setattr(sp, "import_module", real)
  monkeypatch.setattr(sp, "_compile_and_store", compile_and_store)
  _call(x, y)
  assert len(list(program_dir.iterdir())) == 1
