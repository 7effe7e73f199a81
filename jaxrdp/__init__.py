"""jaxrdp: exact, vectorized privacy accounting for DP-SGD in JAX.

The top level holds what a model owner needs to publish an epsilon:

* DP-SGD in one call: :func:`dpsgd_epsilon`, :func:`dpsgd_delta`.
* Any mechanism described as an event (:mod:`jaxrdp.events`; one event can
  describe a whole grid): :func:`epsilon_from_event`, :func:`delta_from_event`,
  with an accountant (:class:`RdpAccountant`, or the eager
  :class:`PrivacyAccountant`).
* The Renyi-DP accountant and its conversions: :func:`rdp_to_epsilon`,
  :func:`rdp_to_delta`, with the default orders :data:`DEFAULT_ORDERS`.
* Calibration of the noise, the number of steps or the sampling rate to a
  budget: :func:`calibrate_noise`, :func:`calibrate_steps`,
  :func:`calibrate_sampling_rate`.
* Sweeps over grids: :func:`sweep`, :func:`plot_sweep`.
* Privacy as attack risk (tight, certified): :func:`dpsgd_tpr` (the best
  membership attack's true-positive rate at a given false-positive rate),
  :func:`dpsgd_advantage`, :func:`tradeoff_curve`; calibration to them in
  :mod:`jaxrdp.risk`.

Submodules: :mod:`jaxrdp.events` (mechanism descriptions),
:mod:`jaxrdp.accountants` (the accountant protocol), :mod:`jaxrdp.pld` (tight
accounting by privacy-loss distributions), :mod:`jaxrdp.risk` (attack risk:
trade-off curves, calibration to them), :mod:`jaxrdp.mechanisms` (the kernels:
the SGM's Renyi DP and other mechanisms' curves), :mod:`jaxrdp.train` (the optax
DP-SGD step, sampling, checkpoints), :mod:`jaxrdp.classical` (classical
(epsilon, delta) theorems).
"""

from typing import TYPE_CHECKING

from ._core.lazy import exports as _exports
from ._version import __version__ as __version__

# Every name below is imported on first use (jaxrdp._core.lazy), so that
# ``import jaxrdp`` (and the ``jaxrdp`` command) load only what is used:
# each public name -> the module that defines it.
_NAMES = {
  # DP-SGD in one call, and the Renyi-DP orders.
  "DEFAULT_ORDERS": ".rdp._dpsgd",
  "DP_ACCOUNTING_ORDERS": ".rdp._dpsgd",
  "dpsgd_delta": ".accountants._dpsgd",
  "dpsgd_epsilon": ".accountants._dpsgd",
  # Conversions from Renyi DP to (epsilon, delta).
  "DeltaResult": ".rdp._conversions",
  "EpsilonResult": ".rdp._conversions",
  "rdp_to_delta": ".rdp._conversions",
  "rdp_to_epsilon": ".rdp._conversions",
  # Events and accountants: one event describes a whole grid; an accountant turns it
  # into epsilon or delta.
  "PrivacyAccountant": ".accountants._api",
  "delta_from_event": ".accountants._api",
  "epsilon_from_event": ".accountants._api",
  "RdpAccountant": ".rdp._accountant",
  # Calibration to a budget.
  "NoiseCalibration": ".calibration._families",
  "SamplingRateCalibration": ".calibration._families",
  "StepsCalibration": ".calibration._families",
  "calibrate_noise": ".calibration._calibration",
  "calibrate_sampling_rate": ".calibration._calibration",
  "calibrate_steps": ".calibration._calibration",
  # Privacy as attack risk.
  "dpsgd_advantage": ".risk._api",
  "dpsgd_tpr": ".risk._api",
  "tradeoff_curve": ".risk._api",
  # Sweeps.
  "SweepResult": ".sweeps",
  "plot_sweep": ".sweeps",
  "sweep": ".sweeps",
}
# The subpackages, as attributes (as they were when this module imported them all).
_SUBMODULES = (
  "accountants",
  "calibration",
  "classical",
  "events",
  "mechanisms",
  "pld",
  "rdp",
  "risk",
  "sweeps",
  "train",
)


# The public names: the keys of _NAMES (and the submodules), listed once.
__all__ = sorted([*_NAMES, *_SUBMODULES])

__getattr__, __dir__ = _exports(__name__, _NAMES, _SUBMODULES)

# The same names for static analysers (pyright, IDEs): never run (the imports above
# are lazy); tests/test_public_surface.py checks that the two lists agree.
if TYPE_CHECKING:
  from . import accountants as accountants
  from . import calibration as calibration
  from . import classical as classical
  from . import events as events
  from . import mechanisms as mechanisms
  from . import pld as pld
  from . import rdp as rdp
  from . import risk as risk
  from . import sweeps as sweeps
  from . import train as train
  from .accountants._api import PrivacyAccountant as PrivacyAccountant
  from .accountants._api import delta_from_event as delta_from_event
  from .accountants._api import epsilon_from_event as epsilon_from_event
  from .accountants._dpsgd import dpsgd_delta as dpsgd_delta
  from .accountants._dpsgd import dpsgd_epsilon as dpsgd_epsilon
  from .calibration._calibration import calibrate_noise as calibrate_noise
  from .calibration._calibration import calibrate_sampling_rate as calibrate_sampling_rate
  from .calibration._calibration import calibrate_steps as calibrate_steps
  from .calibration._families import NoiseCalibration as NoiseCalibration
  from .calibration._families import SamplingRateCalibration as SamplingRateCalibration
  from .calibration._families import StepsCalibration as StepsCalibration
  from .rdp._accountant import RdpAccountant as RdpAccountant
  from .rdp._conversions import DeltaResult as DeltaResult
  from .rdp._conversions import EpsilonResult as EpsilonResult
  from .rdp._conversions import rdp_to_delta as rdp_to_delta
  from .rdp._conversions import rdp_to_epsilon as rdp_to_epsilon
  from .rdp._dpsgd import DEFAULT_ORDERS as DEFAULT_ORDERS
  from .rdp._dpsgd import DP_ACCOUNTING_ORDERS as DP_ACCOUNTING_ORDERS
  from .risk._api import dpsgd_advantage as dpsgd_advantage
  from .risk._api import dpsgd_tpr as dpsgd_tpr
  from .risk._api import tradeoff_curve as tradeoff_curve
  from .sweeps import SweepResult as SweepResult
  from .sweeps import plot_sweep as plot_sweep
  from .sweeps import sweep as sweep
