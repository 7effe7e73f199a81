"""One calibration core: a vectorized, conservative threshold search per cell.

Every calibration inverts a privacy evaluation that is monotone in one scalar parameter
per cell: epsilon (at a given delta) or delta (at a given epsilon) is non-increasing in
the noise multiplier sigma and non-decreasing in the sampling rate q and the number of
steps T (for the RDP accountant: Mironov, Talwar, Zhang 2019, arXiv:1908.10530, with the
conversions of Canonne, Kamath, Steinke 2020, arXiv:2004.00010, Prop. 12, which are
increasing in the RDP at each order and take a minimum over orders). The accountant is
described to the core by an :class:`Evaluator`: its ``value`` over a batch of cells,
the direction of monotonicity, and the parameter's domain and scale. The core finds, per
cell, the parameter that spends the most of the budget while meeting it: the smallest
sigma, the largest q, the largest T.

Continuous parameters (``scale="log"``; ``jaxrdp._core.bracket``): the search runs in
v = log p where the value falls with p, v = -log p where it rises, so that the budget
holds for v >= threshold, on log(value) - log(target), which is nearly linear in v
(epsilon ~ sigma^-1 to sigma^-2, ~ q to q^2). It is a vectorized bracketing search
(geometric expansion, then ITP steps: Oliveira and Takahashi 2020, ACM TOMS 47(1),
doi:10.1145/3423597, with the Illinois rule and Brent's minimum step). It stops when the
bracket is 4e-8 wide and answers with the end that meets the budget, so the result is
conservative by construction and p (1 -+ 1e-6) violates the budget. Two optional
accelerators of the evaluator change the work, never the answer:

1. ``proxy``: a cheap value that is never below ``value`` (for the RDP accountant, its
   minimum over the integer orders only). Its threshold is found first (the paper's
   ITP truncation 0.2, as a minimum over orders is kinked); it is at or beyond the exact
   one and usually within a few percent, so the exact search starts there with a
   Newton-sized first step (the proxy's local slope, 10% overshoot), and a cell whose
   exact threshold is within the tolerance of the proxy's finishes in two evaluations.
   The exact pass then truncates less (0.02: the exact value is smooth near a good
   start; on the standard 400-cell grid 0.02 takes 5 to 8 evaluations per cell, 0.2
   takes 7 to 11).
2. ``memo_like``: ``value`` also returns a memo per cell (any arrays), and is handed
   back, as a :class:`Hint`, the memo at the acceptable point closest to the threshold
   found so far, with a mask of the cells whose new point lies beyond it (less noise, a
   larger q). The RDP accountant's memo is its order search's table of log A values,
   which bound the search's orders from below at every point beyond it (see
   ``jaxrdp.calibration._calibration``).

Integer parameters (``scale="integer"``): exponential search from the domain's lower
end (lower + 1, 3, 7, ... steps away), then integer bisection, so that the answer meets
the budget and its neighbour one step further does not.

Budget margin: a cell meets its budget when its value is <= target (1 - 1e-12), so
that recomputing it with a different floating-point evaluation order cannot push it
over the target.

All cells advance together in one ``lax.while_loop`` per pass that evaluates ``value``
once per iteration (cells that finished are not ``live``, and an evaluator may skip
their work), so a grid is one jitted call; the value and order at the answer are kept
from the search, not recomputed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._core.bracket import solve_threshold
from .._core.numerics import raise_subnormal
from .._core.validation import check_range

__all__ = ["Budget", "Domain", "Evaluator", "Hint", "Known", "Calibrated", "calibrate", "SAFETY"]

# A cell meets its budget when value <= target * (1 - SAFETY).
SAFETY = 1e-12
# Final half-width of the bracket in v: sigma (or q) is tight to 4e-8 relative, 25 times
# inside the promised 1e-6. Tighter costs little on smooth cells but up to one
# bisection step per halving on cells whose value is nearly a staircase in the
# parameter (targets close to the floor, where each order switches on abruptly).
_TOL = 2e-8
# ITP truncation of the exact pass after a proxy pass (module docstring, item 1).
_K1_EXACT = 0.02

# Valid ranges of epsilon and delta, stated once: the eager checks and the traced
# masks below both come from them.
_EPSILON_RANGE = dict(lower=0.0)  # [0, inf)
_DELTA_RANGE = dict(lower=0.0, upper=1.0, lower_open=True, upper_open=True)  # (0, 1)


def _in_range(x, lower=None, upper=None, lower_open=False, upper_open=False, allow_inf=False):
  """Traced twin of ``check_range``: False where x is NaN or outside the range."""
  ok = ~jnp.isnan(x)
  if lower is not None:
    ok &= (x > lower) if lower_open else (x >= lower)
  if upper is not None:
    ok &= (x < upper) if upper_open else (x <= upper)
  if not allow_inf:
    ok &= ~jnp.isinf(x)
  return ok


class Budget(enum.Enum):
  """What a calibration bounds: epsilon at a given delta, or delta at a given epsilon.

  Examples:
    >>> Budget.EPSILON.target_name, Budget.EPSILON.given_name
    ('target_epsilon', 'delta')
    >>> Budget.DELTA.target_name, Budget.DELTA.given_name
    ('target_delta', 'epsilon')
  """

  EPSILON = "epsilon"
  DELTA = "delta"

  @property
  def target_name(self) -> str:
    """Name of the budgeted quantity's argument."""
    return "target_" + self.value

  @property
  def given_name(self) -> str:
    """Name of the other half of the (epsilon, delta) pair, which is given."""
    return "delta" if self is Budget.EPSILON else "epsilon"

  def _ranges(self):
    if self is Budget.EPSILON:
      return _EPSILON_RANGE, _DELTA_RANGE
    return _DELTA_RANGE, _EPSILON_RANGE

  def check(self, target, given) -> None:
    """Raises ValueError naming the argument where concrete target or given is out of range."""
    target_range, given_range = self._ranges()
    check_range(self.target_name, target, **target_range)
    check_range(self.given_name, given, **given_range)

  def valid(self, target, given) -> jax.Array:
    """Traced mask of the cells whose target and given value are in range."""
    target_range, given_range = self._ranges()
    # A positive subnormal budget is in range (XLA reads it as 0 in comparisons);
    # as the smallest normal float it is in the same ranges.
    target, given = raise_subnormal(target), raise_subnormal(given)
    return _in_range(target, **target_range) & _in_range(given, **given_range)

  def pair(self, value, given):
    """(epsilon, delta) from the achieved value of the budgeted quantity and the given one."""
    return (value, given) if self is Budget.EPSILON else (given, value)


