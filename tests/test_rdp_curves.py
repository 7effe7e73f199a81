"""closed-form SGM bound, Theorem 5, and the other RDP curves.

Every expected value comes from mpmath (50 digits) or a hand computation with the
``math`` module, never from jaxrdp itself.
"""

from __future__ import annotations

import math

import jax
import mpmath
import numpy as np
import pytest
from _oracle_helpers import (
  assert_plain_jit_vmap,
  mp_log_gauss,
  mp_log_mixture,
  mp_on_grid,
  mp_renyi,
  on_grid,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import rdp_binomial, rdp_quad

import jaxrdp

mpmath.mp.dps = 50


# --- Closed-form bound (Mironov, Talwar, Zhang 2019, Thm 11) -------------------


def _thm11_conditions_hold(q, sigma, alpha):
  """Theorem 11's conditions, by hand with the math module."""
  big_l = math.log(1 + 1 / (q * (alpha - 1)))
  c4 = 1 < alpha <= sigma**2 * big_l / 2 - 2 * math.log(sigma)
  c5 = alpha <= (
    (sigma**2 * big_l**2 / 2 - math.log(5) - 2 * math.log(sigma))
    / (big_l + math.log(q * alpha) + 1 / (2 * sigma**2))
  )
  return q <= 0.2 and sigma >= 4 and c4 and c5


def test_closed_form_value_and_conditions():
  q, sigma, alpha = np.meshgrid(
    [1e-4, 1e-2, 0.1, 0.2, 0.3], [2.0, 4.0, 10.0], [1.5, 8.0, 64.0, 1000.0], indexing="ij"
  )
  got = on_grid(jaxrdp.mechanisms.sgm_rdp_closed_form, q, sigma, alpha)
  holds = mp_on_grid(_thm11_conditions_hold, q, sigma, alpha).astype(bool)
  assert holds.any() and not holds.all()
  np.testing.assert_allclose(got[holds], (2 * q * q * alpha / sigma**2)[holds], rtol=1e-14)
  assert np.all(got[~holds] == math.inf)


def test_closed_form_edges():
  assert float(jaxrdp.mechanisms.sgm_rdp_closed_form(0.0, 5.0, 8.0)) == 0.0
  assert float(jaxrdp.mechanisms.sgm_rdp_closed_form(0.01, 5.0, math.inf)) == math.inf
  assert float(jaxrdp.mechanisms.sgm_rdp_closed_form(0.01, 0.0, 8.0)) == math.inf
  assert float(jaxrdp.mechanisms.sgm_rdp_closed_form(1.0, 5.0, 8.0)) == math.inf


def _closed_form_grid():
  qs = [1e-5, 1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.2]
  sigmas = [4.0, 5.0, 8.0, 16.0, 40.0]
  alphas = [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256]
  return [(q, s, a) for q in qs for s in sigmas for a in alphas]


def test_closed_form_upper_bounds_exact_rdp_on_grid():
  grid = _closed_form_grid()
  q, s, a = (np.array(v, np.float64) for v in zip(*grid))
  bound = np.asarray(jaxrdp.mechanisms.sgm_rdp_closed_form(q, s, a))
  finite = np.isfinite(bound)
  assert finite.sum() >= 150  # the theorem's region is well covered
  ratios = []
  for (qi, si, ai), bi in zip(grid, bound):
    if np.isfinite(bi):
      exact = float(rdp_binomial(qi, si, ai))
      assert bi >= exact, (qi, si, ai, bi, exact)
      ratios.append(bi / exact)
  # MATH.md: "within a small constant factor ... median ratio of about 4".
  assert 1.0 < float(np.median(ratios)) < 10.0


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
  log10_q=st.floats(-6, math.log10(0.2)), sigma=st.floats(4.0, 100.0), alpha=st.integers(2, 300)
)
def test_closed_form_upper_bounds_exact_rdp_property(log10_q, sigma, alpha):
  q = 10.0**log10_q
  bound = float(jaxrdp.mechanisms.sgm_rdp_closed_form(q, sigma, float(alpha)))
  if math.isfinite(bound):
    assert bound >= float(rdp_binomial(q, sigma, alpha))


