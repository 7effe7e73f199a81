"""Exact RDP of randomized response over k buckets (dp_accounting's parametrisation).

The mechanism answers the true bucket with probability ``1 - p`` and a uniform
bucket otherwise: on input x its law is ``P_x = (a, b, ..., b)`` (a at x) with
``a = 1 - p + p/k`` and ``b = p/k``.

* Replace-one (``replace_one_impl``): ``D_alpha(P_x || P_y)``, ``x != y``::

      exp((alpha - 1) D) = a e^s + b e^-s + (k - 2) b,  s = (alpha - 1) log(a / b)
                         = 1 + (a - b) s + a g(s) + b g(-s),   g(x) = e^x - 1 - x >= 0.

* Replace-special (``replace_special_impl``): the special record's output is uniform,
  ``U``, and the curve is ``max(D_alpha(P_x || U), D_alpha(U || P_x))``. With ``X = k P_x``
  under ``U`` (``A = 1 + (k - 1)(1 - p)`` w.p. ``1/k``, ``p`` w.p. ``(k-1)/k``, mean 1)::

      exp((alpha - 1) D_alpha(P || U)) = E[X^alpha],   exp((alpha - 1) D_alpha(U || P)) = E[X^(1-alpha)],
      E[X^beta] = 1 + E[g(beta l) - beta g(l)],  l = log X.

  For ``beta = 1 - alpha < 0`` both terms are non-negative; for ``beta = alpha`` the
  difference would lose a factor ``alpha / (alpha - 1)`` in relative precision, so
  where ``|alpha l| < 1/2`` it is summed as a series whose terms have no cancellation.

Both forms avoid cancellation near ``p = 1`` (tiny RDP) and switch to log-space sums
where the exponents are large. Limits: ``alpha = inf`` gives ``log(a / b)`` and
``max(log A, -log p)``; ``k = 1`` or ``p = 1`` gives 0; ``p = 0`` (with ``k > 1``) gives
``inf``. Traced invalid arguments (``p`` outside [0, 1], ``k < 1``, ``alpha <= 1``, NaN)
give NaN. References: Mironov 2017, arXiv:1702.07476 (the divergences of discrete
laws); dp_accounting's RDP accountant computes the same two curves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._rdp_curves import _LARGE, _expm1_minus_x

__all__ = ["replace_one_impl", "replace_special_impl"]


def _invalid(p, k, alpha):
  return jnp.isnan(p) | jnp.isnan(k) | jnp.isnan(alpha) | (p < 0) | (p > 1) | (k < 1) | (alpha <= 1)


@jax.jit
def replace_one_impl(p, k, alpha):
  """D_alpha(P_x || P_y) of k-ary randomized response (see the module doc)."""
  p, k, alpha = jnp.broadcast_arrays(p, k, alpha)
  ordinary = (p > 0) & (p < 1) & (k > 1)
  ps = jnp.where(ordinary, p, 0.5)
  ks = jnp.where(ordinary, k, 2.0)
  b = ps / ks
  a = (1.0 - ps) + b
  c = ps - 2.0 * b  # (k - 2) b
  ell = jnp.log1p(ks * (1.0 - ps) / ps)  # log(a / b)
  finite = jnp.isfinite(alpha)
  t = jnp.where(finite, alpha - 1.0, 1.0)
  s = t * ell
  excess = (1.0 - ps) * s + a * _expm1_minus_x(jnp.minimum(s, _LARGE)) + b * _expm1_minus_x(-s)
  small_form = jnp.log1p(excess) / t
  sb = jnp.maximum(s, _LARGE)
  big_form = (sb + jnp.log(a + b * jnp.exp(-2.0 * sb) + c * jnp.exp(-sb))) / t
  out = jnp.where(s < _LARGE, small_form, big_form)
  out = jnp.where(finite, out, ell)
  trivial = (k == 1) | (p == 1)
  out = jnp.where(ordinary, out, jnp.where(trivial, 0.0, jnp.inf))
  return jnp.where(_invalid(p, k, alpha), jnp.nan, out)


_SERIES_TERMS = 24  # |beta l| < 1/2: the first omitted term is below 2^-24 / 24! ~ 1e-31


def _h_series(beta, l):  # noqa: E741 (l, a log-likelihood ratio, as in the module doc)
  """g(beta l) - beta g(l) = beta sum_{n >= 2} expm1((n - 1) log beta) l^n / n!, beta > 0.

  No cancellation as beta -> 1 (the difference g(beta l) - beta g(l) loses a factor
  beta / (beta - 1)); for |beta l| < 1/2 and |l| < 1/2.
  """
  log_beta = jnp.log(beta)
  total = jnp.zeros_like(l)
  term = l  # l^n / n!, updated below
  for n in range(2, _SERIES_TERMS + 2):
    term = term * l / n
    total = total + jnp.expm1((n - 1) * log_beta) * term
  return beta * total


def _log_moment(beta, la, lp, log_wa, log_wp, wa, wp):
  """log E[X^beta], X = e^la w.p. wa, e^lp w.p. wp (E[X] = 1), stable (module doc)."""
  big = jnp.maximum(jnp.abs(beta * la), jnp.abs(beta * lp)) >= _LARGE
  bs = jnp.where(big, 1.5, beta)  # a harmless value where the other form is used

  def h(l):  # noqa: E741 (g(beta l) - beta g(l) >= 0)
    series = (bs > 0) & (jnp.abs(bs * l) < 0.5) & (jnp.abs(l) < 0.5)
    direct = _expm1_minus_x(bs * l) - bs * _expm1_minus_x(l)
    return jnp.where(
      series, _h_series(jnp.where(series, bs, 1.5), jnp.where(series, l, 0.0)), direct
    )

  la_s, lp_s = jnp.where(big, 0.0, la), jnp.where(big, 0.0, lp)
  small_form = jnp.log1p(jnp.maximum(wa * h(la_s) + wp * h(lp_s), 0.0))
  big_form = jnp.logaddexp(beta * la + log_wa, beta * lp + log_wp)
  return jnp.where(big, big_form, small_form)


@jax.jit
def replace_special_impl(p, k, alpha):
  """max(D_alpha(P_x || U), D_alpha(U || P_x)) of k-ary randomized response."""
  p, k, alpha = jnp.broadcast_arrays(p, k, alpha)
  ordinary = (p > 0) & (p < 1) & (k > 1)
  ps = jnp.where(ordinary, p, 0.5)
  ks = jnp.where(ordinary, k, 2.0)
  la = jnp.log1p((ks - 1.0) * (1.0 - ps))  # log A
  lp = jnp.where(ps > 0.5, jnp.log1p(-(1.0 - ps)), jnp.log(ps))  # 1 - p exact for p > 1/2
  wa = 1.0 / ks
  wp = 1.0 - wa
  log_wa = -jnp.log(ks)
  log_wp = jnp.log1p(-wa)
  finite = jnp.isfinite(alpha)
  a = jnp.where(finite, alpha, 2.0)
  t = a - 1.0
  forward = _log_moment(a, la, lp, log_wa, log_wp, wa, wp)
  backward = _log_moment(1.0 - a, la, lp, log_wa, log_wp, wa, wp)
  out = jnp.maximum(forward, backward) / t
  out = jnp.where(finite, out, jnp.maximum(la, -lp))
  trivial = (k == 1) | (p == 1)
  out = jnp.where(ordinary, out, jnp.where(trivial, 0.0, jnp.inf))
  return jnp.where(_invalid(p, k, alpha), jnp.nan, out)
