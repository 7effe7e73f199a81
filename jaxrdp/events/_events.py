"""Mechanism descriptions ("events") as pytrees whose numeric fields broadcast.

An event says *what* was released, never how its privacy is computed; an
accountant (``jaxrdp.accountants``) turns it into epsilon or delta. Numeric
fields are pytree leaves (arrays, possibly traced) and broadcast together with
NumPy rules, so one event describes a whole grid of configurations::

    SelfComposed(PoissonSampled(Q[:, None], Gaussian(S[None, :])), T)

is T steps of DP-SGD at every (q, sigma) of the grid. The structure (which
event contains which) is static pytree metadata, so events pass through
``jax.jit`` and ``jax.vmap`` and can be built inside a jitted training step.

Fields are not validated at construction (a pytree is rebuilt with arbitrary
leaves by JAX's transformations); :func:`validate_event` checks concrete
fields when an accountant evaluates the event, and raises ValueError naming
the field. Traced invalid values make the accountant's result NaN.

Adding an event type is a local change: define the dataclass with
:func:`event_type` (its numeric fields, their valid ranges, its child events),
and register how each accountant treats it (for the RDP accountant,
``jaxrdp.rdp.register_rdp_rule``, in a module that ``jaxrdp.rdp._rules`` imports).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import jax
import numpy as np
from jax.typing import ArrayLike

from .._core.pytrees import register_dataclass_pytree
from .._core.validation import check_range

if sys.version_info >= (3, 11):
  from typing import dataclass_transform
else:  # Python 3.10: no runtime effect either way (type checkers read the 3.11 branch)

  def dataclass_transform(**kwargs):
    """Python 3.10 stand-in for ``typing.dataclass_transform``: the decorator unchanged."""
    return lambda decorator: decorator


__all__ = [
  "RELATIONS",
  "check_relation",
  "Event",
  "Gaussian",
  "Laplace",
  "RandomizedResponse",
  "PoissonSampled",
  "SelfComposed",
  "Composed",
  "NoOp",
  "event_type",
  "validate_event",
  "event_shape",
]


class Event:
  """Base class of jaxrdp's mechanism descriptions (pytrees; see the module doc)."""

  #: field name -> keyword arguments of ``check_range`` (the valid range).
  _ranges: dict[str, dict[str, Any]] = {}
  #: names of the fields that hold child events (an Event or a tuple of Events).
  _children: tuple[str, ...] = ()

  # An event type may define ``_check(self, prefix)``: checks of its concrete fields
  # beyond their ranges, run by :func:`validate_event` (ValueError naming the field).


# ``dataclass_transform`` tells type checkers (pyright, mypy) that the classes this
# decorates are frozen dataclasses: their constructors take the declared fields only.
@dataclass_transform(frozen_default=True, eq_default=False)
def event_type(
  *,
  ranges: dict[str, dict[str, Any]] | None = None,
  children: tuple[str, ...] = (),
  static: tuple[str, ...] = (),
):
  """Class decorator: a frozen dataclass registered as a pytree Event.

  Every field is a pytree child (numeric leaves or child events), except the
  ``static`` ones: configuration such as the neighbouring relation, a string that
  is pytree metadata (part of the treedef, never traced).

  Args:
    ranges: valid range of each numeric field, as ``check_range`` keywords.
    children: the fields that hold child events.
    static: the fields that are static metadata.
  """

  def wrap(cls):
    cls = dataclasses.dataclass(frozen=True, eq=False)(cls)
    cls._ranges = dict(ranges or {})
    cls._children = tuple(children)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in static]
    return register_dataclass_pytree(cls, data_fields=names, meta_fields=list(static))

  return wrap


#: The neighbouring relations: one example added or removed, or one replaced.
RELATIONS = ("add_remove", "replace_one")


def check_relation(relation, *, allowed=RELATIONS) -> str:
  """Returns ``relation`` if it is one of ``allowed``, else raises ValueError naming it."""
  if not isinstance(relation, str) or relation not in allowed:
    raise ValueError(f"relation must be one of {tuple(allowed)}, got {relation!r}")
  return relation


@event_type(ranges={"sigma": dict(lower=0.0, allow_inf=True)})
class Gaussian(Event):
  """The Gaussian mechanism: noise ``N(0, sigma^2)`` on a query of L2 sensitivity 1.

  Attributes:
    sigma: noise multiplier (noise standard deviation / sensitivity), ``>= 0``.

  Examples:
    >>> import jaxrdp
    >>> round(float(jaxrdp.epsilon_from_event(jaxrdp.events.Gaussian(2.0), 1e-5).epsilon), 4)
    2.1657
  """

  sigma: ArrayLike


@event_type(ranges={"scale": dict(lower=0.0, allow_inf=True)})
class Laplace(Event):
  """The Laplace mechanism: noise of scale ``scale`` on a query of L1 sensitivity 1.

  Attributes:
    scale: Laplace scale (``b`` of ``exp(-|x| / b) / (2 b)``) / sensitivity, ``>= 0``.
  """

  scale: ArrayLike


@event_type(ranges={"p": dict(lower=0.0, upper=1.0)})
class RandomizedResponse(Event):
  """Binary randomized response: the true bit with probability ``p``, else its flip.

  The parametrisation of :func:`jaxrdp.mechanisms.randomized_response_rdp`; its RDP curve
  is ``D_alpha(Bern(p) || Bern(1 - p))`` (one bit replaced), which also bounds
  the add/remove relation.

  Attributes:
    p: probability of answering truthfully, in ``[0, 1]``.
  """

  p: ArrayLike