@pytest.mark.parametrize("q,sigma,alpha", [(0.01, 5.0, 1.5), (0.05, 8.0, 7.5), (1e-3, 4.0, 20.5)])
def test_closed_form_upper_bounds_exact_rdp_fractional(q, sigma, alpha):
  bound = float(jaxrdp.mechanisms.sgm_rdp_closed_form(q, sigma, alpha))
  assert math.isfinite(bound)
  assert bound >= float(rdp_quad(q, sigma, alpha, dps=30))


def test_closed_form_upper_bounds_core_sgm_rdp():
  # Against the core kernel at every default order (fractional ones included).
  # (Small grid: the mpmath tests above cover the parameter space.)
  q = np.array([1e-3, 0.05])[:, None, None]
  s = np.array([4.0, 10.0])[None, :, None]
  a = np.asarray(jaxrdp.DEFAULT_ORDERS)  # on the last axis: the order search's layout
  bound = np.asarray(jaxrdp.mechanisms.sgm_rdp_closed_form(q, s, a))
  exact = np.asarray(jaxrdp.mechanisms.sgm_rdp(q, s, a))
  finite = np.isfinite(bound)
  assert finite.sum() > 150
  assert np.all(bound[finite] >= exact[finite])


# --- Theorem 5 / Corollary 7: D_alpha(mu0 || mu) <= D_alpha(mu || mu0) ------------


@pytest.mark.parametrize("q", [0.01, 0.2, 0.7])
@pytest.mark.parametrize("sigma", [0.8, 2.0])
@pytest.mark.parametrize("alpha", [1.5, 3.0, 8.0])
def test_theorem5_other_direction_is_smaller(q, sigma, alpha):
  mpmath.mp.dps = 30
  q_m, s_m = mpmath.mpf(q), mpmath.mpf(sigma)
  pts = [mpmath.mpf(float(p)) for p in np.linspace(-10 * sigma, alpha + 10 * sigma, 30)]
  forward = mp_renyi(
    lambda z: mp_log_mixture(z, q_m, s_m), lambda z: mp_log_gauss(z, 0, s_m), alpha, pts
  )
  backward = mp_renyi(
    lambda z: mp_log_gauss(z, 0, s_m), lambda z: mp_log_mixture(z, q_m, s_m), alpha, pts
  )
  mpmath.mp.dps = 50
  assert backward <= forward * (1 + mpmath.mpf(10) ** -20)
  if float(alpha).is_integer():  # the quadrature agrees with the exact sum
    assert float(forward) == pytest.approx(float(rdp_binomial(q, sigma, alpha)), rel=1e-12)


# --- Gaussian, Laplace, randomized response ------------------------------------


@pytest.mark.parametrize("sigma,alpha", [(0.5, 1.5), (1.0, 2.0), (3.0, 40.0)])
def test_gaussian_rdp_matches_quadrature(sigma, alpha):
  mpmath.mp.dps = 30
  s = mpmath.mpf(sigma)
  pts = [mpmath.mpf(float(p)) for p in np.linspace(-10 * sigma, alpha + 10 * sigma, 20)]
  want = mp_renyi(lambda z: mp_log_gauss(z, 1, s), lambda z: mp_log_gauss(z, 0, s), alpha, pts)
  mpmath.mp.dps = 50
  assert float(jaxrdp.mechanisms.gaussian_rdp(sigma, alpha)) == pytest.approx(
    float(want), rel=1e-13
  )


def test_gaussian_rdp_edges():
  assert float(jaxrdp.mechanisms.gaussian_rdp(0.0, 2.0)) == math.inf
  assert float(jaxrdp.mechanisms.gaussian_rdp(1.0, math.inf)) == math.inf
  assert float(jaxrdp.mechanisms.gaussian_rdp(2.0, 3.0)) == 3.0 / 8.0


