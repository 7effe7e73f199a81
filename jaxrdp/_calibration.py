"""Calibrating DP-SGD to a privacy budget: noise, steps or sampling rate, on grids.

Each function inverts one monotone map of the RDP accountant of the Sampled
Gaussian Mechanism (SGM; Mironov, Talwar, Zhang 2019, arXiv:1908.10530): the
per-step RDP at every order is non-increasing in the noise multiplier sigma and
non-decreasing in the sampling rate q, T steps multiply it by T, and the RDP ->
(epsilon, delta) conversions (Canonne, Kamath, Steinke 2020, arXiv:2004.00010,
Prop. 12) are increasing in the RDP at each order and take a minimum over orders.
So epsilon(delta) and delta(epsilon) are non-increasing in sigma and
non-decreasing in q and T, and each calibration is a 1-D threshold search per cell.

Sigma and q (``jaxrdp._bracket``): the search runs in v = log sigma (or v = -log q,
so that the budget holds for v >= threshold), on log(value) - log(target), which is
nearly linear in v (epsilon ~ sigma^-1 to sigma^-2). Two passes, each a vectorized
bracketing search (geometric expansion, then ITP steps: Oliveira and Takahashi
2020, ACM TOMS 47(1), doi:10.1145/3423597, with the Illinois rule and Brent's
minimum step):

1. A cheap proxy, the accountant over the grid's integer orders up to 64 only (a
   shared finite series per cell, no quadrature), from the zCDP guess rho =
   T q^2 / sigma^2 with epsilon = rho + 2 sqrt(rho log(1/delta)) (Bun and Steinke
   2016, arXiv:1605.02065, Prop. 1.3). Its minimum runs over a subset of the
   orders, so its threshold is at or above the exact one (usually within a few
   percent: the fractional orders between the integers lower epsilon slightly).
2. The exact accountant (the core's order search), started at the proxy's answer
   with a Newton-sized first step (the proxy's local slope, 10% overshoot). A
   cell whose optimum is an integer order finishes in two exact evaluations;
   the others take 5 to 8 on the standard grid.

Each exact evaluation is an order search (``jaxrdp._order_search``), and every
point the exact pass tries below its smallest acceptable point v_ok so far has less
noise (or a larger q) than v_ok, so log A at each order is at least what the search
at v_ok found: its exact values, and its convexity bounds elsewhere. The search takes
them as floors, which prune the orders that cannot be optimal before any are
evaluated. Near the answer the floors are nearly exact and a search evaluates about
one order per cell instead of three (400 cells at sigma 1e-4 below a known point:
433 quadratures instead of 1,306); on the standard grid the calibration takes 62
search rounds instead of 103. The floors change no result, only the work. Each cell
keeps its table (one float64 per search point, 176 with the default orders, 1.4 KB); the
peak memory of a 20,000-cell calibration was 1.52 GB against 1.51 GB without the floors
(2026-11-22, maximum resident set size of the process).

The exact pass alone decides: it stops when its bracket is 4e-8 wide and answers
with the end that meets the budget, so the result is conservative by construction
and sigma (1 - 1e-6) violates the budget whatever the proxy did. All cells advance
together in one ``lax.while_loop`` per pass that evaluates the accountant once per
iteration (cells that finished skip the quadratures), so a grid is one jitted call;
the value and order at the answer are kept from the search, not recomputed.

Steps: the per-step RDP is computed once per cell (T only scales it, Mironov 2017,
arXiv:1702.07476, Prop. 1), then exponential search and integer bisection on T.

Budget margin: a cell meets its budget when its value is <= target (1 - 1e-12),
so that recomputing epsilon with a different floating-point evaluation order
cannot push it over the target.

Infeasible requests give NaN with ``feasible == False``:

* ``calibrate_noise``: the target is at or below the floor that infinite noise
  reaches with these orders and delta (the conversion at RDP = 0; about 5e-4 for
  delta = 1e-5 with the default orders), or needs sigma > 1e6;
* ``calibrate_steps``: not even one step fits;
* ``calibrate_sampling_rate``: no q >= 1e-10 fits (or sigma = 0).

Degenerate cells are answered in closed form: q = 0 or steps = 0 needs sigma = 0;
steps = 0 admits q = 1; q = 0 or sigma = inf admits steps = inf.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from . import _precision
from ._conversions import delta_from_rdp_f64, epsilon_from_rdp_f64
from ._dpsgd import _dpsgd_delta_f64, _dpsgd_rdp_f64, _orders_or_default, _search_f64
from ._order_search import table_size as search_table_size
from ._bracket import solve_threshold
from ._sgm import _rdp_f64
from ._numerics import positive_subnormal, raise_subnormal
from ._validation import StaticArray, check_range

__all__ = [
    "NoiseCalibration", "StepsCalibration", "SamplingRateCalibration",
    "calibrate_noise", "calibrate_noise_for_delta",
    "calibrate_steps", "calibrate_steps_for_delta",
    "calibrate_sampling_rate", "calibrate_sampling_rate_for_delta",
]

# A cell meets its budget when value <= target * (1 - _SAFETY).
_SAFETY = 1e-12
# Final half-width of the bracket in v: sigma is tight to 4e-8 relative, 25 times
# inside the promised 1e-6. Tighter costs little on smooth cells but up to one
# bisection step per halving on cells whose epsilon is nearly a staircase in sigma
# (targets close to the floor, where each order switches on abruptly).
_TOL = 2e-8
# The exact search starts at the proxy's answer (see _calibrate_continuous) and
# runs its ITP steps with less truncation than the paper's 0.2 (the exact epsilon
# is smooth near a good start; on the standard 400-cell grid 0.02 takes 5 to 8
# evaluations per cell, 0.2 takes 7 to 11). The proxy keeps 0.2: its minimum over
# integer orders is kinked.
_K1_EXACT = 0.02
# Search ranges: sigma in [1e-3, 1e6]; q in [1e-10, 1] (v = -log q).
_LOG_SIGMA_RANGE = (float(np.log(1e-3)), float(np.log(1e6)))
_NEG_LOG_Q_RANGE = (0.0, float(-np.log(1e-10)))
# The integer search for the number of steps stops at 2**52 (exact in float64).
_MAX_STEPS = float(2**52)


class NoiseCalibration(NamedTuple):
  """Result of :func:`calibrate_noise` / :func:`calibrate_noise_for_delta` (a pytree).

  Attributes:
    sigma: smallest noise multiplier meeting the budget; NaN where infeasible.
    epsilon: epsilon of the guarantee at ``sigma`` (achieved by
      ``calibrate_noise``, given to ``calibrate_noise_for_delta``).
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
  """Result of :func:`calibrate_steps` / :func:`calibrate_steps_for_delta` (a pytree).

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
  """Result of :func:`calibrate_sampling_rate` / ``..._for_delta`` (a pytree).

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
# The accountant and the search.


