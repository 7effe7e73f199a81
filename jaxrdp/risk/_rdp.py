"""Attack risk from Renyi DP: certified (looser) bounds on the TPR and the advantage.

A test of false-positive rate ``a`` and true-positive rate ``b`` between the
outputs ``P`` and ``Q`` is a post-processing to ``Bernoulli(b)`` against
``Bernoulli(a)``, so by data processing, at every order ``lambda > 1``,

    d_lambda(b || a) <= D_lambda(P || Q) <= R(lambda)  and  d_lambda(a || b) <= R(lambda),

with ``(lambda - 1) d_lambda(b || a) = log(b^lambda a^{1-lambda} + (1 - b)^lambda
(1 - a)^{1-lambda})`` and ``R = T sgm_rdp(q, sigma, lambda)``, which bounds both
orderings of the add/remove pair (Mironov, Talwar, Zhang 2019,
arXiv:1908.10530, Thm 5). The largest ``b`` meeting both at one order is the
best TPR bound that order's guarantee gives (Balle et al. 2020,
arXiv:1905.09982, Sec. 4; Zhu, Dong, Wang 2022, arXiv:2106.08567, App. F.1);
the bound is the minimum over the orders. Both constraints grow with ``b`` on
``[a, 1]``, so ``b`` is found by bisection and the upper end of the bracket is
returned (never below the root; the constraints are evaluated with a margin
that covers their rounding).

The advantage ``max_a (TPR(a) - a)`` is bounded by the smaller of the Renyi-DP
delta at epsilon 0 (:func:`jaxrdp.rdp_to_delta`, which includes the
Bretagnolle-Huber bound) and, at the few orders whose delta at 0 is least, the
maximum over ``a`` of ``b_lambda(a) - a``: a concave function of ``a`` (Renyi
divergences are jointly quasi-convex, van Erven and Harremoes 2014,
arXiv:1206.2459, Thm 13, so the feasible set is convex), located on a grid and
refined twice around the best point; on a cell ``[a_j, a_{j+1}]`` of the last
grid it is at most ``b(a_{j+1}) - a_j`` (``b`` increases).

Any set of orders gives valid bounds; the default (``RISK_ORDERS``, 38 orders
from 1.05 to 4096) costs a fifth of jaxrdp's 176 default orders, whose exact
SGM Renyi DP dominates the cost, and its TPR bound at 1% FPR was within 1.7%
of theirs on the standard grid. These bounds use only the Renyi curve, so they
are far looser than the PLD readers; they suit grids too large for those.
There is no useful lower bound from Renyi DP: the lower bounds returned are the
trivial ``a`` (TPR) and 0 (advantage).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..rdp._conversions import delta_from_rdp_f64

__all__ = ["RISK_ORDERS", "tpr_bound", "advantage_bound"]

#: Default orders of the Renyi-DP risk bounds.
RISK_ORDERS = np.array(
  [1.05, 1.1, 1.2, 1.35, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28]
  + [32, 40, 48, 56, 64, 80, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096],
  dtype=np.float64,
)

# Bisection steps on b in [a, 1] (2^-64 of the bracket: below float64's resolution).
_STEPS = 64
# Orders at which the advantage's maximum over a is located.
_ADVANTAGE_ORDERS = 3
# Grid points per level of that maximization, and levels.
_GRID = 33
_LEVELS = 3
# Added to the advantage bound for the location of a concave maximum from
# computed values (each within float64 rounding of the exact one).
_ADVANTAGE_SLACK = 1e-9


def _infeasible(b, a, lam, budget):
  """True where ``(a, b)`` violates one of the two binary constraints at order ``lam``."""
  log_a, log1m_a = jnp.log(a), jnp.log1p(-a)
  log_b, log1m_b = jnp.log(b), jnp.log1p(-b)
  forward = jnp.logaddexp(lam * log_b + (1.0 - lam) * log_a, lam * log1m_b + (1.0 - lam) * log1m_a)
  reverse = jnp.logaddexp(lam * log_a + (1.0 - lam) * log_b, lam * log1m_a + (1.0 - lam) * log1m_b)
  # The terms are up to lam |log a| in size; their rounding is covered by the margin.
  margin = 1e-13 * lam * (2.0 + jnp.abs(log_a) + jnp.abs(log1m_a)) + 1e-12 * budget
  limit = budget + margin
  return (forward > limit) | (reverse > limit)


def _largest_b(a, lam, budget):
  """The upper end of the bisection bracket of ``max {b in [a, 1]: feasible}`` (elementwise)."""
  a, lam, budget = jnp.broadcast_arrays(a, lam, jnp.maximum(budget, 0.0))
  one_ok = ~_infeasible(jnp.ones_like(a), a, lam, budget)

  def body(_, lohi):
    lo, hi = lohi
    mid = 0.5 * (lo + hi)
    bad = _infeasible(mid, a, lam, budget)
    return jnp.where(bad, lo, mid), jnp.where(bad, mid, hi)

  _, hi = jax.lax.fori_loop(0, _STEPS, body, (a, jnp.ones_like(a)))
  return jnp.where(one_ok, 1.0, hi)


def tpr_bound(a, rdp_total, orders):
  """Certified upper bound of the TPR at FPR ``a`` from a Renyi curve.

  Args:
    a: ``(...)`` false-positive rates in (0, 1).
    rdp_total: ``(..., K)`` Renyi DP of the whole mechanism at ``orders``.
    orders: ``(K,)`` finite orders > 1.
  """
  budget = (orders - 1.0) * rdp_total  # (lam - 1) R
  return jnp.min(_largest_b(a[..., None], orders, budget), axis=-1)


def _logistic(u):
  return 0.5 * (1.0 + jnp.tanh(0.5 * u))


def advantage_bound(rdp_total, orders):
  """Certified upper bound of the advantage from a Renyi curve ``(..., K)`` at ``orders``."""
  lam = orders
  delta0 = delta_from_rdp_f64(rdp_total, orders, jnp.zeros(rdp_total.shape[:-1]), "improved").delta
  # The orders with the least delta at 0 (per order, the improved conversion).
  log_d = (lam - 1.0) * (rdp_total + jnp.log1p(-1.0 / lam)) - jnp.log(lam)
  pick = jnp.argsort(log_d, axis=-1)[..., :_ADVANTAGE_ORDERS]
  lam_k = orders[pick]  # (..., k)
  budget = (lam_k - 1.0) * jnp.take_along_axis(rdp_total, pick, axis=-1)

  def tpr(a):  # (..., G) -> (..., G): min over the picked orders
    return jnp.min(_largest_b(a[..., None], lam_k[..., None, :], budget[..., None, :]), axis=-1)

  # Level 0: a in logit space over (e^-30, 1 - e^-30); then twice around the best point
  # (one loop, so that the bisection is compiled once).
  t = jnp.linspace(0.0, 1.0, _GRID)
  shape = rdp_total.shape[:-1]

  def level(_, carry):
    u_lo, u_hi = carry[:2]
    u = u_lo[..., None] + (u_hi - u_lo)[..., None] * t
    a = _logistic(u)
    b = tpr(a)
    i = jnp.argmax(b - a, axis=-1).astype(jnp.int32)
    i_lo = jnp.clip(i - 1, 0, _GRID - 1)
    i_hi = jnp.clip(i + 1, 0, _GRID - 1)
    new_lo = jnp.take_along_axis(u, i_lo[..., None], axis=-1)[..., 0]
    new_hi = jnp.take_along_axis(u, i_hi[..., None], axis=-1)[..., 0]
    return new_lo, new_hi, b, a, i_lo, i_hi

  zeros = jnp.zeros(shape + (_GRID,))
  first = jnp.zeros(shape, jnp.int32)
  init = (jnp.full(shape, -30.0), jnp.full(shape, 30.0), zeros, zeros, first, first)
  _, _, last_b, last_a, i_lo, i_hi = jax.lax.fori_loop(0, _LEVELS, level, init)
  # On [a_j, a_{j+1}]: TPR - a <= b(a_{j+1}) - a_j; the maximum lies in [a_{i-1}, a_{i+1}]
  # (concavity), and the ends of the range (a < e^-30 or a > 1 - e^-30) add at most e^-30.
  cells = last_b[..., 1:] - last_a[..., :-1]
  j = jnp.arange(_GRID - 1)
  inside = (j >= i_lo[..., None]) & (j < i_hi[..., None])
  local = jnp.max(jnp.where(inside, cells, -jnp.inf), axis=-1)
  ends = jnp.exp(-30.0) * 2.0
  concave = jnp.maximum(local, jnp.max(last_b - last_a, axis=-1)) + ends + _ADVANTAGE_SLACK
  return jnp.clip(jnp.minimum(delta0, concave), 0.0, 1.0)
