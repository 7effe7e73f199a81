"""exact single-step SGM profile (Kalinin 2024).

The divergences are checked against mpmath quadrature of their definition
int (P - e^eps Q)_+, and the calibration against 50-digit evaluations.
"""

from __future__ import annotations

import math

import jax
import mpmath
import numpy as np
import pytest
from _oracle_helpers import assert_plain_jit_vmap, mp_log_gauss, mp_on_grid, on_grid

import jaxrdp

mpmath.mp.dps = 50


def mp_remove(eps, q, sigma):
  """Kalinin 2024 eq. (1) in 50-digit arithmetic."""
  e, q, s = mpmath.mpf(eps), mpmath.mpf(q), mpmath.mpf(sigma)
  h = mpmath.exp(e) - 1 + q
  ell = mpmath.log(h / q)
  return q * mpmath.ncdf(-s * ell + 1 / (2 * s)) - h * mpmath.ncdf(-s * ell - 1 / (2 * s))


def mp_add(eps, q, sigma):
  """The add direction (derived in jaxrdp/_single_step.py) in 50-digit arithmetic."""
  e, q, s = mpmath.mpf(eps), mpmath.mpf(q), mpmath.mpf(sigma)
  c = q - (1 - mpmath.exp(-e))
  if c <= 0:
    return mpmath.mpf(0)
  ell = mpmath.log(c / q)
  return mpmath.exp(e) * (
    c * mpmath.ncdf(s * ell + 1 / (2 * s)) - q * mpmath.ncdf(s * ell - 1 / (2 * s))
  )


def mp_hockey_stick_quad(eps, q, sigma, direction):
  """int (P - e^eps Q)_+ dz by quadrature; remove: P = mu, Q = mu0; add: the reverse."""
  mpmath.mp.dps = 30
  e, q, s = mpmath.mpf(eps), mpmath.mpf(q), mpmath.mpf(sigma)

  def mix(z):
    return (1 - q) * mpmath.exp(mp_log_gauss(z, 0, s)) + q * mpmath.exp(mp_log_gauss(z, 1, s))

  def base(z):
    return mpmath.exp(mp_log_gauss(z, 0, s))

  p, r = (mix, base) if direction == "remove" else (base, mix)
  # Breakpoints: where the density ratio mu1/mu0 equals the two crossing levels
  # (only to help the quadrature; the integrand is the definition itself).
  pts = {mpmath.mpf(0), mpmath.mpf(1)}
  h = mpmath.exp(e) - 1 + q
  pts.add(s**2 * mpmath.log(h / q) + mpmath.mpf(1) / 2)
  c = q - (1 - mpmath.exp(-e))
  if c > 0:
    pts.add(s**2 * mpmath.log(c / q) + mpmath.mpf(1) / 2)
  pts = sorted(pts)
  grid = [pts[0] - 12 * s] + pts + [pts[-1] + 12 * s]
  val = mpmath.quad(
    lambda z: max(p(z) - mpmath.exp(e) * r(z), 0), [-mpmath.inf] + grid + [mpmath.inf]
  )
  mpmath.mp.dps = 50
  return val


@pytest.mark.parametrize("direction", ["remove", "add"])
def test_single_step_delta_is_the_hockey_stick_divergence(direction):
  eps, q, sigma = np.meshgrid(
    [0.0, 0.02, 0.7, 2.5], [1e-3, 0.05, 0.6, 1.0], [0.4, 1.0, 4.0], indexing="ij"
  )
  want = mp_on_grid(lambda *a: mp_hockey_stick_quad(*a, direction), eps, q, sigma)
  got = on_grid(jaxrdp.mechanisms.sgm_single_step_delta, eps, q, sigma, direction=direction)
  np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-25)


def test_single_step_delta_matches_mpmath_formulas():
  eps, q, sigma = np.meshgrid(
    [0.0, 1e-6, 0.01, 0.3, 1.0, 4.0, 15.0],
    [1e-6, 1e-3, 0.1, 0.9, 1.0],
    [0.2, 0.9, 3.0, 30.0, 1e4],
    indexing="ij",
  )
  remove, add = mp_on_grid(mp_remove, eps, q, sigma), mp_on_grid(mp_add, eps, q, sigma)
  for direction, want in [("remove", remove), ("add", add), ("max", np.maximum(remove, add))]:
    got = on_grid(jaxrdp.mechanisms.sgm_single_step_delta, eps, q, sigma, direction=direction)
    tiny = want < 1e-300
    assert np.all((got[tiny] >= 0.0) & (got[tiny] < 1e-290)), direction
    # Absolute 1e-12 besides (pytest.approx's default, which this test had): where
    # q - (1 - e^-eps) cancels (eps = q = 1e-6) the add direction's delta, below
    # 1e-12, is off by up to 3.3e-9 relative.
    np.testing.assert_allclose(got[~tiny], want[~tiny], rtol=1e-12, atol=1e-12, err_msg=direction)


