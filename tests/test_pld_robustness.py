"""jaxrdp.pld at the edges: large epsilon, tiny delta, small sigma, q = 1, T = 1e6.

Every answer must be finite and certified (checked against the exact Gaussian
for q = 1 and against RDP, which is always an upper bound), never NaN.
"""

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import brentq

import jaxrdp
from jaxrdp.events import Gaussian, RandomAllocation, SelfComposed
from jaxrdp.pld import pld_epsilon

# (q, sigma, steps, delta)
EDGES = [
  (0.1, 0.6, 10_000, 1e-5),  # epsilon in the hundreds
  (0.01, 1.0, 1_000_000, 1e-5),  # T = 1e6
  (0.01, 0.3, 1000, 1e-5),  # sigma = 0.3
  (1.0, 0.3, 1, 1e-15),  # q = 1, tiny delta, large epsilon
  (1.0, 1.0, 100, 1e-15),  # q = 1, tiny delta
  (0.001, 1.0, 1000, 1e-15),  # tiny delta, small epsilon
  (0.9, 50.0, 10, 1e-12),  # large sigma
]


def _gaussian_epsilon(mu, delta):
  return brentq(
    lambda e: float(jaxrdp.mechanisms.analytic_gaussian_delta(e, 1.0 / mu)) - delta,
    0.0,
    1e4,
    xtol=1e-13,
    rtol=1e-15,
  )


def test_edges_are_finite_and_certified():
  q, sigma, steps, delta = (np.array([e[i] for e in EDGES]) for i in range(4))
  r = pld_epsilon(q, sigma, steps, delta, grid_size=2**16)
  up, low = np.asarray(r.epsilon), np.asarray(r.epsilon_lower)
  assert np.all(np.isfinite(up)) and np.all(np.isfinite(low))
  assert np.all(low <= up)
  assert up[0] > 50
  orders = np.concatenate([np.linspace(1.01, 10.9, 100), np.arange(11, 256), [512, 1024, 4096]])
  rdp = np.asarray(jaxrdp.dpsgd_epsilon(q, sigma, steps, delta, orders=orders).epsilon)
  assert np.all(up <= rdp * (1 + 1e-9)), (up, rdp)
  for i in (3, 4):
    exact = _gaussian_epsilon(math.sqrt(steps[i]) / sigma[i], delta[i])
    assert exact <= up[i] <= exact * (1 + 1e-4), (i, up[i], exact)
    assert low[i] <= exact


# Valid but extreme noise: a value (or inf), never a raw OverflowError or ZeroDivisionError.
@pytest.mark.slow
@pytest.mark.parametrize("sigma", [0.02, 1e3, 1e4])
@pytest.mark.parametrize("selected", [1, 2])
def test_random_allocation_at_extreme_sigma_gives_a_bracket(sigma, selected):
  r = jaxrdp.epsilon_from_event(
    RandomAllocation(selected / 10, Gaussian(sigma), 10, selected=selected),
    1e-5,
    accountant="pld",
  )
  up, low = float(r.epsilon), float(r.epsilon_lower)
  assert 0 <= low <= up < math.inf
  # Never above the bound without amplification: `selected` Gaussians at sigma.
  plain = jaxrdp.epsilon_from_event(
    SelfComposed(Gaussian(sigma), selected), 1e-5, accountant="pld"
  ).epsilon
  # Two discretizations of one bound (the generic path's grid step is absolute).
  assert up <= float(plain) * (1 + 1e-5) + 1e-7


def test_random_allocation_fallback_is_at_most_the_unamplified_bound():
  # Where the bracket is loose, the answer is also bounded by one Gaussian per
  # participation: one epoch of t = 2 at sigma = 0.5 gives 9.997256 (Renyi DP: 10.109).
  r = jaxrdp.dpsgd_epsilon(0.5, 0.5, 2, 1e-5, sampling="allocation", accountant="pld")
  mu = 1 / 0.5
  assert float(r.epsilon) == pytest.approx(_gaussian_epsilon(mu, 1e-5), rel=1e-6)


@pytest.mark.parametrize("fn", [jaxrdp.dpsgd_tpr, jaxrdp.dpsgd_advantage])
def test_attack_risk_at_large_sigma_answers(fn):
  args = (0.01, 1e4, 100, 0.01) if fn is jaxrdp.dpsgd_tpr else (0.01, 1e4, 100)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # the grid the planner asks for is capped
    r = fn(*args)
  up, low = (float(v) for v in r)
  assert 0 <= low <= up < 1
