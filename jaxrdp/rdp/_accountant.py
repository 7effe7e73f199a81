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
from ..rdp._additive_delta import (
  additive_terms,
  delta_with_additive_f64,
  epsilon_with_additive_f64,
  has_additive_parts,
  pure_part,
)
from ..rdp._conversions import (
  DeltaResult,
  EpsilonResult,
  _check_method,
  delta_from_rdp_f64,
  epsilon_from_rdp_f64,
)
from ..rdp._dpsgd import _orders_or_default, sgm_dpsgd
from ..rdp._rules import (
  as_sgm,
  rdp_curve_f64,
  rdp_unsupported,
  rdp_values_unsupported,
)

__all__ = ["RdpAccountant", "RdpState", "add_rdp_curve", "state_to_dict", "state_from_dict"]

# Tag of the stored form of a state (unchanged, so older checkpoints still load).
_FORMAT = "jaxrdp.AccountantState/1"


# Tag of a stored state that carries additive terms (older versions refuse it).
_FORMAT_ADDITIVE = "jaxrdp.AccountantState/2"


@functools.partial(
  register_dataclass_pytree,
  data_fields=["rdp", "log_survival", "eta"],
  meta_fields=["orders"],
)
@dataclasses.dataclass(frozen=True, eq=False)
class RdpState:
  """Running RDP curve of an :class:`~jaxrdp.RdpAccountant` (a pytree).

  Attributes:
    rdp: float64 array ``[..., n]``: the RDP spent at each order (a leaf; a
      leading batch shape when grid events were composed).
    orders: the ``n`` orders, a tuple of floats: static pytree metadata.
    log_survival: ``None``, or float64 ``[...]``: ``sum_i log(1 - delta_i)`` over
      the ``EpsilonDelta(eps_i, delta_i)`` events composed (their deltas, paid
      beside the curve; see ``jaxrdp.rdp._additive_delta``).
    eta: ``None`` (with ``log_survival``), or float64 ``[...]``: the total-variation
      term of the truncated batches composed (``TruncatedSubsampledGaussian``).

  A fresh state has neither term (``None``: no leaves, so a state that never
  composes such events has the tree it always had); composing one of those
  events gives both. To compose them inside ``lax.scan`` or a training loop,
  whose carry keeps its tree, start from ``acct.init(additive=True)``.
  """

  rdp: jax.Array
  orders: tuple[float, ...]
  log_survival: jax.Array | None = None
  eta: jax.Array | None = None

  @property
  def has_additive(self) -> bool:
    """Whether the state carries additive terms (``log_survival`` and ``eta``)."""
    return self.log_survival is not None or self.eta is not None


def _with_terms(rdp, orders, log_survival, eta):
  """An RdpState whose terms (None: none) are broadcast to the curve's batch shape."""
  if log_survival is None and eta is None:
    return RdpState(rdp, orders)
  # The terms are float64 (computed in a float64 scope, exactly), whatever the
  # curve's dtype: only the accountant reads them, inside its own float64 scope.
  with _precision.x64_context():
    batch = jnp.shape(rdp)[:-1]
    zero = jnp.zeros((), jnp.float64)
    terms = [
      jnp.broadcast_to(_precision.as_float64(zero if x is None else x), batch)
      for x in (log_survival, eta)
    ]
  return RdpState(rdp, orders, *terms)


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
    return _with_terms(state.rdp + added, state.orders, state.log_survival, state.eta)


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


def _rows_with_terms(state):
  """The state's curve with its two terms appended on the orders axis: ``[..., n + 2]``
  (one row per configuration, as ``rowwise_float64`` differentiates)."""
  with _precision.x64_context():
    rdp = _precision.as_float64(state.rdp)
    terms = [
      jnp.broadcast_to(_precision.as_float64(x), rdp.shape[:-1])[..., None]
      for x in (state.log_survival, state.eta)
    ]
    return jnp.concatenate([rdp, *terms], axis=-1)


def _epsilon_additive_f64(rows, orders, delta, method):
  return epsilon_with_additive_f64(
    rows[..., :-2], orders, delta, rows[..., -2], rows[..., -1], method
  )