def test_single_step_delta_limits():
  eps, sigma = 1.0, 3.0
  gauss = float(jaxrdp.mechanisms.analytic_gaussian_delta(eps, sigma))
  for direction in ["remove", "add", "max"]:
    d = jaxrdp.mechanisms.sgm_single_step_delta
    assert float(d(eps, 1.0, sigma, direction)) == pytest.approx(gauss, rel=1e-13)
    assert float(d(eps, 0.0, sigma, direction)) == 0.0
    assert float(d(math.inf, 0.3, sigma, direction)) == 0.0
  assert float(jaxrdp.mechanisms.sgm_single_step_delta(0.5, 0.3, 0.0, "remove")) == 0.3
  assert float(jaxrdp.mechanisms.sgm_single_step_delta(0.1, 0.3, 0.0, "add")) == pytest.approx(
    1 - math.exp(0.1) * 0.7, rel=1e-14
  )
  assert float(jaxrdp.mechanisms.sgm_single_step_delta(1.0, 0.3, 0.0, "add")) == 0.0


def test_single_step_delta_monotone_in_sigma_lemma1():
  # Kalinin 2024, Lemma 1: Psi is strictly decreasing in sigma.
  sigma = np.geomspace(0.05, 200.0, 400)
  for eps, q in [(0.01, 1e-3), (1.0, 0.01), (3.0, 0.5), (1e-5, 1e-5)]:
    for direction in ["remove", "add", "max"]:
      d = np.asarray(jaxrdp.mechanisms.sgm_single_step_delta(eps, q, sigma, direction))
      assert np.all(np.diff(d) <= 0), (eps, q, direction)
      # Strict where delta is neither saturated at its sigma -> 0 limit nor underflowed.
      inner = (d > 1e-300) & (d < 0.999 * d[0])
      if d[0] > 0:  # (the add direction is identically 0 when q <= 1 - e^-eps)
        assert inner.sum() > 50
      assert np.all(np.diff(d[inner]) < 0), (eps, q, direction)


@pytest.mark.parametrize("direction", ["remove", "add", "max"])
def test_single_step_sigma_is_tight_and_conservative(direction):
  points = [
    (1.0, 1e-5, 0.01),
    (0.1, 1e-8, 0.3),
    (3.0, 1e-6, 1e-4),
    (0.5, 1e-3, 1.0),
    (1e-4, 1e-9, 1e-3),
  ]
  eps, delta, q = (np.array(x) for x in zip(*points))
  sigma = on_grid(jaxrdp.mechanisms.sgm_single_step_sigma, eps, delta, q, direction=direction)
  mp_delta = {"remove": mp_remove, "add": mp_add, "max": lambda *a: max(mp_remove(*a), mp_add(*a))}[
    direction
  ]
  # No noise needed: only possible in the add direction here.
  none = sigma == 0.0
  assert direction == "add" or not none.any()
  assert np.all(mp_on_grid(lambda e, q: mp_add(e, q, 1e-300), eps[none], q[none]) <= delta[none])
  e, d, qq, s = eps[~none], delta[~none], q[~none], sigma[~none]
  assert np.all(mp_on_grid(mp_delta, e, qq, s) <= d)  # conservative
  assert np.all(mp_on_grid(lambda *a: mp_delta(*a[:2], a[2] * (1 - 1e-12)), e, qq, s) > d)  # tight


def test_single_step_sigma_no_noise_cases():
  assert float(jaxrdp.mechanisms.sgm_single_step_sigma(1.0, 0.2, 0.1)) == 0.0  # delta >= q
  assert float(jaxrdp.mechanisms.sgm_single_step_sigma(1.0, 1e-5, 0.0)) == 0.0
  assert float(jaxrdp.mechanisms.sgm_single_step_sigma(math.inf, 1e-5, 0.5)) == 0.0
  # q = 1 is the Gaussian mechanism.
  assert float(jaxrdp.mechanisms.sgm_single_step_sigma(1.0, 1e-5, 1.0)) == pytest.approx(
    float(jaxrdp.mechanisms.analytic_gaussian_sigma(1.0, 1e-5)), rel=1e-13
  )


