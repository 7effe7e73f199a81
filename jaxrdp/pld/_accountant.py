"""Public entry points of the tight accountant: validation, broadcasting, edges, float64.

The rows are composed by the driver (``_driver``); here the arguments are checked
and broadcast, the rows that need no composition are answered (one step from its
closed form, nothing released, rates below 1e-300, epsilons beyond the grid), and
the results are finalized in the caller's precision. A concrete call's preparation
and finish are two stored programs (``jaxrdp._core.stored_programs``) around the
host's planning, so that a fresh process loads them instead of compiling each
operation.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core import numerics as _numerics
from .._core import precision as _precision
from .._core.stored_programs import stored_jit
from .._core.validation import check_range, is_concrete
from ..events._events import Composed, SelfComposed
from ..rdp._accountant import RdpAccountant
from . import _derivative, _producers, _single_step
from ._driver import MIN_GRID_SIZE, TRACED_GRID_SIZE, combine, compose_rows, directions_of_rows

__all__ = [
  "PldEpsilon",
  "PldDelta",
  "pld_epsilon",
  "pld_delta",
  "pld_epsilon_phases",
  "pld_delta_phases",
  "answer_phases",
  "DEFAULT_RTOL",
  "TRACED_GRID_SIZE",
  "MAX_GRID_SIZE",
]

DEFAULT_RTOL = 1e-5
MAX_GRID_SIZE = 2**21
MAX_STEPS = 1e7


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


def _check_phase(q, sigma, steps, where="", family=_producers.GAUSSIAN):
  check_range(f"q{where}", q, lower=0.0, upper=1.0)
  scale = "sigma" if family == _producers.GAUSSIAN else "scale"
  check_range(f"{scale}{where}", sigma, lower=0.0, lower_open=True)
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
      isinstance(v, (int, np.integer)) and MIN_GRID_SIZE <= v <= 2**26 and (v & (v - 1)) == 0
    ):
      raise ValueError(f"{name} must be a power of two in [{MIN_GRID_SIZE}, 2**26], got {v!r}")
  if not (isinstance(memory_limit, (int, float)) and memory_limit >= 2**24):
    raise ValueError(f"memory_limit must be a number of bytes >= 2**24, got {memory_limit!r}")


def _phases_event(q, sigma, steps, families):
  """The event of rows of phases (``(B, P)`` arrays of the families ``families``)."""
  return Composed(
    tuple(
      SelfComposed(_producers.PRODUCERS[f].step_event(q[:, j], sigma[:, j]), steps[:, j])
      for j, f in enumerate(families)
    )
  )


def _rdp_epsilon(q, sigma, steps, delta, families):
  """Renyi-DP epsilon of rows of phases (``(B, P)`` arrays), a certified upper bound."""
  return RdpAccountant().epsilon(_phases_event(q, sigma, steps, families), delta).epsilon


def _rdp_delta(q, sigma, steps, epsilon, families):
  """Renyi-DP delta of rows of phases (``(B, P)`` arrays), a certified upper bound."""
  return RdpAccountant().delta(_phases_event(q, sigma, steps, families), epsilon).delta


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


def _edge_answers(up, low, edges, q, sigma, steps, tgt, mode, families):
  """The composed answers with the edge rows of :func:`_regularize` fixed."""
  if mode == "delta" and is_concrete(tgt) and bool(np.any(np.asarray(edges.capped))):
    rows = np.nonzero(np.asarray(edges.capped) & ~np.asarray(edges.nothing))[0]
    if rows.size:
      rdp = _rdp_delta(q[rows], sigma[rows], steps[rows], tgt[rows], families)
      up = up.at[rows].set(jnp.minimum(up[rows], rdp))
  return _edge_zeros(up, low, edges)


def _edge_zeros(up, low, edges):
  """The lower bounds of floored and capped rows, and both bounds of empty rows, set to 0."""
  low = jnp.where(edges.floored | edges.capped, 0.0, low)
  up = jnp.where(edges.nothing, 0.0, up)
  low = jnp.where(edges.nothing, 0.0, low)
  return up, low


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
  ``(2, size)`` from :func:`._driver.directions_of_rows`) and rows of one step (``one``,
  closed-form ``up1``, ``low1``) joined, the Renyi-DP cap of delta mode's capped
  rows applied (``cap``, +inf elsewhere), then :func:`_finish`."""
  up, low, ok = combine(up2, low2, ok2, mode)
  up, low = jnp.where(one, up1, up), jnp.where(one, low1, low)
  ok = ok | one
  capped = edges.capped & ~edges.nothing
  up = jnp.where(capped, jnp.minimum(up, cap), up)
  up, low = _finish(*_edge_zeros(up, low, edges), invalid, shape=shape)
  return up, low, ok


