"""Grid sweeps: epsilon (and attack risk) of DP-SGD over the outer product of hyperparameter axes.

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

Asked for (``tpr_at_fpr``, ``advantage``), the attack risk of every (sampling,
sigma, duration) cell is added, read by the same accountant
(:func:`jaxrdp.dpsgd_tpr`, :func:`jaxrdp.dpsgd_advantage`): it does not depend on
delta, so it is computed once per cell of the other axes, in one call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh
from jax.typing import ArrayLike

from .._core.precision import x64_context
from .._core.progress import progress_bar
from .._core.validation import StaticArray, check_range, check_real
from ..accountants._dpsgd import accountant_and_orders, dpsgd_epsilon
from ..accountants._protocol import accountant_name, require_support
from ..calibration._calibration import orders_array
from ..events._dataset import epochs_to_steps
from ..events._dpsgd import dpsgd_event, resolve_scheme
from ..rdp import _sampling
from ..rdp._accountant import RdpAccountant
from ..risk._api import dpsgd_advantage, dpsgd_tpr, resolve_risk_accountant
from ._result import SweepResult
from ._sharding import (
  _CELL_BATCH,
  _PAIR_BATCH,
  _cell_mesh,
  _check_devices,
  _eps_local,
  _fingerprint,
  _map_chunks,
  _padded,
  _program,
  _rdp_local,
  _scheme_rdp_local,
)

__all__ = ["SweepResult", "sweep"]

_DEFAULT_CHUNK = 1 << 14


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


def _cells_rdp(
  q_samp, axes, steps_sd, orders_np, shape, chunk_size, progress, devices, scheme=None
):
  """The two-stage Renyi-DP sweep of the cells, sharded over `devices`: (epsilon, order).

  `scheme`: `None` for Poisson sampling under add/remove, else the scheme of the run's
  event (`jaxrdp.rdp._sampling.DpsgdScheme`, a static argument), whose per-step curve
  is composed; `steps_sd` then holds the number of curves each cell composes (epochs
  for shuffling).
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
        [] if scheme is None else [repr(scheme)],
      )
    )
    orders_dev = cells.replicate(orders_np)
    static = (("orders_static", StaticArray(orders_np)),)
    if scheme is not None:
      static += (("scheme", scheme),)
    rdp_program = _program(_rdp_local if scheme is None else _scheme_rdp_local, cells.mesh, 1, 2)
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
        lambda q, s: rdp_program(orders_dev, q, s, static=static),
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


