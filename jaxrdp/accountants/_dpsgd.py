"""DP-SGD in one call: epsilon or delta of ``steps`` steps, any batching scheme, any accountant.

The strings ``sampling`` and ``relation`` are read once, by
:func:`jaxrdp.events.dpsgd_event`, which builds the event of the run; the accountant
(a name or an object, :func:`jaxrdp.accountants.get_accountant`) is resolved once and
asked about that event. Whether it can answer is decided by the accountant itself
(``supports``), so a refusal names the real reason and the accountants that can.

Where the event has a certified lower bound on its true epsilon of its own
(:func:`jaxrdp.events.event_epsilon_lower_bound`: shuffled batches), the answer
carries it too: the tight accountant's result already does (``epsilon_lower``), and
a Renyi-DP answer becomes an :class:`~jaxrdp.accountants.EpsilonBracket` (``epsilon``, ``order``,
``epsilon_lower``). The event decides, not the ``sampling`` string.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.validation import is_concrete
from ..events._dpsgd import dpsgd_event, resolve_scheme
from ..events._lower_bounds import event_delta_lower_bound, event_epsilon_lower_bound
from ..rdp._accountant import RdpAccountant
from ..rdp._conversions import DeltaResult, EpsilonResult
from ..rdp._dpsgd import check_sgm_arguments, sgm_dpsgd
from ._protocol import Accountant, get_accountant, require_support
from ._truncation import check_capacity, truncated_poisson_epsilon

if TYPE_CHECKING:  # the tight accountant is imported on first use only
  from ..pld._accountant import PldDelta, PldEpsilon

__all__ = [
  "dpsgd_epsilon",
  "dpsgd_delta",
  "resolve_accountant",
  "accountant_and_orders",
  "EpsilonBracket",
  "DeltaBracket",
]


class EpsilonBracket(NamedTuple):
  """A Renyi-DP epsilon with the order attaining it, and a lower bound on the true epsilon.

  What :func:`jaxrdp.dpsgd_epsilon` returns with the Renyi-DP accountant for a
  scheme whose event has a certified lower bound (``sampling="shuffle"``).

  Attributes:
    epsilon: the accountant's epsilon, an upper bound on the true one.
    order: the Renyi order attaining it.
    epsilon_lower: certified lower bound on the true epsilon of the mechanism:
      it lies in ``[epsilon_lower, epsilon]``.
  """

  epsilon: jax.Array
  order: jax.Array
  epsilon_lower: jax.Array


class DeltaBracket(NamedTuple):
  """A Renyi-DP delta with the order attaining it, and a lower bound on the true delta.

  Attributes:
    delta: the accountant's delta, an upper bound on the true one.
    order: the Renyi order attaining it.
    delta_lower: certified lower bound on the true delta of the mechanism.
  """

  delta: jax.Array
  order: jax.Array
  delta_lower: jax.Array


def resolve_accountant(
  accountant: str | Accountant, orders: ArrayLike | None = None, method: str = "improved"
) -> Accountant:
  """The accountant object for ``accountant`` (a name or an object), configured by
  ``orders`` and ``method`` when those are given (the Renyi-DP accountant's settings).

  Raises:
    ValueError: ``orders`` or ``method`` given with anything but the name of the
      Renyi-DP accountant.
  """
  acct = get_accountant(accountant)
  if orders is None and method == "improved":
    return acct
  if isinstance(accountant, str) and isinstance(acct, RdpAccountant):
    return RdpAccountant(orders, method)
  raise ValueError(
    "orders and method configure the Renyi-DP accountant (accountant='rdp'); with an "
    "accountant object or another accountant leave them out (pass "
    "jaxrdp.accountants.RdpAccountant(orders, method) as the accountant instead)"
  )


def accountant_and_orders(accountant, orders):
  """``(accountant object, orders)`` for the grid functions (calibrations, sweeps).

  The accountant asked for (a name or an object), and the Renyi-DP orders of their
  jitted search: ``orders`` configures the Renyi-DP accountant given by name, an
  :class:`RdpAccountant` object carries its own, and another accountant takes none.
  """
  acct = get_accountant(accountant)
  if isinstance(acct, RdpAccountant):
    if orders is not None and not isinstance(accountant, str):
      raise ValueError(
        "orders configures the Renyi-DP accountant given by name; an RdpAccountant object "
        "carries its own orders: leave orders out"
      )
    if acct.method != "improved":
      raise ValueError(
        "the calibrations use the improved RDP-to-DP conversion; got an RdpAccountant with "
        f"method={acct.method!r}"
      )
    return acct, (
      orders if isinstance(accountant, str) else np.asarray(acct.orders, dtype=np.float64)
    )
  if orders is not None:
    raise ValueError(f"orders configures the Renyi-DP accountant; leave it out with {acct!r}")
  return acct, None


def _traced_orders(orders) -> bool:
  return orders is not None and not is_concrete(orders)


def _ask(kind, q, sigma, steps, given, orders, method, accountant, sampling, relation):
  """epsilon (``kind="epsilon"``) or delta of the run, through its event and accountant."""
  check_sgm_arguments(kind, q, sigma, steps, given, method)
  if _traced_orders(orders):
    # Traced orders (inside the caller's jit) cannot configure an accountant object:
    # the Renyi-DP search over every order, for Poisson sampling under add/remove.
    rdp = isinstance(get_accountant(accountant), RdpAccountant)
    if resolve_scheme(sampling, relation) != ("poisson", "add_remove") or not rdp:
      raise ValueError(
        "traced orders are supported by the Renyi-DP accountant with Poisson sampling "
        "under add/remove only; pass concrete orders"
      )
    return sgm_dpsgd(kind, q, sigma, steps, given, orders, method)
  acct = resolve_accountant(accountant, orders, method)
  # A list or tuple would be a pytree node of the event, not one leaf of a grid.
  q, sigma, steps = (
    np.asarray(v) if isinstance(v, (list, tuple)) else v for v in (q, sigma, steps)
  )
  event = dpsgd_event(q, sigma, steps, sampling=sampling, relation=relation)
  require_support(acct, event)
  result = acct.epsilon(event, given) if kind == "epsilon" else acct.delta(event, given)
  return _with_lower_bound(kind, event, given, result)


def _with_lower_bound(kind, event, given, result):
  """``result`` with the event's own certified lower bound, where it has one and the
  result carries none (a Renyi-DP answer); otherwise ``result`` unchanged."""
  if hasattr(result, f"{kind}_lower"):
    return result
  bound = event_epsilon_lower_bound if kind == "epsilon" else event_delta_lower_bound
  lower = bound(event, given)
  if lower is None:
    return result
  value, order = result
  with _precision.Float64Scope() as scope:
    low = jnp.asarray(np.broadcast_to(lower, np.shape(value)), jnp.float64)
  low = scope.finalize(low, True)
  return (EpsilonBracket if kind == "epsilon" else DeltaBracket)(value, order, low)


# The overloads say which result comes back (for type checkers; tests/test_typing.py):
# the Renyi-DP accountant by name gives an EpsilonResult, or an EpsilonBracket for
# shuffled batches (whose event has a certified lower bound); the tight one by name a
# PldEpsilon; an accountant object, or a scheme not known until run time, any of them.
@overload
def dpsgd_epsilon(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  delta: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: Literal["rdp"] = "rdp",
  sampling: Literal["poisson", "fixed", "allocation"] = "poisson",
  relation: str | None = None,
  capacity: int | None = None,
  dataset_size: int | None = None,
) -> EpsilonResult: ...


@overload
def dpsgd_epsilon(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  delta: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: Literal["rdp"] = "rdp",
  sampling: Literal["shuffle"],
  relation: str | None = None,
  capacity: int | None = None,
  dataset_size: int | None = None,
) -> EpsilonBracket: ...


@overload
def dpsgd_epsilon(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  delta: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: Literal["pld"],
  sampling: str = "poisson",
  relation: str | None = None,
  capacity: int | None = None,
  dataset_size: int | None = None,
) -> PldEpsilon: ...


@overload
def dpsgd_epsilon(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  delta: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: str | Accountant = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
  capacity: int | None = None,
  dataset_size: int | None = None,
) -> EpsilonResult | EpsilonBracket | PldEpsilon | Any: ...


def dpsgd_epsilon(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  delta: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: str | Accountant = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
  capacity: int | None = None,
  dataset_size: int | None = None,
) -> EpsilonResult | Any:
  """epsilon of DP-SGD: ``steps`` steps of the Sampled Gaussian Mechanism (or another scheme).

  With the Renyi-DP accountant (the default), eps = min over alpha of
  conv(steps * sgm_rdp(q, sigma, alpha), alpha, delta), with the conversion of
  :func:`jaxrdp.rdp_to_epsilon` (Abadi et al. 2016, arXiv:1607.00133, moments
  accountant; Mironov, Talwar, Zhang 2019, arXiv:1908.10530 for the SGM RDP); with
  ``accountant="pld"``, the tight, certified epsilon.

  Args:
    q: Poisson sampling rate in [0, 1] (batch size / dataset size).
    sigma: noise multiplier (noise std / clipping norm), >= 0.
    steps: number of steps, >= 0 (an integer for the tight accountant).
    delta: target delta in (0, 1).
      q, sigma, steps and delta broadcast together with NumPy rules.
    orders: Renyi orders to minimise over; default :data:`DEFAULT_ORDERS`, a
      superset of dp_accounting's 156 defaults, so never looser than it.
    method: ``"improved"`` (default) or ``"classic"`` RDP-to-DP conversion.
      ``orders`` and ``method`` configure the Renyi-DP accountant (they are the
      arguments of :class:`jaxrdp.RdpAccountant`).
    accountant: a name (``"rdp"``, the default; ``"pld"``, the tight, certified
      epsilon of :class:`jaxrdp.accountants.PldAccountant`, about 8 to 10% lower,
      as a ``PldEpsilon(epsilon, epsilon_lower)``) or an accountant object.
    sampling: the batching scheme, ``"poisson"`` (default), ``"fixed"`` (B distinct
      examples per step, q = B / n) or ``"shuffle"`` (shuffled epochs, q = B / n,
      no amplification); :func:`jaxrdp.events.dpsgd_event` builds each one's event,
      and the accountant says whether it can account it.
    relation: the neighbouring relation, ``"add_remove"`` or ``"replace_one"``;
      default ``"add_remove"`` for ``"poisson"`` and ``"shuffle"``, ``"replace_one"``
      for ``"fixed"`` (the only one its theorem covers; ``"add_remove"`` raises).
      ``sigma`` is always the DP-SGD noise multiplier; the relation's sensitivity
      (C or 2C) is applied by the accountant.
    capacity: with ``dataset_size``, Poisson batches truncated at this capacity
      B_max (``jaxrdp.train.PoissonSampler``): the epsilon returned then holds at
      total delta ``delta`` *including* the truncation term (1 + e^eps) eta
      (``jaxrdp.train.truncated_poisson_delta``); scalar arguments, integer steps.
      The same for ``sampling="allocation"`` (``jaxrdp.train.RandomAllocationSampler``,
      whose batches are Binomial(n, q) marginally, so eta is the same union bound).
    dataset_size: the dataset size n, with ``capacity``.

  Returns:
    The accountant's result of the broadcast shape of the arguments:
    ``EpsilonResult(epsilon, order)`` (Renyi DP), ``PldEpsilon(epsilon,
    epsilon_lower)`` (tight). For ``sampling="shuffle"`` the answer is a bracket
    on the true epsilon of shuffled DP-SGD: ``epsilon`` the sound upper bound
    without amplification (Renyi DP, or with ``accountant="pld"`` the tight
    epsilon of the Gaussian mechanism composed ceil(T q) times, lower), and
    ``epsilon_lower`` the certified lower bound of Chua et al. 2024
    (arXiv:2403.17673) over the floor(T / ceil(1 / q)) complete epochs of
    ceil(1 / q) steps, a fresh permutation each (0 before the first complete
    epoch); as an :class:`~jaxrdp.accountants.EpsilonBracket` ``(epsilon, order, epsilon_lower)``
    with the Renyi-DP accountant.

  Raises:
    ValueError: for an argument out of its range (naming it).
    NotImplementedError: if the accountant cannot account the scheme (the message
      names what it lacks and the accountants that can).

  The Renyi-DP accountant does not evaluate every order: exact log A at a coarse
  set of integer orders bounds every other order by convexity, and only the orders
  that could still be optimal are evaluated exactly (``jaxrdp.rdp._order_search``);
  the result is the exact minimum over the grid. Traced orders evaluate every order.

  Examples:
    >>> import jaxrdp
    >>> res = jaxrdp.dpsgd_epsilon(256 / 60000, 1.1, 14063, 1e-5)
    >>> round(float(res.epsilon), 3), float(res.order)
    (2.597, 8.1)
    >>> round(float(jaxrdp.dpsgd_epsilon(256 / 60000, 1.1, 14063, 1e-5, accountant="pld").epsilon), 4)
    2.3817
  """
  args = (q, sigma, steps)
  options = (orders, method, accountant, sampling, relation)
  if capacity is None and dataset_size is None:
    return _ask("epsilon", *args, delta, *options)
  check_sgm_arguments("epsilon", q, sigma, steps, delta, method)
  if resolve_scheme(sampling, relation)[0] not in ("poisson", "allocation"):
    raise ValueError(
      f"capacity applies to sampling='poisson' or 'allocation' only, got sampling={sampling!r}"
    )
  capacity, dataset_size = check_capacity(capacity, dataset_size)
  return truncated_poisson_epsilon(
    lambda d: _ask("epsilon", *args, d, *options),
    q,
    steps,
    delta,
    capacity=capacity,
    dataset_size=dataset_size,
  )


@overload
def dpsgd_delta(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  epsilon: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: Literal["rdp"] = "rdp",
  sampling: Literal["poisson", "fixed", "allocation"] = "poisson",
  relation: str | None = None,
) -> DeltaResult: ...


@overload
def dpsgd_delta(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  epsilon: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: Literal["rdp"] = "rdp",
  sampling: Literal["shuffle"],
  relation: str | None = None,
) -> DeltaBracket: ...


@overload
def dpsgd_delta(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  epsilon: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: Literal["pld"],
  sampling: str = "poisson",
  relation: str | None = None,
) -> PldDelta: ...


@overload
def dpsgd_delta(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  epsilon: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: str | Accountant = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> DeltaResult | DeltaBracket | PldDelta | Any: ...


def dpsgd_delta(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  epsilon: ArrayLike,
  orders: ArrayLike | None = None,
  *,
  method: str = "improved",
  accountant: str | Accountant = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> DeltaResult | Any:
  """delta of DP-SGD at a given epsilon; arguments as in :func:`dpsgd_epsilon`.

  (For truncated Poisson batches add ``jaxrdp.train.truncated_poisson_delta`` to
  the result.)

  Returns:
    ``DeltaResult(delta, order)`` (Renyi DP) or ``PldDelta(delta, delta_lower)``
    (tight) with the broadcast shape of the arguments; for ``sampling="shuffle"``
    a bracket with ``delta_lower``, the certified lower bound on the true delta
    (a :class:`~jaxrdp.accountants.DeltaBracket` with the Renyi-DP accountant; see
    :func:`dpsgd_epsilon`).
  """
  return _ask("delta", q, sigma, steps, epsilon, orders, method, accountant, sampling, relation)
