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
(1 - e^{eps - s})``. Both partial sums are kept relative to the top of the
window (nothing overflows) in two levels: sums over blocks of ``B`` bins, then
inside the one block where the answer lies. The search costs ``O(n)`` without
a cumulative sum over the whole window. Tilting makes the float64 noise floor
relative to delta: an absolute error ``|dr|`` per bin costs at most
``M^T e^{-lam eps} ||dr||_1`` in delta, and the tilt makes ``M^T e^{-lam eps}``
of the order of delta itself.

Error terms, each an upper bound (``u = 2^-53``, ``n`` bins):

* ``fft``: the reading weights of the bins above ``s_k`` are at most
  ``M^T e^{-lam s_j}``, so an error of at most ``err_inf`` per bin (Euclidean
  norm ``err_l2``) costs at most ``M^T e^{-lam s_k}`` times
  ``err_inf / (1 - e^{-lam d})`` (or ``err_l2 / sqrt(1 - e^{-2 lam d})``), each
  capped by summing over all ``n`` bins (``_compose`` gives both bounds);
* ``tail``: the composed mass above the window, by Chernoff on the *discrete*
  single-step MGF: ``P(L > hi) <= min_nu exp(sum_j T_j log M_j(nu) - nu hi)``,
  plus the composed ``+inf`` mass ``1 - prod_j (1 - p_inf,j)^{T_j}``;
* ``alias``: mass outside the window wraps around into it (circular
  convolution of period ``W = n d``). It only *adds* mass, so the upper bound
  stays valid; the lower bound subtracts what it could have added to the delta
  read at ``s``: mass below the window (below ``lo``) lands ``j W`` higher,
  where the tilted reader weighs it ``e^{-j lam W}`` times its P-mass, in all
  at most ``P(L < lo) e^{-lam W} / (1 - e^{-lam W})`` with
  ``P(L < lo) <= min(e^{K(0)}, min_{nu < 0} e^{K(nu) - nu lo})``; mass above
  ``s + j W`` lands above ``s`` after ``j`` turns with weight ``e^{j lam W}``,
  in all at most ``sum_j exp(K(nu) - nu s - j (nu - lam) W)`` for any
  ``nu > lam``, with ``K(nu) = sum_j T_j log M_j(nu)`` the discrete
  moment-generating function;
