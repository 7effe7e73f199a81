"""Accountants: one protocol (init, compose, get_epsilon, get_delta, epsilon, delta, supports),
known by name, and the questions asked of them (an event's epsilon or delta, DP-SGD in one call)."""

from typing import TYPE_CHECKING

from .._core.lazy import exports as _exports

# Each public name -> the module that defines it, imported on first use
# (jaxrdp._core.lazy): asking the Renyi-DP accountant does not import the tight one.
_NAMES = {
  "PrivacyAccountant": "._api",
  "delta_from_event": "._api",
  "epsilon_from_event": "._api",
  "DeltaBracket": "._dpsgd",
  "EpsilonBracket": "._dpsgd",
  "dpsgd_delta": "._dpsgd",
  "dpsgd_epsilon": "._dpsgd",
  "Accountant": "._protocol",
  "accountant_name": "._protocol",
  "get_accountant": "._protocol",
  "register_accountant": "._protocol",
  "registered_accountants": "._protocol",
  "require_support": "._protocol",
  "PldAccountant": "..pld._event_accountant",
  "PldState": "..pld._event_accountant",
  "RdpAccountant": "..rdp._accountant",
  "RdpState": "..rdp._accountant",
}

# The public names: the keys of _NAMES, listed once.
__all__ = sorted(_NAMES)

__getattr__, __dir__ = _exports(__name__, _NAMES)

# The same names for static analysers (pyright, IDEs): never run (the imports above
# are lazy); tests/test_public_surface.py checks that the two lists agree.
if TYPE_CHECKING:
  from ..pld._event_accountant import PldAccountant as PldAccountant
  from ..pld._event_accountant import PldState as PldState
  from ..rdp._accountant import RdpAccountant as RdpAccountant
  from ..rdp._accountant import RdpState as RdpState
  from ._api import PrivacyAccountant as PrivacyAccountant
  from ._api import delta_from_event as delta_from_event
  from ._api import epsilon_from_event as epsilon_from_event
  from ._dpsgd import DeltaBracket as DeltaBracket
  from ._dpsgd import EpsilonBracket as EpsilonBracket
  from ._dpsgd import dpsgd_delta as dpsgd_delta
  from ._dpsgd import dpsgd_epsilon as dpsgd_epsilon
  from ._protocol import Accountant as Accountant
  from ._protocol import accountant_name as accountant_name
  from ._protocol import get_accountant as get_accountant
  from ._protocol import register_accountant as register_accountant
  from ._protocol import registered_accountants as registered_accountants
  from ._protocol import require_support as require_support
