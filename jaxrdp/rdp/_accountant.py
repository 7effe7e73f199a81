"""The RDP accountant: an immutable configuration (the orders) and a pytree state.

RDP composes additively: k steps of a mechanism with RDP curve r(alpha) add
k * r(alpha), and different mechanisms add their curves (Mironov 2017,
arXiv:1702.07476, Prop. 1). The state is therefore just the running RDP curve
on the accountant's orders. The orders are static configuration: they are
metadata of the state's pytree (part of its treedef), not traced values, so
nothing compares them at run time inside a training step; a state with other
orders has another tree structure, and a checkpoint of one is refused when it
is loaded.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.pytrees import register_dataclass_pytree
from .._core.validation import StaticArray, check_range
from ..events._events import Event, validate_event
from ..rdp._conversions import (
  DeltaResult,
  EpsilonResult,
  _check_method,
  delta_from_rdp_f64,
  epsilon_from_rdp_f64,
)
from ..rdp._dpsgd import _orders_or_default, sgm_dpsgd
from ..rdp._event_curves import (
  as_sgm,
  rdp_curve_f64,
  rdp_unsupported,
  rdp_values_unsupported,
)

__all__ = ["RdpAccountant", "RdpState", "add_rdp_curve", "state_to_dict", "state_from_dict"]

# Tag of the stored form of a state (unchanged, so older checkpoints still load).
_FORMAT = "jaxrdp.AccountantState/1"


@functools.partial(register_dataclass_pytree, data_fields=["rdp"], meta_fields=["orders"])
@dataclasses.dataclass(frozen=True, eq=False)
class RdpState:
  """Running RDP curve of an :class:`~jaxrdp.RdpAccountant` (a pytree).

  Attributes:
    rdp: float64 array ``[..., n]``: the RDP spent at each order (a leaf; a
      leading batch shape when grid events were composed).
    orders: the ``n`` orders, a tuple of floats: static pytree metadata.
  """

  rdp: jax.Array
  orders: tuple[float, ...]


def _orders_tuple(orders) -> tuple[float, ...]:
  orders = _orders_or_default(orders)
  return tuple(float(x) for x in np.asarray(orders, dtype=np.float64))


def add_rdp_curve(state: RdpState, curve, count=1) -> RdpState:
  """``state`` plus ``count`` times the RDP curve ``curve`` (given at ``state.orders``).

  Traceable, no validation: for callers that compute a curve once and add it
  many times (the training step).
  """
  with _precision.x64_context():
    curve = _precision.as_float64(curve)
    count = _precision.as_float64(count)
    added = jnp.where(count == 0, 0.0, count * curve)
    return RdpState(state.rdp + added, state.orders)


def _compose_f64(rdp, event, orders_static):
  orders = jnp.asarray(orders_static.array)
  return _precision.as_float64(rdp) + rdp_curve_f64(event, orders, orders_static)


def _event_epsilon_f64(delta, event, orders_static, method):
  orders = jnp.asarray(orders_static.array)
  return epsilon_from_rdp_f64(rdp_curve_f64(event, orders, orders_static), orders, delta, method)


def _event_delta_f64(epsilon, event, orders_static, method):
  orders = jnp.asarray(orders_static.array)
  return delta_from_rdp_f64(rdp_curve_f64(event, orders, orders_static), orders, epsilon, method)


_compose_jit = jax.jit(_compose_f64, static_argnames=("orders_static",))
_event_epsilon_jit = jax.jit(_event_epsilon_f64, static_argnames=("orders_static", "method"))
_event_delta_jit = jax.jit(_event_delta_f64, static_argnames=("orders_static", "method"))
_epsilon_jit = jax.jit(epsilon_from_rdp_f64, static_argnames=("method",))
_delta_jit = jax.jit(delta_from_rdp_f64, static_argnames=("method",))


def _one_shot(kernel, value, event, orders_static, method):
  """kernel(value, event) over the event's leaves, elementwise in float64."""
  leaves, treedef = jax.tree.flatten(event)
  return _precision.elementwise_float64(
    lambda value, *leaves: kernel(
      value, jax.tree.unflatten(treedef, leaves), orders_static=orders_static, method=method
    ),
    (value, *leaves),
  )


