"""The tight accountant's driver: jobs (one configuration, one direction) planned, sized and run.

A *job* composes one direction (remove or add) of one configuration on an FFT of a
chosen length (``_kernel``). This module plans every row's grid from its moment-
generating function, runs the jobs (in threads, one compiled program per FFT
length, each job its own call so that its answer does not depend on the batch),
redoes the directions whose first answer shows the plan was off, recomposes in
double-word arithmetic where float64 round-off matters, and returns both
directions (:func:`directions_of_rows`) or the larger of the two
(:func:`compose_rows`, which is :func:`combine` of them). The public functions
(``_accountant``) validate, handle the edges and one-step rows, and call it.
"""

from __future__ import annotations

import concurrent.futures
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from .._core import precision as _precision
from .._core.validation import is_concrete
from . import _kernel, _producers

__all__ = [
  "combine",
  "compose_rows",
  "directions_of_rows",
  "delta_partials_of_rows",
  "one_direction",
  "TRACED_GRID_SIZE",
  "MIN_GRID_SIZE",
]

# Grid size used when the arguments are traced (inside jit/vmap/grad) and no
# grid_size is given: the automatic choice needs concrete values.
TRACED_GRID_SIZE = 2**17
MIN_GRID_SIZE = 2**10
_MIN_AUTOMATIC_SIZE = 2**13
# Bytes of working memory per configuration and grid point (both directions,
# complex spectra, partial sums), measured with jax's CPU backend.
_BYTES_PER_POINT = 400
# Jobs run at once by the host (threads; see _run_jobs). On the 2-core machine:
# 1 -> 4.9 s, 2 -> 3.6 s, 4 -> 3.4 s for the 400-configuration grid.
_WORKERS = 4


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


def one_direction(q, families):
  """``(size,)`` host bools: rows whose add direction is their remove direction, which
  is run alone. Every producer's two directions agree at ``q = 1``; a symmetric
  producer's at every ``q`` (``_producers``)."""
  return np.all(np.asarray(q) >= 1.0, axis=-1) | _producers.symmetric(families)


def _plan_jobs(q, sigma, steps, target, mode, rtol, families):
  """Plans (host arrays) and grid points needed: ``(2 size, ...)``, remove rows first."""
  size = q.shape[0]
  rows = -(-size // _PLAN_BLOCK) * _PLAN_BLOCK
  # Host arrays: slicing them costs nothing (slicing a device array dispatches an op).
  args = _pad_rows([np.asarray(x) for x in (q, sigma, steps, target)], rows)

  def one(i):
    out = _kernel.batch_plan_points(*(a[i : i + _PLAN_BLOCK] for a in args), rtol, mode, families)
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


def _grid_sizes(q, sigma, steps, target, mode, rtol, grid_size, max_grid_size, families):
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
  plans, need = _plan_jobs(q, sigma, steps, target, mode, rtol, families)
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


def _batched(q, sigma, steps, tgt, is_add, mode, n, memory_limit, families):
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
        families,
      )
      for i in range(0, rows, chunk)
    ]
    return tuple(jnp.concatenate(parts)[:size] for parts in zip(*outs))
  out = _kernel.run_jobs(q, sigma, steps, tgt, is_add, mode, n, chunk, families)
  return tuple(x[:size] for x in out)


def _both_directions(q, sigma, steps, tgt, mode, n, memory_limit, families):
  """Both directions of every row on one FFT length ``n``: the jobs' outputs, each
  ``(2, size, ...)``."""
  out = _batched(*_each_direction(q, sigma, steps, tgt), mode, n, memory_limit, families)
  return tuple(x.reshape((2, q.shape[0]) + x.shape[1:]) for x in out)


