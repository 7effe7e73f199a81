"""Mechanism descriptions as pytrees whose numeric fields broadcast (one event, a whole grid)."""

from typing import TYPE_CHECKING

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


# Fixed-size and shuffled batches, with the neighbouring relation explicit.
_NAMES.update(
  {
    "FixedSizeSampled": "._sampling_events",
    "ShuffledEpochs": "._sampling_events",
  }
)


# Random allocation (balls in bins, random k-out-of-t allocation).
_NAMES["RandomAllocation"] = "._allocation_events"

# Certified lower bounds on the true privacy of an event (shuffled batches).
_NAMES.update(
  {
    "event_delta_lower_bound": "._lower_bounds",
    "event_epsilon_lower_bound": "._lower_bounds",
  }
)


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

# The event of a DP-SGD run: the batching schemes and relations, read in one place.
_NAMES.update(
  {
    "RELATIONS": "._events",
    "check_relation": "._events",
    "FIXED_ADD_REMOVE_ERROR": "._sampling_events",
    "SAMPLINGS": "._dpsgd",
    "dpsgd_event": "._dpsgd",
    "epochs_of": "._dpsgd",
    "resolve_scheme": "._dpsgd",
    "epochs_to_steps": "._dataset",
    "sampling_rate": "._dataset",
  }
)


# The public names: the keys of _NAMES (and the submodules), listed once.


# The public names: the keys of _NAMES (and the submodules), listed once.
__all__ = sorted(_NAMES)

__getattr__, __dir__ = _exports(__name__, _NAMES)

# The same names for static analysers (pyright, IDEs): never run (the imports above
# are lazy); tests/test_public_surface.py checks that the two lists agree.
if TYPE_CHECKING:
  from ._allocation_events import RandomAllocation as RandomAllocation
  from ._dataset import epochs_to_steps as epochs_to_steps
  from ._dataset import sampling_rate as sampling_rate
  from ._dpsgd import SAMPLINGS as SAMPLINGS
  from ._dpsgd import dpsgd_event as dpsgd_event
  from ._dpsgd import epochs_of as epochs_of
  from ._dpsgd import resolve_scheme as resolve_scheme
  from ._events import RELATIONS as RELATIONS
  from ._events import Composed as Composed
  from ._events import Event as Event
  from ._events import Gaussian as Gaussian
  from ._events import Laplace as Laplace
  from ._events import NoOp as NoOp
  from ._events import PoissonSampled as PoissonSampled
  from ._events import RandomizedResponse as RandomizedResponse
  from ._events import SelfComposed as SelfComposed
  from ._events import check_relation as check_relation
  from ._events import event_shape as event_shape
  from ._events import event_type as event_type
  from ._events import validate_event as validate_event
  from ._interop import from_dp_accounting as from_dp_accounting
  from ._interop import to_dp_accounting as to_dp_accounting
  from ._lower_bounds import event_delta_lower_bound as event_delta_lower_bound
  from ._lower_bounds import event_epsilon_lower_bound as event_epsilon_lower_bound
  from ._mechanism_events import DiscreteGaussian as DiscreteGaussian
  from ._mechanism_events import DiscreteLaplace as DiscreteLaplace
  from ._mechanism_events import EpsilonDelta as EpsilonDelta
  from ._mechanism_events import ExponentialMechanism as ExponentialMechanism
  from ._mechanism_events import KaryRandomizedResponse as KaryRandomizedResponse
  from ._mechanism_events import MixtureOfGaussians as MixtureOfGaussians
  from ._mechanism_events import NonPrivate as NonPrivate
  from ._mechanism_events import PermuteAndFlip as PermuteAndFlip
  from ._mechanism_events import SingleEpochTreeAggregation as SingleEpochTreeAggregation
  from ._mechanism_events import TruncatedSubsampledGaussian as TruncatedSubsampledGaussian
  from ._mechanism_events import ZCDp as ZCDp
  from ._sampling_events import FIXED_ADD_REMOVE_ERROR as FIXED_ADD_REMOVE_ERROR
  from ._sampling_events import FixedSizeSampled as FixedSizeSampled
  from ._sampling_events import ShuffledEpochs as ShuffledEpochs
  from ._selection_events import RepeatAndSelect as RepeatAndSelect
