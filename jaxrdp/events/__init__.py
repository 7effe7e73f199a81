"""Mechanism descriptions as pytrees whose numeric fields broadcast (one event, a whole grid)."""

from ._events import Composed as Composed
from ._events import Event as Event
from ._events import Gaussian as Gaussian
from ._events import Laplace as Laplace
from ._events import NoOp as NoOp
from ._events import PoissonSampled as PoissonSampled
from ._events import RandomizedResponse as RandomizedResponse
from ._events import SelfComposed as SelfComposed
from ._events import event_shape as event_shape
from ._events import event_type as event_type
from ._events import validate_event as validate_event
from ._interop import from_dp_accounting as from_dp_accounting
from ._interop import to_dp_accounting as to_dp_accounting

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
from ._sampling_events import FixedSizeSampled as FixedSizeSampled
from ._sampling_events import ShuffledEpochs as ShuffledEpochs

__all__ += ["FixedSizeSampled", "ShuffledEpochs"]
