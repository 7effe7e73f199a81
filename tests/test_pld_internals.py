"""Building blocks of jaxrdp.pld against independent oracles (numpy / scipy)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from jaxrdp.pld import _compose, _discretize


def _exact_delta_remove(eps, q, sigma):
  # delta(eps) = P(L > eps) - e^eps Q(L > eps) by direct numerical integration (scipy).
  x = np.linspace(-12 * sigma, 1 + 12 * sigma, 400001)
  mu0 = norm.pdf(x, 0, sigma)
  mu = (1 - q) * mu0 + q * norm.pdf(x, 1, sigma)
  return np.array([np.trapezoid(np.maximum(mu - np.exp(e) * mu0, 0), x) for e in eps])


def test_connect_the_dots_interpolates_and_dominates():
  # A thinned support, as the accountant uses: spacing d, then 4 d, then d again.
  q, sigma, d = 0.05, 1.0, 0.01
  idx = np.concatenate([np.arange(40), np.arange(40, 120, 4), np.arange(120, 160)])
  e = -0.1 + d * idx
  with jax.enable_x64(True):
    log_delta = _discretize.log_delta_curve(jnp.asarray(e), q, sigma, "remove")
    p, p_inf = (
      np.asarray(x)
      for x in _discretize.connect_the_dots_general(
        jnp.exp(log_delta), jnp.diff(jnp.asarray(e)), e.size
      )
    )
  exact_grid = _exact_delta_remove(e, q, sigma)
  np.testing.assert_allclose(np.exp(np.asarray(log_delta)), exact_grid, rtol=1e-7)
  assert np.all(p >= 0)
  assert abs(p.sum() + p_inf - 1.0) < 1e-12

  def ctd_delta(x):
    return p_inf + np.sum(np.where(e > x, p * (1 - np.exp(x - e)), 0.0))

  # Interpolates the exact curve at the grid points ...
  got = np.array([ctd_delta(x) for x in e])
  np.testing.assert_allclose(got, np.exp(np.asarray(log_delta)), rtol=1e-9, atol=1e-15)
  # ... and dominates it in between.
  mid = 0.5 * (e[:-1] + e[1:])
  exact_mid = _exact_delta_remove(mid, q, sigma)
  assert np.all(np.array([ctd_delta(x) for x in mid]) >= exact_mid * (1 - 1e-7))


def test_add_direction_matches_integration():
  q, sigma = 0.3, 0.8
  eps = np.array([-0.2, 0.0, 0.1, 0.3])
  x = np.linspace(-12 * sigma, 1 + 12 * sigma, 400001)
  mu0 = norm.pdf(x, 0, sigma)
  mu = (1 - q) * mu0 + q * norm.pdf(x, 1, sigma)
  exact = np.array([np.trapezoid(np.maximum(mu0 - np.exp(e) * mu, 0), x) for e in eps])
  with jax.enable_x64(True):
    got = np.exp(np.asarray(_discretize.log_delta_curve(jnp.asarray(eps), q, sigma, "add")))
  np.testing.assert_allclose(got, exact, rtol=1e-7)


@pytest.mark.parametrize("steps, n", [(30, 2048), (1, 2048), (400, 3 * 2048)])
def test_compose_error_bound_holds(steps, n):
  rng = np.random.default_rng(1)
  x = rng.random(40) ** 4
  x /= x.sum()
  exact = np.array([1.0])
  for _ in range(steps):
    exact = np.convolve(exact, x)  # non-negative sums: relative error <= ~1e-13
  with jax.enable_x64(True):
    y, (err_inf, err_l2) = _compose.compose(jnp.asarray(x)[None, :], jnp.array([float(steps)]), n)
  y = np.asarray(y)
  ref = np.zeros(n)
  np.add.at(ref, np.arange(exact.size) % n, exact)
  # Both bounds hold: in Euclidean norm and in every bin ...
  assert np.linalg.norm(y - ref) <= float(err_l2), (np.linalg.norm(y - ref), float(err_l2))
  assert np.max(np.abs(y - ref)) <= float(err_inf), (np.max(np.abs(y - ref)), float(err_inf))
  # ... and they are not vacuous.
  assert float(err_l2) < 1e-10 and float(err_inf) < 1e-12


def test_compose_drops_only_provably_negligible_frequencies():
  # A wide composition: its spectrum lives on the lowest frequencies, and the
  # band-limited power must equal the full one (to round-off) with a bound.
  x = np.exp(-0.5 * ((np.arange(300) - 150) / 40.0) ** 2)
  x /= x.sum()
  n = 2**16
  with jax.enable_x64(True):
    y, (err_inf, _) = _compose.compose(jnp.asarray(x)[None, :], jnp.array([200.0]), n)
    full = np.fft.irfft(np.fft.rfft(x, n) ** 200, n)
  assert np.max(np.abs(np.asarray(y) - full)) <= float(err_inf)
  assert float(err_inf) < 1e-13  # not vacuous


@pytest.mark.parametrize("q", [1e-4, 1e-2, 0.3, 1.0])
def test_planning_mgf_matches_the_exact_renyi_divergence(q):
  # The planner's moment-generating function K(lam) = lam D_{1+lam}(mu || mu0) of
  # one step; the orders up to 5 use a shorter quadrature than the others.
  # Oracle: jaxrdp's exact Renyi divergence of the Sampled Gaussian Mechanism.
  import jaxrdp
  from jaxrdp.pld import _grid

  lam = _grid.LAMBDAS
  for sigma in (0.3, 0.8, 2.0, 50.0):
    k = np.asarray(_grid._one_step_mgf(jnp.array([q]), jnp.array([sigma]), ("gaussian",)))
    k = k[0, : lam.size]
    exact = lam * np.asarray(jaxrdp.mechanisms.sgm_rdp(q, sigma, 1.0 + lam))
    small = 1.0 + lam <= _grid._SMALL_ORDER
    err = np.abs(k - exact)
    assert np.all(err[small] <= 1e-12 + 1e-9 * np.abs(exact[small])), (sigma, err[small].max())
    # The longer quadrature on moderate orders (at the largest ones and small sigma,
    # its spacing exceeds sigma: a planning estimate, documented as such).
    mid = ~small & (1.0 + lam <= 50.0)
    assert np.all(err[mid] <= 1e-9 * np.abs(exact[mid]) + 1e-12), (sigma, err[mid].max())


def test_log_ndtr_matches_scipy_with_finite_derivatives():
  # The one-step curve's log Phi: values against scipy's log_ndtr, derivatives
  # against phi / Phi, across the three branches and their switches.
  from scipy.special import log_ndtr

  from jaxrdp.pld._discretize import _log_ndtr

  x = np.concatenate([np.linspace(-60.0, 12.0, 20001), [-30.0, -30.0 - 1e-9, 0.0, -1e-300, 40.0]])
  v = np.asarray(jax.jit(_log_ndtr)(jnp.asarray(x)))
  np.testing.assert_allclose(v, log_ndtr(x), rtol=1e-13, atol=0)
  g = np.asarray(jax.jit(jax.vmap(jax.grad(_log_ndtr)))(jnp.asarray(x)))
  np.testing.assert_allclose(g, np.exp(norm.logpdf(x) - log_ndtr(x)), rtol=1e-11, atol=1e-300)
