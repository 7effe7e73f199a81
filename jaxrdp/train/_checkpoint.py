"""Atomic, verified checkpoints of a train state that holds privacy accountants.

A checkpoint is one NumPy ``.npz`` file (uncompressed zip; each member has a
CRC-32) with

* ``leaf_00000``, ``leaf_00001``, ...: the array leaves of the state in
  ``jax.tree.flatten`` order (typed PRNG keys as their key data);
* ``header``: UTF-8 JSON, stored as ``uint8[...]``, with the format name and
  version, ``str`` of the treedef, per-leaf kind / dtype / shape, each
  :class:`jaxrdp.accountants.RdpState` as its orders (the state's static
  metadata) and RDP values, lossless (``float.hex``), and a SHA-256 over the
  canonical JSON of all that followed by every array leaf's dtype, shape and
  bytes.

Saving writes a temporary file in the destination directory, flushes and
fsyncs it, ``os.replace``-s it over the destination (atomic on POSIX and
Windows) and fsyncs the directory, so a crash leaves either the old or the new
checkpoint, never a partial one. A crash can leave the temporary file
(``.<name>.<random>.tmp`` beside the destination); the next successful save to
the same path removes such files (concurrent saves to one path are not
supported).

Loading needs a *template* state of the expected structure (for example a fresh
:func:`jaxrdp.train.dpsgd_init` with the run's orders). Anything unexpected raises
:class:`CheckpointError`: unreadable, truncated or corrupted file, checksum
mismatch, other format or version, different tree structure, leaf dtype or
shape, accountant orders that differ from the template's, or accountant values
that fail validation. Nothing is ever silently reset: a failed load never
returns a state with zero privacy spent.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from typing import Any

import jax
import numpy as np

from .._core.precision import x64_context
from ..rdp._accountant import RdpState, state_from_dict, state_to_dict

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint"]

FORMAT_NAME = "jaxrdp-checkpoint"
FORMAT_VERSION = 1

PyTree = Any


class CheckpointError(ValueError):
  """A checkpoint is unreadable, corrupted, or does not match the template."""


def _is_accountant(x: Any) -> bool:
  return isinstance(x, RdpState)


def _is_prng_key(x: Any) -> bool:
  return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _flatten(state: PyTree) -> tuple[list[Any], Any]:
  # Accountant states are kept whole (they are stored through their own
  # validated dict form), everything else is flattened to array leaves.
  return jax.tree.flatten(state, is_leaf=_is_accountant)


def _describe(leaf: Any) -> tuple[dict, np.ndarray | None]:
  """Header entry and payload array of one leaf."""
  if _is_accountant(leaf):
    return {"kind": "accountant", "state": state_to_dict(leaf)}, None
  if _is_prng_key(leaf):
    data = np.asarray(jax.random.key_data(leaf))
    impl = str(jax.random.key_impl(leaf))
    entry = {"kind": "prng_key", "impl": impl}
  else:
    data = np.asarray(leaf)
    entry = {"kind": "array"}
  if data.dtype == object:
    raise TypeError(f"cannot checkpoint a leaf of type {type(leaf).__name__}")
  entry.update(dtype=data.dtype.str, shape=list(data.shape))
  return entry, np.array(data, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)


def _digest(meta: dict, arrays: list[np.ndarray]) -> str:
  h = hashlib.sha256()
  h.update(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode("utf-8"))
  for a in arrays:
    h.update(f"{a.dtype.str}{list(a.shape)}".encode("ascii"))
    h.update(np.array(a, order="C").tobytes())
  return h.hexdigest()


def _encode(state: PyTree) -> bytes:
  leaves, treedef = _flatten(state)
  entries, arrays = [], []
  for leaf in leaves:
    entry, data = _describe(leaf)
    entries.append(entry)
    if data is not None:
      arrays.append(data)
  meta = {
    "format": FORMAT_NAME,
    "version": FORMAT_VERSION,
    "treedef": str(treedef),
    "leaves": entries,
  }
  header = dict(meta, sha256=_digest(meta, arrays))
  header_bytes = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)
  members = {f"leaf_{i:05d}": a for i, a in enumerate(arrays)}
  buf = io.BytesIO()
  np.savez(buf, header=header_bytes, **members)
  return buf.getvalue()


def _fsync_directory(directory: str) -> None:
  # Makes the rename itself durable. Not every platform can open a directory
  # (Windows cannot); the rename is still atomic there.
  try:
    fd = os.open(directory, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def save_checkpoint(path: str | os.PathLike, state: PyTree) -> None:
  """Writes ``state`` to ``path`` atomically (temp file, fsync, rename).

  Args:
    path: destination file (conventionally ``*.npz``); its directory must
      exist. An existing file is replaced only once the new one is complete.
    state: a pytree of arrays, e.g. a :class:`jaxrdp.train.DPSGDState`; any
      :class:`jaxrdp.accountants.RdpState` inside is stored with its orders.

  Raises:
    TypeError: if a leaf is not array-like.
    OSError: if the file cannot be written (the old checkpoint is kept).

  Not traceable: call it outside jit with concrete values.
  """
  path = os.fspath(path)
  payload = _encode(state)
  directory = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(
    prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory
  )
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(payload)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    try:
      os.unlink(tmp)
    except FileNotFoundError:
      pass
    raise
  _fsync_directory(directory)
  _remove_stale_temporaries(directory, os.path.basename(path))


def _remove_stale_temporaries(directory: str, name: str) -> None:
  """Removes temporary files that an interrupted save to ``name`` left behind:
  exactly the names ``tempfile.mkstemp`` gives in save_checkpoint."""
  pattern = re.compile(re.escape("." + name + ".") + r"[A-Za-z0-9_]{8}\.tmp")
  try:
    entries = os.listdir(directory)
  except OSError:
    return
  for entry in entries:
    if pattern.fullmatch(entry):
      try:
        os.unlink(os.path.join(directory, entry))
      except OSError:
        pass


def _read(path: str) -> tuple[dict, list[np.ndarray]]:
  # The file is opened here (not by np.load) so it is closed on every error path.
  if os.path.isdir(path):
    raise CheckpointError(f"{path}: is a directory, not a checkpoint file")
  with open(path, "rb") as f:
    try:
      loaded = np.load(f, allow_pickle=False)
      if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise CheckpointError(
          f"{path}: not a jaxrdp checkpoint (a .npy array, not an .npz archive)"
        )
      with loaded as npz:
        names = set(npz.files)
        if "header" not in names:
          raise CheckpointError(f"{path}: not a jaxrdp checkpoint (no header)")
        header_raw = npz["header"]
        count = len(names) - 1
        arrays = [npz[f"leaf_{i:05d}"] for i in range(count)]
      # NpzFile hands back a member that is not an .npy file as its raw bytes.
      for name, member in (("header", header_raw), *enumerate(arrays)):
        if not isinstance(member, np.ndarray):
          what = name if name == "header" else f"leaf_{name:05d}"
          raise CheckpointError(
            f"{path}: corrupted checkpoint: member {what!r} is not an .npy array"
          )
      if header_raw.dtype != np.uint8 or header_raw.ndim != 1:
        raise CheckpointError(
          f"{path}: corrupted checkpoint header: {header_raw.dtype}{list(header_raw.shape)}, "
          "not the uint8 bytes of a JSON text"
        )
    except CheckpointError:
      raise
    # Damage surfaces as many exception types: zipfile.BadZipFile, the .npy
    # header parser's ValueError, SyntaxError or tokenize.TokenError,
    # NotImplementedError for a compression or encryption flag, OSError, ...
    except Exception as e:
      raise CheckpointError(
        f"{path}: unreadable checkpoint (truncated or corrupted file): {e}"
      ) from e
  try:
    header = json.loads(header_raw.tobytes().decode("utf-8"))
  # ValueError: bad UTF-8 or JSON, or an integer too long to convert; RecursionError:
  # nesting too deep for the parser.
  except (ValueError, RecursionError) as e:
    raise CheckpointError(f"{path}: corrupted checkpoint header: {e}") from e
  if not isinstance(header, dict):
    raise CheckpointError(f"{path}: not a jaxrdp checkpoint (header is not an object)")
  if header.get("format") != FORMAT_NAME:
    raise CheckpointError(f"{path}: not a jaxrdp checkpoint (format {header.get('format')!r})")
  if header.get("version") != FORMAT_VERSION:
    raise CheckpointError(
      f"{path}: checkpoint format version {header.get('version')!r} is not "
      f"supported (this jaxrdp reads version {FORMAT_VERSION})"
    )
  meta = {k: v for k, v in header.items() if k != "sha256"}
  if header.get("sha256") != _digest(meta, arrays):
    raise CheckpointError(f"{path}: checksum mismatch, the checkpoint is corrupted or was modified")
  return meta, arrays


def load_checkpoint(path: str | os.PathLike, template: PyTree) -> PyTree:
  """Reads a checkpoint written by :func:`save_checkpoint` and verifies it.

  Args:
    path: checkpoint file.
    template: a state with the expected structure, leaf dtypes and shapes,
      and accountant orders (its values are not used), e.g. a fresh
      :func:`jaxrdp.train.dpsgd_init` built with the same model, optimizer and orders.

  Returns:
    The saved state, with the template's tree structure. Array leaves are jax
    arrays of the saved dtype (float64 accountant leaves included).

  Raises:
    FileNotFoundError: if ``path`` does not exist.
    CheckpointError: if the file is truncated, corrupted or of another
      format/version, its checksum fails, or its structure, a leaf's dtype or
      shape, or an accountant's orders differ from ``template``, or stored
      accountant values fail validation.

  Not traceable: call it outside jit.
  """
  path = os.fspath(path)
  meta, arrays = _read(path)
  t_leaves, t_treedef = _flatten(template)
  if meta.get("treedef") != str(t_treedef):
    raise CheckpointError(
      f"{path}: tree structure mismatch: checkpoint has {meta.get('treedef')}, "
      f"template has {t_treedef}"
    )
  entries = meta.get("leaves")
  if not isinstance(entries, list) or len(entries) != len(t_leaves):
    raise CheckpointError(f"{path}: leaf count mismatch with the template")
  out, it = [], iter(arrays)
  for i, (entry, t_leaf) in enumerate(zip(entries, t_leaves)):
    if not isinstance(entry, dict):
      raise CheckpointError(f"{path}: leaf {i}: corrupted header entry")
    try:
      out.append(_restore_leaf(path, i, entry, t_leaf, it))
    except (TypeError, KeyError, AttributeError, IndexError) as e:
      # A header entry of an unexpected shape that the checks above let through.
      raise CheckpointError(f"{path}: leaf {i}: corrupted header entry: {e!r}") from e
  return jax.tree.unflatten(t_treedef, out)


def _restore_leaf(path: str, i: int, entry: dict, t_leaf: Any, arrays) -> Any:
  kind = entry.get("kind")
  if _is_accountant(t_leaf):
    if kind != "accountant":
      raise CheckpointError(f"{path}: leaf {i}: expected an accountant, found {kind!r}")
    saved = entry.get("state")
    if not isinstance(saved, dict):
      raise CheckpointError(f"{path}: leaf {i}: accountant entry without a state")
    expected = np.asarray(t_leaf.orders, dtype=np.float64)
    try:  # state_to_dict stores floats as float.hex strings (bit-exact)
      got = np.array([float.fromhex(x) for x in saved.get("orders")], dtype=np.float64)
    except (TypeError, ValueError):
      got = np.full(1, np.nan)
    if got.shape != expected.shape or not np.array_equal(got, expected):
      raise CheckpointError(
        f"{path}: accountant orders mismatch: checkpoint has {got.size} orders "
        f"{_short(got)}, the template expects {expected.size} orders "
        f"{_short(expected)}; resuming would mix RDP curves of different orders"
      )
    try:
      # Validates the values too (no NaN, RDP >= 0, orders > 1).
      return state_from_dict(saved, expected_orders=expected)
    except ValueError as e:
      raise CheckpointError(f"{path}: invalid accountant state: {e}") from e
  if kind == "accountant":
    raise CheckpointError(f"{path}: leaf {i}: unexpected accountant in the checkpoint")
  data = next(arrays, None)
  if data is None:
    raise CheckpointError(f"{path}: leaf {i}: missing array in the checkpoint")
  if _is_prng_key(t_leaf):
    expected = np.asarray(jax.random.key_data(t_leaf))
    impl = str(jax.random.key_impl(t_leaf))
    if kind != "prng_key" or entry.get("impl") != impl:
      raise CheckpointError(f"{path}: leaf {i}: expected a PRNG key of impl {impl}")
  else:
    expected = np.asarray(t_leaf)
    if kind != "array":
      raise CheckpointError(f"{path}: leaf {i}: expected an array, found {kind!r}")
  if data.dtype != expected.dtype or data.shape != expected.shape:
    raise CheckpointError(
      f"{path}: leaf {i}: checkpoint has {data.dtype}{list(data.shape)}, "
      f"template has {expected.dtype}{list(expected.shape)}"
    )
  if _is_prng_key(t_leaf):
    return jax.random.wrap_key_data(data, impl=entry["impl"])
  # Under x64 so float64 / int64 leaves keep their saved dtype.
  with x64_context():
    return jax.device_put(data)


def _short(a: np.ndarray) -> str:
  if a.size <= 6:
    return np.array2string(a, precision=6)
  return f"[{a[0]:g}, {a[1]:g}, {a[2]:g}, ..., {a[-1]:g}]"
