"""Reading the trade-off curve (TPR at a given FPR) from a composed tilted PMF, with bounds.

For a pair ``(P, Q)`` with privacy loss ``L = log(dP/dQ)``, the most powerful
test at false-positive rate ``alpha`` (Neyman-Pearson) rejects for large ``L``:
with the threshold ``t`` where ``Q(L > t) <= alpha < Q(L >= t)`` and a
randomized decision on ``L = t``, its true-positive rate is
``P(L > t) + e^t (alpha - Q(L > t))``. By convex duality with the privacy
profile ``delta(eps) = P(L > eps) - e^eps Q(L > eps)`` (Dong, Roth, Su 2019,
arXiv:1905.02383, Prop. 2.12),

    TPR(alpha) = min over real eps of [delta(eps) + e^eps alpha].

For a discrete loss on the lattice ``s_k`` the function ``h(eps) = delta(eps) +
e^eps alpha`` is convex and piecewise linear in ``x = e^eps`` (on each cell
``delta = A_k - e^eps B_k``), with its breakpoints at the atoms, so the minimum
is attained at an atom: ``TPR = min_k h(s_k)``.

Upper bound. Every ``eps`` gives an upper bound, and the reader's certified
delta (``_read``: FFT round-off, summation round-off, the truncated tail and the
``+inf`` mass) is above the discrete delta, so
``min_k [delta_up(s_k) + e^{s_k} alpha]`` over the window bounds the discrete
TPR from above. The composed connect-the-dots PMF dominates the exact PLD
(Doroshenko et al. 2022, arXiv:2207.04380), so its trade-off curve lies below
the true one (Dong, Roth, Su 2019, Prop. 2.12 with the dominance of the
profiles) and the upper bound holds for the true TPR.

Lower bound of the discrete TPR. ``h(s_k)`` is bounded below with the error
terms of the cell to the left of ``s_k`` (the larger of its two cells'):
``h_low(k) = delta_read(s_k) + e^{s_k} alpha - E(s_{k-1})``. A minimum over all
bins would let the far left bins, where the tilted round-off bound grows like
``e^{-lam s}``, loosen the bound, so the bins ``K = [k_c - m, k_c + m]`` around
the upper bound's minimizer ``k_c`` are used, certified by convexity: if
``h_up(k_c) <= h_low(k_0)`` for ``k_0 < k_c`` then the secant slope from
``x_{k_0}`` to ``x_{k_c}`` is at most 0, and every ``x <= x_{k_0}`` has
``h(x) >= h(x_{k_0}) >= h_low(k_0)``; likewise to the right. Where the
certificate fails, the minimum over all bins is used. Beyond the window:
``h(eps) >= P(L >= lo) - e^lo (1 - alpha)`` below it (``P(L < lo)`` by
Chernoff on the discrete MGF, as in ``_read``) and ``h(eps) >= e^eps alpha``
above it.

The exact (continuous) TPR is then bounded below through the coupling of the
accountant at tilt 0 (``delta_true(eps) >= delta_ctd(eps + s) - eta`` at every
``eps`` at once, ``_kernel._shift``): ``TPR_true(alpha) >= TPR_ctd(alpha e^{-s}) -
eta``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._core.numerics import UNIT_ROUNDOFF, argmin_last

__all__ = ["block_table", "tpr_bounds"]

# Half-width, in bins, of the candidates for the lower bound around the minimizer.
_HALF_WIDTH = 64
# Blocks read bin by bin around the best block (the minimizer lies in the best
# block or the one before it: h is convex).
_REGION = 5
# FPRs read at once.
_ALPHA_BATCH = 16


def _alias_log_above(c, s):
  """Log of the bound on the mass folded down onto losses ``s`` (``_read._alias``, upper part).

  ``min_{nu > lam} [K(nu) - nu s - g - log(1 - e^{-g})]``, ``g = (nu - lam) W``:
  a minimum of affine functions of ``s``, taken before the one exponential.
  """
  nu, kk, circle = c["tau"]
  up = nu > c["lam"]
  gain = jnp.where(up, nu - c["lam"], 1.0) * circle
  const = jnp.where(up, kk - gain - jnp.log(-jnp.expm1(-gain)), jnp.inf)
  values = const - jnp.where(up, nu, 0.0) * s[..., None]
  # The minimum as a gather at the argmin: its derivative is that entry's (the
  # reverse-mode rule of a min reduction came out NaN on some entries at XLA's
  # optimization level 0).
  best = argmin_last(values)
  return jnp.take_along_axis(values, best[..., None], axis=-1)[..., 0]


def _log_below(c):
  """Log of a bound on ``P(L < lo)`` (Chernoff on the discrete MGF, ``nu <= 0``)."""
  nu, kk, _ = c["tau"]
  return jnp.min(jnp.where(nu <= 0, kk - jnp.minimum(nu, 0.0) * c["lo"], jnp.inf))


def _delta_bounds(c, s, s1, s2, e1):
  """Certified ``(up, low)`` of the discrete delta at lattice losses ``s``.

  ``s1, s2``: the scaled sums over the bins above (``j > k``); ``e1``: the
  bins' own scaled masses. The error terms are those of ``_read`` (its module
  docstring), with one exponential per point: at ``s_k`` with the sums over
  ``j > k`` for ``up``; at ``s_{k-1}`` with the sums over ``j >= k`` (the cell
  to the left, whose terms are the larger of the two cells') for ``low``.
  """
  n, d, lam, top = c["n"], c["d"], c["lam"], c["top"]
  s_c = jnp.minimum(s, top)
  scale = jnp.exp(c["base"])  # M^T e^{-lam top}
  read = scale * jnp.maximum(s1 - jnp.exp(s_c - top) * s2, 0.0)
  # Summation round-off: 8 n u times the P-mass above.
  rounding = 8.0 * n * UNIT_ROUNDOFF * scale * s1
  rounding_l = 8.0 * n * UNIT_ROUNDOFF * scale * (s1 + e1)
  # FFT round-off: M^T e^{-lam s} times the per-bin or Euclidean bound and its weights.
  err_inf, err_l2 = c["fft_l2"]
  l1_weight = jnp.minimum(float(n), 1.0 / -jnp.expm1(-lam * d))
  l2_weight = jnp.minimum(float(n) ** 0.5, 1.0 / jnp.sqrt(-jnp.expm1(-2.0 * lam * d)))
  # (exponents capped at 700: far below the answer these bounds are astronomically
  # loose anyway, and a finite value keeps every derivative finite)
  fft = jnp.exp(jnp.minimum(c["log_c"] - lam * s_c, 700.0)) * jnp.minimum(
    err_inf * l1_weight, err_l2 * l2_weight
  )
  fft_l = fft * jnp.exp(lam * d)
  # Wrap-around (the lower bound only).
  circle = c["tau"][2]
  below = jnp.exp(_log_below(c) - lam * circle) / -jnp.expm1(-lam * circle)
  alias_l = below + jnp.exp(jnp.minimum(_alias_log_above(c, s_c - d), 700.0))
  return read + rounding + fft + c["tail"], read - rounding_l - fft_l - alias_l


def _x(s, valid):
  return jnp.where(valid, jnp.exp(jnp.minimum(s, 700.0)), 0.0)


def block_table(c):
  """Block-level bounds, once per composition (``nb = n / blk`` entries each).

  ``up``: the upper bound of delta at each block's first bin; ``low``: a lower
  bound of delta on the whole block (at its last bin: delta is non-increasing),
  0 where that bin is beyond the read top; ``x``: ``e^s`` at the first bin
  (0 beyond the top); ``valid``: the first bin is at or below the top.
  """
  blk, top = c["blk"], c["top"]
  nb = c["after1"].shape[-1]
  first = c["lo"] + c["d"] * blk * jnp.arange(nb, dtype=c["e1"].dtype)
  last = first + c["d"] * (blk - 1)
  up, _ = _delta_bounds(c, first, c["start1"], c["start2"], jnp.zeros_like(first))
  _, low = _delta_bounds(c, last, c["after1"], c["after2"], c["e1"][blk - 1 :: blk])
  valid = first <= top
  return dict(
    up=up,
    low=jnp.where(last <= top, low, 0.0),
    x=_x(first, valid),
    valid=valid,
  )


def _region(c, b0, size):
  """Per-bin ``(index, s, up, low, x, valid)`` on blocks ``b0 .. b0 + size - 1``."""
  blk = c["blk"]
  start = b0 * blk
  e1 = jax.lax.dynamic_slice(c["e1"], (start,), (size * blk,))
  e2 = jax.lax.dynamic_slice(c["e2"], (start,), (size * blk,))
  zero = jnp.zeros((1,), e1.dtype)
  # Sums over the bins above each one: inside the region, then the blocks after it.
  s1 = jnp.concatenate([jnp.cumsum(e1[::-1])[::-1][1:], zero]) + c["after1"][b0 + size - 1]
  s2 = jnp.concatenate([jnp.cumsum(e2[::-1])[::-1][1:], zero]) + c["after2"][b0 + size - 1]
  idx = start.astype(e1.dtype) + jnp.arange(size * blk, dtype=e1.dtype)
  s = c["lo"] + c["d"] * idx
  up, low = _delta_bounds(c, s, s1, s2, e1)
  valid = s <= c["top"]
  return idx, s, up, low, _x(s, valid), valid


def _first_min(h):
  """Index of the first minimum of ``h`` (int32; ``argmin_last``: jnp.argmin's reduction
  takes its initial value from the global x64 flag, a float32 one inside a float32 jit)."""
  return argmin_last(h.reshape(-1))


def _best_region(c, tab, alpha):
  """The region around the best block at ``alpha``, and the bins' upper bounds of ``h``."""
  nb = tab["up"].shape[-1]
  size = min(_REGION, nb)
  hb = jnp.where(tab["valid"], tab["up"] + tab["x"] * alpha, jnp.inf)
  b0 = jnp.clip(_first_min(hb) - size // 2, 0, nb - size)
  idx, s, up, low, x, valid = _region(c, b0, size)
  hu = jnp.where(valid, up + x * alpha, jnp.inf)
  return hb, (idx, s, low, x, valid), hu


def _upper(c, tab, alpha):
  """Upper bound of the discrete TPR at one FPR, and the threshold read."""
  hb, (_, s, _, _, _), hu = _best_region(c, tab, alpha)
  k = _first_min(hu)
  return jnp.minimum(hu[k], jnp.min(hb)), s[k]


def _lower(c, tab, alpha):
  """Certified lower bound of the discrete TPR at one FPR (module docstring)."""
  _, (idx, s, low, x, valid), hu = _best_region(c, tab, alpha)
  kc = _first_min(hu)
  hu_c = hu[kc]
  hl = jnp.where(valid, low + x * alpha, jnp.inf)
  below = 1.0 - jnp.exp(_log_below(c)) - jnp.exp(c["lo"]) * (1.0 + 1e-12 - alpha)
  # Above the last lattice point s_K <= top (> top - d): h >= e^eps alpha.
  above = jnp.exp(jnp.minimum(c["top"] - c["d"], 700.0)) * alpha
  blocks = jnp.where(tab["valid"], tab["low"] + tab["x"] * alpha, jnp.inf)
  everywhere = jnp.minimum(jnp.minimum(jnp.min(blocks), jnp.min(hl)), jnp.minimum(below, above))
  size = idx.shape[-1]
  i0 = jnp.maximum(kc - _HALF_WIDTH, 0)
  i1 = jnp.minimum(kc + _HALF_WIDTH, size - 1)
  pos = jnp.arange(size)
  near = jnp.min(jnp.where((pos >= i0) & (pos <= i1), hl, jnp.inf))
  at_bottom = idx[i0] == 0
  at_top = s[i1] + c["d"] > c["top"]  # s_{i1} is the last lattice point read, or beyond
  near = jnp.minimum(near, jnp.where(at_bottom, below, jnp.inf))
  near = jnp.minimum(near, jnp.where(at_top, above, jnp.inf))
  left = at_bottom | (hu_c <= hl[i0])
  right = at_top | (hu_c <= hl[i1])
  return jnp.where(left & right, jnp.maximum(near, everywhere), everywhere)


def tpr_bounds(c, tab, alphas, alphas_low):
  """Bounds of the discrete TPR at the FPRs ``alphas`` and ``alphas_low`` (``(G,)`` each).

  Returns ``(upper, threshold, lower)``: at each ``alphas``, the least
  ``delta_up(s_k) + e^{s_k} alpha`` over the bins of the best blocks (and the
  blocks' first bins) and the loss ``s_k`` where it is attained (the
  Neyman-Pearson threshold, to the grid); at each ``alphas_low``, the certified
  lower bound: the bins within ``_HALF_WIDTH`` of the upper bound's minimizer,
  certified by convexity, or, where the certificate fails, every block (each
  bounded by its last bin's delta and its first bin's ``e^s alpha``), below and
  above the window. One loop over the FPRs computes both.
  """

  def one(pair):
    alpha, alpha_low = pair
    up, t = _upper(c, tab, alpha)
    return up, t, _lower(c, tab, alpha_low)

  return jax.lax.map(one, (alphas, alphas_low), batch_size=_ALPHA_BATCH)