def _cells_with_accountant(
  accountant, q_samp, sigma, steps_sd, delta, chunk_size, progress, scheme
):
  """epsilon of every cell through :func:`jaxrdp.dpsgd_epsilon`, chunk by chunk:
  (epsilon, order), the order NaN for an accountant whose result has none."""
  n_samp, n_sigma, n_dur, n_delta = q_samp.size, sigma.size, steps_sd.shape[1], delta.size
  n_cells = n_samp * n_sigma * n_dur * n_delta
  grid = (n_samp, n_sigma, n_dur, n_delta)
  chunks = -(-n_cells // chunk_size)
  show = chunks > 1 and jax.process_index() == 0 if progress is None else progress
  bar = progress_bar(chunks, "jaxrdp sweep", show)
  eps = np.empty(n_cells)
  order = np.full(n_cells, np.nan)
  try:
    for lo in range(0, n_cells, chunk_size):
      hi = min(lo + chunk_size, n_cells)
      p, s, t, d = np.unravel_index(np.arange(lo, hi), grid)
      res = dpsgd_epsilon(
        q_samp.ravel()[p], sigma[s], steps_sd[p, t], delta[d], accountant=accountant, **scheme
      )
      eps[lo:hi] = np.asarray(res.epsilon)
      if hasattr(res, "order"):
        order[lo:hi] = np.asarray(res.order)
      bar.update(1)
  finally:
    bar.close()
  return eps, order


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
  tpr_at_fpr: float | None = None,
  advantage: bool = False,
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
    sampling: the batching scheme, `"poisson"` (default), `"fixed"`, `"shuffle"` or
      `"allocation"`, and
    relation: the neighbouring relation (default per scheme), as in
      `jaxrdp.dpsgd_epsilon`; q is B / n for `"fixed"` and `"shuffle"` (for
      `"shuffle"` a cell of T steps composes ceil(T q) epochs), and k / t for
      `"allocation"` (epochs of t steps, each example in k of them). An accountant
      that cannot account the scheme is refused, naming one that can. Random
      allocation is evaluated cell by cell through `jaxrdp.dpsgd_epsilon`, in chunks
      of `chunk_size` on the default device, with either accountant (with the
      Renyi-DP one, at `orders`; the tight one takes seconds per cell).
    tpr_at_fpr: a false-positive rate in [0, 1]: also report, per cell, the
      true-positive rate of the best membership-inference attack at it
      (:func:`jaxrdp.dpsgd_tpr`, by the same accountant: tight with certified
      upper and lower bounds for ``"pld"``, the looser Renyi-DP upper bound, with
      the FPR as lower bound, for ``"rdp"``). Poisson sampling under add/remove only.
    advantage: also report the membership advantage ``max (TPR - FPR)``
      (:func:`jaxrdp.dpsgd_advantage`, likewise).

  Returns:
    `SweepResult` with numpy arrays (epsilon, order, q, steps) and the axis values,
    and the attack risk (``tpr``, ``tpr_lower``, ``advantage``,
    ``advantage_lower``) where asked for.

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
  sampling, relation = resolve_scheme(sampling, relation)
  acct, orders = accountant_and_orders(accountant, orders)
  if not isinstance(advantage, (bool, np.bool_)):
    raise TypeError(f"advantage must be True or False, got {type(advantage).__name__}")
  wants_risk = tpr_at_fpr is not None or bool(advantage)
  if tpr_at_fpr is not None:
    check_real("tpr_at_fpr", tpr_at_fpr)
    if np.ndim(tpr_at_fpr) != 0:
      raise ValueError(
        f"tpr_at_fpr must be one false-positive rate (a scalar), got shape "
        f"{np.shape(tpr_at_fpr)}; call jaxrdp.tradeoff_curve for a curve"
      )
    check_range("tpr_at_fpr", tpr_at_fpr, lower=0.0, upper=1.0)
  event = dpsgd_event(0.5, 1.0, 1.0, sampling=sampling, relation=relation)
  rdp_scheme = _sampling.dpsgd_scheme(event)  # None: accounted cell by cell, as an event
  plain_sgm = rdp_scheme is not None and rdp_scheme.plain_sgm
  if wants_risk:
    if not plain_sgm:
      raise ValueError(
        "tpr_at_fpr and advantage account Poisson sampling under add/remove only, got "
        f"sampling={sampling!r}, relation={relation!r}"
      )
    resolve_risk_accountant(acct)  # an accountant the risk readers cannot read: raised now
  require_support(acct, event)
  scheme = {} if plain_sgm else dict(sampling=sampling, relation=relation)

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
  if rdp_scheme is not None:
    rdp_scheme.check_orders(orders_np)

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

    if rdp_scheme is None or not isinstance(acct, RdpAccountant):
      # Random allocation composes one curve per epoch of t = 1 / q steps, whose curve
      # depends on t: every cell is its own event, through dpsgd_epsilon.
      cell_acct = RdpAccountant(orders_np) if isinstance(acct, RdpAccountant) else acct
      eps, order = _cells_with_accountant(
        cell_acct,
        q_samp,
        axes["sigma"],
        steps_sd,
        axes["delta"],
        chunk_size,
        progress,
        scheme,
      )
    else:
      # Shuffling composes one curve per epoch, ceil(T q) of them; the others one per step.
      count_sd = rdp_scheme.count_host(q_samp.reshape(-1, 1), steps_sd)
      eps, order = _cells_rdp(
        q_samp,
        axes,
        count_sd,
        orders_np,
        shape,
        chunk_size,
        progress,
        devices,
        None if plain_sgm else rdp_scheme,
      )

  n_samp_dims = len(samp_shape)
  q_cell = q_samp.reshape(samp_shape + (1, 1, 1))
  steps_cell = steps_sd.reshape(samp_shape + (1, n_dur, 1))
  if steps is not None:
    steps_cell = axes["steps"].reshape((1,) * n_samp_dims + (1, n_dur, 1))
  risk = {}
  if wants_risk:
    sigma_cell = axes["sigma"].reshape((1,) * n_samp_dims + (n_sigma, 1, 1))
    # The accountant as given (the name "rdp" reads the risk at its own orders), or
    # the Renyi-DP accountant at the orders given for epsilon.
    if isinstance(accountant, str) and orders is not None:
      risk_acct = RdpAccountant(orders)
    else:
      risk_acct = accountant if isinstance(accountant, str) else acct
    risk = _risk_columns(
      risk_acct,
      q_cell,
      sigma_cell,
      steps_sd.reshape(samp_shape + (1, n_dur, 1)),
      tpr_at_fpr,
      bool(advantage),
    )
  return SweepResult(
    axes=axes,
    epsilon=eps.reshape(shape),
    order=order.reshape(shape),
    q=q_cell,
    steps=steps_cell,
    accountant=accountant_name(acct),
    sampling=sampling,
    relation=relation,
    **risk,
  )


def _risk_columns(accountant, q, sigma, steps, fpr, advantage) -> dict:
  """The attack risk of every (sampling, sigma, duration) cell: arrays of shape
  ``sampling + (n_sigma, n_duration, 1)`` (no delta axis: the risk does not depend on it)."""
  q, sigma, steps = np.broadcast_arrays(q, sigma, steps)
  shape = q.shape
  flat = [np.ascontiguousarray(x, dtype=np.float64).ravel() for x in (q, sigma, steps)]
  out = {}
  if fpr is not None:
    r = dpsgd_tpr(*flat, float(fpr), accountant=accountant)
    out["tpr"], out["tpr_lower"] = (np.asarray(x).reshape(shape) for x in r)
  if advantage:
    r = dpsgd_advantage(*flat, accountant=accountant)
    out["advantage"], out["advantage_lower"] = (np.asarray(x).reshape(shape) for x in r)
  if fpr is not None:
    out["fpr"] = float(fpr)
  return out