# --- Reproducing Kalinin 2024 -------------------------------------------------------


def _a_minus_b(sigma, eps, q):
  """Kalinin 2024 eq. (2): a - b = 1/(2 sqrt2 sigma) - (sigma/sqrt2) log((e^eps - 1 + q)/q)."""
  s, e, q = mpmath.mpf(sigma), mpmath.mpf(eps), mpmath.mpf(q)
  return 1 / (2 * mpmath.sqrt(2) * s) - s / mpmath.sqrt(2) * mpmath.log((mpmath.exp(e) - 1 + q) / q)


def test_kalinin_remark_counterexample():
  # Kalinin 2024, Remark: delta = 1e-6, q = eps = 3.82e-6 gives sigma ~ 0.8478, a - b ~ 0.0015.
  delta, q = 1e-6, 3.82e-6
  sigma = float(jaxrdp.mechanisms.sgm_single_step_sigma(q, delta, q, "remove"))
  root = mpmath.findroot(lambda s: mp_remove(q, q, s) - delta, mpmath.mpf("0.85"))
  assert sigma == pytest.approx(float(root), rel=1e-12)
  assert abs(sigma - 0.8478) < 1e-4  # 0.847856...
  gap = float(_a_minus_b(sigma, q, q))
  assert 0.0014 < gap < 0.0015  # a > b: the conjecture's conclusion fails here
  assert round(float(_a_minus_b(0.8478, q, q)), 4) == 0.0015  # the paper's rounded sigma
  # The add direction needs no noise here, so the max equals the remove direction.
  assert float(jaxrdp.mechanisms.sgm_single_step_sigma(q, delta, q, "max")) == sigma


def test_kalinin_constant_3_8319():
  # Kalinin 2024, Remark: constants above ~3.8319 suffice. The extracted text prints the
  # constant as 1 / (3/2 - 2 Phi(-sqrt(2 log 2))) (= 0.793); T(sqrt(2 log 2)) < 0 in
  # Lemma 2 with 4 replaced by C gives C > 1 / (1/2 - 2 Phi(-sqrt(2 log 2))) = 3.8319.
  const = 1 / (mpmath.mpf(1) / 2 - 2 * mpmath.ncdf(-mpmath.sqrt(2 * mpmath.log(2))))
  assert round(float(const), 4) == 3.8319
  delta = 1e-6
  for ratio, sign in [(3.82, 1), (3.84, -1), (4.0, -1)]:
    q = eps = ratio * delta
    sigma = float(jaxrdp.mechanisms.sgm_single_step_sigma(eps, delta, q, "remove"))
    assert np.sign(float(_a_minus_b(sigma, eps, q))) == sign, ratio


@pytest.mark.parametrize("delta", [1e-6, 1e-3])
@pytest.mark.parametrize("eps_factor", [4.0, 100.0, None])
def test_sigma_eff_decreases_in_q(delta, eps_factor):
  # Kalinin 2024 (proof of Raisa et al.'s Conjecture 6.3): sigma_eff = sigma(q)/q is
  # decreasing in q when eps, q >= 4 delta.
  eps_values = [1.0, 4.0] if eps_factor is None else [eps_factor * delta]
  q = np.geomspace(4 * delta, 1.0, 30)
  for eps in eps_values:
    sigma = np.asarray(jaxrdp.mechanisms.sgm_single_step_sigma(eps, delta, q, "remove"))
    sigma_eff = sigma / q
    assert np.all(np.diff(sigma_eff) < 0), eps
    for qi, si in zip(q[::5], sigma[::5]):
      assert _a_minus_b(si, eps, qi) < 0


# --- plain / jit / vmap, validation, traced invalid input ----------------------------


@pytest.mark.parametrize("direction", ["remove", "add"])
def test_plain_jit_vmap_delta(direction):
  assert_plain_jit_vmap(
    lambda e, q, s: jaxrdp.mechanisms.sgm_single_step_delta(e, q, s, direction),
    (1.0, 0.01, 1.0),
    (0.05, 0.7, 3.0),
  )


