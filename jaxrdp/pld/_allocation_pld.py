"""One epoch of random 1-out-of-t allocation of the Gaussian mechanism as discrete pairs.

One epoch of 1-out-of-t allocation is dominated, under add/remove, by the pair
``P = (1/t) sum_i N(e_i, sigma^2 I)``, ``Q = N(0, sigma^2 I)`` (Feldman and
Shenfeld 2025, arXiv:2502.08202; its privacy-loss distribution: Feldman and
Shenfeld 2026, arXiv:2602.17284). Its likelihood ratio is ``S = (1/t) sum_i Y_i``
with ``Y_i = exp(x_i / sigma^2 - c / 2)``, ``c = 1 / sigma^2``, i.i.d. log-normal
of mean 1 under ``Q``, and both directions' hockey-stick curves are expectations
under ``Q`` of convex functions of ``S``: ``E_Q[(S - e^eps)_+]`` (remove) and
``E_Q[(1 - e^eps S)_+]`` (add); over epochs, of the product of the epochs' ``S``.

Upper bound (a dominating pair). Each cell ``[j h, (j + 1) h]`` of ``Y`` splits its
``Q``-mass between its two ends keeping its mean ``E[Y; cell]`` (a mean-preserving
spread, ``E[Y' | Y] = Y``); above ``Y_max = J h`` the ``Q``-mass goes to ``Y_max``
and the rest of the mean, ``E[(Y - Y_max)_+]``, to a point at infinity (the limit
of a spread to ``Y_max`` and ``M -> inf``): a ``P``-mass with no ``Q``-mass, the
``+inf`` loss of the remove direction. Independent spreads give ``E[S' | S] = S``,
so by Jensen (conditionally on the other epochs) both directions' composed curves
of ``(S' Q', Q')`` dominate the true ones: connect-the-dots (Doroshenko, Ghazi,
Kamath, Kumar, Manurangsi 2022, arXiv:2207.04380) applied to the likelihood ratio.

Lower bound (a dominated pair). Releasing only the cell of every coordinate is a
post-processing; its likelihood ratio is ``(1/t) sum_i r(j_i)``, ``r(j) = E[Y |
cell j]``, so its curves are below the true ones. The cell boundaries ``b_j`` are
moved off ``j h`` (a few smoothed Newton steps, on the cells whose defect is well
above the round-off of their mean) until ``r(j)`` is within ``tau`` of the lattice
point ``(j + 1/2) h`` (remove: the point at most ``tau`` above ``r(j)``; add: at most
``tau`` below; ``tau`` per direction, minimizing ``tau + h`` times the mass of the
cells that miss it); a cell that misses it is given the lattice point below ``r(j)``
(remove) or above (add), and the one above ``Y_max`` its lattice point below
(remove) or nothing (add). The lattice sum then bounds the
post-processed ratio within ``tau`` (the larger defect of the cells kept at their
own point) from below (remove: ``S'' >= S_lat - tau``) or above (add), and
``delta_R`` grows with ``S``, ``delta_A`` shrinks: rounding losses down, keeping or
dropping masses, only lowers delta.

Split by the number of large coordinates. A lattice fine enough for the body of ``Y``
and long enough for its tail would be long at small ``sigma`` (``Y_max`` is 7e4 at
``sigma = 0.8``, 4e6 at 0.6), so the coordinates are split at ``B = J h``: with ``M``
the number of them above ``B`` (``p = Q(Y > B)``), the law of ``S`` is the mixture over
``M``, each coordinate's conditional law independent given ``M``. ``M = 0``: the
``t``-fold sum of the lattice below ``B`` (its masses sum to ``1 - p``, so the sum carries
``(1 - p)^t``). ``M = 1``: ``t`` times the ``(t - 1)``-fold sum (one more inverse
transform of the same power) times one large coordinate on geometric cells (ratio
``_LARGE_RATIO``) from ``B`` to ``Y_max``, the sum moved onto a coarse lattice of at most
``_COARSE_POINTS`` points: in the upper bound spread (mean-preserving, so Jensen
holds), in the lower bound each index at the coarse point below it (remove) or above it
(add), and the large coordinate at its cell's mean rounded the safe way (a release of
its cell: post-processing). ``M >= 2``: the upper bound puts ``Q``-mass ``C(t, 2) p^2`` at
``S = 2 B / t`` (a lower end of ``S`` there) and ``P``-mass ``E_Q[S; M >= 2] <= (t - 1) p
P_1(Y > B) + C(t - 1, 2) p^2`` at ``+inf``; ``B`` is the smallest split at which that is at
most ``_TAIL`` (:func:`_split_z`); the lower bound drops it. The split is used only
where it shortens the lattice by a quarter or more (at ``sigma = 0.8`` the lattice
reaches ``t + 1.5e3`` to ``t + 2.4e3`` instead of ``t + 7e4``).

The sum ``t S`` of a lattice variable is one FFT, a power ``t`` and one inverse FFT
(the ``P``-masses share the power ``c^{t-1}``: two real transforms each way;
:func:`jaxrdp.pld._compose.compose`, whose per-bin and Euclidean round-off bounds
become bounds on the masses here: ``Q``-masses through ``min(n e_inf, sqrt(n) e_2)``,
``P``-masses ``s_j q_j`` through ``min(e_inf sum_j s_j, e_2 |s|_2)``). The circle
has length ``n``, and the mass of sums at or beyond ``n`` wraps around; it is
bounded by Chernoff from the lattice PMF (bounded, so its moment-generating
function exists): ``Q``-mass ``M(lam)^t e^{-lam n}``, ``P``-mass ``h M(lam)^{t-1}
M'(lam) e^{-lam n}``. Wrapped mass lands at a smaller sum: in the add direction
that only raises its loss (safe); in the remove direction its ``P``-mass is
added to the ``+inf`` atom (upper) and the wrapped mass' largest ``P``-mass is
charged to the round-off (lower).
"""

from __future__ import annotations

import math

import numpy as np

from jaxrdp._core.numerics import UNIT_ROUNDOFF

