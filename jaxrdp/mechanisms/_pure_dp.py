"""RDP of pure-DP and bounded-range mechanisms, from their epsilon alone.

* ``pure_dp_rdp_impl(eps, alpha)``: the largest RDP of any eps-DP mechanism, that of
  binary randomized response answering truthfully with probability
  ``e^eps / (1 + e^eps)`` (every eps-DP mechanism is a post-processing of it: Kairouz,
  Oh, Viswanath 2015, arXiv:1311.0776)::

      D = log(p e^s + (1 - p) e^-s) / (alpha - 1),  s = (alpha - 1) eps,  p = e^eps / (1 + e^eps).

* ``bounded_range_rdp_impl(eps, alpha)``: an upper bound for eps-bounded-range
  mechanisms (the exponential mechanism), the smaller of the pure-DP bound and
  ``KL(eps) + eps^2 (alpha - 1) / 8`` (Cesar and Rogers 2020, arXiv:2004.07223,
  Sec. 3), ``KL(eps) = g(-log(expm1(eps) / eps))``, ``g(x) = e^x - 1 - x``.

Both are elementwise jnp kernels on float64 arrays: jit/vmap/grad compatible, NaN
for invalid (traced) arguments, ``eps = inf`` gives ``inf`` and ``alpha = inf`` the
limit (``eps`` for both).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._rdp_curves import _LARGE, _expm1_minus_x

__all__ = ["bounded_range_rdp_impl", "pure_dp_rdp_impl"]


def _invalid(eps, alpha):
  return jnp.isnan(eps) | jnp.isnan(alpha) | (eps < 0) | (alpha <= 1)


def _binary_rr(small, big, gap, ell, alpha):
  """log(big e^s + small e^-s) / (alpha - 1), s = (alpha - 1) ell, with big + small = 1.

  big e^s + small e^-s = 1 + gap s + big g(s) + small g(-s), gap = big - small >= 0,
  a sum of non-negative terms (full relative precision for small s); a log-space
  form where s is large. ``alpha = inf`` gives ``ell``.
  """
  finite = jnp.isfinite(alpha)
  t = jnp.where(finite, alpha - 1.0, 1.0)
  s = t * ell
  excess = gap * s + big * _expm1_minus_x(jnp.minimum(s, _LARGE)) + small * _expm1_minus_x(-s)
  small_form = jnp.log1p(excess) / t
  s_big = jnp.maximum(s, _LARGE)
  big_form = (s_big + jnp.log(big + small * jnp.exp(-2.0 * s_big))) / t
  out = jnp.where(s < _LARGE, small_form, big_form)
  return jnp.where(finite, out, ell)


@jax.jit
def pure_dp_rdp_impl(eps, alpha):
  """The pure-DP bound (see the module doc): float64, broadcast."""
  eps, alpha = jnp.broadcast_arrays(eps, alpha)
  ordinary = (eps > 0) & jnp.isfinite(eps)
  e = jnp.where(ordinary, eps, 1.0)
  out = _binary_rr(jax.nn.sigmoid(-e), jax.nn.sigmoid(e), jnp.tanh(0.5 * e), e, alpha)
  out = jnp.where(ordinary, out, jnp.where(eps == 0, 0.0, jnp.inf))
  return jnp.where(_invalid(eps, alpha), jnp.nan, out)


def _max_kl_bounded_range(e):
  """g(-log(expm1(e) / e)): the largest KL divergence of an e-bounded-range pair (e > 0)."""
  # log(expm1(e) / e) = log1p(g(e) / e), or e + log1p(-e^-e) - log(e) for large e.
  small = e < _LARGE
  es = jnp.where(small, e, 1.0)
  eb = jnp.where(small, _LARGE, e)
  log_ratio = jnp.where(
    small, jnp.log1p(_expm1_minus_x(es) / es), eb + jnp.log1p(-jnp.exp(-eb)) - jnp.log(eb)
  )
  return _expm1_minus_x(-log_ratio)


@jax.jit
def bounded_range_rdp_impl(eps, alpha):
  """The exponential mechanism's bound (see the module doc): float64, broadcast."""
  eps, alpha = jnp.broadcast_arrays(eps, alpha)
  ordinary = (eps > 0) & jnp.isfinite(eps)
  e = jnp.where(ordinary, eps, 1.0)
  finite = jnp.isfinite(alpha) & (alpha > 1)
  a = jnp.where(finite, alpha, 2.0)
  zcdp = _max_kl_bounded_range(e) + 0.125 * e * e * (a - 1.0)
  zcdp = jnp.where(finite, zcdp, jnp.inf)  # alpha = inf: the pure-DP bound, eps
  out = jnp.minimum(zcdp, pure_dp_rdp_impl(e, alpha))
  out = jnp.where(ordinary, out, jnp.where(eps == 0, 0.0, jnp.inf))
  return jnp.where(_invalid(eps, alpha), jnp.nan, out)