class Domain(NamedTuple):
  """Where a parameter is searched.

  Attributes:
    lower, upper: the search range (0 < lower < upper for ``"log"``; integers for
      ``"integer"``, lower >= 0, upper at most 2**52 so that every integer is exact).
    scale: ``"log"`` (a continuous search in log p, tight to 1e-6 relative) or
      ``"integer"`` (tight to one step).
  """

  lower: float
  upper: float
  scale: str


class Hint(NamedTuple):
  """What ``value`` is told about the best acceptable point so far (``memo_like`` only).

  Attributes:
    memo: the memo ``value`` returned at the acceptable point closest to the
      threshold found so far (zeros before there is one).
    beyond: True where the new point lies beyond that point, on the side where the
      budget is spent faster (False before there is one).
  """

  memo: Any
  beyond: jax.Array


class Evaluator(NamedTuple):
  """A monotone family of privacy evaluations, one scalar parameter per cell.

  Attributes:
    value: ``(param, live) -> (value, order)`` over arrays of the cells' shape: the
      budgeted quantity (epsilon, or delta) and the order (or any float64 label) that
      attains it. ``live`` marks the cells still searching; the others' results are
      ignored, so value may skip their work. With ``memo_like`` it is called as
      ``value(param, live, hint)`` and returns ``(value, order, memo)``.
    increasing: True if value is non-decreasing in the parameter (q, steps), False if
      non-increasing (sigma).
    domain: the parameter's search range and scale (:class:`Domain`).
    start: optional first guess per cell (``"log"`` only; default the range's
      geometric middle).
    proxy: optional ``param -> value`` never below ``value``'s, and cheaper
      (``"log"`` only; module docstring).
    memo_like: optional pytree of ``jax.ShapeDtypeStruct`` (shapes starting with the
      cells' shape) of the memo that ``value`` returns (``"log"`` only).
  """

  value: Callable
  increasing: bool
  domain: Domain
  start: Any = None
  proxy: Callable | None = None
  memo_like: Any = None


class Known(NamedTuple):
  """Cells answered in closed form (degenerate configurations), feasible there."""

  mask: jax.Array
  param: jax.Array
  value: jax.Array
  order: jax.Array


class Calibrated(NamedTuple):
  """Result of :func:`calibrate` (arrays of the cells' shape; a pytree).

  Attributes:
    param: the parameter that spends the most of the budget while meeting it (the
      smallest where ``value`` is non-increasing, the largest where it is
      non-decreasing); NaN where infeasible.
    epsilon, delta: the guarantee at ``param`` (the budgeted one achieved, the other
      given); NaN where infeasible.
    order: the order attaining it; NaN where infeasible.
    feasible: False where no parameter in the domain meets the budget (or the cell
      was not searched).
  """

  param: jax.Array
  epsilon: jax.Array
  delta: jax.Array
  order: jax.Array
  feasible: jax.Array


