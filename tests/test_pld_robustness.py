"""jaxrdp.pld at the edges: large epsilon, tiny delta, small sigma, q = 1, T = 1e6.

Every answer must be finite and certified (checked against the exact Gaussian
for q = 1 and against RDP, which is always an upper bound), never NaN.
"""

import math

import numpy as np
from scipy.optimize import brentq

import jaxrdp
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
