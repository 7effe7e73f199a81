"""The minimum of epsilon over a grid of orders without evaluating every order.

epsilon(alpha) = conv(T * f(alpha) / (alpha - 1), alpha) with f = log A_alpha is
increasing in f, and f is convex in alpha with f(0) = f(1) = 0 (log E[X^alpha]
is convex by Hoelder's inequality). So exact values of f on a coarse set of
integer orders (cheap: the positive finite series) bound f at every other order:

    upper: the chord between the neighbouring coarse points, and
           f(alpha) <= alpha (alpha - 1) / (2 sigma^2) (the SGM is never worse
           than the Gaussian mechanism it subsamples);
    lower: the secants of the neighbouring coarse intervals, extended (a convex
           function lies above them outside their interval), and 0.

Only the orders whose lower bound could still beat the best upper bound can be
optimal. The _CANDIDATES most promising of them are evaluated exactly; every
other order contributes its (valid) upper bound. The result is therefore always
a sound epsilon, and it is the exact minimum over the grid whenever at most
_CANDIDATES orders remain in contention, which ``exact`` reports.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import jax
import jax.numpy as jnp

from ._conversions import _epsilon_per_order
from ._numerics import argmin_last
from ._sgm import _log_a_f64
from ._validation import StaticArray

__all__ = ["SearchResult", "min_epsilon_over_orders"]

_COARSE = np.array([2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 24, 32, 48, 64], dtype=np.float64)
_CANDIDATES = 16


class SearchResult(NamedTuple):
  epsilon: jax.Array
  order: jax.Array
  exact: jax.Array  # True where the result equals the exact grid minimum


def _secant(x0, f0, x1, f1):
  return (f1 - f0) / (x1 - x0)


def min_epsilon_over_orders(q, sigma, steps, delta, orders, method):
  """epsilon = min over ``orders`` (concrete 1-D) of the DP-SGD bound.

  q, sigma, steps, delta: float64 arrays broadcast to one batch shape.
  """
  orders = np.asarray(orders, dtype=np.float64)
  finite = orders[np.isfinite(orders)]
  is_int = finite == np.round(finite)
  coarse = np.unique(np.concatenate([_COARSE, finite[is_int & (finite <= 65)]]))
  others = np.setdiff1d(finite, coarse)
  has_inf = bool(np.isinf(orders).any())

  qb, sb, tb, db = (x[..., None] for x in (q, sigma, steps, delta))

  def eps_of(f, alpha):
    rdp = jnp.where(tb == 0, 0.0, tb * f / (alpha - 1.0))
    return _epsilon_per_order(rdp, alpha, db[..., 0], method)

  f_coarse = _log_a_f64(qb, sb, coarse, StaticArray(coarse))  # [..., C] exact, cheap (series)
  # Coarse points outside the user's grid only bound the others; they are not
  # eligible as the answer (the result is the minimum over ``orders``).
  in_grid = np.isin(coarse, finite)
  eps_coarse = jnp.where(in_grid, eps_of(f_coarse, coarse), jnp.inf)
  cand_eps, cand_alpha = [eps_coarse], [jnp.broadcast_to(coarse, eps_coarse.shape)]
  exact = jnp.ones(eps_coarse.shape[:-1], dtype=bool)

  if others.size:
    # Coarse grid with the two free points f(0) = f(1) = 0.
    xs = np.concatenate([[0.0, 1.0], coarse])
    fs = jnp.concatenate([jnp.zeros(f_coarse.shape[:-1] + (2,)), f_coarse], axis=-1)
    i = np.searchsorted(xs, others) - 1  # xs[i] < alpha < xs[i + 1] (or beyond the end)
    inside = i + 1 < xs.size
    i0 = np.minimum(i, xs.size - 2)
    x0, x1 = xs[i0], xs[i0 + 1]
    f0, f1 = fs[..., i0], fs[..., i0 + 1]
    chord = f0 + (others - x0) * _secant(x0, f0, x1, f1)
    # f is finite at every coarse point unless sigma = 0 (then all are inf).
    s2 = jnp.where(sb > 0, sb * sb, 1.0)
    gauss = jnp.where(sb > 0, others * (others - 1.0) / (2.0 * s2), jnp.inf)
    upper = jnp.where(inside, jnp.minimum(chord, gauss), gauss)
    # Lower bounds: secant of the interval to the left, extended to the right...
    il = np.clip(np.minimum(i, xs.size - 1) - 1, 0, None)
    left = fs[..., il + 1] + (others - xs[il + 1]) * _secant(xs[il], fs[..., il], xs[il + 1], fs[..., il + 1])
    # ... and of the interval to the right, extended to the left (where it exists).
    ir = np.minimum(i + 1, xs.size - 2)
    has_right = i + 2 < xs.size
    right = fs[..., ir] - (xs[ir] - others) * _secant(xs[ir], fs[..., ir], xs[ir + 1], fs[..., ir + 1])
    lower = jnp.maximum(jnp.maximum(left, jnp.where(has_right, right, -jnp.inf)), 0.0)
    lower = jnp.minimum(lower, upper)  # guards rounding when the bounds meet
    # NaN (invalid traced input) must stay NaN, not vanish in max/min.
    nan = jnp.isnan(f0)
    lower = jnp.where(nan, jnp.nan, lower)
    upper = jnp.where(nan, jnp.nan, upper)
    eps_lo = eps_of(lower, others)
    eps_hi = eps_of(upper, others)
    k = min(_CANDIDATES, others.size)
    # Smallest lower bounds first (top_k of the negation); NaN rows stay NaN below.
    neg, idx = jax.lax.top_k(jnp.where(jnp.isnan(eps_lo), -jnp.inf, -eps_lo), k)
    alpha_c = jnp.asarray(others)[idx]
    f_c = _log_a_f64(qb, sb, alpha_c)  # exact, traced orders -> quadrature
    eps_c = eps_of(f_c, alpha_c)
    cand_eps += [eps_hi, eps_c]
    cand_alpha += [jnp.broadcast_to(others, eps_hi.shape), alpha_c]
    best = jnp.minimum(jnp.min(eps_coarse, axis=-1), jnp.min(eps_c, axis=-1))
    # Exact iff no unevaluated order's lower bound is below the best exact value.
    evaluated = jnp.zeros(eps_lo.shape, dtype=bool)
    evaluated = jnp.any(jnp.arange(others.size) == idx[..., :, None], axis=-2)
    exact = jnp.all(evaluated | (eps_lo >= best[..., None]), axis=-1)

  if has_inf:
    # alpha = inf: RDP is inf for q > 0 and 0 for q = 0; the bound is the RDP.
    inf_eps = jnp.where((qb == 0) | (tb == 0), 0.0, jnp.inf)
    cand_eps.append(inf_eps)
    cand_alpha.append(jnp.full(inf_eps.shape, jnp.inf))

  all_eps = jnp.concatenate(cand_eps, axis=-1)
  all_alpha = jnp.concatenate(cand_alpha, axis=-1)
  j = argmin_last(all_eps)
  eps = jnp.take_along_axis(all_eps, j[..., None], axis=-1)[..., 0]
  order = jnp.take_along_axis(all_alpha, j[..., None], axis=-1)[..., 0]
  eps = jnp.maximum(eps, 0.0)
  # No privacy loss at all (q = 0, no steps, or infinite noise): (0, 0)-DP.
  eps = jnp.where((q == 0) | (steps == 0) | jnp.isinf(sigma), 0.0, eps)
  eps = jnp.where(~((delta > 0) & (delta < 1)), jnp.nan, eps)
  return SearchResult(eps, order, exact)
