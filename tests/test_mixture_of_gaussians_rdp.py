"""The RDP bound of MixtureOfGaussians against mpmath quadrature of its exact divergences.

The pair is ``P = N(0, s^2)`` and ``Q = sum_i p_i N(c_i, s^2)``; the oracle integrates
``D_alpha(Q || P)`` and ``D_alpha(P || Q)`` at 25 digits (no code shared with jaxrdp).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

import jaxrdp
from jaxrdp.events import Gaussian, MixtureOfGaussians

ORDERS = [2.0, 3.0, 4.5, 8.0, 20.0]
ACCT = jaxrdp.RdpAccountant(ORDERS + [float("inf")])


def _mp_mixture_rdp(sigma, cs, ps, alpha):
  s, a = mpmath.mpf(sigma), mpmath.mpf(alpha)

  def p(x):
    return mpmath.exp(-(x**2) / (2 * s * s))

  def q(x):
    return mpmath.fsum(pi * mpmath.exp(-((x - c) ** 2) / (2 * s * s)) for c, pi in zip(cs, ps))

  norm = mpmath.sqrt(2 * mpmath.pi) * s
  points = [-mpmath.inf] + sorted({-10 * s, 0, *cs, max(cs) + 10 * s}) + [mpmath.inf]
  out = []
  for num, den in ((q, p), (p, q)):
    val = mpmath.quad(lambda x: num(x) ** a * den(x) ** (1 - a), points) / norm
    out.append(mpmath.log(val) / (a - 1))
  return max(out)


CASES = [
  (1.0, (0.0, 1.0), (0.99, 0.01)),  # the sampled Gaussian at q = 0.01
  (1.0, (0.0, 1.0), (0.5, 0.5)),
  (2.0, (0.5, 1.0, 2.0), (0.2, 0.5, 0.3)),
  (3.0, (0.0, 1.0, 3.0), (0.5, 0.3, 0.2)),
  (0.8, (0.0, 0.3, 1.0), (0.9, 0.05, 0.05)),
]


@pytest.mark.parametrize("sigma, cs, ps", CASES)
def test_mixture_bound_is_above_the_exact_divergence_both_ways(sigma, cs, ps):
  got = np.asarray(ACCT.compose(ACCT.init(), MixtureOfGaussians(sigma, cs, ps)).rdp)
  with mpmath.workdps(25):
    exact = np.array([float(_mp_mixture_rdp(sigma, cs, ps, a)) for a in ORDERS])
  assert np.all(got[:-1] >= exact), (got[:-1], exact)
  # Joint convexity over the components caps it (the coarse bound max_i alpha c_i^2 / 2s^2).
  assert np.all(got[:-1] <= np.array(ORDERS) * max(cs) ** 2 / (2 * sigma**2) * (1 + 1e-12))
  assert got[-1] == float("inf")
  if len(cs) == 2 and cs[0] == 0.0 and ps[0] >= 0.9:
    # A sampled Gaussian in disguise: the amplified bound stays within 20% of the exact value.
    assert np.all(got[:-1] <= exact * 1.2), got[:-1] / exact


def test_one_component_is_the_gaussian_and_q_zero_c_is_nothing():
  for sigma, c in [(1.0, 1.0), (2.0, 3.0)]:
    got = ACCT.compose(ACCT.init(), MixtureOfGaussians(sigma, (c,), (1.0,))).rdp
    want = ACCT.compose(ACCT.init(), Gaussian(sigma / c)).rdp
    np.testing.assert_allclose(got, want, rtol=1e-11)
  zero = ACCT.compose(ACCT.init(), MixtureOfGaussians(1.0, (0.0, 0.0), (0.5, 0.5))).rdp
  assert np.all(np.asarray(zero) == 0.0)


def test_mixture_is_traceable_over_a_grid():
  def eps(sigma, p1):
    event = MixtureOfGaussians(sigma, (0.0, 1.0), (1.0 - p1, p1))
    state = ACCT.compose(ACCT.init(), event)
    return ACCT.get_epsilon(state, 1e-5).epsilon

  with jax.enable_x64(True):
    grid = np.asarray(jax.vmap(eps)(jnp.array([1.0, 2.0]), jnp.array([0.1, 0.1])))
    ds, dp = jax.grad(eps, argnums=(0, 1))(1.0, 0.1)
    bad = jax.jit(eps)(-1.0, 0.1)
  assert grid[1] < grid[0] and np.all(np.isfinite(grid))
  assert np.isfinite(ds) and ds < 0 and np.isfinite(dp) and dp > 0
  assert np.isnan(bad)
  # The tight accountant brackets epsilon in [1.68449, 1.68455] here (accountant='pld',
  # its certified bounds): the RDP bound with the default orders is above, by ~27%.
  event = MixtureOfGaussians(1.0, (0.0, 1.0), (0.9, 0.1))
  rdp = float(jaxrdp.epsilon_from_event(event, 1e-5).epsilon)
  assert 1.68449 <= rdp <= 1.3 * 1.68455
