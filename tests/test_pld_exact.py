"""jaxrdp.pld against the exact privacy curve of one and two steps (mpmath).

For one step the hockey-stick curve of the Poisson-subsampled Gaussian has a
closed form in Gaussian CDFs; for two steps it is a one-dimensional integral of
the one-step curve, ``delta_2(eps) = E_{x ~ P}[delta_1(eps - L(x))]``, which
mpmath integrates to 30 digits. Each case checks, at jaxrdp's epsilon, that the
exact delta is at most the target (the epsilon is an upper bound) and that a
slightly smaller epsilon is not enough (it is tight).

The cases are random configurations drawn for validation and not used to tune
the accountant. Three lie in documented corners where the bound is looser than
``rtol``: two steps with delta below 1e-8, and an epsilon of 1.4e-5 (one step),
whose relative accuracy the largest grid (2^21 points over the window the tail
bounds require) limits to about 1e-4.
"""

import mpmath as mp
import numpy as np
import pytest

from jaxrdp.pld import pld_epsilon

mp.mp.dps = 30

# Every test reads the module's results: one tight call of every case, its programs compiled.
pytestmark = pytest.mark.slow


def _delta_one(eps, q, s, direction):
  """Exact delta of one step at ``eps`` (mpmath), remove or add direction."""
  phi = mp.ncdf
  if direction == "remove":  # P = (1 - q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2)
    h = mp.e**eps - 1 + q
    if h <= 0:
      return 1 - mp.e**eps
    x = (2 * s**2 * mp.log(h / q) + 1) / 2  # the loss exceeds eps above x
    return (1 - q) * (1 - phi(x / s)) + q * (1 - phi((x - 1) / s)) - mp.e**eps * (1 - phi(x / s))
  c = mp.e ** (-eps) - (1 - q)  # add: P = N(0, s^2), Q = the mixture
  if c <= 0:
    return mp.mpf(0)
  x = (2 * s**2 * mp.log(c / q) + 1) / 2  # the loss exceeds eps below x
  return phi(x / s) - mp.e**eps * ((1 - q) * phi(x / s) + q * phi((x - 1) / s))


def _delta(eps, q, s, steps):
  """Exact add/remove delta of one or two steps at ``eps``."""
  q, s, eps = mp.mpf(q), mp.mpf(s), mp.mpf(eps)
  if steps == 1:
    return max(_delta_one(eps, q, s, "remove"), _delta_one(eps, q, s, "add"))

  def loss(x):  # log(mu(x) / mu0(x))
    return mp.log(1 - q + q * mp.e ** ((2 * x - 1) / (2 * s * s)))

  def mixture(x):
    return (1 - q) * mp.npdf(x, 0, s) + q * mp.npdf(x, 1, s)

  cuts = [-30 * s, -5 * s, 0, 1, 1 + 5 * s, 1 + 30 * s]
  remove = mp.quad(lambda x: mixture(x) * _delta_one(eps - loss(x), q, s, "remove"), cuts)
  add = mp.quad(lambda x: mp.npdf(x, 0, s) * _delta_one(eps + loss(x), q, s, "add"), cuts)
  return max(remove, add)


# (q, sigma, steps, delta, tightness)
CASES = [
  (1.0496903828516309e-4, 2.351860700270979, 1, 6.119139188233353e-11, 1e-5),
  (0.15426866277570553, 42.412004594862964, 1, 4.1176956927938443e-11, 1e-5),
  (1.389060350999224e-4, 27.62879599461019, 1, 5.067751946906003e-09, 2e-4),
  (0.9354977674345053, 2.318343251721556, 1, 6.390031617311377e-09, 1e-5),
  (0.01625584919099523, 11.242391013471288, 2, 6.240551360633165e-08, 1e-5),
  (0.0002136150147715101, 3.0867014415809604, 2, 1.7717476175786781e-09, 1e-4),
  (0.004314528387280227, 1.361778015942804, 2, 5.701888218745758e-11, 1e-4),
]


@pytest.fixture(scope="module")
def results():
  q, sigma, steps, delta = (np.array([c[i] for c in CASES]) for i in range(4))
  return pld_epsilon(q, sigma, steps, delta)


@pytest.mark.parametrize("i", range(len(CASES)))
def test_upper_bound_is_certified_and_tight(results, i):
  q, sigma, steps, delta, tight = CASES[i]
  eps = float(results.epsilon[i])
  low = float(results.epsilon_lower[i])
  assert _delta(eps, q, sigma, steps) <= delta, "reported epsilon is below the truth"
  assert _delta(eps * (1 - tight), q, sigma, steps) > delta, "not tight to the stated tolerance"
  assert _delta(low, q, sigma, steps) >= delta, "the lower bound is above the truth"