def _full_value(rdp_total, orders, given, for_delta):
  """(value, order) of the accountant over all orders, as dpsgd_epsilon/delta do."""
  if for_delta:
    res = delta_from_rdp_f64(rdp_total, orders, given, "improved")
    return res.delta, res.order
  res = epsilon_from_rdp_f64(rdp_total, orders, given, "improved")
  return res.epsilon, res.order


def _calibrate_continuous(value_at, target, v0, v_range, active, proxy_at=None,
                          table_size=None):
  """Smallest v in v_range with accountant value <= target (``jaxrdp._bracket``).

  Args:
    value_at: (v [S], live [S] or None, f_floor) -> (value, order, table) of the
      accountant (epsilon, or delta), non-increasing in v; it may skip work where
      live is False. With ``table_size`` it is the order search: f_floor is None or
      lower bounds on log A at its points ([S, table_size], ``SearchResult.table``
      layout) and it returns its table; without, it ignores f_floor and table is None.
    target, v0, active: cell arrays of shape S.
    proxy_at: optional v -> value of a cheap accountant that is never below
      value_at's (a minimum over a subset of the orders). Its threshold, found
      first, is at or above the exact one and usually within a few percent of it,
      so the exact search starts there with a Newton-sized first step.

  Returns:
    (v, value, order, ok): v is NaN where infeasible; value and order describe the
    guarantee at v.
  """
  bound = target * (1.0 - _SAFETY)
  log_bound = jnp.log(bound)
  # Every aux below is a float64 array of the cells' shape (value, order; proxy f).
  cell = jax.ShapeDtypeStruct(jnp.shape(v0), jnp.float64)

  def score(v, live, v_ok=None, aux_ok=None):
    floor = None
    if table_size is not None:
      # Every point the search tries below its smallest acceptable point so far has
      # less noise (or a larger q) there, so log A at every order is at least what
      # that point's search computed (module docstring): the exact values found
      # there bound this search's orders from below, tightly for nearby points.
      floor = jnp.where((v <= v_ok)[..., None], aux_ok[2], 0.0)
    value, order, table = value_at(v, live, floor)
    # log value - log bound is close to linear in log sigma (epsilon ~ sigma^-1 to
    # sigma^-2), which makes the interpolation steps converge fast.
    aux = (value, order) if table is None else (value, order, table)
    return value <= bound, jnp.log(value) - log_bound, aux

  # epsilon falls like sigma^-1 to sigma^-2 (and rises like q to q^2): |slope| ~ 1.
  slope, first_min, overshoot = 1.0, 1e-4, 1.0
  if proxy_at is not None:
    def proxy_score(v, live):
      del live
      value = proxy_at(v)
      f = jnp.log(value) - log_bound
      return value <= bound, f, f

    # The same tolerance as the exact pass, so that a cell whose optimal order
    # is an integer needs only two exact evaluations; the paper's ITP truncation
    # (the proxy's minimum over integer orders is kinked).
    pre = solve_threshold(proxy_score, v0, *v_range, active, _TOL, slope=1.0, aux_like=cell)
    use = active & ~pre.infeasible & (pre.v > v_range[0])
    # The exact threshold is at or below the proxy's (the exact value is at most
    # the proxy's): start there, with the proxy's local slope for the Newton step
    # (f at pre.v is kept by the search). A start within tol of the threshold then
    # costs two exact evaluations.
    h = 1e-3
    v1 = jnp.where(use, pre.v, v0)
    d = (jnp.log(proxy_at(v1 - h)) - log_bound - pre.aux) / h
    slope = jnp.where(use & jnp.isfinite(d) & (d > 0), d, 1.0)
    first_min = jnp.where(use, jnp.maximum(pre.v - pre.a, 1.99 * _TOL), first_min)
    overshoot = jnp.where(use, 1.1, 1.0)
    v0 = v1
  aux_like = (cell, cell)
  if table_size is not None:
    aux_like += (jax.ShapeDtypeStruct(jnp.shape(v0) + (table_size,), jnp.float64),)
  res = solve_threshold(score, v0, *v_range, active, _TOL, slope, first_min, overshoot,
                        k1=_K1_EXACT, aux_like=aux_like,
                        score_sees_best=table_size is not None)
  ok = active & ~res.infeasible
  v = jnp.where(ok, res.v, jnp.nan)
  value, order = res.aux[:2]
  return v, value, order, ok


