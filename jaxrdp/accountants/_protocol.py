"""The accountant protocol and the registry of accountants by name.

An accountant is an immutable configuration object with pure methods, in the
style of optax's gradient transformations: its state is a pytree that lives in
the caller's training state, is updated inside ``jax.jit``, and is saved with
the checkpoint. The one-shot methods evaluate a whole (broadcast) event at
once.

Accountants are known by name (``"rdp"``, ``"pld"``, and any registered with
:func:`register_accountant`), so that every function taking ``accountant=`` accepts
a name or an accountant object (:func:`get_accountant`, the one place a name is
read). Each accountant says which events it can account (``unsupported`` /
``supports``, decided by the event's structure); :func:`require_support` turns a
refusal into a message that names what is missing and the accountants that can.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from jax.typing import ArrayLike

__all__ = [
  "Accountant",
  "register_accountant",
  "get_accountant",
  "registered_accountants",
  "require_support",
  "accountant_name",
]


@runtime_checkable
class Accountant(Protocol):
  """What an accountant provides (``jaxrdp.accountants.RdpAccountant`` is one).

  ``compose`` and the ``get_*`` methods are jittable with traced event leaves;
  the one-shot ``epsilon`` and ``delta`` are vectorized over the event's
  broadcast leaves and return results of the broadcast shape.
  """

  def supports(self, event: Any) -> bool:
    """Whether this accountant can account ``event`` (decided by its structure)."""

  def unsupported(self, event: Any) -> str | None:
    """``None`` if supported, else the part of ``event`` it cannot account (a phrase)."""

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


def _builtin(module: str, name: str) -> Callable[[], Accountant]:
  def factory():
    return getattr(importlib.import_module(module, __package__), name)()

  return factory


# The built-in accountants, imported when first asked for (the tight one is large).
_FACTORIES: dict[str, Callable[[], Accountant]] = {
  "rdp": _builtin("..rdp._accountant", "RdpAccountant"),
  "pld": _builtin("..pld._event_accountant", "PldAccountant"),
}
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


def _describe(accountant: Accountant) -> str:
  return getattr(accountant, "description", None) or f"the accountant {accountant!r}"


def require_support(accountant: Accountant, event: Any) -> None:
  """Raises NotImplementedError if ``accountant`` cannot account ``event``.

  The message is generated from the accountants' own ``unsupported``: what is
  missing, and which registered accountants can account the event (or that none can).
  """
  why = accountant.unsupported(event)
  if why is None:
    return
  able = []
  for name in registered_accountants():
    other = get_accountant(name)
    if type(other) is not type(accountant) and other.unsupported(event) is None:
      able.append(f"accountant={name!r}")
  if able:
    tail = f"; {' and '.join(able)} can"
  else:
    tail = "; no registered accountant can"
  raise NotImplementedError(f"{_describe(accountant)} cannot account {why}{tail}")


def accountant_name(accountant: Accountant) -> str:
  """The registered name of ``accountant``'s kind (``"rdp"``, ``"pld"``), else its class name.

  For labelling results: an accountant object with other settings (other orders, say)
  is still of that kind.
  """
  for name in registered_accountants():
    if type(get_accountant(name)) is type(accountant):
      return name
  return type(accountant).__name__
