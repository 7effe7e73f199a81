"""One-call (epsilon, delta) of DP-SGD: T steps of the Sampled Gaussian Mechanism."""

from __future__ import annotations

from typing import Any

import numpy as np
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core import precision as _precision
from ..rdp._conversions import (
  DeltaResult,
  EpsilonResult,
  delta_from_rdp_f64,
  epsilon_from_rdp_f64,
  _check_method,
  _log_delta_per_order,
)
from .._core.numerics import raise_subnormal
from .._core.stored_programs import call_stored
from ..rdp._order_search import min_epsilon_over_orders, with_derivative_at_order
from ..mechanisms._sgm import _rdp_f64, _validate as _validate_sgm, check_order_limit
from .._core.validation import COUNT, DELTA, FINITE_EPSILON, ORDER, static_or_none
from . import _sampling

__all__ = ["DEFAULT_ORDERS", "DP_ACCOUNTING_ORDERS", "dpsgd_epsilon", "dpsgd_delta"]

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


def _search_f64(q, sigma, steps, delta, orders_static, method, live=None, f_floor=None):
  """The order search (jaxrdp.rdp._order_search) on broadcast float64 arguments.

  live: optional mask (broadcastable); where False, the search skips the cell
  and its result is a sound bound but not the exact minimum (callers ignore it).
  f_floor: lower bounds on log A from an earlier search (see
  ``min_epsilon_over_orders``). Returns the whole ``SearchResult``.
  """
  q, sigma, steps, delta = _precision.broadcast_float64(q, sigma, steps, delta)
  return min_epsilon_over_orders(q, sigma, steps, delta, orders_static.array, method, live, f_floor)


def _dpsgd_epsilon_f64(q, sigma, steps, delta, orders, orders_static, method, mode):
  """mode: "exhaustive" (every order; for traced orders) or "search".

  The search (jaxrdp.rdp._order_search) finds the exact minimum over the grid
  without evaluating every order, and always runs to the end, so it needs no
  exhaustive fallback; it differentiates epsilon at the order it selects.
  """
  if mode == "exhaustive":
    q, sigma, steps, delta = _precision.broadcast_float64(q, sigma, steps, delta)
    rdp = _dpsgd_rdp_f64(q, sigma, steps, orders, orders_static)
    return epsilon_from_rdp_f64(rdp, orders, delta, method)
  res = _search_f64(q, sigma, steps, delta, orders_static, method)
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
  _dpsgd_epsilon_f64, static_argnames=("orders_static", "method", "mode")
)
_dpsgd_delta_jit = jax.jit(_dpsgd_delta_f64, static_argnames=("orders_static", "method"))


def _is_rdp(accountant) -> bool:
  return isinstance(accountant, str) and accountant == "rdp"


def _with_accountant(kind, q, sigma, steps, target, orders, method, accountant, scheme):
  """The one-line DP-SGD call through another accountant (the event of ``steps`` SGM steps).

  ``scheme``: the resolved ``(sampling, relation)``; only Poisson sampling under
  add/remove is passed on (the tight accountant's pair is the SGM's under add/remove).
  """
  from ..accountants._api import (
    delta_from_event,
    epsilon_from_event,
  )  # accountants import this module
  from ..events._events import Gaussian, PoissonSampled, SelfComposed

  if orders is not None or method != "improved":
    raise ValueError(
      "orders and method configure the Renyi-DP accountant; with another "
      "accountant leave them out (or pass accountants.RdpAccountant(orders, method))"
    )
  check_scheme_accountant(*scheme, accountant)
  event = SelfComposed(PoissonSampled(q, Gaussian(sigma)), steps)
  fn = epsilon_from_event if kind == "epsilon" else delta_from_event
  return fn(event, target, accountant=accountant)


