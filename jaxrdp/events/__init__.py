"""Mechanism descriptions as pytrees whose numeric fields broadcast (one event, a whole grid)."""

from .._core.lazy import exports as _exports

# Each public name -> the module that defines it, imported on first use
# (jaxrdp._core.lazy).
_NAMES = {
  "Composed": "._events",
  "Event": "._events",
  "Gaussian": "._events",
  "Laplace": "._events",
  "NoOp": "._events",
  "PoissonSampled": "._events",
  "RandomizedResponse": "._events",
  "SelfComposed": "._events",
  "event_shape": "._events",
  "event_type": "._events",
  "validate_event": "._events",
  "from_dp_accounting": "._interop",
  "to_dp_accounting": "._interop",
}

__all__ = [
  "Composed",
  "Event",
  "Gaussian",
  "Laplace",
  "NoOp",
  "PoissonSampled",
  "RandomizedResponse",
  "SelfComposed",
  "event_shape",
  "event_type",
  "from_dp_accounting",
  "to_dp_accounting",
  "validate_event",
]

# Fixed-size and shuffled batches, with the neighbouring relation explicit.
_NAMES.update(
  {
    "FixedSizeSampled": "._sampling_events",
    "ShuffledEpochs": "._sampling_events",
  }
)

__all__ += ["FixedSizeSampled", "ShuffledEpochs"]

# Random allocation (balls in bins, random k-out-of-t allocation).
_NAMES["RandomAllocation"] = "._allocation_events"

__all__ += ["RandomAllocation"]

# The other mechanisms dp_accounting describes, and hyperparameter tuning.
_MECHANISMS = (
  "DiscreteGaussian",
  "DiscreteLaplace",
  "EpsilonDelta",
  "ExponentialMechanism",
  "KaryRandomizedResponse",
  "MixtureOfGaussians",
  "NonPrivate",
  "PermuteAndFlip",
  "SingleEpochTreeAggregation",
  "TruncatedSubsampledGaussian",
  "ZCDp",
)
_NAMES.update({name: "._mechanism_events" for name in _MECHANISMS})
_NAMES["RepeatAndSelect"] = "._selection_events"

__all__ += [*_MECHANISMS, "RepeatAndSelect"]

__getattr__, __dir__ = _exports(__name__, _NAMES)
