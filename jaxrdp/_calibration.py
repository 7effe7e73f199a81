"""Calibrating DP-SGD to a privacy budget: noise, steps or sampling rate, on grids.

Each function inverts one monotone map of the RDP accountant of the Sampled
Gaussian Mechanism (SGM, Mironov, Talwar, Zhang 2019, arXiv:1908.10530):

* the per-step RDP at every order is non-increasing in the noise multiplier sigma and
  non-decreasing in the sampling rate q, and T steps multiply it by T;
* the RDP -> (epsilon, delta) conversions (Canonne, Kamath, Steinke 2020,
  arXiv:2004.00010, Prop. 12) are increasing in the RDP at each order and take a
  minimum over orders, so they preserve those monotonicities.

Hence epsilon(delta) and delta(epsilon) are non-increasing in sigma and
non-decreasing in q and T, and every calibration is a 1-D threshold search per cell:

* sigma and q: bracket the threshold in log space by geometric expansion from an
  analytic guess (the zCDP approximation rho = T q^2 / sigma^2 with
  epsilon = rho + 2 sqrt(rho log(1/delta)), Bun and Steinke 2016, arXiv:1605.02065,
  Prop. 1.3), then shrink the bracket with the ITP method (Oliveira and Takahashi
  2020, ACM TOMS 47(1), doi:10.1145/3423597): interpolation steps that converge
  superlinearly on smooth maps, projected so that the iteration count never exceeds
  bisection's plus one. The loop stops when the bracket is 2e-10 wide in log space.
  The answer is the bracket end that meets the budget, so it is conservative by
  construction and tight to 2e-10 relative: sigma (1 - 1e-6) violates the budget.
* steps: exponential search then integer bisection on T, with the per-step RDP
  computed once per cell (T only scales it).

All cells of a grid advance together inside one `lax.while_loop`, so a whole grid
costs one jitted call. A cell meets its budget with a relative margin of 1e-12
(epsilon <= target (1 - 1e-12)), so that recomputing epsilon with a different
floating-point evaluation order cannot push it over the target.

Infeasible requests return NaN with `feasible == False`:

* `calibrate_noise`: the target is at or below the floor epsilon that the order set
  and delta give even with infinite noise (the conversion's value at RDP = 0; about
  0.0035 for delta = 1e-5 with the default orders).
* `calibrate_steps`: not even one step fits the budget.
* `calibrate_sampling_rate`: no q > 0 fits (target at or below the floor, or sigma = 0).

Degenerate cells are answered in closed form: q = 0 or steps = 0 needs sigma = 0;
steps = 0 admits q = 1; q = 0 or sigma = inf admits steps = inf.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from ._precision import x64_context

__all__ = [
    "NoiseCalibration",
    "StepsCalibration",
    "SamplingRateCalibration",
    "calibrate_noise",
    "calibrate_noise_for_delta",
    "calibrate_steps",
    "calibrate_steps_for_delta",
    "calibrate_sampling_rate",
    "calibrate_sampling_rate_for_delta",
]

# A cell meets its budget when value <= target * (1 - _SAFETY); see the module docstring.
_SAFETY = 1e-12
# Final half-width of the bracket in log(sigma) or log(q): 2e-10 relative in total,
# far inside the 1e-6 tightness promised.
_TOL = 1e-10
# Bracket expansion: steps of 0.5, 1, 2, ... nats; 12 steps reach 2047 nats.
_EXPAND_START = 0.5
_MAX_EXPAND = 12
# ITP constants (Oliveira and Takahashi 2020 recommend k2 = 2, n0 = 1, k1 = 0.2 / (b - a)).
_ITP_K1_SCALE = 0.2
_ITP_N0 = 1
_MAX_ITP = 80
# Search ranges: sigma in [1e-6, 1e100] (log space), q in [1e-300, 1].
_LOG_SIGMA_RANGE = (float(np.log(1e-6)), float(np.log(1e100)))
_NEG_LOG_Q_RANGE = (0.0, float(-np.log(1e-300)))
# Integer search for the number of steps stops at 2**52 (exact integers in float64).
_MAX_STEPS = float(2**52)


class NoiseCalibration(NamedTuple):
    """Result of `calibrate_noise` / `calibrate_noise_for_delta` (a pytree).

    Attributes:
      sigma: smallest noise multiplier meeting the budget; NaN where infeasible.
      epsilon: epsilon of the guarantee at `sigma` (the achieved value for
        `calibrate_noise`, the given one for `calibrate_noise_for_delta`).
      delta: delta of the guarantee at `sigma` (given, respectively achieved).
      order: RDP order attaining the bound at `sigma`.
      feasible: boolean mask, False where no sigma meets the budget.
    """

    sigma: jax.Array
    epsilon: jax.Array
    delta: jax.Array
    order: jax.Array
    feasible: jax.Array


class StepsCalibration(NamedTuple):
    """Result of `calibrate_steps` / `calibrate_steps_for_delta` (a pytree).

    Attributes:
      steps: largest integer number of steps meeting the budget (float64 holding an
        integer; inf where any number of steps fits; NaN where not even one does).
      epsilon: epsilon of the guarantee after `steps` steps.
      delta: delta of the guarantee after `steps` steps.
      order: RDP order attaining the bound.
      feasible: boolean mask, False where not even one step meets the budget.
    """

    steps: jax.Array
    epsilon: jax.Array
    delta: jax.Array
    order: jax.Array
    feasible: jax.Array


class SamplingRateCalibration(NamedTuple):
    """Result of `calibrate_sampling_rate` / `..._for_delta` (a pytree).

    Attributes:
      q: largest sampling rate in (0, 1] meeting the budget; NaN where infeasible.
      epsilon: epsilon of the guarantee at `q`.
      delta: delta of the guarantee at `q`.
      order: RDP order attaining the bound at `q`.
      feasible: boolean mask, False where no q > 0 meets the budget.
    """

    q: jax.Array
    epsilon: jax.Array
    delta: jax.Array
    order: jax.Array
    feasible: jax.Array


# --------------------------------------------------------------------------------------
# Core: the generic vectorized threshold search.


def _solve_threshold(
    score: Callable[[jax.Array], tuple[jax.Array, jax.Array]],
    v0: jax.Array,
    v_min: float,
    v_max: float,
    active: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Smallest v in [v_min, v_max] whose score is acceptable, for every cell at once.

    `score(v)` returns (ok, f): ok says whether the budget holds at v (NaN never holds),
    f is a smooth monotone non-increasing proxy (log value - log target) used only for
    interpolation. ok must be monotone: False below the threshold, True above.

    Returns (v, at_min, infeasible, rounds): v is the acceptable end of a bracket whose
    other end is unacceptable and at most 2 * _TOL away (or v_min where v_min is already
    acceptable); infeasible marks active cells where even v_max is unacceptable; rounds
    gives the expansion rounds and the ITP iterations of each cell, for diagnostics.
    """
    v0 = jnp.clip(v0, v_min, v_max)
    ok0, f0 = score(v0)

    # Phase 1: geometric expansion from a = b = v0 until a is unacceptable and b is
    # acceptable, or a range end is reached. Only the new end is scored each round.
    def expand_needed(a, b, oka, okb):
        return active & ((~okb & (b < v_max)) | (oka & (a > v_min)))

    def expand_cond(state):
        a, b, _, _, oka, okb, _, i = state
        return jnp.any(expand_needed(a, b, oka, okb)) & (i < _MAX_EXPAND)

    def expand_body(state):
        a, b, fa, fb, oka, okb, step, i = state
        up = active & ~okb & (b < v_max)
        down = active & oka & (a > v_min) & ~up
        x = jnp.where(up, jnp.minimum(b + step, v_max), jnp.where(down, jnp.maximum(a - step, v_min), b))
        okx, fx = score(x)
        a2 = jnp.where(up, b, jnp.where(down, x, a))
        fa2 = jnp.where(up, fb, jnp.where(down, fx, fa))
        oka2 = jnp.where(up, okb, jnp.where(down, okx, oka))
        b2 = jnp.where(up, x, jnp.where(down, a, b))
        fb2 = jnp.where(up, fx, jnp.where(down, fa, fb))
        okb2 = jnp.where(up, okx, jnp.where(down, oka, okb))
        return a2, b2, fa2, fb2, oka2, okb2, step * 2.0, i + 1

    state = (v0, v0, f0, f0, ok0, ok0, jnp.asarray(_EXPAND_START, v0.dtype), jnp.asarray(0))
    a, b, fa, fb, oka, okb, _, n_expand = lax.while_loop(expand_cond, expand_body, state)

    at_min = active & oka
    infeasible = active & ~okb
    bracketed = active & ~oka & okb

    # Phase 2: ITP (Oliveira and Takahashi 2020, Algorithm 1) on the bracketed cells,
    # in the orientation "f > 0 at a, f <= 0 at b".
    width0 = jnp.where(bracketed, b - a, 1.0)
    k1 = _ITP_K1_SCALE / width0
    n_max = jnp.ceil(jnp.log2(jnp.maximum(width0 / (2.0 * _TOL), 1.0))) + _ITP_N0

    def itp_active(a, b):
        return bracketed & (b - a > 2.0 * _TOL)

    def itp_cond(state):
        a, b, _, _, j, _, _ = state
        return jnp.any(itp_active(a, b)) & (j < _MAX_ITP)

    def itp_body(state):
        a, b, fa, fb, j, last, count = state
        live = itp_active(a, b)
        width = b - a
        x_half = 0.5 * (a + b)
        r = jnp.maximum(_TOL * jnp.exp2(n_max - j) - 0.5 * width, 0.0)
        trunc = k1 * width**2
        # Regula falsi point; bisection where a proxy value is not finite or out of sign.
        usable = jnp.isfinite(fa) & jnp.isfinite(fb) & (fa > 0) & (fb <= 0)
        denom = jnp.where(usable, fa - fb, 1.0)
        x_f = jnp.where(usable, (fa * b - fb * a) / denom, x_half)
        s = jnp.sign(x_half - x_f)
        # Truncation: perturb towards the midpoint so both ends keep moving.
        x_t = jnp.where(trunc <= jnp.abs(x_half - x_f), x_f + s * trunc, x_half)
        # Projection onto the minmax interval around the midpoint.
        x = jnp.where(jnp.abs(x_t - x_half) <= r, x_t, x_half - s * r)
        # Keep _TOL away from both ends (Brent's minimum step): near the root the
        # proxy can round to exactly 0 and the truncation drops below one ulp, so
        # without this x could land on b forever; with it, a step of _TOL either
        # crosses the root (closing the bracket) or moves b.
        x = jnp.clip(x, a + _TOL, b - _TOL)
        okx, fx = score(jnp.where(live, x, b))
        move_b = live & okx
        move_a = live & ~okx
        # Illinois rule (Dowell and Jarratt 1971): when the same end moves twice in a
        # row, halve the proxy value kept at the other end, so that regula falsi cannot
        # creep from one side (linear convergence) on a convex or concave map.
        fa = jnp.where(move_b & (last == 1), 0.5 * fa, fa)
        fb = jnp.where(move_a & (last == -1), 0.5 * fb, fb)
        last = jnp.where(move_b, 1, jnp.where(move_a, -1, last))
        return (
            jnp.where(move_a, x, a),
            jnp.where(move_b, x, b),
            jnp.where(move_a, fx, fa),
            jnp.where(move_b, fx, fb),
            j + 1,
            last,
            count + live,
        )

    zero = jnp.asarray(0.0, v0.dtype)
    init = (a, b, fa, fb, zero, jnp.zeros(a.shape, jnp.int32), jnp.zeros(a.shape, jnp.int32))
    a, b, _, _, _, _, n_itp = lax.while_loop(itp_cond, itp_body, init)
    v = jnp.where(at_min, v_min, b)
    return v, at_min, infeasible, (n_expand, n_itp)


