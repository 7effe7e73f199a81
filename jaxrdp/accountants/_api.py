"""Top-level accounting of events, and an eager accountant for Opacus-style loops."""

from __future__ import annotations

from typing import Any

from jax.typing import ArrayLike

from ..events._events import Gaussian, PoissonSampled, SelfComposed
from ..events._interop import from_dp_accounting, is_dp_accounting_event
from ..rdp._conversions import DeltaResult, EpsilonResult
from ._protocol import Accountant, get_accountant, require_support

__all__ = ["epsilon_from_event", "delta_from_event", "PrivacyAccountant"]


def _as_event(event):
  return from_dp_accounting(event) if is_dp_accounting_event(event) else event


def epsilon_from_event(
  event: Any, delta: ArrayLike, *, accountant: str | Accountant = "rdp"
) -> EpsilonResult:
  """epsilon at ``delta`` of everything ``event`` describes.

  Args:
    event: a jaxrdp event (``jaxrdp.events``; its leaves broadcast, so one
      event may describe a grid) or a dp_accounting ``DpEvent`` tree.
    delta: target delta in (0, 1); broadcasts against the event's leaves.
    accountant: a registered name (``"rdp"``) or an accountant object such as
      ``jaxrdp.accountants.RdpAccountant(orders)``.

  Returns:
    EpsilonResult(epsilon, order) of the broadcast shape.

  Examples:
    >>> import numpy as np, jaxrdp
    >>> from jaxrdp.events import Gaussian, PoissonSampled, SelfComposed
    >>> res = jaxrdp.epsilon_from_event(SelfComposed(PoissonSampled(256 / 60000, Gaussian(1.1)), 14063), 1e-5)
    >>> round(float(res.epsilon), 4)
    2.5967
    >>> grid = SelfComposed(PoissonSampled(np.array([[0.001], [0.01]]), Gaussian(np.array([1.0, 2.0]))), 1000)
    >>> jaxrdp.epsilon_from_event(grid, 1e-5).epsilon.shape
    (2, 2)
  """
  acct, event = get_accountant(accountant), _as_event(event)
  require_support(acct, event)
  return acct.epsilon(event, delta)


def delta_from_event(
  event: Any, epsilon: ArrayLike, *, accountant: str | Accountant = "rdp"
) -> DeltaResult:
  """delta at ``epsilon`` of everything ``event`` describes; see :func:`~jaxrdp.epsilon_from_event`."""
  acct, event = get_accountant(accountant), _as_event(event)
  require_support(acct, event)
  return acct.delta(event, epsilon)


class PrivacyAccountant:
  """Eager accountant for loops written in Python (as Opacus' and dp_accounting's).

  Args:
    accountant: a registered name (``"rdp"``) or an accountant object.

  Attributes:
    accountant: the accountant object.
    state: its state (everything composed so far).
    history: what was composed, in order: ``(q, sigma, steps)`` for
      :meth:`step`, the event for :meth:`compose`.

  Examples:
    >>> import jaxrdp
    >>> acc = jaxrdp.PrivacyAccountant()
    >>> acc.step(q=256 / 60000, sigma=1.1, steps=14063)
    >>> round(acc.get_epsilon(1e-5), 3)
    2.597
    >>> acc.history
    [(0.004266666666666667, 1.1, 14063)]
  """

  def __init__(self, accountant: str | Accountant = "rdp"):
    self.accountant = get_accountant(accountant)
    self.state = self.accountant.init()
    self.history: list[Any] = []

  def step(self, *, q: float, sigma: float, steps: int = 1) -> None:
    """Records ``steps`` DP-SGD steps with sampling rate q and noise multiplier sigma."""
    event = SelfComposed(PoissonSampled(q, Gaussian(sigma)), steps)
    require_support(self.accountant, event)
    self.state = self.accountant.compose(self.state, event)
    self.history.append((q, sigma, steps))

  def compose(self, event: Any) -> None:
    """Records any event (a jaxrdp event or a dp_accounting ``DpEvent``)."""
    event = _as_event(event)
    require_support(self.accountant, event)
    self.state = self.accountant.compose(self.state, event)
    self.history.append(event)

  def get_epsilon(self, delta: float) -> float:
    return float(self.accountant.get_epsilon(self.state, delta).epsilon)

  def get_delta(self, epsilon: float) -> float:
    return float(self.accountant.get_delta(self.state, epsilon).delta)

  def get_privacy_spent(self, delta: float) -> tuple[float, float]:
    """(epsilon, optimal order), as Opacus' ``get_privacy_spent`` reports it.

    The order is NaN for accountants without one (``"pld"``).
    """
    res = self.accountant.get_epsilon(self.state, delta)
    return float(res.epsilon), float(getattr(res, "order", float("nan")))
