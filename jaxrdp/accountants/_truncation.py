"""Truncated Poisson batches: the epsilon of a run whose batches are capped at a capacity.

Any accountant's untruncated answer becomes the truncated run's by paying the
truncation term in delta (:func:`jaxrdp.mechanisms.truncation_delta`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.validation import check_int
from ..mechanisms._truncated_poisson import (
  default_capacity,
  truncated_poisson_delta,
  truncation_delta,
)

__all__ = ["TruncationError", "truncated_poisson_epsilon", "check_capacity"]


class TruncationError(ValueError):
  """Raised when the truncation term of capped Poisson batches alone uses up delta.

  Attributes:
    eta: the truncation term T P[Binomial(n + 1, q) > capacity].
    capacity: the capacity that truncates too often.
    suggested: a capacity that works for this run (:func:`default_capacity`), or None.
  """

  def __init__(self, message: str, *, eta: float, capacity: int, suggested: int | None = None):
    super().__init__(message)
    self.eta = eta
    self.capacity = capacity
    self.suggested = suggested


def check_capacity(capacity, dataset_size) -> tuple[int, int]:
  """``(capacity, dataset_size)`` as validated ints (both given, ``1 <= capacity <= n``)."""
  if capacity is None or dataset_size is None:
    raise ValueError("capacity and dataset_size go together (truncated Poisson batches)")
  dataset_size = check_int("dataset_size", dataset_size, 1)
  capacity = check_int("capacity", capacity, 1, dataset_size)
  return capacity, dataset_size


def _truncated_lower(res, epsilon_at, eta, eps, delta):
  """``res`` with a lower bound of the truncated run's epsilon at ``delta``.

  ``res`` was read at a ``delta' < delta``, so its ``epsilon_lower`` bounds the untruncated
  run there, which may be above the truncated run's epsilon at ``delta``. The truncated
  run is within ``eta`` of the untruncated one in total variation per direction, so its
  ``delta(e) >= delta_untruncated(e) - (1 + e^e) eta``; with ``L`` a lower bound of the
  untruncated epsilon at ``delta + (1 + e^eps) eta`` (``eps >= L`` the upper bound), the
  truncated ``delta(e)`` is at least ``delta`` for every ``e < L``: ``L`` is a lower bound.
  """
  if not hasattr(res, "epsilon_lower") or eta <= 0:
    return res
  d_low = delta + (1.0 + math.exp(min(eps, 700.0))) * eta
  if not d_low < 1.0:
    return res._replace(epsilon_lower=0.0 * res.epsilon_lower)
  low = epsilon_at(d_low).epsilon_lower
  return res._replace(epsilon_lower=low) if float(low) < float(res.epsilon_lower) else res


def truncated_poisson_epsilon(
  epsilon_at: Callable[[float], Any],
  q,
  steps,
  delta,
  *,
  capacity: int,
  dataset_size: int,
  max_iterations: int = 8,
) -> Any:
  """epsilon of Poisson DP-SGD truncated at ``capacity``, at total delta ``delta``.

  With eta = T P[Binomial(n + 1, q) > B_max] (:func:`jaxrdp.train.truncation_delta`),
  an untruncated guarantee (eps, delta') gives the truncated run
  (eps, delta' + (1 + e^eps) eta) (:func:`jaxrdp.train.truncated_poisson_delta`).
  This returns eps = epsilon_at(delta') for a delta' with
  delta' + (1 + e^eps) eta <= delta, found by the fixed-point iteration
  delta'_{k+1} = delta - (1 + e^{eps_k}) eta from delta'_0 = delta, stopped at the
  first iterate that satisfies the inequality (checked with the rounded-up
  :func:`~jaxrdp.train.truncated_poisson_delta`); eta is far below delta for any
  sensible capacity, so it stops after one or two steps. It holds for any
  accountant's ``epsilon_at``.

  Args:
    epsilon_at: ``delta' -> result`` (with an ``epsilon`` field) of the untruncated run.
    q, steps, delta: scalars (concrete): rate, number of steps (integer), delta.
    capacity: B_max (int >= 1).
    dataset_size: n (int >= 1).

  Raises:
    ValueError: naming ``capacity``/``dataset_size``/``steps`` when invalid, or
      (:class:`TruncationError`) if the truncation term alone uses up delta.
  """
  capacity, dataset_size = check_capacity(capacity, dataset_size)
  for name, x in (("q", q), ("steps", steps), ("delta", delta)):
    if np.ndim(x) != 0:
      raise ValueError(f"{name} must be a scalar when capacity is given, got shape {np.shape(x)}")
  steps_f = float(steps)
  if steps_f != math.floor(steps_f):
    raise ValueError(f"steps must be an integer when capacity is given, got {steps!r}")
  eta = truncation_delta(dataset_size + 1, float(q), capacity, int(steps_f))
  delta = float(delta)
  d = delta
  for _ in range(max_iterations):
    if not d > 0:
      break
    res = epsilon_at(d)
    eps = float(res.epsilon)
    if not math.isfinite(eps):
      return res
    if truncated_poisson_delta(eta, eps, d) <= delta:
      return _truncated_lower(res, epsilon_at, eta, eps, delta)
    # Twice the term: the next epsilon (at a smaller delta') is larger, and the
    # margin lets it grow by up to log 2 and still pass the check.
    d = (delta - 2.0 * (1.0 + math.exp(eps)) * eta) * (1.0 - 1e-15)  # below delta, even for eta ~ 0
  suggested = None
  if 0.0 < delta < 1.0 and steps_f >= 1 and 0.0 < float(q) <= 1.0:
    suggested = default_capacity(dataset_size, float(q), int(steps_f), delta)
  hint = f"; capacity {suggested} would do" if suggested is not None else ""
  raise TruncationError(
    f"capacity {capacity} is too small for this run: batches larger than it occur so "
    f"often (a total probability of {eta:.3g} over the run) that truncating them uses "
    f"up delta = {delta:g}; raise the capacity{hint}",
    eta=eta,
    capacity=capacity,
    suggested=suggested,
  )
