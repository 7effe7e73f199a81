"""A functional RDP accountant whose state is a pytree.

RDP composes additively: k steps of a mechanism with RDP curve r(alpha) add
k * r(alpha), and different mechanisms add their curves (Mironov 2017,
arXiv:1702.07476, Prop. 1). The state is therefore just the running RDP curve on
a fixed set of orders, which makes it a plain pytree: it can live inside a
training state, be updated inside ``jax.jit`` with traced q and sigma, and be
saved and restored exactly.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core import precision as _precision
from ..rdp._conversions import DeltaResult, EpsilonResult, delta_from_rdp_f64, epsilon_from_rdp_f64
from ..rdp._dpsgd import DEFAULT_ORDERS, _orders_or_default
from ..mechanisms._sgm import _rdp_f64, _validate as _validate_sgm
from .._core.validation import check_range, static_or_none

__all__ = [
    "AccountantState", "accountant_init", "accountant_compose_sgm", "accountant_compose_rdp",
    "accountant_epsilon", "accountant_delta", "accountant_to_dict", "accountant_from_dict",
    "RdpAccountant",
]

_FORMAT = "jaxrdp.AccountantState/1"


class AccountantState(NamedTuple):
  """Running RDP curve. ``orders`` and ``rdp`` are float64 arrays of shape [n]."""

  orders: jax.Array
  rdp: jax.Array


def accountant_init(orders: ArrayLike | None = None) -> AccountantState:
  """A fresh accountant: zero privacy spent at each order.

  Args:
    orders: Renyi orders in (1, inf]; default :data:`jaxrdp.DEFAULT_ORDERS`.

  Examples:
    >>> import jaxrdp
    >>> state = jaxrdp.accountant_init()
    >>> state = jaxrdp.accountant_compose_sgm(state, q=256 / 60000, sigma=1.1, count=14063)
    >>> round(float(jaxrdp.accountant_epsilon(state, 1e-5).epsilon), 3)
    2.597
  """
  orders = _orders_or_default(orders)
  with _precision.x64_context():
    orders = _precision.as_float64(orders)
    return AccountantState(orders, jnp.zeros_like(orders))


def _check_state(state):
  if not isinstance(state, AccountantState):
    raise TypeError(f"state must be an AccountantState, got {type(state).__name__}")


def _compose_sgm_f64(rdp, orders, q, sigma, count, orders_static):
  count = _precision.as_float64(count)
  step = _rdp_f64(q, sigma, orders, orders_static)
  return rdp + jnp.where(count == 0, 0.0, count * step)


_compose_sgm_jit = jax.jit(_compose_sgm_f64, static_argnames=("orders_static",))
_epsilon_jit = jax.jit(epsilon_from_rdp_f64, static_argnames=("method",))
_delta_jit = jax.jit(delta_from_rdp_f64, static_argnames=("method",))


def accountant_compose_sgm(state: AccountantState, q: ArrayLike, sigma: ArrayLike,
                           count: ArrayLike = 1) -> AccountantState:
  """Adds ``count`` steps of the Sampled Gaussian Mechanism with rate q, noise sigma.

  q, sigma and count must be scalars (possibly traced): each call is one phase
  of training. Jittable; under ``jit`` invalid traced values give NaN RDP,
  which makes every later epsilon NaN rather than silently wrong.
  """
  _check_state(state)
  _validate_sgm(q, sigma, 2.0)
  check_range("count", count, lower=0.0)
  for name, x in (("q", q), ("sigma", sigma), ("count", count)):
    if np.ndim(x) != 0:
      raise ValueError(f"{name} must be a scalar, got shape {np.shape(x)}")
  with _precision.Float64Scope():
    # Concrete orders (eager use) let integer orders take the exact series.
    rdp = _compose_sgm_jit(state.rdp, state.orders, q, sigma, count,
                           orders_static=static_or_none(state.orders))
    return AccountantState(state.orders, rdp)


def accountant_compose_rdp(state: AccountantState, rdp: ArrayLike,
                           count: ArrayLike = 1) -> AccountantState:
  """Adds ``count`` times an arbitrary RDP curve given at ``state.orders``.

  Use it for any mechanism with a known RDP curve (Gaussian, Laplace, ...).
  """
  _check_state(state)
  check_range("rdp", rdp, lower=0.0, allow_inf=True)
  check_range("count", count, lower=0.0)
  if np.shape(rdp) != np.shape(state.orders):
    raise ValueError(f"rdp must have the shape of state.orders {np.shape(state.orders)}, "
                     f"got {np.shape(rdp)}")
  with _precision.Float64Scope():
    rdp = _precision.as_float64(rdp)
    count = _precision.as_float64(count)
    added = jnp.where(count == 0, 0.0, count * rdp)
    return AccountantState(state.orders, state.rdp + added)


def accountant_epsilon(state: AccountantState, delta: ArrayLike, *,
                       method: str = "improved") -> EpsilonResult:
  """epsilon spent so far at ``delta`` (jittable; see :func:`jaxrdp.rdp_to_epsilon`)."""
  _check_state(state)
  check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  with _precision.Float64Scope() as scope:
    out = _epsilon_jit(state.rdp, state.orders, delta, method=method)
  return scope.finalize(out)


def accountant_delta(state: AccountantState, epsilon: ArrayLike, *,
                     method: str = "improved") -> DeltaResult:
  """delta spent so far at ``epsilon`` (jittable; see :func:`jaxrdp.rdp_to_delta`)."""
  _check_state(state)
  check_range("epsilon", epsilon, lower=0.0)
  with _precision.Float64Scope() as scope:
    out = _delta_jit(state.rdp, state.orders, epsilon, method=method)
  return scope.finalize(out)


def accountant_to_dict(state: AccountantState) -> dict[str, Any]:
  """A JSON-serialisable, lossless description of the state.

  Floats are stored with ``float.hex`` so that the round trip is bit-exact.
  """
  _check_state(state)
  orders = np.asarray(state.orders, dtype=np.float64)
  rdp = np.asarray(state.rdp, dtype=np.float64)
  return {
      "format": _FORMAT,
      "orders": [float(x).hex() for x in orders],
      "rdp": [float(x).hex() for x in rdp],
  }


def accountant_from_dict(d: dict[str, Any], *, expected_orders: ArrayLike | None = None
                         ) -> AccountantState:
  """Restores a state saved by :func:`accountant_to_dict`, validating it.

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
    return AccountantState(jnp.asarray(orders), jnp.asarray(rdp))


