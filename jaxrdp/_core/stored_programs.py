"""Compiled programs kept on disk, so that a fresh process neither traces nor compiles them.

A concrete call of one of jaxrdp's kernels spends most of a fresh process's time
before it computes anything: tracing the program, lowering it to StableHLO and
compiling it take seconds (the Renyi-DP order search, the PLD accountant's jobs).
jaxrdp therefore keeps the compiled executables of its own programs, serialized
with :mod:`jax.experimental.serialize_executable`, in a private per-user cache
directory, and a later process loads and runs them: no tracing, no lowering, no
compilation, no look-up in JAX's cache. Nothing about the user's JAX configuration
changes: JAX's persistent compilation cache stays as the user set it (off by
default), and only the programs jaxrdp runs through :func:`stored_jit` or
:func:`call_stored` are kept.

Where (see :func:`cache_root`): ``$JAXRDP_CACHE_DIR`` if set, else the platform's
per-user cache directory (``$XDG_CACHE_HOME/jaxrdp`` or ``~/.cache/jaxrdp`` on
Linux, ``~/Library/Caches/jaxrdp`` on macOS, ``%LOCALAPPDATA%\\jaxrdp\\Cache`` on
Windows); the programs are in its ``programs`` folder. ``JAXRDP_CACHE_DIR=""``
turns the cache off.

A stored file is loaded with :mod:`pickle` and holds machine code that is run, so
the directory must be private: a directory (or one above it) that another user
owns or can write to is refused with a warning that says why, and the process
runs without the cache. Files are created readable and writable by their owner
only, and a file that another user owns, or that others can write to, is not
loaded.

The file name is a digest of everything the executable depends on: the entry
point, its static configuration, the arguments' tree, shapes, dtypes and weak
types, JAX's trace context (float64 on or off, dtype promotion, ...), the JAX and
jaxlib versions, the device it was compiled for (platform, its version, kind,
topology fingerprint, number of devices), the host's architecture and CPU
features, ``XLA_FLAGS``, and the source code of the installed jaxrdp package.
Editing jaxrdp therefore never reuses a program compiled from older code, and a
cache directory shared by machines of another kind never hands one of them the
other's machine code. Without a cache directory, inside a trace, when anything
about the stored program fails (a damaged file, a read-only directory, an
executable that cannot be serialized), or with a JAX that lacks a private name the
key needs (outside the range pyproject.toml declares: :func:`_private`), the call is
made directly.

Two pitfalls of XLA:CPU that this module avoids (jaxlib 0.10): an executable that
JAX loaded from its own persistent cache loses machine code when serialized again
(a later process that loads it fails with ``NOT_FOUND: Function ... not found``),
and an executable that has run a sort can no longer be serialized. So every
stored program is compiled afresh for storing, under a name no earlier
compilation used (JAX's cache, where the user or the ``jaxrdp`` command turned
it on, cannot answer it), and a loaded file's first run is waited for, so that a
file that loads but does not run is deleted and the call made directly.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import pathlib
import pickle
import stat
import sys
import tempfile
import threading
import uuid
import warnings
from importlib import import_module

import jax
import numpy as np

__all__ = [
  "ENV_VAR",
  "cache_root",
  "call_stored",
  "default_cache_root",
  "program_dir",
  "stored_jit",
]

ENV_VAR = "JAXRDP_CACHE_DIR"
_PROGRAMS = "programs"
_SUFFIX = ".xla"
_MAX_LOADED = 32


class _Loaded(dict):
  """key -> loaded executable (jax.stages.Compiled), oldest first.

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


def _private(module: str, name: str):
  """``jax._src.<module>.<name>``, a private name of JAX, or None where this JAX has none.

  jaxrdp is tested with the JAX range that pyproject.toml declares; with another JAX
  a private name may be gone. Without the names the key needs (the device's client,
  the trace context) no program is stored and every call is made directly; without
  the others, less is done (see where each is used).
  """
  try:
    return getattr(import_module(f"jax._src.{module}"), name)
  except (ImportError, AttributeError):
    return None


class _NoKey(Exception):
  """This JAX lacks a private name the key needs: the call is made directly."""


_LOADED = _Loaded()
_register_cache = _private("util", "register_cache")
if _register_cache is not None:  # a JAX without it: the loaded programs are only bounded
  try:
    _register_cache(_LOADED, "jaxrdp stored programs")
  except Exception:  # pragma: no cover
    pass

