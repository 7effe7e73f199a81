"""The integer batch size within a sampling-rate calibration (jaxrdp.calibration._batch_size).

The calibrations are written out by hand here (only their q, epsilon, delta and
feasible fields are read), so these tests compile the accountant, not a calibration.
The reference values are computed at the argument shapes floor_to_batch_size passes
to the accountant (four cells: q and delta of shape (4,), scalar sigma and steps), so
that the file compiles one epsilon and one delta program.
"""

import numpy as np

import jaxrdp
from jaxrdp.calibration._batch_size import floor_to_batch_size
from jaxrdp.calibration._calibration import SamplingRateCalibration
from jaxrdp.calibration._core import Budget

N = 60000
SIGMA, STEPS = 1.1, 14063
NAN = np.nan


def _calibration(q, epsilon, delta):
  q = np.asarray(q, dtype=np.float64)
  feasible = np.isfinite(q)
  given = lambda v: np.where(feasible, v, NAN)
  return SamplingRateCalibration(q, given(epsilon), given(delta), given(8.0), feasible)


def test_floors_the_batch_and_recomputes_epsilon_at_its_rate():
  # 256.9 / N floors to 256; 0.5 / N is below one example; NaN is an infeasible cell.
  cal = _calibration([256.9 / N, 0.5 / N, NAN, 1.0], 3.0, 1e-5)
  res = floor_to_batch_size(cal, N, SIGMA, STEPS)
  np.testing.assert_array_equal(res.batch_size, [256, NAN, NAN, N])
  np.testing.assert_array_equal(res.q, [256 / N, NAN, NAN, 1.0])
  np.testing.assert_array_equal(res.feasible, [True, False, False, True])
  want = jaxrdp.dpsgd_epsilon(
    np.array([256 / N, 256 / N, 1.0, 1.0]), SIGMA, STEPS, np.full(4, 1e-5)
  )
  np.testing.assert_array_equal(res.epsilon[[0, 3]], np.asarray(want.epsilon)[[0, 3]])
  np.testing.assert_array_equal(res.order[[0, 3]], np.asarray(want.order)[[0, 3]])
  assert np.isnan(res.epsilon[[1, 2]]).all() and np.isnan(res.order[[1, 2]]).all()
  # The given delta passes through (NaN where the calibration was infeasible).
  np.testing.assert_array_equal(res.delta, [1e-5, 1e-5, NAN, 1e-5])
  assert res.epsilon[0] == jaxrdp.dpsgd_epsilon(256 / N, SIGMA, STEPS, 1e-5).epsilon


def test_for_delta_recomputes_delta_and_passes_epsilon_through():
  cal = _calibration([256.9 / N, NAN], 2.6, 1e-5)
  res = floor_to_batch_size(cal, np.array([N, N]), SIGMA, STEPS, budget=Budget.DELTA)
  want = jaxrdp.dpsgd_delta(np.full(2, 256 / N), SIGMA, STEPS, np.full(2, 2.6))
  np.testing.assert_array_equal(res.delta, [float(want.delta[0]), NAN])
  np.testing.assert_array_equal(res.epsilon, [2.6, NAN])
  np.testing.assert_array_equal(res.batch_size, [256, NAN])


def test_dataset_sizes_broadcast():
  cal = _calibration([0.01], 3.0, 1e-5)
  res = floor_to_batch_size(cal, np.array([1000, 60000, 99, 150]), SIGMA, STEPS)
  np.testing.assert_array_equal(res.batch_size, [10, 600, NAN, 1])
  np.testing.assert_array_equal(res.feasible, [True, True, False, True])