class RdpAccountant:
  """Eager convenience wrapper, for people coming from Opacus or dp_accounting.

  Examples:
    >>> import jaxrdp
    >>> acc = jaxrdp.RdpAccountant()
    >>> acc.step(q=256 / 60000, sigma=1.1, steps=14063)
    >>> round(acc.get_epsilon(1e-5), 3)
    2.597
    >>> acc.history
    [(0.004266666666666667, 1.1, 14063)]
  """

  def __init__(self, orders: ArrayLike | None = None):
    self.state = accountant_init(orders)
    self.history: list[tuple[float, float, int]] = []

  def step(self, *, q: float, sigma: float, steps: int = 1) -> None:
    """Records ``steps`` SGM steps with sampling rate q and noise multiplier sigma."""
    self.state = accountant_compose_sgm(self.state, q, sigma, steps)
    self.history.append((q, sigma, steps))

  def get_epsilon(self, delta: float, *, method: str = "improved") -> float:
    return float(accountant_epsilon(self.state, delta, method=method).epsilon)

  def get_delta(self, epsilon: float, *, method: str = "improved") -> float:
    return float(accountant_delta(self.state, epsilon, method=method).delta)

  def get_privacy_spent(self, delta: float) -> tuple[float, float]:
    """(epsilon, optimal order), as Opacus' ``get_privacy_spent`` reports it."""
    res = accountant_epsilon(self.state, delta)
    return float(res.epsilon), float(res.order)
