"""The general RDP bound of Poisson sampling (PoissonSampled of a non-Gaussian mechanism).

Oracles that share no code with jaxrdp: the Sampled Gaussian Mechanism's exact RDP (the
bound must be above it, and close for small q, when fed the Gaussian curve), and mpmath
quadrature of the exact Renyi divergence, both directions, of the subsampled Laplace pair
``(1 - q) Lap(0, b) + q Lap(1, b)`` against ``Lap(0, b)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

import jaxrdp
from jaxrdp.events import (
  Composed,
  DiscreteLaplace,
  Gaussian,
  KaryRandomizedResponse,
  Laplace,
  PoissonSampled,
  RandomizedResponse,
  SelfComposed,
  ZCDp,
)
from jaxrdp.rdp._poisson_upper_bound import integer_orders_needed, poisson_upper_bound_f64

INF = float("inf")


def _mp_sgm(q, sigma, alpha):
  """Exact RDP of the SGM at integer alpha (Mironov, Talwar, Zhang 2019: the binomial sum)."""
  q, s = mpmath.mpf(q), mpmath.mpf(sigma)
  total = mpmath.fsum(
    mpmath.binomial(alpha, k)
    * (1 - q) ** (alpha - k)
    * q**k
    * mpmath.exp((k * k - k) / (2 * s * s))
    for k in range(alpha + 1)
  )
  return mpmath.log(total) / (alpha - 1)


def _bound(q, inner, orders):
  """The kernel fed an inner curve given as a function of the order (numpy)."""
  orders = np.asarray(orders, dtype=np.float64)
  ints = integer_orders_needed(orders)
  with jax.enable_x64(True):
    out = poisson_upper_bound_f64(
      jnp.asarray([q]), jnp.asarray(inner(ints)), jnp.asarray(inner(orders)), orders
    )
  return np.asarray(out)


@pytest.mark.parametrize("sigma", [0.7, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("q", [1e-4, 1e-2, 0.1, 0.5])
def test_with_the_gaussian_curve_it_is_above_the_exact_sgm_and_close_for_small_q(q, sigma):
  orders = np.arange(2.0, 65.0)
  got = _bound(q, lambda a: a / (2 * sigma * sigma), orders)
  with mpmath.workdps(30):
    exact = np.array([float(_mp_sgm(q, sigma, int(a))) for a in orders])
  assert np.all(got >= exact), (got / exact).min()
  # Order 2 is exact (both directions: chi-square), rounded up by 1e-12 only.
  assert got[0] <= exact[0] * (1 + 2e-12)
  # The same leading term C(a, 2) q^2 expm1(eps(2)): close for small q at moderate orders.
  if q <= 1e-4:
    assert np.all(got <= exact * 1.07), (got / exact).max()
  elif q <= 1e-2:
    assert np.all(got[:15] <= exact[:15] * 1.2), (got / exact)[:15].max()
  # Never above the unsampled curve (subsampling cannot hurt).
  assert np.all(got <= orders / (2 * sigma * sigma))


def _mp_laplace_subsampled(q, b, alpha):
  """max over both directions of D_alpha between (1-q) Lap(0,b) + q Lap(1,b) and Lap(0,b)."""
  q, b, a = mpmath.mpf(q), mpmath.mpf(b), mpmath.mpf(alpha)

  def p(x):
    return mpmath.exp(-abs(x) / b) / (2 * b)

  def m(x):
    return (1 - q) * p(x) + q * mpmath.exp(-abs(x - 1) / b) / (2 * b)

  out = []
  for num, den in ((m, p), (p, m)):
    val = mpmath.quad(lambda x: num(x) ** a * den(x) ** (1 - a), [-mpmath.inf, 0, 1, mpmath.inf])
    out.append(mpmath.log(val) / (a - 1))
  return max(out)


@pytest.mark.parametrize("b", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("q", [0.01, 0.1, 0.5])
def test_poisson_sampled_laplace_is_above_its_exact_renyi_divergence(q, b):
  orders = [2.0, 2.5, 3.0, 6.0]
  acct = jaxrdp.RdpAccountant(orders)
  got = np.asarray(acct.compose(acct.init(), PoissonSampled(q, Laplace(b))).rdp)
  with mpmath.workdps(20):
    exact = np.array([float(_mp_laplace_subsampled(q, b, a)) for a in orders])
  assert np.all(got >= exact), (got, exact)
  # Order 2: exact up to the 1e-12 rounding-up (Laplace's curve is symmetric).
  assert got[0] <= exact[0] * (1 + 1e-10)
  # A fractional order takes the next integer order's bound (capped by the inner curve).
  assert got[1] == got[2] or got[1] == float(acct.compose(acct.init(), Laplace(b)).rdp[1])
  assert np.all(got <= np.asarray(acct.compose(acct.init(), Laplace(b)).rdp) * (1 + 1e-15))


def test_the_accountant_answers_poisson_sampled_laplace_soundly_and_traceably():
  event = SelfComposed(PoissonSampled(0.01, Laplace(1.0)), 1000)
  rdp = jaxrdp.epsilon_from_event(event, 1e-5)
  # The tight accountant gives epsilon in [1.12281, 1.12379] here (its certified lower and
  # upper bounds, accountant='pld'): RDP is above, by the usual ~20% of its conversion.
  assert 1.1228 <= float(rdp.epsilon) <= 1.3 * 1.1238
  acct = jaxrdp.RdpAccountant(np.concatenate([np.arange(2.0, 33.0), [48.0, 64.0]]))

  def eps(q, b):
    state = acct.compose(acct.init(), SelfComposed(PoissonSampled(q, Laplace(b)), 1000))
    return acct.get_epsilon(state, 1e-5).epsilon

  with jax.enable_x64(True):
    jitted = float(jax.jit(eps)(0.01, 1.0))
    grid = np.asarray(jax.vmap(eps)(jnp.array([0.01, 0.02]), jnp.array([1.0, 1.0])))
    dq, db = jax.grad(eps, argnums=(0, 1))(0.01, 1.0)
  assert jitted >= float(rdp.epsilon) * (1 - 1e-12)  # fewer orders: never below
  assert grid[0] == pytest.approx(jitted, rel=1e-12) and grid[1] > grid[0]
  assert np.isfinite(dq) and dq > 0 and np.isfinite(db) and db < 0
  # Edges: q = 0 releases nothing, q = 1 is the unsampled mechanism; traced invalid q: NaN.
  orders_acct = jaxrdp.RdpAccountant([2.0, 7.5, 300.0, INF])
  zero = orders_acct.compose(orders_acct.init(), PoissonSampled(0.0, Laplace(1.0))).rdp
  one = orders_acct.compose(orders_acct.init(), PoissonSampled(1.0, Laplace(1.0))).rdp
  plain = orders_acct.compose(orders_acct.init(), Laplace(1.0)).rdp
  assert np.all(np.asarray(zero) == 0.0)
  np.testing.assert_array_equal(one, plain)
  with jax.enable_x64(True):
    bad = jax.jit(
      lambda q: orders_acct.compose(orders_acct.init(), PoissonSampled(q, Laplace(1.0))).rdp
    )(1.5)
  assert np.all(np.isnan(np.asarray(bad)))
  with jax.enable_x64(True):
    bad_inner = jax.jit(
      lambda b: orders_acct.compose(orders_acct.init(), PoissonSampled(0.1, Laplace(b))).rdp
    )(-1.0)
  assert np.all(np.isnan(np.asarray(bad_inner)))
  # At infinite order: the largest log-ratio of the pair, log(1 + q (e^(1/b) - 1)).
  inf_val = orders_acct.compose(orders_acct.init(), PoissonSampled(0.1, Laplace(1.0))).rdp[-1]
  assert float(inf_val) == pytest.approx(float(np.log1p(0.1 * np.expm1(1.0))), rel=1e-11)


def test_which_inner_mechanisms_the_general_bound_takes():
  rdp = jaxrdp.accountants.get_accountant("rdp")
  for inner in (
    Laplace(1.0),
    DiscreteLaplace(0.5),
    ZCDp(0.1),
    Composed((Laplace(1.0), Gaussian(2.0))),
    SelfComposed(Laplace(2.0), 3),
  ):
    assert rdp.supports(PoissonSampled(0.1, inner)), inner
  # Randomized response describes a replaced input; replace-one sampling has no rule.
  for event in (
    PoissonSampled(0.1, KaryRandomizedResponse(0.3, 10.0)),
    PoissonSampled(0.1, RandomizedResponse(0.7)),
    PoissonSampled(0.1, Laplace(1.0), "replace_one"),
    PoissonSampled(0.1, PoissonSampled(0.5, Laplace(1.0))),
  ):
    assert not rdp.supports(event), event
