"""Gradient-safe scalar helpers for log-space arithmetic.

Every function here is elementwise, pure ``jnp``, and joins its regimes with the
"double where" pattern: the input of the branch not taken is replaced by a safe
value first, so neither the value nor the gradient of the unused branch can be
NaN (JAX FAQ, "Gradients contain NaN where using where").
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.scipy.special
import numpy as np

__all__ = [
  "TINY",
  "argmin_last",
  "argmin_near",
  "expm1_minus_x",
  "log_binomial",
  "log_expm1",
  "log_expm1_minus_x",
  "log_gaussian_pdf",
  "log_subnormal_safe",
  "positive_subnormal",
  "raise_subnormal",
]

# Taylor coefficients of (e^x - 1 - x) / (x^2 / 2) = sum_k 2 x^k / (k + 2)!,
# highest order first for Horner's rule. For |x| <= 0.1 the first omitted term
# is 2 * 0.1^10 / 12! ~ 4.2e-19 relative: below float64 resolution (1.1e-16).
_E2_SERIES = tuple(2.0 / math.factorial(k + 2) for k in range(10))[::-1]
_E2_SMALL = 0.1


def log_expm1_minus_x(x):
  """log(e^x - 1 - x), accurate to a few ulp for every real x.

  e^x - 1 - x >= 0 with equality only at x = 0, where the result is -inf.

  Regimes:
    |x| < 0.1:  2 log|x| - log 2 + log(series), the series above (no cancellation);
    x >= 30:    x + log1p(-(1 + x) e^-x), which cannot overflow;
    otherwise:  log(expm1(x) - x); the subtraction loses at most a factor
                2/|x| <= 20 in relative precision, i.e. ~4 ulp.
  """
  x = jnp.asarray(x)
  small = jnp.abs(x) < _E2_SMALL
  big = x >= 30.0
  xs = jnp.where(small, x, _E2_SMALL / 2)
  series = jnp.zeros_like(xs)
  for c in _E2_SERIES:
    series = series * xs + c
  # 2 log|x| written as log(x^2) would underflow for |x| < 1e-154.
  log_small = 2.0 * jnp.log(jnp.abs(xs)) - math.log(2.0) + jnp.log(series)
  xb = jnp.where(big, x, 30.0)
  log_big = xb + jnp.log1p(-(1.0 + xb) * jnp.exp(-xb))
  xm = jnp.where(small | big, -1.0, x)
  log_mid = jnp.log(jnp.expm1(xm) - xm)
  return jnp.where(small, log_small, jnp.where(big, log_big, log_mid))


def log_expm1(x):
  """log(expm1(x)) for x >= 0 (x = 0 gives -inf, x = inf gives inf).

  As x + log(-expm1(-x)): one form for every x, which cannot overflow, and
  -expm1(-x) = 1 - e^-x keeps full relative accuracy for small x. The absolute
  error is a few ulp of max(x, 1).
  """
  return x + jnp.log(-jnp.expm1(-x))


def log_gaussian_pdf(z, sigma):
  """log of the N(0, sigma^2) density at z."""
  return -0.5 * jnp.square(z / sigma) - jnp.log(sigma) - 0.5 * math.log(2.0 * math.pi)


def argmin_last(v):
  """Index of the first minimum along the last axis (int32).

  Built from min reductions rather than jnp.argmin: argmin lowers to a variadic
  reduce whose initial values follow the *global* x64 flag, which breaks when a
  float64 kernel is traced inside a caller's float32 jit. NaN rows give 0.
  The first maximum is ``argmin_last(-v)`` (negation is exact, so the same
  elements tie).

  Two passes: the minimum, then the first index whose value equals it. XLA may
  compute ``v`` twice, once in each pass, with different rounding (it duplicates
  cheap operations into each fusion that uses them, and may contract a multiply
  and an add into one fused multiply-add in one copy only); then no element may
  equal the minimum (seen in the order search: every row got index 0). Where none
  does, the index is :func:`argmin_near`'s, a near-minimum found in one pass. (A
  variadic (value, index) reduction avoids the second pass, but XLA:CPU runs it
  element by element with the computation of ``v`` fused inside: on the standard
  benchmark grid that made the order search about 25% slower; see
  benchmarks/README.md.)
  """
  v = jax.lax.stop_gradient(v)  # the index has no derivative
  n = v.shape[-1]
  idx = jax.lax.broadcasted_iota(jnp.int32, v.shape, v.ndim - 1)
  m = jnp.min(v, axis=-1, keepdims=True)
  j = jnp.min(jnp.where(v == m, idx, jnp.int32(n)), axis=-1)
  # The one-pass index only where no element matched (under vmap, a select of both).
  j = jax.lax.cond(
    jnp.all(j < n), lambda j, v: j, lambda j, v: jnp.where(j < n, j, argmin_near(v)), j, v
  )
  return jnp.where(jnp.any(jnp.isnan(v), axis=-1), 0, j)


def argmin_near(v):
  """Index of the first near-minimum along the last axis (int32), in one pass.

  The first index whose value lies in the same bin as the minimum, where the bins
  are the float64 values with their last ``b`` bits cleared, ``b`` the bits of an
  index (7 for up to 128 elements): its value is within 2^(b - 52) relative of the
  minimum (about 3e-14 for 128 elements), and it is the first minimum itself
  unless another element ties with it that closely. NaN is larger than +inf, and
  -0.0 smaller than +0.0.

  The key of each element is its value's bits, made monotone in the value, with
  the index in their last ``b`` bits; one integer ``min`` reduction finds it. One
  pass, so no second, differently rounded copy of the values is compared with
  the minimum (see :func:`argmin_last`, whose fallback this is). Call it inside a
  float64 scope (it uses int64).
  """
  v = jax.lax.stop_gradient(v)
  n = v.shape[-1]
  bits = max(n - 1, 1).bit_length()
  b = jax.lax.bitcast_convert_type(v.astype(jnp.float64), jnp.int64)
  # Negative floats: flip all bits but the sign, so that int64 order is float order.
  ordered = jnp.where(b < 0, b ^ jnp.int64(0x7FFFFFFFFFFFFFFF), b)
  idx = jax.lax.broadcasted_iota(jnp.int64, v.shape, v.ndim - 1)
  key = ((ordered >> bits) << bits) | idx
  return (jnp.min(key, axis=-1) & jnp.int64((1 << bits) - 1)).astype(jnp.int32)


# Stirling correction delta(x) = lgamma(x) - [(x - 1/2) log x - x + log(2 pi)/2]
# = 1/(12x) - 1/(360x^3) + 1/(1260x^5) - 1/(1680x^7) + ...; for x >= 20 the
# first omitted term, 1/(1188 x^9), is below 2e-15 (Abramowitz & Stegun 6.1.41).
_STIRLING_MIN = 20.0


def _stirling_delta(x):
  r = 1.0 / x
  r2 = r * r
  return r * (1.0 / 12 - r2 * (1.0 / 360 - r2 * (1.0 / 1260 - r2 / 1680)))


def log_binomial(n, k):
  """log C(n, k) for real 0 <= k <= n, accurate to a few ulp of the result.

  lgamma(n+1) - lgamma(k+1) - lgamma(n-k+1) loses ~|lgamma(n+1)| * eps in
  absolute terms (2e-12 at n = 1700). Here the large parts are combined
  analytically first. With N = n + 1, K = k + 1, M = n - k + 1 and
  delta the Stirling correction:

    K, M >= 20:  (k + 1/2) log1p(m/K) + (m + 1/2) log1p(k/M) - log(N)/2 + 1
                 - log(2 pi)/2 + delta(N) - delta(K) - delta(M)
    K < 20:      (M - 1/2) log1p(k/M) + k log N - k + delta(N) - delta(M) - lgamma(K)
    M < 20:      the same with k and m exchanged
    both < 20:   plain lgamma (all terms are small, n < 38).
  """
  from jax.scipy.special import gammaln

  n = jnp.asarray(n)
  k = jnp.asarray(k)
  m = n - k
  kb, mb = k + 1.0, m + 1.0
  big_k, big_m = kb >= _STIRLING_MIN, mb >= _STIRLING_MIN

  def safe(x, ok):
    return jnp.where(ok, x, _STIRLING_MIN)

  # Both large.
  K2, M2 = safe(kb, big_k & big_m), safe(mb, big_k & big_m)
  k2, m2 = K2 - 1.0, M2 - 1.0
  N2 = K2 + M2 - 1.0
  both = (
    (k2 + 0.5) * jnp.log1p(m2 / K2)
    + (m2 + 0.5) * jnp.log1p(k2 / M2)
    - 0.5 * jnp.log(N2)
    + 1.0
    - 0.5 * math.log(2.0 * math.pi)
    + _stirling_delta(N2)
    - _stirling_delta(K2)
    - _stirling_delta(M2)
  )

  def one_small(small, large):
    # lgamma(N) - lgamma(M) - lgamma(S) with S = small + 1 < 20 <= M = large + 1.
    M1 = large + 1.0
    N1 = M1 + small
    return (
      (M1 - 0.5) * jnp.log1p(small / M1)
      + small * jnp.log(N1)
      - small
      + _stirling_delta(N1)
      - _stirling_delta(M1)
      - gammaln(small + 1.0)
    )

  small_k = (~big_k) & big_m
  small_m = big_k & (~big_m)
  k_small_val = one_small(jnp.where(small_k, k, 1.0), jnp.where(small_k, m, _STIRLING_MIN))
  m_small_val = one_small(jnp.where(small_m, m, 1.0), jnp.where(small_m, k, _STIRLING_MIN))
  tiny = (~big_k) & (~big_m)
  nt, kt = jnp.where(tiny, n, 2.0), jnp.where(tiny, k, 1.0)
  tiny_val = gammaln(nt + 1.0) - gammaln(kt + 1.0) - gammaln(nt - kt + 1.0)
  return jnp.where(
    big_k & big_m, both, jnp.where(small_k, k_small_val, jnp.where(small_m, m_small_val, tiny_val))
  )


def expm1_minus_x(x, expm1_x=None):
  """e^x - 1 - x >= 0, accurate to a few ulp for x <= 709 (overflows beyond).

  |x| < 0.1: x^2/2 * series (no cancellation); otherwise expm1(x) - x, which
  loses at most a factor 2/|x| <= 20 to cancellation. ``expm1_x``: expm1(x)
  where the caller has it in another form (only used where |x| >= 0.1).
  """
  x = jnp.asarray(x)
  small = jnp.abs(x) < _E2_SMALL
  xs = jnp.where(small, x, _E2_SMALL / 2)
  series = jnp.zeros_like(xs)
  for c in _E2_SERIES:
    series = series * xs + c
  xm = jnp.where(small, 1.0, x)
  big = jnp.expm1(xm) if expm1_x is None else expm1_x
  return jnp.where(small, 0.5 * xs * xs * series, big - xm)


#: The unit round-off of float64 (round to nearest): |fl(x) - x| <= UNIT_ROUNDOFF |x|.
UNIT_ROUNDOFF = 2.0**-53

#: The smallest positive normal float64 (2.2250738585072014e-308).
TINY = float(np.finfo(np.float64).tiny)
_SUBNORMAL_BITS = 1 << 52  # bit patterns 1 .. 2^52 - 1 are the positive subnormals


def positive_subnormal(x):
  """Whether float64 ``x`` is a positive subnormal (0 < x < TINY).

  XLA on CPU reads subnormal operands as 0 (denormals-are-zero), so ``x > 0``,
  ``x == 0`` and ``log(x)`` are all wrong for them inside compiled code; the bit
  pattern, an integer, is not affected. No derivative flows through the test.
  """
  bits = jax.lax.bitcast_convert_type(jax.lax.stop_gradient(x), jnp.int64)
  return (bits > 0) & (bits < _SUBNORMAL_BITS)


def raise_subnormal(x):
  """``x`` with positive subnormals replaced by TINY (rounded up to the smallest normal).

  For an argument that privacy loss is non-decreasing in (q, steps), this is a
  sound upper bound where XLA would otherwise read the value as 0.
  """
  return jnp.where(positive_subnormal(x), TINY, x)


def log1p_rate_expm1(r, x):
  """``log(1 + r (e^x - 1)) = log(1 - r + r e^x)`` for ``r`` in ``[0, 1]`` and any real ``x``.

  ``log1p(r expm1(x))`` up to ``x = 1`` (accurate for small ``x``), and
  ``logaddexp(log(1 - r), log r + x)`` above, which never forms ``e^x`` (it
  overflows beyond 709); ``x`` itself at ``r = 1``. It is the privacy loss of a
  Poisson-subsampled mechanism at rate ``r`` whose loss is ``x``, and the
  amplified epsilon of subsampling. Derivatives stay finite at both ends of ``r``.
  """
  low = x <= 1.0
  near = jnp.log1p(r * jnp.expm1(jnp.where(low, x, 0.0)))
  inner = (r > 0) & (r < 1)
  r_s = jnp.where(inner, r, 0.5)
  far = jnp.logaddexp(jnp.log1p(-r_s), jnp.log(r_s) + jnp.where(low, 1.0, x))
  far = jnp.where(r >= 1, x, jnp.where(r <= 0, 0.0, far))
  return jnp.where(r >= 1, x, jnp.where(low, near, far))


# Sampling rates in (0, RATE_FLOOR) are computed at RATE_FLOOR. Privacy loss is
# non-decreasing in the rate (the Sampled Gaussian at rate q is a post-processing
# of the one at any q' > q: keep its output with probability q / q', else draw the
# no-sample output afresh), so this is sound, and at 1e-300 every epsilon is 0 and
# every delta below 1e-290; the kernels' products of rates stay normal floats.
RATE_FLOOR = 1e-300


def floor_rate(q):
  """``q`` with values in ``(0, RATE_FLOOR)``, subnormals included, raised to RATE_FLOOR."""
  low = positive_subnormal(q) | ((q > 0) & (q < RATE_FLOOR))
  return jnp.where(low, RATE_FLOOR, q)


def log_subnormal_safe(x):
  """log(x), exact for positive subnormal x too (x = m 2^-1074 with integer m < 2^52)."""
  sub = positive_subnormal(x)
  m = jnp.where(sub, jax.lax.bitcast_convert_type(jax.lax.stop_gradient(x), jnp.int64), 1)
  return jnp.where(
    sub, jnp.log(m.astype(jnp.float64)) - 1074.0 * math.log(2.0), jnp.log(jnp.where(sub, 1.0, x))
  )


_SQRT_HALF = 0.7071067811865476
_HALF_LOG_2PI = 0.9189385332046728
# Below this x, log Phi(x) comes from its asymptotic series (erfc would underflow near -37).
_SERIES_BELOW = -30.0


def log_ndtr(x):
  """``log Phi(x)`` from one ``erfc``, for every real ``x``, safe for ``jax.grad``.

  ``log(erfc(-x / sqrt 2) / 2)`` for ``x < 0``, ``log1p(-erfc(x / sqrt 2) / 2)``
  above, and below ``-30`` the asymptotic series ``-x^2/2 - log(-x sqrt(2 pi)) +
  log(1 - 1/x^2 + 3/x^4 - 15/x^6 + 105/x^8)`` (next term 945/x^10 < 2e-12
  relative). Against ``scipy.special.log_ndtr`` on [-60, 12]: within 5e-14
  relative, where ``jax.scipy.special.log_ndtr`` is off by up to 2e-10 on
  (0, 5) and 8e-2 on (5, 12) (it takes the log of a rounded ``1 - Phi(-x)``),
  and at 60% of its cost (it evaluates its three branches and two error
  functions for every point).
  """
  # Each branch sees x only where it is taken (elsewhere a harmless constant),
  # so no branch takes log 0 and every derivative is finite.
  low = x < _SERIES_BELOW
  xa = jnp.where(x >= 0, x, 0.0)
  above = jnp.log1p(-0.5 * jax.scipy.special.erfc(xa * _SQRT_HALF))
  xb = jnp.where(low, _SERIES_BELOW, x)
  below = jnp.log(0.5 * jax.scipy.special.erfc(-xb * _SQRT_HALF))
  xs = jnp.where(low, x, _SERIES_BELOW)
  r = 1.0 / (xs * xs)
  poly = r * (-1.0 + r * (3.0 + r * (-15.0 + 105.0 * r)))
  series = -0.5 * xs * xs - jnp.log(-xs) - _HALF_LOG_2PI + jnp.log1p(poly)
  return jnp.where(x >= 0, above, jnp.where(low, series, below))
