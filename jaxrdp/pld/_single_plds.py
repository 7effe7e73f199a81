"""Privacy-loss distributions of single mechanisms, discretized with certified bounds.

A dominating pair ``(P, Q)`` of one step has the privacy loss ``L = log(dP/dQ)``
under ``P``; its hockey-stick curve is ``delta(eps) = E_P[(1 - e^{eps - L})_+]``
(mass at ``L = +inf`` counts fully). Three families cover the mechanisms here:

* *atoms*: finitely many losses with their ``P``-masses (randomized response,
  (eps, delta)-DP, the discrete Laplace, the non-private release);
* *location mixtures*: ``P = sum_i a_i K(o - c_i)``, ``Q = sum_j b_j K(o - d_j)``
  for a Gaussian or Laplace kernel ``K`` and a loss non-decreasing in ``o``
  (Gaussian, Laplace, their Poisson subsamples in each direction, mixtures of
  Gaussians, the truncated subsampled Gaussian's parts). Then
  ``{L > l} = {o > o*(l)}``, and ``P(L > l)``, ``Q(L > l)`` are the kernels'
  tails at ``o*(l)``, found by regula falsi (Illinois) inside a tabulated bracket;
* *loss tails* (:class:`LossTails`): a pair known through ``P(L > l)`` and
  ``Q(L > l)`` at every level ``l`` in closed form (the fixed-size subsampled
  Gaussian's symmetric envelope, ``_fixed_size_pairs``).

Each is discretized on the grid ``g_k = k h`` twice:

* *upper* (pessimistic): connect-the-dots per cell (Doroshenko, Ghazi, Kamath,
  Kumar, Manurangsi 2022, arXiv:2207.04380). The ``P``-mass ``m`` and ``Q``-mass
  ``y`` of the losses in ``[g_k, g_{k+1}]`` go to the two ends, ``m_hi = (m - y
  e^{g_k}) / (1 - e^{-h})`` at ``g_{k+1}`` and the rest at ``g_k``. This keeps
  ``m`` and ``y``: a mean-preserving spread of ``e^{-L}``, and ``y -> (1 - e^eps
  y)_+`` is convex, so by Jensen (conditionally on the other steps) every
  composed ``delta(eps)`` only grows. Tails cut off the grid go to ``+inf``
  (above) or to the next grid point above them (below): losses only grow.
* *lower* (optimistic): each cell's mass at its lower end ``g_k`` and the tail
  above the grid at the last point: losses only shrink, so every composed
  ``delta(eps)`` only shrinks; the tail below the grid is dropped.

A single step is a tuple of ``(weight, part)`` (a mixture of pairs on disjoint
outputs, as dp_accounting builds the truncated subsampled Gaussian) per
direction; :func:`discretize` gives its masses at ``g_{k0 + j}`` from above and
below, the masses at ``+inf``, a round-off bound and the mass moved by more than
a cell (for the coupling lower bound of ``_generic``).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erfc

from jaxrdp._core.numerics import UNIT_ROUNDOFF

from .._core import precision as _precision

__all__ = ["Atoms", "BracketedAtoms", "LocationMixture", "LossTails", "discretize"]


def _erfc(x):
  """``erfc`` in float64 (JAX's, in a local float64 scope: the global config is untouched)."""
  with _precision.Float64Scope():
    return np.asarray(erfc(jnp.asarray(x, jnp.float64)), np.float64)


# Kernel tails cut at this many scales beyond the outermost centre (Gaussian:
# mass 1.8e-33 beyond 12 sigma goes to +inf in the upper bound).
_GAUSS_Z = 12.0


class Atoms:
  """Finitely many losses ``losses`` (``+inf`` allowed) with ``P``-masses ``masses``."""

  def __init__(self, losses, masses):
    losses = np.asarray(losses, np.float64).ravel()
    masses = np.asarray(masses, np.float64).ravel()
    keep = (masses > 0) & (losses > -np.inf)
    self.losses, self.masses = losses[keep], masses[keep]

  def range(self):
    fin = self.losses[np.isfinite(self.losses)]
    return (0.0, 0.0) if fin.size == 0 else (float(fin.min()), float(fin.max()))

  def moments(self):
    fin = np.isfinite(self.losses)
    m, x = self.masses[fin], self.losses[fin]
    return float(np.sum(m * x)), float(np.sum(m * x * x))


class BracketedAtoms:
  """A step known through two finite pairs: ``upper`` dominates it, ``lower`` is dominated.

  ``upper`` is a dominating pair's privacy loss (its connect-the-dots image is then an
  upper bound too); ``lower`` a (sub-)measure of losses whose composed hockey-stick
  curves are below the true ones (its cells at their lower ends are then a lower
  bound). ``err_upper`` and ``err_lower`` bound the L1 round-off of their masses. The
  coupling lower bound of ``_generic`` (the upper PMF shifted back) does not apply:
  ``coupled`` is False. ``lower`` may be given as a function returning ``(lower,
  err_lower)`` (``err_lower`` then omitted), called on first use: a lower bound is
  often wanted in one direction only.
  """

  coupled = False

  def __init__(self, upper: Atoms, lower, err_upper: float, err_lower: float | None = None):
    self.upper, self.err_upper = upper, float(err_upper)
    if callable(lower):
      self._make_lower, self._lower = lower, None
    else:
      self._make_lower, self._lower = None, (lower, float(err_lower))

  def _resolve(self):
    if self._lower is None:
      atoms, err = self._make_lower()
      self._lower = (atoms, float(err))
    return self._lower

  @property
  def lower(self) -> Atoms:
    return self._resolve()[0]

  @property
  def err_lower(self) -> float:
    return self._resolve()[1]

  def range(self):
    return self.upper.range()

  def moments(self):
    return self.upper.moments()


class LocationMixture:
  """``P = sum a_i K(o - c_i)`` against ``Q = sum b_j K(o - d_j)``, loss non-decreasing in ``o``.

  Args:
    kernel: ``"gauss"`` (``N(0, scale^2)``) or ``"laplace"`` (scale ``scale``).
    scale: the kernel's scale, ``> 0``.
    p: ``[(a_i, c_i)]``; q: ``[(b_j, d_j)]``, weights summing to 1.
  """

  def __init__(self, kernel, scale, p, q):
    self.kernel, self.scale = kernel, float(scale)
    self.pw, self.pc = (np.array([float(v) for v in col]) for col in zip(*p))
    self.qw, self.qc = (np.array([float(v) for v in col]) for col in zip(*q))
    centres = np.concatenate([self.pc, self.qc])
    if kernel == "gauss":
      self.lo = centres.min() - _GAUSS_Z * self.scale
      self.hi = centres.max() + _GAUSS_Z * self.scale
      self.flat_tails = False
    else:  # Laplace: the loss is constant outside the centres, so the tails are exact atoms
      self.lo, self.hi = centres.min(), centres.max()
      self.flat_tails = True

  def _log_mix(self, o, w, c):
    """``log sum_i w_i K(o - c_i)`` up to a term common to ``P`` and ``Q`` (one ufunc per component).

    Gaussian kernels: ``-(o - c)^2 / (2 s^2) = -o^2 / (2 s^2) + (c o - c^2 / 2) / s^2``,
    and the first term cancels in the loss.
    """
    s = self.scale
    out = None
    for wi, ci in zip(w, c):
      if self.kernel == "gauss":
        term = math.log(wi) + (ci * o - 0.5 * ci * ci) / (s * s)
      else:
        term = math.log(wi) - np.abs(o - ci) / s
      out = term if out is None else np.logaddexp(out, term)
    return out

  def loss(self, o):
    o = np.asarray(o, np.float64)
    return self._log_mix(o, self.pw, self.pc) - self._log_mix(o, self.qw, self.qc)

  def _sf(self, x):
    """Kernel mass above ``x`` (accurate in both tails)."""
    s = self.scale
    if self.kernel == "gauss":
      return 0.5 * _erfc(x / (s * math.sqrt(2.0)))
    return np.where(x >= 0, 0.5 * np.exp(-np.abs(x) / s), 1.0 - 0.5 * np.exp(-np.abs(x) / s))

  def tails(self, o):
    """``(P(O > o), Q(O > o), P(O <= o), Q(O <= o))``."""
    o = np.asarray(o, np.float64)[..., None]
    sp = (self.pw * self._sf(o - self.pc)).sum(-1)
    sq = (self.qw * self._sf(o - self.qc)).sum(-1)
    cp = (self.pw * self._sf(self.pc - o)).sum(-1)
    cq = (self.qw * self._sf(self.qc - o)).sum(-1)
    return sp, sq, cp, cq

  def range(self):
    return float(self.loss(self.lo)), float(self.loss(self.hi))

  def boundary(self, levels):
    """``o*(l)``: where the loss crosses each level ``l`` in ``[lo, hi]``.

    A table of the loss brackets each level within one of 4096 pieces, then the
    Illinois variant of regula falsi (superlinear, the bracket kept) to float64
    resolution; on a flat piece of the loss (a Laplace tail, an atom of the loss)
    any point of it, which puts the atom's mass in one of its two neighbouring
    cells at the same loss.
    """
    grid = np.linspace(self.lo, self.hi, 4097)
    table = np.maximum.accumulate(self.loss(grid))
    j = np.clip(np.searchsorted(table, levels, side="right") - 1, 0, 4095)
    a, b = grid[j], grid[j + 1]
    fa, fb = table[j] - levels, table[j + 1] - levels
    best, best_f = a, np.abs(fa)
    last = np.zeros(levels.shape, np.int8)
    for _ in range(24):
      den = fb - fa
      ok = (den > 0) & (fa <= 0) & (fb > 0)
      x = np.where(ok, (a * fb - b * fa) / np.where(ok, den, 1.0), 0.5 * (a + b))
      x = np.where((x > a) & (x < b), x, 0.5 * (a + b))
      x = np.where(fa == 0, a, x)  # a root found: stay there
      fx = self.loss(x) - levels
      closer = np.abs(fx) < best_f
      best, best_f = np.where(closer, x, best), np.where(closer, np.abs(fx), best_f)
      left = fx <= 0
      # Illinois: an end kept twice in a row has its value halved.
      fb = np.where(left & (last == 1), 0.5 * fb, fb)
      fa = np.where(~left & (last == -1), 0.5 * fa, fa)
      a, fa = np.where(left, x, a), np.where(left, fx, fa)
      b, fb = np.where(left, b, x), np.where(left, fb, fx)
      last = np.where(left, 1, -1).astype(np.int8)
      if np.all(best_f <= 8.0 * UNIT_ROUNDOFF * np.maximum(1.0, np.abs(levels))):
        break
    return best

  def moments(self):
    """Mean and second moment of the loss under ``P`` (coarse quadrature; sizes the grid only)."""
    o = np.linspace(self.lo, self.hi, 4001)
    log_dens = -0.5 * (o / self.scale) ** 2 if self.kernel == "gauss" else 0.0
    log_dens = log_dens + self._log_mix(o, self.pw, self.pc)
    dens = np.exp(log_dens - np.max(log_dens))  # no overflow at a small scale
    dens = dens / max(dens.sum(), 1e-300)
    x = self.loss(o)
    return float(np.sum(dens * x)), float(np.sum(dens * x * x))


class LossTails:
  """A pair given by the tails of its loss at any level (subclassed by closed-form pairs).

  Subclasses define ``level_tails(levels)``: ``(P(L > l), Q(L > l), P(L <= l),
  Q(L <= l))`` at each loss level ``l`` (each accurate to a few ulps of its own
  size), ``range()``: levels outside which the ``P``-mass is negligible (it is moved
  up to the grid, or to ``+inf``, in the upper bound), and ``moments()``.
  """

  def level_tails(self, levels):
    raise NotImplementedError

  def range(self):
    raise NotImplementedError

  def moments(self):
    """Mean and second moment of the loss under ``P`` (coarse; sizes the grid only)."""
    lo, hi = self.range()
    levels = np.linspace(lo, hi, 4001)
    sp, _, cp, _ = self.level_tails(levels)
    mass = np.where(sp[:-1] > 0.5, cp[1:] - cp[:-1], sp[:-1] - sp[1:])
    mass = np.maximum(mass, 0.0)
    mid = 0.5 * (levels[1:] + levels[:-1])
    mass = mass / max(mass.sum(), 1e-300)
    return float(np.sum(mass * mid)), float(np.sum(mass * mid * mid))


def _atoms_grid(part, weight, h):
  """Cells and masses of an :class:`Atoms` part: ``(k, m_lo, m_hi, m_low, p_inf)``."""
  fin = np.isfinite(part.losses)
  x, m = part.losses[fin], part.masses[fin] * weight
  k = np.floor(x / h)
  # Split each atom between g_k and g_{k+1} keeping its Q-mass m e^{-x}.
  frac = np.clip(-np.expm1(k * h - x) / -np.expm1(-h), 0.0, 1.0)
  return k.astype(np.int64), m * (1.0 - frac), m * frac, m, float(part.masses[~fin].sum() * weight)


def _mixture_grid(part, weight, h):
  """Cells and masses of a :class:`LocationMixture` part (see the module docstring)."""
  l_lo, l_hi = part.range()
  k_lo, k_hi = math.floor(l_lo / h), math.ceil(l_hi / h)
  if k_hi <= k_lo:
    k_hi = k_lo + 1
  levels = h * np.arange(k_lo + 1, k_hi, dtype=np.float64)
  o = np.concatenate([[part.lo], part.boundary(levels), [part.hi]])
  sp, sq, cp, cq = part.tails(o)
  _, _, cp_lo, cq_lo = part.tails(np.array([part.lo]))
  return _cells(k_lo, k_hi, sp, sq, cp, cq, cp_lo[0], cq_lo[0], weight, h, part.flat_tails)


def _tails_grid(part, weight, h):
  """Cells and masses of a :class:`LossTails` part (tails read at the grid's loss levels)."""
  l_lo, l_hi = part.range()
  k_lo, k_hi = math.floor(l_lo / h), math.ceil(l_hi / h)
  if k_hi <= k_lo:
    k_hi = k_lo + 1
  levels = h * np.arange(k_lo + 1, k_hi, dtype=np.float64)
  sp, sq, cp, cq = part.level_tails(np.concatenate([[l_lo], levels, [l_hi]]))
  return _cells(k_lo, k_hi, sp, sq, cp, cq, cp[0], cq[0], weight, h, False)


def _cells(k_lo, k_hi, sp, sq, cp, cq, bot_p, bot_q, weight, h, flat_tails):
  """Cells ``[g_k, g_{k+1}]``, ``k_lo <= k < k_hi``, from the tails at their ends.

  ``sp, sq`` (``cp, cq``): the ``P``- and ``Q``-mass above (at or below) each of the
  ``k_hi - k_lo + 1`` cell ends, the outer two being the ends of the part's range;
  ``bot_p, bot_q``: the masses below the range. Returns ``(k, m_lo, m_hi, m, p_inf,
  extra_up, extra_low, mass_err)``, ``mass_err`` a list of ``(points, bounds)``: the
  round-off of the masses, each bound placed at the highest point its mass can reach.
  """
  # Masses from the smaller of the two tails (upper tail above the median, lower below).
  m = np.where(sp[:-1] > 0.5, cp[1:] - cp[:-1], sp[:-1] - sp[1:])
  y = np.where(sq[:-1] > 0.5, cq[1:] - cq[:-1], sq[:-1] - sq[1:])
  m = np.maximum(m, 0.0) * weight
  y = np.maximum(y, 0.0) * weight
  top_p, top_q = sp[-1] * weight, sq[-1] * weight
  bot_p, bot_q = bot_p * weight, bot_q * weight
  k = np.arange(k_lo, k_hi, dtype=np.int64)
  # Each tail value is within a few ulps of its own size (erfc, exp and the weighted
  # sum), so a difference of two errs by at most 4 u times the larger one.
  tail = np.where(sp[:-1] > 0.5, cp[1:], sp[:-1])
  # Per cell, at its upper end (the larger loss of the two its mass goes to); the mass
  # below the range at the first point above it.
  mass_err = [
    (k + 1, 4.0 * UNIT_ROUNDOFF * weight * tail),
    (np.array([k_lo + 1]), np.array([4.0 * UNIT_ROUNDOFF * bot_p])),
  ]
  p_inf = 0.0
  extra_up, extra_low = [], []
  if flat_tails:
    # Both tails are atoms at the end losses, inside the first and last cells.
    m[0] += bot_p
    y[0] += bot_q
    m[-1] += top_p
    y[-1] += top_q
  else:
    p_inf = float(top_p)
    extra_up = [(k_lo + 1, bot_p)]  # every loss below the grid is below g_{k_lo + 1}
    extra_low = [(k_hi - 1, top_p)]  # every loss above the grid is above g_{k_hi - 1}
  g = h * k.astype(np.float64)
  with np.errstate(over="ignore", invalid="ignore"):
    hi = np.clip((m - y * np.exp(g)) / -np.expm1(-h), 0.0, m)
  hi = np.where(np.isfinite(hi), hi, m)
  return k, m - hi, hi, m, p_inf, extra_up, extra_low, mass_err


def discretize(parts, h, sides=(True, False)):
  """Upper and lower discretizations of one step (``parts``: ``[(weight, part)]``) on step ``h``.

  ``sides``: which of the two are wanted (``True`` the upper, ``False`` the lower); a
  :class:`BracketedAtoms` part contributes only to those (the other array holds none
  of its mass, and its round-off bound is that of the sides wanted).

  Returns:
    ``(k0, upper, lower, (p_inf_upper, p_inf_lower), mass_err, moved)``: masses at
    losses ``(k0 + j) h`` (upper: connect-the-dots with tails pushed up; lower:
    cells at their lower ends), the ``+inf`` masses (the true one, plus in the upper
    bound a Gaussian tail pushed there), bounds on the round-off of the masses per
    point (each at the highest point the mass it bounds can reach, in either PMF;
    their sum bounds the L1 round-off), and the mass of the tails the upper bound
    moved by more than a cell.
  """
  ups, lows, errs, pinf_up, pinf_low, moved = [], [], [], 0.0, 0.0, 0.0
  u4 = 4.0 * UNIT_ROUNDOFF
  for weight, part in parts:
    if weight <= 0:
      continue
    if isinstance(part, BracketedAtoms):
      tops, bound = [0], 0.0
      if True in sides:
        k, m_lo, m_hi, m, p_inf = _atoms_grid(part.upper, weight, h)
        ups += [(k, m_lo), (k + 1, m_hi)]
        pinf_up += p_inf
        errs += [(k + 1, u4 * m)]
        tops.append(int(k.max()) + 1 if k.size else 0)
        bound = part.err_upper
      if False in sides:
        kl, _, _, ml, p_inf_low = _atoms_grid(part.lower, weight, h)
        lows += [(kl, ml)]
        pinf_low += p_inf_low
        errs += [(kl + 1, u4 * ml)]
        tops.append(int(kl.max()) + 1 if kl.size else 0)
        bound = max(bound, part.err_lower)
      # Bounds of unknown location: at the highest point of either pair.
      errs += [(np.array([max(tops)]), np.array([weight * bound]))]
    elif isinstance(part, Atoms):
      k, m_lo, m_hi, m, p_inf = _atoms_grid(part, weight, h)
      ups += [(k, m_lo), (k + 1, m_hi)]
      lows += [(k, m)]
      pinf_up += p_inf
      pinf_low += p_inf
      errs += [(k + 1, u4 * m)]
    else:
      grid = _tails_grid if isinstance(part, LossTails) else _mixture_grid
      k, m_lo, m_hi, m, p_inf, extra_up, extra_low, err = grid(part, weight, h)
      ups += [(k, m_lo), (k + 1, m_hi)] + [(np.array([a]), np.array([b])) for a, b in extra_up]
      lows += [(k, m)] + [(np.array([a]), np.array([b])) for a, b in extra_low]
      pinf_up += p_inf
      errs += err
      moved += p_inf + sum(b for _, b in extra_up)
  allk = np.concatenate([k for k, _ in ups + lows + errs] + [np.zeros(1, np.int64)])
  k0, k1 = int(allk.min()), int(allk.max())
  upper = np.zeros(k1 - k0 + 1)
  lower = np.zeros(k1 - k0 + 1)
  mass_err = np.zeros(k1 - k0 + 1)
  for k, v in ups:
    np.add.at(upper, k - k0, v)
  for k, v in lows:
    np.add.at(lower, k - k0, v)
  for k, v in errs:
    np.add.at(mass_err, k - k0, v)
  return k0, upper, lower, (pinf_up, pinf_low), mass_err, moved
