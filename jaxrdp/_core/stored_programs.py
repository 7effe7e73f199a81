"""Compiled programs kept on disk, so that a fresh process skips tracing them.

A concrete ``dpsgd_epsilon`` call spends most of a fresh process's time before it
computes anything: tracing the order search and lowering it to StableHLO take
seconds, and JAX's persistent compilation cache only saves the compilation that
follows (it needs the lowered program to compute its key). Where the user (or
the CLI) has turned that cache on, jaxrdp also keeps the compiled executable
itself, serialized with :mod:`jax.experimental.serialize_executable`, beside it
(``<jax_compilation_cache_dir>/jaxrdp-programs``). A later process loads it and
runs it: no tracing, no lowering, no cache look-up.

The file name is a digest of everything the executable depends on: the entry
point, its static configuration, the argument shapes and dtypes, the JAX and
jaxlib versions, the device it was compiled for (platform, its version, kind,
topology fingerprint, number of devices), the host's architecture and CPU
features, ``XLA_FLAGS``, and the source code of the installed jaxrdp package. Editing jaxrdp therefore never reuses a program
compiled from older code, and a cache directory shared by machines of another
kind never hands one of them the other's machine code. Without a cache
directory, or when anything about the stored program fails (a damaged file, a
read-only directory, an executable that cannot be serialized), the call is made
directly, as it always is inside a trace.

A stored file is loaded with :mod:`pickle` and holds machine code that is run:
like JAX's own cache directory, it must be writable by its user only.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import pickle
import tempfile

import jax
import numpy as np

__all__ = ["call_stored", "program_dir"]

_SUBDIR = "jaxrdp-programs"
_SUFFIX = ".xla"
_MAX_LOADED = 32


class _Loaded(dict):
  """path -> loaded executable (jax.stages.Compiled), oldest first.

  Each holds its machine code (on a CPU, about a thousand memory mappings), so
  ``jax.clear_caches()`` empties this too, as it drops JAX's own executables
  (JAX keeps its caches in a weak-key dictionary: hashed by identity).
  """

  __hash__ = object.__hash__
  __eq__ = object.__eq__

  def cache_clear(self):
    self.clear()

  def cache_info(self):
    return f"{len(self)} loaded executables"

  def cache_keys(self):
    return list(self)


_LOADED = _Loaded()
try:
  from jax._src import util as _jax_util

  _jax_util.register_cache(_LOADED, "jaxrdp stored programs")
except Exception:  # pragma: no cover (a JAX without it: the cache is only bounded)
  pass


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
  """Digest of the jaxrdp package's Python sources (read once per process)."""
  root = pathlib.Path(__file__).resolve().parents[1]
  h = hashlib.sha256()
  for path in sorted(root.rglob("*.py")):
    h.update(str(path.relative_to(root)).encode())
    h.update(path.read_bytes())
  return h.hexdigest()


def program_dir() -> pathlib.Path | None:
  """Where stored programs live: beside JAX's persistent cache, or None (off)."""
  base = jax.config.jax_compilation_cache_dir
  return pathlib.Path(base) / _SUBDIR if base else None


def _device():
  """The device a concrete call runs on (JAX's default device), or None where it
  is not one device object (then nothing is stored)."""
  device = jax.config.jax_default_device
  if device is None:
    return jax.devices()[0]
  return device if isinstance(device, jax.Device) else None


@functools.lru_cache(maxsize=1)
def _host() -> str:
  """The host's architecture and CPU features: XLA compiles CPU code for the host
  it runs on, so an executable from a cache directory shared with another kind of
  machine could use instructions this one lacks."""
  flags = ""
  try:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
      for line in f:
        if line.startswith(("flags", "Features")):  # x86, ARM
          flags = line.split(":", 1)[1].strip()
          break
  except OSError:  # not Linux: the architecture and the topology fingerprint
    pass
  return f"{os.uname().machine if hasattr(os, 'uname') else ''}:{flags}"


def _device_part(device) -> str:
  """The device and the host, as far as a compiled executable depends on them."""
  from jax._src.lib import xla_client

  try:  # what JAX's own cache key hashes
    fingerprint = xla_client.get_topology_for_devices([device]).fingerprint()
  except Exception:
    fingerprint = None
  client = device.client
  return (
    f"{client.platform}:{client.platform_version}:{device.device_kind}:{device.id}:"
    f"{len(client.devices())}:{fingerprint}:{_host()}:{os.environ.get('XLA_FLAGS', '')}"
  )