def _mp_laplace_formula(scale, alpha):
  lam, a = mpmath.mpf(scale), mpmath.mpf(alpha)
  inner = a / (2 * a - 1) * mpmath.exp((a - 1) / lam) + (a - 1) / (2 * a - 1) * mpmath.exp(-a / lam)
  return mpmath.log(inner) / (a - 1)


def test_laplace_rdp_matches_mpmath_formula():
  scale, alpha = np.meshgrid(
    [1e-3, 0.1, 1.0, 7.0, 1e3, 1e6], [1 + 1e-9, 1.01, 1.5, 2.0, 10.0, 300.0, 1e5], indexing="ij"
  )
  got = on_grid(jaxrdp.mechanisms.laplace_rdp, scale, alpha)
  np.testing.assert_allclose(got, mp_on_grid(_mp_laplace_formula, scale, alpha), rtol=1e-12)


@pytest.mark.parametrize("scale,alpha", [(0.5, 1.5), (1.0, 3.0), (4.0, 20.0)])
def test_laplace_rdp_matches_quadrature(scale, alpha):
  # The seed's formula itself, checked against the definition of D_alpha.
  mpmath.mp.dps = 30
  lam = mpmath.mpf(scale)

  def log_lap(mean):
    return lambda z: -abs(z - mean) / lam - mpmath.log(2 * lam)

  want = mp_renyi(log_lap(0), log_lap(1), alpha, [mpmath.mpf(0), mpmath.mpf(1)])
  mpmath.mp.dps = 50
  assert float(jaxrdp.mechanisms.laplace_rdp(scale, alpha)) == pytest.approx(float(want), rel=1e-12)


def test_laplace_rdp_limits():
  for scale in [0.3, 1.0, 50.0]:
    kl = 1 / scale + math.expm1(-1 / scale)  # Wang, lecture notes 6: alpha = 1 entry
    near_one = float(jaxrdp.mechanisms.laplace_rdp(scale, 1 + 1e-12))
    assert near_one == pytest.approx(kl, rel=1e-9)
    assert float(jaxrdp.mechanisms.laplace_rdp(scale, math.inf)) == pytest.approx(
      1 / scale, rel=1e-15
    )
    assert float(jaxrdp.mechanisms.laplace_rdp(scale, 1e12)) == pytest.approx(1 / scale, rel=1e-9)
  assert float(jaxrdp.mechanisms.laplace_rdp(0.0, 2.0)) == math.inf


def _mp_rr_formula(p, alpha):
  p, a = mpmath.mpf(p), mpmath.mpf(alpha)
  return mpmath.log(p**a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)) / (a - 1)


def test_randomized_response_rdp_matches_mpmath():
  p, alpha = np.meshgrid(
    [1e-6, 0.1, 0.5 - 1e-9, 0.5 + 1e-6, 0.6, 0.75, 0.99, 1 - 1e-9],
    [1 + 1e-9, 1.5, 2.0, 32.0, 1e4],
    indexing="ij",
  )
  with mpmath.workdps(80):  # p^alpha for alpha = 1e4 and tiny (1-p) needs the exponent range
    want = mp_on_grid(_mp_rr_formula, p, alpha)
  got = on_grid(jaxrdp.mechanisms.randomized_response_rdp, p, alpha)
  np.testing.assert_allclose(got, want, rtol=1e-12)


def test_randomized_response_rdp_limits():
  for p in [0.6, 0.9]:
    ell = math.log(p / (1 - p))
    assert float(jaxrdp.mechanisms.randomized_response_rdp(p, 1 + 1e-12)) == pytest.approx(
      (2 * p - 1) * ell, rel=1e-9
    )  # Wang, lecture notes 6: alpha = 1 entry
    assert float(jaxrdp.mechanisms.randomized_response_rdp(p, math.inf)) == pytest.approx(
      ell, rel=1e-15
    )
    assert float(jaxrdp.mechanisms.randomized_response_rdp(1 - p, 3.0)) == pytest.approx(
      float(jaxrdp.mechanisms.randomized_response_rdp(p, 3.0)), rel=1e-15
    )
  assert float(jaxrdp.mechanisms.randomized_response_rdp(0.5, 7.0)) == 0.0
  assert float(jaxrdp.mechanisms.randomized_response_rdp(1.0, 2.0)) == math.inf
  assert float(jaxrdp.mechanisms.randomized_response_rdp(0.0, 2.0)) == math.inf


