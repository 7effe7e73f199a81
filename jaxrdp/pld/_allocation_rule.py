"""The tight accountant's rule for :class:`jaxrdp.events.RandomAllocation` (random allocation).

``T`` steps in epochs of ``t = k / q`` steps, each example in ``k`` of every epoch's
steps (a started epoch counts whole, as in the RDP rule: ``E = ceil(T / t)`` epochs).
A uniformly random ``k``-subset of the ``t`` steps is a uniformly random permutation
of the blocked allocation that cuts the steps into ``k`` blocks of ``m = floor(t /
k)`` or ``m + 1`` steps and uses one step of each; ``Q`` is permutation invariant, so
by joint convexity the blocked pair dominates (Feldman and Shenfeld 2025,
arXiv:2502.08202): ``E (k - r)`` 1-out-of-``m`` epochs and ``E r`` 1-out-of-``(m +
1)`` ones, ``r = t - k m``, composed (privacy losses add). A 1-out-of-1 epoch is the
Gaussian mechanism; the others are the discrete pairs of
:func:`jaxrdp.pld._allocation_pld.allocation_epoch_pair` (dominating and dominated,
per direction), composed by the generic path (``_generic``) with the event's
other parts. Feldman and Shenfeld 2026 (arXiv:2602.17284) compute the same
privacy-loss distribution with other discretizations.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..events._allocation_events import RandomAllocation
from ..events._events import Gaussian
from ..rdp._event_curves import gaussian_terms
from ._allocation_pld import allocation_epoch_pair
from ._generic import _INF_LOSS, _NO_LOSS, _gauss_pairs, _symmetric, register_generic_rule
from ._single_plds import BracketedAtoms

__all__ = []


def _condition(event):
  if gaussian_terms(event.inner) is None:
    return (
      f"RandomAllocation({type(event.inner).__name__}) events (the tight accountant has "
      "the random allocation of Gaussian mechanisms only: a Gaussian, or Gaussians under "
      "Composed/SelfComposed)"
    )
  return None


def _sigma(inner):
  """The effective noise multiplier of Gaussians composed on one batch (float)."""
  if isinstance(inner, Gaussian):
    return float(np.asarray(inner.sigma))
  prec = 0.0
  for count, s in gaussian_terms(inner):
    c, s = float(np.asarray(count)), float(np.asarray(s))
    if c < 0 or math.isnan(c) or math.isnan(s) or s < 0:
      raise ValueError(f"RandomAllocation.inner needs counts and sigmas >= 0, got {c}, {s}")
    if c > 0:
      prec += math.inf if s == 0 else c / (s * s)
  return math.inf if prec == 0 else 1.0 / math.sqrt(prec)


@functools.lru_cache(maxsize=4)
def _epoch_parts(sigma: float, size: int):
  pair = allocation_epoch_pair(sigma, size)
  # The lower pairs are built on first use (the accountant reads the lower bound of
  # the direction whose upper bound is the answer).
  return {
    d: ((1.0, BracketedAtoms(pair.upper(d), functools.partial(pair.lower, d), pair.upper_err(d))),)
    for d in ("remove", "add")
  }


def _block_parts(sigma, size):
  if size == 1:
    return _gauss_pairs(sigma, 1.0)
  return _epoch_parts(sigma, size)


@register_generic_rule(RandomAllocation, condition=_condition)
def _random_allocation_steps(event):
  """``[(parts, count)]``: the blocked epochs of ``event`` (see the module)."""
  q = float(np.asarray(event.q))
  steps = float(np.asarray(event.steps))
  k = int(event.selected)
  if not (0.0 <= q <= 1.0) or math.isnan(q):
    raise ValueError(f"RandomAllocation.q must be in [0, 1], got {q!r}")
  if not steps >= 0:
    raise ValueError(f"RandomAllocation.steps must be >= 0, got {steps!r}")
  sigma = _sigma(event.inner)
  if not sigma >= 0:
    raise ValueError(f"RandomAllocation.inner's sigma must be >= 0, got {sigma!r}")
  if q == 0 or steps == 0 or sigma == math.inf:
    return [(_symmetric(_NO_LOSS), 1)]
  if sigma == 0:
    return [(_symmetric(_INF_LOSS), 1)]
  t = round(k / q)
  if abs(k / q - t) > 1e-9 * t or t < k:
    raise ValueError(
      f"RandomAllocation.q must be selected / t for an integer t >= selected = {k}, got {q!r}"
    )
  epochs = math.ceil(steps / t - 1e-12)
  m, r = divmod(t, k)
  out = []
  if k - r > 0:
    out.append((_block_parts(sigma, m), epochs * (k - r)))
  if r > 0:
    out.append((_block_parts(sigma, m + 1), epochs * r))
  return out