# --------------------------------------------------------------------------------------
# The three calibrations (traced cores).


def _zcdp_rho(epsilon, delta):
  # Invert epsilon = rho + 2 sqrt(rho L), L = log(1/delta): sqrt(rho) =
  # sqrt(L + epsilon) - sqrt(L), written without cancellation. A first guess only.
  log_inv_delta = -jnp.log(delta)
  return (epsilon / (jnp.sqrt(log_inv_delta + epsilon) + jnp.sqrt(log_inv_delta))) ** 2


def _guess_rho(target, given, for_delta):
  eps = given if for_delta else target
  dlt = target if for_delta else given
  eps = jnp.where(jnp.isfinite(eps) & (eps > 0), eps, 1.0)
  dlt = jnp.where((dlt > 0) & (dlt < 1), dlt, 1e-5)  # (a subnormal delta reads as 0: a guess only)
  return _zcdp_rho(eps, dlt)


def _valid_budget(target, given, for_delta):
  if for_delta:
    return ((target > 0) | positive_subnormal(target)) & (target < 1) & (given >= 0) & ~jnp.isnan(given)
  return (target >= 0) & ~jnp.isnan(target) & ((given > 0) | positive_subnormal(given)) & (given < 1)


def _floor_value(given, all_orders, for_delta):
  # The accountant at zero RDP: what infinite noise (or q = 0) achieves.
  zeros = jnp.zeros(given.shape + all_orders.shape)
  return _full_value(zeros, all_orders, given, for_delta)