@pytest.mark.parametrize(
  "fn,arg",
  [
    (jaxrdp.mechanisms.laplace_rdp, 0.7),
    (jaxrdp.mechanisms.randomized_response_rdp, 0.8),
    (jaxrdp.mechanisms.gaussian_rdp, 1.3),
  ],
)
def test_rdp_curves_non_decreasing_in_alpha(fn, arg):
  alphas = np.concatenate([1 + np.geomspace(1e-9, 1e4, 200), [np.inf]])
  values = np.asarray(fn(arg, alphas))
  assert np.all(np.diff(values) >= -1e-15 * values[1:])


# --- zCDP ----------------------------------------------------------------------


def test_zcdp_to_epsilon_hand_value():
  rho, delta = np.array([0.01, 0.5, 2.0]), np.array([1e-5, 1e-6, 0.1])
  want = [r + 2 * math.sqrt(r * math.log(1 / d)) for r, d in zip(rho, delta)]
  got = on_grid(jaxrdp.classical.zcdp_to_epsilon, rho, delta)
  np.testing.assert_allclose(got, want, rtol=1e-15)


@pytest.mark.parametrize("sigma", [0.7, 2.0, 10.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-8])
def test_zcdp_epsilon_is_valid_for_gaussian(sigma, delta):
  # The Gaussian mechanism is 1/(2 sigma^2)-zCDP; its exact delta at the zCDP
  # epsilon (mpmath, Balle-Wang Thm 8) must be <= delta.
  eps = float(jaxrdp.classical.zcdp_to_epsilon(1 / (2 * sigma**2), delta))
  s, e = mpmath.mpf(sigma), mpmath.mpf(eps)
  exact = mpmath.ncdf(1 / (2 * s) - e * s) - mpmath.exp(e) * mpmath.ncdf(-1 / (2 * s) - e * s)
  assert exact <= delta


# --- Composing with SGM steps in the accountant --------------------------------


def test_accountant_composes_sgm_with_gaussian_and_laplace():
  from jaxrdp.events import Gaussian, Laplace, PoissonSampled, RandomizedResponse, SelfComposed

  acct = jaxrdp.RdpAccountant()
  sgm_only = acct.compose(acct.init(), SelfComposed(PoissonSampled(0.01, Gaussian(1.1)), 1000))
  orders = np.asarray(sgm_only.orders)
  state = acct.compose(sgm_only, SelfComposed(Gaussian(5.0), 3))
  state = acct.compose(state, Laplace(20.0))
  state = acct.compose(state, RandomizedResponse(0.6))
  # RDP of different mechanisms adds: expected is the SGM part plus the Gaussian,
  # Laplace and randomized-response curves computed independently (by hand and
  # in mpmath) at each order.
  finite = np.isfinite(orders)
  others = np.full(orders.shape, np.inf)
  others[finite] = [
    3 * a / 50.0 + float(_mp_laplace_formula(20.0, a)) + float(_mp_rr_formula(0.6, a))
    for a in orders[finite]
  ]
  expected = np.asarray(sgm_only.rdp) + others
  np.testing.assert_allclose(np.asarray(state.rdp), expected, rtol=1e-12)
  eps = acct.get_epsilon(state, 1e-5)
  direct = jaxrdp.rdp_to_epsilon(expected, orders, 1e-5)
  assert float(eps.epsilon) == pytest.approx(float(direct.epsilon), rel=1e-12)
  assert float(eps.epsilon) > float(acct.get_epsilon(sgm_only, 1e-5).epsilon)


