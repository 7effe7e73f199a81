"""The dominating pair of a fixed-size (without replacement) subsampled Gaussian, replace-one.

One DP-SGD step on a batch of ``m`` of the ``n`` examples, drawn uniformly without
replacement (``gamma = m / n``), with gradients clipped to norm ``C`` and noise of std
``sigma C`` on their sum, under the replace-one relation (neighbouring datasets of the
same size differing in one example). The Gaussian step is ``G_{2 / sigma}``-DP under
replace-one (the sum moves by up to ``2 C``), and by Dong, Roth, Su 2019
(arXiv:1905.02383, Thm 4.2, stated for this relation and this sampling) the step is
``C_gamma(f)``-DP with ``f_gamma = gamma f + (1 - gamma) Id`` and ``C_gamma(f) =
min{f_gamma, f_gamma^{-1}}**``, the convex envelope.

``f_gamma`` is the trade-off function of the Poisson pair at the effective multiplier
``s = sigma / 2`` (sensitivity 1, noise ``N(0, s^2)``): remove ``(P, Q) = ((1 - gamma)
N(0, s^2) + gamma N(1, s^2), N(0, s^2))``, and ``f_gamma^{-1}`` that of the swapped pair
(add). The convex conjugate of a convex envelope of a minimum is the maximum of the
conjugates, so the privacy profile of ``C_gamma(f)`` is

    delta(eps) = max(delta_remove(eps), delta_add(eps))      for every real eps,

the profile of a symmetric pair whose privacy loss, on each stretch of levels where
one direction's profile is the larger, has that direction's law, with an atom where
they cross (convexity makes its mass non-negative). It is tight for one step: a
dataset pair attains each direction (the replaced example's gradient ``C u`` against
``-C u`` with every other gradient ``-C u``). By f-DP composition the ``T``-step run is
``C_gamma(f)^{(x) T}``-DP, so this one pair is composed ``T`` times; composing the two
directions separately and taking a maximum at the end would under-report
(Lebeda, Regehr, Kamath, Steinke 2024, arXiv:2405.20769).

What the two bounds bracket: ``epsilon`` is a certified upper bound of the epsilon of
the composed envelope, hence of the run's. The envelope need not be realized by any
dataset pair over many steps, so its own lower bound is not one of the run's;
``epsilon_lower`` is instead a certified lower bound of the run's true epsilon: each
direction of the Poisson pair at ``sigma / 2`` is realized by one dataset pair at every
step, so the run's worst case is at least either direction composed alone (the
``"realized"`` pairs of :func:`fixed_size_pairs`, read by ``_generic``). The bracket
is therefore wider than the accounting's error: on the MNIST configuration (q = 256 /
60000, sigma = 1.1, 14,063 steps, delta = 1e-5) the envelope's epsilon is 18.454 and the
directions' about 14.7, and the true epsilon of the run lies between them.

:class:`FixedSizeEnvelope` gives ``P(L > l)`` and ``Q(L > l)`` of that pair at any
level ``l`` in closed form, from the direction whose profile is the larger at ``l``
(``delta = P(L > l) - e^l Q(L > l)`` of each; a choice within rounding of a tie moves
a loss by a few ulps); ``_single_plds`` discretizes it by
connect-the-dots (Doroshenko et al. 2022, arXiv:2207.04380) from above and from
below, and ``_generic`` composes it. Measured: the remove direction is the larger
for ``eps > 0`` and the add direction for ``eps < 0`` (the profile's symmetry
``delta(-eps) = 1 - e^{-eps} + e^{-eps} delta(eps)``), crossing at 0, where the loss
has an atom of mass ``(1 - gamma) (2 Phi(1 / (2 s)) - 1)``; the code does not rely
on it.

Add/remove is refused (:data:`jaxrdp.events.FIXED_ADD_REMOVE_ERROR`): for
fixed-size batches the two datasets have different sizes, the batch of the larger
one is not a batch of the smaller one plus an example, and no bound is proved here.
"""

from __future__ import annotations