def _pack(cls, x, value, given, order, feasible, for_delta):
  eps, dlt = (given, value) if for_delta else (value, given)
  nan = jnp.nan
  return cls(x, jnp.where(feasible, eps, nan), jnp.where(feasible, dlt, nan),
             jnp.where(feasible, order, nan), feasible)


def _accountant(q, sigma, steps, given, all_orders, orders_static, for_delta, live=None,
                f_floor=None):
  """(value, order, table) exactly as dpsgd_epsilon / dpsgd_delta compute them in a trace.

  Epsilon uses the core's order search (the exact minimum over the orders),
  which evaluates the SGM kernel at far fewer orders than all of them. Cells
  where ``live`` is False skip the search (their values are then sound but not
  exact, and must not be used). ``f_floor`` and ``table``: the search's lower
  bounds and its exact values (``min_epsilon_over_orders``); delta evaluates
  every order, takes no floor and returns no table (None).
  """
  if for_delta:
    res = _dpsgd_delta_f64(q, sigma, steps, given, all_orders, orders_static, "improved")
    return res.delta, res.order, None
  res = _search_f64(q, sigma, steps, given, orders_static, "improved", live, f_floor)
  return res.epsilon, res.order, res.table


def _proxy_orders(all_orders: np.ndarray) -> np.ndarray:
  """The orders of the grid whose RDP the cheap integer series gives (2 to 64)."""
  ints = all_orders[(all_orders == np.round(all_orders)) & (all_orders >= 2) & (all_orders <= 64)]
  return np.unique(ints)


def _proxy_accountant(q, sigma, steps, given, sub, for_delta):
  """The accountant's value over the orders ``sub`` (see _proxy_orders) only.

  It is never below the accountant over all orders (a minimum over a subset),
  and costs one shared finite series per configuration, no quadrature.
  """
  rdp = _dpsgd_rdp_f64(q, sigma, steps, jnp.asarray(sub), StaticArray(sub))
  return _full_value(rdp, jnp.asarray(sub), given, for_delta)[0]


def _noise_impl(target, given, q, steps, all_orders, orders_static, for_delta):
  q, steps = raise_subnormal(q), raise_subnormal(steps)  # XLA would read them as 0
  valid = _valid_budget(target, given, for_delta) & (q >= 0) & (q <= 1) & (steps >= 0)
  floor, floor_order = _floor_value(given, all_orders, for_delta)
  reachable = floor <= target * (1.0 - _SAFETY)
  trivial = valid & ((q == 0) | (steps == 0))
  active = valid & ~trivial & reachable
  q_s = jnp.where(active, q, 0.5)
  t_s = jnp.where(active, steps, 1.0)
  g_s = jnp.where(active, given, 0.5)
  sigma0 = jnp.clip(q_s * jnp.sqrt(t_s / _guess_rho(target, given, for_delta)), 0.3, 1e5)

  def value_at(v, live, f_floor=None):
    return _accountant(q_s, jnp.exp(v), t_s, g_s, all_orders, orders_static, for_delta, live,
                       f_floor)

  sub = _proxy_orders(orders_static.array)

  def proxy_at(v):
    return _proxy_accountant(q_s, jnp.exp(v), t_s, g_s, sub, for_delta)

  v, value, order, ok = _calibrate_continuous(
      value_at, jnp.where(active, target, 1.0), jnp.log(sigma0), _LOG_SIGMA_RANGE, active,
      proxy_at if sub.size else None,
      None if for_delta else search_table_size(orders_static.array))
  feasible = ok | (trivial & reachable)
  sigma = jnp.where(trivial, 0.0, jnp.exp(v))
  sigma = jnp.where(feasible, sigma, jnp.nan)
  value = jnp.where(trivial, floor, value)
  order = jnp.where(trivial, floor_order, order)
  return _pack(NoiseCalibration, sigma, value, given, order, feasible, for_delta)