from ._single_plds import Atoms, _erfc

__all__ = ["EpochPair", "allocation_epoch_pair"]

# P-mass of one coordinate above Y_max (per epoch, sent to +inf in the upper bound).
_TAIL = 1e-16
# Wrap-around mass tolerated per epoch.
_WRAP = 1e-18
# Largest FFT length of the exp-space stage (the cell h widens to fit).
MAX_EXP_LATTICE = 1 << 22
# Above the split B, a coordinate's cells are geometric with this ratio.
_LARGE_RATIO = 1.01
# Points of the coarse lattice of the other coordinates' sum beside a large one.
_COARSE_POINTS = 512
_NEWTON_STEPS = 3
# Newton steps move the cells whose defect exceeds this many times its round-off bound.
_NEWTON_SIGNAL = 32.0


def _small_tails(ws):
  """``P(N(0, 1) > |w|)`` for each array ``w`` of ``ws`` (the smaller tail at ``w``).

  One float64 ``erfc`` call on the arrays joined and padded to a power of two or three
  times one, so that configurations share compiled programs; the larger
  tail is ``1 - `` this, accurate since it is at least ``1/2``.
  """
  sizes = [w.size for w in ws]
  total = sum(sizes)
  k = max(total - 1, 1023).bit_length()
  n = 3 << (k - 2) if total <= 3 << (k - 2) else 1 << k
  x = np.zeros(n)
  np.concatenate([np.abs(w) for w in ws], out=x[:total])
  e = 0.5 * _erfc(x / math.sqrt(2.0))
  return np.split(e[:total], np.cumsum(sizes)[:-1])


_GL_X, _GL_W = np.polynomial.legendre.leggauss(12)
# Cells narrower than this in z are integrated by Gauss-Legendre (12 nodes: for the
# Gaussian density times exp or expm1 of a linear function on a cell this narrow, the
# rule's error term is below 1e-25 relative), the others from the CDF's tails.
# (Not in the round-off bound: the rule's truncation error, far below it.)
_GL_WIDTH = 0.25


def _cell_masses(b, sc, with_split=False):
  """``Q``- and ``P_1``-masses of the cells between consecutive boundaries ``b`` (``Y``-values).

  ``log Y = sc z - sc^2 / 2`` with ``z ~ N(0, 1)`` under ``Q`` and ``N(sc, 1)`` under
  ``P_1``. A narrow cell is integrated by Gauss-Legendre in ``z`` (relative accuracy,
  no cancellation); a wide one (far in a tail) from the tail in which the CDF
  difference does not cancel. With ``with_split``, also ``E_Q[Y - a; cell] / (b - a)``
  (the mass that a mean-preserving split sends to the cell's top ``b``), from
  ``Y - a = a expm1(sc (z - z_a))``. Returns ``(q, p, err_q, err_p[, up, err_up])``,
  ``err``: bounds on the absolute round-off.
  """
  with np.errstate(divide="ignore"):
    z = (np.log(b) + 0.5 * sc * sc) / sc
  lo, hi = z[:-1], z[1:]
  out = []
  ws = (z, z - sc)
  for w, small in zip(ws, _small_tails(ws)):
    pos = w >= 0
    up = np.where(pos, small, 1.0 - small)  # P(Z > w)
    dn = np.where(pos, 1.0 - small, small)  # P(Z <= w)
    hi_side = w[:-1] >= 0
    m = np.where(hi_side, up[:-1] - up[1:], dn[1:] - dn[:-1])
    big = np.where(hi_side, up[:-1], dn[1:])
    out.append([np.maximum(m, 0.0), 8.0 * UNIT_ROUNDOFF * big])
  width = hi - lo
  # Where both tails are small the CDF differences are already accurate (their error is
  # the smaller tail's 8 u): Gauss-Legendre only where a tail exceeds 1e-6.
  tails = np.maximum(out[0][1], out[1][1]) / (8.0 * UNIT_ROUNDOFF)
  gl = np.isfinite(lo) & np.isfinite(hi) & (width <= _GL_WIDTH) & (tails > 1e-6)
  idx = np.nonzero(gl)[0]
  split = None
  if with_split:
    with np.errstate(invalid="ignore", over="ignore"):
      sp = np.clip((out[1][0] - b[:-1] * out[0][0]) / (b[1:] - b[:-1]), 0.0, out[0][0])
      sp_err = (
        out[1][1] + b[:-1] * out[0][1] + 4.0 * UNIT_ROUNDOFF * (out[1][0] + b[:-1] * out[0][0])
      )
      sp_err = sp_err / (b[1:] - b[:-1])
    split = [np.where(np.isfinite(sp), sp, 0.0), np.where(np.isfinite(sp_err), sp_err, 0.0)]
  for start in range(0, idx.size, 1 << 16):
    k = idx[start : start + (1 << 16)]
    mid, half = 0.5 * (lo[k] + hi[k]), 0.5 * width[k]
    zz = mid[:, None] + half[:, None] * _GL_X[None, :]
    dens = np.exp(-0.5 * zz * zz) * (half[:, None] * _GL_W[None, :] / math.sqrt(2.0 * math.pi))
    q = dens.sum(axis=1)
    p = (dens * np.exp(sc * zz - 0.5 * sc * sc)).sum(axis=1)
    out[0][0][k], out[0][1][k] = q, 64.0 * UNIT_ROUNDOFF * q
    out[1][0][k], out[1][1][k] = p, 64.0 * UNIT_ROUNDOFF * p
    if with_split:
      a = b[:-1][k]
      sp = (dens * (a[:, None] * np.expm1(sc * (zz - lo[k][:, None])))).sum(axis=1)
      sp = sp / (b[1:][k] - a)
      split[0][k] = np.minimum(sp, q)
      split[1][k] = 64.0 * UNIT_ROUNDOFF * sp
  (q, eq), (p, ep) = out
  if with_split:
    return q, p, eq, ep, split[0], split[1]
  return q, p, eq, ep