import math

import numpy as np

from ..events._sampling_events import FIXED_ADD_REMOVE_ERROR, FixedSizeSampled
from ..mechanisms._sampled_without_replacement import effective_noise_multiplier
from ._generic import _gauss_pairs, register_generic_rule
from ._single_plds import _GAUSS_Z, Atoms, LossTails, _erfc

__all__ = ["FixedSizeEnvelope", "fixed_size_pairs", "fixed_size_unsupported"]


def _ndtr(x):
  """``Phi(x)``, accurate in both tails."""
  return 0.5 * _erfc(-np.asarray(x, np.float64) / math.sqrt(2.0))


class FixedSizeEnvelope(LossTails):
  """The symmetric pair with profile ``max(delta_remove, delta_add)`` of the Poisson pair
  at rate ``q`` and noise multiplier ``s`` (sensitivity 1).

  Args:
    q: the sampling ratio ``m / n`` in ``(0, 1]``.
    s: the effective noise multiplier (``sigma / 2`` under replace-one), ``> 0``.
  """

  def __init__(self, q, s):
    self.q, self.s = float(q), float(s)

  def _boundary(self, levels):
    """``(full, o)``: ``o`` with ``loss_remove(o) = l``; ``full`` where ``l <= log(1 - q)``.

    ``loss_remove(o) = log(1 - q + q e^{(2 o - 1) / (2 s^2)})``, so ``o = 1/2 + s^2
    log(h / q)`` with ``h = e^l - 1 + q``: ``log1p(expm1(l) / q)`` for ``|l| <= 1``,
    ``l - log q + log(1 - e^{log(1 - q) - l})`` beyond (no ``e^l`` formed), as
    ``jaxrdp.mechanisms._sgm_single_step.log_remove_ratio`` computes it.
    """
    q, s = self.q, self.s
    lv = np.asarray(levels, np.float64)
    near = np.abs(lv) <= 1.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
      v = np.expm1(np.where(near, lv, 0.0)) / q
      log_x = (math.log1p(-q) if q < 1.0 else -np.inf) - np.where(near, 2.0, lv)
      full = np.where(near, v <= -1.0, log_x >= 0.0)
      x = np.exp(np.minimum(log_x, 0.0))
      far = lv - math.log(q) + np.where(log_x < -0.693, np.log1p(-x), np.log(-np.expm1(log_x)))
      ell = np.where(near, np.log1p(np.maximum(v, -1.0)), far)
    return full, np.where(full, 0.0, 0.5 + s * s * ell)

  def _remove_tails(self, levels):
    """Remove direction, ``x ~ (1 - q) N(0, s^2) + q N(1, s^2)`` against ``N(0, s^2)``,
    ``L = loss_remove(x)`` increasing: ``L > l`` iff ``x > o(l)``."""
    q, s = self.q, self.s
    full, o = self._boundary(levels)
    o = np.where(full, 0.0, o)
    hi0, hi1 = _ndtr(-o / s), _ndtr((1.0 - o) / s)  # N(0), N(1) masses above o
    lo0, lo1 = _ndtr(o / s), _ndtr((o - 1.0) / s)
    sp, sq = (1.0 - q) * hi0 + q * hi1, hi0
    cp, cq = (1.0 - q) * lo0 + q * lo1, lo0
    one, zero = np.ones_like(sp), np.zeros_like(sp)
    return tuple(np.where(full, a, b) for a, b in ((one, sp), (one, sq), (zero, cp), (zero, cq)))

  def _add_tails(self, levels):
    """Add direction, ``x ~ N(0, s^2)`` against the mixture, ``L = -loss_remove(x)``:
    ``L > l`` iff ``x < o(-l)``, never where ``-l <= log(1 - q)``."""
    q, s = self.q, self.s
    never, o = self._boundary(-np.asarray(levels, np.float64))
    o = np.where(never, 0.0, o)
    lo0, lo1 = _ndtr(o / s), _ndtr((o - 1.0) / s)
    hi0, hi1 = _ndtr(-o / s), _ndtr((1.0 - o) / s)
    sp, sq = lo0, (1.0 - q) * lo0 + q * lo1
    cp, cq = hi0, (1.0 - q) * hi0 + q * hi1
    one, zero = np.ones_like(sp), np.zeros_like(sp)
    return tuple(np.where(never, a, b) for a, b in ((zero, sp), (zero, sq), (one, cp), (one, cq)))

  @staticmethod
  def _delta(levels, sp, sq):
    """``delta(l) = P(L > l) - e^l Q(L > l)`` (``e^l`` not formed: ``Q`` tails are tiny there)."""
    with np.errstate(divide="ignore", over="ignore"):
      return sp - np.exp(levels + np.log(sq))

  def add_dominates(self, levels):
    """Where the add direction's profile is the larger (ties: remove)."""
    levels = np.asarray(levels, np.float64)
    return self._add_larger(levels, self._remove_tails(levels), self._add_tails(levels))

  def _add_larger(self, levels, rem, add):
    return self._delta(levels, add[0], add[1]) > self._delta(levels, rem[0], rem[1])

  def level_tails(self, levels):
    """``(P(L > l), Q(L > l), P(L <= l), Q(L <= l))`` of the envelope's pair.

    At each level, the tails of the direction whose profile is the larger there: on a
    stretch where one direction dominates, the envelope's profile is that direction's,
    so are its slope ``-e^l Q(L > l)`` and ``P(L > l) = delta(l) + e^l Q(L > l)``. A
    crossing inside a cell puts the atom's masses (the jump of the slope) into that
    cell's differences.
    """
    levels = np.asarray(levels, np.float64)
    rem_t, add_t = self._remove_tails(levels), self._add_tails(levels)
    add = self._add_larger(levels, rem_t, add_t)
    return tuple(np.where(add, a, r) for r, a in zip(rem_t, add_t))

  def range(self):
    """``[-l, l]`` with ``l`` the remove loss ``_GAUSS_Z`` scales beyond either centre:
    outside it each direction, hence the envelope, has ``P``-mass below ``Phi(-12)``."""
    q, s = self.q, self.s
    z = (2.0 * (1.0 + _GAUSS_Z * s) - 1.0) / (2.0 * s * s)
    top = float(np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + z))
    z_lo = (2.0 * (-_GAUSS_Z * s) - 1.0) / (2.0 * s * s)
    bottom = float(np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + z_lo))
    edge = max(top, -bottom)
    return -edge, edge