@dataclasses.dataclass(frozen=True)
class RdpAccountant:
  """Renyi-DP accountant over a fixed set of orders (immutable and hashable).

  Args:
    orders: Renyi orders in (1, inf]; default :data:`jaxrdp.DEFAULT_ORDERS`
      (a superset of dp_accounting's 156, so never looser than it). Stored as
      a tuple of floats: static configuration.
    method: RDP-to-DP conversion, ``"improved"`` (default) or ``"classic"``
      (see :func:`jaxrdp.rdp_to_epsilon`).

  One-shot ``epsilon``/``delta`` of ``SelfComposed(PoissonSampled(q,
  Gaussian(sigma)), T)`` (or ``PoissonSampled`` alone) run
  :func:`jaxrdp.dpsgd_epsilon`'s search over orders: the same values at the
  same speed. Other events sum their RDP curves at every order, then convert.

  Examples:
    >>> import jaxrdp
    >>> from jaxrdp.events import Gaussian, Laplace, PoissonSampled, SelfComposed
    >>> acct = jaxrdp.accountants.RdpAccountant()
    >>> state = acct.init()
    >>> state = acct.compose(state, SelfComposed(PoissonSampled(256 / 60000, Gaussian(1.1)), 14063))
    >>> round(float(acct.get_epsilon(state, 1e-5).epsilon), 3)
    2.597
    >>> state = acct.compose(state, Laplace(20.0))
    >>> round(float(acct.get_epsilon(state, 1e-5).epsilon), 3)
    2.606
  """

  orders: tuple[float, ...] | None = None
  method: str = "improved"

  #: How refusals and results name this accountant.
  description = "the Renyi-DP accountant (accountant='rdp')"

  def __post_init__(self):
    _check_method(self.method)
    object.__setattr__(self, "orders", _orders_tuple(self.orders))

  def __repr__(self):
    o = self.orders
    shown = f"({o[0]:g}, {o[1]:g}, ..., {o[-1]:g})" if len(o) > 4 else repr(o)
    return f"RdpAccountant(orders=<{len(o)} orders {shown}>, method={self.method!r})"

  @functools.cached_property
  def _static(self) -> StaticArray:
    return StaticArray(np.asarray(self.orders, dtype=np.float64))

  def _check_state(self, state):
    if not isinstance(state, RdpState):
      raise TypeError(f"state must be an RdpState, got {type(state).__name__}")
    if state.orders != self.orders:
      raise ValueError(
        f"state was built with other orders ({len(state.orders)} orders) than this "
        f"accountant's ({len(self.orders)} orders)"
      )

  def unsupported(self, event: Event) -> str | None:
    """``None`` if this accountant can account ``event``, else the part it cannot (a phrase).

    Read from the registered rules (``jaxrdp.rdp._event_curves.rdp_unsupported``),
    structural and decided before anything is computed, then from the checks of
    concrete values that have no RDP curve (an ``EpsilonDelta`` with ``delta > 0``).
    """
    why = rdp_unsupported(event)
    return why if why is not None else rdp_values_unsupported(event)

  def supports(self, event: Event) -> bool:
    """Whether this accountant can account ``event`` (see :meth:`unsupported`)."""
    return self.unsupported(event) is None

  def _require(self, event):
    why = self.unsupported(event)
    if why is not None:
      raise NotImplementedError(f"{self.description} cannot account {why}")

  def init(self) -> RdpState:
    """A fresh state: zero RDP at every order."""
    with _precision.x64_context():
      return RdpState(jnp.zeros(len(self.orders), jnp.float64), self.orders)

  def compose(self, state: RdpState, event: Event) -> RdpState:
    """``state`` after ``event``: its RDP curve added at every order.

    Jittable with traced event leaves; a grid event gives a state with the
    event's batch shape. Concrete invalid fields raise ValueError naming the
    field; traced invalid values give NaN RDP, so every later epsilon is NaN
    rather than silently wrong.
    """
    self._check_state(state)
    validate_event(event)
    self._require(event)
    leaves, treedef = jax.tree.flatten(event)
    # The RDP curve is elementwise in the state's RDP and, over a trailing orders
    # axis, in the event's leaves: derivatives with x64 off go through
    # elementwise_float64's rule, computed in float64.
    rdp = _precision.elementwise_float64(
      lambda rdp, *leaves: _compose_jit(
        rdp, jax.tree.unflatten(treedef, leaves), orders_static=self._static
      ),
      (state.rdp, *leaves),
      tangent_trailing=(0,) + (1,) * len(leaves),
    )
    return RdpState(rdp, self.orders)

  def get_epsilon(self, state: RdpState, delta: ArrayLike) -> EpsilonResult:
    """epsilon spent so far at ``delta`` (jittable), and the order attaining it."""
    self._check_state(state)
    check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    orders = self._static.array
    return _precision.rowwise_float64(
      lambda rdp, delta: _epsilon_jit(rdp, orders, delta, method=self.method), state.rdp, delta
    )

  def get_delta(self, state: RdpState, epsilon: ArrayLike) -> DeltaResult:
    """delta spent so far at ``epsilon`` (jittable), and the order attaining it."""
    self._check_state(state)
    check_range("epsilon", epsilon, lower=0.0)
    orders = self._static.array
    return _precision.rowwise_float64(
      lambda rdp, epsilon: _delta_jit(rdp, orders, epsilon, method=self.method),
      state.rdp,
      epsilon,
    )

  def epsilon(self, event: Event, delta: ArrayLike) -> EpsilonResult:
    """epsilon of ``event`` at ``delta``, of the broadcast shape of its leaves and delta."""
    validate_event(event)
    self._require(event)
    check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    sgm = as_sgm(event)
    if sgm is not None:
      return sgm_dpsgd("epsilon", *sgm, delta, self._static.array, self.method)
    return _one_shot(_event_epsilon_jit, delta, event, self._static, self.method)

  def delta(self, event: Event, epsilon: ArrayLike) -> DeltaResult:
    """delta of ``event`` at ``epsilon``, of the broadcast shape of its leaves and epsilon."""
    validate_event(event)
    self._require(event)
    check_range("epsilon", epsilon, lower=0.0)
    sgm = as_sgm(event)
    if sgm is not None:
      return sgm_dpsgd("delta", *sgm, epsilon, self._static.array, self.method)
    return _one_shot(_event_delta_jit, epsilon, event, self._static, self.method)