def check_scheme_accountant(sampling: str, relation: str, accountant: Any) -> None:
  """Raises ValueError for a batching scheme or relation other than Poisson add/remove
  with an accountant other than ``"rdp"`` (the schemes are accounted in Renyi DP)."""
  if _is_rdp(accountant) or _sampling.is_default_scheme(sampling, relation):
    return
  raise ValueError(
    f"sampling={sampling!r} with relation={relation!r} is accounted by the Renyi-DP "
    f"accountant only (accountant='rdp'), got accountant={accountant!r}: the tight "
    "accountant composes Poisson-sampled Gaussians under add/remove"
  )


# What dpsgd_epsilon and dpsgd_delta share, by kind: the given half of the (epsilon,
# delta) pair and its range, the jitted SGM computation and its result type.
_KINDS = {
  "epsilon": ("delta", DELTA, _dpsgd_epsilon_jit, EpsilonResult),
  "delta": ("epsilon", FINITE_EPSILON, _dpsgd_delta_jit, DeltaResult),
}


def _check_rdp_arguments(kind, q, sigma, steps, given, method):
  """Raises ValueError for a bad concrete argument of the Renyi-DP accountant."""
  _check_method(method)
  _validate_sgm(q, sigma, 2.0)
  COUNT.check("steps", steps)
  name, interval, _, _ = _KINDS[kind]
  interval.check(name, given)


def _rdp_dpsgd(kind, q, sigma, steps, given, orders, method, scheme):
  """``dpsgd_epsilon`` (``kind="epsilon"``, ``given`` the delta) or ``dpsgd_delta``
  (``kind="delta"``, ``given`` the epsilon) with the Renyi-DP accountant.

  ``scheme``: the resolved ``(sampling, relation)``; Poisson sampling runs the
  stored SGM program (the order search for epsilon), the other schemes
  ``jaxrdp.rdp._sampling``.
  """
  _check_rdp_arguments(kind, q, sigma, steps, given, method)
  orders = _orders_or_default(orders)
  sampling, relation = scheme
  if sampling != "poisson":
    return _sampling.scheme_dpsgd(
      kind, q, sigma, steps, given, orders, method=method, sampling=sampling, relation=relation
    )
  _, _, jitted, result = _KINDS[kind]
  orders_static = static_or_none(orders)
  static = dict(orders_static=orders_static, method=method)
  if kind == "epsilon":
    static["mode"] = "exhaustive" if orders_static is None else "search"
  return _precision.elementwise_float64(
    lambda q, sigma, steps, given, orders: call_stored(
      "dpsgd_" + kind,
      jitted,
      result,
      # replace-one: the SGM at sigma / 2
      (q, _sampling.effective_sigma(sigma, relation), steps, given, orders),
      static,
    ),
    (q, sigma, steps, given),
    (orders,),
  )