def calibrate(
  evaluator: Evaluator, budget: Budget, target, given, active=None, known: Known | None = None
) -> Calibrated:
  """Calibrates one parameter per cell to a budget (traceable; float64 inputs).

  Args:
    evaluator: the family of evaluations (:class:`Evaluator`); it already holds
      ``given`` and every other fixed argument, sanitized where cells are inactive.
    budget: :class:`Budget`, what ``target`` bounds.
    target: the budget per cell (epsilon, or delta).
    given: the other half of the (epsilon, delta) pair per cell.
    active: optional mask of the cells to search; cells whose budget is out of range
      are never searched.
    known: optional :class:`Known` cells, answered in closed form and not searched.

  Returns:
    :class:`Calibrated`; every feasible searched cell meets ``value <= target (1 -
    1e-12)`` at ``param``, and the parameter one tolerance further (1e-6 relative, or
    one step) violates it.

  Examples:
    A synthetic evaluator, value = 1 / p, has its threshold at p = 1 / target:

    >>> import jax.numpy as jnp
    >>> from jaxrdp._core.precision import x64_context
    >>> ev = Evaluator(lambda p, live: (1.0 / p, jnp.zeros_like(p)), increasing=False,
    ...                domain=Domain(1e-3, 1e6, "log"))
    >>> with x64_context():
    ...   res = calibrate(ev, Budget.EPSILON, jnp.array([0.5, 4.0, 1e-7]), jnp.full(3, 1e-5))
    >>> [round(float(p), 6) for p in res.param], res.feasible.tolist()
    ([2.0, 0.25, nan], [True, True, False])
  """
  target = jnp.asarray(target)
  given = jnp.asarray(given)
  shape = jnp.broadcast_shapes(target.shape, given.shape)
  valid = budget.valid(target, given)
  active = valid if active is None else valid & active
  if known is not None:
    active &= ~known.mask
  target_s = jnp.where(active, target, 1.0)
  if evaluator.domain.scale == "log":
    param, value, order, ok = _search_log(evaluator, target_s, active)
  elif evaluator.domain.scale == "integer":
    param, value, order, ok = _search_integer(evaluator, target_s, active)
  else:
    raise ValueError(f"domain.scale must be 'log' or 'integer', got {evaluator.domain.scale!r}")
  feasible = jnp.broadcast_to(ok, shape)
  if known is not None:
    kmask = known.mask & valid
    feasible = feasible | kmask
    param = jnp.where(kmask, known.param, param)
    value = jnp.where(kmask, known.value, value)
    order = jnp.where(kmask, known.order, order)
  epsilon, delta = budget.pair(value, given)
  nan = jnp.nan
  return Calibrated(
    *(jnp.where(feasible, x, nan) for x in (param, epsilon, delta, order)), feasible
  )


