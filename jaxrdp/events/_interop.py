"""Conversion between jaxrdp events and dp_accounting's ``DpEvent`` trees.

dp_accounting stays optional: it is imported only when a conversion needs it,
and :func:`is_dp_accounting_event` recognises its events without importing it.

Every ``DpEvent`` type of dp_accounting has a jaxrdp event describing the same
mechanism, except ``SampledWithReplacementDpEvent`` and ``UnsupportedDpEvent``
(refused with TypeError). Types that only later dp_accounting versions define
(``DiscreteGaussianDpEvent``, ``ExponentialMechanismDpEvent``,
``PermuteAndFlipDpEvent``, ``EpsilonDeltaDpEvent``, ``RandomAllocationDpEvent``)
convert when the installed version has them. The correspondences that need care:

* ``RandomizedResponseDpEvent(p, k)``: dp_accounting keeps the true bucket with
  probability ``1 - p`` and otherwise draws one uniformly. Its neighbouring
  relation is the accountant's, not the event's: ``relation="replace_one"`` (the
  default; the larger curve of the two) or ``"replace_special"`` picks it. With
  ``k = 2`` under replace-one it is ``RandomizedResponse(1 - p / 2)``; otherwise
  :class:`KaryRandomizedResponse`. One bucket releases nothing (``NoOp``).
* ``SampledWithoutReplacementDpEvent(n, B, Gaussian(s))`` is the same mechanism as
  ``FixedSizeSampled(B / n, Gaussian(s))``: one DP-SGD step with noise multiplier
  ``s`` (noise std ``s C`` on a sum of contributions of norm at most ``C``) on a
  batch of ``B`` distinct records. Under the replace-one relation that the bound
  needs, the sum's sensitivity is ``2 C``, and jaxrdp accounts the Gaussian at
  ``s / 2``; dp_accounting's RDP accountant applies ``s`` as given, which is four
  times too small in RDP for this mechanism (google/differential-privacy issue 378).
  So jaxrdp's epsilon for the converted event is larger than
  dp_accounting's, and is the sound one. The inner event may be Gaussians composed
  on the batch, which become one Gaussian at ``(sum_i 1 / s_i^2)^(-1/2)``.
* ``SingleEpochTreeAggregationDpEvent(s, step_counts)``: a list of trees in one
  epoch becomes its largest tree (the only one that matters when each record is
  in one tree).
* ``RandomAllocationDpEvent(event, num_selected=k, num_steps=t)`` is one epoch of
  random k-out-of-t allocation: ``RandomAllocation(k / t, event, t, selected=k)``
  (Gaussian inner events, or Gaussians composed on the batch). Back, a
  ``RandomAllocation`` of E epochs becomes that event, self-composed E times.
"""

from __future__ import annotations

import fractions
import math

import jax
import numpy as np

from ._allocation_events import RandomAllocation, steps_per_epoch
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
from ._mechanism_events import (
  RR_RELATIONS,
  DiscreteGaussian,
  DiscreteLaplace,
  EpsilonDelta,
  ExponentialMechanism,
  KaryRandomizedResponse,
  MixtureOfGaussians,
  NonPrivate,
  PermuteAndFlip,
  SingleEpochTreeAggregation,
  TruncatedSubsampledGaussian,
  ZCDp,
)
from ._sampling_events import FixedSizeSampled
from ._selection_events import RepeatAndSelect

__all__ = ["from_dp_accounting", "is_dp_accounting_event", "to_dp_accounting"]


def is_dp_accounting_event(x) -> bool:
  """True if ``x`` is a dp_accounting ``DpEvent`` (checked without importing it)."""
  return any(
    c.__name__ == "DpEvent" and c.__module__.startswith("dp_accounting") for c in type(x).__mro__
  )


def _relation_name(relation) -> str:
  """``relation`` as one of RR_RELATIONS (a string, or dp_accounting's NeighboringRelation)."""
  if relation is None:
    return "replace_one"
  name = relation.name.lower() if hasattr(relation, "name") else relation
  if name not in RR_RELATIONS:
    raise ValueError(
      f"relation must be one of {RR_RELATIONS} (or dp_accounting's NeighboringRelation "
      f"REPLACE_ONE or REPLACE_SPECIAL), got {relation!r}"
    )
  return name


def _gaussian_sigmas(dp_event, count=1):
  """``[(count, sigma), ...]`` of Gaussians under Composed/SelfComposed DpEvents, else None."""
  from dp_accounting import dp_event as d

  if isinstance(dp_event, d.GaussianDpEvent):
    return [(count, float(dp_event.noise_multiplier))]
  if isinstance(dp_event, d.SelfComposedDpEvent):
    return _gaussian_sigmas(dp_event.event, count * dp_event.count)
  if isinstance(dp_event, d.ComposedDpEvent):
    out = []
    for e in dp_event.events:
      sub = _gaussian_sigmas(e, count)
      if sub is None:
        return None
      out += sub
    return out
  return None