_LOCK = threading.Lock()
_KEY_LOCKS: dict[str, threading.Lock] = {}


# ---------------------------------------------------------------------------
# Where: the private per-user cache directory.


def default_cache_root() -> pathlib.Path:
  """The platform's per-user cache directory for jaxrdp (used when $JAXRDP_CACHE_DIR is unset)."""
  home = pathlib.Path.home()
  if sys.platform == "darwin":
    return home / "Library" / "Caches" / "jaxrdp"
  if os.name == "nt":
    base = os.environ.get("LOCALAPPDATA")
    return (pathlib.Path(base) if base else home / "AppData" / "Local") / "jaxrdp" / "Cache"
  base = os.environ.get("XDG_CACHE_HOME", "")
  # (the XDG specification: a relative path is invalid and ignored)
  return (pathlib.Path(base) if os.path.isabs(base) else home / ".cache") / "jaxrdp"


def _private_group(gid: int) -> bool:
  """Whether group ``gid`` is this user's own (a user-private group: named after the
  user, this user's primary group, no other listed member), so that its write
  permission lets no other user in."""
  try:
    import grp
    import pwd

    me = pwd.getpwuid(os.geteuid())
    group = grp.getgrgid(gid)
  except (ImportError, KeyError, OSError):
    return False
  return gid == me.pw_gid and group.gr_name == me.pw_name and set(group.gr_mem) <= {me.pw_name}


def _unsafe(path: str) -> str | None:
  """Why the directory ``path`` (absolute, resolved, existing) is not private, or None.

  The directory itself must be owned by this user and writable by no one else;
  every directory above it must be owned by this user or root and writable by no
  one else, unless it is sticky (``/tmp``: others cannot rename or delete what
  they do not own). A group's write permission counts as another user's unless
  the group is the user's own private group.
  """
  uid = os.geteuid()
  current, leaf = path, True
  while True:
    try:
      st = os.stat(current)
    except OSError as e:
      return f"{current} cannot be inspected ({e.strerror or e})"
    if not stat.S_ISDIR(st.st_mode):
      return f"{current} is not a directory"
    if st.st_uid != uid and (leaf or st.st_uid != 0):
      return f"{current} is owned by another user (uid {st.st_uid}; this process runs as {uid})"
    others = st.st_mode & stat.S_IWOTH
    group = st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid)
    if (others or group) and (leaf or not st.st_mode & stat.S_ISVTX):
      who = "all users" if others else f"group {st.st_gid}"
      return f"{current} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
    parent = os.path.dirname(current)
    if parent == current:
      return None
    current, leaf = parent, False


_CHECKED: dict[str, pathlib.Path | None] = {}


def private_dir(path: pathlib.Path) -> pathlib.Path | None:
  """``path``, created (mode 0700) if absent, if it is private; else None and a warning.

  The verdict is kept for the process (one warning per directory).
  """
  key = str(path)
  if key in _CHECKED:
    return _CHECKED[key]
  reason = None
  try:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    real = os.path.realpath(path)
  except OSError as e:
    reason = f"it cannot be created ({e.strerror or e})"
  if reason is None and os.name == "posix":
    reason = _unsafe(real)
  result = None
  if reason is None:
    result = pathlib.Path(real)
  else:
    warnings.warn(
      f"jaxrdp does not use the compiled-program cache {path}: {reason}. Stored programs "
      "are loaded with pickle and run, so the directory must be private to its user; "
      f"set {ENV_VAR} to a directory only you can write to, or {ENV_VAR}='' to turn the "
      "cache off. This process runs without it.",
      RuntimeWarning,
      stacklevel=4,
    )
  _CHECKED[key] = result
  return result


def cache_root() -> pathlib.Path | None:
  """jaxrdp's private cache directory, checked; None when it is off or refused.

  ``$JAXRDP_CACHE_DIR`` if set (``""``: off), else :func:`default_cache_root`.
  Read at every call (the check itself once per process and directory).
  """
  value = os.environ.get(ENV_VAR)
  if value is not None and not value.strip():
    return None
  path = pathlib.Path(value).expanduser() if value else default_cache_root()
  return private_dir(path.absolute())


