"""Reading delta(epsilon) and epsilon(delta) from a composed tilted PMF, with bounds.

For a PLD with finite atoms ``p_s`` and mass ``p_inf`` at ``+inf``,
``delta(eps) = p_inf + sum_{s > eps} p_s (1 - e^{eps - s})`` (Sommer, Meiser,
Mohammadi 2019, arXiv:1807.10173; Koskela et al. 2020). It is non-increasing in
``eps`` and, on each cell between two atoms, of the form ``A - e^eps B``, so
``epsilon(delta)`` is found by a monotone search over the grid and an exact
solve inside the cell.

The composed PMF is stored tilted, ``r_s = p_s e^{lam s} / M^T`` (``M`` the
discrete moment-generating function at ``lam``), so
``sum_{s > eps} p_s (1 - e^{eps - s}) = M^T sum_{s > eps} r_s e^{-lam s}
(1 - e^{eps - s})``; both partial sums are reverse cumulative log-sum-exps.
Tilting makes the float64 noise floor relative to delta: an absolute error
``|dr|`` per bin costs at most ``M^T e^{-lam eps} ||dr||_1`` in delta, and the
tilt makes ``M^T e^{-lam eps}`` of the order of delta itself.

Error terms, each an upper bound (``u = 2^-53``, ``n`` bins):

* ``fft``: ``M^T e^{-lam s_k} sqrt(n) err_l2`` (``_compose`` gives ``err_l2``);
* ``tail``: the composed mass above the window, by Chernoff on the *discrete*
  single-step MGF: ``P(L > hi) <= min_nu exp(sum_j T_j log M_j(nu) - nu hi)``,
  plus the composed ``+inf`` mass ``1 - prod_j (1 - p_inf,j)^{T_j}``;
* ``alias``: mass outside the window wraps around into it (circular
  convolution). It only *adds* mass, so the upper bound stays valid; the lower
  bound subtracts ``M^T e^{-lam s_k} tau`` with ``tau`` the Chernoff bound of
  the tilted mass outside the window;
* summation round-off: ``8 n u`` times the P-mass above ``eps`` (suffix sums
  of non-negative terms, and their difference).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["curve", "epsilon_upper", "epsilon_lower", "delta_upper", "delta_lower"]

_U = 2.0**-53


def _first(mask):
  """Index of the first True (0 if none), without an integer iota (x64-off safe)."""
  n = mask.shape[-1]
  idx = jnp.min(jnp.where(mask, np.arange(n, dtype=np.float64), float(n)))
  return jnp.where(idx < n, idx, 0.0).astype(jnp.int32)


def _safe_log(x):
  """``log x`` with ``-inf`` at 0 and a zero (not NaN) derivative there."""
  pos = x > 0
  return jnp.where(pos, jnp.log(jnp.where(pos, x, 1.0)), -jnp.inf)


def curve(w, lo, d, lam, log_c, fft_l2, tail, tau, top):
  """Pre-computes the partial sums of one composed tilted PMF on its window.

  Args:
    w: ``(n,)`` tilted composed masses at losses ``s_k = lo + k d``.
    lo, d, lam: window bottom, spacing and tilt (scalars).
    log_c: ``T log M(lam)`` summed over phases.
    fft_l2: bound on the Euclidean norm of the round-off in ``w``.
    tail: bound on the delta contributed above the window (incl. ``+inf`` mass).
    tau: bound on the tilted mass outside the window (aliased into it).
    top: the highest loss read (masses above it must be zero in ``w``; ``tail``
      accounts for them); ``(1 + lam) (top - lo) <= 700`` keeps the scaled
      sums finite.
  """
  n = w.shape[-1]
  s = lo + d * jnp.arange(n, dtype=w.dtype)
  wc = jnp.maximum(w, 0.0)
  # Suffix sums over j > k, scaled at the top so that nothing overflows;
  # summed from the top down, each suffix carries a relative error <= n u.
  zero = jnp.zeros((1,), w.dtype)
  s1 = jnp.concatenate(
    [jnp.cumsum((wc * jnp.exp(jnp.minimum(lam * (top - s), 700.0)))[::-1])[::-1][1:], zero]
  )
  s2 = jnp.concatenate(
    [jnp.cumsum((wc * jnp.exp(jnp.minimum((1.0 + lam) * (top - s), 700.0)))[::-1])[::-1][1:], zero]
  )
  base = log_c - lam * top  # log(M^T e^{-lam top})
  a = base + _safe_log(s1)  # log sum_{j>k} p_j  (untilted P-mass above s_k)
  b = base - top + _safe_log(s2)  # log sum_{j>k} p_j e^{-s_j}
  diff = s1 - jnp.exp(s - top) * s2
  read = jnp.exp(base) * jnp.maximum(diff, 0.0)
  rel = jnp.asarray(8.0 * n * _U, w.dtype)
  rounding = rel * jnp.exp(a)  # |error of the difference| <= 2 n u (S1 + e^{..} S2)
  scale = jnp.exp(log_c - lam * s)  # M^T e^{-lam s_k}
  fft = scale * jnp.sqrt(float(n)) * fft_l2
  up = read + rounding + fft + tail
  low = read - rounding - fft - scale * tau
  return dict(
    s=s,
    a=a,
    b=b,
    log_c=log_c,
    read=read,
    fft=fft,
    tail=tail,
    alias=scale * tau,
    rounding=rounding,
    up=up,
    low=low,
    d=d,
    lo=lo,
  )


def _solve(c, k, extra, delta):
  """Solves ``A - e^eps B + extra = delta`` on the cell ``(s_{k-1}, s_k]``."""
  kk = jnp.maximum(k - 1, 0)
  a_abs = jnp.exp(c["a"][kk])
  b_abs = jnp.exp(c["b"][kk])
  num = a_abs + extra[kk] - delta
  good = (num > 0) & (b_abs > 0)
  eps = _safe_log(jnp.where(good, num, 1.0)) - _safe_log(jnp.where(good, b_abs, 1.0))
  eps = jnp.where(good, eps, c["s"][kk])
  return jnp.clip(eps, c["s"][kk], c["s"][k])


def epsilon_upper(c, delta):
  """Smallest epsilon (upper bound) with ``up(eps) <= delta``; ``(eps, ok)``.

  ``ok`` is False when the answer is below the window (then ``eps`` is the
  window's bottom, still a valid upper bound) or above it (``inf``).
  """
  below = c["up"] <= delta
  found = jnp.any(below)
  k = _first(below)
  extra = c["fft"] + c["tail"] + c["rounding"]
  eps = _solve(c, k, extra, delta)
  eps = jnp.where(k == 0, c["s"][0], eps)
  eps = jnp.where(found, eps, jnp.inf)
  return eps, found & (k > 0)


def epsilon_lower(c, delta):
  """A lower bound of the crossing of the discrete curve with ``delta``.

  If ``low(s_k) > delta`` then the discrete delta exceeds ``delta`` on all of
  ``(-inf, s_k]`` (it is non-increasing), so the crossing is above ``s_k``;
  the last such ``k`` is used and the cell ``(s_k, s_{k+1}]`` is solved
  exactly. ``-inf`` when no grid point qualifies.
  """
  n = c["s"].shape[-1]
  above = c["low"] > delta
  found = jnp.any(above)
  k = n - 1 - _first(above[::-1])
  kn = jnp.minimum(k + 1, n - 1)
  a_abs = jnp.exp(c["a"][k])
  b_abs = jnp.exp(c["b"][k])
  num = a_abs - (c["fft"][k] + c["alias"][k] + c["rounding"][k]) - delta
  good = (num > 0) & (b_abs > 0)
  eps = _safe_log(jnp.where(good, num, 1.0)) - _safe_log(jnp.where(good, b_abs, 1.0))
  eps = jnp.where(good, eps, c["s"][k])
  eps = jnp.clip(eps, c["s"][k], c["s"][kn])
  return jnp.where(found, eps, -jnp.inf)


def _at(c, x):
  n = c["s"].shape[-1]
  k = jnp.clip(jnp.floor((x - c["lo"]) / c["d"]), 0, n - 1).astype(jnp.int32)
  finite = c["a"][k] > -jnp.inf
  a_k = jnp.where(finite, c["a"][k], 0.0)
  gap = jnp.minimum(x + jnp.where(finite, c["b"][k], 0.0) - a_k, 0.0)
  read = jnp.where(finite, jnp.exp(a_k) * -jnp.expm1(jnp.where(finite & (gap < 0), gap, -1.0)), 0.0)
  return k, read


def delta_upper(c, x):
  """Upper bound of the discrete delta at ``x`` (1 below the window)."""
  k, read = _at(c, x)
  out = read + c["rounding"][k] + c["fft"][k] + c["tail"]
  return jnp.where(x < c["s"][0], 1.0, jnp.minimum(out, 1.0))


def delta_lower(c, x):
  """Lower bound of the discrete delta at ``x``."""
  k, read = _at(c, x)
  out = read - c["rounding"][k] - c["fft"][k] - c["alias"][k]
  return jnp.maximum(out, 0.0)
