"""log(A_alpha - 1) of the SGM for integer alpha by a positive finite series.

For integer alpha = n the binomial expansion of A_alpha is finite (Mironov,
Talwar, Zhang 2019, arXiv:1908.10530, Sec. 3.2). Because the
binomial weights sum to 1 and the k = 0, 1 terms have exponent 0, the excess has
only non-negative terms:

    A_n - 1 = sum_{k=2..n} C(n, k) (1 - q)^(n - k) q^k expm1((k^2 - k) / (2 sigma^2)),

so a logsumexp of the log-terms has full relative accuracy even when
A_n - 1 ~ 1e-20 (where log A_n as a logsumexp of the plain terms rounds to 0).

Orders n <= _FULL + 1 are summed completely. Larger orders sum two windows of
_WINDOW terms around the (at most two) maxima of the term log-weights (found as
in ``_sgm_quadrature``) and report whether the neglected terms could matter; the
caller then falls back to quadrature for those entries.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from .._core.numerics import log_binomial, log_expm1
from .._core.static_index import concatenate_to, take_last
from ..mechanisms._sgm_quadrature import _bump_maxima, _spread

__all__ = [
  "log_a_minus_1_integer_full",
  "log_a_minus_1_integer_grid",
  "log_a_minus_1_integer_windowed",
  "FULL_MAX_ORDER",
]

_FULL = 64
FULL_MAX_ORDER = _FULL + 1  # orders 2.._FULL+1 have at most _FULL terms (k = 2..n)
_WINDOW = 64  # terms per window for larger orders (two windows)

# log C(n, k) for n = 0..FULL_MAX_ORDER and k = 2..FULL_MAX_ORDER+1 (-inf beyond n).
_LOG_BINOM = np.full((FULL_MAX_ORDER + 1, _FULL), -np.inf)
for _n in range(2, FULL_MAX_ORDER + 1):
  for _j in range(_FULL):
    _k = _j + 2
    if _k <= _n:
      _LOG_BINOM[_n, _j] = math.lgamma(_n + 1) - math.lgamma(_k + 1) - math.lgamma(_n - _k + 1)


def _log_terms(k, log_binom, q, sigma, n):
  kk = k * k - k
  return (
    log_binom + k * jnp.log(q) + (n - k) * jnp.log1p(-q) + log_expm1(kk / (2.0 * sigma * sigma))
  )


def log_a_minus_1_integer_full(q, sigma, n):
  """Exact log(A_n - 1) for float64 q, sigma [..., m] and a static int array n [m] <= FULL_MAX_ORDER.

  Requires 0 < q < 1, sigma > 0 (the caller handles the edges).
  """
  n = np.asarray(n, dtype=np.int64)
  log_binom = jnp.asarray(_LOG_BINOM)[jnp.asarray(n, dtype=jnp.int32)]  # [m, _FULL]
  k = jnp.arange(2, _FULL + 2, dtype=jnp.float64)[None, :]
  nf = jnp.asarray(n, dtype=jnp.float64)[:, None]
  # q, sigma: [..., m] against n: [m] (a 1-D batch, or a batch of order grids).
  terms = _log_terms(k, log_binom, q[..., None], sigma[..., None], nf)
  # Beyond k = n log_binom is -inf; keep the masked terms finite for gradients.
  terms = jnp.where(jnp.isfinite(log_binom), terms, -jnp.inf)
  return logsumexp(terms, axis=-1)


# Order blocks of log_a_minus_1_integer_grid: orders in (previous bound, bound]
# sum only their k = 2..(largest order of the block) terms, so little of the
# work is on the zero terms k > n (63 orders 2..64: 2,361 terms instead of 4,032).
_GRID_BLOCKS = (8, 16, 24, 32, 48, FULL_MAX_ORDER)


def _log_sum_exp_shifted(d):
  """log(sum(exp(d))) along the last axis, for terms already shifted to d <= 0."""
  return jnp.log(jnp.sum(jnp.exp(d), axis=-1))


def log_a_minus_1_integer_grid(q, sigma, n):
  """As log_a_minus_1_integer_full for a batch q, sigma [...] against orders n [m]: [..., m].

  The terms are log C(n, k) + n log(1 - q) + c_k with
  c_k = k log(q / (1 - q)) + log expm1((k^2 - k) / (2 sigma^2)), and c_k does not
  depend on the order: it is computed once per configuration and shared by
  every order (4x less work than the elementwise form for 63 orders). Each
  order's terms are shifted by max_k log C(n, k) (a constant) plus the running
  maximum C_n of c_k over k <= n, instead of by their own maximum: then every
  shifted term is <= 0 and the largest is >= -max_k log C(n, k) >= -44 (as
  C(n, k) >= 1), so nothing overflows or loses precision, and no pass over the
  terms is spent on finding their maximum.
  The orders are summed in blocks (_GRID_BLOCKS), each over its own number of terms.
  """
  n = np.asarray(n, dtype=np.int64)
  if n.size == 0 or n.min() < 2 or n.max() > FULL_MAX_ORDER:
    raise ValueError(f"orders must be integers in [2, {FULL_MAX_ORDER}], got {n}")
  k = jnp.arange(2, _FULL + 2, dtype=jnp.float64)
  q, sigma = q[..., None], sigma[..., None]
  log1m_q = jnp.log1p(-q)
  c = k * (jnp.log(q) - log1m_q) + log_expm1((k * k - k) / (2.0 * sigma * sigma))  # [..., _FULL]
  # The shift only scales the sum: no derivative flows through it.
  running_max = jax.lax.stop_gradient(jax.lax.associative_scan(jnp.maximum, c, axis=c.ndim - 1))
  parts, positions = [], []
  low = 1
  for high in _GRID_BLOCKS:
    i = np.flatnonzero((n > low) & (n <= high))
    low = high
    if not i.size:
      continue
    terms = int(n[i].max()) - 1  # k = 2..max n
    log_binom = _LOG_BINOM[n[i], :terms]  # [m_block, terms], -inf where k > n (exp gives 0)
    top = log_binom.max(axis=-1)
    c_n = take_last(running_max, n[i] - 2)  # [..., m_block]
    # C_n = +-inf (sigma so small that the terms overflow, or so large that
    # they underflow) is the result itself; the shifted sum would be NaN.
    safe = jnp.where(jnp.isfinite(c_n), c_n, 0.0)
    d = (log_binom - top[:, None]) + (c[..., None, :terms] - safe[..., None])
    val = _log_sum_exp_shifted(d) + (top + safe + n[i].astype(np.float64) * log1m_q)
    parts.append(jnp.where(jnp.isfinite(c_n), val, c_n))
    positions.append(i)
  return concatenate_to(parts, positions)


def _window_terms(start, q, sigma, n):
  k = start + jnp.arange(_WINDOW, dtype=jnp.float64)
  valid = (k >= 2) & (k <= n)
  ks = jnp.where(valid, k, 2.0)
  log_binom = log_binomial(n, ks)
  t = _log_terms(ks, log_binom, q, sigma, n)
  return k, valid, t


def _windowed_scalar(q, sigma, n):
  x_lo, x_hi = _bump_maxima(q, sigma, n)
  x_lo, x_hi = jax.lax.stop_gradient((x_lo, x_hi))
  quarter = _WINDOW // 4
  # Window 1 always starts at k = 2 when the lower maximum is near it, since the
  # low-order excess terms differ most from the bump weights there.
  s1 = jnp.maximum(jnp.round(x_lo) - quarter, 2.0)
  s2 = jnp.clip(jnp.round(x_hi) - 2 * quarter, s1 + _WINDOW, n - _WINDOW + 1.0)
  s2 = jnp.maximum(s2, s1 + _WINDOW)  # windows never overlap
  k1, v1, t1 = _window_terms(s1, q, sigma, n)
  k2, v2, t2 = _window_terms(s2, q, sigma, n)
  t = jnp.concatenate([jnp.where(v1, t1, -jnp.inf), jnp.where(v2, t2, -jnp.inf)])
  # Coverage: each maximum must sit inside its window with its whole spread.
  d_lo, d_hi = jax.lax.stop_gradient(_spread(jnp.stack([x_lo, x_hi]), q, sigma, n))
  lo_ok = ((x_lo - d_lo >= s1) | (s1 <= 2.0)) & (x_lo + d_lo <= s1 + _WINDOW - 1)
  hi_ok = ((x_hi - d_hi >= s2) | (x_hi + d_hi <= s1 + _WINDOW - 1)) & (
    (x_hi + d_hi <= s2 + _WINDOW - 1) | (s2 + _WINDOW - 1 >= n)
  )
  return logsumexp(t), lo_ok & hi_ok


def log_a_minus_1_integer_windowed(q, sigma, n):
  """(log(A_n - 1), covered) for 1-D float64 q, sigma, n (integer-valued).

  ``covered`` is False where the two windows may miss significant terms; those
  entries must be recomputed another way.
  """
  return jax.vmap(_windowed_scalar)(q, sigma, n)
