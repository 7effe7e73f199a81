"""Accountants: one protocol (init, compose, get_epsilon, get_delta, epsilon, delta), registered by name."""

from ._protocol import Accountant as Accountant
from ._protocol import get_accountant as get_accountant
from ._protocol import register_accountant as register_accountant
from ._protocol import registered_accountants as registered_accountants
from ._api import PrivacyAccountant as PrivacyAccountant
from ._api import delta_from_event as delta_from_event
from ._api import epsilon_from_event as epsilon_from_event
from ..rdp._accountant import RdpAccountant as RdpAccountant
from ..rdp._accountant import RdpState as RdpState
from ..pld._event_accountant import PldAccountant as PldAccountant
from ..pld._event_accountant import PldState as PldState
from .. import pld as _pld  # noqa: F401 (registers accountant='pld')

__all__ = [
  "Accountant",
  "PldAccountant",
  "PldState",
  "PrivacyAccountant",
  "RdpAccountant",
  "RdpState",
  "delta_from_event",
  "epsilon_from_event",
  "get_accountant",
  "register_accountant",
  "registered_accountants",
]
