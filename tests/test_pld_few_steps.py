"""One and two steps, down to delta = 1e-12, against an independent mpmath oracle.

These are the corners where a composed PLD is lumpy (few steps include the
example) or the answer is far below the window (an epsilon of 1e-4 after one
step): the certified epsilon must stay above the truth and within 1e-5
relative of it. The oracle (tests/pld_oracle.py) integrates the exact
hockey-stick divergence of one or two steps at 30 digits.
"""

import functools

import numpy as np
import pytest
from helpers import central_difference
from pld_oracle import tight_delta

from jaxrdp.pld import _driver, pld_delta, pld_epsilon

# (q, sigma, steps, delta)
CASES = [
  (0.5, 1.0, 2, 1e-12),
  (0.01, 0.5, 2, 1e-12),
  (1e-4, 0.3, 2, 1e-12),
  (0.05, 1.5, 2, 1e-9),
  (1e-4, 1.0, 1, 1e-6),
  (1e-4, 0.5, 1, 1e-5),
  (1e-2, 5.0, 1, 1e-4),
  (1e-4, 0.3, 1, 1e-12),
  (0.3, 1.0, 1, 1e-5),
]
# Rows also run with every direction recomposed in double-word arithmetic.
FORCED = [0, 3]
IDS = [f"q{c[0]:g}-s{c[1]:g}-T{c[2]}-d{c[3]:g}" for c in CASES]
# The oracle's tanh-sinh quadrature is converged to far better than this.
ORACLE_RTOL = 1e-9


@functools.cache
def _oracle(i, eps):
  q, sigma, steps, _ = CASES[i]
  return tight_delta(q, sigma, steps, eps)


@pytest.fixture(scope="module")
def results():
  q, sigma, steps, delta = (np.array(c) for c in zip(*CASES))
  default = pld_epsilon(q, sigma, steps, delta)
  # Every direction composed again in double-word arithmetic (the pass keeps
  # the tighter certified bound, so this checks that it stays sound).
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(_driver, "_DOUBLE_WORD_SHARE", -np.inf)
    forced = pld_epsilon(q[FORCED], sigma[FORCED], steps[FORCED], delta[FORCED])
  return default, dict(zip(FORCED, np.asarray(forced.epsilon)))


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_epsilon_is_certified_and_within_1e_5(results, i):
  delta = CASES[i][3]
  default, forced = results
  up, low = float(default.epsilon[i]), float(default.epsilon_lower[i])
  assert 0.0 < low <= up
  assert _oracle(i, up) <= delta * (1 + ORACLE_RTOL), "upper bound below the truth"
  assert _oracle(i, up * (1 - 1e-5)) > delta, "more than 1e-5 above the truth"
  assert _oracle(i, low) >= delta * (1 - ORACLE_RTOL), "lower bound above the truth"
  if i in forced:
    assert _oracle(i, float(forced[i])) <= delta * (1 + ORACLE_RTOL)
    assert float(forced[i]) <= up * (1 + 1e-9)  # the tighter certified bound is kept
  if CASES[i][2] == 1:  # one step: the closed form's root, not a grid's
    assert (up - low) / up < 1e-10


def test_one_step_delta_is_exact():
  cases = [c for c in CASES if c[2] == 1]
  q, sigma, _, _ = (np.array(c) for c in zip(*cases))
  eps = np.array([1e-4, 3e-3, 2e-3, 12.0, 2.5])
  r = pld_delta(q, sigma, 1, eps)
  for j, (qq, ss, _, _) in enumerate(cases):
    with_oracle = tight_delta(qq, ss, 1, eps[j])
    assert float(r.delta_lower[j]) <= with_oracle * (1 + ORACLE_RTOL)
    assert float(r.delta[j]) >= with_oracle * (1 - ORACLE_RTOL)
    assert float(r.delta[j]) <= with_oracle * (1 + 1e-10)


def test_one_step_derivative_matches_finite_differences():
  import jax

  f = lambda s: pld_epsilon(1e-2, s, 1, 1e-4).epsilon
  with jax.enable_x64(True):
    grad = float(jax.grad(f)(5.0))
    fd = central_difference(lambda s: float(f(s)), 5.0, 1e-4)
  assert grad < 0
  assert abs(grad - fd) <= 1e-5 * abs(fd), (grad, fd)