def test_plain_jit_vmap_default_direction():
  # The default direction ("max") runs both kernels; the functions are passed
  # directly so that their compilations are shared with the tests below.
  assert_plain_jit_vmap(jaxrdp.mechanisms.sgm_single_step_delta, (1.0, 0.01, 1.0), (0.05, 0.7, 3.0))
  assert_plain_jit_vmap(
    jaxrdp.mechanisms.sgm_single_step_sigma, (1.0, 1e-5, 0.01), (0.05, 1e-8, 0.7)
  )


@pytest.mark.parametrize(
  "fn,args,kwargs,name",
  [
    (jaxrdp.mechanisms.sgm_single_step_delta, (-1.0, 0.1, 1.0), {}, "epsilon"),
    (jaxrdp.mechanisms.sgm_single_step_delta, (1.0, 1.1, 1.0), {}, "q"),
    (jaxrdp.mechanisms.sgm_single_step_delta, (1.0, 0.1, -1.0), {}, "sigma"),
    (jaxrdp.mechanisms.sgm_single_step_delta, (1.0, 0.1, 1.0), {"direction": "both"}, "direction"),
    (jaxrdp.mechanisms.sgm_single_step_sigma, (1.0, 0.0, 0.1), {}, "delta"),
    (jaxrdp.mechanisms.sgm_single_step_sigma, (1.0, 1e-5, float("nan")), {}, "q"),
    (jaxrdp.mechanisms.sgm_single_step_sigma, (-1.0, 1e-5, 0.1), {}, "epsilon"),
  ],
)
def test_bad_input_raises(fn, args, kwargs, name):
  with pytest.raises(ValueError, match=name):
    fn(*args, **kwargs)


def test_traced_bad_input_gives_nan():
  assert math.isnan(float(jax.jit(jaxrdp.mechanisms.sgm_single_step_delta)(1.0, 1.5, 1.0)))
  assert math.isnan(float(jax.jit(jaxrdp.mechanisms.sgm_single_step_sigma)(1.0, 1e-5, -0.5)))


def test_single_step_delta_gradient_is_finite_and_negative_in_sigma():
  g = jax.grad(jaxrdp.mechanisms.sgm_single_step_delta, argnums=(0, 1, 2))(1.0, 0.01, 1.0)
  assert all(np.isfinite(float(x)) for x in g)
  assert float(g[2]) < 0


def test_single_step_delta_at_large_epsilon_matches_mpmath():
  # Up to epsilon 1e4 (e^eps far beyond float64) and small q, small sigma: the delta is
  # never 0 where the truth is not, nor below it.
  mpmath.mp.dps = 60
  rng = np.random.default_rng(2026_12_07)
  eps = np.concatenate(
    [[700.0, 709.0, 710.0, 750.0, 800.0, 3000.0, 1e4], 10 ** rng.uniform(2, 4, 40)]
  )
  q = np.concatenate([[1.0, 0.0245818, 0.5, 1e-3, 1.0, 0.9, 1.0], 10 ** rng.uniform(-4, 0, 40)])
  sigma = np.concatenate(
    [[0.0245818, 0.0245818, 0.02, 0.01, 0.003, 0.005, 0.001], 10 ** rng.uniform(-3.3, -1, 40)]
  )
  got = np.asarray(jaxrdp.mechanisms.sgm_single_step_delta(eps, q, sigma))
  for e, qq, s, g in zip(eps, q, sigma, got):
    e, qq, s = mpmath.mpf(e), mpmath.mpf(qq), mpmath.mpf(s)
    h = mpmath.e**e - 1 + qq
    remove = qq * mpmath.ncdf(-s * mpmath.log(h / qq) + 1 / (2 * s)) - h * mpmath.ncdf(
      -s * mpmath.log(h / qq) - 1 / (2 * s)
    )
    c = qq - (1 - mpmath.e ** (-e))
    add = 0
    if c > 0:
      x = s * mpmath.log(c / qq)
      add = mpmath.e**e * (c * mpmath.ncdf(x + 1 / (2 * s)) - qq * mpmath.ncdf(x - 1 / (2 * s)))
    want = float(max(remove, add))
    if want > 1e-300:
      assert g == pytest.approx(want, rel=1e-9), (float(e), float(qq), float(s))
    else:
      assert 0 <= g <= 1e-290