def _search_log(ev: Evaluator, target, active):
  """(param, value, order, ok) of the continuous search (module docstring)."""
  # v = sign log p, so that the budget holds for v >= threshold.
  sign = -1.0 if ev.increasing else 1.0
  ends = sorted(sign * float(np.log(x)) for x in (ev.domain.lower, ev.domain.upper))
  v_range = (ends[0] + 0.0, ends[1] + 0.0)  # + 0.0: no signed zero

  def to_param(v):
    return jnp.exp(sign * v)

  if ev.start is None:
    v0 = jnp.full(target.shape, 0.5 * (v_range[0] + v_range[1]))
  else:
    v0 = sign * jnp.log(ev.start)
  bound = target * (1.0 - SAFETY)
  log_bound = jnp.log(bound)
  # Every aux below is a float64 array of the cells' shape (value, order; proxy f).
  cell = jax.ShapeDtypeStruct(jnp.shape(v0), jnp.float64)
  memo = ev.memo_like is not None

  def score(v, live, v_ok=None, aux_ok=None):
    p = to_param(v)
    if memo:
      # v <= v_ok: less noise (a larger q) than at the best acceptable point so far.
      hint = Hint(aux_ok[2], (v <= v_ok) & jnp.isfinite(v_ok))
      value, order, memo_v = ev.value(p, live, hint)
      aux = (value, order, memo_v)
    else:
      value, order = ev.value(p, live)
      aux = (value, order)
    # log value - log bound is close to linear in v, which makes the interpolation
    # steps converge fast.
    return value <= bound, jnp.log(value) - log_bound, aux

  # epsilon falls like sigma^-1 to sigma^-2 (and rises like q to q^2): |slope| ~ 1.
  slope, first_min, overshoot, k1 = 1.0, 1e-4, 1.0, 0.2
  if ev.proxy is not None:

    def proxy_score(v, live):
      del live
      value = ev.proxy(to_param(v))
      f = jnp.log(value) - log_bound
      return value <= bound, f, f

    # The same tolerance as the exact pass, so that a cell whose exact threshold is
    # the proxy's needs only two exact evaluations; the paper's ITP truncation (the
    # proxy's minimum over orders is kinked).
    pre = solve_threshold(proxy_score, v0, *v_range, active, _TOL, slope=1.0, aux_like=cell)
    use = active & ~pre.infeasible & (pre.v > v_range[0])
    # The exact threshold is at or below the proxy's (the exact value is at most
    # the proxy's): start there, with the proxy's local slope for the Newton step
    # (f at pre.v is kept by the search). A start within tol of the threshold then
    # costs two exact evaluations.
    h = 1e-3
    v1 = jnp.where(use, pre.v, v0)
    d = (jnp.log(ev.proxy(to_param(v1 - h))) - log_bound - pre.aux) / h
    slope = jnp.where(use & jnp.isfinite(d) & (d > 0), d, 1.0)
    first_min = jnp.where(use, jnp.maximum(pre.v - pre.a, 1.99 * _TOL), first_min)
    overshoot = jnp.where(use, 1.1, 1.0)
    k1 = _K1_EXACT
    v0 = v1
  aux_like = (cell, cell) + ((ev.memo_like,) if memo else ())
  res = solve_threshold(
    score,
    v0,
    *v_range,
    active,
    _TOL,
    slope,
    first_min,
    overshoot,
    k1=k1,
    aux_like=aux_like,
    score_sees_best=memo,
  )
  ok = active & ~res.infeasible
  param = jnp.where(ok, to_param(res.v), jnp.nan)
  return param, res.aux[0], res.aux[1], ok


def _search_integer(ev: Evaluator, target, active):
  """(param, value, order, ok) of the integer search (module docstring)."""
  lower, upper = float(ev.domain.lower), float(ev.domain.upper)
  bound = target * (1.0 - SAFETY)

  def bad(n, live):
    # Monotone in n, False then True: past the answer (increasing) or at or past it
    # (non-increasing).
    ok = ev.value(n, live)[0] <= bound
    return ~ok if ev.increasing else ok

  lo = jnp.full(target.shape, lower)
  bad_lo = bad(lo, active)
  search = active & ~bad_lo
  hi = jnp.minimum(lo + 1.0, upper)
  bad_hi = bad(hi, search)

  # Exponential search: lower + 1, 3, 7, 15, ... (for lower = 1: 2, 4, 8, ...).
  def exp_cond(s):
    _, hi, bad_hi = s
    return jnp.any(search & ~bad_hi & (hi < upper))

  def exp_body(s):
    lo, hi, bad_hi = s
    grow = search & ~bad_hi & (hi < upper)
    lo = jnp.where(grow, hi, lo)
    hi = jnp.where(grow, jnp.minimum(2.0 * hi - lower + 1.0, upper), hi)
    return lo, hi, jnp.where(grow, bad(hi, grow), bad_hi)

  lo, hi, bad_hi = lax.while_loop(exp_cond, exp_body, (lo, hi, bad_hi))
  capped = search & ~bad_hi  # not past the answer even at the upper end

  def bis_cond(s):
    lo, hi = s
    return jnp.any(search & ~capped & (hi - lo > 1))

  def bis_body(s):
    lo, hi = s
    live = search & ~capped & (hi - lo > 1)
    mid = jnp.floor(0.5 * (lo + hi))
    bad_mid = bad(jnp.where(live, mid, lo), live)
    return jnp.where(live & ~bad_mid, mid, lo), jnp.where(live & bad_mid, mid, hi)

  lo, hi = lax.while_loop(bis_cond, bis_body, (lo, hi))
  if ev.increasing:
    # The largest n that meets the budget: lo (or the upper end, reached).
    ok = search
    n = jnp.where(capped, hi, lo)
  else:
    # The smallest n that meets it: lower itself, or hi (never where capped).
    ok = active & (bad_lo | ~capped)
    n = jnp.where(bad_lo, lo, hi)
  value, order = ev.value(jnp.where(ok, n, lower), ok)
  return jnp.where(ok, n, jnp.nan), value, order, ok
