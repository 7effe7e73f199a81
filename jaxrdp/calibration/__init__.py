"""Calibration to a privacy budget: the noise, the number of steps or the sampling rate.

Each calibration solves a whole grid at once (one traced program with the Renyi-DP
accountant; the tight accountant refines on the host), conservatively: the budget
holds when the answer is recomputed. :class:`Budget` says what is bounded: epsilon
at a given delta, or delta at a given epsilon.
"""

from typing import TYPE_CHECKING

from .._core.lazy import exports as _exports

# Each public name -> the module that defines it, imported on first use
# (jaxrdp._core.lazy).
_NAMES = {
  "BatchSizeCalibration": "._batch_size",
  "floor_to_batch_size": "._batch_size",
  "calibrate_noise": "._calibration",
  "calibrate_sampling_rate": "._calibration",
  "calibrate_steps": "._calibration",
  "Budget": "._core",
  "NoiseCalibration": "._families",
  "SamplingRateCalibration": "._families",
  "StepsCalibration": "._families",
}

# The public names: the keys of _NAMES, listed once.
__all__ = sorted(_NAMES)

__getattr__, __dir__ = _exports(__name__, _NAMES)

# The same names for static analysers (pyright, IDEs): never run (the imports above
# are lazy); tests/test_public_surface.py checks that the two lists agree.
if TYPE_CHECKING:
  from ._batch_size import BatchSizeCalibration as BatchSizeCalibration
  from ._batch_size import floor_to_batch_size as floor_to_batch_size
  from ._calibration import calibrate_noise as calibrate_noise
  from ._calibration import calibrate_sampling_rate as calibrate_sampling_rate
  from ._calibration import calibrate_steps as calibrate_steps
  from ._core import Budget as Budget
  from ._families import NoiseCalibration as NoiseCalibration
  from ._families import SamplingRateCalibration as SamplingRateCalibration
  from ._families import StepsCalibration as StepsCalibration
