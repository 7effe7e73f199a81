"""Calibrating DP-SGD to a privacy budget: noise, steps or sampling rate, on grids.

Each calibration is one call of the generic core (``jaxrdp.calibration._core``) on a
family of evaluations of the RDP accountant of the Sampled Gaussian Mechanism (SGM;
Mironov, Talwar, Zhang 2019, arXiv:1908.10530), parameterised by one scalar per cell:
sigma (epsilon and delta non-increasing in it), q or the number of steps T
(non-decreasing). The budget bounds epsilon at a given delta or delta at a given epsilon
(``Budget``): the three public functions take either pair as keywords. This module
builds the families (``Evaluator``), answers the degenerate cells in closed form, and
checks and broadcasts the arguments; the core searches.

The RDP accountant gives the core its two accelerators (they change the work, never
the answer):

1. A cheap proxy, the accountant over the grid's integer orders up to 64 only (a
   shared finite series per cell, no quadrature). Its minimum runs over a subset of
   the orders, so its threshold is at or beyond the exact one (usually within a few
   percent: the fractional orders between the integers lower epsilon slightly). The
   searches start from the zCDP guess rho = T q^2 / sigma^2 with epsilon = rho +
   2 sqrt(rho log(1/delta)) (Bun and Steinke 2016, arXiv:1605.02065, Prop. 1.3). A
   cell whose optimum is an integer order then finishes in two exact evaluations; the
   others take 5 to 8 on the standard grid.
2. Floors for the order search (epsilon budgets). Each exact evaluation is an order
   search (``jaxrdp.rdp._order_search``), and every point the search tries beyond its
   best acceptable point so far has less noise (or a larger q) there, so log A at
   each order is at least what the search at that point found: its exact values, and
   its convexity bounds elsewhere. The search takes them as floors, which prune the
   orders that cannot be optimal before any are evaluated. Near the answer the floors
   are nearly exact and a search evaluates about one order per cell instead of three
   (400 cells at sigma 1e-4 below a known point: 433 quadratures instead of 1,306); on
   the standard grid the calibration takes 62 search rounds instead of 103. Each cell
   keeps its table (one float64 per search point, 176 with the default orders, 1.4 KB;
   the peak memory of a 20,000-cell calibration is about 1% above that without the
   floors).

Steps: the per-step RDP is computed once per cell (T only scales it, Mironov 2017,
arXiv:1702.07476, Prop. 1), so each evaluation in the integer search is a conversion.

Infeasible requests give NaN with ``feasible == False``:

* ``calibrate_noise``: the target is at or below the floor that infinite noise
  reaches with these orders and the given value (the conversion at RDP = 0; about
  5e-4 for delta = 1e-5 with the default orders), or needs sigma > 1e6;
* ``calibrate_steps``: not even one step fits;
* ``calibrate_sampling_rate``: no q >= 1e-10 fits (or sigma = 0).

Degenerate cells are answered in closed form: q = 0 or steps = 0 needs sigma = 0;
steps = 0 admits q = 1; q = 0 or sigma = inf admits steps = inf.

Batching schemes other than Poisson sampling under add/remove (``sampling=``,
``relation=``; ``jaxrdp.rdp._sampling``) take the same path with their own jitted
calibrations (``jaxrdp.calibration._schemes``), on the same core.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core import precision as _precision
from ..rdp._conversions import delta_from_rdp_f64, epsilon_from_rdp_f64
from ..rdp import _sampling
from ..rdp._dpsgd import (
  _dpsgd_delta_f64,
  _dpsgd_rdp_f64,
  _orders_or_default,
  _search_f64,
  check_scheme_accountant,
)
from ..rdp._order_search import table_size as search_table_size
from ..mechanisms._sgm import _rdp_f64
from .._core.numerics import raise_subnormal
from .._core.validation import COUNT, NOISE_MULTIPLIER, PROBABILITY, StaticArray, is_concrete
from ._with_accountant import calibrate_with_accountant
from ._core import SAFETY, Budget, Domain, Evaluator, Known, calibrate

__all__ = [
  "NoiseCalibration",
  "StepsCalibration",
  "SamplingRateCalibration",
  "calibrate_noise",
  "calibrate_steps",
  "calibrate_sampling_rate",
]

# Search domains: sigma in [1e-3, 1e6]; q in [1e-10, 1]; steps in [1, 2**52] (integers
# are exact in float64 up to 2**52).
_SIGMA_DOMAIN = Domain(1e-3, 1e6, "log")
_Q_DOMAIN = Domain(1e-10, 1.0, "log")
_STEPS_DOMAIN = Domain(1.0, float(2**52), "integer")
_ACCOUNTANTS = ("rdp", "pld")


class NoiseCalibration(NamedTuple):
  """Result of :func:`calibrate_noise` (a pytree).

  Attributes:
    sigma: smallest noise multiplier meeting the budget; NaN where infeasible.
    epsilon: epsilon of the guarantee at ``sigma`` (achieved under an epsilon
      budget, given under a delta budget).
    delta: delta of the guarantee at ``sigma`` (given, respectively achieved).
    order: Renyi order attaining the bound at ``sigma``.
    feasible: boolean mask, False where no sigma meets the budget.
  """

  sigma: jax.Array
  epsilon: jax.Array
  delta: jax.Array
  order: jax.Array
  feasible: jax.Array


class StepsCalibration(NamedTuple):
  """Result of :func:`calibrate_steps` (a pytree).

  Attributes:
    steps: largest integer number of steps meeting the budget (a float64 holding
      an integer); inf where any number fits; NaN where not even one step does.
    epsilon: epsilon of the guarantee after ``steps`` steps.
    delta: delta of the guarantee after ``steps`` steps.
    order: Renyi order attaining the bound.
    feasible: boolean mask, False where not even one step meets the budget.
  """

  steps: jax.Array
  epsilon: jax.Array
  delta: jax.Array
  order: jax.Array
  feasible: jax.Array


class SamplingRateCalibration(NamedTuple):
  """Result of :func:`calibrate_sampling_rate` (a pytree).

  Attributes:
    q: largest sampling rate in (0, 1] meeting the budget; NaN where infeasible.
    epsilon: epsilon of the guarantee at ``q``.
    delta: delta of the guarantee at ``q``.
    order: Renyi order attaining the bound at ``q``.
    feasible: boolean mask, False where no q > 0 meets the budget.
  """

  q: jax.Array
  epsilon: jax.Array
  delta: jax.Array
  order: jax.Array
  feasible: jax.Array


# --------------------------------------------------------------------------------------
# The RDP accountant as families of evaluations (traced).


def _rdp_value(budget, rdp_total, orders, given):
  """(value, order) of the accountant over ``orders``, as dpsgd_epsilon/delta do."""
  if budget is Budget.DELTA:
    res = delta_from_rdp_f64(rdp_total, orders, given, "improved")
    return res.delta, res.order
  res = epsilon_from_rdp_f64(rdp_total, orders, given, "improved")
  return res.epsilon, res.order


def _floor_value(budget, given, all_orders):
  """The accountant at zero RDP: what infinite noise (or q = 0, or no step) achieves."""
  zeros = jnp.zeros(given.shape + all_orders.shape)
  return _rdp_value(budget, zeros, all_orders, given)


def _zcdp_rho(epsilon, delta):
  # Invert epsilon = rho + 2 sqrt(rho L), L = log(1/delta): sqrt(rho) =
  # sqrt(L + epsilon) - sqrt(L), written without cancellation. A first guess only.
  log_inv_delta = -jnp.log(delta)
  return (epsilon / (jnp.sqrt(log_inv_delta + epsilon) + jnp.sqrt(log_inv_delta))) ** 2


def _guess_rho(budget, target, given):
  eps, dlt = budget.pair(target, given)
  eps = jnp.where(jnp.isfinite(eps) & (eps > 0), eps, 1.0)
  dlt = jnp.where((dlt > 0) & (dlt < 1), dlt, 1e-5)
  return _zcdp_rho(eps, dlt)


def _proxy_orders(all_orders: np.ndarray) -> np.ndarray:
  """The orders of the grid whose RDP the cheap integer series gives (2 to 64)."""
  ints = all_orders[(all_orders == np.round(all_orders)) & (all_orders >= 2) & (all_orders <= 64)]
  return np.unique(ints)


def _sgm_evaluator(
  budget, q_of, sigma_of, steps, given, all_orders, orders_static, increasing, domain, start
) -> Evaluator:
  """The SGM accountant as a family in one parameter p: q_of(p), sigma_of(p) per cell.

  Epsilon uses the order search (the exact minimum over the orders, which evaluates the
  SGM kernel at far fewer orders than all of them), with the floors of the module
  docstring as its memo; delta evaluates every order. Both get the integer-order proxy.
  """

  def value(p, live, hint=None):
    q, sigma = q_of(p), sigma_of(p)
    if budget is Budget.DELTA:
      res = _dpsgd_delta_f64(q, sigma, steps, given, all_orders, orders_static, "improved")
      return res.delta, res.order
    # Beyond the best acceptable point, log A at every order is at least what that
    # point's search computed (module docstring, item 2); elsewhere no floor.
    floor = jnp.where(hint.beyond[..., None], hint.memo, 0.0)
    res = _search_f64(q, sigma, steps, given, orders_static, "improved", live, floor)
    return res.epsilon, res.order, res.table

  sub = _proxy_orders(orders_static.array)

  def proxy(p):
    # Never below the accountant over all orders (a minimum over a subset), and one
    # shared finite series per cell, no quadrature.
    rdp = _dpsgd_rdp_f64(q_of(p), sigma_of(p), steps, jnp.asarray(sub), StaticArray(sub))
    return _rdp_value(budget, rdp, jnp.asarray(sub), given)[0]

  memo_like = None
  if budget is Budget.EPSILON:
    memo_like = jax.ShapeDtypeStruct(
      jnp.shape(steps) + (search_table_size(orders_static.array),), jnp.float64
    )
  return Evaluator(value, increasing, domain, start, proxy if sub.size else None, memo_like)


# --------------------------------------------------------------------------------------
# The three calibrations (traced): degenerate cells in closed form, the rest by the core.


class Cells(NamedTuple):
  """The cells of a calibration before its search (arrays of the cells' shape).

  Attributes:
    valid: every argument in range.
    reachable: the budget is above the floor that no privacy loss at all reaches.
    active: the cells to search: valid, reachable, not degenerate, and not hopeless
      (sigma = 0).
    degenerate: the cells that lose no privacy whatever the searched parameter
      (q = 0 or T = 0); the valid and reachable ones are answered in closed form.
    fixed: the two fixed parameters, in argument order, subnormal q and T rounded
      up to the smallest normal float (XLA would read them as 0), and a harmless
      stand-in where the cell is not searched.
    given: the given half of the (epsilon, delta) pair, with the same stand-in.
    floor, floor_order: the accountant at zero RDP (:func:`_floor_value`).
  """

  valid: jax.Array
  reachable: jax.Array
  active: jax.Array
  degenerate: jax.Array
  fixed: tuple
  given: jax.Array
  floor: jax.Array
  floor_order: jax.Array

  def known(self, degenerate, param) -> Known:
    """The closed-form answer ``param`` at the valid, reachable ``degenerate`` cells."""
    mask = degenerate & self.valid & self.reachable
    return Known(mask, jnp.full(mask.shape, param), self.floor, self.floor_order)


# The fixed parameters of the calibrations: their valid range, stated once (the eager
# check of the public functions and the traced mask of ``_cells``), and the stand-in
# value where a cell is not searched.
_FIXED_RANGE = {"q": PROBABILITY, "steps": COUNT, "sigma": NOISE_MULTIPLIER}
_STAND_IN = {"q": 0.5, "steps": 1.0, "sigma": 1.0}


def _cells(budget, target, given, fixed: dict, all_orders) -> Cells:
  """The prologue every calibration shares, the SGM's and the other schemes' alike.

  ``fixed`` maps the two fixed parameters' names (``q``, ``steps``, ``sigma``), in
  argument order, to their values. q = 0 or T = 0 spend nothing (degenerate); sigma =
  0 with q > 0 and T > 0 reveals the data (infinite RDP at every order: never
  searched, so infeasible).
  """
  fixed = {k: raise_subnormal(v) if k != "sigma" else v for k, v in fixed.items()}
  valid = budget.valid(target, given)
  for name, x in fixed.items():
    valid &= _FIXED_RANGE[name].holds(x)
  floor, floor_order = _floor_value(budget, given, all_orders)
  reachable = floor <= target * (1.0 - SAFETY)
  degenerate = jnp.zeros(valid.shape, bool)
  for name in ("q", "steps"):
    if name in fixed:
      degenerate |= fixed[name] == 0
  active = valid & reachable & ~degenerate
  if "sigma" in fixed:
    active &= fixed["sigma"] > 0
  sanitized = tuple(jnp.where(active, x, _STAND_IN[k]) for k, x in fixed.items())
  return Cells(
    valid,
    reachable,
    active,
    degenerate,
    sanitized,
    jnp.where(active, given, 0.5),
    floor,
    floor_order,
  )


def _noise_impl(target, given, q, steps, all_orders, orders_static, budget):
  cells = _cells(budget, target, given, dict(q=q, steps=steps), all_orders)
  q_s, t_s = cells.fixed
  sigma0 = jnp.clip(q_s * jnp.sqrt(t_s / _guess_rho(budget, target, given)), 0.3, 1e5)
  ev = _sgm_evaluator(
    budget,
    lambda s: q_s,
    lambda s: s,
    t_s,
    cells.given,
    all_orders,
    orders_static,
    False,
    _SIGMA_DOMAIN,
    sigma0,
  )
  known = cells.known(cells.degenerate, 0.0)
  return NoiseCalibration(*calibrate(ev, budget, target, given, cells.active, known))


def _rate_impl(target, given, sigma, steps, all_orders, orders_static, budget):
  cells = _cells(budget, target, given, dict(sigma=sigma, steps=steps), all_orders)
  s_s, t_s = cells.fixed
  q0 = jnp.clip(s_s * jnp.sqrt(_guess_rho(budget, target, given) / t_s), 1e-8, 1.0)
  ev = _sgm_evaluator(
    budget,
    lambda q: q,
    lambda q: s_s,
    t_s,
    cells.given,
    all_orders,
    orders_static,
    True,
    _Q_DOMAIN,
    q0,
  )
  known = cells.known(cells.degenerate, 1.0)
  return SamplingRateCalibration(*calibrate(ev, budget, target, given, cells.active, known))


def _steps_impl(target, given, q, sigma, all_orders, orders_static, budget):
  cells = _cells(budget, target, given, dict(q=q, sigma=sigma), all_orders)
  q_s, s_s = cells.fixed
  # T steps compose to T times the per-step RDP (Mironov 2017, Prop. 1): one kernel
  # evaluation per cell, then a search over T with the cheap conversion only.
  rdp1 = _rdp_f64(q_s[..., None], s_s[..., None], all_orders, orders_static)

  def value(t, live):
    del live
    total = jnp.where(t[..., None] == 0, 0.0, t[..., None] * rdp1)
    return _rdp_value(budget, total, all_orders, cells.given)

  ev = Evaluator(value, True, _STEPS_DOMAIN)
  # Zero RDP (q = 0 or sigma = inf): any number of steps fits.
  unlimited = cells.degenerate | (cells.active & jnp.all(rdp1 == 0, axis=-1))
  known = cells.known(unlimited, jnp.inf)
  return StepsCalibration(*calibrate(ev, budget, target, given, cells.active, known))


_STATIC = ("orders_static", "budget")
_noise_jit = jax.jit(_noise_impl, static_argnames=_STATIC)
_rate_jit = jax.jit(_rate_impl, static_argnames=_STATIC)
_steps_jit = jax.jit(_steps_impl, static_argnames=_STATIC)
_JITS = {"noise": _noise_jit, "rate": _rate_jit, "steps": _steps_jit}


# --------------------------------------------------------------------------------------
# Public boundary: the budget, validation of concrete input, broadcasting, float64.


def orders_array(orders) -> np.ndarray:
  """Validated float64 numpy orders (default ``DEFAULT_ORDERS``)."""
  orders = _orders_or_default(orders)
  if isinstance(orders, jax.core.Tracer):
    raise ValueError("orders must be concrete (a numpy array or list), not traced")
  arr = np.asarray(orders, dtype=np.float64)
  if arr.size == 0:
    raise ValueError("orders must not be empty")
  return arr


def _budget(fn, target_epsilon, delta, target_delta, epsilon):
  """(Budget, target, given) from the two keyword pairs, exactly one of them given."""
  by_epsilon = target_epsilon is not None or delta is not None
  by_delta = target_delta is not None or epsilon is not None
  if by_epsilon == by_delta:
    raise TypeError(
      f"{fn}() takes either target_epsilon and delta (an epsilon budget) "
      "or target_delta and epsilon (a delta budget)"
    )
  budget = Budget.DELTA if by_delta else Budget.EPSILON
  target, given = (target_delta, epsilon) if by_delta else (target_epsilon, delta)
  for name, x in ((budget.target_name, target), (budget.given_name, given)):
    if x is None:
      raise TypeError(f"{fn}() missing argument {name!r} (a {budget.value} budget)")
  return budget, target, given


def _check_accountant(accountant, orders, values):
  """Reject a bad accountant request before anything is compiled."""
  if accountant not in _ACCOUNTANTS:
    raise ValueError(f"accountant must be one of {_ACCOUNTANTS}, got {accountant!r}")
  if accountant == "rdp":
    return
  if orders is not None:
    raise ValueError(
      f"orders configures the RDP accountant; leave it out with accountant={accountant!r}"
    )
  if not all(is_concrete(x) for x in values):
    raise ValueError(
      f"calibration with accountant={accountant!r} needs concrete arguments "
      "(it runs on the host); use accountant='rdp' under jit"
    )


def _public(fn, kind, budget_args, fixed, orders, accountant, sampling, relation):
  """The body of the three public calibrations: checks, then one jitted calibration.

  ``fn``: the public name (for messages); ``budget_args``: its (target_epsilon,
  delta, target_delta, epsilon); ``fixed``: the two given DP-SGD parameters by name,
  in the jitted function's argument order.
  """
  budget, target, given = _budget(fn, *budget_args)
  for name, x in fixed.items():
    if x is None:
      raise TypeError(f"{fn}() missing argument {name!r}")
  budget.check(target, given)
  for name, x in fixed.items():
    _FIXED_RANGE[name].check(name, x)
  jitted = _scheme_jitted(kind, sampling, relation, accountant, orders)
  return _solve(kind, jitted, accountant, budget, target, given, fixed, orders)


def _scheme_jitted(kind, sampling, relation, accountant, orders):
  """The jitted calibration of ``kind`` for a batching scheme and relation.

  The SGM's (Poisson under add/remove) for the default pair; else the scheme's
  (``jaxrdp.calibration._schemes``) with the pair bound, after the checks that need
  no compilation: the pair, the accountant (Renyi DP only) and the orders.
  """
  sampling, relation = _sampling.resolve_scheme(sampling, relation)
  if _sampling.is_default_scheme(sampling, relation):
    return _JITS[kind]
  check_scheme_accountant(sampling, relation, accountant)
  _sampling.check_orders_for(sampling, orders_array(orders))
  from ._schemes import JITS  # imports this module

  return functools.partial(JITS[kind], sampling=sampling, relation=relation)


def _solve(kind, jitted, accountant, budget, target, given, fixed, orders):
  """One jitted Renyi-DP calibration, refined on the host for another accountant.

  ``fixed`` maps the two given DP-SGD parameters, in the jitted function's argument
  order, to their values.
  """
  _check_accountant(accountant, orders, (target, given, *fixed.values()))
  out = _call(jitted, budget, target, given, *fixed.values(), orders)
  if accountant == "rdp":
    return out
  return _refine(kind, accountant, out, budget, target, given, fixed)


def _refine(kind, accountant, out, budget, target, given, fixed):
  """The Renyi-DP answer ``out`` refined on the host by another accountant."""
  name = {"noise": "sigma", "rate": "q", "steps": "steps"}[kind]
  solved = np.asarray(getattr(out, name), dtype=np.float64)
  shape = solved.shape
  cols = {
    k: np.broadcast_to(np.asarray(v, dtype=np.float64), shape).ravel() for k, v in fixed.items()
  }
  cols.setdefault("q", None)
  cols.setdefault("sigma", None)
  cols.setdefault("steps", None)
  tgt = np.broadcast_to(np.asarray(target, dtype=np.float64), shape).ravel()
  giv = np.broadcast_to(np.asarray(given, dtype=np.float64), shape).ravel()
  start = solved.ravel()
  feasible = np.asarray(out.feasible).ravel()
  # Cells with a closed-form answer (no privacy loss: sigma = 0 for q = 0 or no
  # steps, q = 1 or unlimited steps) keep it; the others are searched.
  trivial = {"noise": start == 0, "rate": start == 1, "steps": ~np.isfinite(start)}[kind]
  searched = feasible & ~trivial
  with _precision.x64_context():
    param, value, ok = calibrate_with_accountant(
      kind, accountant, budget, tgt, giv, cols, start, searched
    )
  value = np.where(searched, value, np.asarray(getattr(out, budget.value)).ravel())
  ok = np.where(searched, ok, feasible)
  param = np.where(ok, param, np.nan)
  value = np.where(ok, value, np.nan)
  eps, dlt = budget.pair(value, giv)
  fields = {
    name: param,
    "epsilon": eps,
    "delta": dlt,
    "order": np.full(param.shape, np.nan),
    "feasible": ok,
  }
  return type(out)(**{k: np.reshape(v, shape) for k, v in fields.items()})


def _finalize(out, outer_x64: bool):
  """Float32 results for a caller tracing with x64 off, rounded the safe way.

  As in ``jaxrdp._core.precision.Float64Scope``: a float64 tracer would be rounded to
  nearest at the caller's next operation, so it is cast here instead, and in the
  direction that keeps the guarantee: sigma, epsilon and delta up, the number of
  steps and the sampling rate down (more steps or a larger q would spend more than
  the budget). Eager calls and x64 callers get float64.
  """
  first_down = isinstance(out, (StepsCalibration, SamplingRateCalibration))
  return _precision.finalize(out, outer_x64, type(out)(first_down, *(False,) * (len(out) - 1)))


def _call(jitted, budget, target, given, a, b, orders):
  all_orders = orders_array(orders)
  outer_x64 = bool(jax.config.jax_enable_x64)
  with _precision.x64_context():
    args = [_precision.as_float64(x) for x in (target, given, a, b)]
    shape = jnp.broadcast_shapes(*(x.shape for x in args))
    args = [jnp.broadcast_to(x, shape) for x in args]
    out = jitted(
      *args, jnp.asarray(all_orders), orders_static=StaticArray(all_orders), budget=budget
    )
  return _finalize(out, outer_x64)


def calibrate_noise(
  target_epsilon: ArrayLike | None = None,
  delta: ArrayLike | None = None,
  q: ArrayLike | None = None,
  steps: ArrayLike | None = None,
  orders: ArrayLike | None = None,
  *,
  target_delta: ArrayLike | None = None,
  epsilon: ArrayLike | None = None,
  accountant: str = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> NoiseCalibration:
  """Smallest noise multiplier sigma whose guarantee meets the budget.

  The budget is either ``target_epsilon`` at a given ``delta`` (positionally, as in
  ``calibrate_noise(target_epsilon, delta, q, steps)``), solving min {sigma :
  dpsgd_epsilon(q, sigma, steps, delta).epsilon <= target_epsilon}, or, as keywords,
  ``target_delta`` at a given ``epsilon``, solving min {sigma : dpsgd_delta(q, sigma,
  steps, epsilon).delta <= target_delta}. All arguments broadcast together; a whole
  grid is one jitted call of the calibration core (``jaxrdp.calibration._core``).

  Guarantees, for every feasible cell: the budgeted quantity recomputed at sigma
  (``dpsgd_epsilon``, or ``dpsgd_delta``, with the same orders) is at most its target
  (1 - 1e-12), and sigma (1 - 1e-6) exceeds the target (the bracket is 4e-8 wide in
  log sigma).

  Args:
    target_epsilon: epsilon budget, >= 0 (with ``delta``).
    delta: delta of the guarantee, in (0, 1).
    q: Poisson sampling rate, in [0, 1].
    steps: number of DP-SGD steps, >= 0 (need not be an integer).
    orders: Renyi orders (1-D, concrete); default :data:`jaxrdp.DEFAULT_ORDERS`.
    target_delta: delta budget, in (0, 1) (keyword; with ``epsilon`` instead of
      ``target_epsilon`` and ``delta``).
    epsilon: epsilon of the guarantee, >= 0 (keyword).
    accountant: ``"rdp"`` (default: Renyi DP, one jitted search) or ``"pld"`` (tight,
      certified accounting: the search starts from the Renyi-DP answer and runs on
      the host, one vectorized tight evaluation per round, until the bracket is
      1e-5 wide in log sigma or log q, or one step; needs concrete arguments and
      the default orders; ``order`` is then NaN).
    sampling: ``"poisson"`` (default), ``"fixed"`` or ``"shuffle"``, and
    relation: ``"add_remove"`` or ``"replace_one"`` (default per scheme): the batching
      scheme and neighbouring relation, as in :func:`jaxrdp.dpsgd_epsilon` (q is
      B / n for ``"fixed"`` and ``"shuffle"``; sigma is the DP-SGD noise multiplier).
      Other than Poisson under add/remove, they need ``accountant="rdp"``.

  Returns:
    ``NoiseCalibration(sigma, epsilon, delta, order, feasible)``, float64 arrays of
    the broadcast shape; the budgeted one of ``epsilon`` and ``delta`` is the value
    achieved at ``sigma``, the other the given one. Infeasible cells (a target at or
    below the infinite-noise floor, or needing sigma > 1e6) have NaN and ``feasible ==
    False``. q = 0 or steps = 0 gives sigma = 0. Concrete invalid input raises
    ValueError; traced invalid input gives NaN.

  Raises:
    TypeError: if neither or both budgets are given, or q or steps is missing.

  Examples:
    >>> import jaxrdp
    >>> res = jaxrdp.calibrate_noise(2.0, 1e-5, 256 / 60000, 14063)
    >>> round(float(res.sigma), 4), bool(res.feasible)
    (1.2953, True)
    >>> res = jaxrdp.calibrate_noise(q=256 / 60000, steps=14063, target_delta=1e-5,
    ...                              epsilon=2.0)
    >>> round(float(res.sigma), 4)
    1.2953
  """
  budget_args = (target_epsilon, delta, target_delta, epsilon)
  fixed = dict(q=q, steps=steps)
  return _public(
    "calibrate_noise", "noise", budget_args, fixed, orders, accountant, sampling, relation
  )


def calibrate_steps(
  target_epsilon: ArrayLike | None = None,
  delta: ArrayLike | None = None,
  q: ArrayLike | None = None,
  sigma: ArrayLike | None = None,
  orders: ArrayLike | None = None,
  *,
  target_delta: ArrayLike | None = None,
  epsilon: ArrayLike | None = None,
  accountant: str = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> StepsCalibration:
  """Largest integer number of steps T whose guarantee meets the budget.

  The budget is ``target_epsilon`` at a given ``delta`` (positionally) or, as
  keywords, ``target_delta`` at a given ``epsilon``, as in :func:`calibrate_noise`.
  The per-step RDP is computed once per cell; T is found by exponential search and
  integer bisection, so that T steps meet the budget and T + 1 do not.

  Tightness: epsilon(T) always meets the budget. That T + 1 does not holds up to
  T ~ 1e10; beyond (about 1e11 to 1e13 steps and more) one step changes epsilon by
  less than its own 1e-12 relative accuracy, so T is the largest count to within
  that accuracy of epsilon, and T + 1, T + 2, ... may still meet the budget.

  Args:
    target_epsilon: epsilon budget, >= 0 (with ``delta``).
    delta: delta in (0, 1).
    q: sampling rate in [0, 1].
    sigma: noise multiplier >= 0 (inf allowed).
    orders: Renyi orders; default :data:`jaxrdp.DEFAULT_ORDERS`.
    target_delta: delta budget in (0, 1) (keyword; with ``epsilon``).
    epsilon: epsilon of the guarantee, >= 0 (keyword).
    accountant, sampling, relation: the accountant, batching scheme and relation, as
      in :func:`calibrate_noise`.

  Returns:
    ``StepsCalibration(steps, epsilon, delta, order, feasible)``. ``steps`` is a
    float64 integer: inf where the RDP is zero (q = 0 or sigma = inf), at most
    2**52, and NaN with ``feasible == False`` where not even one step fits.

  Raises:
    TypeError: if neither or both budgets are given, or q or sigma is missing.

  Examples:
    >>> import jaxrdp
    >>> int(jaxrdp.calibrate_steps(2.597, 1e-5, 256 / 60000, 1.1).steps)
    14066
    >>> int(jaxrdp.calibrate_steps(q=256 / 60000, sigma=1.1, target_delta=1e-5,
    ...                            epsilon=2.597).steps)
    14066
  """
  budget_args = (target_epsilon, delta, target_delta, epsilon)
  fixed = dict(q=q, sigma=sigma)
  return _public(
    "calibrate_steps", "steps", budget_args, fixed, orders, accountant, sampling, relation
  )


def calibrate_sampling_rate(
  target_epsilon: ArrayLike | None = None,
  delta: ArrayLike | None = None,
  sigma: ArrayLike | None = None,
  steps: ArrayLike | None = None,
  orders: ArrayLike | None = None,
  *,
  target_delta: ArrayLike | None = None,
  epsilon: ArrayLike | None = None,
  accountant: str = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> SamplingRateCalibration:
  """Largest sampling rate q in (0, 1] whose guarantee meets the budget.

  The budget is ``target_epsilon`` at a given ``delta`` (positionally) or, as
  keywords, ``target_delta`` at a given ``epsilon``, as in :func:`calibrate_noise`.
  Searched in log q; q (1 + 1e-6) exceeds the target unless q = 1. For a dataset of
  N examples the largest expected batch size is floor(q N), within budget because
  epsilon and delta are non-decreasing in q.

  Args:
    target_epsilon: epsilon budget, >= 0 (with ``delta``).
    delta: delta in (0, 1).
    sigma: noise multiplier >= 0 (inf allowed).
    steps: number of steps >= 0.
    orders: Renyi orders; default :data:`jaxrdp.DEFAULT_ORDERS`.
    target_delta: delta budget in (0, 1) (keyword; with ``epsilon``).
    epsilon: epsilon of the guarantee, >= 0 (keyword).
    accountant, sampling, relation: the accountant, batching scheme and relation, as
      in :func:`calibrate_noise`.

  Returns:
    ``SamplingRateCalibration(q, epsilon, delta, order, feasible)``; NaN and
    ``feasible == False`` where no q >= 1e-10 fits (sigma = 0, or a target at or
    below the infinite-noise floor). steps = 0 gives q = 1.

  Raises:
    TypeError: if neither or both budgets are given, or sigma or steps is missing.

  Examples:
    >>> import jaxrdp
    >>> res = jaxrdp.calibrate_sampling_rate(2.597, 1e-5, 1.1, 14063)
    >>> round(float(res.q) * 60000)
    256
  """
  budget_args = (target_epsilon, delta, target_delta, epsilon)
  fixed = dict(sigma=sigma, steps=steps)
  return _public(
    "calibrate_sampling_rate", "rate", budget_args, fixed, orders, accountant, sampling, relation
  )