def _proxy(value: jax.Array, target: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(ok, log value - log target) with NaN counted as a violation."""
    return value <= target, jnp.log(value) - jnp.log(target)


def _zcdp_rho(epsilon: jax.Array, delta: jax.Array) -> jax.Array:
    # Invert epsilon = rho + 2 sqrt(rho L), L = log(1/delta) (Bun and Steinke 2016,
    # Prop. 1.3): sqrt(rho) = sqrt(L + epsilon) - sqrt(L). Only used as a first guess.
    log_inv_delta = -jnp.log(delta)
    return (epsilon / (jnp.sqrt(log_inv_delta + epsilon) + jnp.sqrt(log_inv_delta))) ** 2


# --------------------------------------------------------------------------------------
# Measures: epsilon(delta) or delta(epsilon) of T steps of the SGM.


def _measure_fn(for_delta: bool):
    """(q, sigma, steps, given, orders) -> (value, order) for the chosen direction."""
    from ._dpsgd import dpsgd_delta, dpsgd_epsilon

    if for_delta:

        def measure(q, sigma, steps, epsilon, orders):
            res = dpsgd_delta(q, sigma, steps, epsilon, orders)
            return res.delta, res.order

    else:

        def measure(q, sigma, steps, delta, orders):
            res = dpsgd_epsilon(q, sigma, steps, delta, orders)
            return res.epsilon, res.order

    return measure


def _floor(measure, given, orders):
    # (value, order) with zero RDP (q = 0): the best that any amount of noise achieves.
    one = jnp.ones_like(given)
    return measure(jnp.zeros_like(given), one, one, given, orders)


def _guess_eps_delta(target, given, for_delta):
    # (epsilon, delta) pair at which the zCDP guess is taken.
    eps = given if for_delta else target
    dlt = target if for_delta else given
    eps = jnp.where(jnp.isfinite(eps) & (eps > 0), eps, 1.0)
    dlt = jnp.where((dlt > 0) & (dlt < 1), dlt, 1e-5)
    return eps, dlt


def _valid_common(target, given, for_delta):
    if for_delta:
        return (target > 0) & (target < 1) & (given >= 0) & ~jnp.isnan(given)
    return (target >= 0) & ~jnp.isnan(target) & (given > 0) & (given < 1)


def _noise_impl(target, given, q, steps, orders, for_delta):
    measure = _measure_fn(for_delta)
    target_eff = target * (1.0 - _SAFETY)
    valid = _valid_common(target, given, for_delta) & (q >= 0) & (q <= 1) & (steps >= 0)
    floor, floor_order = _floor(measure, given, orders)
    reachable = target_eff >= floor
    trivial = valid & ((q == 0) | (steps == 0))
    active = valid & ~trivial & reachable

    eps_g, dlt_g = _guess_eps_delta(target, given, for_delta)
    rho = _zcdp_rho(eps_g, dlt_g)
    sigma0 = jnp.clip(q * jnp.sqrt(steps / rho), 0.3, 1e6)
    q_s = jnp.where(active, q, 0.5)
    t_s = jnp.where(active, steps, 1.0)
    g_s = jnp.where(active, given, 0.5)

    def score(v):
        value, _ = measure(q_s, jnp.exp(v), t_s, g_s, orders)
        return _proxy(value, target_eff)

    v, _, infeasible, _ = _solve_threshold(score, jnp.log(sigma0), *_LOG_SIGMA_RANGE, active)
    feasible = (active & ~infeasible) | (trivial & reachable)
    sigma = jnp.where(trivial, 0.0, jnp.exp(v))
    sigma = jnp.where(feasible, sigma, jnp.nan)
    value, order = measure(q, jnp.where(trivial, 1.0, sigma), steps, given, orders)
    value = jnp.where(trivial, floor, value)
    order = jnp.where(trivial, floor_order, order)
    return _pack(NoiseCalibration, sigma, value, given, order, feasible, for_delta)


def _rate_impl(target, given, sigma, steps, orders, for_delta):
    measure = _measure_fn(for_delta)
    target_eff = target * (1.0 - _SAFETY)
    valid = _valid_common(target, given, for_delta) & (sigma >= 0) & (steps >= 0)
    floor, floor_order = _floor(measure, given, orders)
    reachable = target_eff >= floor
    no_steps = valid & (steps == 0)
    # sigma = 0 with q > 0 and T > 0 leaks everything: infinite RDP at every order.
    active = valid & ~no_steps & reachable & (sigma > 0)

    eps_g, dlt_g = _guess_eps_delta(target, given, for_delta)
    rho = _zcdp_rho(eps_g, dlt_g)
    q0 = jnp.clip(sigma * jnp.sqrt(rho / jnp.maximum(steps, 1.0)), 1e-12, 1.0)
    s_s = jnp.where(active, sigma, 1.0)
    t_s = jnp.where(active, steps, 1.0)
    g_s = jnp.where(active, given, 0.5)

    # Search in v = -log q so that the acceptable side is v >= threshold.
    def score(v):
        value, _ = measure(jnp.exp(-v), s_s, t_s, g_s, orders)
        return _proxy(value, target_eff)

    v, _, infeasible, _ = _solve_threshold(score, -jnp.log(q0), *_NEG_LOG_Q_RANGE, active)
    feasible = (active & ~infeasible) | (no_steps & reachable)
    q = jnp.where(no_steps, 1.0, jnp.exp(-v))
    q = jnp.where(feasible, q, jnp.nan)
    value, order = measure(q, sigma, steps, given, orders)
    value = jnp.where(no_steps, floor, value)
    order = jnp.where(no_steps, floor_order, order)
    return _pack(SamplingRateCalibration, q, value, given, order, feasible, for_delta)


def _steps_impl(target, given, q, sigma, orders, for_delta):
    from ._conversions import rdp_to_delta, rdp_to_epsilon
    from ._sgm import sgm_rdp

    measure = _measure_fn(for_delta)
    target_eff = target * (1.0 - _SAFETY)
    valid = _valid_common(target, given, for_delta) & (q >= 0) & (q <= 1) & (sigma >= 0)
    active = valid & ~jnp.isnan(sigma)
    q_s = jnp.where(active, q, 0.5)
    s_s = jnp.where(active, sigma, 1.0)
    g_s = jnp.where(active, given, 0.5)
    # T steps compose to T times the per-step RDP (Mironov 2017, Prop. 1): compute the
    # per-step curve once and search over T with the cheap conversion only.
    rdp1 = sgm_rdp(q_s[..., None], s_s[..., None], orders)

    def ok(t):
        rdp = t[..., None] * rdp1
        if for_delta:
            value = rdp_to_delta(rdp, orders, g_s).delta
        else:
            value = rdp_to_epsilon(rdp, orders, g_s).epsilon
        return value <= target_eff

    ok0 = ok(jnp.zeros_like(q_s))
    unlimited = active & ok0 & jnp.all(rdp1 == 0, axis=-1)
    search = active & ok0 & ~unlimited

    # Exponential search: lo is acceptable, hi is not (or hits the cap).
    def exp_cond(state):
        lo, hi, ok_hi = state
        return jnp.any(search & ok_hi & (hi < _MAX_STEPS))

    def exp_body(state):
        lo, hi, ok_hi = state
        grow = search & ok_hi & (hi < _MAX_STEPS)
        lo = jnp.where(grow, hi, lo)
        hi = jnp.where(grow, 2.0 * hi, hi)
        return lo, hi, jnp.where(grow, ok(hi), ok_hi)

    one = jnp.ones_like(q_s)
    lo, hi, ok_hi = lax.while_loop(exp_cond, exp_body, (0.0 * one, one, ok(one)))
    capped = search & ok_hi  # acceptable even at the cap: report the cap

    def bis_cond(state):
        lo, hi = state
        return jnp.any(search & ~capped & (hi - lo > 1))

    def bis_body(state):
        lo, hi = state
        live = search & ~capped & (hi - lo > 1)
        mid = jnp.floor(0.5 * (lo + hi))
        okm = ok(jnp.where(live, mid, lo))
        return jnp.where(live & okm, mid, lo), jnp.where(live & ~okm, mid, hi)

    lo, hi = lax.while_loop(bis_cond, bis_body, (lo, hi))
    steps = jnp.where(capped, hi, lo)
    feasible = unlimited | (search & (steps >= 1))
    steps = jnp.where(unlimited, jnp.inf, steps)
    steps = jnp.where(feasible, steps, jnp.nan)
    value, order = measure(q, sigma, jnp.where(unlimited, 1.0, steps), given, orders)
    floor, floor_order = _floor(measure, given, orders)
    value = jnp.where(unlimited, floor, value)
    order = jnp.where(unlimited, floor_order, order)
    return _pack(StepsCalibration, steps, value, given, order, feasible, for_delta)


def _pack(cls, x, value, given, order, feasible, for_delta):
    eps, dlt = (given, value) if for_delta else (value, given)
    nan = jnp.nan
    return cls(
        x,
        jnp.where(feasible, eps, nan),
        jnp.where(feasible, dlt, nan),
        jnp.where(feasible, order, nan),
        feasible,
    )


_noise_jit = jax.jit(_noise_impl, static_argnames="for_delta")
_rate_jit = jax.jit(_rate_impl, static_argnames="for_delta")
_steps_jit = jax.jit(_steps_impl, static_argnames="for_delta")


# --------------------------------------------------------------------------------------
# Public boundary: validation of concrete input, broadcasting, float64.


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _check(name: str, x, lo: float, hi: float, lo_open: bool, hi_open: bool, allow_inf=False):
    """ValueError naming the argument if concrete x leaves the allowed range."""
    if _is_tracer(x):
        return
    arr = np.asarray(x, dtype=np.float64)
    bad = np.isnan(arr)
    if not allow_inf:
        bad |= np.isinf(arr)
    bad |= (arr <= lo) if lo_open else (arr < lo)
    bad |= (arr >= hi) if hi_open else (arr > hi)
    if np.any(bad):
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        first = arr[bad].ravel()[0]
        raise ValueError(f"{name} must be in {left}{lo}, {hi}{right}, got {float(first)!r}")


def _orders_array(orders):
    if orders is None:
        from ._sgm import DEFAULT_ORDERS

        orders = DEFAULT_ORDERS
    arr = np.asarray(orders, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"orders must be a non-empty 1-D array, got shape {arr.shape}")
    if np.any(np.isnan(arr)) or np.any(arr <= 1):
        raise ValueError("orders must all be > 1")
    return arr


def _broadcast(*xs):
    arrs = [jnp.asarray(x, jnp.float64) for x in xs]
    shape = jnp.broadcast_shapes(*(a.shape for a in arrs))
    return [jnp.broadcast_to(a, shape) for a in arrs]


def _check_target(target, given, for_delta):
    if for_delta:
        _check("target_delta", target, 0.0, 1.0, True, True)
        _check("epsilon", given, 0.0, np.inf, False, False)
    else:
        _check("target_epsilon", target, 0.0, np.inf, False, False)
        _check("delta", given, 0.0, 1.0, True, True)


def _noise(target, given, q, steps, orders, for_delta):
    _check_target(target, given, for_delta)
    _check("q", q, 0.0, 1.0, False, False)
    _check("steps", steps, 0.0, np.inf, False, False)
    with x64_context():
        orders = jnp.asarray(_orders_array(orders))
        return _noise_jit(*_broadcast(target, given, q, steps), orders, for_delta=for_delta)


def _steps(target, given, q, sigma, orders, for_delta):
    _check_target(target, given, for_delta)
    _check("q", q, 0.0, 1.0, False, False)
    _check("sigma", sigma, 0.0, np.inf, False, False, allow_inf=True)
    with x64_context():
        orders = jnp.asarray(_orders_array(orders))
        return _steps_jit(*_broadcast(target, given, q, sigma), orders, for_delta=for_delta)


def _rate(target, given, sigma, steps, orders, for_delta):
    _check_target(target, given, for_delta)
    _check("sigma", sigma, 0.0, np.inf, False, False, allow_inf=True)
    _check("steps", steps, 0.0, np.inf, False, False)
    with x64_context():
        orders = jnp.asarray(_orders_array(orders))
        return _rate_jit(*_broadcast(target, given, sigma, steps), orders, for_delta=for_delta)


def calibrate_noise(
    target_epsilon: ArrayLike,
    delta: ArrayLike,
    q: ArrayLike,
    steps: ArrayLike,
    orders: ArrayLike | None = None,
) -> NoiseCalibration:
    """Smallest noise multiplier sigma with epsilon(q, sigma, steps, delta) <= target.

    Solves, per cell, min { sigma : dpsgd_epsilon(q, sigma, steps, delta).epsilon <=
    target_epsilon } by a log-space bracket and ITP iterations (see the module
    docstring). All arguments broadcast together; a whole grid is one jitted call.

    Guarantees (for every feasible cell): recomputing
    `dpsgd_epsilon(q, sigma, steps, delta, orders)` gives at most
    target_epsilon * (1 - 1e-12), and sigma * (1 - 1e-6) exceeds the target (the
    bracket is 2e-10 wide in log sigma).

    Args:
      target_epsilon: epsilon budget, >= 0.
      delta: delta of the guarantee, in (0, 1).
      q: Poisson sampling rate, in [0, 1].
      steps: number of DP-SGD steps T, >= 0 (need not be an integer).
      orders: RDP orders (1-D, all > 1); default `jaxrdp.DEFAULT_ORDERS`.

    Returns:
      `NoiseCalibration(sigma, epsilon, delta, order, feasible)`, float64 arrays of the
      broadcast shape. Infeasible cells (target at or below the epsilon that infinite
      noise gives with these orders and delta) have NaN and `feasible == False`.
      q = 0 or steps = 0 gives sigma = 0. Concrete invalid input raises ValueError;
      traced invalid input gives NaN.

    Examples:
      >>> res = calibrate_noise(2.597, 1e-5, 256 / 60000, 14063)
      >>> round(float(res.sigma), 2)
      1.1
    """
    return _noise(target_epsilon, delta, q, steps, orders, for_delta=False)


def calibrate_noise_for_delta(
    target_delta: ArrayLike,
    epsilon: ArrayLike,
    q: ArrayLike,
    steps: ArrayLike,
    orders: ArrayLike | None = None,
) -> NoiseCalibration:
    """Smallest sigma with delta(q, sigma, steps, epsilon) <= target_delta.

    The delta-side twin of `calibrate_noise`, using `dpsgd_delta`. Same guarantees:
    the recomputed delta is <= target_delta * (1 - 1e-12) and sigma * (1 - 1e-6)
    exceeds the target.

    Args:
      target_delta: delta budget, in (0, 1).
      epsilon: epsilon of the guarantee, >= 0.
      q: sampling rate in [0, 1].
      steps: number of steps, >= 0.
      orders: RDP orders; default `jaxrdp.DEFAULT_ORDERS`.

    Returns:
      `NoiseCalibration`; NaN and `feasible == False` where even infinite noise does
      not reach target_delta.
    """
    return _noise(target_delta, epsilon, q, steps, orders, for_delta=True)


def calibrate_steps(
    target_epsilon: ArrayLike,
    delta: ArrayLike,
    q: ArrayLike,
    sigma: ArrayLike,
    orders: ArrayLike | None = None,
) -> StepsCalibration:
    """Largest integer number of steps T with epsilon(q, sigma, T, delta) <= target.

    The per-step RDP is computed once per cell; T (which only scales the RDP) is found
    by exponential search and integer bisection, so epsilon(T) meets the budget and
    epsilon(T + 1) does not.

    Args:
      target_epsilon: epsilon budget, >= 0.
      delta: delta in (0, 1).
      q: sampling rate in [0, 1].
      sigma: noise multiplier >= 0 (inf allowed).
      orders: RDP orders; default `jaxrdp.DEFAULT_ORDERS`.

    Returns:
      `StepsCalibration(steps, epsilon, delta, order, feasible)`. `steps` is a float64
      integer, inf where the RDP is zero (q = 0 or sigma = inf), capped at 2**52, and
      NaN with `feasible == False` where not even one step fits.

    Examples:
      >>> int(calibrate_steps(3.0, 1e-5, 256 / 60000, 1.1).steps) > 14063
      True
    """
    return _steps(target_epsilon, delta, q, sigma, orders, for_delta=False)


def calibrate_steps_for_delta(
    target_delta: ArrayLike,
    epsilon: ArrayLike,
    q: ArrayLike,
    sigma: ArrayLike,
    orders: ArrayLike | None = None,
) -> StepsCalibration:
    """Largest integer T with delta(q, sigma, T, epsilon) <= target_delta.

    The delta-side twin of `calibrate_steps`; same arguments with (target_delta,
    epsilon) in place of (target_epsilon, delta).
    """
    return _steps(target_delta, epsilon, q, sigma, orders, for_delta=True)


def calibrate_sampling_rate(
    target_epsilon: ArrayLike,
    delta: ArrayLike,
    sigma: ArrayLike,
    steps: ArrayLike,
    orders: ArrayLike | None = None,
) -> SamplingRateCalibration:
    """Largest sampling rate q in (0, 1] with epsilon(q, sigma, steps, delta) <= target.

    Searched in log q like `calibrate_noise`; q (1 + 1e-6) exceeds the target unless
    q = 1. For a dataset of N examples the largest expected batch size is
    floor(q * N), which is within budget because epsilon is non-decreasing in q.

    Args:
      target_epsilon: epsilon budget, >= 0.
      delta: delta in (0, 1).
      sigma: noise multiplier >= 0 (inf allowed).
      steps: number of steps >= 0.
      orders: RDP orders; default `jaxrdp.DEFAULT_ORDERS`.

    Returns:
      `SamplingRateCalibration(q, epsilon, delta, order, feasible)`; NaN and
      `feasible == False` where no q > 0 fits (sigma = 0, or a target at or below the
      infinite-noise floor). steps = 0 gives q = 1.
    """
    return _rate(target_epsilon, delta, sigma, steps, orders, for_delta=False)


def calibrate_sampling_rate_for_delta(
    target_delta: ArrayLike,
    epsilon: ArrayLike,
    sigma: ArrayLike,
    steps: ArrayLike,
    orders: ArrayLike | None = None,
) -> SamplingRateCalibration:
    """Largest q in (0, 1] with delta(q, sigma, steps, epsilon) <= target_delta.

    The delta-side twin of `calibrate_sampling_rate`.
    """
    return _rate(target_delta, epsilon, sigma, steps, orders, for_delta=True)