def program_dir() -> pathlib.Path | None:
  """Where stored programs live (``<cache_root>/programs``), or None (off)."""
  root = cache_root()
  return None if root is None else private_dir(root / _PROGRAMS)


# ---------------------------------------------------------------------------
# What: the key.


def _device():
  """The device a concrete call runs on (JAX's default device), or None where it
  is not one device object (then nothing is stored)."""
  device = jax.config.jax_default_device
  if device is None:
    return jax.devices()[0]
  return device if isinstance(device, jax.Device) else None


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
  """Digest of the jaxrdp package's Python sources (read once per process)."""
  root = pathlib.Path(__file__).resolve().parents[1]
  h = hashlib.sha256()
  for path in sorted(root.rglob("*.py")):
    h.update(str(path.relative_to(root)).encode())
    h.update(path.read_bytes())
  return h.hexdigest()


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


_DEVICE_PARTS: dict = {}


def _device_part(device) -> str:
  """The device and the host, as far as a compiled executable depends on them."""
  part = _DEVICE_PARTS.get(device)
  if part is None:
    xla_client = _private("lib", "xla_client")
    if xla_client is None:
      raise _NoKey("jax._src.lib.xla_client")
    try:  # what JAX's own cache key hashes
      fingerprint = xla_client.get_topology_for_devices([device]).fingerprint()
    except Exception:
      fingerprint = None
    client = device.client
    part = (
      f"{client.platform}:{client.platform_version}:{device.device_kind}:{device.id}:"
      f"{len(client.devices())}:{fingerprint}:{_host()}"
    )
    _DEVICE_PARTS[device] = part
  return f"{part}:{os.environ.get('XLA_FLAGS', '')}"


def _trace_context() -> str:
  """JAX's configuration as far as it changes what tracing produces (float64,
  dtype promotion, matmul precision, ...): the part of ``jit``'s own cache key
  that can be written down (objects without a stable text are left out; the
  default device is keyed apart). A JAX without it stores nothing (``_NoKey``): a key
  that missed a setting could hand back a program traced under another."""
  trace_context = _private("config", "trace_context")
  trace_context_names = _private("config", "trace_context_names")
  if trace_context is None or trace_context_names is None:
    raise _NoKey("jax._src.config.trace_context")
  values, names = trace_context(), trace_context_names()
  parts = []
  for name, value in zip(names, values):
    text = repr(value)
    if name != "jax_default_device" and " at 0x" not in text:
      parts.append(f"{name}={text}")
  return ",".join(parts)


def _static_part(value) -> str:
  array = getattr(value, "array", None)  # StaticArray
  if isinstance(array, np.ndarray):
    value = array
  if isinstance(value, np.ndarray):
    return f"array{value.shape}{value.dtype}:{hashlib.sha256(value.tobytes()).hexdigest()}"
  return repr(value)


def _spec(leaf) -> jax.ShapeDtypeStruct:
  """The abstract value ``jax.jit`` traces ``leaf`` as (weak types included)."""
  aval = jax.typeof(leaf)
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _key(name: str, args, static: dict, device=None) -> str:
  import jaxlib

  device = _device() if device is None else device
  leaves, tree = jax.tree_util.tree_flatten(args)
  parts = [
    name,
    jax.__version__,
    jaxlib.__version__,
    _device_part(device),
    _source_digest(),
    _trace_context(),
    str(tree),
    *(f"{s.shape}:{np.dtype(s.dtype)}:{'weak' if s.weak_type else ''}" for s in map(_spec, leaves)),
    *(f"{k}={_static_part(v)}" for k, v in sorted(static.items())),
  ]
  return hashlib.sha256("\n".join(parts).encode()).hexdigest()


# ---------------------------------------------------------------------------
# Loading and storing.


def _read_private(path: pathlib.Path) -> bytes | None:
  """The bytes of ``path`` if it is a regular file of this user that no one else can
  write (see the module docstring), else None."""
  flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
  try:
    fd = os.open(path, flags)
  except OSError:
    return None
  with os.fdopen(fd, "rb") as f:
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode):
      return None
    if os.name == "posix" and (st.st_uid != os.geteuid() or st.st_mode & 0o022):
      return None
    return f.read()


