"""Calibration for random allocation (sampling="allocation"), searched on the host.

The invariants of a calibration, checked against the accounting functions the user
would paste the answer into: the budget holds at the answer, and a little less noise
(one step more) breaks it. The rate is k / t for a whole t, so it is not calibrated.
"""

from __future__ import annotations

import numpy as np
import pytest

import jaxrdp

Q, STEPS, DELTA = 1 / 20, 20 * 30, 1e-5


def _eps(sigma, steps=STEPS, accountant="rdp"):
  res = jaxrdp.dpsgd_epsilon(Q, sigma, steps, DELTA, sampling="allocation", accountant=accountant)
  return np.asarray(res.epsilon)


def test_noise_meets_the_budget_and_is_tight():
  targets = np.array([1.0, 4.0])
  res = jaxrdp.calibrate_noise(targets, DELTA, Q, STEPS, sampling="allocation")
  sigma = np.asarray(res.sigma)
  assert np.all(res.feasible)
  assert np.all(_eps(sigma) <= targets)
  assert np.all(_eps(sigma * (1 - 3e-5)) > targets)
  # Random allocation needs no more noise than Poisson sampling at the same rate here.
  poisson = np.asarray(jaxrdp.calibrate_noise(targets, DELTA, Q, STEPS).sigma)
  assert np.all(sigma <= poisson)


def test_steps_meet_the_budget_and_one_more_epoch_breaks_it():
  res = jaxrdp.calibrate_steps(2.0, DELTA, Q, 1.5, sampling="allocation")
  steps = float(res.steps)
  assert bool(res.feasible) and steps >= 1
  assert _eps(1.5, steps) <= 2.0 < _eps(1.5, steps + 1)


def test_tight_noise_meets_the_tight_budget():
  res = jaxrdp.calibrate_noise(2.0, DELTA, Q, STEPS, sampling="allocation", accountant="pld")
  sigma = float(res.sigma)
  assert float(_eps(sigma, accountant="pld")) <= 2.0
  assert float(_eps(sigma * (1 - 3e-5), accountant="pld")) > 2.0
  assert sigma <= float(jaxrdp.calibrate_noise(2.0, DELTA, Q, STEPS, sampling="allocation").sigma)


def test_the_rate_is_not_calibrated():
  with pytest.raises(NotImplementedError, match="k / t"):
    jaxrdp.calibrate_sampling_rate(2.0, DELTA, 1.0, STEPS, sampling="allocation")
