"""Gradient-safe scalar helpers for log-space arithmetic.

Every function here is elementwise, pure ``jnp``, and joins its regimes with the
"double where" pattern: the input of the branch not taken is replaced by a safe
value first, so neither the value nor the gradient of the unused branch can be
NaN (JAX FAQ, "Gradients contain NaN where using where").
"""

from __future__ import annotations

import math

import jax.numpy as jnp

__all__ = ["log_expm1_minus_x", "log_gaussian_pdf", "argmin_last"]

# Taylor coefficients of (e^x - 1 - x) / (x^2 / 2) = sum_k 2 x^k / (k + 2)!,
# highest order first for Horner's rule. For |x| <= 0.1 the first omitted term
# is 2 * 0.1^13 / 15! ~ 1.5e-25 relative: far below float64 resolution.
_E2_SERIES = tuple(2.0 / math.factorial(k + 2) for k in range(13))[::-1]
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


def log_gaussian_pdf(z, sigma):
  """log of the N(0, sigma^2) density at z."""
  return -0.5 * jnp.square(z / sigma) - jnp.log(sigma) - 0.5 * math.log(2.0 * math.pi)


def argmin_last(v):
  """Index of the first minimum along the last axis (int32).

  Built from min reductions rather than jnp.argmin: argmin lowers to a variadic
  reduce whose initial values follow the *global* x64 flag, which breaks when a
  float64 kernel is traced inside a caller's float32 jit. NaN rows give 0.
  """
  n = v.shape[-1]
  idx = jnp.arange(n, dtype=jnp.int32)
  hit = v == jnp.min(v, axis=-1, keepdims=True)
  return jnp.min(jnp.where(hit, idx, jnp.int32(n)), axis=-1) % jnp.int32(n)