def _load(path: pathlib.Path, device):
  """The executable stored at ``path``, loaded onto ``device``; None if absent or unreadable."""
  from jax.experimental import serialize_executable

  try:
    data = _read_private(path)
    if data is None:
      return None
    payload, in_tree, out_tree = pickle.loads(data)
    return serialize_executable.deserialize_and_load(
      payload, in_tree, out_tree, backend=device.client, execution_devices=[device]
    )
  except Exception:  # damaged, or from a JAX that cannot read it: compile anew
    return None


_HITS = threading.local()


def _count_cache_hits(event: str, **kwargs) -> None:
  if event == "/jax/compilation_cache/cache_hits":
    _HITS.count = getattr(_HITS, "count", 0) + 1


try:
  jax.monitoring.register_event_listener(_count_cache_hits)
except Exception:  # pragma: no cover
  pass


def _no_persistent_cache_writes():
  """A thread-local scope in which JAX writes nothing to its persistent cache
  (where the user turned it on): a program compiled for storing is never looked
  up there again, so an entry would only take space."""
  import contextlib

  scope = _private("config", "persistent_cache_min_compile_time_secs")
  if scope is None:  # another JAX: it may write its entry
    return contextlib.nullcontext()
  try:
    return scope(float("inf"))
  except Exception:  # another JAX: it may write its entry
    return contextlib.nullcontext()


def _strip_debug_info(lowered) -> None:
  """Removes the source locations from the lowered module, in place where JAX hands
  out its own module (the executable then carries no per-instruction metadata:
  a smaller file that loads faster; the instructions are the same)."""
  try:
    from jax.extend.mlir import passmanager

    module = lowered.compiler_ir("stablehlo")
    with module.context:
      passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(module.operation)
  except Exception:  # pragma: no cover (another JAX: the metadata stays)
    pass


def _compile_fresh(fn, args, static: dict):
  """A freshly compiled executable of ``fn(*args, **static)`` and whether it was
  compiled here (see :func:`_compile_and_store`)."""
  body = getattr(fn, "__wrapped__", fn)

  def program(*a):
    return body(*a, **static)

  # A name no compilation used before: JAX's persistent cache (where it is on)
  # cannot answer with an executable it loaded from disk, which XLA:CPU cannot
  # serialize again completely. The name is the module's, not the instructions'.
  label = getattr(body, "__name__", "program")
  program.__name__ = program.__qualname__ = f"{label}_{uuid.uuid4().hex[:12]}"
  specs = jax.tree_util.tree_map(_spec, args)
  lowered = jax.jit(program).lower(*specs)
  _strip_debug_info(lowered)
  before = getattr(_HITS, "count", 0)
  with _no_persistent_cache_writes():
    compiled = lowered.compile()
  fresh = getattr(_HITS, "count", 0) == before
  return compiled, fresh


def _compile_and_store(path: pathlib.Path, fn, args, static: dict):
  """Traces, compiles and stores the program; returns the compiled executable.

  The program is a new ``jax.jit`` of the Python function itself (of what ``fn``
  wraps, when ``fn`` is jitted), so that it is the program a direct call compiles,
  not a call of it nested in another, and a fresh executable: JAX's in-memory
  cache could otherwise hand back the direct call's, and an XLA:CPU executable
  that has run a sort can no longer be serialized. It is stored only if it was
  compiled here (not loaded from JAX's persistent cache: see the module docstring).
  """
  from jax.experimental import serialize_executable

  compiled, fresh = _compile_fresh(fn, args, static)
  if not fresh:  # pragma: no cover (the unique name above prevents it)
    return compiled
  try:
    data = pickle.dumps(serialize_executable.serialize(compiled))
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")  # mode 0600
    try:
      with os.fdopen(fd, "wb") as f:
        f.write(data)
      os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
    except BaseException:
      os.unlink(tmp)
      raise
  except Exception:
    pass  # a read-only cache, a full disk, an executable JAX cannot serialize: it still runs
  return compiled


def _key_lock(key: str) -> threading.Lock:
  with _LOCK:
    return _KEY_LOCKS.setdefault(key, threading.Lock())


def _is_traced(args) -> bool:
  return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(args))