def _one_step_rows(steps, families):
  """Rows answered by the one-step closed form: one phase of one step."""
  if not _single_step.closed_form(families):
    return np.zeros(steps.shape[0], bool)
  return steps[:, 0] == 1.0


def _run_concrete(args, mode, options, families):
  """:func:`answer_phases`'s kernel for concrete arguments: two stored programs around the host's
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
  one = _one_step_rows(steps, families)
  rows = np.nonzero(~one)[0]
  if rows.size:
    parts = directions_of_rows(
      q[rows], sigma[rows], steps[rows], tgt[rows], mode, options, families
    )
    for full, part in zip((up2, low2, ok2), parts):
      full[:, rows] = part
  rows = np.nonzero(one)[0]
  if rows.size:
    parts = _single_step.exact(q[rows, 0], sigma[rows, 0], tgt[rows], mode, families[0])
    up1[rows], low1[rows] = (np.asarray(x) for x in parts)
  cap = np.full(size, np.inf)
  rows = np.nonzero(edges.capped & ~edges.nothing)[0] if mode == "delta" else []
  if len(rows):
    cap[rows] = np.asarray(_rdp_delta(q[rows], sigma[rows], steps[rows], t_in[rows], families))
  up, low, ok = _finish_rows(up2, low2, ok2, one, up1, low1, cap, edges, invalid, mode, shape)
  return up, low, ok, invalid, (q, sigma, steps, tgt), shape


def answer_phases(
  phases, target, mode, rtol, grid_size, max_grid_size, memory_limit, families=None
):
  """``(up, low)`` of ``phases`` (``(q, scale, steps)`` triples of the families
  ``families``, Gaussian by default) at ``target``."""
  families = _producers.gaussian_families(len(phases)) if families is None else tuple(families)
  _check_options(rtol, grid_size, max_grid_size, memory_limit)
  for i, ((q, sigma, steps), family) in enumerate(zip(phases, families)):
    _check_phase(q, sigma, steps, "" if len(phases) == 1 else f"[{i}]", family)
  if mode == "epsilon":
    check_range("delta", target, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  else:
    check_range("epsilon", target, lower=0.0)
  leaves = [x for ph in phases for x in ph] + [target]
  options = (rtol, grid_size, max_grid_size, memory_limit)

  def kernel(*args):
    if all(is_concrete(x) for x in args):
      up, low, ok, invalid, (q, sigma, steps, tgt), shape = _run_concrete(
        args, mode, options, families
      )
    else:
      q, sigma, steps, tgt, edges, invalid, t_in = _prepare(*args, mode=mode)
      shape = jnp.broadcast_shapes(*(jnp.shape(a) for a in args))
      up, low, ok = compose_rows(q, sigma, steps, tgt, mode, options, families)
      if _single_step.closed_form(families):
        # One step: the exact interval from the closed-form curve.
        up, low = _single_step.refine(
          q[:, 0], sigma[:, 0], steps[:, 0], tgt, up, low, mode, families[0]
        )
      up, low = _edge_answers(up, low, edges, q, sigma, steps, t_in, mode, families)
      up, low = _finish(up, low, invalid, shape=shape)
    if mode == "epsilon" and is_concrete(up):
      lost = np.nonzero(np.isinf(np.asarray(up)).ravel() & ~np.asarray(invalid))[0]
      if lost.size:
        # The window cannot hold the answer (an epsilon in the tens of
        # thousands: (1 + lam) W is limited by float64): the Renyi-DP bound,
        # an upper bound of the tight epsilon, is finite there.
        rdp = _rdp_epsilon(q[lost], sigma[lost], steps[lost], tgt[lost], families)
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
  return _precision.elementwise_float64(
    _implicit_derivative(kernel, mode, options, families), tuple(leaves), down=(False, True)
  )


def _implicit_derivative(kernel, mode, options, families):
  """``kernel`` (leaves of the phases, then the target) with the derivative of
  :mod:`._derivative`: the implicit function at the read point, not a pass back through
  the composition. A concrete read point (an eager ``jax.grad``) is planned on the host
  like any concrete call; a traced one runs on the static grid."""

  @jax.custom_jvp
  def answer(*args):
    return kernel(*args)

  @answer.defjvp
  def answer_jvp(primals, tangents):
    if any(f != _producers.GAUSSIAN for f in families):
      # The partials job holds the grid fixed; a bounded loss (Laplace) has atoms at the
      # ends of its support, which move with the scale, and the fixed grid misses that
      # movement (10% off for 20 Laplace steps at scale 10 against central differences).
      # The fixed-size envelope's derivative is not checked yet.
      raise NotImplementedError(
        "derivatives of the tight accountant's answers are implemented for Gaussian and "
        "Poisson-subsampled Gaussian mechanisms only, not for Laplace mechanisms or "
        "fixed-size batches; differentiate accountant='rdp' instead, or use finite "
        "differences"
      )
    up, low = kernel(*primals)
    if all(is_concrete(x) for x in primals):
      prepared = jax.tree_util.tree_map(np.asarray, _prepare_rows(tuple(primals), mode))
    else:
      prepared = _prepare(*primals, mode=mode)
    q, sigma, steps, tgt, edges, invalid, _ = prepared
    shape = jnp.shape(up)
    gq, gs, gt = _derivative.answer_partials(
      q, sigma, steps, tgt, jnp.reshape(up, -1), mode, options, families
    )
    fixed = edges.nothing | edges.floored | edges.capped

    def coefficient(g):
      # (on the coefficients, not on the tangent: a NaN there reaches a transposed grad)
      return jnp.where(invalid, jnp.nan, jnp.where(fixed, 0.0, g))

    partials = [g for j in range(q.shape[1]) for g in (gq[:, j], gs[:, j], None)] + [gt]
    total = jnp.zeros(q.shape[0], jnp.result_type(up))
    for g, t in zip(partials, tangents):
      t = jnp.asarray(t)
      if g is None or t.dtype == jax.dtypes.float0:  # steps, or an integer argument
        continue
      total = total + coefficient(g) * jnp.broadcast_to(t, shape).reshape(-1).astype(total.dtype)
    total = total.reshape(shape)
    return (up, low), (total, total)

  return answer


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
  up, low = answer_phases(
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
  up, low = answer_phases(
    [(q, sigma, steps)], epsilon, "delta", rtol, grid_size, max_grid_size, memory_limit
  )
  return PldDelta(up, low)


def pld_epsilon_phases(
  phases: Sequence[tuple],
  delta: ArrayLike,
  *,
  rtol: float = DEFAULT_RTOL,
  grid_size: int | None = None,
  max_grid_size: int = MAX_GRID_SIZE,
  memory_limit: int = 2**30,
) -> PldEpsilon:
  """Tight epsilon of a sequence of phases ``[(q, sigma, steps), ...]`` composed together.

  Each phase may use its own rate, noise and number of steps (e.g. a schedule);
  all phases share one grid and one FFT: the spectra multiply,
  ``prod_j c_j^{T_j}``. Every entry broadcasts with ``delta``. Options as in
  :func:`pld_epsilon`.
  """
  phases = [tuple(p) for p in phases]
  if not phases or any(len(p) != 3 for p in phases):
    raise ValueError("phases must be a non-empty sequence of (q, sigma, steps) triples")
  up, low = answer_phases(
    phases,
    delta,
    "epsilon",
    rtol,
    grid_size,
    max_grid_size,
    memory_limit,
  )
  return PldEpsilon(up, low)


def pld_delta_phases(
  phases: Sequence[tuple],
  epsilon: ArrayLike,
  *,
  rtol: float = DEFAULT_RTOL,
  grid_size: int | None = None,
  max_grid_size: int = MAX_GRID_SIZE,
  memory_limit: int = 2**30,
) -> PldDelta:
  """Tight delta at ``epsilon`` of composed phases; see :func:`pld_epsilon_phases`."""
  phases = [tuple(p) for p in phases]
  if not phases or any(len(p) != 3 for p in phases):
    raise ValueError("phases must be a non-empty sequence of (q, sigma, steps) triples")
  up, low = answer_phases(
    phases,
    epsilon,
    "delta",
    rtol,
    grid_size,
    max_grid_size,
    memory_limit,
  )
  return PldDelta(up, low)
