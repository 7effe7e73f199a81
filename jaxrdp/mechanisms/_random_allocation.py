"""Renyi DP of random allocation of the Gaussian mechanism (balls in bins, k-out-of-t).

Random k-out-of-t allocation: in every epoch of t steps each example is used
in k of the t steps, a uniformly random k-subset, independently of the other
examples (Feldman and Shenfeld 2025, arXiv:2502.08202; "balls and bins" for
k = 1: Chua et al. 2024, arXiv:2412.16802; "balanced iteration subsampling":
Dong, Chen, Ozgur 2025, arXiv:2503.03043). Each step releases the sum of the
batch's clipped contributions with Gaussian noise of multiplier sigma.

The pair. Scale so that the sensitivity is 1 and write c = 1 / sigma^2. One
epoch with k = 1 (a "1-out-of-t allocation") is dominated, under add/remove,
by the pair of distributions on R^t

    P = (1/t) sum_i N(e_i, sigma^2 I),   Q = N(0, sigma^2 I)

(the example's contribution lands in one uniformly random coordinate, the
others' contributions are known to the adversary; Feldman and Shenfeld 2025
reduce adaptive steps to this non-adaptive pair). Its likelihood ratio is
P/Q = S = (1/t) sum_i Y_i with Y_i = exp(x_i / sigma^2 - c / 2) i.i.d. under Q
(log-normal, mean 1).

Remove direction, exact. For an integer order alpha >= 2,

    E_Q[(P/Q)^alpha] = t^-alpha sum_{a_1 + ... + a_t = alpha} alpha! / prod a_i!
                        * exp(c sum_i a_i (a_i - 1) / 2),

the expectation of exp(c C) with C the number of colliding pairs when alpha
balls are thrown into t bins (Feldman and Shenfeld 2025, the exact Renyi
divergence of the Gaussian allocation in the remove direction, written there
as a sum over the integer partitions of alpha with at most t parts). Here it
is evaluated without cancellation: with v_a = expm1(c a (a - 1) / 2) and
h(x) = sum_{a >= 2} v_a x^a / a!, the generating function is
(e^x + h(x))^t, and

    E_alpha - 1 = sum_{j >= 1} C(t, j) sum_{n = 2j..alpha} alpha^(n) (1 - j/t)^(alpha - n)
                  t^-n [x^n] h(x)^j,

a sum of non-negative terms (alpha^(n) the falling factorial), computed in
log space with [x^n] h^j by repeated convolution: O(alpha_max^3) per sigma.
Fractional orders: (alpha - 1) D_alpha = log E_alpha is convex in alpha, so
its chord between the neighbouring integers (through log E_1 = 0) is an
upper bound.

Add direction, D_alpha(Q || P) = (1/m) log E_Q[S^-m], m = alpha - 1 (no
closed form). From x^-m = Gamma(m)^-1 int_0^inf u^(m-1) e^(-u x) du and the
independence of the Y_i, with Lambda(u) = E[e^(-u Y)] and v = e^w,

    E_Q[S^-m] = 1 + Gamma(m)^-1 int exp(m w - e^w) expm1(t log E[e^(-(e^w / t)(Y - 1))]) dw,

whose integrand is non-negative (Jensen: E[e^(-u (Y - 1))] >= 1). The inner
expectation is 1 + E[E2(-u (Y - 1))] with E2(x) = e^x - 1 - x >= 0 (no
cancellation) while it is below 2, and a log-sum-exp beyond; both are
trapezoid sums over the Gaussian variable (spacing at most 0.18 sigma, so the
error of the analytic integrand is below e^-50), and the outer integral is a
trapezoid sum over w on [-24, 12] (spacing 0.035; the integrand is analytic
in the strip |Im w| < pi/2, error below e^-50 relative for alpha <= 256).
The two tails are bounded and added: below w = -24 by
E2(x) <= x^2 e^max(x, 0) / 2, above the grid by e^-x <= (p / (e x))^p, i.e.
Lambda(u) <= (p/e)^p u^-p E[Y^-p] with E[Y^-p] = e^(p (p + 1) c / 2), at the
best of a few p > m / t. Where the tail above the grid is not negligible
(about e^-30 of the integral; few steps with little noise, where the
integrand's mass lies far out), or sigma < 0.2, or alpha > 256, the add
direction takes the elementary bound from the arithmetic-geometric mean
inequality S >= (prod_i Y_i)^(1/t):

    D_alpha(Q || P) <= c / 2 + (alpha - 1) c / (2 t).

In every configuration computed the add direction was below the remove
direction; that is not assumed: the curve is the maximum of the two.

Orders above 256: the Gaussian mechanism's alpha c / 2 (the pair is a
mixture of Gaussian pairs, and Renyi divergence is jointly quasi-convex).

k-out-of-t. A random k-subset of the t steps is the image, under a uniformly
random permutation of the steps, of the "blocked" allocation that cuts the
steps into k blocks of sizes t_1 + ... + t_k = t and picks one step per
block; Q is invariant under the permutation, so by joint convexity of the
divergences the k-subset pair is dominated by the blocked one, which is the
composition of k 1-out-of-t_i allocations (Feldman and Shenfeld 2025 reduce
k-out-of-t to 1-out-of-floor(t/k) in the same way). With m = floor(t/k) and
r = t - k m the blocks are k - r of size m and r of size m + 1:

    RDP_epoch(alpha) = (k - r) R_m(alpha) + r R_(m+1)(alpha).

Relation to Poisson sampling. For integer orders the remove direction of a
1-out-of-t allocation is at most that of t Poisson-subsampled Gaussian steps
at rate 1/t (the Sampled Gaussian Mechanism): expanding both
E[(1 + sum_i b_i)^alpha] and prod_i E[(1 + b_i)^alpha], b_i = (Y_i - 1)/t,
the coefficient of every product of moments E[b^n] (n >= 2) is smaller on
the left, and every such moment is >= 0 (E[(Y - 1)^n] >= 0 for the Gaussian
ratio: by the symmetry E_Q[Y f(Y)] = E_Q[f(1/Y)], the negative part of an odd
moment equals E[(Y - 1)^n Y^(1-n); Y > 1] <= its positive part). The tests
check this relation.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln, logsumexp
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.numerics import expm1_minus_x, log_expm1
from .._core.validation import check_range, concrete_or_none

__all__ = [
  "ALLOCATION_MAX_INTEGER_ORDER",
  "check_selected",
  "epoch_rdp_f64",
  "random_allocation_rdp",
]

#: The largest order at which the remove direction is the exact sum (above: alpha / (2 sigma^2)).
ALLOCATION_MAX_INTEGER_ORDER = 256
_ADD_MIN_SIGMA = 0.2  # below: the add direction takes the AM-GM bound
_W_LO, _W_HI, _N_W = -24.0, 12.0, 1024
_N_Z = 1536
_Z_LEFT, _Z_RIGHT = 25.0, 15.0  # z in [-_Z_LEFT - s, _Z_RIGHT + 2 s], s = 1 / sigma
_TAIL_NATS = 30.0  # the tail above the grid must be e^-30 below the integral
_P_RATIOS = np.array([1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0])
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class _Tables(NamedTuple):
  a: np.ndarray
  below: np.ndarray
  diff: np.ndarray
  log_fact: np.ndarray
  log_fall: np.ndarray
  alpha_minus_n: np.ndarray


@functools.cache
def _remove_tables(a_max: int) -> _Tables:
  """Host constants of the remove-direction sum (they depend on a_max only)."""
  a = np.arange(a_max + 1, dtype=np.float64)
  row = np.arange(a_max + 1)[:, None]
  col = np.arange(a_max + 1)[None, :]
  below = col <= row
  diff = np.where(below, row - col, 0)
  log_fact = np.array([math.lgamma(x + 1.0) for x in a])
  log_fall = np.where(below, log_fact[:, None] - log_fact[diff], -np.inf)
  return _Tables(a, below, diff, log_fact, log_fall, np.where(below, row - col, 0).astype(float))


def _log_sum_exp(x, axis):
  """``logsumexp(x, axis)`` whose derivative stays finite (zero) where every term is -inf
  (an empty sum: the plain logsumexp and logaddexp give NaN derivatives there)."""
  empty = jnp.all(x == -jnp.inf, axis=axis, keepdims=True)
  out = logsumexp(jnp.where(empty, 0.0, x), axis=axis)
  return jnp.where(jnp.squeeze(empty, axis), -jnp.inf, out)


def _remove_log_moments_minus_1(c, t, a_max: int):
  """``log(E_alpha - 1)`` for alpha = 0..a_max (the index), one 1-out-of-t allocation.

  ``c = 1 / sigma^2`` and ``t`` are float64 scalars (c finite, t an integer >= 1).
  Orders 0 and 1 give -inf (E = 1).
  """
  dt = jnp.float64
  big_a = a_max
  n_j = big_a // 2
  tables = _remove_tables(big_a)
  a = jnp.asarray(tables.a)
  below = jnp.asarray(tables.below)
  # log(v_a / a!), v_a = expm1(c a (a - 1) / 2); -inf for a < 2 (v_a = 0), by a double
  # where: log_expm1's derivative at 0 is infinite, and times zero it would give NaN.
  pair = a >= 2.0
  log_v = jnp.where(pair, log_expm1(jnp.where(pair, 0.5 * c * a * (a - 1.0), 1.0)), -jnp.inf)
  log_h = log_v - jnp.asarray(tables.log_fact)
  log_h_mat = jnp.where(below, log_h[jnp.asarray(tables.diff)], -jnp.inf)  # [n, i] -> h_{n-i}
  log_fall = jnp.asarray(tables.log_fall)  # [alpha, n]: log(alpha! / (alpha - n)!)
  alpha_minus_n = jnp.asarray(tables.alpha_minus_n)
  log_t = jnp.log(t)
  i = jnp.arange(n_j + 1, dtype=dt)
  log1p_i = jnp.where(i < t, jnp.log1p(-jnp.minimum(i, t) / t), -jnp.inf)
  cum = jnp.concatenate([jnp.zeros(1, dt), jnp.cumsum(log1p_i)])  # cum[j] = sum_{i<j}

  def body(carry, j):
    log_hj, acc = carry
    jf = j.astype(dt)
    ell = log1p_i[j]  # log(1 - j / t), -inf at j = t (and beyond)
    scale = jnp.where(alpha_minus_n == 0.0, 0.0, alpha_minus_n * ell)
    inner = log_fall + log_hj[None, :] - a[None, :] * log_t + scale
    inner = jnp.where(below, inner, -jnp.inf)
    s_j = _log_sum_exp(inner, axis=1) + cum[j] - gammaln(jf + 1.0) + jf * log_t
    acc = _log_sum_exp(jnp.stack([acc, jnp.where(jf <= t, s_j, -jnp.inf)]), axis=0)
    nxt = _log_sum_exp(log_hj[None, :] + log_h_mat, axis=1)  # [x^n] h^(j+1)
    return (nxt, acc), None

  init = (log_h, jnp.full(big_a + 1, -jnp.inf, dt))
  (_, acc), _ = lax.scan(body, init, jnp.arange(1, n_j + 1))
  return acc


def _add_log_moments(s, t, m):
  """``(log E_Q[S^-m], ok)`` for one 1-out-of-t allocation, ``m = alpha - 1`` (vector).

  ``s = 1 / sigma`` (finite, > 0), ``t`` an integer >= 1. ``ok`` is False where the
  quadrature's tail above its grid is not negligible (the value is then unused).
  """
  dt = jnp.float64
  c = s * s
  w = jnp.linspace(_W_LO, _W_HI, _N_W, dtype=dt)
  hw = (_W_HI - _W_LO) / (_N_W - 1)
  z_lo = -_Z_LEFT - s
  z_hi = _Z_RIGHT + 2.0 * s
  z = jnp.linspace(0.0, 1.0, _N_Z, dtype=dt) * (z_hi - z_lo) + z_lo
  hz = (z_hi - z_lo) / (_N_Z - 1)
  log_phi = -0.5 * z * z - _HALF_LOG_2PI + jnp.log(hz)
  y_minus_1 = jnp.expm1(s * z - 0.5 * c)
  u = jnp.exp(w) / t
  x = -u[:, None] * y_minus_1[None, :]  # [w, z]
  # 1 + H = E[e^{-u (Y - 1)}], H = E[E2(x)] >= 0 without cancellation.
  h = jnp.sum(jnp.exp(log_phi)[None, :] * expm1_minus_x(jnp.minimum(x, 700.0)), axis=1)
  log_m = logsumexp(log_phi[None, :] + x, axis=1)
  l1 = jnp.where(h < 1.0, jnp.log1p(h), log_m)
  # Where e^{-u Y} phi has its mass below the z grid, the nodes are left to the tail bound.
  z_c = z_lo + 10.0
  log_u_cut = jnp.log(-z_c) - s * z_c + 0.5 * c - jnp.log(s)
  valid = jnp.log(u) <= log_u_cut
  base = -jnp.exp(w) + log_expm1(t * l1) + math.log(hw)
  base = jnp.where(valid, base, -jnp.inf)
  integrand = m[:, None] * w[None, :] + base[None, :]  # [order, w]
  mid = logsumexp(integrand, axis=1)
  w_last = jnp.max(jnp.where(valid, w, _W_LO))
  at_last = jnp.max(jnp.where(w[None, :] == w_last, integrand, -jnp.inf), axis=1)
  # Below the grid: integrand <= e^{m w} A e^{2 (w - w_lo)} e^{A}, A the bound at w_lo.
  log_a0 = 2.0 * _W_LO - jnp.log(2.0 * t) + math.exp(_W_LO) / t + log_expm1(c)
  left = log_a0 + jnp.exp(log_a0) + m * _W_LO - jnp.log(m + 2.0)
  # Above: Lambda(u)^t <= ((p/e)^p u^-p e^{p (p + 1) c / 2})^t, integrated from w_last.
  p = (m[:, None] / t) * jnp.asarray(_P_RATIOS, dt)[None, :]
  right = (
    t * (p * (jnp.log(p) - 1.0) + 0.5 * p * (p + 1.0) * c)
    + p * t * jnp.log(t)
    + (m[:, None] - p * t) * w_last
    - jnp.log(p * t - m[:, None])
  )
  right = jnp.min(right, axis=1)
  total = logsumexp(jnp.stack([mid, left, right]), axis=0)
  log_corr = total - gammaln(m)
  log_e = jnp.logaddexp(0.0, log_corr)
  ok = (right <= mid - _TAIL_NATS) & (at_last <= mid - _TAIL_NATS) & jnp.isfinite(log_e)
  return log_e, ok


def _one_allocation_rdp(sigma, t, orders, a_max: int):
  """RDP of one 1-out-of-t allocation at ``orders`` (float64 [n]), both directions:
  a [2, n] array (remove, add); sigma and t are scalars."""
  dt = jnp.float64
  orders = jnp.asarray(orders, dt)
  ordinary = (sigma > 0) & jnp.isfinite(sigma)
  sg = jnp.where(ordinary, sigma, 1.0)
  c = 1.0 / (sg * sg)
  tt = jnp.maximum(t, 1.0)
  finite_order = jnp.isfinite(orders)
  a = jnp.where(finite_order, orders, 2.0)
  gauss = 0.5 * a * c
  # Remove direction: exact at integers <= a_max, chords in between, Gaussian beyond.
  log_e1 = _remove_log_moments_minus_1(c, tt, a_max)
  log_e = jnp.logaddexp(0.0, log_e1)  # log E_alpha, alpha = 0..a_max (0 and 1 give 0)
  lo = jnp.clip(jnp.floor(a), 1.0, float(a_max))
  hi = jnp.clip(jnp.ceil(a), 1.0, float(a_max))
  frac = jnp.where(hi > lo, (a - lo) / jnp.where(hi > lo, hi - lo, 1.0), 0.0)
  chord = (1.0 - frac) * log_e[lo.astype(jnp.int32)] + frac * log_e[hi.astype(jnp.int32)]
  remove = jnp.where(a <= a_max, chord / (a - 1.0), gauss)
  # Add direction: the quadrature where it holds, else the AM-GM bound.
  amgm = 0.5 * c + 0.5 * (a - 1.0) * c / tt
  use_quadrature = (sg >= _ADD_MIN_SIGMA) & (tt > 1.0) & (a <= a_max)
  m = jnp.where(use_quadrature, a - 1.0, 1.0)
  add_q, ok = _add_log_moments(1.0 / sg, tt, m)
  # The quadrature agrees with adaptive references to 2e-14 relative (tests): a margin
  # of 1e-12 keeps it on the upper side.
  add = jnp.where(use_quadrature & ok, jnp.minimum(add_q / m * (1.0 + 1e-12), amgm), amgm)
  add = jnp.where(tt == 1.0, gauss, add)  # one step: the Gaussian mechanism, both ways
  out = jnp.where(finite_order, jnp.stack([remove, add]), jnp.inf)
  # No noise: infinite; infinite noise: nothing released.
  return jnp.where(ordinary, out, jnp.where(sigma == jnp.inf, 0.0, jnp.inf))


def epoch_rdp_f64(sigma, t, orders, *, selected: int, directions: bool = False):
  """RDP of one epoch of k-out-of-t allocation (k = ``selected``, static): float64 [..., n].

  ``sigma`` and ``t`` broadcast (leaves of any shape); ``orders`` is float64 [n].
  With ``directions``, the two directions (remove, add) on a leading axis of 2
  instead of their maximum. Invalid values (sigma < 0 or NaN, t not an integer
  >= k) give NaN.
  """
  dt = jnp.float64
  a_max = ALLOCATION_MAX_INTEGER_ORDER
  k = float(selected)
  sigma, t = jnp.broadcast_arrays(jnp.asarray(sigma, dt), jnp.asarray(t, dt))
  orders = jnp.asarray(orders, dt)
  shape = sigma.shape
  invalid = jnp.isnan(sigma) | (sigma < 0) | ~(t >= k) | (t != jnp.floor(t)) | jnp.isinf(t)
  tt = jnp.where(invalid, k, t)
  m = jnp.floor(tt / k)
  r = tt - k * m
  if selected == 1:
    sizes, sigmas = m.reshape(-1), sigma.reshape(-1)
  else:
    sizes = jnp.concatenate([m.reshape(-1), (m + 1.0).reshape(-1)])
    sigmas = jnp.concatenate([sigma.reshape(-1), sigma.reshape(-1)])
  per = lax.map(
    lambda row: _one_allocation_rdp(row[0], row[1], orders, a_max),
    jnp.stack([sigmas, sizes], axis=1),
  )  # [configs, 2, n]
  per = jnp.moveaxis(per, 1, 0)  # [2, configs, n]
  n = sigma.size
  if selected == 1:
    out = per.reshape((2, *shape, -1))
  else:
    r_m, r_m1 = per[:, :n].reshape((2, *shape, -1)), per[:, n:].reshape((2, *shape, -1))
    w_m1 = r[..., None]
    out = (k - w_m1) * r_m + jnp.where(w_m1 == 0.0, 0.0, w_m1 * r_m1)
  out = jnp.where(invalid[..., None], jnp.nan, out)
  return out if directions else jnp.maximum(out[0], out[1])


@functools.partial(jax.jit, static_argnames=("selected",))
def _rdp_jit(sigma, t, alpha, *, selected):
  """Both directions, [2, *broadcast shape]: one curve per (sigma, t) at every given
  order, then each element's own order."""
  alpha = jnp.asarray(alpha, jnp.float64)
  orders = alpha.reshape(-1)
  config = jnp.broadcast_shapes(jnp.shape(sigma), jnp.shape(t))
  curves = epoch_rdp_f64(
    jnp.broadcast_to(sigma, config),
    jnp.broadcast_to(t, config),
    orders,
    selected=selected,
    directions=True,
  )  # [2, *config, n]
  lead = jnp.broadcast_shapes(config, alpha.shape)
  curves = curves.reshape((2,) + (1,) * (len(lead) - len(config)) + config + (orders.size,))
  full = jnp.broadcast_to(curves, (2, *lead, orders.size))
  idx = jnp.broadcast_to(jnp.arange(orders.size).reshape(alpha.shape), lead)
  idx = jnp.broadcast_to(idx[None, ..., None], (2, *lead, 1))
  val = jnp.take_along_axis(full, idx, axis=-1)[..., 0]
  a = jnp.broadcast_to(alpha, lead)
  return jnp.where(jnp.isnan(a) | (a <= 1.0), jnp.nan, val)


