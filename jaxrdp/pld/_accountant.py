"""Public entry points of the PLD accountant: broadcasting, grids, chunks, float64."""

from __future__ import annotations

import concurrent.futures
import warnings
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core import numerics as _numerics
from .._core import precision as _precision
from .._core.stored_programs import stored_jit
from .._core.validation import check_range, is_concrete
from . import _kernel, _single_step

__all__ = [
  "PldEpsilon",
  "PldDelta",
  "pld_epsilon",
  "pld_delta",
  "pld_epsilon_phases",
  "pld_delta_phases",
  "DEFAULT_RTOL",
  "TRACED_GRID_SIZE",
  "MAX_GRID_SIZE",
]

DEFAULT_RTOL = 1e-5
# Grid size used when the arguments are traced (inside jit/vmap/grad) and no
# grid_size is given: the automatic choice needs concrete values.
TRACED_GRID_SIZE = 2**17
MAX_GRID_SIZE = 2**21
_MIN_GRID_SIZE = 2**10
_MIN_AUTOMATIC_SIZE = 2**13
MAX_STEPS = 1e7
# Bytes of working memory per configuration and grid point (both directions,
# complex spectra, partial sums), measured with jax's CPU backend.
_BYTES_PER_POINT = 400
# Jobs run at once by the host (threads; see _run_jobs). On the 2-core machine:
# 1 -> 4.9 s, 2 -> 3.6 s, 4 -> 3.4 s for the 400-configuration grid.
_WORKERS = 4


class PldEpsilon(NamedTuple):
  """Tight epsilon of a composed Sampled Gaussian Mechanism.

  Attributes:
    epsilon: certified upper bound on the add/remove epsilon (max over both
      adjacency directions).
    epsilon_lower: certified lower bound of the same quantity (optimistic
      side; the true epsilon lies in ``[epsilon_lower, epsilon]``).
  """

  epsilon: jax.Array
  epsilon_lower: jax.Array


class PldDelta(NamedTuple):
  """Tight delta of a composed Sampled Gaussian Mechanism.

  Attributes:
    delta: certified upper bound on the add/remove delta at the given epsilon.
    delta_lower: certified lower bound of the same quantity.
  """

  delta: jax.Array
  delta_lower: jax.Array


def _check_phase(q, sigma, steps, where=""):
  check_range(f"q{where}", q, lower=0.0, upper=1.0)
  check_range(f"sigma{where}", sigma, lower=0.0, lower_open=True)
  check_range(f"steps{where}", steps, lower=0.0, upper=MAX_STEPS)
  arr = None if not is_concrete(steps) else np.asarray(steps, dtype=np.float64)
  if arr is not None and np.any(arr != np.round(arr)):
    raise ValueError(
      f"steps{where} must be a whole number in [0, {MAX_STEPS:g}], got "
      f"{arr[arr != np.round(arr)].flat[0]!r}"
    )


# Epsilons above this are read at this epsilon in delta mode (delta is
# non-increasing, so the upper bound holds), and the Renyi-DP delta at the real
# epsilon is taken where smaller; lower bounds become 0. Beyond it the grid's
# spacing would fall below float64's resolution of epsilon.
EPS_CAP = 1e4


def _check_options(rtol, grid_size, max_grid_size, memory_limit):
  if not (isinstance(rtol, (int, float)) and 1e-9 <= rtol <= 1e-1):
    raise ValueError(f"rtol must be a number in [1e-9, 0.1], got {rtol!r}")
  for name, v in (("grid_size", grid_size), ("max_grid_size", max_grid_size)):
    if v is None and name == "grid_size":
      continue
    if not (
      isinstance(v, (int, np.integer)) and _MIN_GRID_SIZE <= v <= 2**26 and (v & (v - 1)) == 0
    ):
      raise ValueError(f"{name} must be a power of two in [{_MIN_GRID_SIZE}, 2**26], got {v!r}")
  if not (isinstance(memory_limit, (int, float)) and memory_limit >= 2**24):
    raise ValueError(f"memory_limit must be a number of bytes >= 2**24, got {memory_limit!r}")


# Jobs are planned in blocks of this many rows: one compiled shape, so that a
# configuration gets the same plan (bit for bit), hence the same certified
# answer, whatever batch it comes in (XLA's vectorized arithmetic can round
# differently at different batch shapes).
_PLAN_BLOCK = 8


def _host_map(fn, items, workers):
  """``[fn(x) for x in items]``, up to ``workers`` at a time from a pool of threads.

  JAX releases the interpreter lock while a compiled program runs, so one
  call's dispatch overlaps another's computation, and programs run on several
  cores at once. Float64 and the default device are thread-local settings:
  each worker enters the caller's.
  """
  device = jax.config.jax_default_device

  def call(x):
    with _precision.x64_context(), jax.default_device(device):
      return fn(x)

  items = list(items)
  if workers <= 1 or len(items) <= 1:
    return [call(x) for x in items]
  with concurrent.futures.ThreadPoolExecutor(min(workers, len(items))) as pool:
    return list(pool.map(call, items))


