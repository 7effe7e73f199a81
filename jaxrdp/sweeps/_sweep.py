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
has to fit in device memory at once; only the (q, sigma) plane's curves do. With
several devices, each chunk is sharded across them along the cell axis with
`jax.sharding.NamedSharding` over a 1-D `Mesh`; the per-cell arithmetic is the same,
so the result equals the single-device one. The same code runs on multi-GPU hosts.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jax.typing import ArrayLike

from ..calibration._calibration import orders_array
from ..rdp._conversions import epsilon_from_rdp_f64
from ..train._dataset import epochs_to_steps
from .._core.precision import x64_context
from ..mechanisms._sgm import _rdp_f64
from .._core.progress import progress_bar
from ..sweeps._table import format_number, format_table, pick_indices
from .._core.validation import StaticArray

__all__ = ["SweepResult", "sweep"]

_DEFAULT_CHUNK = 1 << 14


# --------------------------------------------------------------------------------------
# The labelled result.


def _json_safe(a: np.ndarray):
  # JSON has no NaN/inf: non-finite numbers become null.
  a = np.asarray(a, dtype=np.float64)
  obj = np.where(np.isfinite(a), a, np.nan).astype(object)
  obj[~np.isfinite(a)] = None
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

    Non-finite numbers (an infinite epsilon, say) become None.
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
    """Readable text table of epsilon.

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
            format_number(self.axes[k][keep[k][i]])
            for k, i in zip(rest, idx)
            if k in row_axes
        ]
        rows.append(label + [format_number(x) for x in eps[idx]])
      lines.append("epsilon:")
      lines.append(format_table(headers, rows))
    else:
      headers = row_axes + ["epsilon", "order"]
      rows = []
      for idx in np.ndindex(*sub_eps.shape):
        label = [
            format_number(self.axes[k][keep[k][i]])
            for k, i in zip(dims, idx)
            if k in row_axes
        ]
        rows.append(label + [format_number(sub_eps[idx]), format_number(sub_order[idx])])
      lines.append(format_table(headers, rows))
    shown = sub_eps.size
    if shown < self.size:
      lines.append(f"(showing {shown:,} of {self.size:,} cells)")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Evaluation.


def _axis(name: str, value, *, lo=None, hi=None, lo_open=False, hi_open=False, integer=False):
  """1-D float64 numpy axis with values checked against the allowed range."""
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


# Sharding. A chunk of cells is laid out over a 1-D device mesh with
# NamedSharding(mesh, PartitionSpec("cells")); each device then runs the same
# single-device program on its own shard (dispatched from a thread per device, so
# the devices work, and compile, concurrently). Every device gets the same number of
# cells per chunk whatever the number of devices, so a sharded run executes exactly
# the per-device program of a single-device run and the results agree bit for bit.
# (A GSPMD-partitioned jit of the same function was measured to round differently,
# by ~1e-15, from the unpartitioned one on XLA:CPU.) Inside a device, cells go
# through ``lax.map`` in small batches, which bounds the kernel's working memory.
_PAIR_BATCH = 8    # (q, sigma) pairs per batch: each costs a full RDP curve
_CELL_BATCH = 32   # cells per batch in the conversion stage


def _rdp_local(q, sigma, orders, orders_static):
  # Static orders let the kernel use the exact series for integer orders.
  return lax.map(lambda qs: _rdp_f64(qs[0], qs[1], orders, orders_static), (q, sigma),
                 batch_size=_PAIR_BATCH)


def _eps_local(rdp1, pair, steps, delta, orders):
  def one(cell):
    p, t, d = cell
    # T-fold composition scales the per-step curve by T (Mironov 2017, Prop. 1);
    # zero steps spend nothing, as in dpsgd_epsilon.
    total = jnp.where(t == 0, 0.0, t * rdp1[p])
    res = epsilon_from_rdp_f64(total, orders, d, "improved")
    return res.epsilon, res.order
  return lax.map(one, (pair, steps, delta), batch_size=_CELL_BATCH)


_rdp_jit = jax.jit(_rdp_local, static_argnames="orders_static")
_eps_jit = jax.jit(_eps_local)


class _Engine:
  """Runs a stage function over chunks sharded along the cells of a device mesh."""

  def __init__(self, devices: tuple):
    self.devices = devices
    self.n = len(devices)
    mesh = Mesh(np.asarray(devices), ("cells",))
    self.cells = NamedSharding(mesh, PartitionSpec("cells"))
    self.replicated = NamedSharding(mesh, PartitionSpec())

  def chunk_len(self, total: int, chunk_size: int, batch: int) -> int:
    """Cells per chunk: devices x a per-device length that ignores the device count."""
    # Power-of-two buckets (at least 32) limit recompilation across grid sizes (the
    # SGM kernel takes seconds to compile); whole batches per device.
    length = min(chunk_size, max(32, 1 << max(total - 1, 1).bit_length()))
    return self.n * (-(-length // batch) * batch)

  def replicate(self, x) -> jax.Array:
    return jax.device_put(x, self.replicated)

  def run(self, fn, cell_args, replicated_args):
    """fn(*replicated_args, *cell_args) per device on its shard; host outputs in order."""
    placed = [jax.device_put(a, self.cells) for a in cell_args]

    def local(arr, device):
      return next(s for s in arr.addressable_shards if s.device == device)

    def launch(device):
      shards = [local(a, device) for a in placed]
      with x64_context():  # the x64 scope is thread-local
        out = fn(*[local(r, device).data for r in replicated_args], *[s.data for s in shards])
      return shards[0].index, out

    if self.n == 1:
      results = [launch(self.devices[0])]
    else:
      with ThreadPoolExecutor(self.n) as pool:
        results = list(pool.map(launch, self.devices))
    outs = []
    for k in range(len(jax.tree_util.tree_leaves(results[0][1]))):
      host = None
      for index, out in results:
        leaf = np.asarray(jax.tree_util.tree_leaves(out)[k])
        if host is None:
          host = np.empty((placed[0].shape[0],) + leaf.shape[1:], leaf.dtype)
        host[index[0]] = leaf
      outs.append(host)
    return outs


@functools.lru_cache(maxsize=8)
def _engine(devices: tuple) -> _Engine:
  return _Engine(devices)


def _padded(x: np.ndarray, length: int, fill) -> np.ndarray:
  if x.shape[0] == length:
    return x
  pad = np.full((length - x.shape[0],) + x.shape[1:], fill, dtype=x.dtype)
  return np.concatenate([x, pad])


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
    devices: Sequence[jax.Device] | None = None,
) -> SweepResult:
  """Epsilon of DP-SGD on the full outer-product grid of the given axes, in one call.

  Give the sampling either as `q` or as `dataset_size` and `batch_size`
  (q = batch_size / dataset_size), and the duration either as `steps` or as `epochs`
  (steps = ceil(epochs * dataset_size / batch_size); needs the dataset form). Each
  axis is a scalar or a 1-D sequence; the grid dimensions are, in order,
  (q | dataset_size, batch_size), sigma, (steps | epochs), delta.

  The per-step RDP is computed once per (q, sigma) pair and scaled by the steps of
  each cell (see the module docstring). Cells are processed in chunks of
  `chunk_size` and sharded over `devices` when there are several.

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
      up to whole batches of 8 pairs or 32 cells.
    progress: show a progress bar (tqdm if installed, else a stderr counter). The
      default shows one when the grid takes more than one chunk.
    devices: devices to shard over; default `jax.devices()`. Pass one device to turn
      sharding off.

  Returns:
    `SweepResult` with numpy arrays (epsilon, order, q, steps) and the axis values.

  Raises:
    ValueError: an axis value out of range, or an inconsistent set of axes.

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

    placer = _engine(tuple(jax.devices() if devices is None else devices))
    orders_dev = placer.replicate(orders_np)
    orders_static = StaticArray(orders_np)
    n_pairs, n_cells = n_samp * n_sigma, math.prod(shape)
    len1 = placer.chunk_len(n_pairs, chunk_size, _PAIR_BATCH)
    len2 = placer.chunk_len(n_cells, chunk_size, _CELL_BATCH)
    chunks1 = -(-n_pairs // len1)
    chunks2 = -(-n_cells // len2)
    bar = progress_bar(
        chunks1 + chunks2, "jaxrdp sweep", chunks2 > 1 if progress is None else progress
    )
    try:
      # Stage 1: per-step RDP of every (q, sigma) pair.
      q_pairs = np.repeat(q_samp.ravel(), n_sigma)
      s_pairs = np.tile(axes["sigma"], n_samp)
      rdp1 = np.empty((n_pairs, orders_np.size))
      for c in range(chunks1):
        lo, hi = c * len1, min((c + 1) * len1, n_pairs)
        (out,) = placer.run(
            lambda o, q, s: _rdp_jit(q, s, o, orders_static=orders_static),
            [_padded(q_pairs[lo:hi], len1, 0.5), _padded(s_pairs[lo:hi], len1, 1.0)],
            [orders_dev],
        )
        rdp1[lo:hi] = out[: hi - lo]
        bar.update(1)
      rdp1_dev = placer.replicate(rdp1)

      # Stage 2: scale by the steps of each cell and convert at its delta.
      eps = np.empty(n_cells)
      order = np.empty(n_cells)
      grid = (n_samp, n_sigma, n_dur, n_delta)
      for c in range(chunks2):
        lo, hi = c * len2, min((c + 1) * len2, n_cells)
        p, s, t, d = np.unravel_index(np.arange(lo, hi), grid)
        out_eps, out_order = placer.run(
            lambda r, o, p, t, d: _eps_jit(r, p, t, d, o),
            [_padded(p * n_sigma + s, len2, 0), _padded(steps_sd[p, t], len2, 1.0),
             _padded(axes["delta"][d], len2, 0.5)],
            [rdp1_dev, orders_dev],
        )
        eps[lo:hi] = out_eps[: hi - lo]
        order[lo:hi] = out_order[: hi - lo]
        bar.update(1)
    finally:
      bar.close()

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
