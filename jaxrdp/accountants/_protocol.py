"""The accountant protocol and the registry of accountants by name.

An accountant is an immutable configuration object with pure methods, in the
style of optax's gradient transformations: its state is a pytree that lives in
the caller's training state, is updated inside ``jax.jit``, and is saved with
the checkpoint. The one-shot methods evaluate a whole (broadcast) event at
once.

Accountants register under a name (``"rdp"``; others register themselves on
import), so that every function taking ``accountant=`` accepts a name or an
accountant object.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

from jax.typing import ArrayLike

__all__ = ["Accountant", "register_accountant", "get_accountant", "registered_accountants"]


@runtime_checkable
class Accountant(Protocol):
  """What an accountant provides (``jaxrdp.accountants.RdpAccountant`` is one).

  ``compose`` and the ``get_*`` methods are jittable with traced event leaves;
  the one-shot ``epsilon`` and ``delta`` are vectorized over the event's
  broadcast leaves and return results of the broadcast shape.
  """

  def init(self) -> Any:
    """A fresh state (a pytree): nothing spent."""

  def compose(self, state: Any, event: Any) -> Any:
    """The state after ``event`` has also been released."""

  def get_epsilon(self, state: Any, delta: ArrayLike) -> Any:
    """``EpsilonResult`` of everything composed into ``state`` at ``delta``."""

  def get_delta(self, state: Any, epsilon: ArrayLike) -> Any:
    """``DeltaResult`` of everything composed into ``state`` at ``epsilon``."""

  def epsilon(self, event: Any, delta: ArrayLike) -> Any:
    """``EpsilonResult`` of ``event`` alone at ``delta``."""

  def delta(self, event: Any, epsilon: ArrayLike) -> Any:
    """``DeltaResult`` of ``event`` alone at ``epsilon``."""


_FACTORIES: dict[str, Callable[[], Accountant]] = {}
_DEFAULTS: dict[str, Accountant] = {}


def register_accountant(name: str, factory: Callable[[], Accountant]) -> None:
  """Makes ``accountant=name`` mean ``factory()`` (with its default configuration).

  Re-registering a name replaces it (a module reloaded in a notebook).
  """
  if not isinstance(name, str) or not name:
    raise ValueError(f"accountant name must be a non-empty string, got {name!r}")
  _FACTORIES[name] = factory
  _DEFAULTS.pop(name, None)


def registered_accountants() -> tuple[str, ...]:
  """The registered accountant names, sorted."""
  return tuple(sorted(_FACTORIES))


def get_accountant(accountant: str | Accountant) -> Accountant:
  """The accountant object for a registered name, or ``accountant`` itself.

  Accountants are immutable, so one default instance per name is shared.

  Raises:
    ValueError: for an unknown name (the message lists the registered ones).
    TypeError: for an object that is not an accountant.
  """
  if isinstance(accountant, str):
    if accountant not in _FACTORIES:
      raise ValueError(
        f"unknown accountant {accountant!r}; registered accountants: "
        f"{', '.join(registered_accountants())}"
      )
    if accountant not in _DEFAULTS:
      _DEFAULTS[accountant] = _FACTORIES[accountant]()
    return _DEFAULTS[accountant]
  if not isinstance(accountant, Accountant):
    raise TypeError(
      f"accountant must be a registered name or an accountant object, got "
      f"{type(accountant).__name__}"
    )
  return accountant