def _rate_impl(target, given, sigma, steps, all_orders, orders_static, for_delta):
  steps = raise_subnormal(steps)  # XLA would read a subnormal as 0
  valid = _valid_budget(target, given, for_delta) & (sigma >= 0) & (steps >= 0)
  floor, floor_order = _floor_value(given, all_orders, for_delta)
  reachable = floor <= target * (1.0 - _SAFETY)
  no_steps = valid & (steps == 0)
  # sigma = 0 with q > 0 and T > 0 reveals the data: infinite RDP at every order.
  active = valid & ~no_steps & reachable & (sigma > 0)
  s_s = jnp.where(active, sigma, 1.0)
  t_s = jnp.where(active, steps, 1.0)
  g_s = jnp.where(active, given, 0.5)
  q0 = jnp.clip(s_s * jnp.sqrt(_guess_rho(target, given, for_delta) / t_s), 1e-8, 1.0)

  def value_at(v, live, f_floor=None):
    return _accountant(jnp.exp(-v), s_s, t_s, g_s, all_orders, orders_static, for_delta, live,
                       f_floor)

  sub = _proxy_orders(orders_static.array)

  def proxy_at(v):
    return _proxy_accountant(jnp.exp(-v), s_s, t_s, g_s, sub, for_delta)

  v, value, order, ok = _calibrate_continuous(
      value_at, jnp.where(active, target, 1.0), -jnp.log(q0), _NEG_LOG_Q_RANGE, active,
      proxy_at if sub.size else None,
      None if for_delta else search_table_size(orders_static.array))
  feasible = ok | (no_steps & reachable)
  q = jnp.where(no_steps, 1.0, jnp.exp(-v))
  q = jnp.where(feasible, q, jnp.nan)
  value = jnp.where(no_steps, floor, value)
  order = jnp.where(no_steps, floor_order, order)
  return _pack(SamplingRateCalibration, q, value, given, order, feasible, for_delta)


def _steps_impl(target, given, q, sigma, all_orders, orders_static, for_delta):
  q = raise_subnormal(q)  # XLA would read a subnormal as 0
  valid = _valid_budget(target, given, for_delta) & (q >= 0) & (q <= 1) & (sigma >= 0)
  q_s = jnp.where(valid, q, 0.5)
  s_s = jnp.where(valid, sigma, 1.0)
  g_s = jnp.where(valid, given, 0.5)
  # T steps compose to T times the per-step RDP (Mironov 2017, Prop. 1): one kernel
  # evaluation per cell, then a search over T with the cheap conversion only.
  rdp1 = _rdp_f64(q_s[..., None], s_s[..., None], all_orders, orders_static)
  bound = target * (1.0 - _SAFETY)

  def value_at(t):
    total = jnp.where(t[..., None] == 0, 0.0, t[..., None] * rdp1)
    return _full_value(total, all_orders, g_s, for_delta)

  def ok(t):
    return value_at(t)[0] <= bound

  zero = jnp.zeros_like(q_s)
  ok0 = valid & ok(zero)
  unlimited = ok0 & jnp.all(rdp1 == 0, axis=-1)
  search = ok0 & ~unlimited

  def exp_cond(s):
    _, hi, ok_hi = s
    return jnp.any(search & ok_hi & (hi < _MAX_STEPS))

  def exp_body(s):
    lo, hi, ok_hi = s
    grow = search & ok_hi & (hi < _MAX_STEPS)
    lo = jnp.where(grow, hi, lo)
    hi = jnp.where(grow, 2.0 * hi, hi)
    return lo, hi, jnp.where(grow, ok(hi), ok_hi)

  one = jnp.ones_like(q_s)
  lo, hi, ok_hi = lax.while_loop(exp_cond, exp_body, (zero, one, ok(one)))
  capped = search & ok_hi  # within budget even at the cap: report the cap

  def bis_cond(s):
    lo, hi = s
    return jnp.any(search & ~capped & (hi - lo > 1))

  def bis_body(s):
    lo, hi = s
    live = search & ~capped & (hi - lo > 1)
    mid = jnp.floor(0.5 * (lo + hi))
    okm = ok(jnp.where(live, mid, lo))
    return jnp.where(live & okm, mid, lo), jnp.where(live & ~okm, mid, hi)

  lo, hi = lax.while_loop(bis_cond, bis_body, (lo, hi))
  steps = jnp.where(capped, hi, lo)
  feasible = unlimited | (search & (steps >= 1))
  value, order = value_at(jnp.where(unlimited, 0.0, steps))
  steps = jnp.where(unlimited, jnp.inf, steps)
  steps = jnp.where(feasible, steps, jnp.nan)
  return _pack(StepsCalibration, steps, value, given, order, feasible, for_delta)


