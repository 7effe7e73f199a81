"""Certified lower bounds on the true epsilon (or delta) of the mechanism an event describes.

An accountant's answer is an upper bound. For some events a lower bound on the
*true* privacy curve is also known: a pair of neighbouring datasets and a test
whose error rates no (epsilon, delta)-DP mechanism could have. This module reads
such a bound from the event itself, by its type, so that every accountant and the
one-call functions report the same one (``epsilon_lower``, ``delta_lower``).

==================================  ===============================================
event                               lower bound
==================================  ===============================================
``ShuffledEpochs`` with             Chua et al. 2024 (arXiv:2403.17673), over the
``batches_per_epoch``               run's complete epochs, a fresh permutation each
                                    (:func:`jaxrdp.mechanisms.shuffle_epsilon_lower_bound`)
``Composed`` / ``SelfComposed``     the largest bound of a part (the whole releases
                                    each part: post-processing), 0 for zero copies
anything else                       none known (``None``)
==================================  ===============================================

The shuffled run. ``batches_per_epoch`` is n / B; an epoch of
:class:`jaxrdp.train.ShuffleSampler` has t = ceil(n / B) batches (the last one
short when B does not divide n: the cube events of the bound have the same
probabilities whatever the batch sizes, since a batch's size is public and only
the maximum over the batches is tested). The run has T = epochs * n / B steps, of
which floor(T / t) complete epochs are bounded; the steps after them are a
post-processing to discard, so any smaller count is valid too (at most 4096
epochs are used). Less than one complete epoch gives the trivial bound 0; a
noise multiplier 0 with a complete epoch gives epsilon = inf (delta = 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from jax.typing import ArrayLike

from .._core.validation import is_concrete
from ..mechanisms._shuffle_lower_bound import (
  shuffle_delta_lower_bound,
  shuffle_epsilon_lower_bound,
)
from ._events import Composed, Event, SelfComposed
from ._sampling_events import ShuffledEpochs

__all__ = ["event_epsilon_lower_bound", "event_delta_lower_bound", "shuffled_run_shape"]

_MAX_EPOCHS = 4096  # the kernel's cap; fewer epochs are a post-processing (a valid bound)
_SNAP = 1e-12  # relative distance under which n / B is read as the integer it rounds to


def shuffled_run_shape(event: ShuffledEpochs) -> tuple[np.ndarray, np.ndarray] | None:
  """``(t, complete epochs)`` of a shuffled run, or ``None`` without ``batches_per_epoch``.

  t = ceil(n / B) batches per epoch (n / B within 1e-12 relative of an integer is
  that integer: float rounding of q = B / n), and floor(T / t) complete epochs of
  the T = epochs * n / B steps (T within 1e-9 relative of an integer is that integer).

  Raises:
    TypeError: for traced fields (the bound needs their values).
  """
  if event.batches_per_epoch is None:
    return None
  if not (is_concrete(event.batches_per_epoch) and is_concrete(event.epochs)):
    raise TypeError(
      "the lower bound of ShuffledEpochs needs concrete (untraced) epochs and batches_per_epoch"
    )
  b = np.asarray(event.batches_per_epoch, np.float64)
  epochs = np.asarray(event.epochs, np.float64)
  with np.errstate(invalid="ignore", over="ignore"):
    near = np.round(b)
    t = np.where(np.abs(b - near) <= _SNAP * b, near, np.ceil(b))
    steps = epochs * b
    whole = np.round(steps)
    steps = np.where(np.abs(steps - whole) <= 1e-9 * steps, whole, steps)
    complete = np.floor(steps / t)
  # Epochs of infinitely many batches (q below 1 / DBL_MAX) never complete.
  complete = np.where(np.isinf(t) & ~np.isnan(epochs), 0.0, complete)
  return t, complete


def _shuffled_epochs(kind: str, event: ShuffledEpochs, given: ArrayLike):
  shape = shuffled_run_shape(event)
  if shape is None:
    return None
  t, complete = shape
  if not is_concrete(event.inner.sigma):
    raise TypeError("the lower bound of ShuffledEpochs needs a concrete (untraced) sigma")
  sigma = np.asarray(event.inner.sigma, np.float64)
  given_arr = np.asarray(given, np.float64)
  sigma, t, complete, given_arr = np.broadcast_arrays(sigma, t, complete, given_arr)
  bad = np.isnan(sigma) | np.isnan(t) | np.isnan(complete) | np.isnan(given_arr)
  run = ~bad & (complete >= 1) & (sigma > 0)
  # Safe stand-ins where the kernel does not apply (masked out below).
  kernel = shuffle_epsilon_lower_bound if kind == "epsilon" else shuffle_delta_lower_bound
  safe_given = np.where(run, given_arr, 0.5)
  value = np.asarray(
    kernel(
      np.where(run, sigma, 1.0),
      np.where(run, t, 1.0),
      safe_given,
      np.where(run, np.minimum(complete, _MAX_EPOCHS), 1.0),
      relation=event.relation,
    )
  )
  noiseless = ~bad & (complete >= 1) & (sigma == 0)
  out = np.where(run, value, 0.0)
  out = np.where(noiseless, np.inf if kind == "epsilon" else 1.0, out)
  return np.where(bad, np.nan, out)


def _composed(kind, event: Composed, given):
  parts = [_lower_bound(kind, e, given) for e in event.events]
  known = [p for p in parts if p is not None]
  if not known:
    return None
  return np.maximum.reduce(np.broadcast_arrays(*known)) if len(known) > 1 else known[0]


def _self_composed(kind, event: SelfComposed, given):
  part = _lower_bound(kind, event.event, given)
  if part is None:
    return None
  if not is_concrete(event.count):
    raise TypeError("the lower bound of SelfComposed needs a concrete (untraced) count")
  count = np.asarray(event.count, np.float64)
  return np.where(count >= 1, part, np.where(np.isnan(count), np.nan, 0.0))


_RULES: dict[type, Callable[[str, Any, ArrayLike], Any]] = {
  ShuffledEpochs: _shuffled_epochs,
  Composed: _composed,
  SelfComposed: _self_composed,
}


def _lower_bound(kind, event, given):
  rule = _RULES.get(type(event))
  return None if rule is None else rule(kind, event, given)


def event_epsilon_lower_bound(event: Event, delta: ArrayLike) -> np.ndarray | None:
  """A certified lower bound on the true epsilon at ``delta`` of ``event``, or ``None``.

  ``None`` where no lower bound is known for the event (see the module's table);
  else a float64 array of the broadcast shape of the event's leaves and ``delta``,
  never above the true epsilon of the mechanism the event describes.

  Examples:
    >>> from jaxrdp.events import Gaussian, ShuffledEpochs, event_epsilon_lower_bound
    >>> ev = ShuffledEpochs(1, Gaussian(0.5), batches_per_epoch=1000)
    >>> round(float(event_epsilon_lower_bound(ev, 1e-6)), 3)
    10.997
    >>> event_epsilon_lower_bound(ShuffledEpochs(1, Gaussian(0.5)), 1e-6) is None
    True
  """
  return _lower_bound("epsilon", event, delta)


def event_delta_lower_bound(event: Event, epsilon: ArrayLike) -> np.ndarray | None:
  """A certified lower bound on the true delta at ``epsilon`` of ``event``, or ``None``.

  As :func:`event_epsilon_lower_bound`, for delta.
  """
  return _lower_bound("delta", event, epsilon)
