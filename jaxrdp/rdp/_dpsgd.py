"""The Renyi-DP accountant's fast path for DP-SGD: T steps of the Sampled Gaussian Mechanism.

The default orders, and epsilon or delta of ``T`` Sampled Gaussian steps by the search
over orders (``jaxrdp.rdp._order_search``) in a program stored between processes.
``jaxrdp.dpsgd_epsilon`` reaches it through the accountant
(:class:`jaxrdp.accountants.RdpAccountant` recognises the event of SGM steps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._core import precision as _precision
from .._core.numerics import raise_subnormal
from .._core.stored_programs import call_stored
from .._core.validation import COUNT, DELTA, FINITE_EPSILON, ORDER, static_or_none
from ..mechanisms._sgm import (
  _rdp_f64,
  check_order_limit,
  may_have_small_sigma,
)
from ..mechanisms._sgm import (
  _validate as _validate_sgm,
)
from ..rdp._conversions import (
  DeltaResult,
  EpsilonResult,
  _check_method,
  _log_delta_per_order,
  delta_from_rdp_f64,
  epsilon_from_rdp_f64,
)
from ..rdp._order_search import min_epsilon_over_orders, with_derivative_at_order

__all__ = ["DEFAULT_ORDERS", "DP_ACCOUNTING_ORDERS", "sgm_dpsgd", "check_sgm_arguments"]

#: dp_accounting's default orders (dp_accounting.rdp.RdpAccountant, 156 orders).
DP_ACCOUNTING_ORDERS = np.array(
  [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024],
  dtype=np.float64,
)

#: jaxrdp's default orders: a superset of dp_accounting's 156, so the epsilon is
#: never looser than dp_accounting's with its defaults (our RDP is exact and
#: theirs is an upper bound, and the minimum runs over more orders). The extras
#: fill the gaps that matter: orders in (1, 1.1) for large-noise / few-step
#: regimes, and orders between and beyond 64..1024 for very small epsilons.
DEFAULT_ORDERS = np.unique(
  np.concatenate(
    [
      DP_ACCOUNTING_ORDERS,
      1.0 + np.arange(1, 10) / 100.0,
      np.array([80, 96, 160, 192, 384, 768, 2048, 4096], dtype=np.float64),
    ]
  )
)


def _orders_or_default(orders):
  orders = DEFAULT_ORDERS if orders is None else orders
  ORDER.check("orders", orders)
  if np.ndim(orders) != 1:
    raise ValueError(f"orders must be a 1-D array, got shape {np.shape(orders)}")
  if np.shape(orders)[0] == 0:
    raise ValueError("orders must hold at least one order in (1, inf], got an empty array")
  check_order_limit("orders", orders)
  return orders if not isinstance(orders, (list, tuple)) else np.asarray(orders, dtype=np.float64)


def _dpsgd_rdp_f64(q, sigma, steps, orders, orders_static=None):
  """T * rdp(alpha) of shape batch + [n_orders] (float64, traceable)."""
  q, sigma, steps = (_precision.as_float64(x) for x in (q, sigma, steps))
  steps = raise_subnormal(steps)  # XLA reads a subnormal as 0; rounding up is sound
  orders = _precision.as_float64(orders)
  rdp = _rdp_f64(q[..., None], sigma[..., None], orders, orders_static)
  # 0 steps spend nothing, even where one step would be infinite.
  return jnp.where(steps[..., None] == 0, 0.0, steps[..., None] * rdp)


def _search_f64(
  q, sigma, steps, delta, orders_static, method, live=None, f_floor=None, small_sigma=True
):
  """The order search (jaxrdp.rdp._order_search) on broadcast float64 arguments.

  live: optional mask (broadcastable); where False, the search skips the cell
  and its result is a sound bound but not the exact minimum (callers ignore it).
  f_floor: lower bounds on log A from an earlier search (see
  ``min_epsilon_over_orders``). Returns the whole ``SearchResult``.
  small_sigma (static): see ``min_epsilon_over_orders``.
  """
  q, sigma, steps, delta = _precision.broadcast_float64(q, sigma, steps, delta)
  return min_epsilon_over_orders(
    q, sigma, steps, delta, orders_static.array, method, live, f_floor, small_sigma
  )


def _dpsgd_epsilon_f64(
  q, sigma, steps, delta, orders, orders_static, method, mode, small_sigma=True
):
  """mode: "exhaustive" (every order; for traced orders) or "search".

  small_sigma (static): False when every sigma is known to lie in the quadrature's
  verified domain (``may_have_small_sigma``), so that the search's program leaves
  out the bound for the sigmas below it (a fifth of its compilation time).

  The search (jaxrdp.rdp._order_search) finds the exact minimum over the grid
  without evaluating every order, and always runs to the end, so it needs no
  exhaustive fallback; it differentiates epsilon at the order it selects.
  """
  if mode == "exhaustive":
    q, sigma, steps, delta = _precision.broadcast_float64(q, sigma, steps, delta)
    rdp = _dpsgd_rdp_f64(q, sigma, steps, orders, orders_static)
    return epsilon_from_rdp_f64(rdp, orders, delta, method)
  res = _search_f64(q, sigma, steps, delta, orders_static, method, small_sigma=small_sigma)
  return EpsilonResult(res.epsilon, res.order)


def _delta_at_order(method, a, q, sigma, steps, epsilon):
  """delta of the conversion at the single order a (elementwise)."""
  a = a[..., None]  # one order per element, on the orders axis
  rdp = _dpsgd_rdp_f64(q, sigma, steps, a)
  return jnp.exp(_log_delta_per_order(rdp, a, epsilon, method)[..., 0])


def _dpsgd_delta_f64(q, sigma, steps, epsilon, orders, orders_static, method):
  args = _precision.broadcast_float64(q, sigma, steps, epsilon)
  # As for epsilon: the value without derivatives, differentiated at the order
  # it selects, so a derivative program does not differentiate every order.
  q, sigma, steps, epsilon = (jax.lax.stop_gradient(x) for x in args)
  rdp = _dpsgd_rdp_f64(q, sigma, steps, orders, orders_static)
  res = delta_from_rdp_f64(rdp, orders, epsilon, method)
  delta = with_derivative_at_order(_delta_at_order, method, *args, res.order, res.delta)
  return DeltaResult(delta, res.order)


_dpsgd_epsilon_jit = jax.jit(
  _dpsgd_epsilon_f64, static_argnames=("orders_static", "method", "mode", "small_sigma")
)
_dpsgd_delta_jit = jax.jit(_dpsgd_delta_f64, static_argnames=("orders_static", "method"))


# What sgm_epsilon and sgm_delta share, by kind: the given half of the (epsilon,
# delta) pair and its range, the jitted SGM computation and its result type.
_KINDS = {
  "epsilon": ("delta", DELTA, _dpsgd_epsilon_jit, EpsilonResult),
  "delta": ("epsilon", FINITE_EPSILON, _dpsgd_delta_jit, DeltaResult),
}


def check_sgm_arguments(kind, q, sigma, steps, given, method="improved"):
  """Raises for a bad concrete argument, naming it (``q``, ``sigma``, ``steps``, the given)."""
  _check_method(method)
  _validate_sgm(q, sigma, 2.0)
  COUNT.check("steps", steps)
  name, interval, _, _ = _KINDS[kind]
  interval.check(name, given)


def sgm_dpsgd(kind, q, sigma, steps, given, orders, method):
  """epsilon (``kind="epsilon"``, ``given`` the delta) or delta (``kind="delta"``, ``given``
  the epsilon) of ``steps`` Sampled Gaussian steps, ``sigma`` the mechanism's multiplier.

  The Renyi-DP accountant's fast path for DP-SGD: the stored program (the search over
  orders for epsilon, :mod:`jaxrdp.rdp._order_search`). ``orders``: an array (concrete
  orders search, traced ones evaluate every order).
  """
  check_sgm_arguments(kind, q, sigma, steps, given, method)
  orders = _orders_or_default(orders)
  _, _, jitted, result = _KINDS[kind]
  orders_static = static_or_none(orders)
  static = dict(orders_static=orders_static, method=method)
  if kind == "epsilon":
    static["mode"] = "exhaustive" if orders_static is None else "search"
    if static["mode"] == "search" and not may_have_small_sigma(sigma):
      static["small_sigma"] = False  # a smaller program (see _dpsgd_epsilon_f64)
  return _precision.elementwise_float64(
    lambda q, sigma, steps, given, orders: call_stored(
      "dpsgd_" + kind, jitted, result, (q, sigma, steps, given, orders), static
    ),
    (q, sigma, steps, given),
    (orders,),
  )