def random_allocation_rdp(
  sigma: ArrayLike,
  steps_per_epoch: ArrayLike,
  alpha: ArrayLike,
  selected: int = 1,
  *,
  direction: str = "both",
) -> jax.Array:
  """Renyi DP of one epoch of random k-out-of-t allocation of the Gaussian mechanism.

  One epoch: t = ``steps_per_epoch`` steps, each example in k = ``selected`` of
  them (a uniformly random k-subset, independently across examples), each step
  the Gaussian mechanism with noise multiplier ``sigma`` on the sum of the
  batch (add/remove). The curve is the larger of the two directions:

  * remove, exact at integer orders: for the Gaussian mechanism on sums of
    sensitivity 1, one example in one uniformly random step of t (k = 1), and
    an integer alpha >= 2, the Renyi divergence of the pair with the example
    from the pair without it is D_alpha = log(E_alpha) / (alpha - 1) with
    ``E_alpha = t^-alpha sum_{a_1 + .. + a_t = alpha} alpha! / prod a_i! e^{sum_i a_i (a_i - 1) / (2 sigma^2)}``
    (Feldman and Shenfeld 2025, arXiv:2502.08202, written there as a sum over
    the partitions of alpha with at most t parts: Corollary 6.2, first part, in
    the version their public code cites; rederived in the module docstring
    and checked against the partition sum in 50-digit mpmath). Fractional
    orders by the chord of the convex ``log E_alpha``;
  * add, ``(1/m) log E_Q[S^-m]`` (m = alpha - 1) by quadrature of its
    one-dimensional integral representation, tails bounded, or the AM-GM bound
    ``1/(2 sigma^2) + (alpha - 1)/(2 t sigma^2)`` where the quadrature does not
    apply (sigma < 0.2, alpha > 256, or a heavy tail);

  and for k > 1 the sum over k blocks of sizes floor(t/k) and ceil(t/k) (the
  module docstring has the derivations). Orders above 256 get alpha / (2
  sigma^2). Compose epochs by multiplying by their number (a partial epoch counts
  whole).

  Args:
    sigma: noise multiplier (noise std over the sensitivity), >= 0.
    steps_per_epoch: t, an integer >= 1.
    alpha: Renyi order > 1 (inf allowed).
    selected: k, a Python int in [1, t] (static: it sets the shape of the
      computation).
    direction: ``"both"`` (default: the add/remove guarantee), ``"remove"``
      (D_alpha(P || Q)) or ``"add"`` (D_alpha(Q || P)).

  Returns:
    float64 array of the broadcast shape.

  Raises:
    ValueError: for concrete sigma < 0, t or k not an integer >= 1, k > t,
      alpha <= 1, or NaN; traced invalid values give NaN.

  Examples:
    >>> from jaxrdp.mechanisms import random_allocation_rdp
    >>> round(float(random_allocation_rdp(1.0, 1, 2.0)), 12)  # one step: Gaussian
    1.0
    >>> r = float(random_allocation_rdp(1.1, 234, 8.0))
    >>> 0.0 < r < 8.0 / (2 * 1.1**2 * 2)
    True
  """
  if direction not in ("both", "remove", "add"):
    raise ValueError(f"direction must be 'both', 'remove' or 'add', got {direction!r}")
  check_range("sigma", sigma, lower=0.0, allow_inf=True)
  check_range("steps_per_epoch", steps_per_epoch, lower=1.0)
  check_range("alpha", alpha, lower=1.0, lower_open=True, allow_inf=True)
  selected = check_selected(selected)
  arr = concrete_or_none(steps_per_epoch)
  if arr is not None and np.any(arr != np.floor(arr)):
    raise ValueError(f"steps_per_epoch must be an integer, got {steps_per_epoch!r}")
  if arr is not None and np.any(arr < selected):
    raise ValueError(
      f"steps_per_epoch must be at least selected = {selected}, got {steps_per_epoch!r}"
    )
  pick = {"remove": 0, "add": 1}.get(direction)

  def kernel(s, t, a):
    if any(isinstance(x, jax.core.Tracer) for x in (s, t, a)):
      both = _rdp_jit(s, t, a, selected=selected)
    else:
      both = _rdp_host(np.asarray(s), np.asarray(t), np.asarray(a), selected)
    return jnp.maximum(both[0], both[1]) if pick is None else both[pick]

  return _precision.elementwise_float64(kernel, (sigma, steps_per_epoch, alpha))