def state_to_dict(state: RdpState) -> dict[str, Any]:
  """A JSON-serialisable, lossless description of a state (floats as ``float.hex``)."""
  if not isinstance(state, RdpState):
    raise TypeError(f"state must be an RdpState, got {type(state).__name__}")
  rdp = np.asarray(state.rdp, dtype=np.float64)
  return {
    "format": _FORMAT,
    "orders": [float(x).hex() for x in state.orders],
    "rdp": [float(x).hex() for x in rdp],
  }


def state_from_dict(
  d: dict[str, Any], *, expected_orders: tuple[float, ...] | None = None
) -> RdpState:
  """Restores a state saved by :func:`state_to_dict`, validating it.

  Raises ValueError for a wrong format tag, mismatched lengths, invalid numbers
  (NaN, negative RDP, orders <= 1), or orders that differ from
  ``expected_orders`` when given. A damaged state is refused, never reset.
  """
  if not isinstance(d, dict) or d.get("format") != _FORMAT:
    raise ValueError(f"not a jaxrdp accountant state (expected format {_FORMAT!r})")
  try:
    orders = np.array([float.fromhex(x) for x in d["orders"]], dtype=np.float64)
    rdp = np.array([float.fromhex(x) for x in d["rdp"]], dtype=np.float64)
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"corrupted accountant state: {e}") from None
  if orders.shape != rdp.shape or orders.size == 0:
    raise ValueError(f"corrupted accountant state: {orders.size} orders but {rdp.size} RDP values")
  check_range("saved orders", orders, lower=1.0, lower_open=True, allow_inf=True)
  check_range("saved rdp", rdp, lower=0.0, allow_inf=True)
  if expected_orders is not None:
    exp = np.asarray(expected_orders, dtype=np.float64)
    if exp.shape != orders.shape or not np.array_equal(exp, orders):
      raise ValueError("saved accountant orders differ from the expected orders")
  with _precision.x64_context():
    return RdpState(jnp.asarray(rdp), tuple(float(x) for x in orders))
