"""Conversion between jaxrdp events and dp_accounting's ``DpEvent`` trees.

dp_accounting stays optional: it is imported only when a conversion needs it,
and :func:`is_dp_accounting_event` recognises its events without importing it.

Supported: ``GaussianDpEvent``, ``LaplaceDpEvent``, ``PoissonSampledDpEvent``,
``SelfComposedDpEvent``, ``ComposedDpEvent``, ``NoOpDpEvent`` and
``RandomizedResponseDpEvent`` with two buckets. dp_accounting's randomized
response with noise parameter ``p`` over ``k`` buckets keeps the true bucket
with probability ``1 - p`` and otherwise draws one uniformly, so with ``k = 2``
it answers truthfully with probability ``1 - p / 2``: it is
``RandomizedResponse(1 - p / 2)``. More buckets have another RDP curve, which
jaxrdp does not implement; they are refused. One bucket releases nothing
(``NoOp``).
"""

from __future__ import annotations

import numpy as np
import jax

from ._events import (
  Composed,
  Event,
  Gaussian,
  Laplace,
  NoOp,
  PoissonSampled,
  RandomizedResponse,
  SelfComposed,
)

__all__ = ["from_dp_accounting", "to_dp_accounting", "is_dp_accounting_event"]


def is_dp_accounting_event(x) -> bool:
  """True if ``x`` is a dp_accounting ``DpEvent`` (checked without importing it)."""
  return any(
    c.__name__ == "DpEvent" and c.__module__.startswith("dp_accounting") for c in type(x).__mro__
  )


def from_dp_accounting(dp_event) -> Event:
  """The jaxrdp event describing the same mechanism as a dp_accounting ``DpEvent``.

  Raises:
    TypeError: for a type jaxrdp does not represent (the message names it).
    ValueError: for a ``RandomizedResponseDpEvent`` with more than two buckets.

  Examples:
    >>> import dp_accounting
    >>> from jaxrdp.events import from_dp_accounting
    >>> e = from_dp_accounting(dp_accounting.SelfComposedDpEvent(
    ...     dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 100))
    >>> type(e).__name__, e.count, e.event.q, e.event.inner.sigma
    ('SelfComposed', 100, 0.01, 1.0)
  """
  from dp_accounting import dp_event as d  # only reached with a DpEvent in hand

  if isinstance(dp_event, d.GaussianDpEvent):
    return Gaussian(dp_event.noise_multiplier)
  if isinstance(dp_event, d.LaplaceDpEvent):
    return Laplace(dp_event.noise_multiplier)
  if isinstance(dp_event, d.PoissonSampledDpEvent):
    return PoissonSampled(dp_event.sampling_probability, from_dp_accounting(dp_event.event))
  if isinstance(dp_event, d.SelfComposedDpEvent):
    return SelfComposed(from_dp_accounting(dp_event.event), dp_event.count)
  if isinstance(dp_event, d.ComposedDpEvent):
    return Composed(tuple(from_dp_accounting(e) for e in dp_event.events))
  if isinstance(dp_event, d.NoOpDpEvent):
    return NoOp()
  if isinstance(dp_event, d.RandomizedResponseDpEvent):
    k, p = dp_event.num_buckets, dp_event.noise_parameter
    if k == 1:
      return NoOp()
    if k != 2:
      raise ValueError(
        f"RandomizedResponseDpEvent with num_buckets={k}: jaxrdp's RandomizedResponse "
        "is binary (num_buckets=2)"
      )
    return RandomizedResponse(1.0 - p / 2.0)
  raise TypeError(
    f"jaxrdp cannot convert a dp_accounting {type(dp_event).__name__}; "
    "supported: Gaussian, Laplace, PoissonSampled, SelfComposed, Composed, "
    "NoOp and two-bucket RandomizedResponse events"
  )


def _scalar(event, name):
  value = getattr(event, name)
  if isinstance(value, jax.core.Tracer):
    raise ValueError(
      f"{type(event).__name__}.{name} is traced; to_dp_accounting needs concrete values"
    )
  if np.ndim(value) != 0:
    raise ValueError(
      f"{type(event).__name__}.{name} has shape {np.shape(value)}: dp_accounting events "
      "are scalar, convert one grid cell at a time"
    )
  return float(value)


def to_dp_accounting(event: Event):
  """The dp_accounting ``DpEvent`` of a jaxrdp event with scalar, concrete leaves.

  A grid event (a leaf of non-scalar shape) raises ValueError: dp_accounting's
  events are scalar, so convert one cell at a time. ``RandomizedResponse(p)``
  becomes ``RandomizedResponseDpEvent(2 (1 - p), 2)`` for ``p >= 1/2``; for
  ``p < 1/2`` it becomes that of ``1 - p``, the same mechanism with its output
  relabelled (the same privacy curve). Needs dp_accounting installed.
  """
  import dp_accounting as dpa

  if isinstance(event, Gaussian):
    return dpa.GaussianDpEvent(_scalar(event, "sigma"))
  if isinstance(event, Laplace):
    return dpa.LaplaceDpEvent(_scalar(event, "scale"))
  if isinstance(event, PoissonSampled):
    return dpa.PoissonSampledDpEvent(_scalar(event, "q"), to_dp_accounting(event.inner))
  if isinstance(event, SelfComposed):
    count = _scalar(event, "count")
    if count != int(count):
      raise ValueError(f"SelfComposed.count must be an integer for dp_accounting, got {count}")
    return dpa.SelfComposedDpEvent(to_dp_accounting(event.event), int(count))
  if isinstance(event, Composed):
    return dpa.ComposedDpEvent([to_dp_accounting(e) for e in event.events])
  if isinstance(event, NoOp):
    return dpa.NoOpDpEvent()
  if isinstance(event, RandomizedResponse):
    p = _scalar(event, "p")
    return dpa.RandomizedResponseDpEvent(2.0 * min(p, 1.0 - p), 2)
  raise TypeError(f"no dp_accounting equivalent for a {type(event).__name__} event")
