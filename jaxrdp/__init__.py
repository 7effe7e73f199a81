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

Submodules: :mod:`jaxrdp.events` (mechanism descriptions),
:mod:`jaxrdp.accountants` (the accountant protocol), :mod:`jaxrdp.pld` (tight
accounting by privacy-loss distributions), :mod:`jaxrdp.mechanisms` (the kernels:
the SGM's Renyi DP and other mechanisms' curves), :mod:`jaxrdp.train` (the optax
DP-SGD step, sampling, checkpoints), :mod:`jaxrdp.classical` (classical
(epsilon, delta) theorems).
"""

from . import accountants as accountants
from . import classical as classical
from . import events as events
from . import mechanisms as mechanisms
from . import pld as pld
from . import train as train

# DP-SGD in one call, and the Renyi-DP orders.
from .rdp._dpsgd import DEFAULT_ORDERS as DEFAULT_ORDERS
from .rdp._dpsgd import DP_ACCOUNTING_ORDERS as DP_ACCOUNTING_ORDERS
from .rdp._dpsgd import dpsgd_delta as dpsgd_delta
from .rdp._dpsgd import dpsgd_epsilon as dpsgd_epsilon

# Conversions from Renyi DP to (epsilon, delta).
from .rdp._conversions import DeltaResult as DeltaResult
from .rdp._conversions import EpsilonResult as EpsilonResult
from .rdp._conversions import rdp_to_delta as rdp_to_delta
from .rdp._conversions import rdp_to_epsilon as rdp_to_epsilon

# Events and accountants: one event describes a whole grid; an accountant turns it
# into epsilon or delta.
from .accountants._api import PrivacyAccountant as PrivacyAccountant
from .accountants._api import delta_from_event as delta_from_event
from .accountants._api import epsilon_from_event as epsilon_from_event
from .rdp._accountant import RdpAccountant as RdpAccountant

# Calibration to a budget.
from .calibration._calibration import NoiseCalibration as NoiseCalibration
from .calibration._calibration import SamplingRateCalibration as SamplingRateCalibration
from .calibration._calibration import StepsCalibration as StepsCalibration
from .calibration._calibration import calibrate_noise as calibrate_noise
from .calibration._calibration import calibrate_sampling_rate as calibrate_sampling_rate
from .calibration._calibration import calibrate_steps as calibrate_steps

# Sweeps.
from .sweeps import SweepResult as SweepResult
from .sweeps import plot_sweep as plot_sweep
from .sweeps import sweep as sweep

from ._version import __version__ as __version__

__all__ = [
  # DP-SGD in one call
  "DEFAULT_ORDERS",
  "DP_ACCOUNTING_ORDERS",
  "dpsgd_delta",
  "dpsgd_epsilon",
  # conversions
  "DeltaResult",
  "EpsilonResult",
  "rdp_to_delta",
  "rdp_to_epsilon",
  # events and accountants
  "PrivacyAccountant",
  "RdpAccountant",
  "delta_from_event",
  "epsilon_from_event",
  # calibration
  "NoiseCalibration",
  "SamplingRateCalibration",
  "StepsCalibration",
  "calibrate_noise",
  "calibrate_sampling_rate",
  "calibrate_steps",
  # sweeps
  "SweepResult",
  "plot_sweep",
  "sweep",
  # submodules
  "accountants",
  "classical",
  "events",
  "mechanisms",
  "pld",
  "train",
]
