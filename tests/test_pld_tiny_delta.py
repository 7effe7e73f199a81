"""Tiny delta (1e-11 to 1e-15) after hundreds of steps, against a Laplace-inversion oracle.

Where delta is this small, an FFT of the whole privacy-loss distribution in
float64 is below its noise floor (dp_accounting's answers there move by 1e-4
with its interval), so no grid-based library gives a reference. The oracle
(tests/laplace_oracle.py) inverts the composed moment-generating function along
a line through its saddle point, which keeps relative accuracy at any delta;
it is itself checked against the analytic Gaussian mechanism (q = 1) and
against the MNIST value that dp_accounting's converged sequence gives.
"""

import math

import numpy as np
import pytest
from laplace_oracle import delta as oracle_delta
from laplace_oracle import epsilon as oracle_epsilon
from scipy.stats import norm

from jaxrdp.pld import pld_epsilon

# (q, sigma, steps, delta): none of them used to tune jaxrdp.
CASES = [
  (0.05, 2.0, 500, 1e-13),
  (0.2, 5.0, 2000, 1e-15),
  (0.01, 0.8, 3000, 1e-11),
]
IDS = [f"q{c[0]:g}-s{c[1]:g}-T{c[2]}-d{c[3]:g}" for c in CASES]


@pytest.mark.parametrize("direction", ["remove", "add"])
@pytest.mark.parametrize("eps", [3.0, 25.0])
def test_oracle_matches_the_analytic_gaussian_mechanism(direction, eps):
  # q = 1: T steps compose to a Gaussian mechanism with mu = sqrt(T) / sigma
  # (Balle and Wang 2018, arXiv:1805.06530, Thm 8); at eps = 25, delta ~ 2e-8.
  sigma, steps = 2.0, 50
  mu = math.sqrt(steps) / sigma
  exact = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
  assert oracle_delta(1.0, sigma, steps, eps, direction) == pytest.approx(exact, rel=1e-9)


def test_oracle_matches_dp_accountings_converged_mnist_value():
  # dp_accounting's connect-the-dots at intervals 1e-5 and 1e-6: 2.381691, 2.381690.
  assert oracle_epsilon(256 / 60000, 1.1, 14063, 1e-5, 2.4) == pytest.approx(2.381690, abs=1.5e-6)


@pytest.fixture(scope="module")
def results():
  q, sigma, steps, delta = (np.array(c) for c in zip(*CASES))
  return pld_epsilon(q, sigma, steps, delta)


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_epsilon_is_above_the_truth_and_within_1e_5(results, i):
  q, sigma, steps, delta = CASES[i]
  up, low = float(results.epsilon[i]), float(results.epsilon_lower[i])
  truth = oracle_epsilon(q, sigma, steps, delta, up)
  assert truth * (1 - 1e-9) <= up <= truth * (1 + 1e-5)
  assert low <= truth * (1 + 1e-9)