# --- plain / jit / vmap, validation, traced invalid input ------------------------

_VARIANT_CASES = [
  (jaxrdp.mechanisms.sgm_rdp_closed_form, (0.01, 5.0, 8.0), (0.001, 6.0, 3.5)),
  (jaxrdp.mechanisms.gaussian_rdp, (1.0, 2.0), (3.0, 7.5)),
  (jaxrdp.mechanisms.laplace_rdp, (1.0, 2.0), (30.0, 1.0001)),
  (jaxrdp.mechanisms.randomized_response_rdp, (0.75, 2.0), (0.2, 50.0)),
  (jaxrdp.classical.zcdp_to_epsilon, (0.1, 1e-5), (2.0, 0.3)),
]


@pytest.mark.parametrize("fn,args,other", _VARIANT_CASES, ids=lambda x: getattr(x, "__name__", ""))
def test_plain_jit_vmap(fn, args, other):
  assert_plain_jit_vmap(fn, args, other)


@pytest.mark.parametrize(
  "fn,args,name",
  [
    (jaxrdp.mechanisms.sgm_rdp_closed_form, (1.5, 5.0, 8.0), "q"),
    (jaxrdp.mechanisms.sgm_rdp_closed_form, (0.1, -1.0, 8.0), "sigma"),
    (jaxrdp.mechanisms.sgm_rdp_closed_form, (0.1, 5.0, 1.0), "alpha"),
    (jaxrdp.mechanisms.sgm_rdp_closed_form, (float("nan"), 5.0, 8.0), "q"),
    (jaxrdp.mechanisms.gaussian_rdp, (-1.0, 2.0), "sigma"),
    (jaxrdp.mechanisms.gaussian_rdp, (1.0, 0.5), "alpha"),
    (jaxrdp.mechanisms.laplace_rdp, (-0.1, 2.0), "scale"),
    (jaxrdp.mechanisms.laplace_rdp, (1.0, float("nan")), "alpha"),
    (jaxrdp.mechanisms.randomized_response_rdp, (1.2, 2.0), "p"),
    (jaxrdp.mechanisms.randomized_response_rdp, (0.7, 1.0), "alpha"),
    (jaxrdp.classical.zcdp_to_epsilon, (-1.0, 1e-5), "rho"),
    (jaxrdp.classical.zcdp_to_epsilon, (1.0, 1.0), "delta"),
    (jaxrdp.classical.zcdp_to_epsilon, (1.0, 0.0), "delta"),
  ],
)
def test_bad_input_raises(fn, args, name):
  with pytest.raises(ValueError, match=name):
    fn(*args)


@pytest.mark.parametrize(
  "fn,args",
  [
    (jaxrdp.mechanisms.sgm_rdp_closed_form, (1.5, 5.0, 8.0)),
    (jaxrdp.mechanisms.gaussian_rdp, (1.0, 0.5)),
    (jaxrdp.mechanisms.laplace_rdp, (-1.0, 2.0)),
    (jaxrdp.mechanisms.randomized_response_rdp, (0.7, 1.0)),
    (jaxrdp.classical.zcdp_to_epsilon, (1.0, 2.0)),
  ],
)
def test_traced_bad_input_gives_nan(fn, args):
  assert math.isnan(float(jax.jit(fn)(*args)))


@pytest.mark.parametrize(
  "fn,args",
  [
    (jaxrdp.mechanisms.laplace_rdp, (2.0, 3.0)),
    (jaxrdp.mechanisms.randomized_response_rdp, (0.7, 3.0)),
    (jaxrdp.mechanisms.gaussian_rdp, (2.0, 3.0)),
    (jaxrdp.mechanisms.sgm_rdp_closed_form, (0.01, 5.0, 8.0)),
  ],
)
def test_gradients_are_finite(fn, args):
  grads = jax.grad(lambda *a: fn(*a), argnums=tuple(range(len(args))))(*args)
  assert all(np.isfinite(np.asarray(g)) for g in grads)