_NO_LOSS = ((1.0, Atoms([0.0], [1.0])),)
_INF_LOSS = ((1.0, Atoms([np.inf], [1.0])),)


def fixed_size_unsupported(event) -> str | None:
  """Why the tight accountant cannot account a :class:`FixedSizeSampled` (``None``: it can)."""
  if event.relation != "replace_one":
    return "FixedSizeSampled events under relation='add_remove' (" + FIXED_ADD_REMOVE_ERROR + ")"
  return None


def fixed_size_pairs(event):
  """Both directions' parts (one symmetric pair) of a concrete :class:`FixedSizeSampled`,
  and the realized pairs of the lower bound (the Poisson pair at ``sigma / 2``)."""
  if event.relation != "replace_one":
    raise ValueError(FIXED_ADD_REMOVE_ERROR)
  q = float(np.asarray(event.gamma))
  s = float(effective_noise_multiplier(float(np.asarray(event.inner.sigma)), event.relation))
  if q <= 0 or s == np.inf:
    parts = _NO_LOSS
  elif s == 0:
    parts = _INF_LOSS
  else:
    parts = ((1.0, FixedSizeEnvelope(min(q, 1.0), s)),)
    return {"remove": parts, "add": parts, "realized": _gauss_pairs(s, min(q, 1.0))}
  return {"remove": parts, "add": parts}


@register_generic_rule(FixedSizeSampled, condition=fixed_size_unsupported)
def _fixed_size_steps(event):
  return [(fixed_size_pairs(event), 1)]