def _effective_sigma(terms) -> float:
  """(sum_i c_i / s_i^2)^(-1/2): Gaussians on the same data are one Gaussian mechanism."""
  precision = math.fsum(c / s**2 if s > 0 else math.inf for c, s in terms if c > 0)
  return math.inf if precision == 0 else 1.0 / math.sqrt(precision)


def _newer(d, name):
  """dp_accounting's event class ``name``, or None where the installed version lacks it."""
  return getattr(d, name, None)


def from_dp_accounting(dp_event, *, relation=None) -> Event:
  """The jaxrdp event describing the same mechanism as a dp_accounting ``DpEvent``.

  Args:
    dp_event: a dp_accounting ``DpEvent`` tree.
    relation: the neighbouring relation for randomized response, whose event does
      not carry it (dp_accounting takes it from the accountant):
      ``"replace_one"`` (default) or ``"replace_special"``, or dp_accounting's
      ``NeighboringRelation.REPLACE_ONE`` / ``REPLACE_SPECIAL``.

  Raises:
    TypeError: for a type jaxrdp does not represent (the message names it).
    ValueError: for an invalid ``relation``, or a sample larger than its dataset.

  Examples:
    >>> import dp_accounting
    >>> from jaxrdp.events import from_dp_accounting
    >>> e = from_dp_accounting(dp_accounting.SelfComposedDpEvent(
    ...     dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 100))
    >>> type(e).__name__, e.count, e.event.q, e.event.inner.sigma
    ('SelfComposed', 100, 0.01, 1.0)
  """
  from dp_accounting import dp_event as d  # only reached with a DpEvent in hand

  rel = _relation_name(relation)

  def convert(e):
    return from_dp_accounting(e, relation=relation)

  if isinstance(dp_event, d.GaussianDpEvent):
    return Gaussian(dp_event.noise_multiplier)
  if isinstance(dp_event, d.LaplaceDpEvent):
    return Laplace(dp_event.noise_multiplier)
  if isinstance(dp_event, d.PoissonSampledDpEvent):
    return PoissonSampled(dp_event.sampling_probability, convert(dp_event.event))
  if isinstance(dp_event, d.SelfComposedDpEvent):
    return SelfComposed(convert(dp_event.event), dp_event.count)
  if isinstance(dp_event, d.ComposedDpEvent):
    return Composed(tuple(convert(e) for e in dp_event.events))
  if isinstance(dp_event, d.NoOpDpEvent):
    return NoOp()
  if isinstance(dp_event, d.NonPrivateDpEvent):
    return NonPrivate()
  if isinstance(dp_event, d.RandomizedResponseDpEvent):
    k, p = dp_event.num_buckets, dp_event.noise_parameter
    if k == 1:
      return NoOp()
    if k == 2 and rel == "replace_one":
      return RandomizedResponse(1.0 - p / 2.0)
    return KaryRandomizedResponse(p, k, rel)
  if isinstance(dp_event, d.ZCDpEvent):
    return ZCDp(dp_event.rho, dp_event.xi)
  if isinstance(dp_event, d.DiscreteLaplaceDpEvent):
    return DiscreteLaplace(dp_event.noise_parameter, dp_event.sensitivity)
  if isinstance(dp_event, d.SampledWithoutReplacementDpEvent):
    n, b = dp_event.source_dataset_size, dp_event.sample_size
    if not 0 <= b <= n or n <= 0:
      raise ValueError(
        f"SampledWithoutReplacementDpEvent needs 0 <= sample_size <= source_dataset_size "
        f"and a positive dataset, got sample_size={b!r}, source_dataset_size={n!r}"
      )
    terms = _gaussian_sigmas(dp_event.event)
    if terms is None:
      raise TypeError(
        "jaxrdp converts a SampledWithoutReplacementDpEvent only around Gaussian "
        f"mechanisms (FixedSizeSampled), got {type(dp_event.event).__name__}"
      )
    return FixedSizeSampled(b / n, Gaussian(_effective_sigma(terms)))
  if isinstance(dp_event, d.SingleEpochTreeAggregationDpEvent):
    steps = dp_event.step_counts
    steps = max(steps) if isinstance(steps, (list, tuple)) else steps
    return SingleEpochTreeAggregation(dp_event.noise_multiplier, steps)
  if isinstance(dp_event, d.RepeatAndSelectDpEvent):
    return RepeatAndSelect(convert(dp_event.event), dp_event.mean, dp_event.shape)
  if isinstance(dp_event, d.MixtureOfGaussiansDpEvent):
    return MixtureOfGaussians(
      dp_event.standard_deviation, tuple(dp_event.sensitivities), tuple(dp_event.sampling_probs)
    )
  if isinstance(dp_event, d.TruncatedSubsampledGaussianDpEvent):
    return TruncatedSubsampledGaussian(
      dp_event.dataset_size,
      dp_event.sampling_probability,
      dp_event.truncated_batch_size,
      dp_event.noise_multiplier,
    )
  allocation = _newer(d, "RandomAllocationDpEvent")
  if allocation is not None and isinstance(dp_event, allocation):
    return _random_allocation_from(dp_event)
  # Types of later dp_accounting versions.
  newer = {
    "DiscreteGaussianDpEvent": lambda e: DiscreteGaussian(e.sigma, e.sensitivity),
    "ExponentialMechanismDpEvent": lambda e: ExponentialMechanism(e.epsilon),
    "PermuteAndFlipDpEvent": lambda e: PermuteAndFlip(e.epsilon),
    "EpsilonDeltaDpEvent": lambda e: EpsilonDelta(e.epsilon, e.delta),
  }
  for name, build in newer.items():
    cls = _newer(d, name)
    if cls is not None and isinstance(dp_event, cls):
      return build(dp_event)
  raise TypeError(
    f"jaxrdp cannot convert a dp_accounting {type(dp_event).__name__}: no jaxrdp event "
    "describes it (SampledWithReplacementDpEvent and UnsupportedDpEvent have none)"
  )


