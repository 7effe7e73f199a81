"""Stable log of the Gaussian hockey-stick differences ``w1 Phi(x) - w2 Phi(x - h)``.

Shared by the analytic Gaussian mechanism and the single-step SGM profile. Pure
jnp kernels; no validation (callers sanitize their inputs).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import log_ndtr

__all__ = ["log_gaussian_hockey_stick", "LOG_SAFETY_MARGIN"]

# log_gaussian_hockey_stick is accurate to ~1e-14 relative where the result is
# above 1e-20 and to ~3e-13 down to 1e-300 (measured against 40-digit mpmath).
# Calibrations aim at log(delta) - LOG_SAFETY_MARGIN so that rounding in the
# computed delta cannot make a returned sigma miss its target; the cost is a
# relative change in sigma of about 1e-13 / |d log delta / d log sigma|.
LOG_SAFETY_MARGIN = 1e-13

# Gauss-Legendre rule for the integral of G' over an interval of length <= 1. G'
# is analytic at distance >= ~1.8 from the real axis (the complex zeros of Phi),
# so 12 nodes leave an error far below float64 resolution.
_GL_NODES, _GL_WEIGHTS = (np.asarray(v, np.float64) for v in np.polynomial.legendre.leggauss(12))
_HALF_LOG_2PI = 0.9189385332046727  # log(2 pi) / 2
# Below y = -3 the continued fraction is used (see _mills_terms).
_CF_SWITCH = -3.0
_CF_TERMS = 60


@jax.custom_jvp
def _mills_terms(y):
  """``G(y) = log Phi(y) - log phi(y)`` and its slope ``G'(y) = phi(y)/Phi(y) + y > 0``.

  Above ``y = -3``: ``G`` from ``log_ndtr`` and ``G' = exp(-G) + y`` (loses at
  most one digit). Below, with ``t = -y``, Laplace's continued fraction
  ``Phi(-t) / phi(t) = 1 / (t + cf)``, ``cf = 1 / (t + 2 / (t + 3 / ...))``, gives
  ``G = -log(t + cf)`` and ``G' = cf``, so the leading ``t`` of ``phi/Phi`` is never
  subtracted. 60 levels reach float64 precision for ``t >= 3`` (checked
  against mpmath).
  """
  tail = y < _CF_SWITCH
  t = jnp.where(tail, -y, -_CF_SWITCH)
  y_s = jnp.where(tail, 0.0, y)

  def body(i, acc):
    return (_CF_TERMS - i) / (t + acc)

  cf = 1.0 / (t + lax.fori_loop(0, _CF_TERMS - 1, body, jnp.zeros_like(t)))
  g_direct = log_ndtr(y_s) + 0.5 * y_s**2 + _HALF_LOG_2PI
  g = jnp.where(tail, -jnp.log(t + cf), g_direct)
  slope = jnp.where(tail, cf, jnp.exp(-g_direct) + y_s)
  return g, slope


@_mills_terms.defjvp
def _mills_terms_jvp(primals, tangents):
  # d G / dy = G'; d G' / dy = G'' = 1 - (phi/Phi) G' with phi/Phi = G' - y. Written
  # out so that autodiff does not differentiate through the continued fraction.
  (y,), (dy,) = primals, tangents
  g, slope = _mills_terms(y)
  curvature = 1.0 - (slope - y) * slope
  return (g, slope), (slope * dy, curvature * dy)


def log_gaussian_hockey_stick(log_w, x, h):
  r"""``log(w1 Phi(x) - w2 Phi(x - h))`` where ``w2 phi(x - h) = w1 phi(x)``, ``h > 0``.

  Every hockey-stick divergence between two unit-shift Gaussians (or a
  Gaussian and a mixture) in this package has this form: the two terms are
  the masses of the region where one density exceeds ``e^eps`` times the
  other, and the constraint on ``w2`` says the densities cross at its
  boundary. Writing ``Phi(y) = phi(y) exp(G(y))``, the constraint gives

      w1 Phi(x) - w2 Phi(x - h) = w1 Phi(x) (1 - exp(-(G(x) - G(x - h)))),

  so the subtraction becomes ``log1mexp`` of ``gap = G(x) - G(x - h) > 0``
  (``G`` is increasing). For ``h <= 1`` the gap is the integral of ``G'``
  (Gauss-Legendre), which keeps full relative precision when the gap is tiny
  (large sigma), where subtracting the two Gaussian tails would cancel
  catastrophically. The result is never NaN; a gap that rounds to ``<= 0``
  gives ``-inf``.

  Args:
    log_w: ``log w1`` (``-inf`` allowed: result ``-inf``).
    x: upper argument.
    h: positive finite shift (``1/sigma`` here).

  Returns:
    The log of the difference (``-inf`` where it is 0).
  """
  small = h <= 1.0
  h_small = jnp.where(small, h, 1.0)
  h_big = jnp.where(small, 2.0, h)
  # One evaluation of (G, G') at the 12 quadrature nodes on [x - h, x], at x and at x - h.
  nodes = x[..., None] - 0.5 * h_small[..., None] * (1.0 - _GL_NODES)
  points = jnp.concatenate([nodes, x[..., None], (x - h_big)[..., None]], axis=-1)
  g, slope = _mills_terms(points)
  quad = 0.5 * h_small * jnp.sum(_GL_WEIGHTS * slope[..., :-2], axis=-1)
  gap = jnp.where(small, quad, g[..., -2] - g[..., -1])
  positive = (gap > 0) & (log_w > -jnp.inf)
  gap_s = jnp.where(positive, gap, 1.0)
  # log Phi(x) = log phi(x) + G(x) below x = -3, where G comes from the continued
  # fraction (more accurate than log_ndtr's asymptotic series below x = -20).
  log_cdf_x = jnp.where(
    x < _CF_SWITCH, -0.5 * x**2 - _HALF_LOG_2PI + g[..., -2], log_ndtr(jnp.maximum(x, _CF_SWITCH))
  )
  out = log_w + log_cdf_x + jax.nn.log1mexp(gap_s)
  return jnp.where(positive, out, -jnp.inf)
