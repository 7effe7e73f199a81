"""log(A_alpha - 1) of the Sampled Gaussian Mechanism by windowed quadrature.

The integral (Mironov, Talwar, Zhang 2019, arXiv:1908.10530, eq. for A_alpha) is
rewritten so that the integrand is non-negative. With z ~ N(0, sigma^2),
w = (2z - 1) / (2 sigma^2), u = q expm1(w) (so E[u] = 0) and l = log1p(u):

    A_alpha - 1 = E[(1 + u)^alpha - 1 - alpha u] = E[h(z)],
    h = (1 + u) * (beta * E2(-l) + E2(beta * l)),   beta = alpha - 1,
    E2(x) = e^x - 1 - x >= 0.

(Expand (1 + u)^alpha = (1 + u) e^{beta l}; both terms of h are >= 0, so h has
no cancellation for any alpha > 1, q, sigma.) The quadrature therefore has full
relative accuracy even when A_alpha - 1 is 1e-20.

Where the mass is. Expanding (1 - q + q e^w)^alpha binomially shows that the
integrand is a mixture of Gaussian bumps of width sigma centred at z = x with
log-weight

    t(x) = log C(alpha, x) + x log q + (alpha - x) log(1 - q) + (x^2 - x)/(2 sigma^2),

x in [0, alpha]. t is concave, then convex, then concave in x, so it has at most
two local maxima. They are found on a Chebyshev grid and refined by Newton's
method; each gets a window of Gauss-Legendre panels covering R = 10 bump widths
plus the spread of significant bump weights. Overlapping windows are merged, and the
merged window is split at its middle between the two windows' panels.
Window placement is wrapped in ``stop_gradient``: the derivative of a fixed-node
quadrature is the quadrature of the derivative.

Two node layouts. The full one (2 x 17 window panels and 2 x 7 graded kink
panels, 768 nodes) holds over the whole domain: sigma down to 0.1, where the
branch points z0 +- i pi sigma^2 of (1 - q + q e^w)^alpha come within 0.03 of
the real axis, and windows over 60 sigma long. Most batches are much easier,
and a light layout (one window over the union of the two, 13 panels, and 2
kink panels a side: 272 nodes) covers an element when it has

    sigma >= 0.3, and window panels at most 5 sigma wide.

Then each bump of width sigma spans at least a fifth of a 16-node panel, and
the branch points, at pi sigma^2 >= 0.28 above z0, lie outside the Bernstein
ellipse rho = 3.3 of the inner kink panels (1.5 sigma wide): error factor
rho^-32 < 3e-17. Against the full layout on random points (benchmarks/README.md)
it is within 2e-14 relative wherever the conditions hold. Beyond the width
bound the error grows fast (4e-13 at 5.5 to 6 sigma, 8e-11 at 6 to 7), so the
bound has a margin but not a large one.

A batch runs the light layout when at least half of its elements allow it,
and the full layout on the others only, gathered in chunks of an eighth of the
batch (at least 16 elements), so that the few configurations of a search
round that need it do not cost the whole round (benchmarks/README.md). Both choices are made
at run time (``lax.cond``); under a caller's ``jax.vmap`` they are made per
element, and XLA evaluates both layouts.

The light layout sums its nodes in linear space, relative to a shift taken at
the panel midpoints, rather than as a logsumexp (_log_integral_shifted).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from .._core.numerics import argmin_last, expm1_minus_x, log_gaussian_pdf

__all__ = ["log_a_minus_1_quadrature", "FULL_NODES", "LIGHT_NODES"]

# Window geometry. A Gaussian bump decays by e^{-R^2/2} = e^{-50} at R = 10.
_R = 10.0
# Significant bump weights: those within _T nats of the maximum (e^-40 ~ 4e-18).
_T = 40.0
_GRID = 48  # Chebyshev grid over x in [0, alpha] for locating the maxima of t.
_NEWTON = 8
_PANELS = 16
_NODES = 16  # Gauss-Legendre nodes per panel.
# The full layout runs on the elements that need it in chunks of 1/_CHUNKS of
# the batch, at least _MIN_CHUNK elements (_full_where).
_CHUNKS = 8
_MIN_CHUNK = 16
# The light layout's sum is taken relative to a shift (_log_integral_shifted) and is
# exact while it lies in (e^-_SHIFT_ROOM, inf).
_SHIFT_ROOM = 600.0
# Where (alpha - 1) log(1 + u) exceeds _BIG_BL, h is (1 + u)^alpha (_log_h_parts).
_BIG_BL = 60.0

# Kink window around z0: half-width _KINK_HALFWIDTH * sigma, _KINK panels a side.
_KINK_HALFWIDTH = 3.0
_KINK = 7

# The light layout (module docstring): _LIGHT_PANELS panels (plus the one split
# at the kink window) over the union of the windows, _LIGHT_KINK kink panels a
# side, for batches with sigma >= _LIGHT_SIGMA and panels at most
# _LIGHT_WIDTH sigma wide. 12 panels cover the whole standard benchmark domain
# (q in [1e-3, 0.1], sigma in [0.6, 3], orders up to 11); sigma down to 0.3
# keeps most calibration batches light (epsilon up to 10 at q = 0.1 needs
# sigma ~0.45).
_LIGHT_PANELS = 12
_LIGHT_KINK = 2
_LIGHT_SIGMA = 0.3
_LIGHT_WIDTH = 5.0

# Integrand evaluations per quadrature in each layout (each window has one panel
# more than its uniform ones: the one split at the kink window).
FULL_NODES = 2 * (_PANELS + 1) * _NODES + 2 * _KINK * _NODES
LIGHT_NODES = (_LIGHT_PANELS + 1) * _NODES + 2 * _LIGHT_KINK * _NODES

_GL_X, _GL_W = np.polynomial.legendre.leggauss(_NODES)


def _log_h_parts(z, q, sigma, alpha):
  """(e, m) with h(z) = exp(e) * m, h = (1+u)^alpha - 1 - alpha u >= 0 (module docstring)."""
  w = (2.0 * z - 1.0) / (2.0 * sigma * sigma)
  # l = log(1 - q + q e^w) = log1p(q expm1(w)), exact for w <= 0 (u in [-q, 0])
  # and for w > 0 until expm1 overflows; beyond w = 700 the remainder
  # log1p((1 - q) e^-w / q) < e^-700 / q is dropped (1e-296 at q = 1e-8, the
  # smallest q of the accuracy guarantee; 1e-24 at q = 1e-280).
  wc = jnp.minimum(w, 700.0)
  u = q * jnp.expm1(wc)
  l = jnp.where(w > 700.0, jnp.log(q) + w, jnp.log1p(u))  # noqa: E741 (the loss, as in the docs)
  beta = alpha - 1.0
  # h / (1 + u) = beta E2(-l) + E2(beta l): two non-negative terms, summed in
  # linear space. Where beta l > _BIG_BL, h = (1 + u)^alpha (1 - (1 + alpha u)
  # e^{-alpha l}) with (1 + alpha u) e^{-alpha l} <= e^{-alpha l} + alpha e^{-beta l}
  # (2e-18 at alpha = 1e4), so h = e^{alpha l} there. That also keeps
  # m below e^61 (m <= e^60 + 60 + beta / (1 - q)), which the shifted sum of
  # _log_integral_shifted relies on.
  bl = beta * l
  big = bl > _BIG_BL
  lc = jnp.where(big, 0.0, l)
  # expm1(-l) = 1 / (1 + u) - 1 = -u / (1 + u): a division instead of an expm1
  # (where w > 700 clips u, both are -1 to within e^-700 / q, as above).
  linear = beta * expm1_minus_x(-lc, -u / (1.0 + u)) + expm1_minus_x(beta * lc)
  return jnp.where(big, alpha * l, l), jnp.where(big, 1.0, linear)


def _log_h(z, q, sigma, alpha):
  """log h(z) (see _log_h_parts)."""
  e, m = _log_h_parts(z, q, sigma, alpha)
  return e + jnp.log(m)


def _log_integrand(z, q, sigma, alpha):
  return log_gaussian_pdf(z, sigma) + _log_h(z, q, sigma, alpha)


def _lgamma1p_fast(x):
  """lgamma(x + 1) for x >= 0 to ~1e-8: shift by 4, then Stirling's series.

  Only used to *place* windows (jax's gammaln costs ~20x more on CPU).
  """
  y = x + 1.0
  z = y + 4.0
  r = 1.0 / z
  r2 = r * r
  stirling = (
    (z - 0.5) * jnp.log(z)
    - z
    + 0.5 * math.log(2 * math.pi)
    + r * (1 / 12 - r2 * (1 / 360 - r2 / 1260))
  )
  return stirling - jnp.log(y * (y + 1.0) * (y + 2.0) * (y + 3.0))


def _digamma1p_fast(x):
  """digamma(x + 1) for x >= 0 to ~1e-9 (recurrence shift by 4, asymptotic series)."""
  y = x + 1.0
  z = y + 4.0
  r2 = 1.0 / (z * z)
  asym = jnp.log(z) - 0.5 / z - r2 * (1 / 12 - r2 * (1 / 120 - r2 / 252))
  return asym - (1.0 / y + 1.0 / (y + 1.0) + 1.0 / (y + 2.0) + 1.0 / (y + 3.0))


def _trigamma1p_fast(x):
  """polygamma(1, x + 1) for x >= 0 to ~1e-9 (recurrence shift by 4, asymptotic series)."""
  y = x + 1.0
  z = y + 4.0
  r = 1.0 / z
  r2 = r * r
  asym = r + 0.5 * r2 + r * r2 * (1 / 6 - r2 * (1 / 30 - r2 / 42))
  return (
    asym + 1.0 / (y * y) + 1.0 / ((y + 1.0) ** 2) + 1.0 / ((y + 2.0) ** 2) + 1.0 / ((y + 3.0) ** 2)
  )


def _bump_logweight_derivs(x, q, sigma, alpha):
  """t'(x), t''(x) for the bump log-weights t of the module docstring (x in [0, alpha])."""
  lq, l1q = jnp.log(q), jnp.log1p(-q)
  s2 = sigma * sigma
  xa = alpha - x
  d1 = -_digamma1p_fast(x) + _digamma1p_fast(xa) + lq - l1q + (2.0 * x - 1.0) / (2.0 * s2)
  d2 = -_trigamma1p_fast(x) - _trigamma1p_fast(xa) + 1.0 / s2
  return d1, d2


def _refine_max(x0, lo, hi, q, sigma, alpha):
  """Safeguarded Newton steps towards a local maximum of t inside [lo, hi]."""

  def body(_, x):
    d1, d2 = _bump_logweight_derivs(x, q, sigma, alpha)
    # Newton where t is concave; otherwise a bounded step uphill.
    step = jnp.where(d2 < 0, -d1 / jnp.where(d2 < 0, d2, -1.0), jnp.sign(d1))
    step = jnp.clip(step, -0.25 * (hi - lo) - 1.0, 0.25 * (hi - lo) + 1.0)
    return jnp.clip(x + step, lo, hi)

  return jax.lax.fori_loop(0, _NEWTON, body, x0)


def _spread(x, q, sigma, alpha):
  """Half-width in x beyond which the bump weights fall below max - _T."""
  d1, d2 = _bump_logweight_derivs(x, q, sigma, alpha)
  by_slope = _T / jnp.maximum(jnp.abs(d1), 1e-300)
  by_curv = jnp.sqrt(2.0 * _T / jnp.maximum(-d2, 1e-300))
  # In a concave region both bounds hold; in a convex one only the slope bound.
  spread = jnp.where(d2 < 0, jnp.minimum(by_slope, by_curv), by_slope)
  return jnp.minimum(spread, alpha + 2.0)


# The Chebyshev grid on [0, 1]. It is symmetric (_CHEB[::-1] = 1 - _CHEB), so
# that lgamma(alpha - x + 1) on the grid is lgamma(x + 1) read backwards.
_CHEB = 0.5 * (1.0 - np.cos(np.pi * np.arange(_GRID) / (_GRID - 1)))


def _bump_maxima(q, sigma, alpha):
  """The (at most two) local maxima of t on [0, alpha]: the best point of a
  Chebyshev grid in each half (the two concave regions of t lie at its two ends),
  refined by _refine_max."""
  xs = alpha * _CHEB
  # t on the grid up to terms constant in x (only its argmax is used):
  # t(x) = const - lgamma(x + 1) - lgamma(alpha - x + 1) + x log(q / (1 - q)) + (x^2 - x) / (2 sigma^2).
  g = _lgamma1p_fast(xs)
  t = -(g + g[::-1]) + xs * (jnp.log(q) - jnp.log1p(-q)) + (xs * xs - xs) / (2.0 * sigma * sigma)
  half = _GRID // 2
  best = argmin_last(-jnp.reshape(t, (2, half))) + np.array([0, half])  # argmax in each half
  step = alpha / (_GRID - 1) * np.pi  # >= twice the largest grid spacing
  # Both maxima are refined together: one loop compiles much faster than two.
  x0 = xs[best]
  x_lo, x_hi = _refine_max(
    x0, jnp.maximum(x0 - step, 0.0), jnp.minimum(x0 + step, alpha), q, sigma, alpha
  )
  return x_lo, x_hi


def _windows(q, sigma, alpha):
  """Two integration windows [a, b] in z (possibly merged into one)."""
  x_lo, x_hi = _bump_maxima(q, sigma, alpha)
  pad = _R * sigma + 2.0
  d_lo, d_hi = _spread(jnp.stack([x_lo, x_hi]), q, sigma, alpha)
  # The excess integrand also has mass near z in [-R sigma, 2] (the k = 0, 1, 2
  # terms), so the lower window always reaches down there.
  a1 = jnp.minimum(x_lo - d_lo, 0.0) - pad
  b1 = jnp.maximum(x_lo + d_lo, 2.0) + pad
  a2 = x_hi - d_hi - pad
  b2 = x_hi + d_hi + pad
  overlap = a2 <= b1
  b1m = jnp.where(overlap, jnp.maximum(b1, b2), b1)
  return a1, b1m, a2, b2, overlap


def _gap_inside(a, b, gap_lo, gap_hi):
  """The part [lo, hi] of the gap (gap_lo, gap_hi) inside [a, b] (lo = hi if none)."""
  lo = jnp.clip(gap_lo, a, b)
  return lo, jnp.clip(gap_hi, lo, b)


def _window_panels(a, b, gap_lo, gap_hi, panels=_PANELS):
  """Gauss-Legendre panels for the integral over [a, b] minus (gap_lo, gap_hi).

  The ``panels`` panels are spread uniformly over the length that remains once
  the gap is removed; the panel that would straddle the gap is split at it, so
  every window has panels + 1 panels whatever the geometry. Returns each
  panel's left end, half-width and log half-width; an empty window (or panel)
  gets log half-width -inf (weight 0).
  """
  lo, hi = _gap_inside(a, b, gap_lo, gap_hi)
  first = lo - a
  length = first + (b - hi)
  empty = length <= 0
  length = jnp.where(empty, 1.0, length)
  # The panel edges in s: the uniform ones with `first` inserted in order (as
  # a stable sort would place it, after equal edges), without a sort.
  uniform = np.linspace(0.0, 1.0, panels + 1)
  j = np.arange(panels + 2)
  at = jnp.sum(length * uniform <= first)  # uniform edges before `first`
  s = jnp.where(
    j < at,
    length * uniform[np.minimum(j, panels)],
    jnp.where(j == at, first, length * uniform[np.maximum(j - 1, 0)]),
  )
  # Map the gap-free coordinate s back to z: a panel's left end at s = first
  # is the far side of the gap (hi), its right end at s = first the near side (lo).
  # The side is decided by the panel midpoint, never by comparing s with
  # `first` for equality: XLA may round the two copies of `first` differently.
  s_l, s_r = s[:-1], s[1:]
  near = 0.5 * (s_l + s_r) < first
  left = jnp.where(near, a + s_l, hi + jnp.maximum(s_l - first, 0.0))
  right = jnp.where(near, jnp.minimum(a + s_r, lo), hi + jnp.maximum(s_r - first, 0.0))
  right = jnp.maximum(right, left)
  half = 0.5 * (right - left)
  # A zero-width panel (the split point coinciding with an edge) has weight 0.
  nonempty_panel = (half > 0) & ~empty
  half = jnp.where(nonempty_panel, half, 1.0)
  return left, half, jnp.where(nonempty_panel, jnp.log(half), -jnp.inf)


def _kink_panels(z0, c, kink=_KINK):
  """Panels for [z0 - c, z0 + c], ``kink`` a side graded towards z0 (as _window_panels).

  Edges sit at z0 +- c 2^-k, so every panel is at least as far from the
  branch points z0 +- i pi sigma^2 as it is wide (for c 2^-(kink-1) <= pi sigma^2).
  """
  g = np.concatenate([[0.0], 2.0 ** -np.arange(kink - 1, -1, -1)])  # 0, ..., 1/2, 1
  edges = jnp.concatenate([z0 - c * g[::-1], z0 + c * g[1:]])
  left = edges[:-1]
  half = 0.5 * (edges[1:] - left)
  return left, half, jnp.log(half)


def _panel_nodes(left, half):
  """Gauss-Legendre nodes [panels, _NODES] of the panels.

  Built from the panels inside each integrand's fusion: nodes built separately
  and concatenated cost XLA two more passes over them.
  """
  return left[:, None] + half[:, None] * (1.0 + _GL_X)


def _shifted_integrand(z, log_half, q, sigma, alpha, shift):
  """The integrand at the nodes z times their panels' half-widths, divided by e^shift."""
  e, m = _log_h_parts(z, q, sigma, alpha)
  return jnp.exp(log_half[:, None] + log_gaussian_pdf(z, sigma) + e - shift) * m


def _log_integral_shifted(parts, q, sigma, alpha):
  """(log of the quadrature sum over the panels of all ``parts``, whether it is exact).

  ``parts``: panels as _window_panels returns them. All nodes go through one
  integrand call, so that the integrand is traced (and compiled) once per layout.

  The sum is taken in linear space relative to a shift, the largest weighted
  log-integrand at the panel midpoints: then the integrand needs no log, and
  its exponential is computed with it (a logsumexp would materialize the
  log-integrand and exponentiate it in a second pass, single-threaded).

  When it is exact: each term is exp(x) * m with m < e^61 (_log_h_parts). An
  overflow anywhere makes the sum inf (or NaN). Where the sum S is above
  e^-_SHIFT_ROOM, a term that is not negligible (above e^-39 S) has
  exp(x) > e^-700, a normal float, and the terms whose exp(x) is subnormal add
  up to below 272 e^-708 e^61 < 2e-18 S. So the result is exact where S lies in
  (e^-_SHIFT_ROOM, inf). The midpoint shift is within 6 nats of the largest
  weighted node value over the whole domain of the accuracy guarantee (on
  random points, benchmarks/README.md), so S is near 1 there; where it is not exact, the
  caller takes the full layout's logsumexp.
  """
  left, half, log_half = (jnp.concatenate(p) for p in zip(*parts))
  # (The result does not depend on the shift: no derivative flows through it.)
  shift = jax.lax.stop_gradient(_midpoint_shift(left, half, log_half, q, sigma, alpha))
  terms = _shifted_integrand(_panel_nodes(left, half), log_half, q, sigma, alpha, shift)
  # The weighted sum over the nodes as a product with the weights: XLA then
  # computes the terms in one fusion (a reduction would take the integrand apart).
  log_s = jnp.log(jnp.sum(terms @ _GL_W))
  exact = (log_s < jnp.inf) & (log_s > -_SHIFT_ROOM)  # False for NaN
  return log_s + shift, exact


def _midpoint_shift(left, half, log_half, q, sigma, alpha):
  """The shift of _log_integral_shifted: the largest log-integrand at the panel
  midpoints plus the panel's log half-width (0 where none is finite)."""
  shift = jnp.max(log_half + _log_integrand(left + half, q, sigma, alpha))
  return jnp.where(jnp.isfinite(shift), shift, 0.0)


def _log_integral_two_pass(parts, q, sigma, alpha):
  """log of the quadrature sum over the panels of all ``parts``, as a logsumexp."""
  left, half, log_half = (jnp.concatenate(p) for p in zip(*parts))
  logw = log_half[:, None] + np.log(_GL_W)
  return logsumexp(logw + _log_integrand(_panel_nodes(left, half), q, sigma, alpha))


class _Geometry(NamedTuple):
  """Where the integrand's mass is (module docstring); no derivative flows through it."""

  a1: jax.Array  # lower window [a1, b1]
  b1: jax.Array
  a2: jax.Array  # upper window [a2, b2]; when the two overlap, their union split at its middle
  b2: jax.Array  # so a1 <= b1 <= a2 <= b2, and [a1, b2] covers both windows
  z0: jax.Array  # centre of the kink of (1 - q + q e^w)^alpha: (1 - q) mu0 = q mu1
  c: jax.Array  # half-width of the kink window


def _geometry(q, sigma, alpha):
  a1, b1, a2, b2, overlap = _windows(q, sigma, alpha)
  z0 = sigma * sigma * (jnp.log1p(-q) - jnp.log(q)) + 0.5
  c = _KINK_HALFWIDTH * sigma
  # Overlapping windows are merged into [a1, b1], and the merged window is split
  # at its middle, so that the full layout spends both windows' panels on it
  # (twice as dense) instead of leaving the second window empty.
  mid = 0.5 * (a1 + b1)
  a2 = jnp.where(overlap, mid, a2)
  b2 = jnp.where(overlap, b1, b2)
  b1 = jnp.where(overlap, mid, b1)
  return jax.lax.stop_gradient(_Geometry(a1, b1, a2, b2, z0, c))


def _full_parts(g):
  return [
    _kink_panels(g.z0, g.c),
    _window_panels(g.a1, g.b1, g.z0 - g.c, g.z0 + g.c),
    _window_panels(g.a2, g.b2, g.z0 - g.c, g.z0 + g.c),
  ]


def _light_parts(g):
  return [
    _kink_panels(g.z0, g.c, _LIGHT_KINK),
    _window_panels(g.a1, g.b2, g.z0 - g.c, g.z0 + g.c, _LIGHT_PANELS),
  ]


def _log_a_minus_1_full(q, sigma, alpha, g):
  """log(A - 1) in the full layout, as a logsumexp."""
  return _log_integral_two_pass(_full_parts(g), q, sigma, alpha)


def _log_a_minus_1_light(q, sigma, alpha, g):
  """(log(A - 1) in the light layout, whether it is exact: see _log_integral_shifted)."""
  return _log_integral_shifted(_light_parts(g), q, sigma, alpha)


def _light_enough(sigma, g):
  """Whether the light layout's conditions (module docstring) hold for one element."""
  # The length its window panels share: [a1, b2] less the kink window, as _window_panels splits it.
  lo, hi = _gap_inside(g.a1, g.b2, g.z0 - g.c, g.z0 + g.c)
  length = (lo - g.a1) + (g.b2 - hi)
  return (sigma >= _LIGHT_SIGMA) & (length <= _LIGHT_PANELS * _LIGHT_WIDTH * sigma)


def _elementwise(f, *args):
  for _ in range(jnp.ndim(args[0])):
    f = jax.vmap(f)
  return f(*args)


def _choose_layout(q, sigma, alpha):
  """(geometry, light): whether each element allows the light layout."""
  g = _elementwise(_geometry, q, sigma, alpha)
  return g, _elementwise(_light_enough, sigma, g)


def _runs_light_layout(light):
  """Whether a batch runs the light layout: when at least half of it allows it."""
  return 2 * jnp.sum(light, dtype=jnp.int32) >= light.shape[0]


def _chunk_size(n):
  """Elements per chunk of the full layout's loop in a batch of n (n >= 1)."""
  return min(n, max(_MIN_CHUNK, -(-n // _CHUNKS)))


def _full_where(todo, value, q, sigma, alpha, g):
  """``value`` with the full layout's result where ``todo`` (1-D batch).

  The elements to do are gathered to the front and run in chunks of
  _chunk_size(n): a chunk runs only if it holds one of them. A loop with a
  static trip count, so that reverse-mode derivatives work.
  """
  n = todo.shape[0]
  chunk = _chunk_size(n)
  chunks = -(-n // chunk)
  count = jnp.sum(todo, dtype=jnp.int32)
  # order[:count]: the indices to do, in order; the rest n (dropped by the scatter).
  position = jnp.where(todo, jnp.cumsum(todo, dtype=jnp.int32) - 1, chunks * chunk)
  order = (
    jnp.full(chunks * chunk, n, jnp.int32)
    .at[position]
    .set(jnp.arange(n, dtype=jnp.int32), mode="drop")
  )

  # The inputs as the columns of one array: one gather per chunk.
  columns = jnp.stack([q, sigma, alpha, *g], axis=-1)

  def run_chunk(i, value):
    idx = jax.lax.dynamic_slice(order, (i * chunk,), (chunk,))
    sub = columns[jnp.minimum(idx, n - 1)]
    q, sigma, alpha, *g = (sub[:, j] for j in range(columns.shape[-1]))
    v = _elementwise(_log_a_minus_1_full, q, sigma, alpha, _Geometry(*g))
    return value.at[idx].set(v, mode="drop")

  def step(i, value):
    return jax.lax.cond(i * chunk < count, run_chunk, lambda i, value: value, i, value)

  return jax.lax.cond(
    count > 0, lambda v: jax.lax.fori_loop(0, chunks, step, v), lambda v: v, value
  )


def log_a_minus_1_quadrature(q, sigma, alpha):
  """Elementwise log(A_alpha - 1) for 0 < q < 1, sigma > 0, alpha > 1.

  Inputs must already be broadcast to a common shape and be float64. Where at
  least half of the batch allows the light layout, the whole batch runs it;
  the elements that do not allow it (or whose shifted sum is not exact, see
  _log_integral_shifted: never on the guaranteed domain) then run the full layout, in
  chunks (_full_where), so that a few of them do not cost the whole batch.
  """
  shape = q.shape
  q, sigma, alpha = (jnp.ravel(x) for x in (q, sigma, alpha))
  n = q.shape[0]
  if n == 0:
    return jnp.zeros(shape, q.dtype)
  g, light = _choose_layout(q, sigma, alpha)
  value, exact = jax.lax.cond(
    _runs_light_layout(light),
    lambda *args: _elementwise(_log_a_minus_1_light, *args),
    lambda *args: (jnp.full((n,), jnp.nan), jnp.zeros((n,), bool)),
    q,
    sigma,
    alpha,
    g,
  )
  return _full_where(~(light & exact), value, q, sigma, alpha, g).reshape(shape)
