"""Calibration with the tight accountant (accountant="pld"): conservative and tight.

Oracle: the tight accountant itself, recomputed at the answer (the budget holds) and
one bracket width beyond it (the budget fails), and the Renyi-DP calibration, which
the tight one may only improve on.
"""

from __future__ import annotations

import numpy as np
import pytest

import jaxrdp

T, DELTA = 200, 1e-5


def _eps(q, sigma, steps):
  return float(jaxrdp.dpsgd_epsilon(q, sigma, steps, DELTA, accountant="pld").epsilon)


def test_calibrate_noise_pld_is_conservative_tight_and_below_rdp():
  res = jaxrdp.calibrate_noise(1.0, DELTA, 0.05, T, accountant="pld")
  rdp = jaxrdp.calibrate_noise(1.0, DELTA, 0.05, T)
  sigma = float(res.sigma)
  assert bool(res.feasible) and np.isnan(float(res.order))
  assert _eps(0.05, sigma, T) <= 1.0 and float(res.epsilon) == _eps(0.05, sigma, T)
  assert _eps(0.05, sigma * (1 - 1e-4), T) > 1.0  # tight to 1e-4
  assert sigma < float(rdp.sigma)


def test_calibrate_steps_and_rate_pld():
  steps = jaxrdp.calibrate_steps(1.0, DELTA, 0.05, 2.0, accountant="pld")
  t = float(steps.steps)
  assert t == int(t) and _eps(0.05, 2.0, t) <= 1.0 < _eps(0.05, 2.0, t + 1)
  assert t >= float(jaxrdp.calibrate_steps(1.0, DELTA, 0.05, 2.0).steps)
  rate = jaxrdp.calibrate_sampling_rate(1.0, DELTA, 2.0, T, accountant="pld")
  q = float(rate.q)
  assert _eps(q, 2.0, T) <= 1.0 < _eps(q * (1 + 1e-4), 2.0, T)


def test_calibrate_pld_arguments():
  with pytest.raises(ValueError, match="orders"):
    jaxrdp.calibrate_noise(1.0, DELTA, 0.05, T, orders=[2.0, 3.0], accountant="pld")
  with pytest.raises(ValueError, match="accountant"):
    jaxrdp.calibrate_noise(1.0, DELTA, 0.05, T, accountant="prv")