def _as_arrays(args):
  """NumPy and JAX arrays and Python scalars pass (jit's own treatment of them);
  anything else array-like (lists, other libraries' arrays) becomes a NumPy array."""

  def one(x):
    if isinstance(x, (jax.Array, np.ndarray, np.generic, bool, int, float, complex)):
      return x
    return np.asarray(x)

  return jax.tree_util.tree_map(one, args)


def _run_stored(name: str, fn, args: tuple, static: dict, direct):
  """``fn(*args, **static)`` from a stored executable where possible, else ``direct()``."""
  where = program_dir()
  if where is None or _is_traced(args):
    return direct()
  device = _device()
  if device is None:
    return direct()
  args = _as_arrays(args)
  try:
    key = _key(name, args, static, device)
  except _NoKey:  # a JAX without a private name the key needs
    return direct()
  run = _LOADED.get(key)
  from_disk = False
  if run is None:
    with _key_lock(key):  # threads asking for the same program compile it once
      run = _LOADED.get(key)
      if run is None:
        path = where / (key + _SUFFIX)
        run = _load(path, device)
        from_disk = run is not None
        if run is None:
          try:
            run = _compile_and_store(path, fn, args, static)
          except Exception:  # what the direct call would raise, it raises there
            return direct()
        else:
          try:  # wait for the first run: a stored file that loads but does not run fails here
            outputs = jax.block_until_ready(run(*args))
          except Exception:
            path.unlink(missing_ok=True)
            return direct()
        _LOADED[key] = run
        while len(_LOADED) > _MAX_LOADED:
          _LOADED.pop(next(iter(_LOADED)))
        if from_disk:
          return outputs
  try:
    return run(*args)
  except Exception:  # arguments the executable does not take (another device, say)
    return direct()


def call_stored(name: str, fn, result_type, args, static: dict):
  """``result_type(*fn(*args, **static))``, from a stored executable where possible.

  Args:
    name: the entry point's name (part of the key).
    fn: a function of array arguments and static keywords returning a tuple of
      arrays (a NamedTuple is fine); for a jitted one (static keywords as its
      ``static_argnames``), the stored program is the one it compiles itself.
    result_type: rebuilds the result from the tuple of outputs.
    args: concrete array arguments (arrays or Python numbers; their shapes, dtypes
      and weak types are part of the key).
    static: the static keyword arguments (hashable; StaticArray allowed).
  """
  args = tuple(args)
  outputs = _run_stored(name, fn, args, static, lambda: fn(*args, **static))
  return result_type(*outputs)


class _StoredJit:
  """A jitted function whose concrete calls run stored executables (:func:`stored_jit`)."""

  def __init__(self, fun, static_argnames, name):
    self._fun = fun
    self._jit = jax.jit(fun, static_argnames=static_argnames)
    self._signature = inspect.signature(fun)
    self._static = frozenset(static_argnames)
    self._name = name or f"{fun.__module__}.{fun.__qualname__}"
    functools.update_wrapper(self, fun)  # __wrapped__: the Python function

  def __call__(self, *args, **kwargs):
    if program_dir() is None:
      return self._jit(*args, **kwargs)
    bound = self._signature.bind(*args, **kwargs)
    bound.apply_defaults()
    names = [k for k in bound.arguments if k not in self._static]
    dynamic = tuple(bound.arguments[k] for k in names)
    static = {k: v for k, v in bound.arguments.items() if k in self._static}
    fun = self._fun

    def keyword_body(*values, **statics):
      return fun(**dict(zip(names, values)), **statics)

    keyword_body.__name__ = getattr(fun, "__name__", "program")
    return _run_stored(
      self._name, keyword_body, dynamic, static, lambda: self._jit(*args, **kwargs)
    )

  def __getattr__(self, attr):  # lower, trace, eval_shape, _cache_size, ...
    return getattr(self._jit, attr)


def stored_jit(fun=None, *, static_argnames=(), name: str | None = None):
  """``jax.jit(fun, static_argnames=...)`` whose concrete calls use stored executables.

  Inside a trace, or with the cache off, it is the jitted function itself. A
  concrete call runs the executable stored for its key (see the module
  docstring), compiling and storing it the first time. Use as a decorator,
  with or without arguments.
  """
  if isinstance(static_argnames, str):
    static_argnames = (static_argnames,)
  if fun is None:
    return lambda f: _StoredJit(f, tuple(static_argnames), name)
  return _StoredJit(fun, tuple(static_argnames), name)