class EpochPair:
  """The discrete pairs of one epoch, both directions, from above and below.

  ``upper(direction)``: :class:`Atoms` of a dominating pair's privacy loss, with
  ``upper_err(direction)`` a bound on the L1 round-off of its masses, built at once.
  ``lower(direction)``: ``(atoms, err)``, the :class:`Atoms` of a (sub-)measure whose
  composed curves are below the true ones and its round-off bound, built on first use
  (the cells are shared by both directions, each direction's sum is its own).
  """

  def __init__(self, sigma, t, max_lattice=MAX_EXP_LATTICE):
    self.sc, self.t = 1.0 / sigma, t
    self.h, self.big_j, self.y_max = plan(sigma, t, max_lattice)
    self._upper, self._upper_err = _upper_pair(self.sc, self.h, self.big_j, self.y_max, t)
    self._cells = None
    self._lower = {}

  def upper(self, direction):
    return self._upper[direction]

  def upper_err(self, direction):
    return self._upper_err[direction]

  def lower(self, direction):
    if direction not in self._lower:
      if self._cells is None:
        no_large = self.y_max <= self.big_j * self.h
        small = _lower_lattices(self.sc, self.h, self.big_j, no_large)
        self._cells = (small, None if no_large else _lower_large(self.sc, small[-1], self.y_max))
      self._lower[direction] = _lower_pair(self._cells, direction, self.h, self.t)
      if len(self._lower) == 2:
        self._cells = None  # both built: the cells are not needed again
    return self._lower[direction]