_noise_jit = jax.jit(_noise_impl, static_argnames=("orders_static", "for_delta"))
_rate_jit = jax.jit(_rate_impl, static_argnames=("orders_static", "for_delta"))
_steps_jit = jax.jit(_steps_impl, static_argnames=("orders_static", "for_delta"))


# --------------------------------------------------------------------------------------
# Public boundary: validation of concrete input, broadcasting, float64.


def orders_array(orders) -> np.ndarray:
  """Validated float64 numpy orders (default ``DEFAULT_ORDERS``)."""
  orders = _orders_or_default(orders)
  if isinstance(orders, jax.core.Tracer):
    raise ValueError("orders must be concrete (a numpy array or list), not traced")
  arr = np.asarray(orders, dtype=np.float64)
  if arr.size == 0:
    raise ValueError("orders must not be empty")
  return arr


def _check_budget(target, given, for_delta):
  if for_delta:
    check_range("target_delta", target, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    check_range("epsilon", given, lower=0.0)
  else:
    check_range("target_epsilon", target, lower=0.0)
    check_range("delta", given, lower=0.0, upper=1.0, lower_open=True, upper_open=True)


def _finalize(out, outer_x64: bool):
  """Float32 results for a caller tracing with x64 off, rounded the safe way.

  As in ``jaxrdp._precision.Float64Scope``: a float64 tracer would be rounded to
  nearest at the caller's next operation, so it is cast here instead, and in the
  direction that keeps the guarantee: sigma, epsilon and delta up, the number of
  steps and the sampling rate down (more steps or a larger q would spend more than
  the budget). Eager calls and x64 callers get float64.
  """
  if outer_x64:
    return out

  def cast(x, down):
    return _precision._float32_directed(x, down) if isinstance(x, jax.core.Tracer) else x

  first_down = isinstance(out, (StepsCalibration, SamplingRateCalibration))
  return type(out)(cast(out[0], first_down), *(cast(x, False) for x in out[1:]))


def _call(jitted, target, given, a, b, orders, for_delta):
  all_orders = orders_array(orders)
  outer_x64 = bool(jax.config.jax_enable_x64)
  with _precision.x64_context():
    args = [_precision.as_float64(x) for x in (target, given, a, b)]
    shape = jnp.broadcast_shapes(*(x.shape for x in args))
    args = [jnp.broadcast_to(x, shape) for x in args]
    out = jitted(*args, jnp.asarray(all_orders), orders_static=StaticArray(all_orders),
                 for_delta=for_delta)
  return _finalize(out, outer_x64)


def _noise(target, given, q, steps, orders, for_delta):
  _check_budget(target, given, for_delta)
  check_range("q", q, lower=0.0, upper=1.0)
  check_range("steps", steps, lower=0.0)
  return _call(_noise_jit, target, given, q, steps, orders, for_delta)


def _steps(target, given, q, sigma, orders, for_delta):
  _check_budget(target, given, for_delta)
  check_range("q", q, lower=0.0, upper=1.0)
  check_range("sigma", sigma, lower=0.0, allow_inf=True)
  return _call(_steps_jit, target, given, q, sigma, orders, for_delta)


def _rate(target, given, sigma, steps, orders, for_delta):
  _check_budget(target, given, for_delta)
  check_range("sigma", sigma, lower=0.0, allow_inf=True)
  check_range("steps", steps, lower=0.0)
  return _call(_rate_jit, target, given, sigma, steps, orders, for_delta)


def calibrate_noise(target_epsilon: ArrayLike, delta: ArrayLike, q: ArrayLike,
                    steps: ArrayLike, orders: ArrayLike | None = None) -> NoiseCalibration:
  """Smallest noise multiplier sigma with epsilon(q, sigma, steps, delta) <= target.

  Solves, per cell, min {sigma : dpsgd_epsilon(q, sigma, steps, delta).epsilon <=
  target_epsilon} with the bracketing search of the module docstring. All
  arguments broadcast together; a whole grid is one jitted call.

  Guarantees, for every feasible cell: ``dpsgd_epsilon(q, sigma, steps, delta,
  orders)`` recomputed gives at most target_epsilon (1 - 1e-12), and
  sigma (1 - 1e-6) exceeds the target (the bracket is 4e-8 wide in log sigma).

  Args:
    target_epsilon: epsilon budget, >= 0.
    delta: delta of the guarantee, in (0, 1).
    q: Poisson sampling rate, in [0, 1].
    steps: number of DP-SGD steps, >= 0 (need not be an integer).
    orders: Renyi orders (1-D, concrete); default :data:`jaxrdp.DEFAULT_ORDERS`.

  Returns:
    ``NoiseCalibration(sigma, epsilon, delta, order, feasible)``, float64 arrays of
    the broadcast shape; ``epsilon`` is the value achieved at ``sigma``. Infeasible
    cells (a target at or below the infinite-noise floor, or needing sigma > 1e6)
    have NaN and ``feasible == False``. q = 0 or steps = 0 gives sigma = 0.
    Concrete invalid input raises ValueError; traced invalid input gives NaN.

  Examples:
    >>> import jaxrdp
    >>> res = jaxrdp.calibrate_noise(2.0, 1e-5, 256 / 60000, 14063)
    >>> round(float(res.sigma), 4), bool(res.feasible)
    (1.2953, True)
  """
  return _noise(target_epsilon, delta, q, steps, orders, for_delta=False)


def calibrate_noise_for_delta(target_delta: ArrayLike, epsilon: ArrayLike, q: ArrayLike,
                              steps: ArrayLike, orders: ArrayLike | None = None
                              ) -> NoiseCalibration:
  """Smallest sigma with delta(q, sigma, steps, epsilon) <= target_delta.

  The delta-side twin of :func:`calibrate_noise` (the accountant's delta is
  :func:`jaxrdp.dpsgd_delta`). Same guarantees: the recomputed delta is at most
  target_delta (1 - 1e-12) and sigma (1 - 1e-6) exceeds the target.

  Args:
    target_delta: delta budget, in (0, 1).
    epsilon: epsilon of the guarantee, >= 0.
    q: sampling rate in [0, 1].
    steps: number of steps, >= 0.
    orders: Renyi orders; default :data:`jaxrdp.DEFAULT_ORDERS`.

  Returns:
    ``NoiseCalibration``; ``delta`` is the value achieved at ``sigma``. NaN and
    ``feasible == False`` where even infinite noise does not reach target_delta.
  """
  return _noise(target_delta, epsilon, q, steps, orders, for_delta=True)


def calibrate_steps(target_epsilon: ArrayLike, delta: ArrayLike, q: ArrayLike,
                    sigma: ArrayLike, orders: ArrayLike | None = None) -> StepsCalibration:
  """Largest integer number of steps T with epsilon(q, sigma, T, delta) <= target.

  The per-step RDP is computed once per cell; T is found by exponential search and
  integer bisection, so that epsilon(T) meets the budget and epsilon(T + 1) does not.

  Tightness: epsilon(T) always meets the budget. That T + 1 does not holds up to
  T ~ 1e10; beyond (about 1e11 to 1e13 steps and more) one step changes epsilon by
  less than its own 1e-12 relative accuracy, so T is the largest count to within
  that accuracy of epsilon, and T + 1, T + 2, ... may still meet the budget.

  Args:
    target_epsilon: epsilon budget, >= 0.
    delta: delta in (0, 1).
    q: sampling rate in [0, 1].
    sigma: noise multiplier >= 0 (inf allowed).
    orders: Renyi orders; default :data:`jaxrdp.DEFAULT_ORDERS`.

  Returns:
    ``StepsCalibration(steps, epsilon, delta, order, feasible)``. ``steps`` is a
    float64 integer: inf where the RDP is zero (q = 0 or sigma = inf), at most
    2**52, and NaN with ``feasible == False`` where not even one step fits.

  Examples:
    >>> import jaxrdp
    >>> int(jaxrdp.calibrate_steps(2.597, 1e-5, 256 / 60000, 1.1).steps)
    14066
  """
  return _steps(target_epsilon, delta, q, sigma, orders, for_delta=False)


def calibrate_steps_for_delta(target_delta: ArrayLike, epsilon: ArrayLike, q: ArrayLike,
                              sigma: ArrayLike, orders: ArrayLike | None = None
                              ) -> StepsCalibration:
  """Largest integer T with delta(q, sigma, T, epsilon) <= target_delta.

  The delta-side twin of :func:`calibrate_steps`, with (target_delta, epsilon) in
  place of (target_epsilon, delta).
  """
  return _steps(target_delta, epsilon, q, sigma, orders, for_delta=True)


def calibrate_sampling_rate(target_epsilon: ArrayLike, delta: ArrayLike, sigma: ArrayLike,
                            steps: ArrayLike, orders: ArrayLike | None = None
                            ) -> SamplingRateCalibration:
  """Largest sampling rate q in (0, 1] with epsilon(q, sigma, steps, delta) <= target.

  Searched in log q like :func:`calibrate_noise`; q (1 + 1e-6) exceeds the target
  unless q = 1. For a dataset of N examples the largest expected batch size is
  floor(q N), within budget because epsilon is non-decreasing in q.

  Args:
    target_epsilon: epsilon budget, >= 0.
    delta: delta in (0, 1).
    sigma: noise multiplier >= 0 (inf allowed).
    steps: number of steps >= 0.
    orders: Renyi orders; default :data:`jaxrdp.DEFAULT_ORDERS`.

  Returns:
    ``SamplingRateCalibration(q, epsilon, delta, order, feasible)``; NaN and
    ``feasible == False`` where no q >= 1e-10 fits (sigma = 0, or a target at or
    below the infinite-noise floor). steps = 0 gives q = 1.

  Examples:
    >>> import jaxrdp
    >>> res = jaxrdp.calibrate_sampling_rate(2.597, 1e-5, 1.1, 14063)
    >>> round(float(res.q) * 60000)
    256
  """
  return _rate(target_epsilon, delta, sigma, steps, orders, for_delta=False)


def calibrate_sampling_rate_for_delta(target_delta: ArrayLike, epsilon: ArrayLike,
                                      sigma: ArrayLike, steps: ArrayLike,
                                      orders: ArrayLike | None = None
                                      ) -> SamplingRateCalibration:
  """Largest q in (0, 1] with delta(q, sigma, steps, epsilon) <= target_delta.

  The delta-side twin of :func:`calibrate_sampling_rate`.
  """
  return _rate(target_delta, epsilon, sigma, steps, orders, for_delta=True)
