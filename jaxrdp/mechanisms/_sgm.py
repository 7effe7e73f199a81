"""Public RDP kernels of the Sampled Gaussian Mechanism (SGM)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.numerics import TINY, floor_rate, log_expm1, positive_subnormal
from .._core.static_index import concatenate_to
from .._core.validation import (
  NOISE_MULTIPLIER,
  ORDER,
  PROBABILITY,
  concrete_or_none,
  static_or_none,
)
from ..mechanisms._sgm_quadrature import log_a_minus_1_quadrature
from ..mechanisms._sgm_series import (
  FULL_MAX_ORDER,
  log_a_minus_1_integer_full,
  log_a_minus_1_integer_grid,
  log_a_minus_1_integer_windowed,
)

__all__ = ["sgm_log_a", "sgm_rdp", "sgm_log_a_minus_1", "MAX_ORDER"]

#: The largest finite Renyi order accepted (alpha = inf is accepted too). Up to
#: here the kernels are checked against the bounds that pin the value down for
#: large orders (alpha / (2 sigma^2) + alpha log(q) / (alpha - 1) <= RDP <=
#: alpha / (2 sigma^2)); beyond it concrete orders raise ValueError and traced
#: ones give NaN.
MAX_ORDER = 1e15
# The quadrature's verified domain starts at sigma = 0.1 (jaxrdp._sgm_quadrature);
# below it, at orders the series does not cover, a certified upper bound is used.
_QUAD_MIN_SIGMA = 0.1
# Asymptotic regimes, where sigma^2 (or 1 / sigma^2) leaves the float64 range in
# the kernels' intermediate steps. Below _TINY_SIGMA, log A = alpha (alpha - 1) /
# (2 sigma^2) to a relative 1e-170 (its lower bound adds alpha log q <= 745 alpha,
# its upper bound is the Gaussian mechanism); above _BIG_SIGMA,
# A - 1 = alpha (alpha - 1) q^2 / (2 sigma^2) to a relative (alpha / sigma)^2 <= 1e-170.
_TINY_SIGMA = 1e-100
_BIG_SIGMA = 1e100


def _over_sigma_squared(a, sigma):
  """a / sigma^2 as (a / sigma) / sigma: sigma^2 underflows for sigma < 1.5e-154.
  (The barrier stops XLA from rewriting it back into a / (sigma * sigma).)"""
  return jax.lax.optimization_barrier(a / sigma) / sigma


def check_order_limit(name, alpha):
  """Raises ValueError if concrete ``alpha`` has a finite order above MAX_ORDER."""
  arr = concrete_or_none(alpha)
  if arr is None:
    return
  bad = np.isfinite(arr) & (arr > MAX_ORDER)
  if bad.any():
    raise ValueError(
      f"{name} must be in (1, {MAX_ORDER:.0e}] or inf, got {float(arr[bad].flat[0])!r}: orders "
      f"above {MAX_ORDER:.0e} are not supported"
    )


def _validate(q, sigma, alpha):
  PROBABILITY.check("q", q)
  NOISE_MULTIPLIER.check("sigma", sigma)
  ORDER.check("alpha", alpha)
  check_order_limit("alpha", alpha)


def _public_call(jitted, q, sigma, alpha):
  """A public SGM kernel: validates the arguments, then runs its jitted float64
  program with the concrete orders static (series for the integer ones), finalized
  for the caller (``jaxrdp._core.precision.elementwise_float64``)."""
  _validate(q, sigma, alpha)
  alpha_static = static_or_none(alpha)
  return _precision.elementwise_float64(
    lambda q, sigma, alpha: jitted(q, sigma, alpha, alpha_static=alpha_static), (q, sigma, alpha)
  )


def _small_sigma_bound(q, sigma, alpha):
  """A certified upper bound on log(A - 1) (1-D float64 arrays, sigma > 0).

  The smallest of three upper bounds on log A: the Gaussian mechanism,
  alpha (alpha - 1) / (2 sigma^2); (a + b)^alpha <= 2^(alpha - 1) (a^alpha + b^alpha)
  applied to (1 - q) + q L; and, log A being convex in alpha, the chord between the
  neighbouring integer orders, whose values the exact series gives. For small
  sigma the second is within log 2 / (alpha - 1) of the RDP's lower bound.
  """
  beta = alpha - 1.0
  gauss = _over_sigma_squared(0.5 * alpha * beta, sigma)
  pow2 = beta * np.log(2.0) + jnp.logaddexp(alpha * jnp.log1p(-q), alpha * jnp.log(q) + gauss)
  n0 = jnp.floor(alpha)

  # Both neighbours in one series evaluation (one copy of the series in the program).
  n = jnp.concatenate([n0, n0 + 1.0])
  ok = n >= 2.0
  val, covered = log_a_minus_1_integer_windowed(
    jnp.concatenate([q, q]), jnp.concatenate([sigma, sigma]), jnp.where(ok, n, 2.0)
  )
  f = jnp.where(ok, jnp.where(covered, jnp.logaddexp(0.0, val), jnp.inf), 0.0)
  f0, f1 = f[: q.shape[0]], f[q.shape[0] :]
  t = alpha - n0
  chord = jnp.where(t > 0, f0 + t * (f1 - f0), f0)
  chord = jnp.where(jnp.isnan(chord), jnp.inf, chord)
  log_a = jnp.minimum(jnp.minimum(gauss, pow2), chord) * (1.0 + 1e-13)
  return log_expm1(log_a)


def may_have_small_sigma(sigma) -> bool:
  """False when ``sigma`` is concrete and every value lies in the quadrature's verified
  domain (sigma >= _QUAD_MIN_SIGMA, inf included), True otherwise (traced, or some
  value below it): the ``small_sigma`` argument of the kernels for these values."""
  s = concrete_or_none(sigma)
  return s is None or not bool(np.all(np.asarray(s, dtype=np.float64) >= _QUAD_MIN_SIGMA))


def log_a_minus_1_quadrature_checked(q, sigma, alpha, small_sigma=True):
  """The quadrature on its verified domain (sigma >= _QUAD_MIN_SIGMA); below it,
  where the quadrature can be too low, the bound of _small_sigma_bound.

  ``small_sigma`` (static): False when the caller knows that no sigma lies below
  the domain (``may_have_small_sigma``), so that the bound is not compiled at all
  (it is as large a program as the quadrature's light layout); a sigma below the
  domain then gives NaN, never a value that may be too low.
  """
  small = sigma < _QUAD_MIN_SIGMA
  general = log_a_minus_1_quadrature(q, jnp.where(small, 1.0, sigma), alpha)
  if not small_sigma:
    return jnp.where(small, jnp.nan, general)

  def with_bound(general):
    shape = q.shape
    qs, ss, as_ = (jnp.ravel(x) for x in (q, jnp.where(small, sigma, _QUAD_MIN_SIGMA), alpha))
    return jnp.where(small, _small_sigma_bound(qs, ss, as_).reshape(shape), general)

  return jax.lax.cond(jnp.any(small), with_bound, lambda general: general, general)


def _order_groups(orders: np.ndarray) -> list[np.ndarray]:
  """Indices of the concrete ``orders`` by method: the full integer series (integers up
  to FULL_MAX_ORDER), the windowed series (larger integers), the quadrature (the rest)."""
  is_int = np.isfinite(orders) & (orders == np.round(orders)) & (orders >= 2)
  return [
    np.flatnonzero(is_int & (orders <= FULL_MAX_ORDER)),
    np.flatnonzero(is_int & (orders > FULL_MAX_ORDER)),
    np.flatnonzero(~is_int),
  ]


def _log_a_minus_1_regular(q, sigma, alpha, alpha_np, rows_constant=False, small_sigma=True):
  """log(A - 1) for 0 < q < 1, 0 < sigma < inf, 1 < alpha < inf (broadcast arrays).

  When the orders are concrete (``alpha_np`` is not None), they are partitioned
  statically: integer orders use the exact positive series (cheap), the rest
  use quadrature. Traced orders all use quadrature. ``rows_constant``: q and
  sigma are constant along the last (order) axis. ``small_sigma``: as in
  ``log_a_minus_1_quadrature_checked``.
  """
  if alpha_np is None:
    return log_a_minus_1_quadrature_checked(q, sigma, alpha, small_sigma)
  if alpha_np.ndim == 1 and q.shape[-1:] == alpha_np.shape:
    return _regular_along_last_axis(q, sigma, alpha, alpha_np, rows_constant, small_sigma)
  shape = q.shape
  a = np.broadcast_to(alpha_np, shape).ravel()
  groups = _order_groups(a)
  qf, sf, af = q.ravel(), sigma.ravel(), alpha.ravel()
  parts = []
  if groups[0].size:
    i = groups[0]
    parts.append(log_a_minus_1_integer_full(qf[i], sf[i], a[i].astype(np.int64)))
  if groups[1].size:
    i = groups[1]
    parts.append(_windowed_or_quadrature(qf[i], sf[i], jnp.asarray(a[i]), small_sigma))
  if groups[2].size:
    i = groups[2]
    parts.append(log_a_minus_1_quadrature_checked(qf[i], sf[i], af[i], small_sigma))
  return concatenate_to(parts, [g for g in groups if g.size]).reshape(shape)


def _windowed_or_quadrature(q, sigma, alpha, small_sigma=True):
  """log(A - 1) at integer orders above the full series' range, by the windowed series.

  Rare: the windows may miss terms (very broad term distributions). Only then is the
  quadrature run, for the whole group, and used where needed."""
  val, covered = log_a_minus_1_integer_windowed(q.ravel(), sigma.ravel(), alpha.ravel())
  val, covered = val.reshape(q.shape), covered.reshape(q.shape)
  return jax.lax.cond(
    jnp.all(covered),
    lambda: val,
    lambda: jnp.where(covered, val, log_a_minus_1_quadrature_checked(q, sigma, alpha, small_sigma)),
  )


def _regular_along_last_axis(q, sigma, alpha, orders, rows_constant, small_sigma=True):
  """As _log_a_minus_1_regular for a 1-D order grid on the last axis.

  The usual layout (a batch of configurations against a grid of orders). The
  orders are partitioned once, along the last axis, so no per-element gather of
  constants is built: compile time does not grow with the batch size.
  """
  groups = _order_groups(orders)
  parts = []
  if groups[0].size:
    i = groups[0]
    n = orders[i].astype(np.int64)
    if rows_constant:  # one configuration per row: share the per-configuration work
      parts.append(log_a_minus_1_integer_grid(q[..., i[0]], sigma[..., i[0]], n))
    else:
      parts.append(log_a_minus_1_integer_full(q[..., i], sigma[..., i], n))
  if groups[1].size:
    i = groups[1]
    parts.append(_windowed_or_quadrature(q[..., i], sigma[..., i], alpha[..., i], small_sigma))
  if groups[2].size:
    i = groups[2]
    parts.append(
      log_a_minus_1_quadrature_checked(q[..., i], sigma[..., i], alpha[..., i], small_sigma)
    )
  return concatenate_to(parts, [g for g in groups if g.size])


def _log_a_minus_1_f64(q, sigma, alpha, alpha_static=None, small_sigma=True):
  """log(A_alpha - 1) in float64 with every edge case; inputs any shape.

  ``alpha_static``: the orders as a StaticArray when known at trace time (then
  integer orders use the exact series), else None. If None and ``alpha`` is a
  concrete array, it is used directly. ``small_sigma`` (static): False only when
  no sigma lies below the quadrature's verified domain (``may_have_small_sigma``).
  """
  alpha_np = alpha_static.array if alpha_static is not None else concrete_or_none(alpha)
  # A batch of configurations against a 1-D grid of orders on the last axis.
  rows_constant = (
    alpha_np is not None
    and alpha_np.ndim == 1
    and np.ndim(alpha) == 1
    and all(np.ndim(x) == 0 or np.shape(x)[-1] == 1 for x in (q, sigma))
  )
  q, sigma, alpha = _precision.broadcast_float64(q, sigma, alpha)
  # XLA reads a subnormal q as 0; A is non-decreasing in q, so raising q to
  # RATE_FLOOR is sound (see floor_rate).
  q = floor_rate(q)
  invalid = ~(
    PROBABILITY.holds(q)
    & NOISE_MULTIPLIER.holds(sigma)
    & ORDER.holds(alpha)
    & ((alpha <= MAX_ORDER) | jnp.isinf(alpha))
  )
  zero = q == 0  # the mechanism never looks at the data: A = 1
  exact_gauss = q == 1  # A = exp(alpha (alpha - 1) / (2 sigma^2))
  infinite = ((sigma == 0) | jnp.isinf(alpha)) & ~zero
  huge_sigma = jnp.isinf(sigma) & ~zero
  ordinary = ~(invalid | zero | infinite | huge_sigma)
  tiny_sigma = ordinary & (sigma < _TINY_SIGMA)
  big_sigma = ordinary & (sigma >= _BIG_SIGMA)
  special = invalid | zero | exact_gauss | infinite | huge_sigma | tiny_sigma | big_sigma
  # Double where: the quadrature sees harmless values wherever its output is unused.
  qs = jnp.where(special, 0.5, q)
  ss = jnp.where(special, 1.0, sigma)
  as_ = jnp.where(special, 2.0, alpha)
  if alpha_np is not None:
    alpha_np = np.where(np.isfinite(alpha_np) & (alpha_np > 1), alpha_np, 2.0)
  general = _log_a_minus_1_regular(qs, ss, as_, alpha_np, rows_constant, small_sigma)

  # q = 1: log(A - 1) = log(expm1(x)), x = alpha (alpha - 1) / (2 sigma^2).
  # Only computed when some element has q = 1.
  def with_gauss(general):
    ss_g = jnp.where(exact_gauss & ~infinite & ~huge_sigma, sigma, 1.0)
    ag = jnp.where(exact_gauss & ~infinite, alpha, 2.0)
    x = ag * (ag - 1.0) / (2.0 * ss_g * ss_g)
    return jnp.where(exact_gauss, log_expm1(x), general)

  out = jax.lax.cond(jnp.any(exact_gauss), with_gauss, lambda general: general, general)
  # The asymptotic regimes (see _TINY_SIGMA), q = 1 included, each rounded up.
  at = jnp.where(tiny_sigma | big_sigma, alpha, 2.0)
  st = jnp.where(tiny_sigma, sigma, _TINY_SIGMA)
  out = jnp.where(tiny_sigma, _over_sigma_squared(0.5 * at * (at - 1.0), st) * (1.0 + 1e-15), out)
  sb = jnp.where(big_sigma, sigma, _BIG_SIGMA)
  qb = jnp.where(big_sigma, q, 0.5)
  big = jnp.log(0.5 * at) + jnp.log(at - 1.0) + 2.0 * (jnp.log(qb) - jnp.log(sb))
  out = jnp.where(big_sigma, big + 4e-16 * (1.0 + jnp.abs(big) + 2.0 * jnp.log(sb)), out)
  # A > 1 always here, so -inf means the kernels underflowed (large sigma, tiny q).
  # A is convex in q with A(0) = 1: A - 1 <= q expm1(alpha (alpha - 1) / (2 sigma^2)).
  lost = ordinary & ~special & (out == -jnp.inf)
  ql, sl, al = jnp.where(lost, q, 0.5), jnp.where(lost, sigma, 1.0), jnp.where(lost, alpha, 2.0)
  chord = jnp.log(ql) + log_expm1(_over_sigma_squared(0.5 * al * (al - 1.0), sl))
  out = jnp.where(lost, chord + 1e-14 * (1.0 + jnp.abs(chord)), out)
  out = jnp.where(zero | huge_sigma, -jnp.inf, out)
  out = jnp.where(infinite, jnp.inf, out)
  return jnp.where(invalid, jnp.nan, out)


def sgm_log_a_minus_1(q: ArrayLike, sigma: ArrayLike, alpha: ArrayLike) -> jax.Array:
  """log(A_alpha - 1) of the SGM; full relative accuracy when A_alpha ~ 1.

  Same conventions as :func:`sgm_log_a`; returns -inf where A_alpha = 1
  (q = 0 or sigma = inf).
  """
  return _public_call(_log_a_minus_1_jit, q, sigma, alpha)


def _log_a_f64(q, sigma, alpha, alpha_static=None, small_sigma=True):
  log_a_m1 = _log_a_minus_1_f64(q, sigma, alpha, alpha_static, small_sigma)
  log_a = jnp.logaddexp(0.0, log_a_m1)  # log(1 + (A - 1))
  # A > 1 with log A below the normal range (XLA flushes it to 0): report a floor
  # that keeps log A / (alpha - 1) >= the smallest normal float, a sound bound.
  floor = TINY * jnp.maximum(_precision.as_float64(alpha) - 1.0, 1.0)
  return jnp.where((log_a_m1 > -jnp.inf) & (log_a < floor), floor, log_a)


def sgm_log_a(q: ArrayLike, sigma: ArrayLike, alpha: ArrayLike) -> jax.Array:
  """log A_alpha of the Sampled Gaussian Mechanism, exact for any real alpha > 1.

  With mu0 = N(0, sigma^2), mu1 = N(1, sigma^2) and mu = (1 - q) mu0 + q mu1
  (Poisson sampling at rate q, noise multiplier sigma, sensitivity 1):

      A_alpha = E_{z ~ mu0}[(mu(z) / mu0(z))^alpha]
              = E_{z ~ N(0, sigma^2)}[(1 - q + q exp((2z - 1) / (2 sigma^2)))^alpha].

  Computed as log1p of A_alpha - 1 = E[(1 + u)^alpha - 1 - alpha u] with
  u = q expm1((2z - 1) / (2 sigma^2)), a non-negative integrand, by Gauss-Legendre
  quadrature on windows placed around the integrand's mass (see
  ``jaxrdp.mechanisms._sgm_quadrature``). This is the same quantity as the series of
  Mironov, Talwar and Zhang (2019), "Renyi Differential Privacy of the Sampled
  Gaussian Mechanism", arXiv:1908.10530, Sec. 3.3, without its truncation and
  cancellation problems.

  Accuracy guarantee: relative error <= 1e-12 (observed <= ~5e-14) against a
  60-digit mpmath reference for q in [1e-8, 1], sigma in [0.1, 1e3],
  alpha in (1, 1e4], integer and fractional alpha alike (tests/test_accuracy.py).

  Edge cases: q = 0 -> 0; q = 1 -> alpha (alpha - 1) / (2 sigma^2);
  sigma = 0 or alpha = inf (with q > 0) -> inf; sigma = inf -> 0.

  Args:
    q: sampling rate in [0, 1].
    sigma: noise multiplier in [0, inf].
    alpha: Renyi order in (1, inf]; integer and fractional orders may be mixed.
      The three arguments broadcast with NumPy rules.

  Returns:
    float64 array of the broadcast shape. Concrete invalid arguments raise
    ValueError; traced invalid values give NaN.

  Examples:
    >>> import jaxrdp
    >>> round(float(jaxrdp.mechanisms.sgm_log_a(1.0, 2.0, 3.0)), 12)   # 3 * 2 / (2 * 4)
    0.75
  """
  return _public_call(_log_a_jit, q, sigma, alpha)


def _rdp_f64(q, sigma, alpha, alpha_static=None):
  alpha = _precision.as_float64(alpha)
  log_a = _log_a_f64(q, sigma, alpha, alpha_static)
  rdp = log_a / (alpha - 1.0)
  # sigma < _TINY_SIGMA: rdp = alpha / (2 sigma^2) (rounded up) directly, finite
  # where log A itself overflows.
  qq, ss, aa = _precision.broadcast_float64(q, sigma, alpha)
  tiny = (
    (ss < _TINY_SIGMA)
    & (ss > 0)
    & ((qq > 0) | positive_subnormal(qq))
    & (qq <= 1)
    & (aa > 1)
    & (aa <= MAX_ORDER)
  )
  st, at = jnp.where(tiny, ss, _TINY_SIGMA), jnp.where(tiny, aa, 2.0)
  rdp = jnp.where(tiny, _over_sigma_squared(0.5 * at, st) * (1.0 + 1e-15), rdp)
  # alpha = inf: the limit is inf for q > 0 and 0 for q = 0 (log A is then 0 or inf).
  return jnp.where(jnp.isinf(alpha), jnp.where(log_a == 0, 0.0, jnp.inf), rdp)


def sgm_rdp(q: ArrayLike, sigma: ArrayLike, alpha: ArrayLike) -> jax.Array:
  """Per-step Renyi DP of the Sampled Gaussian Mechanism: log A_alpha / (alpha - 1).

  This is D_alpha(mu || mu0), which bounds D_alpha(mu0 || mu) as well
  (Mironov, Talwar, Zhang 2019, arXiv:1908.10530, Thm 5), so it is the
  add/remove-adjacency RDP guarantee of one step. T steps give T * sgm_rdp.

  Accuracy, broadcasting, edge cases and errors as in :func:`sgm_log_a`;
  q = 1 gives alpha / (2 sigma^2), the Gaussian mechanism.

  Examples:
    >>> import jaxrdp
    >>> float(jaxrdp.mechanisms.sgm_rdp(1.0, 2.0, 3.0))   # 3 / (2 * 4)
    0.375
  """
  return _public_call(_rdp_jit, q, sigma, alpha)


# Public entry points run one compiled program per call (op-by-op dispatch of
# these kernels would compile dozens of small programs on first use).
_log_a_minus_1_jit = jax.jit(_log_a_minus_1_f64, static_argnames=("alpha_static",))
_log_a_jit = jax.jit(_log_a_f64, static_argnames=("alpha_static",))
_rdp_jit = jax.jit(_rdp_f64, static_argnames=("alpha_static",))
