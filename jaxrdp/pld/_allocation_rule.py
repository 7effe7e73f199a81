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

The lower bound is read from pairs that one dataset pair realizes (``"realized"``,
see :func:`jaxrdp.pld._generic.register_generic_rule`), never from the blocked pair,
which dominates the mechanism for ``k > 1`` and so is no lower bound of it. The
dataset pair: one example whose clipped gradient is a fixed unit vector, every other
example's zero. The run is ``E0 = floor(T / t)`` whole epochs and a partial one of
``T' = T - E0 t`` steps; dropping the partial epoch, or summing coordinates, is a
post-processing, so any pair read off them is dominated by the run's:

* a whole epoch with ``k = 1`` is the epoch pair itself (its dominated discrete pair);
  with ``k = t`` it is ``t`` Gaussian mechanisms;
* otherwise, the sum of an epoch's ``t`` outputs: ``N(k, t sigma^2)`` against
  ``N(0, t sigma^2)``, a Gaussian pair at noise ``sigma sqrt(t) / k``. Its
  ``mu^2 = k^2 / (t sigma^2)`` is the chi-square divergence of the epoch pair to first
  order in ``1 / sigma^2``, so this is close to the truth at the noise of DP-SGD and
  loose at small ``sigma`` (a few per cent at ``sigma = 0.8``, ``t = 10``);
* the partial epoch: the sum of its ``T'`` outputs, ``N(C, T' sigma^2)`` with ``C``
  hypergeometric (``C`` of the ``k`` chosen steps among the first ``T'`` of ``t``)
  against ``N(0, T' sigma^2)``, a mixture of Gaussians.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..events._allocation_events import RandomAllocation, steps_per_epoch
from ..events._events import Gaussian
from ..rdp._event_curves import gaussian_terms
from ._allocation_pld import allocation_epoch_pair
from ._generic import _INF_LOSS, _NO_LOSS, _gauss_pairs, _symmetric, register_generic_rule
from ._single_plds import BracketedAtoms, LocationMixture

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


# The noise multipliers for which the epoch pair is built (``_allocation_pld``): below,
# exp(1 / sigma^2) leaves float64; above, its tail probabilities underflow.
_EPOCH_SIGMAS = (0.05, 500.0)


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
  t, integral = steps_per_epoch(q, k)
  if not integral or t < k:
    raise ValueError(
      f"RandomAllocation.q must be selected / t for an integer t >= selected = {k}, got {q!r}"
    )
  t = int(t)
  epochs = math.ceil(steps / t - 1e-12)
  whole, partial = _realized_epochs(steps, t)
  in_range = _EPOCH_SIGMAS[0] <= sigma <= _EPOCH_SIGMAS[1]
  if in_range and k == 1 and partial == 0:
    return [(_block_parts(sigma, t), epochs)]  # the lower pair is the epoch's own
  # Upper-bound entries (no realized part), then lower-bound ones (no upper part).
  upper_only = _symmetric(_NO_LOSS)
  if in_range:
    m, r = divmod(t, k)
    blocks = [(m, epochs * (k - r)), (m + 1, epochs * r)]
    out = [({**_block_parts(sigma, b), "realized": upper_only}, n) for b, n in blocks if n > 0]
  else:
    # Outside the epoch pair's range: each epoch is dominated by its k Gaussian
    # mechanisms (no amplification; the accountant also takes the Renyi-DP bound where
    # it is tighter), and the lower bound sums each epoch's outputs.
    out = [({**_gauss_pairs(sigma, 1.0), "realized": upper_only}, epochs * k)]
  for realized, count in _realized_steps(sigma, t, k, whole, partial, epoch_pair=in_range):
    out.append(({**_symmetric(_NO_LOSS), "realized": realized}, count))
  return out


def _realized_epochs(steps: float, t: int) -> tuple[int, int]:
  """``(E0, T')``: the whole epochs of a run of ``steps`` steps and the partial one's steps."""
  whole = math.floor(steps / t + 1e-12)
  return whole, max(0, round(steps - whole * t))


def _hypergeometric(t: int, k: int, n: int) -> list[tuple[float, float]]:
  """``[(P(C = c), c)]``: ``C`` of ``k`` marked among ``t`` in a uniform ``n``-subset."""
  log_total = _log_comb(t, n)
  out = []
  for c in range(max(0, n - (t - k)), min(k, n) + 1):
    w = math.exp(_log_comb(k, c) + _log_comb(t - k, n - c) - log_total)
    if w > 0:
      out.append((w, float(c)))
  norm = math.fsum(w for w, _ in out)
  return [(w / norm, c) for w, c in out]


def _log_comb(n: int, c: int) -> float:
  return math.lgamma(n + 1) - math.lgamma(c + 1) - math.lgamma(n - c + 1)


def _realized_steps(sigma: float, t: int, k: int, whole: int, partial: int, epoch_pair=True):
  """``[(parts by direction, count)]``: pairs realized by one dataset pair whose
  composition is dominated by the run's (see the module); without ``epoch_pair``, a
  whole epoch with ``1 = k < t`` is summed too."""
  out = []
  if whole > 0:
    if k == 1 and (epoch_pair or t == 1):
      out.append((_block_parts(sigma, t), whole))
    elif k == t:
      out.append((_gauss_pairs(sigma, 1.0), whole * t))
    else:
      out.append((_gauss_pairs(sigma * math.sqrt(t) / k, 1.0), whole))
  if partial > 0:
    scale = sigma * math.sqrt(partial)
    counts = _hypergeometric(t, k, partial)
    if len(counts) == 1:
      out.append((_gauss_pairs(scale, 1.0, counts[0][1]), 1))
    else:
      remove = LocationMixture("gauss", scale, counts, [(1.0, 0.0)])
      add = LocationMixture("gauss", scale, [(1.0, 0.0)], [(w, -c) for w, c in counts])
      out.append(({"remove": ((1.0, remove),), "add": ((1.0, add),)}, 1))
  return out