# Concrete calls evaluate one allocation at a time with a single compiled program
# (orders padded to a fixed number of slots), so that calls with other shapes
# compile nothing new.
_ORDER_SLOTS = 256


@jax.jit
def _allocation_jit(sigma, t, orders):
  return _one_allocation_rdp(sigma, t, orders, ALLOCATION_MAX_INTEGER_ORDER)


def _curves_host(sigmas, sizes, orders):
  """[2, len(sigmas), n] for concrete (sigma, t) pairs, t >= 1 an integer."""
  n = orders.size
  blocks = max(1, -(-n // _ORDER_SLOTS))
  padded = np.full(blocks * _ORDER_SLOTS, 2.0)
  padded[:n] = orders
  out = np.empty((2, len(sigmas), blocks * _ORDER_SLOTS))
  for i, (sg, tt) in enumerate(zip(sigmas, sizes)):
    for b in range(blocks):
      chunk = jnp.asarray(padded[b * _ORDER_SLOTS : (b + 1) * _ORDER_SLOTS])
      out[:, i, b * _ORDER_SLOTS : (b + 1) * _ORDER_SLOTS] = np.asarray(
        _allocation_jit(jnp.asarray(sg, jnp.float64), jnp.asarray(tt, jnp.float64), chunk)
      )
  return out[:, :, :n]


def _rdp_host(sigma, t, alpha, selected: int):
  """``_rdp_jit`` for concrete (validated) arguments: [2, *broadcast shape]."""
  lead = np.broadcast_shapes(sigma.shape, t.shape, alpha.shape)
  s_b, t_b, a_b = (
    np.broadcast_to(np.asarray(x, np.float64), lead).reshape(-1) for x in (sigma, t, alpha)
  )
  k = float(selected)
  m = np.floor(t_b / k)
  r = t_b - k * m
  orders = np.unique(a_b)
  sizes = m if selected == 1 else np.concatenate([m, m + 1.0])
  sigmas = s_b if selected == 1 else np.concatenate([s_b, s_b])
  pairs = np.unique(np.stack([sigmas, sizes], 1), axis=0)
  curves = _curves_host(pairs[:, 0], pairs[:, 1], orders)  # [2, pairs, orders]
  key = {(float(a), float(b)): i for i, (a, b) in enumerate(pairs)}
  i_m = np.array([key[(float(x), float(y))] for x, y in zip(s_b, m)], dtype=int)
  i_m1 = (
    i_m
    if selected == 1
    else np.array([key[(float(x), float(y))] for x, y in zip(s_b, m + 1.0)], dtype=int)
  )
  j = np.searchsorted(orders, a_b)
  one = curves[:, i_m, j]
  two = np.where(r > 0, r * np.where(r > 0, curves[:, i_m1, j], 0.0), 0.0)
  out = (k - r) * one + two
  return jnp.asarray(out.reshape((2, *lead)))


def check_selected(selected) -> int:
  """``selected`` (k) as a Python int >= 1, or ValueError / TypeError naming it."""
  if isinstance(selected, (bool, np.bool_)) or not isinstance(selected, (int, np.integer)):
    raise TypeError(f"selected must be a Python int >= 1, got {selected!r}")
  if int(selected) < 1:
    raise ValueError(f"selected must be an int >= 1, got {selected!r}")
  return int(selected)