def _run_jobs(jobs, q, sigma, steps, tgt, plans, mode, memory_limit, families, double_word=False):
  """Runs ``jobs`` (rows, is_add, n: host arrays), one compiled program per FFT length.

  ``plans`` is the pair (remove, add) of host plans. Each job is its own call
  of one compiled program (so its result does not depend on the batch); up to
  ``_WORKERS`` jobs run at once from a pool of threads, as many as
  ``memory_limit`` holds: one job's dispatch overlaps another's computation,
  and the FFTs of different jobs run on different cores. Returns ``(5, jobs)``:
  upper and lower bounds, ok, the slope of ``-log delta`` at the answer, and
  the FFT round-off's share of delta there (see :func:`_kernel.job_epsilon`).
  ``double_word`` composes in double-word arithmetic (``sizes`` powers of two).
  Mode ``"partials"`` returns ``(2 P + 2, jobs)`` (see :func:`_kernel.run_job`).
  """
  rows, is_add, sizes = jobs
  q, sigma, steps, tgt = (np.asarray(x) for x in (q, sigma, steps, tgt))
  both = [_kernel.pack_jobs(q, sigma, steps, tgt, p)[rows] for p in plans]
  packed = np.where(is_add[:, None], both[1], both[0])
  phases = q.shape[1]

  def one(job):
    row, a, n_b = job
    return np.asarray(_kernel.run_job(row, bool(a), mode, int(n_b), families, double_word))

  scale = _DOUBLE_WORD_BYTES if double_word else _PARTIALS_MEMORY if mode == "partials" else 1
  per_job = _BYTES_PER_POINT * int(np.max(sizes)) * phases * scale
  outs = _host_map(one, list(zip(packed, is_add, sizes)), min(_WORKERS, memory_limit // per_job))
  return np.stack(outs, axis=1)


# The add direction is first run on an FFT this many times shorter: its answer
# is usually well below the remove direction's, and then a cheaper certified
# bound of it is enough (the maximum is the remove direction's fine answer).
# On small batches this would mostly pay for compiling one more program.
_COARSE_ADD = 8
_COARSE_MIN_ROWS = 16
# Passes after the first where the answers show the plans were off.
_PASSES = 2


def _directions(rows, q, sigma, steps, tgt, plans, mode, n, coarse_first, memory_limit, families):
  """Both directions of ``rows``: ``(4, 2, rows)`` host array of (up, low, ok, slope).

  Each direction runs on its own grid ``n[direction][row]``; with
  ``coarse_first`` the add direction first runs on a grid ``_COARSE_ADD``
  times coarser, and only rows where that coarse bound is above the remove
  direction's answer run it again on the fine grid. For ``q = 1`` (a Gaussian or a
  Laplace mechanism), or phases whose producers are symmetric, the two directions
  have the same privacy-loss distribution, so the add direction is not run.
  """
  size = rows.size
  symmetric = one_direction(np.asarray(q)[rows], families)
  fine = n[1][rows]
  coarse = np.maximum(fine // (_COARSE_ADD if coarse_first else 1), MIN_GRID_SIZE)
  asym = np.nonzero(~symmetric)[0]
  jobs = (
    np.concatenate([rows, rows[asym]]),
    np.concatenate([np.zeros(size, bool), np.ones(asym.size, bool)]),
    np.concatenate([n[0][rows], coarse[asym]]),
  )
  res = _run_jobs(jobs, q, sigma, steps, tgt, plans, mode, memory_limit, families)
  out = np.zeros((5, 2, size))
  out[:, 0] = res[:, :size]
  out[:, 1] = out[:, 0]  # symmetric rows: the add direction is the remove one
  out[:, 1, asym] = res[:, size:]
  redo = asym[(out[0, 1, asym] > out[0, 0, asym]) & (coarse[asym] < fine[asym])]
  if redo.size:
    jobs = (rows[redo], np.ones(redo.size, bool), fine[redo])
    out[:, 1, redo] = _run_jobs(jobs, q, sigma, steps, tgt, plans, mode, memory_limit, families)
  return out


def _per_row_sizes(
  q, sigma, steps, tgt, plans, mode, n, rtol, max_grid_size, automatic, memory_limit, families
):
  """Both directions with a grid size per row; ``(2, size)`` results (host arrays).

  Epsilon mode first runs :func:`_epsilon_passes`; both modes end with
  :func:`_double_word_pass`.
  """
  size = q.shape[0]
  out = _directions(
    np.arange(size),
    q,
    sigma,
    steps,
    tgt,
    plans,
    mode,
    n,
    size >= _COARSE_MIN_ROWS,
    memory_limit,
    families,
  )
  if mode == "epsilon":
    out, plans, n = _epsilon_passes(
      out, q, sigma, steps, tgt, plans, n, rtol, max_grid_size, automatic, memory_limit, families
    )
  out = _double_word_pass(
    out, q, sigma, steps, tgt, plans, mode, n, rtol, max_grid_size, memory_limit, families
  )
  return out[0], out[1], out[2].astype(bool)


def _epsilon_passes(
  out, q, sigma, steps, tgt, plans, n, rtol, max_grid_size, automatic, memory_limit, families
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
      todo, q, sigma, steps, tgt, plans, "epsilon", n, False, memory_limit, families
    )
  return out, plans, n


# A direction is composed again in double-word arithmetic where the float64
# FFT's certified round-off moves its answer by more than this share of rtol.
_DOUBLE_WORD_SHARE = 0.1
# Its working memory per grid point, relative to a float64 job.
_DOUBLE_WORD_BYTES = 4


def _double_word_pass(
  out, q, sigma, steps, tgt, plans, mode, n, rtol, max_grid_size, memory_limit, families
):
  """Recomposes in double-word arithmetic the directions limited by FFT round-off.

  The float64 round-off bound is relative to the total tilted mass; where delta
  is tiny and the composition lumpy, it is not small next to delta and the
  upper bound is loose by more than ``rtol``. Those directions run again on a
  power-of-two grid (the next one up, unless that exceeds ``max_grid_size``)
  with :func:`_compose.compose_double_word`; the tighter of the two certified
  bounds is kept. The add direction is redone only where it could be the
  larger one.
  """
  symmetric = one_direction(q, families)
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
    res = _run_jobs(
      jobs, q, sigma, steps, tgt, plans, mode, memory_limit, families, double_word=True
    )
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
  # Beyond twice the largest size the need only says "too many" (and 2^k of a need near
  # 1e77 is no int64).
  need = np.where(
    np.isfinite(need), np.minimum(need, float(max_grid_size) * 2), float(max_grid_size) * 2
  )
  # Below 2^13 points a job costs little either way, and one program serves them all.
  need = np.maximum(need, _MIN_AUTOMATIC_SIZE)
  pow2 = 2.0 ** np.ceil(np.log2(need))
  three = 3.0 * 2.0 ** np.ceil(np.log2(need / 3.0))
  n = np.minimum(pow2, three).astype(np.int64)
  return np.minimum(n, max_grid_size), bool(np.all(n <= max_grid_size))


def directions_of_rows(q, sigma, steps, tgt, mode, options, families):
  """Certified ``(2, size)`` ``(up, low, ok)`` of rows of phases, one per direction.

  ``families``: the phases' producers (``_producers``), one name per column.
  """
  rtol, grid_size, max_grid_size, memory_limit = options
  n, plans, reached = _grid_sizes(
    q, sigma, steps, tgt, mode, rtol, grid_size, max_grid_size, families
  )
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
      q,
      sigma,
      steps,
      tgt,
      plans,
      mode,
      n,
      rtol,
      max_grid_size,
      grid_size is None,
      memory_limit,
      families,
    )
  return _both_directions(q, sigma, steps, tgt, mode, n, memory_limit, families)[:3]


def delta_partials_of_rows(q, sigma, steps, eps, options, families):
  """Upper bound of delta at ``eps`` and its derivatives, per row, in the direction where
  it is larger: ``(delta (size,), d/dq (size, P), d/dsigma (size, P), d/deps (size,))``.

  Concrete rows are planned on the host (delta mode at ``eps``, as :func:`pld_delta`
  plans them) and run one job per direction; traced rows run on the static grid.
  For ``q = 1`` the two directions agree and the add direction is not run.
  """
  rtol, grid_size, max_grid_size, memory_limit = options
  n, plans, _ = _grid_sizes(q, sigma, steps, eps, "delta", rtol, grid_size, max_grid_size, families)
  phases = q.shape[1]
  if plans is None:
    both = _both_directions(
      q, sigma, steps, eps, "partials", n, memory_limit // _PARTIALS_MEMORY, families
    )
    add = both[0][1] > both[0][0]
    return tuple(jnp.where(add.reshape(add.shape + (1,) * (x.ndim - 2)), x[1], x[0]) for x in both)
  size = q.shape[0]
  rows = np.arange(size)
  asym = np.nonzero(~one_direction(q, families))[0]
  jobs = (
    np.concatenate([rows, asym]),
    np.concatenate([np.zeros(size, bool), np.ones(asym.size, bool)]),
    np.concatenate([n[0], n[1][asym]]),
  )
  res = _run_jobs(jobs, q, sigma, steps, eps, plans, "partials", memory_limit, families)
  out, add = res[:, :size], res[:, size:]
  larger = add[0] > out[0, asym]
  out[:, asym[larger]] = add[:, larger]
  return out[0], out[1 : 1 + phases].T, out[1 + phases : 1 + 2 * phases].T, out[-1]


# Working memory of a derivative job (reverse mode keeps the forward's intermediates),
# relative to a forward job.
_PARTIALS_MEMORY = 4


def combine(up2, low2, ok2, mode):
  """The add/remove answer: the larger of the two directions (both certified)."""
  up = jnp.max(jnp.asarray(up2), axis=0)
  if mode == "epsilon":
    up = jnp.maximum(up, 0.0)
  low = jnp.clip(jnp.max(jnp.asarray(low2), axis=0), 0.0, up)
  return up, low, jnp.all(jnp.asarray(ok2), axis=0)


def compose_rows(q, sigma, steps, tgt, mode, options, families):
  """Certified ``(up, low, ok)`` of rows of phases by composing their PLDs (both directions)."""
  return combine(*directions_of_rows(q, sigma, steps, tgt, mode, options, families), mode)
