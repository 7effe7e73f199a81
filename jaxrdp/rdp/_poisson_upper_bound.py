"""A certified upper bound on the RDP of a Poisson-subsampled mechanism, from its own RDP curve.

Let ``p = M(S)`` and ``r = M(S + {z})`` be the inner mechanism's outputs on a sample
without and with the differing record, and ``eps(l)`` a bound on the inner mechanism's
RDP in both directions, ``D_l(r || p) <= eps(l)`` and ``D_l(p || r) <= eps(l)`` (an
add/remove RDP curve). Poisson sampling at rate ``g`` gives the pair ``m = (1 - g) p +
g r`` and ``p``; add/remove needs both orders of it. At an integer order ``a >= 2``:

* ``D_a(m || p)``: with ``x = r / p``, ``E_p[(1 - g + g x)^a] = sum_l C(a, l) (1 - g)^(a-l)
  g^l E_p[x^l]`` and ``E_p[x^l] = exp((l - 1) D_l(r || p))`` (``= 1`` for ``l = 0, 1``),
  a sum of non-negative terms (the binomial expansion of Zhu and Wang 2019, whose value
  is exact for the Gaussian and Laplace mechanisms). Subtracting
  ``1 = sum_l C(a, l) (1 - g)^(a-l) g^l`` leaves ``A - 1 = sum_{l >= 2} C(a, l) (1 - g)^(a-l)
  g^l expm1((l - 1) eps(l))``, no cancellation.
* ``D_a(p || m)``: ``p / m = 1 + g (p - r) / m``, so ``E_m[(p / m)^a] = 1 + sum_{l >= 2}
  C(a, l) g^l int (p - r)^l m^(1-l)`` (the ``l = 1`` term integrates to 0). Each integral
  is at most ``int |p - r|^l m^(1-l) <= (1 - g) E_p|1 - y|^l + g E_r|1 - 1/y|^l`` with
  ``y = r / p`` (``t^(1-l)`` is convex for ``l >= 2``). For ``l >= 2`` and ``y >= 0``,
  ``|1 - y|^l <= y^l - 1 - l (y - 1)`` (equality at ``l = 2``; below 1, with ``t = 1 - y``,
  the difference has derivative ``l (1 - t^(l-1) - (1 - t)^(l-1)) >= 0`` and is 0 at
  ``t = 0``; above 1 the right side is the binomial expansion of ``(1 + (y - 1))^l``
  less non-negative terms), and ``E_p[y] = 1``, so ``E_p|1 - y|^l <= E_p[y^l] - 1 =
  expm1((l - 1) D_l(r || p))``, and likewise under ``r``. So ``B - 1 <= sum_{l >= 2}
  C(a, l) g^l expm1((l - 1) eps(l))``: ``A``'s sum without its factors ``(1 - g)^(a-l)``,
  the same to leading order in ``g`` (``C(a, 2) g^2 expm1(eps(2))``).

``B``'s bound is the larger of the two, so it is the one evaluated: as ``log(B - 1)``, a
logsumexp over ``l`` with log-binomials, so nothing overflows at large orders and a
small ``g`` keeps its relative precision; the RDP at ``a`` is ``log1p(B - 1) / (a - 1)``,
rounded up by ``1e-12`` (relative) to cover float64 rounding. A fractional order takes
the bound at the next integer order (RDP is non-decreasing in the order). Subsampling
never increases RDP: by joint convexity of ``exp((a - 1) D_a)``, at any real order both
directions are at most ``log1p(g expm1((a - 1) eps(a))) / (a - 1) <= eps(a)``, a cap on
the result, and all that is used above :data:`INTEGER_ORDER_CAP`. At ``alpha = inf``: ``max(log1p(g expm1(eps_inf)),
-log1p(-g (1 - exp(-eps_inf))))``, the largest log-ratio of each direction.

The reverse direction is bounded here rather than by Zhu and Wang's general bound (their
Theorem 6, with a factor 3 on the terms ``l >= 3``), whose coverage of both directions
could not be checked against the paper's text; the bound above is derived in full in
this docstring.

References:
  Zhu, Wang 2019, "Poisson Subsampled Renyi Differential Privacy", ICML 2019, PMLR 97
  (proceedings.mlr.press/v97/zhu19c; no arXiv id was found for it).
  Mironov 2017, "Renyi Differential Privacy", arXiv:1702.07476 (monotonicity in the order).
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
from jax.nn import logsumexp

__all__ = ["INTEGER_ORDER_CAP", "integer_orders_needed", "poisson_upper_bound_f64"]

#: Orders above this (finite) get the inner curve itself (no amplification): the bound
#: sums ``ceil(alpha) + 1`` terms per order.
INTEGER_ORDER_CAP = 256

_ROUND_UP = 1.0 + 1e-12


def integer_orders_needed(orders: np.ndarray) -> np.ndarray:
  """The integer orders ``2..L`` at which the inner curve is needed (``L`` may be 1: none)."""
  top = _tables(tuple(float(x) for x in np.asarray(orders, dtype=np.float64)))[3]
  return np.arange(2, top + 1, dtype=np.float64)


@functools.lru_cache(maxsize=32)
def _tables(orders_key: tuple[float, ...]):
  """(used mask [n], k [n_used], log C(k, l) [n_used, L + 1] with -inf for l > k, L)."""
  orders = np.asarray(orders_key, dtype=np.float64)
  used = np.isfinite(orders) & (orders <= INTEGER_ORDER_CAP)
  k = np.ceil(orders[used])
  top = int(k.max()) if k.size else 1
  ls = np.arange(top + 1)
  lg = np.array([math.lgamma(x + 1.0) for x in range(top + 1)])
  log_c = np.full((k.size, top + 1), -np.inf)
  for j, kj in enumerate(k.astype(int)):
    log_c[j, : kj + 1] = lg[kj] - lg[: kj + 1] - lg[kj - ls[: kj + 1]]
  return used, k, log_c, top


def _log_expm1(y):
  """log(expm1(y)) for y >= 0; -inf at 0 (with finite gradients), NaN for NaN."""
  big = y > 0.5
  y_big = jnp.where(big & (y < jnp.inf), y, 1.0)
  form_big = jnp.where(y < jnp.inf, y_big + jnp.log1p(-jnp.exp(-y_big)), jnp.inf)
  v = jnp.expm1(jnp.where(big, 0.5, y))
  form_small = jnp.log(jnp.where(v > 0, v, 1.0))
  out = jnp.where(big, form_big, jnp.where(v > 0, form_small, -jnp.inf))
  return jnp.where(jnp.isnan(y), jnp.nan, out)


def poisson_upper_bound_f64(q, inner_int, inner_at, orders):
  """Upper bound on the add/remove RDP of the inner mechanism Poisson-sampled at rate ``q``.

  Args:
    q: float64 ``[batch..., 1]``, the sampling rate (traceable; outside [0, 1]: NaN).
    inner_int: float64 ``[batch..., L - 1]``, the inner RDP curve at the orders
      :func:`integer_orders_needed` gives (``2..L``), bounding both directions.
    inner_at: float64 ``[batch..., n]``, the inner curve at ``orders``.
    orders: the ``n`` orders, a concrete numpy array (static).

  Returns:
    float64 ``[batch..., n]``: the module's bound (see its docstring).
  """
  orders = np.asarray(orders, dtype=np.float64)
  used, k, log_c, top = _tables(tuple(float(x) for x in orders))
  batch = jnp.broadcast_shapes(q.shape[:-1], inner_int.shape[:-1], inner_at.shape[:-1])
  inner_at = jnp.broadcast_to(inner_at, batch + orders.shape)
  ordinary = (q > 0) & (q < 1)
  g = jnp.where(ordinary, q, 0.5)[..., None]  # [batch..., 1, 1]
  out = inner_at
  if k.size:
    eps = jnp.broadcast_to(inner_int, batch + (top - 1,))[..., None, :]  # [batch..., 1, L-1]
    ls = np.arange(2, top + 1, dtype=np.float64)
    y = (ls - 1.0) * eps  # (l - 1) eps(l)
    lc = log_c[:, 2:]  # [n_used, L - 1], -inf beyond k
    # A's terms carry (1 - g)^(k - l) <= 1 more than B's: B's bound is the larger.
    b_terms = lc + ls * jnp.log(g) + _log_expm1(y)
    excess = logsumexp(b_terms, axis=-1)
    rdp_k = jnp.logaddexp(0.0, excess) / (k - 1.0) * _ROUND_UP
    out = out.at[..., used].set(jnp.minimum(rdp_k, inner_at[..., used]))
  # Joint convexity of exp((a - 1) D_a) in the pair, at every finite order (both
  # directions): (a - 1) D_a <= log(1 - g + g exp((a - 1) eps(a))).
  finite = np.isfinite(orders)
  if finite.any():
    t = orders[finite] - 1.0
    x_raw = t * inner_at[..., finite]
    x = jnp.where(x_raw < jnp.inf, x_raw, 0.0)  # inf: routed around (finite derivatives)
    g1 = g[..., 0]
    small = jnp.log1p(g1 * jnp.expm1(jnp.minimum(x, 700.0)))
    large = jnp.logaddexp(jnp.log1p(-g1), jnp.log(g1) + x)
    cap = jnp.where(x < 700.0, small, large) / t * _ROUND_UP
    cap = jnp.where(x_raw < jnp.inf, cap, jnp.inf)
    out = out.at[..., finite].set(jnp.minimum(out[..., finite], cap))
  at_inf = np.isinf(orders)
  if at_inf.any():
    e_inf = inner_at[..., at_inf]
    e_s = jnp.where(e_inf < jnp.inf, e_inf, 0.0)  # inf: routed around (finite derivatives)
    g1 = g[..., 0]
    add = jnp.log1p(g1 * jnp.expm1(e_s))
    remove = -jnp.log1p(-g1 * (-jnp.expm1(-e_s)))
    val = jnp.minimum(jnp.maximum(add, remove) * _ROUND_UP, e_s)
    out = out.at[..., at_inf].set(jnp.where(e_inf < jnp.inf, val, e_inf))
  out = jnp.where(q == 0, 0.0, jnp.where(q == 1, inner_at, out))
  return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), jnp.nan, out)