* summation round-off: ``8 n u`` times the P-mass above ``eps`` (sums of
  non-negative terms, and their difference; each term's weight
  ``e^{c (top - s)}``, a product of two tabulated exponentials, is within
  about ``(4 + |c (top - s)|) u <= 660 u`` relative of exact, mostly from the
  rounding of its exponent, which the margin covers with room to spare since
  ``n >= 1024``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrdp._core.numerics import UNIT_ROUNDOFF

__all__ = ["curve", "epsilon_upper", "epsilon_lower", "delta_upper", "delta_lower"]

_BLOCK = 256


def _safe_log(x):
  """``log x`` with ``-inf`` at 0 and a zero (not NaN) derivative there."""
  pos = x > 0
  return jnp.where(pos, jnp.log(jnp.where(pos, x, 1.0)), -jnp.inf)


def _first(mask):
  """Index of the first True (0 if none), as int32, without an integer iota."""
  n = mask.shape[-1]
  pos = jnp.arange(n, dtype=jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
  idx = jnp.min(jnp.where(mask, pos, float(n)))
  return jnp.where(idx < n, idx, 0.0).astype(jnp.int32)


def _last(mask):
  """Index of the last True (0 if none), as int32."""
  n = mask.shape[-1]
  return (n - 1 - _first(mask[::-1])).astype(jnp.int32)


def curve(w, lo, d, lam, log_c, fft_l2, tail, tau, top):
  """Block sums of one composed tilted PMF on its window.

  Args:
    w: ``(n,)`` tilted composed masses at losses ``s_k = lo + k d``.
    lo, d, lam: window bottom, spacing and tilt (scalars).
    log_c: ``T log M(lam)`` summed over phases.
    fft_l2: ``(err_inf, err_l2)``: bounds on the round-off in ``w``, per bin and
      in Euclidean norm.
    tail: bound on the delta contributed above the window (incl. ``+inf`` mass).
    tau: ``(nu, K(nu), W)``: exponents, the log moment-generating function of
      the composed discrete PLD at them, and the circle's length, for the
      bound on the aliased mass.
    top: the highest loss read (masses above it must be zero in ``w``; ``tail``
      accounts for them); ``(1 + lam) (top - lo) <= 700`` keeps the scaled
      sums finite.
  """
  n = w.shape[-1]
  blk = min(_BLOCK, n)
  nb = n // blk
  wc = jnp.maximum(w, 0.0).reshape(nb, blk)
  # e^{c (top - s_k)} for k = i blk + j as e^{c (top - lo - d blk i)} e^{-c d j}: two
  # short tables of exponentials and a product per bin, in place of an
  # exponential per bin (the error is within the summation round-off bound).
  dist = top - lo - d * blk * jnp.arange(nb, dtype=w.dtype)  # top - (start of block i)
  within = d * jnp.arange(blk, dtype=w.dtype)

  def weighted(c):
    return wc * jnp.exp(jnp.minimum(c * dist, 700.0))[:, None] * jnp.exp(-c * within)[None, :]

  b1 = weighted(lam)
  b2 = weighted(1.0 + lam)
  e1 = b1.reshape(n)
  e2 = b2.reshape(n)
  zero = jnp.zeros((1,), w.dtype)
  # Sums over the blocks after each block (exclusive suffix sums over blocks).
  after1 = jnp.concatenate([jnp.cumsum(jnp.sum(b1, -1)[::-1])[::-1][1:], zero])
  after2 = jnp.concatenate([jnp.cumsum(jnp.sum(b2, -1)[::-1])[::-1][1:], zero])
  return dict(
    e1=e1,
    e2=e2,
    after1=after1,
    after2=after2,
    # sums over j > first bin of each block
    start1=after1 + jnp.sum(b1[:, 1:], -1),
    start2=after2 + jnp.sum(b2[:, 1:], -1),
    lo=lo,
    d=d,
    lam=lam,
    top=top,
    base=log_c - lam * top,  # log(M^T e^{-lam top})
    log_c=log_c,
    fft_l2=fft_l2,
    tail=tail,
    tau=tau,
    n=n,
    blk=blk,
  )


def _difference(c, s1, s2, x):
  """``A - e^x B`` from the scaled suffix sums: ``e^base (s1 - e^{x - top} s2)``.

  The difference is taken on the scaled sums (each within ``e^700``), and the
  scale ``e^base`` is applied in log space: alone it underflows where delta is
  near 1e-300 (and ``B`` itself once the losses pass ~745).
  """
  diff = jnp.maximum(s1 - jnp.exp(x - c["top"]) * s2, 0.0)
  return jnp.exp(c["base"] + _safe_log(diff))


def _terms(c, s1, s2, s):
  """``(read, rounding, fft, alias, log_a, log_b)`` at losses ``s`` with suffix sums ``s1, s2``."""
  log_a = c["base"] + _safe_log(s1)  # log sum_{j>k} p_j (untilted P-mass above)
  log_b = c["base"] - c["top"] + _safe_log(s2)  # log sum_{j>k} p_j e^{-s_j}
  read = _difference(c, s1, s2, s)
  rounding = 8.0 * c["n"] * UNIT_ROUNDOFF * jnp.exp(log_a)
  err_inf, err_l2 = c["fft_l2"]
  n = float(c["n"])
  lam_d = c["lam"] * c["d"]
  l1_weight = jnp.minimum(n, 1.0 / -jnp.expm1(-lam_d))
  l2_weight = jnp.minimum(jnp.sqrt(n), 1.0 / jnp.sqrt(-jnp.expm1(-2.0 * lam_d)))
  # M^T e^{-lam s} times the round-off, multiplied in log space (the factor alone
  # can underflow where delta is tiny).
  err = jnp.minimum(err_inf * l1_weight, err_l2 * l2_weight)
  fft = jnp.exp(c["log_c"] - c["lam"] * s + _safe_log(err))
  return read, rounding, fft, _alias(c, s), log_a, log_b


def _alias(c, s):
  """Bound on the delta that wrap-around adds at losses ``s`` (see the module docstring)."""
  nu, kk, circle = c["tau"]
  lam = c["lam"]
  # P(L < lo): K(0) is the log of the total mass; nu < 0 bounds the lower tail.
  log_low = jnp.min(jnp.where(nu <= 0, kk - jnp.minimum(nu, 0.0) * c["lo"], jnp.inf))
  below = jnp.exp(log_low - lam * circle) / -jnp.expm1(-lam * circle)
  up = nu > lam
  gain = jnp.where(up, nu - lam, 1.0) * circle
  s = jnp.asarray(s)[..., None]
  log_above = kk - nu * s - gain - jnp.log(-jnp.expm1(-gain))
  return below + jnp.exp(jnp.min(jnp.where(up, log_above, jnp.inf), axis=-1))


def _block(c, b):
  """Bins of block ``b``: their losses and exclusive suffix sums ``(s, s1, s2, e1, e2)``."""
  blk = c["blk"]
  e1 = jax.lax.dynamic_slice(c["e1"], (b * blk,), (blk,))
  e2 = jax.lax.dynamic_slice(c["e2"], (b * blk,), (blk,))
  zero = jnp.zeros((1,), e1.dtype)
  s1 = jnp.concatenate([jnp.cumsum(e1[::-1])[::-1][1:], zero]) + c["after1"][b]
  s2 = jnp.concatenate([jnp.cumsum(e2[::-1])[::-1][1:], zero]) + c["after2"][b]
  s = c["lo"] + c["d"] * (b * blk + jnp.arange(blk, dtype=e1.dtype))
  return s, s1, s2, e1, e2


def _block_ends(c):
  nb = c["after1"].shape[-1]
  blk = c["blk"]
  return c["lo"] + c["d"] * (blk * jnp.arange(1, nb + 1, dtype=c["e1"].dtype) - 1.0)


def _block_starts(c):
  nb = c["after1"].shape[-1]
  return c["lo"] + c["d"] * (c["blk"] * jnp.arange(nb, dtype=c["e1"].dtype))


def _up(c, s1, s2, s):
  read, rounding, fft, _, _, _ = _terms(c, s1, s2, s)
  return read + rounding + fft + c["tail"]


def _low(c, s1, s2, s):
  read, rounding, fft, alias, _, _ = _terms(c, s1, s2, s)
  return read - rounding - fft - alias


def epsilon_upper(c, delta):
  """Smallest epsilon (upper bound) with ``up(eps) <= delta``; ``(eps, ok, slope)``.

  The certified curve ``up`` is non-increasing, so the first block whose last
  bin is below ``delta`` holds the first such bin ``k``; the answer is solved
  exactly on the cell ``(s_{k-1}, s_k]``, where the curve is
  ``A + extra - e^eps B`` with sums over ``j >= k``. ``ok`` is False when the
  answer is below the window (then ``eps`` is the window's bottom, still a valid
  upper bound) or above it (``inf``). ``slope`` is ``-d log delta / d eps``
  there (it sets the discretization error of epsilon). ``fft`` is the
  round-off term of delta there.
  """
  below = _up(c, c["after1"], c["after2"], _block_ends(c)) <= delta
  found = jnp.any(below)
  b = _first(below)
  s, s1, s2, e1, e2 = _block(c, b)
  i = _first(_up(c, s1, s2, s) <= delta)
  k = b * c["blk"] + i
  # Sums over j >= k, the loss s_{k-1} and the error terms there.
  t1 = s1[i] + e1[i]
  t2 = s2[i] + e2[i]
  s_prev = s[i] - c["d"]
  _, rounding, fft, _, log_a, log_b = _terms(c, t1, t2, s_prev)
  num = jnp.exp(log_a) + rounding + fft + c["tail"] - delta
  # log B directly: B = sum p_j e^{-s_j} underflows float64 once the losses pass ~745.
  good = (num > 0) & (log_b > -jnp.inf)
  eps = _safe_log(jnp.where(good, num, 1.0)) - jnp.where(good, log_b, 0.0)
  # Where the cell cannot be solved (rounding), its top s_k, where up <= delta was
  # checked, is the sound answer.
  eps = jnp.clip(jnp.where(good, eps, s[i]), s_prev, s[i])
  eps = jnp.where(k == 0, c["lo"], eps)
  eps = jnp.where(found, eps, jnp.inf)
  # -d log delta / d eps at the answer: the reading curve is A + extra - e^eps B.
  slope = jnp.where(good, jnp.exp(jnp.minimum(eps + log_b, 700.0)) / delta, 0.0)
  return eps, found & (k > 0), slope, fft


def epsilon_lower(c, delta):
  """A lower bound of the crossing of the discrete curve with ``delta``.

  If ``low(s_k) > delta`` then the discrete delta exceeds ``delta`` on all of
  ``(-inf, s_k]`` (it is non-increasing), so the crossing is above ``s_k``;
  the last block whose first bin qualifies is searched for its last such bin
  ``k``, and the cell ``(s_k, s_{k+1}]`` is solved exactly. ``-inf`` when no
  bin qualifies.
  """
  above = _low(c, c["start1"], c["start2"], _block_starts(c)) > delta
  found = jnp.any(above)
  b = _last(above)
  s, s1, s2, _, _ = _block(c, b)
  i = _last(_low(c, s1, s2, s) > delta)
  _, rounding, fft, alias, log_a, log_b = _terms(c, s1[i], s2[i], s[i])
  num = jnp.exp(log_a) - (fft + alias + rounding) - delta
  good = (num > 0) & (log_b > -jnp.inf)  # log B directly, as in epsilon_upper
  eps = _safe_log(jnp.where(good, num, 1.0)) - jnp.where(good, log_b, 0.0)
  eps = jnp.clip(jnp.where(good, eps, s[i]), s[i], s[i] + c["d"])
  return jnp.where(found, eps, -jnp.inf)


def _at(c, x):
  """The discrete delta at ``x`` and the error terms of its cell."""
  k = jnp.clip(jnp.floor((x - c["lo"]) / c["d"]), 0, c["n"] - 1).astype(jnp.int32)
  b = k // c["blk"]
  s, s1, s2, _, _ = _block(c, b)
  i = k - b * c["blk"]
  _, rounding, fft, alias, _, _ = _terms(c, s1[i], s2[i], s[i])
  # On the cell, e^x B <= A (every atom above x), so the difference is >= 0 up to rounding.
  return _difference(c, s1[i], s2[i], x), rounding, fft, alias


def delta_upper(c, x):
  """Upper bound of the discrete delta at ``x`` (1 below the window), and its round-off term."""
  read, rounding, fft, _ = _at(c, x)
  out = read + rounding + fft + c["tail"]
  return jnp.where(x < c["lo"], 1.0, jnp.minimum(out, 1.0)), fft


def delta_lower(c, x):
  """Lower bound of the discrete delta at ``x``."""
  read, rounding, fft, alias = _at(c, x)
  return jnp.maximum(read - rounding - fft - alias, 0.0)