def dpsgd_epsilon(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  delta: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: Any = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
  capacity: int | None = None,
  dataset_size: int | None = None,
) -> EpsilonResult:
  """epsilon of DP-SGD: ``steps`` compositions of the Sampled Gaussian Mechanism.

  eps = min over alpha of conv(steps * sgm_rdp(q, sigma, alpha), alpha, delta),
  with the conversion of :func:`jaxrdp.rdp_to_epsilon` (Abadi et al. 2016,
  arXiv:1607.00133, moments accountant; Mironov, Talwar, Zhang 2019,
  arXiv:1908.10530 for the SGM RDP).

  Args:
    q: Poisson sampling rate in [0, 1] (batch size / dataset size).
    sigma: noise multiplier (noise std / clipping norm), >= 0.
    steps: number of steps, >= 0 (need not be an integer).
    delta: target delta in (0, 1).
      q, sigma, steps and delta broadcast together with NumPy rules.
    orders: Renyi orders to minimise over; default :data:`DEFAULT_ORDERS`, a
      superset of dp_accounting's 156 defaults, so never looser than it.
    method: ``"improved"`` (default) or ``"classic"`` RDP-to-DP conversion.
    accountant: ``"rdp"`` (default: this function's Renyi-DP search) or another
      accountant, by name or object: ``"pld"`` gives the tight, certified epsilon
      of :class:`jaxrdp.accountants.PldAccountant` (about 8 to 10% lower), as a
      ``PldEpsilon(epsilon, epsilon_lower)``. ``orders`` and ``method`` apply to
      the Renyi-DP accountant only.
    sampling: the batching scheme, ``"poisson"`` (default), ``"fixed"`` (B distinct
      examples per step, q = B / n) or ``"shuffle"`` (shuffled epochs, q = B / n,
      no amplification); see ``jaxrdp.rdp._sampling`` for each one's accounting.
      Schemes other than Poisson under add/remove need ``accountant="rdp"``.
    relation: the neighbouring relation, ``"add_remove"`` or ``"replace_one"``;
      default ``"add_remove"`` for ``"poisson"`` and ``"shuffle"``, ``"replace_one"``
      for ``"fixed"`` (the only one its theorem covers; ``"add_remove"`` raises).
      ``sigma`` is always the DP-SGD noise multiplier; the relation's sensitivity
      (C or 2C) is applied here.
    capacity: with ``dataset_size``, Poisson batches truncated at this capacity
      B_max (``jaxrdp.train.PoissonSampler``): the epsilon returned then holds at
      total delta ``delta`` *including* the truncation term (1 + e^eps) eta
      (``jaxrdp.train.truncated_poisson_delta``); scalar arguments, integer steps.
    dataset_size: the dataset size n, with ``capacity``.

  Returns:
    EpsilonResult(epsilon, order) with the broadcast shape of the arguments
    (``PldEpsilon`` with ``accountant="pld"``).

  When ``orders`` is concrete, orders are not all evaluated: exact log A at a
  coarse set of integer orders bounds every other order by convexity, and only
  the orders that could still be optimal are evaluated exactly, one per round
  until none is left (``jaxrdp.rdp._order_search``; 1.9 per configuration on the
  standard benchmark grid, more on very dense order grids). The result is the
  exact minimum over the grid. Traced orders evaluate every order.

  Examples:
    >>> import jaxrdp
    >>> res = jaxrdp.dpsgd_epsilon(256 / 60000, 1.1, 14063, 1e-5)
    >>> round(float(res.epsilon), 3), float(res.order)
    (2.597, 8.1)
    >>> round(float(jaxrdp.dpsgd_epsilon(256 / 60000, 1.1, 14063, 1e-5, accountant="pld").epsilon), 4)
    2.3817
  """
  scheme = _sampling.resolve_scheme(sampling, relation)
  if capacity is not None or dataset_size is not None:
    _check_rdp_arguments("epsilon", q, sigma, steps, delta, method)
    return _sampling.dpsgd_epsilon_truncated(
      dpsgd_epsilon,
      q,
      sigma,
      steps,
      delta,
      orders,
      capacity=capacity,
      dataset_size=dataset_size,
      method=method,
      accountant=accountant,
      sampling=scheme[0],
      relation=scheme[1],
    )
  if not _is_rdp(accountant):
    return _with_accountant("epsilon", q, sigma, steps, delta, orders, method, accountant, scheme)
  return _rdp_dpsgd("epsilon", q, sigma, steps, delta, orders, method, scheme)


def dpsgd_delta(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  epsilon: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: Any = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> DeltaResult:
  """delta of DP-SGD at a given epsilon; arguments as in :func:`dpsgd_epsilon`.

  ``sampling`` and ``relation`` as in :func:`dpsgd_epsilon`. (For truncated Poisson
  batches add ``jaxrdp.train.truncated_poisson_delta`` to the result.)

  Returns:
    DeltaResult(delta, order) with the broadcast shape of the arguments
    (``PldDelta(delta, delta_lower)`` with ``accountant="pld"``).
  """
  scheme = _sampling.resolve_scheme(sampling, relation)
  if not _is_rdp(accountant):
    return _with_accountant("delta", q, sigma, steps, epsilon, orders, method, accountant, scheme)
  return _rdp_dpsgd("delta", q, sigma, steps, epsilon, orders, method, scheme)