def _delta_additive_f64(rows, orders, epsilon, method):
  return delta_with_additive_f64(
    rows[..., :-2], orders, epsilon, rows[..., -2], rows[..., -1], method
  )


_epsilon_additive_jit = jax.jit(_epsilon_additive_f64, static_argnames=("method",))
_delta_additive_jit = jax.jit(_delta_additive_f64, static_argnames=("method",))


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

    Read from the registered rules (``jaxrdp.rdp._rules.rdp_unsupported``),
    structural and decided before anything is computed, then from the checks of
    concrete values that have no RDP curve (an ``EpsilonDelta`` with ``delta > 0``).
    """
    if has_additive_parts(event):
      # EpsilonDelta and truncated parts under compositions are paid beside the curve.
      with _precision.x64_context():
        event = pure_part(event)
    why = rdp_unsupported(event)
    return why if why is not None else rdp_values_unsupported(event)

  def supports(self, event: Event) -> bool:
    """Whether this accountant can account ``event`` (see :meth:`unsupported`)."""
    return self.unsupported(event) is None

  def _require(self, event):
    why = self.unsupported(event)
    if why is not None:
      raise NotImplementedError(f"{self.description} cannot account {why}")

  def init(self, additive: bool = False) -> RdpState:
    """A fresh state: zero RDP at every order.

    Args:
      additive: also hold zero additive terms (see
        :class:`~jaxrdp.accountants.RdpState`): for a state that composes
        ``EpsilonDelta`` or ``TruncatedSubsampledGaussian`` events inside
        ``lax.scan`` or a loop whose carry must keep its tree.
    """
    with _precision.x64_context():
      zeros = jnp.zeros(len(self.orders), jnp.float64)
      if additive:
        return RdpState(zeros, self.orders, jnp.zeros(()), jnp.zeros(()))
      return RdpState(zeros, self.orders)

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
    log_survival, eta = state.log_survival, state.eta
    if has_additive_parts(event):
      with _precision.x64_context():
        log_s, eta_e = additive_terms(event)
        event = pure_part(event)
        log_survival = log_s if log_survival is None else log_survival + log_s
        eta = eta_e if eta is None else eta + eta_e
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
    with _precision.x64_context():
      if (
        isinstance(state.rdp, jax.core.Tracer)
        and state.rdp.dtype == jnp.float64
        and rdp.dtype != jnp.float64
      ):
        # A float64 carry (lax.scan, a loop) traced with x64 off: the curve came back
        # as float32 rounded up; widened again so that the carry keeps its type. Sound
        # (each step rounds up, by at most 2**-23 relative), not exact: enable x64 for
        # exact accumulation over many steps.
        rdp = rdp.astype(jnp.float64)
      return _with_terms(rdp, self.orders, log_survival, eta)

  def get_epsilon(self, state: RdpState, delta: ArrayLike) -> EpsilonResult:
    """epsilon spent so far at ``delta`` (jittable), and the order attaining it."""
    self._check_state(state)
    check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    orders = self._static.array
    if state.has_additive:
      return _precision.rowwise_float64(
        lambda rows, delta: _epsilon_additive_jit(rows, orders, delta, method=self.method),
        _rows_with_terms(state),
        delta,
      )
    return _precision.rowwise_float64(
      lambda rdp, delta: _epsilon_jit(rdp, orders, delta, method=self.method), state.rdp, delta
    )

  def get_delta(self, state: RdpState, epsilon: ArrayLike) -> DeltaResult:
    """delta spent so far at ``epsilon`` (jittable), and the order attaining it."""
    self._check_state(state)
    check_range("epsilon", epsilon, lower=0.0)
    orders = self._static.array
    if state.has_additive:
      return _precision.rowwise_float64(
        lambda rows, epsilon: _delta_additive_jit(rows, orders, epsilon, method=self.method),
        _rows_with_terms(state),
        epsilon,
      )
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
    if has_additive_parts(event):
      return self.get_epsilon(self.compose(self.init(), event), delta)
    sgm = as_sgm(event)
    if sgm is not None:
      return sgm_dpsgd("epsilon", *sgm, delta, self._static.array, self.method)
    return _one_shot(_event_epsilon_jit, delta, event, self._static, self.method)

  def delta(self, event: Event, epsilon: ArrayLike) -> DeltaResult:
    """delta of ``event`` at ``epsilon``, of the broadcast shape of its leaves and epsilon."""
    validate_event(event)
    self._require(event)
    check_range("epsilon", epsilon, lower=0.0)
    if has_additive_parts(event):
      return self.get_delta(self.compose(self.init(), event), epsilon)
    sgm = as_sgm(event)
    if sgm is not None:
      return sgm_dpsgd("delta", *sgm, epsilon, self._static.array, self.method)
    return _one_shot(_event_delta_jit, epsilon, event, self._static, self.method)


def state_to_dict(state: RdpState) -> dict[str, Any]:
  """A JSON-serialisable, lossless description of a state (floats as ``float.hex``).

  A state with additive terms is stored under a newer format tag, which versions
  that cannot hold the terms refuse (rather than load the curve alone).
  """
  if not isinstance(state, RdpState):
    raise TypeError(f"state must be an RdpState, got {type(state).__name__}")
  rdp = np.asarray(state.rdp, dtype=np.float64)
  if rdp.ndim != 1:
    raise ValueError(f"only a state of one configuration is stored; rdp has shape {rdp.shape}")
  out = {
    "format": _FORMAT,
    "orders": [float(x).hex() for x in state.orders],
    "rdp": [float(x).hex() for x in rdp],
  }
  if state.has_additive:
    out["format"] = _FORMAT_ADDITIVE
    for name in ("log_survival", "eta"):
      value = np.asarray(getattr(state, name), dtype=np.float64)
      if value.ndim != 0:
        raise ValueError(
          f"only a state of one configuration is stored; {name} has shape {value.shape}"
        )
      out[name] = float(value).hex()
  return out


def state_from_dict(
  d: dict[str, Any], *, expected_orders: tuple[float, ...] | None = None
) -> RdpState:
  """Restores a state saved by :func:`state_to_dict`, validating it.

  Raises ValueError for a wrong format tag, mismatched lengths, invalid numbers
  (NaN, negative RDP, orders <= 1, a positive log-survival or a negative
  total-variation term), or orders that differ from ``expected_orders`` when
  given. A damaged state is refused, never reset.
  """
  if not isinstance(d, dict) or d.get("format") not in (_FORMAT, _FORMAT_ADDITIVE):
    raise ValueError(f"not a jaxrdp accountant state (expected format {_FORMAT!r})")
  try:
    orders = np.array([float.fromhex(x) for x in d["orders"]], dtype=np.float64)
    rdp = np.array([float.fromhex(x) for x in d["rdp"]], dtype=np.float64)
    terms = None
    if d["format"] == _FORMAT_ADDITIVE:
      terms = [float.fromhex(d[name]) for name in ("log_survival", "eta")]
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"corrupted accountant state: {e}") from None
  if orders.shape != rdp.shape or orders.size == 0:
    raise ValueError(f"corrupted accountant state: {orders.size} orders but {rdp.size} RDP values")
  check_range("saved orders", orders, lower=1.0, lower_open=True, allow_inf=True)
  check_range("saved rdp", rdp, lower=0.0, allow_inf=True)
  if terms is not None:
    check_range("saved log_survival", terms[0], upper=0.0, allow_inf=True)
    check_range("saved eta", terms[1], lower=0.0, allow_inf=True)
  if expected_orders is not None:
    exp = np.asarray(expected_orders, dtype=np.float64)
    if exp.shape != orders.shape or not np.array_equal(exp, orders):
      raise ValueError("saved accountant orders differ from the expected orders")
  with _precision.x64_context():
    orders_t = tuple(float(x) for x in orders)
    if terms is None:
      return RdpState(jnp.asarray(rdp), orders_t)
    return RdpState(jnp.asarray(rdp), orders_t, jnp.asarray(terms[0]), jnp.asarray(terms[1]))
