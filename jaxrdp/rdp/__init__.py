"""The Renyi-DP accountant: RDP curves of events, their composition, and the conversions.

:class:`~jaxrdp.RdpAccountant` (an immutable configuration: the orders and the conversion)
composes the RDP curves of events (one rule per event type, registered with
:func:`register_rdp_rule`; :func:`register_rdp_refusal` states why a type has none) and
converts them to (epsilon, delta) (:func:`~jaxrdp.rdp_to_epsilon`,
:func:`~jaxrdp.rdp_to_delta`). The event of DP-SGD steps takes a fast path: the exact
search over the orders.
"""

from typing import TYPE_CHECKING

from .._core.lazy import exports as _exports

# Each public name -> the module that defines it, imported on first use
# (jaxrdp._core.lazy).
_NAMES = {
  "RdpAccountant": "._accountant",
  "RdpState": "._accountant",
  "DeltaResult": "._conversions",
  "EpsilonResult": "._conversions",
  "rdp_to_delta": "._conversions",
  "rdp_to_epsilon": "._conversions",
  "DEFAULT_ORDERS": "._dpsgd",
  "DP_ACCOUNTING_ORDERS": "._dpsgd",
  "register_rdp_refusal": "._rules",
  "register_rdp_rule": "._rules",
}

# The public names: the keys of _NAMES, listed once.
__all__ = sorted(_NAMES)

__getattr__, __dir__ = _exports(__name__, _NAMES)

# The same names for static analysers (pyright, IDEs): never run (the imports above
# are lazy); tests/test_public_surface.py checks that the two lists agree.
if TYPE_CHECKING:
  from ._accountant import RdpAccountant as RdpAccountant
  from ._accountant import RdpState as RdpState
  from ._conversions import DeltaResult as DeltaResult
  from ._conversions import EpsilonResult as EpsilonResult
  from ._conversions import rdp_to_delta as rdp_to_delta
  from ._conversions import rdp_to_epsilon as rdp_to_epsilon
  from ._dpsgd import DEFAULT_ORDERS as DEFAULT_ORDERS
  from ._dpsgd import DP_ACCOUNTING_ORDERS as DP_ACCOUNTING_ORDERS
  from ._rules import register_rdp_refusal as register_rdp_refusal
  from ._rules import register_rdp_rule as register_rdp_rule