def _plan_jobs(q, sigma, steps, target, mode, rtol):
  """Plans (host arrays) and grid points needed: ``(2 size, ...)``, remove rows first."""
  size = q.shape[0]
  rows = -(-size // _PLAN_BLOCK) * _PLAN_BLOCK
  # Host arrays: slicing them costs nothing (slicing a device array dispatches an op).
  args = _pad_rows([np.asarray(x) for x in (q, sigma, steps, target)], rows)

  def one(i):
    out = _kernel.batch_plan_points(*(a[i : i + _PLAN_BLOCK] for a in args), rtol, mode)
    return jax.tree_util.tree_map(np.asarray, out)

  parts = _host_map(one, range(0, rows, _PLAN_BLOCK), _WORKERS)
  (remove, add), need = jax.tree_util.tree_map(lambda *x: np.concatenate(x)[:size], *parts)
  plans = jax.tree_util.tree_map(lambda r, a: np.concatenate([r, a]), remove, add)
  return plans, np.concatenate(need)


def _each_direction(*arrays):
  """The rows twice, remove direction first: ``(*arrays, is_add)``, each ``(2 size, ...)``."""
  size = arrays[0].shape[0]
  is_add = jnp.concatenate([jnp.zeros(size, bool), jnp.ones(size, bool)])
  return (*(jnp.concatenate([a, a]) for a in arrays), is_add)


def _grid_sizes(q, sigma, steps, target, mode, rtol, grid_size, max_grid_size):
  """FFT lengths and plans: ``(sizes, plans, reached)``.

  With concrete arguments, each direction of each row has its own plan (host
  arrays) and, with no ``grid_size``, the smallest FFT length meeting ``rtol``
  (rows are then run by size, so a grid with a few hard cells does not make
  every cell pay for them); ``sizes`` and ``plans`` are pairs (remove, add).
  Under a trace: one static size and no plans (``None``).
  """
  if not all(is_concrete(x) for x in (q, sigma, steps, target)):
    return (TRACED_GRID_SIZE if grid_size is None else grid_size), None, True
  size = q.shape[0]
  plans, need = _plan_jobs(q, sigma, steps, target, mode, rtol)
  plans = [
    jax.tree_util.tree_map(lambda x, i=i: x[i * size : (i + 1) * size], plans) for i in (0, 1)
  ]
  if grid_size is not None:
    return [np.full(size, grid_size, np.int64)] * 2, plans, True
  (n_r, ok_r), (n_a, ok_a) = _sizes(need[:size], max_grid_size), _sizes(need[size:], max_grid_size)
  return [n_r, n_a], plans, ok_r and ok_a


def _next_pow2(x):
  return 1 << max(int(x) - 1, 0).bit_length()


def _pad_rows(arrays, rows):
  """The arrays grown to ``rows`` rows by repeating the last one.

  Host (numpy) arrays stay on the host, where slicing them costs nothing;
  anything else (device arrays, tracers) is padded with ``jnp``.
  """
  size = arrays[0].shape[0]
  if rows == size:
    return arrays
  xp = np if all(isinstance(a, np.ndarray) for a in arrays) else jnp
  return [xp.concatenate([a, xp.repeat(a[-1:], rows - size, axis=0)], axis=0) for a in arrays]


def _batched(q, sigma, steps, tgt, is_add, mode, n, memory_limit):
  """Runs all jobs in chunks of a power-of-two size (few distinct compilations).

  Concrete inputs: a Python loop over chunks, one compiled program per chunk
  size. Traced inputs: ``lax.map`` over the chunks inside the caller's trace.
  """
  size, phases = q.shape
  per_job = _BYTES_PER_POINT * n * phases
  limit = max(1, memory_limit // per_job)
  chunk = min(_next_pow2(size), 1 << (limit.bit_length() - 1))
  rows = -(-size // chunk) * chunk
  q, sigma, steps, tgt, is_add = _pad_rows([q, sigma, steps, tgt, is_add], rows)
  if all(is_concrete(x) for x in (q, sigma, steps, tgt)):
    outs = [
      _kernel.run_jobs(
        q[i : i + chunk],
        sigma[i : i + chunk],
        steps[i : i + chunk],
        tgt[i : i + chunk],
        is_add[i : i + chunk],
        mode,
        n,
        chunk,
      )
      for i in range(0, rows, chunk)
    ]
    up, low, ok, _, _ = (jnp.concatenate(parts)[:size] for parts in zip(*outs))
  else:
    up, low, ok, _, _ = _kernel.run_jobs(q, sigma, steps, tgt, is_add, mode, n, chunk)
    up, low, ok = up[:size], low[:size], ok[:size]
  return up, low, ok


def _both_directions(q, sigma, steps, tgt, mode, n, memory_limit):
  """Both directions of every row on one FFT length ``n``: ``(2, size)`` results."""
  out = _batched(*_each_direction(q, sigma, steps, tgt), mode, n, memory_limit)
  return tuple(x.reshape(2, q.shape[0]) for x in out)


def _run_jobs(jobs, q, sigma, steps, tgt, plans, mode, memory_limit, double_word=False):
  """Runs ``jobs`` (rows, is_add, n: host arrays), one compiled program per FFT length.

  ``plans`` is the pair (remove, add) of host plans. Each job is its own call
  of one compiled program (so its result does not depend on the batch); up to
  ``_WORKERS`` jobs run at once from a pool of threads, as many as
  ``memory_limit`` holds: one job's dispatch overlaps another's computation,
  and the FFTs of different jobs run on different cores. Returns ``(5, jobs)``:
  upper and lower bounds, ok, the slope of ``-log delta`` at the answer, and
  the FFT round-off's share of delta there (see :func:`_kernel.job_epsilon`).
  ``double_word`` composes in double-word arithmetic (``sizes`` powers of two).
  """
  rows, is_add, sizes = jobs
  q, sigma, steps, tgt = (np.asarray(x) for x in (q, sigma, steps, tgt))
  both = [_kernel.pack_jobs(q, sigma, steps, tgt, p)[rows] for p in plans]
  packed = np.where(is_add[:, None], both[1], both[0])
  phases = q.shape[1]

  def one(job):
    row, a, n_b = job
    return np.asarray(_kernel.run_job(row, bool(a), mode, int(n_b), phases, double_word))

  per_job = (
    _BYTES_PER_POINT * int(np.max(sizes)) * phases * (_DOUBLE_WORD_BYTES if double_word else 1)
  )
  outs = _host_map(one, list(zip(packed, is_add, sizes)), min(_WORKERS, memory_limit // per_job))
  return np.stack(outs, axis=1).reshape(5, -1)


# The add direction is first run on an FFT this many times shorter: its answer
# is usually well below the remove direction's, and then a cheaper certified
# bound of it is enough (the maximum is the remove direction's fine answer).
# On small batches this would mostly pay for compiling one more program.
_COARSE_ADD = 8
_COARSE_MIN_ROWS = 16
# Passes after the first where the answers show the plans were off.
_PASSES = 2


def _directions(rows, q, sigma, steps, tgt, plans, mode, n, coarse_first, memory_limit):
  """Both directions of ``rows``: ``(4, 2, rows)`` host array of (up, low, ok, slope).

  Each direction runs on its own grid ``n[direction][row]``; with
  ``coarse_first`` the add direction first runs on a grid ``_COARSE_ADD``
  times coarser, and only rows where that coarse bound is above the remove
  direction's answer run it again on the fine grid. For ``q = 1`` (a Gaussian
  mechanism) the two directions have the same privacy-loss distribution, so
  the add direction is not run.
  """
  size = rows.size
  symmetric = np.all(np.asarray(q)[rows] >= 1.0, axis=-1)
  fine = n[1][rows]
  coarse = np.maximum(fine // (_COARSE_ADD if coarse_first else 1), _MIN_GRID_SIZE)
  asym = np.nonzero(~symmetric)[0]
  jobs = (
    np.concatenate([rows, rows[asym]]),
    np.concatenate([np.zeros(size, bool), np.ones(asym.size, bool)]),
    np.concatenate([n[0][rows], coarse[asym]]),
  )
  res = _run_jobs(jobs, q, sigma, steps, tgt, plans, mode, memory_limit)
  out = np.zeros((5, 2, size))
  out[:, 0] = res[:, :size]
  out[:, 1] = out[:, 0]  # symmetric rows: the add direction is the remove one
  out[:, 1, asym] = res[:, size:]
  redo = asym[(out[0, 1, asym] > out[0, 0, asym]) & (coarse[asym] < fine[asym])]
  if redo.size:
    jobs = (rows[redo], np.ones(redo.size, bool), fine[redo])
    out[:, 1, redo] = _run_jobs(jobs, q, sigma, steps, tgt, plans, mode, memory_limit)
  return out


def _per_row_sizes(
  q, sigma, steps, tgt, plans, mode, n, rtol, max_grid_size, automatic, memory_limit
):
  """Both directions with a grid size per row; ``(2, size)`` results (host arrays).

  Epsilon mode first runs :func:`_epsilon_passes`; both modes end with
  :func:`_double_word_pass`.
  """
  size = q.shape[0]
  out = _directions(
    np.arange(size), q, sigma, steps, tgt, plans, mode, n, size >= _COARSE_MIN_ROWS, memory_limit
  )
  if mode == "epsilon":
    out, plans, n = _epsilon_passes(
      out, q, sigma, steps, tgt, plans, n, rtol, max_grid_size, automatic, memory_limit
    )
  out = _double_word_pass(
    out, q, sigma, steps, tgt, plans, mode, n, rtol, max_grid_size, memory_limit
  )
  return out[0], out[1], out[2].astype(bool)


def _epsilon_passes(
  out, q, sigma, steps, tgt, plans, n, rtol, max_grid_size, automatic, memory_limit
):
  """Up to ``_PASSES`` more passes for the directions whose answer shows that their plan was off.

  Where the answer lies below the window (a valid but loose bound), the window
  is extended down to 0, and where it was not found in the window (infinite),
  the window is also doubled upwards; where the first answer (an upper bound of
  the truth) and the slope of ``log delta`` there call for a finer grid than the
  plan's estimates did (the saddle-point estimate is poor when few steps include
  the example), the grid is refined. The add direction is only revisited where
  it could be the larger one. Returns ``(out, plans, n)``, the plans and grid
  sizes as last used (copies: the caller's are unchanged).
  """
  size = q.shape[0]
  rows = np.arange(size)
  plans = [jax.tree_util.tree_map(np.copy, p) for p in plans]
  n = [np.copy(x) for x in n]
  todo = rows
  for _ in range(_PASSES):
    again = np.zeros(size, bool)
    for i in (0, 1):
      up, ok, slope = out[0, i], out[2, i].astype(bool), out[3, i]
      below = ~ok & np.isfinite(up)
      above = ~ok & ~np.isfinite(up)
      redo = below | above
      if automatic:
        # The window and the tilt stay; the error model takes the measured
        # slope and the answer (the tilt must not follow the slope: in a lumpy
        # composition it would weigh the far tail).
        usable = ok & (up > 0) & np.isfinite(slope)
        plans[i].eps_est[usable] = np.minimum(plans[i].eps_est[usable], up[usable])
        plans[i].lam_read[usable] = np.maximum(plans[i].lam_read[usable], slope[usable] - 1.0)
        need = np.asarray(_kernel.batch_required_points(plans[i], np.asarray(steps), rtol))
        n_new = _sizes(need, max_grid_size)[0]
        # (the error model is approximate: a grid within 20% of the need is kept)
        finer = usable & (need > 1.2 * n[i]) & (n_new > n[i])
        n[i] = np.where(finer, n_new, n[i])
        redo = below | above | finer
      plans[i].lo[below | above] = np.minimum(plans[i].lo[below | above], 0.0)
      plans[i].hi[above] = plans[i].hi[above] + (plans[i].hi[above] - plans[i].lo[above])
      if i == 1:
        redo &= out[0, 1] > out[0, 0]  # only where it could be the larger one
      again |= redo
    todo = rows[again & np.isin(rows, todo)]
    if not todo.size:
      break
    out[:, :, todo] = _directions(
      todo, q, sigma, steps, tgt, plans, "epsilon", n, False, memory_limit
    )
  return out, plans, n


# A direction is composed again in double-word arithmetic where the float64
# FFT's certified round-off moves its answer by more than this share of rtol.
_DOUBLE_WORD_SHARE = 0.1
# Its working memory per grid point, relative to a float64 job.
_DOUBLE_WORD_BYTES = 4


def _double_word_pass(out, q, sigma, steps, tgt, plans, mode, n, rtol, max_grid_size, memory_limit):
  """Recomposes in double-word arithmetic the directions limited by FFT round-off.

  The float64 round-off bound is relative to the total tilted mass; where delta
  is tiny and the composition lumpy, it is not small next to delta and the
  upper bound is loose by more than ``rtol``. Those directions run again on a
  power-of-two grid (the next one up, unless that exceeds ``max_grid_size``)
  with :func:`_compose.compose_double_word`; the tighter of the two certified
  bounds is kept. The add direction is redone only where it could be the
  larger one.
  """
  symmetric = np.all(np.asarray(q) >= 1.0, axis=-1)
  top = 1 << (int(max_grid_size).bit_length() - 1)
  for i in (0, 1):
    up, slope, share = out[0, i], out[3, i], out[4, i]
    with np.errstate(divide="ignore", invalid="ignore"):
      effect = share / np.maximum(slope * up, 1e-300) if mode == "epsilon" else share
    flag = np.isfinite(up) & (up > 0) & (effect > _DOUBLE_WORD_SHARE * rtol)
    if i == 1:
      flag &= ~symmetric & (out[0, 1] >= out[0, 0])
    rows = np.nonzero(flag)[0]
    if not rows.size:
      continue
    sizes = np.array([min(_next_pow2(x), top) for x in n[i][rows]], np.int64)
    jobs = (rows, np.full(rows.size, i == 1), sizes)
    res = _run_jobs(jobs, q, sigma, steps, tgt, plans, mode, memory_limit, double_word=True)
    better = res[0] <= out[0, i, rows]
    out[:, i, rows[better]] = res[:, better]
    if i == 0:
      out[:, 1, symmetric] = out[:, 0, symmetric]
  return out


def _sizes(need, max_grid_size):
  """FFT lengths for the points needed: ``(sizes, reached)``.

  The smallest length of the form ``2^k`` or ``3 2^k`` (both fast for the FFT,
  and multiples of the reader's block) that holds ``need`` points.
  """
  need = np.where(np.isfinite(need), need, float(max_grid_size) * 2)
  # Below 2^13 points a job costs little either way, and one program serves them all.
  need = np.maximum(need, _MIN_AUTOMATIC_SIZE)
  pow2 = 2.0 ** np.ceil(np.log2(need))
  three = 3.0 * 2.0 ** np.ceil(np.log2(need / 3.0))
  n = np.minimum(pow2, three).astype(np.int64)
  return np.minimum(n, max_grid_size), bool(np.all(n <= max_grid_size))


def _rdp_epsilon(q, sigma, steps, delta):
  """Renyi-DP epsilon of rows of phases (``(B, P)`` arrays), a certified upper bound."""
  from ..events import Composed, Gaussian, PoissonSampled, SelfComposed
  from ..rdp._accountant import RdpAccountant

  event = Composed(
    tuple(
      SelfComposed(PoissonSampled(q[:, j], Gaussian(sigma[:, j])), steps[:, j])
      for j in range(q.shape[1])
    )
  )
  return RdpAccountant().epsilon(event, delta).epsilon


def _rdp_delta(q, sigma, steps, epsilon):
  """Renyi-DP delta of rows of phases (``(B, P)`` arrays), a certified upper bound."""
  from ..events import Composed, Gaussian, PoissonSampled, SelfComposed
  from ..rdp._accountant import RdpAccountant

  event = Composed(
    tuple(
      SelfComposed(PoissonSampled(q[:, j], Gaussian(sigma[:, j])), steps[:, j])
      for j in range(q.shape[1])
    )
  )
  return RdpAccountant().delta(event, epsilon).delta


class _Edges(NamedTuple):
  """Rows answered (partly) outside the composition; see :func:`_regularize`."""

  nothing: jax.Array  # (B,) every phase empty: the answer is 0
  floored: jax.Array  # (B,) some rate raised to RATE_FLOOR: the lower bound is 0
  capped: jax.Array  # (B,) delta mode, epsilon above EPS_CAP


def _regularize(q, sigma, steps, tgt, mode):
  """Rows the composition can run, and what :func:`_edge_answers` must fix afterwards.

  A phase with ``q = 0`` or ``steps = 0`` releases nothing: it runs with no steps
  (its spectrum is 1). A row where every phase is empty runs a stand-in phase
  and answers 0. Rates in ``(0, RATE_FLOOR)`` run at ``RATE_FLOOR``; epsilons (delta
  mode) above ``EPS_CAP`` run at ``EPS_CAP``. Invalid values are left alone
  (their rows become NaN).
  """
  # Rates below RATE_FLOOR (subnormals too, which XLA's CPU arithmetic reads as
  # 0) run at RATE_FLOOR: sound for the upper bounds (see _numerics.floor_rate).
  floored_q = _numerics.floor_rate(q)
  empty = (floored_q == 0) | (steps == 0)
  nothing = jnp.all(empty, axis=-1)
  floored = jnp.any((floored_q != q) & ~empty, axis=-1)
  q = jnp.where(empty, 1.0, floored_q)
  steps = jnp.where(empty, 0.0, steps)
  stand_in = nothing[:, None] & (jnp.arange(q.shape[1]) == 0)
  q = jnp.where(stand_in, 1.0, q)
  sigma = jnp.where(stand_in, 1.0, sigma)
  steps = jnp.where(stand_in, 1.0, steps)
  capped = (tgt > EPS_CAP) if mode == "delta" else jnp.zeros_like(nothing)
  tgt = jnp.where(capped & jnp.isfinite(tgt), EPS_CAP, tgt)
  if mode == "delta":
    tgt = jnp.where(jnp.isinf(tgt), EPS_CAP, tgt)
  return q, sigma, steps, tgt, _Edges(nothing, floored, capped)


def _edge_answers(up, low, edges, q, sigma, steps, tgt, mode):
  """The composed answers with the edge rows of :func:`_regularize` fixed."""
  if mode == "delta" and is_concrete(tgt) and bool(np.any(np.asarray(edges.capped))):
    rows = np.nonzero(np.asarray(edges.capped) & ~np.asarray(edges.nothing))[0]
    if rows.size:
      rdp = _rdp_delta(q[rows], sigma[rows], steps[rows], tgt[rows])
      up = up.at[rows].set(jnp.minimum(up[rows], rdp))
  return _edge_zeros(up, low, edges)


def _edge_zeros(up, low, edges):
  """The lower bounds of floored and capped rows, and both bounds of empty rows, set to 0."""
  low = jnp.where(edges.floored | edges.capped, 0.0, low)
  up = jnp.where(edges.nothing, 0.0, up)
  low = jnp.where(edges.nothing, 0.0, low)
  return up, low


def _directions_of_rows(q, sigma, steps, tgt, mode, options):
  """Certified ``(2, size)`` ``(up, low, ok)`` of rows of phases, one per direction."""
  rtol, grid_size, max_grid_size, memory_limit = options
  n, plans, reached = _grid_sizes(q, sigma, steps, tgt, mode, rtol, grid_size, max_grid_size)
  if not reached:
    warnings.warn(
      f"the PLD grid needed for rtol={rtol:g} exceeds max_grid_size="
      f"{max_grid_size}; the result is a certified bound at that size, less "
      "tight (see the lower bound)",
      RuntimeWarning,
      stacklevel=6,
    )
  if plans is not None:
    return _per_row_sizes(
      q, sigma, steps, tgt, plans, mode, n, rtol, max_grid_size, grid_size is None, memory_limit
    )
  return _both_directions(q, sigma, steps, tgt, mode, n, memory_limit)


def _combine(up2, low2, ok2, mode):
  """The add/remove answer: the larger of the two directions (both certified)."""
  up = jnp.max(jnp.asarray(up2), axis=0)
  if mode == "epsilon":
    up = jnp.maximum(up, 0.0)
  low = jnp.clip(jnp.max(jnp.asarray(low2), axis=0), 0.0, up)
  return up, low, jnp.all(jnp.asarray(ok2), axis=0)


def _compose_rows(q, sigma, steps, tgt, mode, options):
  """Certified ``(up, low, ok)`` of rows of phases by composing their PLDs (both directions)."""
  return _combine(*_directions_of_rows(q, sigma, steps, tgt, mode, options), mode)


def _prepare(*args, mode):
  """The arguments (phases' leaves, then the target) as rows: ``(q, sigma, steps, tgt,
  edges, invalid, target)``, ``(size, P)`` and ``(size,)``, float64, regularized
  (:func:`_regularize`); ``invalid`` marks rows outside the domain, ``target`` is the
  target as given."""
  *flat, tgt = args
  arrays = jnp.broadcast_arrays(*[_precision.as_float64(x) for x in [*flat, tgt]])
  shape = arrays[0].shape
  size = int(np.prod(shape)) if shape else 1
  cols = [a.reshape(size) for a in arrays]
  q = jnp.stack(cols[0:-1:3], axis=-1)
  sigma = jnp.stack(cols[1:-1:3], axis=-1)
  steps = jnp.round(jnp.stack(cols[2:-1:3], axis=-1))
  q, sigma, steps, tgt, edges = _regularize(q, sigma, steps, cols[-1], mode)
  invalid = jnp.zeros(size, bool)
  for a in cols[:-1:3]:
    invalid |= ~((a >= 0) & (a <= 1))
  for a in cols[1:-1:3]:
    invalid |= ~(a > 0)
  for a in cols[2:-1:3]:
    # (a traced non-integer count of steps is invalid, not rounded to fewer steps)
    invalid |= ~((a >= 0) & (a <= MAX_STEPS) & (a == jnp.round(a)))
  t_in = cols[-1]
  invalid |= ~((t_in > 0) & (t_in < 1)) if mode == "epsilon" else ~(t_in >= 0)
  return q, sigma, steps, tgt, edges, invalid, t_in


def _finish(up, low, invalid, *, shape):
  """The answers of :func:`_prepare`'s rows, invalid rows NaN, in the arguments'
  broadcast shape."""
  up = jnp.where(invalid, jnp.nan, up)
  low = jnp.where(invalid, jnp.nan, low)
  return up.reshape(shape), low.reshape(shape)


@stored_jit(static_argnames=("mode",))
def _prepare_rows(args, mode):
  """:func:`_prepare` of concrete arguments, as one stored program."""
  return _prepare(*args, mode=mode)


@stored_jit(static_argnames=("mode", "shape"))
def _finish_rows(up2, low2, ok2, one, up1, low1, cap, edges, invalid, mode, shape):
  """The answers of concrete rows, as one stored program: rows composed (directions
  ``(2, size)`` from :func:`_directions_of_rows`) and rows of one step (``one``,
  closed-form ``up1``, ``low1``) joined, the Renyi-DP cap of delta mode's capped
  rows applied (``cap``, +inf elsewhere), then :func:`_finish`."""
  up, low, ok = _combine(up2, low2, ok2, mode)
  up, low = jnp.where(one, up1, up), jnp.where(one, low1, low)
  ok = ok | one
  capped = edges.capped & ~edges.nothing
  up = jnp.where(capped, jnp.minimum(up, cap), up)
  up, low = _finish(*_edge_zeros(up, low, edges), invalid, shape=shape)
  return up, low, ok


def _run_concrete(args, mode, options):
  """:func:`_run`'s kernel for concrete arguments: two stored programs around the host's
  planning and the stored PLD jobs, no operation dispatched one by one (each would
  compile a program of its own in a fresh process). Returns flat ``(up, low, ok,
  invalid)`` and the shape."""
  shape = np.broadcast_shapes(*(np.shape(a) for a in args))
  prepared = jax.tree_util.tree_map(np.asarray, _prepare_rows(tuple(args), mode))
  q, sigma, steps, tgt, edges, invalid, t_in = prepared
  size = q.shape[0]
  up2, low2, ok2 = np.zeros((2, size)), np.zeros((2, size)), np.ones((2, size), bool)
  up1, low1 = np.zeros(size), np.zeros(size)
  # One step needs no composition: those rows are solved from the closed form.
  one = (steps[:, 0] == 1.0) if q.shape[1] == 1 else np.zeros(size, bool)
  rows = np.nonzero(~one)[0]
  if rows.size:
    parts = _directions_of_rows(q[rows], sigma[rows], steps[rows], tgt[rows], mode, options)
    for full, part in zip((up2, low2, ok2), parts):
      full[:, rows] = part
  rows = np.nonzero(one)[0]
  if rows.size:
    parts = _single_step.exact(q[rows, 0], sigma[rows, 0], tgt[rows], mode)
    up1[rows], low1[rows] = (np.asarray(x) for x in parts)
  cap = np.full(size, np.inf)
  rows = np.nonzero(edges.capped & ~edges.nothing)[0] if mode == "delta" else []
  if len(rows):
    cap[rows] = np.asarray(_rdp_delta(q[rows], sigma[rows], steps[rows], t_in[rows]))
  up, low, ok = _finish_rows(up2, low2, ok2, one, up1, low1, cap, edges, invalid, mode, shape)
  return up, low, ok, invalid, (q, sigma, steps, tgt), shape


def _run(phases, target, mode, rtol, grid_size, max_grid_size, memory_limit):
  _check_options(rtol, grid_size, max_grid_size, memory_limit)
  for i, (q, sigma, steps) in enumerate(phases):
    _check_phase(q, sigma, steps, "" if len(phases) == 1 else f"[{i}]")
  if mode == "epsilon":
    check_range("delta", target, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  else:
    check_range("epsilon", target, lower=0.0)
  leaves = [x for ph in phases for x in ph] + [target]
  options = (rtol, grid_size, max_grid_size, memory_limit)

  def kernel(*args):
    if all(is_concrete(x) for x in args):
      up, low, ok, invalid, (q, sigma, steps, tgt), shape = _run_concrete(args, mode, options)
    else:
      q, sigma, steps, tgt, edges, invalid, t_in = _prepare(*args, mode=mode)
      shape = jnp.broadcast_shapes(*(jnp.shape(a) for a in args))
      up, low, ok = _compose_rows(q, sigma, steps, tgt, mode, options)
      if q.shape[1] == 1:
        # One step: the exact interval from the closed-form curve.
        up, low = _single_step.refine(q[:, 0], sigma[:, 0], steps[:, 0], tgt, up, low, mode)
      up, low = _edge_answers(up, low, edges, q, sigma, steps, t_in, mode)
      up, low = _finish(up, low, invalid, shape=shape)
    if mode == "epsilon" and is_concrete(up):
      lost = np.nonzero(np.isinf(np.asarray(up)).ravel() & ~np.asarray(invalid))[0]
      if lost.size:
        # The window cannot hold the answer (an epsilon in the tens of
        # thousands: (1 + lam) W is limited by float64): the Renyi-DP bound,
        # an upper bound of the tight epsilon, is finite there.
        rdp = _rdp_epsilon(q[lost], sigma[lost], steps[lost], tgt[lost])
        up = up.reshape(-1).at[lost].set(rdp).reshape(shape)
        warnings.warn(
          "the tight epsilon of some configurations is beyond what the PLD grid "
          "can hold (epsilon in the tens of thousands); their Renyi-DP epsilon, "
          "a valid but looser upper bound, is returned",
          RuntimeWarning,
          stacklevel=4,
        )
    if is_concrete(ok) and not bool(np.all(np.asarray(ok) | np.asarray(invalid))):
      warnings.warn(
        "the PLD window missed the answer for some configurations; their "
        "results are valid but loose bounds",
        RuntimeWarning,
        stacklevel=4,
      )
    return up, low

  # The lower bounds are rounded down, the upper ones up, when cast to float32.
  return _precision.elementwise_float64(kernel, tuple(leaves), down=(False, True))


def pld_epsilon(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  delta: ArrayLike,
  *,
  rtol: float = DEFAULT_RTOL,
  grid_size: int | None = None,
  max_grid_size: int = MAX_GRID_SIZE,
  memory_limit: int = 2**30,
) -> PldEpsilon:
  r"""Tight epsilon of ``steps`` Poisson-subsampled Gaussian steps, certified.

  Numerically composes the privacy-loss distribution (PLD) of the Sampled
  Gaussian Mechanism (rate ``q``, noise multiplier ``sigma``, sensitivity 1)
  and returns the smallest epsilon with ``delta(epsilon) <= delta`` under
  add/remove adjacency, as a certified interval. See ``jaxrdp.pld`` for the
  construction and the error model.

  Accuracy: ``epsilon`` is never below the true value; at the default
  ``rtol`` it is within about ``1e-5`` relative of it (the grid is chosen per
  batch from an error model of connect-the-dots, ``err ~ T d^2 (1 + lam) / 8``).
  ``epsilon_lower`` is a certified lower bound (Hoeffding coupling), looser,
  typically ``1e-3`` to ``1e-2`` relative below.

  Args:
    q: sampling rate in (0, 1].
    sigma: noise multiplier, > 0.
    steps: number of steps, a whole number in [1, 1e7].
    delta: target delta in (0, 1). All four broadcast (NumPy rules).
    rtol: relative accuracy target that sets the grid (automatic grid only).
    grid_size: FFT length (power of two). ``None``: the smallest power of two
      meeting ``rtol`` for the whole batch (needs concrete arguments; under a
      trace ``TRACED_GRID_SIZE`` is used).
    max_grid_size: cap of the automatic grid (a warning says when it binds).
    memory_limit: working-memory budget in bytes: under a trace the batch runs in
      chunks; otherwise it bounds how many jobs (up to four) run at once.

  Returns:
    :class:`PldEpsilon` of float64 arrays of the broadcast shape (float32 rounded
    up when a caller traces with x64 off).

  Raises:
    ValueError: for concrete arguments outside their ranges.

  Examples:
    >>> import jaxrdp.pld
    >>> r = jaxrdp.pld.pld_epsilon(256 / 60000, 1.1, 14063, 1e-5)
    >>> round(float(r.epsilon), 4)
    2.3817
  """
  up, low = _run(
    [(q, sigma, steps)], delta, "epsilon", rtol, grid_size, max_grid_size, memory_limit
  )
  return PldEpsilon(up, low)


def pld_delta(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  epsilon: ArrayLike,
  *,
  rtol: float = DEFAULT_RTOL,
  grid_size: int | None = None,
  max_grid_size: int = MAX_GRID_SIZE,
  memory_limit: int = 2**30,
) -> PldDelta:
  r"""Tight delta at ``epsilon`` of ``steps`` Poisson-subsampled Gaussian steps, certified.

  ``delta(eps) = max_dir [P_inf + sum_{s > eps} p_s (1 - e^{eps - s})]`` over the
  composed PLD. Arguments as in :func:`pld_epsilon` with ``epsilon >= 0`` in
  place of ``delta``.

  Returns:
    :class:`PldDelta` (upper bound ``delta`` and lower bound ``delta_lower``).
  """
  up, low = _run(
    [(q, sigma, steps)], epsilon, "delta", rtol, grid_size, max_grid_size, memory_limit
  )
  return PldDelta(up, low)


def pld_epsilon_phases(phases: Sequence[tuple], delta: ArrayLike, **options) -> PldEpsilon:
  """Tight epsilon of a sequence of phases ``[(q, sigma, steps), ...]`` composed together.

  Each phase may use its own rate, noise and number of steps (e.g. a schedule);
  all phases share one grid and one FFT: the spectra multiply,
  ``prod_j c_j^{T_j}``. Every entry broadcasts with ``delta``. Options as in
  :func:`pld_epsilon`.
  """
  phases = [tuple(p) for p in phases]
  if not phases or any(len(p) != 3 for p in phases):
    raise ValueError("phases must be a non-empty sequence of (q, sigma, steps) triples")
  up, low = _run(
    phases,
    delta,
    "epsilon",
    options.get("rtol", DEFAULT_RTOL),
    options.get("grid_size"),
    options.get("max_grid_size", MAX_GRID_SIZE),
    options.get("memory_limit", 2**30),
  )
  return PldEpsilon(up, low)


def pld_delta_phases(phases: Sequence[tuple], epsilon: ArrayLike, **options) -> PldDelta:
  """Tight delta at ``epsilon`` of composed phases; see :func:`pld_epsilon_phases`."""
  phases = [tuple(p) for p in phases]
  if not phases or any(len(p) != 3 for p in phases):
    raise ValueError("phases must be a non-empty sequence of (q, sigma, steps) triples")
  up, low = _run(
    phases,
    epsilon,
    "delta",
    options.get("rtol", DEFAULT_RTOL),
    options.get("grid_size"),
    options.get("max_grid_size", MAX_GRID_SIZE),
    options.get("memory_limit", 2**30),
  )
  return PldDelta(up, low)
