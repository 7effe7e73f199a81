"""Traced programs kept on disk, so that a fresh process skips tracing them.

A concrete ``dpsgd_epsilon`` call spends most of a fresh process's time before
XLA: tracing the order search and lowering it to StableHLO takes several
seconds, and JAX's persistent compilation cache only saves the compilation
that follows. Where the user (or the CLI) has turned that cache on, jaxrdp also
keeps the lowered program itself, serialized with :mod:`jax.export`, beside it
(``<jax_compilation_cache_dir>/jaxrdp-programs``). A later process loads it,
and the compiled executable comes from JAX's cache: no tracing, no lowering.

The file name is a digest of everything the program depends on: the entry
point, its static configuration, the argument shapes and dtypes, the JAX and
jaxlib versions, the backend, and the source code of the installed jaxrdp
package. Editing jaxrdp therefore never reuses a program traced from older
code. Without a cache directory, or when anything about the stored program
fails (a damaged file, a read-only directory, no ``flatbuffers``), the call is
made directly, as it always is inside a trace.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import tempfile

import jax
import numpy as np

__all__ = ["call_stored", "program_dir"]

_SUBDIR = "jaxrdp-programs"
_MAX_LOADED = 32
_LOADED: dict = {}  # path -> jitted call of the loaded program, oldest first


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


def _static_part(value) -> str:
  array = getattr(value, "array", None)  # StaticArray
  if isinstance(array, np.ndarray):
    value = array
  if isinstance(value, np.ndarray):
    return f"array{value.shape}{value.dtype}:{hashlib.sha256(value.tobytes()).hexdigest()}"
  return repr(value)


def _key(name: str, args, static: dict) -> str:
  import jaxlib

  parts = [
    name,
    jax.__version__,
    jaxlib.__version__,
    jax.default_backend(),
    _source_digest(),
    *(f"{np.shape(a)}:{np.dtype(a.dtype)}" for a in args),
    *(f"{k}={_static_part(v)}" for k, v in sorted(static.items())),
  ]
  return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _load_or_export(path: pathlib.Path, name: str, fn, args, static: dict):
  from jax import export

  try:
    return export.deserialize(bytearray(path.read_bytes()))
  except Exception:  # absent or unreadable: trace it anew below
    pass
  specs = [jax.ShapeDtypeStruct(np.shape(a), a.dtype) for a in args]

  def program(*a):
    return tuple(fn(*a, **static))

  program.__name__ = program.__qualname__ = name  # as JAX's logs name it
  exported = export.export(jax.jit(program))(*specs)
  data = exported.serialize()
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
  except OSError:
    pass  # a read-only cache: the program still runs, it is only not kept
  return exported


def call_stored(name: str, fn, result_type, args, static: dict):
  """``result_type(*fn(*args, **static))``, from a stored program where possible.

  Args:
    name: the entry point's name (part of the key).
    fn: a function of array arguments and static keywords returning a tuple of
      arrays (a NamedTuple is fine).
    result_type: rebuilds the result from the tuple of outputs.
    args: concrete array arguments (NumPy arrays; their shapes and dtypes are
      part of the key).
    static: the static keyword arguments (hashable; StaticArray allowed).
  """
  where = program_dir()
  if where is None or any(isinstance(a, jax.core.Tracer) for a in args):
    return fn(*args, **static)
  try:
    import flatbuffers  # noqa: F401  (jax.export's serialization needs it)
  except ImportError:
    return fn(*args, **static)
  # Arrays (a Python number as a NumPy scalar), so that every argument has a dtype.
  args = tuple(a if isinstance(a, jax.Array) else np.asarray(a) for a in args)
  path = where / (_key(name, args, static) + ".exported")
  run = _LOADED.get(path)
  if run is None:
    run = jax.jit(_load_or_export(path, name, fn, args, static).call)
  try:
    outputs = run(*args)
  except Exception:  # a stored file that parsed but does not run: trace anew
    _LOADED.pop(path, None)
    path.unlink(missing_ok=True)
    return fn(*args, **static)
  # One jitted caller per program and process, so that later calls neither read
  # the file nor trace again (a few dozen: each holds a compiled executable).
  _LOADED[path] = run
  while len(_LOADED) > _MAX_LOADED:
    _LOADED.pop(next(iter(_LOADED)))
  return result_type(*outputs)
