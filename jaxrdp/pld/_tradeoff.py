"""Certified attack risk of the Sampled Gaussian Mechanism: TPR at a given FPR, advantage, curve.

Public entry points of the trade-off readers (``_tradeoff_read``): each job
composes one direction of one configuration once (``_kernel.job_tradeoff``)
and reads the Neyman-Pearson test's true-positive rate at every requested
false-positive rate from it.

Add/remove adjacency has two ordered pairs: remove (``P = mu``, ``Q = mu0``:
the member's output against the non-member's) and add (``P = mu0``,
``Q = mu``). The attacker's power at FPR ``alpha`` is the larger of the two
directions' TPRs, so the curve reported is ``beta(alpha) = 1 - TPR(alpha) =
min(T(mu0, mu), T(mu, mu0))(alpha)``; as ``T(mu, mu0) = T(mu0, mu)^{-1}``, it is
symmetric. Dong, Roth and Su's symmetrization (2019, arXiv:1905.02383,
Prop. F.2) further takes its convex envelope, which differs from it only on
the segment of slope -1 around the point ``beta = alpha``, where the envelope
is ``1 - TV - alpha`` (``TV``: the advantage).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core import numerics as _numerics
from .._core import precision as _precision
from .._core.validation import check_range, is_concrete
from . import _accountant, _driver, _kernel, _producers

__all__ = [
  "DEFAULT_ATOL",
  "PldTpr",
  "PldAdvantage",
  "PldTradeoff",
  "pld_tpr",
  "pld_advantage",
  "pld_tradeoff",
  "default_fpr_grid",
]

#: Target absolute error of the TPR's certified upper bound (it sets the grid).
DEFAULT_ATOL = 1e-6
# The add direction first runs on a grid _driver._COARSE_ADD times coarser only
# where its own grid has at least this many points.
_COARSE_MIN_SIZE = 2**15
# Planning keeps FPRs inside this range (0 and 1 are answered in closed form).
_ALPHA_CLIP = 1e-300


class PldTpr(NamedTuple):
  """Certified true-positive rate of the most powerful membership test at a given FPR.

  Attributes:
    tpr: certified upper bound of the attacker's TPR (the larger of the two
      adjacency directions).
    tpr_lower: certified lower bound of the same quantity.
  """

  tpr: jax.Array
  tpr_lower: jax.Array


class PldAdvantage(NamedTuple):
  """Certified membership advantage ``max_alpha (TPR - alpha)`` (total variation).

  Attributes:
    advantage: certified upper bound.
    advantage_lower: certified lower bound.
  """

  advantage: jax.Array
  advantage_lower: jax.Array


class PldTradeoff(NamedTuple):
  """A certified trade-off curve on a grid of false-positive rates.

  Attributes:
    fpr: the grid ``(G,)`` (a float64 NumPy array when it was concrete).
    tpr: certified upper bound of the TPR at each FPR (shape ``batch + (G,)``).
    tpr_lower: certified lower bound.
  """

  fpr: jax.Array
  tpr: jax.Array
  tpr_lower: jax.Array


def default_fpr_grid(points: int = 129) -> np.ndarray:
  """FPRs from ``1e-6`` to 1: a geometric half below 0.01 and a linear half above.

  Examples:
    >>> g = default_fpr_grid(9)
    >>> float(g[0]), float(g[-1]), bool(np.all(np.diff(g) > 0))
    (1e-06, 1.0, True)
  """
  if points < 4:
    raise ValueError(f"points must be at least 4, got {points!r}")
  low = np.geomspace(1e-6, 1e-2, points // 2, endpoint=False)
  return np.concatenate([low, np.linspace(1e-2, 1.0, points - points // 2)])


def _check_atol(atol):
  if not (isinstance(atol, (int, float)) and 1e-9 <= atol <= 1e-2):
    raise ValueError(f"atol must be a number in [1e-9, 0.01], got {atol!r}")


def _plan(q, sigma, steps, alphas, atol, at_zero):
  """Host plans ``[remove, add]`` and grid points needed ``[(B,), (B,)]`` for all rows."""
  size = q.shape[0]
  block = _driver._PLAN_BLOCK
  rows = -(-size // block) * block
  args = _driver._pad_rows([np.asarray(x) for x in (q, sigma, steps, alphas)], rows)
  families = _producers.gaussian_families(q.shape[1])

  def one(i):
    out = _kernel.batch_plan_tradeoff(*(a[i : i + block] for a in args), atol, at_zero, families)
    return jax.tree_util.tree_map(np.asarray, out)

  parts = _driver._host_map(one, range(0, rows, block), _driver._WORKERS)
  out = jax.tree_util.tree_map(lambda *x: np.concatenate(x)[:size], *parts)
  return [out[0][0], out[1][0]], [out[0][1], out[1][1]]


def _run_jobs(jobs, q, sigma, steps, alphas, plans, atol, at_zero, memory_limit):
  """Runs ``jobs`` (rows, is_add, n), one compiled program per FFT length: ``(3, jobs, G)``.

  Trade-off jobs return (tpr, tpr_lower, threshold); ``at_zero`` jobs the delta
  at 0 (upper, lower, and a placeholder), from ``_kernel.job_delta``.
  """
  rows, is_add, sizes = jobs
  q, sigma, steps, alphas = (np.asarray(x) for x in (q, sigma, steps, alphas))
  target = np.zeros(q.shape[0])
  both = [_kernel.pack_jobs(q, sigma, steps, target, p)[rows] for p in plans]
  packed = np.where(is_add[:, None], both[1], both[0])
  phases = q.shape[1]
  families = _producers.gaussian_families(phases)

  def one(job):
    row, a, n_b, r = job
    if at_zero:
      out = np.asarray(_kernel.run_job(row, bool(a), "delta", int(n_b), families))
      return np.stack([out[0:1], out[1:2], np.zeros(1)])
    args = (row, alphas[r], bool(a), atol, int(n_b), families)
    if n_b <= _kernel._LEAN_MAX_SIZE:
      out = np.asarray(_kernel.run_tradeoff_job(*args, lean=True))
      if np.all(out[3] > 0):  # the leaner support met its design accuracy
        return out[:3]
    return np.asarray(_kernel.run_tradeoff_job(*args))[:3]

  per_job = _driver._BYTES_PER_POINT * int(np.max(sizes)) * phases
  workers = max(1, min(_driver._WORKERS, memory_limit // per_job))
  outs = _driver._host_map(one, list(zip(packed, is_add, sizes, rows)), workers)
  return np.stack(outs, axis=1)


def _concrete(q, sigma, steps, alphas, atol, at_zero, grid_size, max_grid_size, memory_limit):
  """Both directions of every row (the remove one only for the advantage): ``(2, 2, B, G)``."""
  size = q.shape[0]
  plans, need = _plan(q, sigma, steps, alphas, atol, at_zero)
  if grid_size is not None:
    n = [np.full(size, grid_size, np.int64)] * 2
    reached = True
  else:
    (n_r, ok_r), (n_a, ok_a) = (_driver._sizes(x, max_grid_size) for x in need)
    n, reached = [n_r, n_a], ok_r and ok_a
  if not reached:
    warnings.warn(
      f"the PLD grid needed for atol={atol:g} exceeds max_grid_size={max_grid_size}; "
      "the result is a certified bound at that size, less tight (see the lower bound)",
      RuntimeWarning,
      stacklevel=4,
    )
  rows = np.arange(size)
  out = np.zeros((3, 2, size, alphas.shape[1]))
  out[:, 0] = _run_jobs(
    (rows, np.zeros(size, bool), n[0]),
    q,
    sigma,
    steps,
    alphas,
    plans,
    atol,
    at_zero,
    memory_limit,
  )
  out[:, 1] = out[:, 0]
  if at_zero:  # the total variation is the same in both directions
    return out
  asym = rows[~_driver.one_direction(q, _producers.gaussian_families(q.shape[1]))]
  if asym.size:
    fine = n[1][asym]
    coarse_first = (size >= _driver._COARSE_MIN_ROWS) & (fine >= _COARSE_MIN_SIZE)
    coarse = np.where(coarse_first, np.maximum(fine // _driver._COARSE_ADD, 2**10), fine)
    jobs = (asym, np.ones(asym.size, bool), coarse)
    out[:, 1, asym] = _run_jobs(jobs, q, sigma, steps, alphas, plans, atol, False, memory_limit)
    # The add direction's coarse bound matters only where it could be the larger one.
    redo = asym[np.any(out[0, 1, asym] > out[0, 0, asym], axis=-1) & (coarse < fine)]
    if redo.size:
      jobs = (redo, np.ones(redo.size, bool), n[1][redo])
      out[:, 1, redo] = _run_jobs(jobs, q, sigma, steps, alphas, plans, atol, False, memory_limit)
  return out


def _traced(q, sigma, steps, alphas, atol, at_zero, grid_size, memory_limit):
  """Both directions under a trace, plans made inside the jobs: ``(2, 2, B, G)``."""
  if at_zero:
    raise NotImplementedError("the advantage needs concrete arguments")
  size, phases = q.shape
  n = _driver.TRACED_GRID_SIZE if grid_size is None else grid_size
  q2, s2, t2, is_add = _driver._each_direction(q, sigma, steps)
  a2 = jnp.concatenate([alphas, alphas])
  per_job = _driver._BYTES_PER_POINT * n * phases
  chunk = min(_driver._next_pow2(2 * size), 1 << (max(1, memory_limit // per_job).bit_length() - 1))
  rows = -(-(2 * size) // chunk) * chunk
  q2, s2, t2, a2, is_add = _driver._pad_rows([q2, s2, t2, a2, is_add], rows)
  families = _producers.gaussian_families(phases)
  out = _kernel.run_tradeoff_jobs(q2, s2, t2, a2, is_add, atol, n, chunk, families)[: 2 * size]
  out = jnp.moveaxis(out, 1, 0)  # (3, 2 size, G)
  return out.reshape(3, 2, size, alphas.shape[1])[:2]


# The FPRs of a job are padded (repeating the last one) to a power of two below
# this and to a multiple of it from there on, so that few compiled programs per
# FFT length serve any number of FPRs. Reading an FPR is not free: padding one
# FPR to 16 made a job at FFT length 8192 take 6.7 ms in place of 2.6 ms.
_ALPHA_BUCKET = 16


def _alpha_bucket(g: int) -> int:
  """Number of FPRs a job reads for ``g`` requested: 1, 2, 4, 8, then multiples of 16."""
  if g >= _ALPHA_BUCKET:
    return -(-g // _ALPHA_BUCKET) * _ALPHA_BUCKET
  return 1 << (g - 1).bit_length()


def _run(q, sigma, steps, alphas, atol, at_zero, grid_size, max_grid_size, memory_limit):
  """``(upper, lower)`` of shape ``(B, G)`` for rows ``(B, 1)`` and FPRs ``(B, G)`` (float64).

  Edges, as in the privacy profile (``_accountant``): a row with ``q = 0`` or no
  steps releases nothing (TPR = FPR, advantage 0; a stand-in row runs in its
  place); rates in ``(0, RATE_FLOOR)`` run at ``RATE_FLOOR`` (a post-processing
  of it, so the upper bound stands) with the trivial lower bound.
  """
  q2, sigma2, steps_in = (x.reshape(-1, 1) for x in (q, sigma, steps))
  steps2 = jnp.round(steps_in)
  floored_q = _numerics.floor_rate(q2)
  empty = (floored_q == 0) | (steps2 == 0)
  floored = (floored_q != q2) & ~empty
  q2 = jnp.where(empty, 1.0, floored_q)
  sigma2 = jnp.where(empty, 1.0, sigma2)
  steps2 = jnp.where(empty, 1.0, steps2)
  g = alphas.shape[1]
  a = jnp.clip(alphas, _ALPHA_CLIP, 1.0 - 1e-16)
  a = jnp.concatenate([a, jnp.repeat(a[:, -1:], _alpha_bucket(g) - g, axis=1)], axis=1)
  concrete = all(is_concrete(x) for x in (q2, sigma2, steps2, a))
  if concrete:
    args = [np.asarray(x) for x in (q2, sigma2, steps2, a)]
    out = _concrete(*args, atol, at_zero, grid_size, max_grid_size, memory_limit)[:2]
  else:
    out = _traced(q2, sigma2, steps2, a, atol, at_zero, grid_size, memory_limit)
  up = jnp.max(jnp.asarray(out[0]), axis=0)[:, :g]
  low = jnp.max(jnp.asarray(out[1]), axis=0)[:, :g]
  # Nothing released: the test can do no better than chance.
  trivial = jnp.zeros_like(alphas) if at_zero else alphas
  up = jnp.where(empty, trivial, up)
  low = jnp.where(empty | floored, trivial, low)
  if not at_zero:
    # FPR 0 and 1 in closed form: both pairs have full support, so TPR(0) = 0; TPR(1) = 1.
    up = jnp.where(alphas <= 0.0, 0.0, jnp.where(alphas >= 1.0, 1.0, up))
    low = jnp.where(alphas <= 0.0, 0.0, jnp.where(alphas >= 1.0, 1.0, low))
  # (a traced non-integer count of steps is invalid, not rounded)
  steps_ok = (steps_in >= 0) & (steps_in <= _accountant.MAX_STEPS)
  steps_ok = steps_ok & (steps_in == jnp.round(steps_in))
  invalid = ~((q.reshape(-1, 1) >= 0) & (q.reshape(-1, 1) <= 1) & (sigma.reshape(-1, 1) > 0))
  invalid = invalid | ~steps_ok | ~((alphas >= 0) & (alphas <= 1))
  up = jnp.where(invalid, jnp.nan, up)
  low = jnp.where(invalid, jnp.nan, jnp.minimum(low, up))
  return up, low


def _check(q, sigma, steps, atol, grid_size, max_grid_size, memory_limit):
  _check_atol(atol)
  _accountant._check_options(1e-5, grid_size, max_grid_size, memory_limit)
  _accountant._check_phase(q, sigma, steps)


def pld_tpr(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  fpr: ArrayLike,
  *,
  atol: float = DEFAULT_ATOL,
  grid_size: int | None = None,
  max_grid_size: int = _accountant.MAX_GRID_SIZE,
  memory_limit: int = 2**30,
) -> PldTpr:
  r"""Certified TPR at FPR ``fpr`` of the best membership test against ``steps`` SGM steps.

  The most powerful test (Neyman-Pearson) between the outputs with and without
  one example, at false-positive rate ``alpha``, has the true-positive rate

  .. math:: \mathrm{TPR}(\alpha) = \min_{\varepsilon}\,[\delta(\varepsilon) + e^\varepsilon \alpha]

  (Dong, Roth, Su 2019, arXiv:1905.02383, Prop. 2.12; Kulynych et al. 2024,
  arXiv:2407.02191, Algorithm 1 reads it from a discrete PLD). It is read
  from the composed connect-the-dots PLD of each adjacency direction, which
  dominates the true one, so ``tpr`` is never below the true value; the
  larger of the two directions is returned (module ``jaxrdp.pld._tradeoff``).

  Accuracy: ``tpr`` is within about ``atol`` above the truth (the grid is
  chosen from an error model of connect-the-dots); ``tpr_lower`` (the coupling
  of the exact and discrete losses over the support's cells, as for epsilon, at
  tilt 0) is looser: from 2e-4 to 8e-2 below the truth at 1% FPR on a
  held-out draw of 24 configurations.

  Args:
    q: sampling rate in [0, 1] (0: nothing is released, TPR = FPR).
    sigma: noise multiplier, > 0.
    steps: number of steps, a whole number in [0, 1e7].
    fpr: false-positive rate in [0, 1]. All four broadcast.
    atol: target absolute error of the TPR, in [1e-9, 0.01].
    grid_size, max_grid_size, memory_limit: as in :func:`jaxrdp.pld.pld_epsilon`.

  Returns:
    :class:`PldTpr` of float64 arrays of the broadcast shape.

  Examples:
    >>> import jaxrdp.pld
    >>> r = jaxrdp.pld.pld_tpr(256 / 60000, 1.1, 14063, 0.01)
    >>> round(float(r.tpr), 5)
    0.04021
  """
  _check(q, sigma, steps, atol, grid_size, max_grid_size, memory_limit)
  check_range("fpr", fpr, lower=0.0, upper=1.0)

  def kernel(q, sigma, steps, fpr):
    arrays = jnp.broadcast_arrays(*(_precision.as_float64(x) for x in (q, sigma, steps, fpr)))
    shape = arrays[0].shape
    flat = [a.reshape(-1) for a in arrays]
    up, low = _run(*flat[:3], flat[3][:, None], atol, False, grid_size, max_grid_size, memory_limit)
    return up[:, 0].reshape(shape), low[:, 0].reshape(shape)

  up, low = _precision.elementwise_float64(kernel, (q, sigma, steps, fpr))
  return PldTpr(up, low)


def pld_advantage(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  *,
  atol: float = DEFAULT_ATOL,
  grid_size: int | None = None,
  max_grid_size: int = _accountant.MAX_GRID_SIZE,
  memory_limit: int = 2**30,
) -> PldAdvantage:
  r"""Certified membership advantage of ``steps`` SGM steps: ``max_alpha [TPR(alpha) - alpha]``.

  The advantage is the total variation distance between the outputs with and
  without one example, ``delta(0)`` of the privacy profile (Kulynych et al.
  2024, arXiv:2407.02191, Sec. 2), the same for both adjacency directions; it
  is read from one composition (the remove direction) at epsilon 0 with the
  certified bounds of :func:`jaxrdp.pld.pld_delta`. Arguments as in
  :func:`pld_tpr` (concrete values only).

  Returns:
    :class:`PldAdvantage` (upper and lower bound).

  Examples:
    >>> import jaxrdp.pld
    >>> r = jaxrdp.pld.pld_advantage(256 / 60000, 1.1, 14063)
    >>> round(float(r.advantage), 4)
    0.2245
  """
  _check(q, sigma, steps, atol, grid_size, max_grid_size, memory_limit)

  def kernel(q, sigma, steps):
    arrays = jnp.broadcast_arrays(*(_precision.as_float64(x) for x in (q, sigma, steps)))
    shape = arrays[0].shape
    flat = [a.reshape(-1) for a in arrays]
    zero = jnp.zeros((flat[0].shape[0], 1))
    up, low = _run(*flat, zero, atol, True, grid_size, max_grid_size, memory_limit)
    return up[:, 0].reshape(shape), low[:, 0].reshape(shape)

  up, low = _precision.elementwise_float64(kernel, (q, sigma, steps))
  return PldAdvantage(up, low)


def pld_tradeoff(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  fpr: ArrayLike | None = None,
  *,
  atol: float = DEFAULT_ATOL,
  grid_size: int | None = None,
  max_grid_size: int = _accountant.MAX_GRID_SIZE,
  memory_limit: int = 2**30,
) -> PldTradeoff:
  """Certified trade-off curve (TPR against FPR) of ``steps`` SGM steps on a grid of FPRs.

  One composition per direction is read at every FPR of the grid (no FFT per
  FPR). The curve is ``max`` over the two adjacency directions of the TPR,
  i.e. ``1 - min(T(mu0, mu), T(mu, mu0))`` in f-DP terms (symmetric; module
  docstring).

  Args:
    q, sigma, steps: as in :func:`pld_tpr`; they broadcast to a batch shape.
    fpr: 1-D grid of false-positive rates in [0, 1]; default
      :func:`default_fpr_grid` (129 points from 1e-6 to 1).
    atol, grid_size, max_grid_size, memory_limit: as in :func:`pld_tpr`.

  Returns:
    :class:`PldTradeoff` with ``tpr`` and ``tpr_lower`` of shape ``batch + (G,)``.

  Examples:
    >>> import jaxrdp.pld
    >>> c = jaxrdp.pld.pld_tradeoff(256 / 60000, 1.1, 14063, [0.001, 0.01, 0.1])
    >>> [round(float(x), 4) for x in c.tpr]
    [0.0061, 0.0402, 0.2396]
  """
  _check(q, sigma, steps, atol, grid_size, max_grid_size, memory_limit)
  grid = default_fpr_grid() if fpr is None else fpr
  if np.ndim(grid) != 1 or np.shape(grid)[0] == 0:
    raise ValueError(f"fpr must be a non-empty 1-D grid, got shape {np.shape(grid)}")
  check_range("fpr", grid, lower=0.0, upper=1.0)

  def kernel(q, sigma, steps, grid):
    arrays = jnp.broadcast_arrays(*(_precision.as_float64(x) for x in (q, sigma, steps)))
    shape = arrays[0].shape
    flat = [a.reshape(-1) for a in arrays]
    g = _precision.as_float64(grid)
    alphas = jnp.broadcast_to(g, (flat[0].shape[0], g.shape[0]))
    up, low = _run(*flat, alphas, atol, False, grid_size, max_grid_size, memory_limit)
    return up.reshape(shape + g.shape), low.reshape(shape + g.shape)

  up, low = _precision.elementwise_float64(
    kernel, (q, sigma, steps), (grid,), tangent_trailing=(1, 1, 1)
  )
  return PldTradeoff(np.asarray(grid, dtype=np.float64) if is_concrete(grid) else grid, up, low)