def _coarse(p, width=64):
  """Bins of ``width`` indices: their masses and (for ``lam > 0`` bounds) top indices."""
  nb = -(-p.size // width)
  pp = np.zeros(nb * width)
  pp[: p.size] = p
  m = pp.reshape(nb, width)
  tops = width * np.arange(1, nb + 1, dtype=np.float64) - 1.0
  keep = m.sum(axis=1) > 0
  return m.sum(axis=1)[keep], tops[keep]


class _WrapBound:
  """Chernoff bounds on ``P(sum >= n)`` and ``E[sum; sum >= n]`` (sums of ``t`` i.i.d. indices
  of ``p``), for any circle length ``n``.

  ``E[e^{lam j}]`` and ``E[j e^{lam j}]`` are bounded from above on bins of 64 indices
  (each index taken at its bin's top), so the bounds hold for the exact PMF. The two
  log-moments on the grid of ``lam`` are computed once; each ``n`` is then a minimum
  over that grid.
  """

  def __init__(self, p, t):
    self.t, self.top = t, float(p.size - 1)
    mass, top = _coarse(p)
    self.lams = np.geomspace(1e-6, 30.0, 96)
    a = np.log(mass)[None, :] + self.lams[:, None] * top[None, :]
    hi = a.max(axis=1, keepdims=True)
    self.m0 = hi[:, 0] + np.log(np.exp(a - hi).sum(axis=1))
    self.m1 = hi[:, 0] + np.log(np.exp(a + np.log(top)[None, :] - hi).sum(axis=1))

  def __call__(self, n):
    t = self.t
    if self.top * t < n:
      return 0.0, 0.0
    with np.errstate(over="ignore"):
      wq = float(np.min(np.exp(t * self.m0 - self.lams * n)))
      wp = float(np.min(np.exp((t - 1) * self.m0 + self.m1 - self.lams * n))) * t
    return min(wq, 1.0), wp


def _fft_length(p, t, wrap):
  """The smallest length (a power of two or three times one) whose wrap-around is negligible
  (``wrap``: the :class:`_WrapBound` of ``(p, t)``)."""
  mean = t * float(np.sum(np.arange(p.size) * p))
  cands = sorted({1 << k for k in range(4, 25)} | {3 << k for k in range(3, 24)})
  for n in cands:
    if n < mean:
      continue
    if (p.size - 1) * t < n:
      return n
    wq, wp = wrap(n)
    if wq <= _WRAP and wp <= _WRAP * max(mean, 1.0):
      return n
  return cands[-1]


def _complex_power(c, k):
  """``c^k`` elementwise (``k >= 1``) by repeated squaring: ``k - 1`` multiplications."""
  out, base = None, c
  while True:
    if k & 1:
      out = base if out is None else out * base
    k >>= 1
    if not k:
      return out
    base = base * base


def _inverse(total, prop, rel, tiny, n, g):
  """``irfft(total, n)`` (clipped at 0) and a bound on its L1 round-off: ``prop`` bounds the
  error each coefficient carries in from the factors' errors, ``rel`` the relative and
  ``tiny`` the absolute rounding of the products (see :func:`_sum_pmf`)."""
  w = np.full(total.size, 2.0)
  w[0] = 1.0
  if n % 2 == 0:
    w[-1] = 1.0
  a = np.abs(total)
  e = prop + rel * a + tiny
  size = a + e
  e_inf = (float(np.sum(w * e)) + g * float(np.sum(w * size))) / n
  e_2 = math.sqrt(float(np.sum(w * e * e))) + g * math.sqrt(float(np.sum(w * size * size)))
  return np.maximum(np.fft.irfft(total, n), 0.0), min(n * e_inf, e_2)


def _sum_pmf(p, t, n, weights, with_fewer=False):
  """The ``Q``-law of the sum of ``t`` i.i.d. indices of ``p`` on a circle of length ``n``,
  and its ``P``-masses ``s q`` (``s`` the mean of the coordinates' ``weights``): ``(q, pm,
  eq, ep)`` with bounds on the L1 round-off of each. With ``with_fewer``, also the
  ``Q``-law of the sum of ``t - 1`` indices and its bound (``t >= 2``): ``(q, pm, eq,
  ep, q_fewer, e_fewer)``.

  The ``P``-mass of a sum is ``(1/t) sum_i w(j_i) Q(config)``: ``t`` equal mixture terms,
  ``(w p / t) * p^{*(t-1)}`` each. With ``c = rfft(p)``, ``c_w = rfft(w p)`` and ``c^{t-1}``
  computed once, ``q = irfft(c^{t-1} c)``, ``pm = irfft(c^{t-1} c_w)`` (and the sum of
  ``t - 1``, ``irfft(c^{t-1})``): two forward and two (three) inverse real transforms.

  Round-off: the bound of :func:`jaxrdp.pld._compose.compose` in numpy (Higham 2002,
  Sec. 24.1: every coefficient of a forward transform off by at most ``dc = g |x|_1``,
  ``g = (1 + 10 u)^{log2 n + 2} - 1``; the product ``c_w c^{t-1}`` off by ``dc_w m^{t-1}
  + m_w (t - 1) m^{t-2} dc`` with ``m = min(|c| + dc, |x|_1 + dc)`` (the same for
  ``m_w``); the inverse transform maps a spectral error ``E`` to ``sum |E| / n`` per bin
  and ``|E|_2 / sqrt(n)`` in norm and adds its own ``g`` times the spectrum), except
  the power's own rounding: ``c^{t-1}`` is formed by repeated squaring, and a complex
  product is within ``sqrt(5) u`` relative of the product of its (rounded) factors
  (Brent, Percival, Zimmermann 2007; ``2 u`` with a fused multiply-add), so a product
  of ``k`` factors made by ``k - 1`` multiplications, in any order, is within ``(1 +
  sqrt(5) u)^{k-1} - 1`` relative of the product of the computed ``c``: ``(1 +
  sqrt(5) u)^{t-1} - 1`` for ``c^{t-1} c`` and ``c^{t-1} c_w``, about ``2.24 t u``
  (below the ``4 u (1 + t (1 + |log c|))`` of a power through ``exp(log)``), plus an
  absolute ``4 t 2^{-1074}`` per coefficient for underflow (the factors are at most
  ``1 + dc`` in modulus). A per-bin bound ``e_inf`` and a norm bound ``e_2`` bound
  the L1 error by ``min(n e_inf, sqrt(n) e_2)``.
  """
  x = np.zeros(n)
  x[: p.size] = p
  xp = np.zeros(n)
  xp[: p.size] = p * weights
  if t == 1:
    return x, xp, 0.0, 0.0
  t = float(t)
  g = (1.0 + 10.0 * UNIT_ROUNDOFF) ** (math.ceil(math.log2(n)) + 2.0) - 1.0
  c, cp = np.fft.rfft(x), np.fft.rfft(xp)
  l1, l1p = ((1.0 + g) * float(np.sum(np.abs(v))) for v in (x, xp))
  dc, dcp = g * l1, g * l1p
  absc = np.abs(c)
  with np.errstate(under="ignore"):
    power = _complex_power(c, int(t) - 1)  # c^(t-1)
    total_q, total_p = power * c, power * cp
  with np.errstate(divide="ignore", under="ignore", over="ignore"):
    m = np.minimum(absc + dc, dc + l1)
    m_tm2 = np.exp((t - 2.0) * np.log(m))  # m^(t-2)
    m_tm1 = m_tm2 * m
    mp = np.minimum(np.abs(cp) + dcp, dcp + l1p)
    prop_q = t * dc * m_tm1  # dc m^(t-1) + m (t - 1) m^(t-2) dc
    prop_p = dcp * m_tm1 + mp * (t - 1.0) * dc * m_tm2
  rel = math.expm1((t - 1.0) * math.log1p(math.sqrt(5.0) * UNIT_ROUNDOFF)) * (1.0 + 1e-6)
  tiny = 4.0 * t * 2.0**-1074
  q, eq = _inverse(total_q, prop_q, rel, tiny, n, g)
  pm, ep = _inverse(total_p, prop_p, rel, tiny, n, g)
  if not with_fewer:
    return q, pm, eq, ep
  if t == 2.0:  # the sum of one index: p itself
    return q, pm, eq, ep, x, 0.0
  rel_f = math.expm1((t - 2.0) * math.log1p(math.sqrt(5.0) * UNIT_ROUNDOFF)) * (1.0 + 1e-6)
  with np.errstate(under="ignore", over="ignore"):
    prop_f = (t - 1.0) * dc * m_tm2
  q_f, e_f = _inverse(power, prop_f, rel_f, tiny, n, g)
  return q, pm, eq, ep, q_f, e_f


def _large_bounds(lo, y_max):
  """Boundaries of the large coordinate's cells: geometric from ``lo`` to ``y_max`` (ratio at
  most ``_LARGE_RATIO``; none when ``y_max <= lo``), then ``inf``."""
  if y_max > lo:
    k = max(int(math.ceil(math.log(y_max / lo) / math.log(_LARGE_RATIO))), 1)
    g = lo * np.exp(np.linspace(0.0, math.log(y_max / lo), k + 1))
    g[0], g[-1] = lo, y_max
  else:
    g = np.array([lo])
  return np.concatenate([g, [np.inf]])


class _Large:
  """One coordinate's law above the split ``B``: points ``g`` with ``Q``-masses ``w``, bounds
  ``l1`` on their L1 round-off and ``first`` on the same weighted by the points, and (spread
  only) its ``P``-mass at infinity and upper bounds on ``Q(Y > B)`` and ``P_1(Y > B)``."""

  def __init__(self, g, w, l1, first, at_inf=0.0, p_q=0.0, p_p=0.0):
    keep = w > 0
    self.g, self.w, self.l1, self.first = g[keep], w[keep], float(l1), float(first)
    self.at_inf, self.p_q, self.p_p = float(at_inf), float(p_q), float(p_p)
    # Upper bounds on the true total mass and first moment.
    self.mass = float(np.sum(self.w)) * (1.0 + 4.0 * UNIT_ROUNDOFF * self.w.size) + self.l1
    self.mean = (
      float(np.sum(self.w * self.g)) * (1.0 + 4.0 * UNIT_ROUNDOFF * self.w.size) + self.first
    )


def _upper_lattice(sc, h, big_j, y_max):
  """The spread ``Y'``: below ``B = J h`` on ``0, h, ..., J h`` (``Q``-masses), above it on
  the large cells' ends ``B = g_0 < ... < g_K = Y_max``, with its mass at infinity.

  Returns ``(lattice, (l1, first), large)``: ``l1`` bounds the L1 round-off of the
  lattice masses and ``first`` the same weighted by the points' values; ``large``: a
  :class:`_Large`.
  """
  bl = _large_bounds(big_j * h, y_max)
  b = np.concatenate([h * np.arange(big_j + 1, dtype=np.float64), bl[1:]])
  if bl.size == 2:  # no large cells: [Y_max, inf) at Y_max = J h on the lattice
    q, p, eq, ep, up, e_up = _cell_masses(b, sc, with_split=True)
    lat = np.zeros(big_j + 1)
    lat[:-1] += q[:-1] - up[:-1]
    lat[1:] += up[:-1]
    lat[-1] += q[-1]
    e = eq[:-1] + 2.0 * e_up[:-1]
    j = np.arange(big_j, dtype=np.float64)
    l1 = float(np.sum(e) + eq[-1])
    first = float(np.sum(e * h * (j + 1.0)) + eq[-1] * y_max)
    at_inf = max(p[-1] - y_max * q[-1], 0.0) + ep[-1] + y_max * eq[-1]
    return lat, (l1, first), _Large(np.zeros(0), np.zeros(0), 0.0, 0.0, at_inf)
  q, p, eq, ep, up, e_up = _cell_masses(b, sc, with_split=True)
  nj = big_j
  lat = np.zeros(big_j + 1)
  lat[:-1] += q[:nj] - up[:nj]
  lat[1:] += up[:nj]
  e = eq + 2.0 * e_up  # each cell's two masses: q - up and up
  j = np.arange(big_j, dtype=np.float64)
  l1 = float(np.sum(e[:nj]))
  first = float(np.sum(e[:nj] * h * (j + 1.0)))
  # Above B: the cells' ends; the last cell [Y_max, inf) at Y_max and the rest of its
  # mean at infinity.
  g = bl[:-1]
  w = np.zeros(g.size)
  w[:-1] += q[nj:-1] - up[nj:-1]
  w[1:] += up[nj:-1]
  w[-1] += q[-1]
  at_inf = max(p[-1] - y_max * q[-1], 0.0) + ep[-1] + y_max * eq[-1]
  l1_w = float(np.sum(e[nj:-1]) + eq[-1])
  first_w = float(np.sum(e[nj:-1] * g[1:]) + eq[-1] * y_max)
  p_q = float(np.sum(q[nj:]) + np.sum(eq[nj:])) * (1.0 + 1e-12)
  p_p = float(np.sum(p[nj:]) + np.sum(ep[nj:])) * (1.0 + 1e-12)
  return lat, (l1, first), _Large(g, w, l1_w, first_w, at_inf, p_q, p_p)


def _coarse_sum(x, h, direction=None, offset=0.0, shift=0.0):
  """The law ``x`` of a sum on the lattice ``h (j + offset)``, on a lattice of at most
  ``_COARSE_POINTS`` points ``L`` indices apart: ``(points, masses)``.

  ``direction=None``: a mean-preserving spread (index ``j = a L + r`` splits ``1 - r/L``
  to ``a L``, ``r / L`` to ``(a + 1) L``). ``"remove"``: each index at the point below
  it, minus ``shift``; ``"add"``: at the point above it, plus ``shift`` (rounded down
  and up, for the lower bounds).
  """
  n = x.size
  width = max(1, -(-n // _COARSE_POINTS))
  j = np.arange(n)
  a = j // width
  nb = int(a[-1]) + 2
  if direction is None:
    r = (j - a * width) / width
    m = np.bincount(a, x * (1.0 - r), minlength=nb) + np.bincount(a + 1, x * r, minlength=nb)
    pts = h * width * np.arange(nb, dtype=np.float64)
  else:
    m = np.bincount(a, x, minlength=nb)
    k = np.arange(nb, dtype=np.float64) * width
    if direction == "remove":
      pts = h * (k + offset) - shift
    else:
      pts = h * (k + width - 1.0 + offset) + shift
  return pts, m


def _one_large(xs, xm, large, t):
  """Sums ``x + g`` of the other coordinates' coarse sum (points ``xs``, masses ``xm``) and
  one large coordinate: ``(s, Q-masses, sums)`` (``s = (x + g) / t``, the ``Q``-mass ``t
  x_m w``: any of the ``t`` coordinates may be the large one)."""
  keep = xm > 0
  xs, xm = xs[keep], xm[keep]
  tot = (xs[:, None] + large.g[None, :]).ravel()
  qm = (t * xm[:, None] * large.w[None, :]).ravel()
  return tot / t, qm, tot


def _smooth_start(sc, h):
  """The first ``y = j h`` from which ``h |f'/f| <= 0.05`` for the density ``f`` of ``Y``."""
  c = sc * sc
  y = h * np.arange(1, 1 << 16, dtype=np.float64)
  slope = np.abs(1.0 + (np.log(y) + 0.5 * c) / c) / y  # |f'/f| of the log-normal
  ok = np.nonzero(h * slope <= 0.05)[0]
  return float(y[ok[0]]) if ok.size else h


def _low_mean(b, sc):
  """``E_Q[Y | Y < b]`` (scalar, from the lower tails)."""
  z = (math.log(b) + 0.5 * sc * sc) / sc
  q = 0.5 * math.erfc(z / math.sqrt(2.0))
  q = 0.5 * math.erfc(-z / math.sqrt(2.0))
  p = 0.5 * math.erfc(-(z - sc) / math.sqrt(2.0))
  return p / q


def _first_cell(sc, h):
  """``(b, theta)``: the cell ``[0, b]`` whose mean is ``(k0 + theta) h`` with ``b - mean``
  an odd multiple of ``h / 2`` (so the cells ``[b + i h, b + (i + 1) h]``, whose means
  are near their midpoints, aim at the same lattice ``(k + theta) h``)."""
  b0 = _smooth_start(sc, h)
  k = math.ceil((b0 - _low_mean(b0, sc)) / h - 0.5)
  lo, hi = b0 * 0.5, b0
  goal = (k + 0.5) * h
  while hi - _low_mean(hi, sc) < goal:
    hi *= 1.5
  for _ in range(200):
    mid = 0.5 * (lo + hi)
    if mid - _low_mean(mid, sc) < goal:
      lo = mid
    else:
      hi = mid
    if hi - lo <= 4.0 * UNIT_ROUNDOFF * hi:
      break
  b = 0.5 * (lo + hi)
  m = _low_mean(b, sc)
  theta = m / h - math.floor(m / h)
  return b, theta


def _cell_means(q, p, eq, ep, aim):
  """``(r, d, r_err)``: the cells' means ``p / q``, their defects ``r - aim`` (0 where a
  cell has no mass; ``aim`` covers all cells but the last) and bounds on the means'
  round-off (``inf`` where a cell has no mass)."""
  pos = q > 0
  qq = np.where(pos, q, 1.0)
  r = np.where(pos, p / qq, 0.0)
  d = np.where(pos[:-1], r[:-1] - aim, 0.0)
  r_err = np.where(pos, (ep + r * eq) / qq + 4.0 * UNIT_ROUNDOFF * r, np.inf)
  return r, d, r_err


def _lower_cells(sc, h, big_j):
  """Cells whose ``Q``-conditional means of ``Y`` sit (nearly) on the lattice ``(k + theta) h``.

  Cell 0 is ``[0, b_1]``, cell ``i >= 1`` is ``[b_i, b_{i+1}]`` near ``[b_1 + (i - 1) h,
  b_1 + i h]`` (boundaries moved by a few smoothed Newton steps), the last is ``[b_n,
  inf)`` with ``b_n`` near the split ``B = J h``. Returns ``(q, r, r_err, eq, target,
  theta, b_n)``: masses, means, bounds on the means' and the masses' round-off, the
  lattice index each cell but the last aims at, the lattice offset and ``b_n``.
  """
  b1, theta = _first_cell(sc, h)
  n_reg = max(int(math.ceil((big_j * h - b1) / h)), 1)
  base = np.concatenate([[0.0], b1 + h * np.arange(n_reg + 1, dtype=np.float64)])
  first = round(b1 / h + 0.5 - theta)  # lattice index of the first regular cell
  k0 = round(_low_mean(b1, sc) / h - theta)
  target = np.concatenate([[k0], first + np.arange(n_reg, dtype=np.float64)])
  q, p, eq, ep = _cell_masses(np.concatenate([base, [np.inf]]), sc)
  r, d, r_err = _cell_means(q, p, eq, ep, h * (target + theta))
  # Smoothed Newton (moving b_i shifts the means of both neighbours by about half), on
  # the cells whose defect is well above the round-off of their mean: further out (in
  # the tail, where a cell's mass is a difference of nearly equal tails) a step only
  # moves noise. Only boundaries 2 .. m - 1 move, so cells m and beyond keep their
  # first masses; the cells 0 .. m - 1 are recomputed.
  big = np.nonzero(np.abs(d) > _NEWTON_SIGNAL * r_err[:-1])[0]
  m = min(int(big[-1]) + 2, base.size - 1) if big.size else 0
  delta = np.zeros(m + 1)
  for _ in range(_NEWTON_STEPS if m > 2 else 0):
    upd = np.zeros(m + 1)
    upd[2:m] = 0.5 * (d[1 : m - 1] + d[2:m])
    delta = np.clip(delta - upd, -0.25 * h, 0.25 * h)
    head = _cell_masses(base[: m + 1] + delta, sc)
    for full, part in zip((q, p, eq, ep), head):
      full[:m] = part
    r, d, r_err = _cell_means(q, p, eq, ep, h * (target + theta))
  return q, r, r_err, eq, target, theta, float(base[-1])


def _tolerance(size, qn, h):
  """The tolerance ``tau`` of the cells' defects ``size`` (cells of ``Q``-mass ``qn``).

  A kept cell's defect shifts every sum by up to ``tau``, a far cell's coordinate by up
  to ``h``: ``tau`` minimizes ``tau + h (far mass)`` on a grid of 32 points a decade (a
  cell whose size is above ``cand[k]``, bin ``> k``, is far at ``k``).
  """
  cand = np.concatenate([[0.0], np.geomspace(1e-14, 0.1, 13 * 32 + 1) * h])
  mass = np.bincount(np.searchsorted(cand, size), weights=qn, minlength=cand.size + 1)
  far = np.cumsum(mass[::-1])[::-1][1:]
  return float(cand[int(np.argmin(cand + h * far))])


def _lower_lattices(sc, h, big_j, keep_last=False):
  """Lattice PMFs (points ``(k + theta) h``) below (remove) and above (add) the cell means.

  Returns ``(p_remove, tau_remove, p_add, tau_add, theta, mass_err, b_n)``: ``sum r(j_i) >=
  sum l_i - t tau`` (remove) and ``<= sum l_i + t tau`` (add), on the masses kept; the
  cell above ``b_n`` (near the split) is left to :func:`_lower_large`, or with
  ``keep_last`` (no large cells) kept (remove: at the lattice point below its mean; add:
  dropped).
  """
  q, r, r_err, eq, target, theta, b_n = _lower_cells(sc, h, big_j)
  size = int(target[-1]) + 2
  d = r[:-1] - h * (target + theta)
  qn = q[:-1]
  # Per direction, a cell is kept at its own point if its defect (remove: the point
  # above the mean, ``-d``; add: below it, ``d``; plus the mean's round-off) is within
  # the tolerance ``tau``, and is far otherwise.
  pos = qn > 0
  cells = target.astype(np.int64)
  # Remove: far cells at the lattice point at or below r - err (dropped below the lattice).
  size_rm = -d + r_err[:-1]
  near = (size_rm <= _tolerance(size_rm, qn, h)) & pos
  p_rm = np.zeros(size)
  k_dn = np.floor((r - r_err) / h - theta)
  ok = ~near & (k_dn[:-1] >= 0) & pos
  np.add.at(p_rm, cells[near], qn[near])
  np.add.at(p_rm, np.minimum(k_dn[:-1][ok], size - 1).astype(np.int64), qn[ok])
  if keep_last and q[-1] > 0 and k_dn[-1] >= 0:
    p_rm[int(min(k_dn[-1], size - 1))] += q[-1]
  t_rm = float(np.max(np.where(near, size_rm, 0.0), initial=0.0))
  # Add: far cells at the lattice point at or above r + err (past the top: dropped).
  size_ad = d + r_err[:-1]
  near = (size_ad <= _tolerance(size_ad, qn, h)) & pos
  p_ad = np.zeros(size)
  k_up = np.ceil((r + r_err) / h - theta)
  ok = ~near & (k_up[:-1] <= size - 1) & pos
  np.add.at(p_ad, cells[near], qn[near])
  np.add.at(p_ad, np.maximum(k_up[:-1][ok], 0).astype(np.int64), qn[ok])
  t_ad = float(np.max(np.where(near, size_ad, 0.0), initial=0.0))
  # Round-off of the cells' Q-masses: |e|_1 and sum_j |e_j| (their point, at most r + h).
  kept = q.size if keep_last else q.size - 1
  with np.errstate(invalid="ignore"):
    first = float(np.sum(np.where(np.isfinite(r[:kept]), eq[:kept] * (r[:kept] + h), 0.0)))
  mass_err = (float(np.sum(eq[:kept])), first)
  return p_rm, t_rm, p_ad, t_ad, theta, mass_err, b_n


def _lower_large(sc, b_n, y_max):
  """One coordinate above ``b_n``, released as its cell (geometric up to ``Y_max``, then
  ``[Y_max, inf)``): ``{direction: _Large}``, each cell at a point at or below its mean
  (remove) or at or above it (add; the last cell dropped)."""
  bl = _large_bounds(b_n, max(y_max, b_n))
  q, p, eq, ep = _cell_masses(bl, sc)
  pos = q > 0
  qq = np.where(pos, q, 1.0)
  r = np.where(pos, p / qq, 0.0)
  r_err = np.where(pos, (ep + r * eq) / qq + 4.0 * UNIT_ROUNDOFF * r, 0.0)
  v_rm = np.maximum(bl[:-1], r - r_err)
  v_ad = np.minimum(bl[1:-1], (r + r_err)[:-1])
  return {
    "remove": _Large(v_rm, np.where(pos, q, 0.0), np.sum(eq), np.sum(eq * v_rm)),
    "add": _Large(v_ad, np.where(pos, q, 0.0)[:-1], np.sum(eq[:-1]), np.sum(eq[:-1] * v_ad)),
  }


def _split_z(sc, t, z_max):
  """The smallest ``z`` (to 1e-3) with ``(t - 1) p p_1 + C(t - 1, 2) p^2 <= _TAIL``, where
  ``p = P(Z > z)``, ``p_1 = P(Z > z - sc)``: the bound on ``E_Q[S; M >= 2]`` for the split
  ``B = exp(sc z - sc^2 / 2)`` (``M`` coordinates above ``B``); at most ``z_max``."""

  def bound(z):
    p = 0.5 * math.erfc(z / math.sqrt(2.0))
    p1 = 0.5 * math.erfc((z - sc) / math.sqrt(2.0))
    return (t - 1) * p * p1 + 0.5 * (t - 1) * (t - 2) * p * p

  lo, hi = 0.0, z_max
  if bound(hi) > _TAIL:
    return z_max
  while hi - lo > 1e-3:
    mid = 0.5 * (lo + hi)
    lo, hi = (lo, mid) if bound(mid) <= _TAIL else (mid, hi)
  return hi


def plan(sigma, t, max_lattice=MAX_EXP_LATTICE):
  """``(h, J, Y_max)``: the cell of ``Y``, the number of cells below the split ``B = J h``,
  and the top of the large cells (``Y_max = B``: no large cells, the last cell
  ``[B, inf)`` is kept on the lattice at ``B``)."""
  c = 1.0 / (sigma * sigma)
  sc = math.sqrt(c)
  sd = math.sqrt(math.expm1(c))
  h = 0.01 * min(1.0, sd)
  # P_1(Y > Y_max) = P(Z > z - sc) <= _TAIL.
  z = sc + 8.3
  y_max = math.exp(sc * z - 0.5 * c)
  split = min(math.exp(sc * _split_z(sc, t, z) - 0.5 * c), y_max)
  # The sum's lattice reaches about t + B (one coordinate near the split) plus spread;
  # the split is used only where it shortens the lattice by a quarter or more
  # (otherwise B = Y_max: no large cells, and no sum of t - 1 to compute).
  body = t + 40.0 * sd * math.sqrt(t)
  if t <= 1 or body + y_max <= 1.25 * (body + split):
    split = y_max
  h = max(h, 1.5 * (body + split) / max_lattice)
  big_j = max(int(math.ceil(split / h)), 2)
  return h, big_j, (y_max if split < y_max else big_j * h)


def _upper_pair(sc, h, big_j, y_max, t):
  """``({direction: Atoms}, {direction: round-off bound})`` of the dominating pair (the
  spread, summed; see the module)."""
  lat, (l1, first), large = _upper_lattice(sc, h, big_j, y_max)
  wrap = _WrapBound(lat, t)
  n = _fft_length(lat, t, wrap)
  split = large.g.size > 0
  out = _sum_pmf(lat, t, n, h * np.arange(lat.size, dtype=np.float64), split)
  y, yp, eq, ep = out[:4]
  s = h * np.arange(n, dtype=np.float64) / t
  _, wp = wrap(n)
  # One coordinate above B: the other t - 1 (their sum spread onto a coarse lattice).
  if split:
    ex = out[5] + 1.01 * (t - 1) * l1
    xs, xm = _coarse_sum(out[4], h)
    wq_x, wp_x = _WrapBound(lat, t - 1)(n)
  else:
    ex, xs, xm, wq_x, wp_x = 0.0, np.zeros(1), np.zeros(1), 0.0, 0.0
  s1, q1, tot1 = _one_large(xs, xm, large, t)
  x_top = float(xs[-1])
  # Two or more above B: Q-mass at most C(t, 2) p^2 at S = 2 B / t (S is at least that),
  # P-mass E_Q[S; M >= 2] <= (t - 1) p p_1 + C(t - 1, 2) p^2 at infinity.
  s2 = 2.0 * big_j * h / t  # (no large cells: p = 0, nothing there)
  q2 = min(1.0, 0.5 * t * (t - 1) * large.p_q**2)
  inf2 = (t - 1) * large.p_q * large.p_p + 0.5 * (t - 1) * (t - 2) * large.p_q**2
  # P-mass at infinity: the large coordinate's mass there; the wrapped sums' P-mass
  # (no large coordinate: E[S'; sum >= n] <= h wp / t; one: h wp_x w + wq_x E[g w]);
  # and two or more.
  p_inf = large.at_inf + h * wp / t + h * wp_x * large.mass + wq_x * large.mean + inf2
  with np.errstate(divide="ignore"):
    logs = np.log(s)
  atoms = {
    "remove": Atoms(
      np.concatenate([logs, np.log(s1), [math.log(s2), np.inf]]),
      np.concatenate([yp, q1 * s1, [s2 * q2, p_inf]]),
    ),
    "add": Atoms(
      np.concatenate([-logs, -np.log(s1), [-math.log(s2)]]), np.concatenate([y, q1, [q2]])
    ),
  }
  # A lattice error e moves the t-fold sum by at most t |e|_1 in Q-mass and by
  # sum_j |e_j| y_j + (t - 1) |e|_1 in P-mass (the P-weight is the mean coordinate).
  # One large coordinate: Q-masses t x_a w_k, P-masses x_a w_k (x_a + g_k), the errors
  # of x (ex, L1) and w (l1, first) through the products.
  x_mass = 1.0 + ex
  err1_q = t * (ex * large.mass + x_mass * large.l1)
  err1_p = ex * (x_top * large.mass + large.mean) + x_mass * (x_top * large.l1 + large.first)
  err = {
    "remove": ep
    + 1.01 * (first + (t - 1) * l1)
    + 1.01 * err1_p
    + 4.0 * UNIT_ROUNDOFF * float(tot1 @ q1) / t,
    "add": eq + 1.01 * t * l1 + 1.01 * err1_q + 4.0 * UNIT_ROUNDOFF * float(np.sum(q1)),
  }
  return atoms, err


def _lower_pair(cells, name, h, t):
  """``(Atoms, round-off bound)`` of the post-processed pair in direction ``name``, rounded
  the safe way (``cells``: from :func:`_lower_lattices` and :func:`_lower_large`)."""
  (p_rm, t_rm, p_ad, t_ad, theta, (l1, first), _), larges = cells
  pm, tau = (p_rm, t_rm) if name == "remove" else (p_ad, t_ad)
  empty = _Large(np.zeros(0), np.zeros(0), 0.0, 0.0)
  large = empty if larges is None else larges[name]
  wrap = _WrapBound(pm, t)
  n = _fft_length(pm, t, wrap)
  pts = h * (np.arange(pm.size, dtype=np.float64) + theta)
  out = _sum_pmf(pm, t, n, pts, larges is not None)
  y, yp, eq, ep = out[:4]
  s = h * (np.arange(n, dtype=np.float64) + theta * t) / t
  wq, _ = wrap(n)
  # One coordinate above the split: the other t - 1 coordinates' sum, each index at the
  # coarse point below it (remove) or above it (add), shifted by their (t - 1) tau.
  if larges is not None:
    ex = out[5] + 1.01 * (t - 1) * l1
    xs, xm = _coarse_sum(out[4], h, name, theta * (t - 1), (t - 1) * tau)
  else:
    ex, xs, xm = 0.0, np.zeros(1), np.zeros(1)
  s1, q1, tot1 = _one_large(xs, xm, large, t)
  x_top = float(np.max(np.abs(xs)))
  x_mass = 1.0 + ex
  if name == "remove":
    # S'' >= s - tau on the masses kept: P-mass at least (s - tau) q, loss log(s - tau).
    s = s - tau
    keep = s > 0
    pmass = np.maximum(yp - tau * y, 0.0)
    keep1 = s1 > 0
    # Wrapped (spurious) Q-mass has P-weight at most the top s. (Beside a large
    # coordinate the P-masses are the sums times the Q-masses: a wrapped sum is only
    # rounded down.)
    err = ep + tau * eq + wq * float(s[-1]) + 1.01 * (first + (t - 1) * l1)
    err += 1.01 * (
      ex * (x_top * large.mass + large.mean) + x_mass * (x_top * large.l1 + large.first)
    )
    err += 4.0 * UNIT_ROUNDOFF * float(np.abs(tot1) @ q1) / t
    return Atoms(
      np.concatenate([np.log(s[keep]), np.log(s1[keep1])]),
      np.concatenate([pmass[keep], (q1 * s1)[keep1]]),
    ), err
  s = s + tau
  # Wrapped mass lands at a smaller sum, a larger loss of this direction: charged.
  wq_x = _WrapBound(pm, t - 1)(n)[0] if larges is not None else 0.0
  err = eq + wq + 1.01 * t * l1
  err += 1.01 * t * (ex * large.mass + x_mass * large.l1 + wq_x * large.mass)
  err += 4.0 * UNIT_ROUNDOFF * float(np.sum(q1))
  return Atoms(np.concatenate([-np.log(s), -np.log(s1)]), np.concatenate([y, q1])), err


def allocation_epoch_pair(sigma: float, t: int, max_lattice: int = MAX_EXP_LATTICE) -> EpochPair:
  """The discrete pairs of one epoch of 1-out-of-``t`` allocation at noise ``sigma`` (see the
  module); the lower pairs are built on first use."""
  return EpochPair(sigma, t, max_lattice)
