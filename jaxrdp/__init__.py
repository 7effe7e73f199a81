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

from ._core.lazy import exports as _exports
from ._version import __version__ as __version__

# Every name below is imported on first use (jaxrdp._core.lazy), so that
# ``import jaxrdp`` (and the ``jaxrdp`` command) load only what is used:
# each public name -> the module that defines it.
_NAMES = {
  # DP-SGD in one call, and the Renyi-DP orders.
  "DEFAULT_ORDERS": ".rdp._dpsgd",
  "DP_ACCOUNTING_ORDERS": ".rdp._dpsgd",
  "dpsgd_delta": ".rdp._dpsgd",
  "dpsgd_epsilon": ".rdp._dpsgd",
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
  "NoiseCalibration": ".calibration._calibration",
  "SamplingRateCalibration": ".calibration._calibration",
  "StepsCalibration": ".calibration._calibration",
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
  # attack risk
  "dpsgd_advantage",
  "dpsgd_tpr",
  "tradeoff_curve",
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
  "risk",
  "train",
]

__getattr__, __dir__ = _exports(__name__, _NAMES, _SUBMODULES)