def _random_allocation_from(dp_event) -> RandomAllocation:
  """``RandomAllocationDpEvent(event, num_selected, num_steps)``: one epoch of k-out-of-t."""
  k, t = dp_event.num_selected, dp_event.num_steps
  if not (isinstance(k, int) and isinstance(t, int) and 1 <= k <= t):
    raise ValueError(
      "RandomAllocationDpEvent needs integers 1 <= num_selected <= num_steps, got "
      f"num_selected={k!r}, num_steps={t!r}"
    )
  terms = _gaussian_sigmas(dp_event.event)
  if terms is None:
    raise TypeError(
      "jaxrdp converts a RandomAllocationDpEvent only around Gaussian mechanisms "
      f"(RandomAllocation), got {type(dp_event.event).__name__}"
    )
  return RandomAllocation(k / t, Gaussian(_effective_sigma(terms)), t, k)


def _scalar(event, name, value=None):
  """``event.name`` (or ``value``, an element of it) as a float, if concrete and scalar."""
  value = getattr(event, name) if value is None else value
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


def _integer(event, name):
  value = _scalar(event, name)
  if value != int(value):
    raise ValueError(
      f"{type(event).__name__}.{name} must be an integer for dp_accounting, got {value}"
    )
  return int(value)


def _sample_fraction(gamma: float) -> tuple[int, int]:
  """``(B, n)`` with ``B / n == gamma`` in float64: small if possible, else exact."""
  if gamma in (0.0, 1.0):
    return int(gamma), 1
  short = fractions.Fraction(gamma).limit_denominator(10**9)
  if short.numerator / short.denominator == gamma:
    return short.numerator, short.denominator
  exact = fractions.Fraction(gamma)  # a float is a dyadic rational: B / n is exactly gamma
  return exact.numerator, exact.denominator


def _class(dpa, name, event):
  cls = _newer(dpa.dp_event, name)
  if cls is None:
    version = getattr(dpa, "__version__", "installed")
    raise TypeError(
      f"no dp_accounting equivalent for a {type(event).__name__} event: dp_accounting "
      f"{version} has no {name} (later versions define it)"
    )
  return cls