@event_type(ranges={"q": dict(lower=0.0, upper=1.0)}, children=("inner",), static=("relation",))
class PoissonSampled(Event):
  """``inner`` applied to a Poisson subsample: each record kept with probability ``q``.

  The RDP accountant handles a :class:`Gaussian` inner event (the Sampled Gaussian
  Mechanism, exact), and Gaussians composed on the same subsample (``Composed`` and
  ``SelfComposed`` trees of ``Gaussian``): queries of L2 sensitivity 1 with noise
  multipliers ``s_i``, each scaled by ``1 / s_i`` and stacked, are one query of
  sensitivity ``(sum_i 1 / s_i^2)^(1/2)`` with unit noise, so the tree is the
  Sampled Gaussian Mechanism at ``sigma_eff = (sum_i 1 / s_i^2)^(-1/2)`` (a count
  ``k`` contributes ``k / s^2``), exactly. Queries chosen adaptively within the
  subsample are covered too: an adaptive composition of Gaussian mechanisms is
  dominated by the single Gaussian pair at ``sigma_eff`` (Gaussian DP composes as
  ``mu = (sum_i mu_i^2)^(1/2)``: Dong, Roth, Su 2019, arXiv:1905.02383), and Poisson
  subsampling carries a dominating pair over to the subsampled mechanism (Zhu, Dong,
  Wang 2022, arXiv:2106.08567). dp_accounting makes the same reduction.

  Under add/remove, another inner event whose RDP curve bounds both directions of its
  add/remove pair (Laplace, DiscreteLaplace, DiscreteGaussian, ZCDp, EpsilonDelta with
  ``delta = 0``, ExponentialMechanism, PermuteAndFlip, NonPrivate, and Composed or
  SelfComposed trees of these and Gaussians) gets an upper bound computed from its own
  curve at the integer orders ``2..ceil(alpha)`` (a fractional order takes the next
  integer order's bound): the binomial expansion of Zhu and Wang 2019 (ICML) for one
  direction and a bound of the same sum without its ``(1 - q)^(alpha - l)`` factors for
  the other (derived in ``jaxrdp.rdp._poisson_upper_bound``), never above the inner
  curve, which alone is used above order 256. Randomized response (a replaced input)
  and sampled events inside are refused (NotImplementedError).

  Under ``relation="replace_one"`` (one example replaced, the pair of DP-SGD's sum
  moving by up to 2C) the inner Gaussian holds the DP-SGD noise multiplier and the
  RDP accountant accounts the Sampled Gaussian at ``sigma / 2``: a replaced example
  is sampled or not with the same coin, so the outputs are ``(1-q) N(0) + q N(u)``
  against ``(1-q) N(0) + q N(v)`` with ``|u - v| <= 2C``, checked numerically to be
  dominated in Renyi divergence by the Sampled Gaussian pair at sensitivity 2C
  (not a published theorem; dp_accounting refuses Poisson sampling under
  replace-one). The tight accountant accounts add/remove only.

  Attributes:
    q: sampling rate in ``[0, 1]``.
    inner: the event applied to the subsample.
    relation: ``"add_remove"`` (default) or ``"replace_one"``; static metadata.
  """

  q: ArrayLike
  inner: Event
  relation: str = "add_remove"

  def __post_init__(self):
    check_relation(self.relation)


@event_type(ranges={"count": dict(lower=0.0)}, children=("event",))
class SelfComposed(Event):
  """``count`` adaptive repetitions of ``event``.

  Attributes:
    event: the repeated event.
    count: number of repetitions, ``>= 0`` (need not be an integer for RDP).
  """

  event: Event
  count: ArrayLike


@event_type(children=("events",))
class Composed(Event):
  """Adaptive composition of several events (their leaves broadcast together).

  Attributes:
    events: a tuple of events.
  """

  events: tuple[Event, ...]


@event_type()
class NoOp(Event):
  """An event that releases nothing about the data (zero privacy loss)."""


def _child_events(event: Event) -> list[Event]:
  out = []
  for name in event._children:
    value = getattr(event, name)
    out.extend(value if isinstance(value, (tuple, list)) else [value])
  return out


def validate_event(event: Event, path: str = "") -> None:
  """Checks the concrete fields of ``event`` and its children (tracers pass).

  Raises:
    TypeError: if ``event`` or a child is not a jaxrdp Event.
    ValueError: naming the first field out of its range (e.g.
      ``PoissonSampled.q must be in [0.0, 1.0], got 1.5``).
  """
  if not isinstance(event, Event):
    where = f"{path}child" if path else "event"
    raise TypeError(f"{where} must be a jaxrdp event, got {type(event).__name__}")
  name = type(event).__name__
  prefix = f"{path}{name}"
  for field, kwargs in event._ranges.items():
    check_range(f"{prefix}.{field}", getattr(event, field), **kwargs)
  extra = getattr(event, "_check", None)
  if extra is not None:  # checks beyond ranges (an integer, probabilities summing to 1)
    extra(prefix)
  if isinstance(event, Composed) and not isinstance(event.events, (tuple, list)):
    raise TypeError(f"{prefix}.events must be a tuple of events, got {type(event.events).__name__}")
  for child in _child_events(event):
    validate_event(child, f"{prefix} > ")


def event_shape(event: Event) -> tuple[int, ...]:
  """The broadcast shape of all the numeric leaves of ``event`` (``()`` for scalars)."""
  return tuple(np.broadcast_shapes(*(np.shape(x) for x in jax.tree.leaves(event)), ()))