def _static_part(value) -> str:
  array = getattr(value, "array", None)  # StaticArray
  if isinstance(array, np.ndarray):
    value = array
  if isinstance(value, np.ndarray):
    return f"array{value.shape}{value.dtype}:{hashlib.sha256(value.tobytes()).hexdigest()}"
  return repr(value)


def _key(name: str, args, static: dict, device=None) -> str:
  import jaxlib

  device = _device() if device is None else device
  parts = [
    name,
    jax.__version__,
    jaxlib.__version__,
    _device_part(device),
    _source_digest(),
    *(f"{np.shape(a)}:{np.dtype(a.dtype)}" for a in args),
    *(f"{k}={_static_part(v)}" for k, v in sorted(static.items())),
  ]
  return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _load(path: pathlib.Path, device):
  """The executable stored at ``path``, loaded onto ``device``; None if absent or unreadable."""
  from jax.experimental import serialize_executable

  try:
    payload, in_tree, out_tree = pickle.loads(path.read_bytes())
    return serialize_executable.deserialize_and_load(
      payload, in_tree, out_tree, backend=device.client, execution_devices=[device]
    )
  except Exception:  # absent, damaged, or from a JAX that cannot read it: compile anew
    return None


def _compile_and_store(path: pathlib.Path, fn, args, static: dict):
  """Traces, compiles and stores the program; returns the compiled executable.

  The program is a new ``jax.jit`` of the Python function itself (of what ``fn``
  wraps, when ``fn`` is jitted), so that it is the program a direct call compiles,
  not a call of it nested in another (2.3 MB instead of 2.0 MB for the order
  search), and a fresh executable: JAX's in-memory cache could otherwise hand
  back the direct call's, and an XLA:CPU executable that has run a sort can no
  longer be serialized.
  """
  from jax.experimental import serialize_executable

  body = getattr(fn, "__wrapped__", fn)

  def program(*a):
    return body(*a, **static)

  program.__name__ = program.__qualname__ = getattr(body, "__name__", "program")
  specs = [jax.ShapeDtypeStruct(np.shape(a), a.dtype) for a in args]
  lowered = jax.jit(program).lower(*specs)
  compiled = lowered.compile()
  try:
    data = pickle.dumps(serialize_executable.serialize(compiled))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
  except Exception:
    pass  # a read-only cache, or an executable JAX cannot serialize: it still runs
  return compiled


def call_stored(name: str, fn, result_type, args, static: dict):
  """``result_type(*fn(*args, **static))``, from a stored executable where possible.

  Args:
    name: the entry point's name (part of the key).
    fn: a function of array arguments and static keywords returning a tuple of
      arrays (a NamedTuple is fine); for a jitted one (static keywords as its
      ``static_argnames``), the stored program is the one it compiles itself.
    result_type: rebuilds the result from the tuple of outputs.
    args: concrete array arguments (NumPy arrays; their shapes and dtypes are
      part of the key).
    static: the static keyword arguments (hashable; StaticArray allowed).
  """
  where = program_dir()
  if where is None or any(isinstance(a, jax.core.Tracer) for a in args):
    return fn(*args, **static)
  device = _device()
  if device is None:
    return fn(*args, **static)
  # Arrays (a Python number as a NumPy scalar), so that every argument has a dtype.
  args = tuple(a if isinstance(a, jax.Array) else np.asarray(a) for a in args)
  path = where / (_key(name, args, static, device) + _SUFFIX)
  run = _LOADED.get(path)
  if run is None:
    run = _load(path, device)
  if run is None:
    run = _compile_and_store(path, fn, args, static)
  try:
    outputs = run(*args)
  except Exception:  # a stored file that loaded but does not run: compile anew
    _LOADED.pop(path, None)
    path.unlink(missing_ok=True)
    return fn(*args, **static)
  # One loaded executable per program and process, so that later calls neither
  # read the file nor trace again (a few dozen: each holds a compiled executable).
  _LOADED[path] = run
  while len(_LOADED) > _MAX_LOADED:
    _LOADED.pop(next(iter(_LOADED)))
  return result_type(*outputs)
