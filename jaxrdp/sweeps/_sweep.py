"""Grid sweeps: epsilon of DP-SGD over the outer product of hyperparameter axes.

`sweep` evaluates epsilon (and the optimal RDP order) on every cell of the grid
    (q | dataset_size x batch_size) x sigma x (steps | epochs) x delta
in two vectorized stages that exploit the structure of the accountant:

1. The per-step RDP curve of the Sampled Gaussian Mechanism depends only on (q, sigma),
   so it is computed once per (q, sigma) pair, an [M, n_orders] array.
2. T steps compose to T times that curve (Mironov 2017, arXiv:1702.07476, Prop. 1), so
   each cell only scales its pair's curve and converts it to epsilon at its delta
   (`rdp_to_epsilon`), a cheap elementwise pass.

Both stages run over the flattened cells in fixed-size chunks (one compilation per
chunk shape, a progress bar when there is more than one chunk), so the full grid never
has to fit in device memory at once; only the (q, sigma) plane's curves do. Each chunk
is one jitted `jax.shard_map` program over a 1-D `Mesh` of all the devices along the
cell axis: one device, several GPUs, or, after `jax.distributed.initialize()`, the
devices of every process. Each device computes the same number of cells per chunk
whatever the number of devices, so every mesh of several devices gives the same bits;
a one-device mesh agrees with them to rounding (see the sharding notes below).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import json
import math
from typing import Any, Sequence

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jax.typing import ArrayLike

from ..calibration._calibration import orders_array
from ..rdp._dpsgd import check_scheme_accountant
from ..rdp._conversions import epsilon_from_rdp_f64
from ..train._dataset import epochs_to_steps
from .._core.precision import x64_context
from ..mechanisms._sgm import _rdp_f64
from ..rdp import _sampling
from .._core.progress import progress_bar
from ..sweeps._table import format_number, format_table, pick_indices
from .._core.validation import StaticArray, check_real

__all__ = ["SweepResult", "sweep"]

_DEFAULT_CHUNK = 1 << 14


# --------------------------------------------------------------------------------------
# The labelled result.


def _json_safe(a: np.ndarray):
  # JSON has no NaN or inf: they become the strings "nan", "inf" and "-inf" (as in
  # the CLI's --json), which say what the number is where null would not.
  a = np.asarray(a, dtype=np.float64)
  obj = a.astype(object)
  obj[np.isnan(a)] = "nan"
  obj[np.isposinf(a)] = "inf"
  obj[np.isneginf(a)] = "-inf"
  return obj.tolist()


@dataclasses.dataclass(frozen=True, eq=False)
class SweepResult:
  """Epsilon over a labelled grid, as returned by `sweep`.

  Attributes:
    axes: dict from axis name to its 1-D numpy values, in grid-dimension order
      (names among dataset_size, batch_size, q, sigma, epochs, steps, delta).
    epsilon: float64 array with one dimension per axis.
    order: the RDP order attaining each epsilon (same shape).
    q: sampling rate per cell, broadcastable to `epsilon.shape`.
    steps: number of steps per cell, broadcastable to `epsilon.shape`.
  """

  axes: dict[str, np.ndarray]
  epsilon: np.ndarray
  order: np.ndarray
  q: np.ndarray
  steps: np.ndarray

  @property
  def dims(self) -> tuple[str, ...]:
    """Axis names, one per dimension of `epsilon`."""
    return tuple(self.axes)

  @property
  def shape(self) -> tuple[int, ...]:
    return self.epsilon.shape

  @property
  def size(self) -> int:
    return int(self.epsilon.size)

  def __repr__(self) -> str:
    dims = ", ".join(f"{k}={len(v)}" for k, v in self.axes.items())
    return f"SweepResult({dims}; {self.size} cells)"

  def select(self, **values: float) -> "SweepResult":
    """Sub-grid at the given axis values (each kept as a length-1 axis).

    Values match the axis entries up to a relative 1e-9; a value that is not on the
    axis raises ValueError. Example: `res.select(epochs=60, batch_size=256)`.
    """
    index: list[Any] = [slice(None)] * len(self.axes)
    axes = dict(self.axes)
    for name, value in values.items():
      if name not in self.axes:
        raise ValueError(f"{name!r} is not an axis of this sweep ({', '.join(self.axes)})")
      vals = self.axes[name]
      hit = np.nonzero(np.isclose(vals, value, rtol=1e-9, atol=0.0))[0]
      if hit.size == 0:
        raise ValueError(f"{name}={value!r} is not on the axis {vals.tolist()}")
      i = int(hit[0])
      index[self.dims.index(name)] = slice(i, i + 1)
      axes[name] = vals[i : i + 1]
    idx = tuple(index)

    def cut(a):
      a = np.asarray(a)
      sub = tuple(s if a.shape[k] > 1 else slice(None) for k, s in enumerate(idx))
      return a[sub]

    return SweepResult(axes, self.epsilon[idx], self.order[idx], cut(self.q), cut(self.steps))

  def columns(self) -> dict[str, np.ndarray]:
    """Long format: one flat column per axis, plus q, steps, epsilon and order."""
    shape = self.shape
    cols: dict[str, np.ndarray] = {}
    for k, (name, vals) in enumerate(self.axes.items()):
      view = [1] * len(shape)
      view[k] = len(vals)
      cols[name] = np.broadcast_to(np.reshape(vals, view), shape).ravel()
    if "q" not in cols:
      cols["q"] = np.broadcast_to(self.q, shape).ravel()
    if "steps" not in cols:
      cols["steps"] = np.broadcast_to(self.steps, shape).ravel()
    cols["epsilon"] = self.epsilon.ravel()
    cols["order"] = self.order.ravel()
    return cols

  def to_dict(self) -> dict:
    """JSON-ready dict: dims, axes, and nested lists of epsilon, order, q, steps.

    Non-finite numbers (an infinite epsilon, say) become the strings ``"inf"``,
    ``"-inf"`` and ``"nan"`` (strict JSON has no literal for them).
    """
    shape = self.shape
    return {
      "dims": list(self.dims),
      "axes": {k: np.asarray(v).tolist() for k, v in self.axes.items()},
      "epsilon": _json_safe(self.epsilon),
      "order": _json_safe(self.order),
      "q": _json_safe(np.broadcast_to(self.q, shape)),
      "steps": _json_safe(np.broadcast_to(self.steps, shape)),
    }

  def to_json(self, path: str | None = None, indent: int | None = None) -> str:
    """JSON text of `to_dict()` (strict JSON: no NaN); written to `path` if given."""
    text = json.dumps(self.to_dict(), indent=indent, allow_nan=False)
    if path is not None:
      with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return text

  def to_csv(self, path: str | None = None) -> str:
    """Long-format CSV (one row per cell, header first); written to `path` if given.

    Floats are written with `repr`, so reading them back is exact.
    """
    cols = self.columns()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(cols))
    ints = {"dataset_size", "batch_size", "steps"}

    def cell(name, x):
      x = float(x)
      if name in ints and math.isfinite(x) and x == int(x):
        return str(int(x))
      return repr(x)

    names = list(cols)
    for row in zip(*cols.values()):
      writer.writerow([cell(n, x) for n, x in zip(names, row)])
    text = buf.getvalue()
    if path is not None:
      with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return text

  def to_pandas(self):
    """Long-format `pandas.DataFrame` (needs pandas, which jaxrdp does not require)."""
    try:
      import pandas as pd
    except ImportError as e:
      raise ImportError("SweepResult.to_pandas() needs pandas: pip install pandas") from e
    return pd.DataFrame(self.columns())

  def table(self, max_rows: int = 48, max_cols: int = 8) -> str:
    """Readable text table of epsilon, each value rounded up to 4 significant digits.

    With a steps or epochs axis of several values, rows are the other varying axes
    and columns are the durations; long axes are thinned to round values (see
    `jaxrdp.sweeps._table.pick_indices`) and a note says how much is shown. Axes of one
    value are printed once above the table.
    """
    dims = self.dims
    fixed = [f"{k} = {format_number(v[0])}" for k, v in self.axes.items() if len(v) == 1]
    varying = [k for k in dims if len(self.axes[k]) > 1]
    col_axis = next((k for k in ("epochs", "steps") if k in varying), None)
    row_axes = [k for k in varying if k != col_axis]
    # Thin row axes, the longest first, until the row count fits.
    keep = {k: np.arange(len(self.axes[k])) for k in dims}
    while row_axes and math.prod(len(keep[k]) for k in row_axes) > max_rows:
      k = max(row_axes, key=lambda a: len(keep[a]))
      others = math.prod(len(keep[a]) for a in row_axes if a != k)
      limit = max(2, max_rows // max(others, 1))
      if limit >= len(keep[k]):
        limit = len(keep[k]) - 1
      keep[k] = pick_indices(self.axes[k], limit)
    if col_axis is not None:
      keep[col_axis] = pick_indices(self.axes[col_axis], max_cols)
    sub_eps = self.epsilon[np.ix_(*[keep[k] for k in dims])]
    sub_order = self.order[np.ix_(*[keep[k] for k in dims])]

    lines = []
    if fixed:
      lines.append("  ".join(fixed))
    if col_axis is not None:
      c = dims.index(col_axis)
      eps = np.moveaxis(sub_eps, c, -1)
      rest = [k for k in dims if k != col_axis]
      headers = [k for k in rest if k in row_axes] + [
        f"{col_axis}={format_number(v)}" for v in self.axes[col_axis][keep[col_axis]]
      ]
      rows = []
      for idx in np.ndindex(*eps.shape[:-1]):
        label = [
          format_number(self.axes[k][keep[k][i]]) for k, i in zip(rest, idx) if k in row_axes
        ]
        rows.append(label + [format_number(x, direction=1) for x in eps[idx]])
      lines.append("epsilon:")
      lines.append(format_table(headers, rows))
    else:
      headers = row_axes + ["epsilon", "order"]
      rows = []
      for idx in np.ndindex(*sub_eps.shape):
        label = [
          format_number(self.axes[k][keep[k][i]]) for k, i in zip(dims, idx) if k in row_axes
        ]
        rows.append(
          label + [format_number(sub_eps[idx], direction=1), format_number(sub_order[idx])]
        )
      lines.append(format_table(headers, rows))
    shown = sub_eps.size
    if shown < self.size:
      lines.append(f"(showing {shown:,} of {self.size:,} cells)")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Evaluation.


def _axis(name: str, value, *, lo=None, hi=None, lo_open=False, hi_open=False, integer=False):
  """1-D float64 numpy axis with values checked against the allowed range."""
  known = (str, bytes, bool, int, float, list, tuple, np.ndarray, np.generic, jax.Array)
  if not isinstance(value, known) and (hasattr(value, "__array__") or hasattr(value, "__iter__")):
    value = np.asarray(value)  # a range, a pandas Series, ...: checked by dtype below
  check_real(name, value)  # a TypeError for str, bytes, bools, Decimal, Fraction, ...
  arr = np.atleast_1d(np.asarray(value, dtype=np.float64))
  if arr.ndim != 1 or arr.size == 0:
    raise ValueError(f"{name} must be a scalar or a non-empty 1-D sequence")
  bad = ~np.isfinite(arr)
  if lo is not None:
    bad |= (arr <= lo) if lo_open else (arr < lo)
  if hi is not None:
    bad |= (arr >= hi) if hi_open else (arr > hi)
  if integer:
    bad |= arr != np.round(arr)
  if np.any(bad):
    what = "an integer" if integer else "a number"
    rng = f"{'(' if lo_open else '['}{lo}, {hi if hi is not None else 'inf'}{')' if hi_open or hi is None else ']'}"
    raise ValueError(f"{name} must be {what} in {rng}, got {float(arr[bad][0])!r}")
  return arr


# Sharding. Every chunk of cells goes through one jitted SPMD program over a 1-D device
# mesh (axis "cells"): `jax.shard_map` gives each device its slice of the chunk and runs
# the per-device function on it, and the jit's replicated output sharding all-gathers
# the slices, so every process of a multi-process run reads the whole chunk from its
# own devices. The same program runs on one device, several forced CPU devices, several
# GPUs, or the devices of several `jax.distributed` processes; it is compiled once per
# (mesh, chunk shape). Every device gets the same number of cells per chunk whatever
# the number of devices (`_Mesh.chunk_len`), so every mesh of two or more devices, in
# one process or several, runs the same per-device program on the same cells and the
# results agree bit for bit.
# A one-device mesh is the exception: JAX lowers shard_map over it without a manual
# computation, and XLA:CPU's pipeline for the partitioned module simplifies the kernel
# differently, so a few cells round differently (measured: 2 of 4,096 per-step RDP
# values, by 1.9e-15 relative). The thread-per-device dispatcher this replaced ran the
# single-device executable on every device and was exact; so was a partitioned module
# against another. Inside a device, cells go through ``lax.map`` in small batches, which
# bounds the kernel's working memory.
_AXIS = "cells"
_PAIR_BATCH = 8  # (q, sigma) pairs per batch: each costs a full RDP curve
_CELL_BATCH = 32  # cells per batch in the conversion stage


# The per-device functions of the two stages. A stage function takes its replicated
# arguments first, then its per-cell arguments (each with the cell axis leading), then
# static keyword arguments, and returns per-cell outputs. Another accountant plugs in
# by swapping the stage-2 function; the sharding around it does not change.
def _rdp_local(orders, q, sigma, *, orders_static):
  # Static orders let the kernel use the exact series for integer orders.
  return lax.map(
    lambda qs: _rdp_f64(qs[0], qs[1], orders, orders_static), (q, sigma), batch_size=_PAIR_BATCH
  )


def _scheme_rdp_local(orders, q, sigma, *, orders_static, sampling, relation):
  # Another batching scheme or relation (jaxrdp.rdp._sampling): per step, or per epoch.
  return lax.map(
    lambda qs: _sampling.per_step_rdp_f64(sampling, relation, qs[0], qs[1], orders, orders_static),
    (q, sigma),
    batch_size=_PAIR_BATCH,
  )


def _eps_local(rdp1, orders, pair, steps, delta):
  def one(cell):
    p, t, d = cell
    # T-fold composition scales the per-step curve by T (Mironov 2017, Prop. 1);
    # zero steps spend nothing, as in dpsgd_epsilon.
    total = jnp.where(t == 0, 0.0, t * rdp1[p])
    res = epsilon_from_rdp_f64(total, orders, d, "improved")
    return res.epsilon, res.order

  return lax.map(one, (pair, steps, delta), batch_size=_CELL_BATCH)


@functools.lru_cache(maxsize=32)
def _program(local_fn, mesh: Mesh, n_replicated: int, n_cell_args: int):
  """jit(shard_map(local_fn)) over `mesh`: cell arguments split, outputs gathered.

  Static keyword arguments of `local_fn` go in as `static=((name, value), ...)`
  (hashable), so one jitted function serves every call of a stage on a mesh.
  """
  in_specs = (PartitionSpec(),) * n_replicated + (PartitionSpec(_AXIS),) * n_cell_args

  def program(*args, static=()):
    body = functools.partial(local_fn, **dict(static))
    # check_vma=False: the body has no collectives (each device works alone on its
    # cells), and the kernels' lax.cond/while_loop mix replicated and per-cell values,
    # which the varying-axes type check would otherwise ask to annotate.
    return jax.shard_map(
      body, mesh=mesh, in_specs=in_specs, out_specs=PartitionSpec(_AXIS), check_vma=False
    )(*args)

  return jax.jit(
    program, static_argnames="static", out_shardings=NamedSharding(mesh, PartitionSpec())
  )


def _check_devices(devices) -> tuple:
  """The devices of the cell mesh, from the `devices` argument of `sweep`."""
  if devices is None:
    return tuple(jax.devices())
  if isinstance(devices, Mesh):
    devices = devices.devices.ravel().tolist()
  elif isinstance(devices, jax.Device):
    devices = [devices]
  try:
    devices = tuple(devices)
  except TypeError:
    raise TypeError(
      f"devices must be a sequence of jax.Device or a jax.sharding.Mesh, got "
      f"{type(devices).__name__}"
    ) from None
  if not devices:
    raise ValueError("devices must not be empty (default: jax.devices())")
  bad = [d for d in devices if not isinstance(d, jax.Device)]
  if bad:
    raise TypeError(f"devices must hold jax.Device objects, got {bad[0]!r}")
  if len(set(devices)) != len(devices):
    raise ValueError("devices lists a device more than once")
  platforms = sorted({d.platform for d in devices})
  if len(platforms) > 1:
    raise ValueError(f"devices mixes platforms ({', '.join(platforms)}); give devices of one kind")
  here = jax.process_index()
  if not any(d.process_index == here for d in devices):
    raise ValueError(
      f"devices holds no device of this process (process {here}): every process that "
      f"calls sweep must own at least one of them (default: jax.devices(), all of them)"
    )
  return devices


class _Mesh:
  """The 1-D cell mesh of a sweep: chunk lengths, placement of host arrays, process check."""

  def __init__(self, devices: tuple):
    self.n = len(devices)
    self.mesh = Mesh(np.asarray(devices, dtype=object), (_AXIS,))
    self.cells = NamedSharding(self.mesh, PartitionSpec(_AXIS))
    self.replicated = NamedSharding(self.mesh, PartitionSpec())
    # Several processes take part when the mesh holds devices of another process.
    self.multiprocess = any(d.process_index != jax.process_index() for d in devices)

  def chunk_len(self, total: int, chunk_size: int, batch: int) -> int:
    """Cells per chunk: devices x a per-device length that ignores the device count."""
    # Power-of-two buckets (at least 32) limit recompilation across grid sizes (the
    # SGM kernel takes seconds to compile); whole batches per device.
    length = min(chunk_size, max(32, 1 << max(total - 1, 1).bit_length()))
    return self.n * (-(-length // batch) * batch)

  def _place(self, x: np.ndarray, sharding) -> jax.Array:
    # Every process holds the same host array (computed from the same arguments) and
    # hands each of its devices the slice it owns: no transfer between processes.
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

  def replicate(self, x: np.ndarray) -> jax.Array:
    return self._place(x, self.replicated)

  def shard(self, x: np.ndarray) -> jax.Array:
    return self._place(x, self.cells)

  def check_same_everywhere(self, fingerprint: np.ndarray) -> None:
    """Raises unless every process of the mesh passed the same `fingerprint` (int64)."""
    if not self.multiprocess:
      return
    rows = np.broadcast_to(fingerprint, (self.n, fingerprint.size))
    gathered = np.asarray(
      _program(_identity, self.mesh, 0, 1)(self.shard(rows)).addressable_data(0)
    )
    if not np.all(gathered == gathered[:1]):
      raise ValueError(
        "sweep was called with different arguments on different processes: every "
        "process must call it with the same axes, orders, chunk_size and devices"
      )


def _identity(x):
  return x


def _to_host(out) -> list[np.ndarray]:
  """Host copies of a program's outputs (replicated: read this process's first device)."""
  return [np.asarray(leaf.addressable_data(0)) for leaf in jax.tree_util.tree_leaves(out)]


def _map_chunks(run, n: int, length: int, inputs, outputs, bar) -> None:
  """Runs `run` over [0, n) in chunks of `length`, writing into the `outputs` arrays.

  `inputs(lo, hi)` builds a chunk's (padded) per-cell host arguments and `run` dispatches
  the program on them. Dispatch is asynchronous: chunk c + 1 is prepared and dispatched
  before chunk c is copied back, so the host work overlaps the devices'.
  """
  pending = None

  def collect(lo, hi, out):
    for dst, src in zip(outputs, _to_host(out)):
      dst[lo:hi] = src[: hi - lo]
    bar.update(1)

  for lo in range(0, n, length):
    hi = min(lo + length, n)
    out = run(*inputs(lo, hi))
    if pending is not None:
      collect(*pending)
    pending = (lo, hi, out)
  if pending is not None:
    collect(*pending)


def _padded(x: np.ndarray, length: int, fill) -> np.ndarray:
  if x.shape[0] == length:
    return x
  pad = np.full((length - x.shape[0],) + x.shape[1:], fill, dtype=x.dtype)
  return np.concatenate([x, pad])


@functools.lru_cache(maxsize=8)
def _cell_mesh(devices: tuple) -> _Mesh:
  return _Mesh(devices)


def _fingerprint(*parts) -> np.ndarray:
  """A digest of the arguments that shape a sweep, as 4 int64 (for the process check)."""
  h = hashlib.sha256()
  for part in parts:
    for x in part.values() if isinstance(part, dict) else [part]:
      x = np.ascontiguousarray(x)
      h.update(str((x.dtype, x.shape)).encode())
      h.update(x.tobytes())
  return np.frombuffer(h.digest(), dtype=np.int64).copy()


def _cells_rdp(q_samp, axes, steps_sd, orders_np, shape, chunk_size, progress, devices, scheme=()):
  """The two-stage Renyi-DP sweep of the cells, sharded over `devices`: (epsilon, order).

  `scheme`: `()` for Poisson sampling under add/remove, else the static keywords
  `(("relation", r), ("sampling", s))` of another scheme's per-step curve; `steps_sd`
  then holds the number of curves each cell composes (epochs for shuffling).
  """
  n_samp, n_sigma = q_samp.size, axes["sigma"].size
  n_dur, n_delta = steps_sd.shape[1], axes["delta"].size
  with x64_context():
    cells = _cell_mesh(_check_devices(devices))
    n_pairs, n_cells = n_samp * n_sigma, math.prod(shape)
    len1 = cells.chunk_len(n_pairs, chunk_size, _PAIR_BATCH)
    len2 = cells.chunk_len(n_cells, chunk_size, _CELL_BATCH)
    chunks1 = -(-n_pairs // len1)
    chunks2 = -(-n_cells // len2)
    cells.check_same_everywhere(
      _fingerprint(
        axes,
        orders_np,
        steps_sd,
        len1,
        len2,
        [d.id for d in cells.mesh.devices.flat],
        [str(v) for _, v in scheme],
      )
    )
    orders_dev = cells.replicate(orders_np)
    orders_static = (("orders_static", StaticArray(orders_np)),)
    rdp_program = _program(_scheme_rdp_local if scheme else _rdp_local, cells.mesh, 1, 2)
    eps_program = _program(_eps_local, cells.mesh, 2, 3)
    # By default one bar per sweep: in a multi-process sweep, process 0's.
    show = chunks2 > 1 and jax.process_index() == 0 if progress is None else progress
    bar = progress_bar(chunks1 + chunks2, "jaxrdp sweep", show)
    try:
      # Stage 1: per-step RDP of every (q, sigma) pair.
      q_pairs = np.repeat(q_samp.ravel(), n_sigma)
      s_pairs = np.tile(axes["sigma"], n_samp)
      rdp1 = np.empty((n_pairs, orders_np.size))
      _map_chunks(
        lambda q, s: rdp_program(orders_dev, q, s, static=orders_static + scheme),
        n_pairs,
        len1,
        lambda lo, hi: (
          cells.shard(_padded(q_pairs[lo:hi], len1, 0.5)),
          cells.shard(_padded(s_pairs[lo:hi], len1, 1.0)),
        ),
        [rdp1],
        bar,
      )
      rdp1_dev = cells.replicate(rdp1)

      # Stage 2: scale by the steps of each cell and convert at its delta.
      eps = np.empty(n_cells)
      order = np.empty(n_cells)
      grid = (n_samp, n_sigma, n_dur, n_delta)

      def cell_args(lo, hi):
        p, s, t, d = np.unravel_index(np.arange(lo, hi), grid)
        return (
          cells.shard(_padded(p * n_sigma + s, len2, 0)),
          cells.shard(_padded(steps_sd[p, t], len2, 1.0)),
          cells.shard(_padded(axes["delta"][d], len2, 0.5)),
        )

      _map_chunks(
        lambda p, t, d: eps_program(rdp1_dev, orders_dev, p, t, d),
        n_cells,
        len2,
        cell_args,
        [eps, order],
        bar,
      )
    finally:
      bar.close()

  return eps, order


def _cells_with_accountant(accountant, q_samp, sigma, steps_sd, delta, chunk_size, progress):
  """epsilon of every cell through another accountant, chunk by chunk: (epsilon, NaN orders)."""
  from ..rdp._dpsgd import dpsgd_epsilon

  n_samp, n_sigma, n_dur, n_delta = q_samp.size, sigma.size, steps_sd.shape[1], delta.size
  n_cells = n_samp * n_sigma * n_dur * n_delta
  grid = (n_samp, n_sigma, n_dur, n_delta)
  chunks = -(-n_cells // chunk_size)
  show = chunks > 1 and jax.process_index() == 0 if progress is None else progress
  bar = progress_bar(chunks, "jaxrdp sweep", show)
  eps = np.empty(n_cells)
  try:
    for lo in range(0, n_cells, chunk_size):
      hi = min(lo + chunk_size, n_cells)
      p, s, t, d = np.unravel_index(np.arange(lo, hi), grid)
      res = dpsgd_epsilon(
        q_samp.ravel()[p], sigma[s], steps_sd[p, t], delta[d], accountant=accountant
      )
      eps[lo:hi] = np.asarray(res.epsilon)
      bar.update(1)
  finally:
    bar.close()
  return eps, np.full(n_cells, np.nan)


def sweep(
  *,
  sigma: ArrayLike,
  delta: ArrayLike = 1e-5,
  q: ArrayLike | None = None,
  steps: ArrayLike | None = None,
  dataset_size: ArrayLike | None = None,
  batch_size: ArrayLike | None = None,
  epochs: ArrayLike | None = None,
  orders: ArrayLike | None = None,
  chunk_size: int = _DEFAULT_CHUNK,
  progress: bool | None = None,
  devices: Sequence[jax.Device] | jax.Device | Mesh | None = None,
  accountant: Any = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> SweepResult:
  """Epsilon of DP-SGD on the full outer-product grid of the given axes, in one call.

  Give the sampling either as `q` or as `dataset_size` and `batch_size`
  (q = batch_size / dataset_size), and the duration either as `steps` or as `epochs`
  (steps = ceil(epochs * dataset_size / batch_size); needs the dataset form). Each
  axis is a scalar or a 1-D sequence; the grid dimensions are, in order,
  (q | dataset_size, batch_size), sigma, (steps | epochs), delta.

  The per-step RDP is computed once per (q, sigma) pair and scaled by the steps of
  each cell (see the module docstring). Cells are processed in chunks of
  `chunk_size` per device, each chunk sharded over `devices`.

  Several hosts: start one Python process per host (or per GPU), call
  `jax.distributed.initialize()` first in each, then `sweep` with the same
  arguments in every process. The default `devices`, `jax.devices()`, then holds the
  devices of all processes; each process computes its devices' cells of every chunk,
  and every process returns the whole result (the same arrays, CSV and JSON as a
  one-process run), so write files from one of them::

    # on each host i of N (SLURM and Open MPI fill these in: initialize() alone)
    jax.distributed.initialize(coordinator_address="host0:1234", num_processes=N,
                               process_id=i)
    res = jaxrdp.sweep(...)
    if jax.process_index() == 0:
      res.to_csv("grid.csv")

  (`JAX_COORDINATOR_ADDRESS` may replace `coordinator_address`. On CPU hosts the
  processes need JAX's CPU collectives, `jax_cpu_collectives_implementation="gloo"`,
  the default in current jaxlib.)

  Args:
    sigma: noise multipliers, >= 0.
    delta: deltas, in (0, 1). Default 1e-5.
    q: sampling rates in [0, 1] (or use dataset_size and batch_size).
    steps: numbers of steps >= 0 (or use epochs).
    dataset_size: dataset sizes N (positive integers).
    batch_size: expected batch sizes B (positive integers, B <= N).
    epochs: numbers of epochs >= 0 (needs dataset_size and batch_size).
    orders: RDP orders; default `jaxrdp.DEFAULT_ORDERS`.
    chunk_size: cells per device per chunk (also (q, sigma) pairs), >= 1; rounded
      up to whole batches of 8 pairs or 32 cells. A chunk holds this many cells
      times the number of devices.
    progress: show a progress bar (tqdm if installed, else a stderr counter). The
      default shows one when the grid takes more than one chunk, in process 0 only
      when several processes take part.
    devices: devices to shard over: a sequence of `jax.Device`, one device, or a
      `jax.sharding.Mesh` (all its devices, flattened). Default `jax.devices()`:
      every device of every process. Pass one device to turn sharding off, or
      `jax.local_devices()` for a sweep that stays inside this process. Every
      process that owns one of the devices must call `sweep` with the same arguments.
    accountant: ``"rdp"`` (default: the two-stage Renyi-DP sweep above) or another
      accountant by name or object, e.g. ``"pld"`` for tight, certified epsilons
      (:class:`jaxrdp.accountants.PldAccountant`; `order` is then NaN). A non-RDP
      sweep evaluates the cells in chunks of `chunk_size` on the default device
      (not sharded over `devices`); `orders` configures the RDP accountant only.
    sampling: the batching scheme, `"poisson"` (default), `"fixed"` or `"shuffle"`,
      and
    relation: the neighbouring relation (default per scheme), as in
      `jaxrdp.dpsgd_epsilon`; q is B / n for `"fixed"` and `"shuffle"` (for
      `"shuffle"` a cell of T steps composes ceil(T q) epochs). Other than Poisson
      under add/remove, they need `accountant="rdp"`.

  Returns:
    `SweepResult` with numpy arrays (epsilon, order, q, steps) and the axis values.

  Raises:
    ValueError: an axis value out of range, an inconsistent set of axes, `devices`
      empty, repeated, of mixed platforms or without a device of this process, or
      arguments that differ between the processes of a multi-process sweep.
    TypeError: `devices` is not a sequence of `jax.Device` or a `Mesh`.

  Examples:
    >>> res = sweep(q=[0.01, 0.02], sigma=[1.0, 2.0], steps=1000, delta=1e-5)
    >>> res.dims, res.shape
    (('q', 'sigma', 'steps', 'delta'), (2, 2, 1, 1))
  """
  if (q is None) == (batch_size is None):
    raise ValueError("give exactly one of q or batch_size (with dataset_size)")
  if batch_size is not None and dataset_size is None:
    raise ValueError("batch_size needs dataset_size")
  if q is not None and dataset_size is not None:
    raise ValueError("dataset_size goes with batch_size, not with q")
  if (steps is None) == (epochs is None):
    raise ValueError("give exactly one of steps or epochs")
  if epochs is not None and batch_size is None:
    raise ValueError("epochs needs dataset_size and batch_size (or give steps with q)")
  if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
    raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
  sampling, relation = _sampling.resolve_scheme(sampling, relation)
  check_scheme_accountant(sampling, relation, accountant)
  scheme = (
    ()
    if _sampling.is_default_scheme(sampling, relation)
    else (("relation", relation), ("sampling", sampling))
  )

  axes: dict[str, np.ndarray] = {}
  if q is not None:
    axes["q"] = _axis("q", q, lo=0.0, hi=1.0)
    q_samp = axes["q"]
  else:
    axes["dataset_size"] = _axis("dataset_size", dataset_size, lo=1.0, integer=True)
    axes["batch_size"] = _axis("batch_size", batch_size, lo=1.0, integer=True)
    if axes["batch_size"].max() > axes["dataset_size"].min():
      raise ValueError(
        f"batch_size must be <= dataset_size, got {axes['batch_size'].max():g} > "
        f"{axes['dataset_size'].min():g}"
      )
    q_samp = axes["batch_size"][None, :] / axes["dataset_size"][:, None]
  axes["sigma"] = _axis("sigma", sigma, lo=0.0)
  if steps is not None:
    axes["steps"] = _axis("steps", steps, lo=0.0)
  else:
    axes["epochs"] = _axis("epochs", epochs, lo=0.0)
  axes["delta"] = _axis("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
  orders_np = orders_array(orders)
  _sampling.check_orders_for(sampling, orders_np)

  samp_shape = q_samp.shape
  n_samp, n_sigma = q_samp.size, axes["sigma"].size
  dur_name = "steps" if steps is not None else "epochs"
  n_dur, n_delta = axes[dur_name].size, axes["delta"].size
  shape = samp_shape + (n_sigma, n_dur, n_delta)

  with x64_context():
    if steps is not None:
      steps_sd = np.broadcast_to(axes["steps"][None, :], (n_samp, n_dur))
    else:
      steps_sd = np.asarray(
        epochs_to_steps(
          axes["epochs"][None, None, :],
          axes["dataset_size"][:, None, None],
          axes["batch_size"][None, :, None],
        )
      ).reshape(n_samp, n_dur)

    if not (isinstance(accountant, str) and accountant == "rdp"):
      if orders is not None:
        raise ValueError(
          f"orders configures the RDP accountant; leave it out with accountant={accountant!r}"
        )
      eps, order = _cells_with_accountant(
        accountant, q_samp, axes["sigma"], steps_sd, axes["delta"], chunk_size, progress
      )
    else:
      # Shuffling composes one curve per epoch, ceil(T q) of them; the others one per step.
      count_sd = (
        _sampling.epochs_of(q_samp.reshape(-1, 1), steps_sd) if sampling == "shuffle" else steps_sd
      )
      eps, order = _cells_rdp(
        q_samp, axes, count_sd, orders_np, shape, chunk_size, progress, devices, scheme
      )

  n_samp_dims = len(samp_shape)
  q_cell = q_samp.reshape(samp_shape + (1, 1, 1))
  steps_cell = steps_sd.reshape(samp_shape + (1, n_dur, 1))
  if steps is not None:
    steps_cell = axes["steps"].reshape((1,) * n_samp_dims + (1, n_dur, 1))
  return SweepResult(
    axes=axes,
    epsilon=eps.reshape(shape),
    order=order.reshape(shape),
    q=q_cell,
    steps=steps_cell,
  )