def to_dp_accounting(event: Event):
  """The dp_accounting ``DpEvent`` of a jaxrdp event with scalar, concrete leaves.

  A grid event (a leaf of non-scalar shape) raises ValueError: dp_accounting's
  events are scalar, so convert one cell at a time. ``RandomizedResponse(p)``
  becomes ``RandomizedResponseDpEvent(2 (1 - p), 2)`` for ``p >= 1/2``; for
  ``p < 1/2`` it becomes that of ``1 - p``, the same mechanism with its output
  relabelled (the same privacy curve). :class:`KaryRandomizedResponse` becomes a
  ``RandomizedResponseDpEvent`` whatever its relation (dp_accounting sets the
  relation on the accountant). ``FixedSizeSampled(gamma, Gaussian(s))`` becomes
  ``SampledWithoutReplacementDpEvent(n, B, GaussianDpEvent(s))`` with ``B / n ==
  gamma`` (the smallest such pair with ``n <= 10^9``, else an exact one); see the
  module doc for how differently the two libraries account it. Needs dp_accounting
  installed.

  ``RandomAllocation`` becomes ``RandomAllocationDpEvent`` (one epoch; more
  epochs self-composed) where the installed dp_accounting defines it.

  Raises:
    TypeError: for an event dp_accounting does not describe (``ShuffledEpochs``,
      or a type the installed version lacks).
    ValueError: for a grid or traced leaf, or a non-integer count.
  """
  import dp_accounting as dpa

  if isinstance(event, Gaussian):
    return dpa.GaussianDpEvent(_scalar(event, "sigma"))
  if isinstance(event, Laplace):
    return dpa.LaplaceDpEvent(_scalar(event, "scale"))
  if isinstance(event, PoissonSampled):
    return dpa.PoissonSampledDpEvent(_scalar(event, "q"), to_dp_accounting(event.inner))
  if isinstance(event, SelfComposed):
    return dpa.SelfComposedDpEvent(to_dp_accounting(event.event), _integer(event, "count"))
  if isinstance(event, Composed):
    return dpa.ComposedDpEvent([to_dp_accounting(e) for e in event.events])
  if isinstance(event, NoOp):
    return dpa.NoOpDpEvent()
  if isinstance(event, NonPrivate):
    return dpa.NonPrivateDpEvent()
  if isinstance(event, RandomizedResponse):
    p = _scalar(event, "p")
    return dpa.RandomizedResponseDpEvent(2.0 * min(p, 1.0 - p), 2)
  if isinstance(event, KaryRandomizedResponse):
    return dpa.RandomizedResponseDpEvent(_scalar(event, "noise"), _integer(event, "buckets"))
  if isinstance(event, ZCDp):
    return dpa.dp_event.ZCDpEvent(_scalar(event, "rho"), _scalar(event, "xi"))
  if isinstance(event, DiscreteLaplace):
    return dpa.dp_event.DiscreteLaplaceDpEvent(
      _scalar(event, "noise_parameter"), _integer(event, "sensitivity")
    )
  if isinstance(event, FixedSizeSampled):
    b, n = _sample_fraction(_scalar(event, "gamma"))
    inner = to_dp_accounting(event.inner)
    return dpa.SampledWithoutReplacementDpEvent(n, b, inner)
  if isinstance(event, RandomAllocation):
    cls = _class(dpa, "RandomAllocationDpEvent", event)
    k = event.selected
    t, integral = steps_per_epoch(_scalar(event, "q"), k)
    if not (bool(integral) and np.isfinite(t)):
      raise ValueError(f"RandomAllocation.q must be selected / t with t an integer, got {event.q}")
    epochs = math.ceil(_scalar(event, "steps") / t)
    one = cls(event=to_dp_accounting(event.inner), num_selected=k, num_steps=int(t))
    return one if epochs == 1 else dpa.SelfComposedDpEvent(one, epochs)
  if isinstance(event, SingleEpochTreeAggregation):
    return dpa.SingleEpochTreeAggregationDpEvent(_scalar(event, "sigma"), _integer(event, "steps"))
  if isinstance(event, RepeatAndSelect):
    return dpa.dp_event.RepeatAndSelectDpEvent(
      to_dp_accounting(event.event), _scalar(event, "mean"), _scalar(event, "shape")
    )
  if isinstance(event, MixtureOfGaussians):
    sens = [_scalar(event, "sensitivities", x) for x in event.sensitivities]
    probs = [_scalar(event, "probs", x) for x in event.probs]
    return dpa.dp_event.MixtureOfGaussiansDpEvent(_scalar(event, "sigma"), sens, probs)
  if isinstance(event, TruncatedSubsampledGaussian):
    return dpa.dp_event.TruncatedSubsampledGaussianDpEvent(
      _integer(event, "dataset_size"),
      _scalar(event, "q"),
      _integer(event, "batch_size"),
      _scalar(event, "sigma"),
    )
  if isinstance(event, DiscreteGaussian):
    cls = _class(dpa, "DiscreteGaussianDpEvent", event)
    return cls(sigma=_scalar(event, "sigma"), sensitivity=_scalar(event, "sensitivity"))
  if isinstance(event, ExponentialMechanism):
    return _class(dpa, "ExponentialMechanismDpEvent", event)(_scalar(event, "epsilon"))
  if isinstance(event, PermuteAndFlip):
    return _class(dpa, "PermuteAndFlipDpEvent", event)(_scalar(event, "epsilon"))
  if isinstance(event, EpsilonDelta):
    cls = _class(dpa, "EpsilonDeltaDpEvent", event)
    return cls(_scalar(event, "epsilon"), _scalar(event, "delta"))
  raise TypeError(f"no dp_accounting equivalent for a {type(event).__name__} event")
