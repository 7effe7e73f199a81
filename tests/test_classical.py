"""classical (epsilon, delta) tools and the analytic Gaussian mechanism.

Expected values come from mpmath (50 digits) or hand computations with ``math``.
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


def mp_gauss_delta(eps, sigma):
  """Balle-Wang Thm 8 in 50-digit arithmetic."""
  e, s = mpmath.mpf(eps), mpmath.mpf(sigma)
  return mpmath.ncdf(1 / (2 * s) - e * s) - mpmath.exp(e) * mpmath.ncdf(-1 / (2 * s) - e * s)


# --- Analytic Gaussian mechanism (Balle and Wang 2018) ----------------------------


def test_analytic_gaussian_golden_value():
  # Balle and Wang (2018), arXiv:1805.06530; REFERENCE.md: (1, 1e-5) -> 3.730632.
  sigma = float(jaxrdp.mechanisms.analytic_gaussian_sigma(1.0, 1e-5))
  assert round(sigma, 6) == 3.730632


def _grid(*axes):
  """The outer product of the axes, as float64 arrays (one array comparison per grid)."""
  return np.meshgrid(*(np.asarray(a, np.float64) for a in axes), indexing="ij")


def test_analytic_gaussian_delta_matches_mpmath():
  eps, sigma = _grid([0.0, 1e-6, 1e-3, 0.3, 1.0, 5.0, 40.0], [0.03, 0.4, 1.0, 3.73, 50.0, 3e4, 1e6])
  got = on_grid(jaxrdp.mechanisms.analytic_gaussian_delta, eps, sigma)
  want = mp_on_grid(mp_gauss_delta, eps, sigma)
  tiny = want < 1e-300
  assert tiny.any() and np.all((got[tiny] >= 0.0) & (got[tiny] < 1e-290))
  np.testing.assert_allclose(got[~tiny], want[~tiny], rtol=1e-12)


@pytest.mark.parametrize("eps,sigma", [(0.5, 0.8), (1.0, 3.0), (0.01, 40.0)])
def test_analytic_gaussian_delta_is_the_hockey_stick_divergence(eps, sigma):
  # The formula itself, against the definition int (p - e^eps q)_+ by quadrature.
  mpmath.mp.dps = 30
  e, s = mpmath.mpf(eps), mpmath.mpf(sigma)
  cross = s**2 * e + mpmath.mpf(1) / 2  # N(1) / N(0) density ratio = e^eps here

  def integrand(z):
    return mpmath.exp(mp_log_gauss(z, 1, s)) - mpmath.exp(e + mp_log_gauss(z, 0, s))

  want = mpmath.quad(integrand, [cross, cross + 10 * s, mpmath.inf])
  mpmath.mp.dps = 50
  assert float(jaxrdp.mechanisms.analytic_gaussian_delta(eps, sigma)) == pytest.approx(
    float(want), rel=1e-12
  )


def test_analytic_gaussian_delta_edges():
  assert float(jaxrdp.mechanisms.analytic_gaussian_delta(1.0, 0.0)) == 1.0
  assert float(jaxrdp.mechanisms.analytic_gaussian_delta(math.inf, 2.0)) == 0.0
  grid = np.asarray(
    jaxrdp.mechanisms.analytic_gaussian_delta(
      np.geomspace(1e-8, 200, 60)[:, None], np.geomspace(1e-3, 1e7, 60)[None, :]
    )
  )
  assert np.all(grid >= 0) and np.all(grid <= 1) and not np.any(np.isnan(grid))
  # Non-increasing in sigma and in epsilon.
  assert np.all(np.diff(grid, axis=1) <= 0) and np.all(np.diff(grid, axis=0) <= 0)


def test_analytic_gaussian_sigma_is_tight_and_conservative():
  eps, delta = _grid([1e-4, 0.01, 0.5, 1.0, 3.0, 20.0], [1e-12, 1e-6, 1e-3, 0.3])
  sigma = on_grid(jaxrdp.mechanisms.analytic_gaussian_sigma, eps, delta)
  # Conservative, and tight to 1e-12 relative.
  assert np.all(mp_on_grid(mp_gauss_delta, eps, sigma) <= delta)
  assert np.all(mp_on_grid(lambda e, s: mp_gauss_delta(e, s * (1 - 1e-12)), eps, sigma) > delta)


def test_analytic_gaussian_sigma_edges():
  assert float(jaxrdp.mechanisms.analytic_gaussian_sigma(math.inf, 1e-5)) == 0.0
  # epsilon = 0: delta is the total variation 2 Phi(1/(2 sigma)) - 1.
  sigma = float(jaxrdp.mechanisms.analytic_gaussian_sigma(0.0, 0.01))
  want = 1 / (2 * mpmath.sqrt(2) * mpmath.erfinv(mpmath.mpf("0.01")))
  assert sigma == pytest.approx(float(want), rel=1e-12)


# --- Classical and tail-bound calibrations ------------------------------------------


def test_classical_gaussian_sigma():
  eps, delta = _grid([0.01, 0.3, 1.0], [1e-10, 1e-5, 0.1, 0.9])
  sigma = on_grid(jaxrdp.classical.classical_gaussian_sigma, eps, delta)
  want = mp_on_grid(lambda e, d: math.sqrt(2 * math.log(1.25 / d)) / e, eps, delta)
  np.testing.assert_allclose(sigma, want, rtol=1e-15)
  assert np.all(mp_on_grid(mp_gauss_delta, eps, sigma) <= delta)  # the theorem holds for eps <= 1
  assert np.all(sigma >= on_grid(jaxrdp.mechanisms.analytic_gaussian_sigma, eps, delta))


def _tail_sigma_by_hand(eq, eps, delta):
  log_inv = math.log(1 / delta)
  if eq == "6.8":
    c = math.sqrt(2 * log_inv)
    return (c + math.sqrt(c * c + 2 * eps)) / (2 * eps)
  if eq == "6.81":
    return math.sqrt(2 * log_inv) / eps + (2 * eps) ** -0.5
  if eq == "6.82":
    return (
      max(1.0, math.sqrt(max(math.log(1 / (2 * math.pi * delta**2)), 0.0))) / eps
      + (2 * eps) ** -0.5
    )
  if eq == "6.83":
    return math.sqrt(math.log(math.exp(eps) / delta**2)) / eps
  return (
    max(math.sqrt(1 + eps), math.sqrt(max(math.log(math.exp(eps) / (2 * math.pi * delta**2)), 0.0)))
    / eps
  )


_EQS = ["6.8", "6.81", "6.82", "6.83", "6.84"]
# The bound names of gaussian_tail_sigma, by their equation numbers in Pei 2019.
_BOUND = {
  "6.8": "chernoff",
  "6.81": "chernoff_split",
  "6.82": "mills_split",
  "6.83": "chernoff_concave",
  "6.84": "mills_concave",
}


@pytest.mark.parametrize("eq", _EQS)
def test_tail_bound_calibrations(eq):
  eps, delta = _grid([0.05, 1.0, 4.0], [1e-9, 1e-5, 0.2, 0.6])
  sigma = on_grid(jaxrdp.classical.gaussian_tail_sigma, eps, delta, bound=_BOUND[eq])
  want = mp_on_grid(lambda e, d: _tail_sigma_by_hand(eq, e, d), eps, delta)
  np.testing.assert_allclose(sigma, want, rtol=1e-14)
  # Each is a valid calibration: the exact delta at that sigma meets the target.
  assert np.all(mp_on_grid(mp_gauss_delta, eps, sigma) <= delta)
  for e, d, s in zip(eps.ravel(), delta.ravel(), sigma.ravel()):
    s, e = mpmath.mpf(s), mpmath.mpf(e)
    t = e * s - 1 / (2 * s)
    assert t > 0
    if eq in ("6.8", "6.81", "6.83"):
      # Chernoff bound (6.5) at sigma is at most delta; (6.8) meets it with equality.
      chernoff = mpmath.exp(-(t**2) / 2)
      assert chernoff <= d * (1 + mpmath.mpf(10) ** -12)
      if eq == "6.8":
        assert float(chernoff) == pytest.approx(d, rel=1e-12)
    else:
      # Mills-ratio bound (6.3) with t > 1.
      assert t > 1
      assert mpmath.exp(-(t**2) / 2) / (mpmath.sqrt(2 * mpmath.pi) * t) <= d


def test_tail_bound_ordering():
  eps, delta = _grid([0.05, 1.0, 4.0], [1e-9, 1e-5, 0.2])
  s68, s681, s683 = (
    on_grid(jaxrdp.classical.gaussian_tail_sigma, eps, delta, bound=_BOUND[eq])
    for eq in ("6.8", "6.81", "6.83")
  )
  exact = on_grid(jaxrdp.mechanisms.analytic_gaussian_sigma, eps, delta)
  # (6.81) and (6.83) relax the exact solution of (6.91); all exceed the exact sigma.
  assert np.all((exact <= s68) & (s68 <= s681) & (s68 <= s683))


def test_gaussian_tail_delta():
  eps, sigma = np.array([1.0, 0.1, 2.0, 0.0]), np.array([5.0, 40.0, 0.3, 3.0])
  t = eps * sigma - 1 / (2 * sigma)
  want = np.where(t > 0, np.exp(-t * t / 2), 1.0)
  got = on_grid(jaxrdp.classical.gaussian_tail_delta, eps, sigma)
  np.testing.assert_allclose(got, want, rtol=1e-14)
  assert np.all(got >= mp_on_grid(mp_gauss_delta, eps, sigma))


def test_laplace_scale():
  assert float(jaxrdp.classical.laplace_scale(0.5)) == 2.0
  assert float(jaxrdp.classical.laplace_scale(0.0)) == math.inf
  # The pure-DP epsilon of the Laplace RDP curve (alpha = inf) is 1 / scale.
  for eps in [0.1, 1.0, 3.0]:
    assert float(
      jaxrdp.mechanisms.laplace_rdp(jaxrdp.classical.laplace_scale(eps), math.inf)
    ) == pytest.approx(eps)


# --- Composition and subsampling --------------------------------------------------


def test_basic_composition():
  r = jaxrdp.classical.basic_composition(0.3, 1e-7, 25)
  assert float(r.epsilon) == pytest.approx(7.5, rel=1e-15)
  assert float(r.delta) == pytest.approx(2.5e-6, rel=1e-15)
  r = jaxrdp.classical.basic_composition(np.array([0.1, 0.2]), 0.0, np.array([[1.0], [10.0]]))
  np.testing.assert_allclose(np.asarray(r.epsilon), [[0.1, 0.2], [1.0, 2.0]], rtol=1e-15)


_KL = {
  "dwork_roth": lambda e: e * math.expm1(e),
  "two_epsilon_squared": lambda e: 2 * e * e,
  "bun_steinke": lambda e: e * e / 2,
  "tanh": lambda e: e * math.tanh(e / 2),
}


@pytest.mark.parametrize("kl", list(_KL))
def test_advanced_composition(kl):
  points = [(0.1, 0.0, 100, 1e-5), (1.0, 1e-8, 10, 1e-3), (0.01, 1e-9, 10_000, 1e-6)]
  eps, delta, k, dp = (np.array(x, np.float64) for x in zip(*points))
  r = on_grid(jaxrdp.classical.advanced_composition, eps, delta, k, dp, kl_bound=kl)
  want = [e * math.sqrt(2 * n * math.log(1 / p)) + n * _KL[kl](e) for e, _, n, p in points]
  np.testing.assert_allclose(np.asarray(r.epsilon), want, rtol=1e-14)
  np.testing.assert_allclose(np.asarray(r.delta), k * delta + dp, rtol=1e-14)


def test_advanced_composition_tanh_is_smallest_and_tight():
  eps = np.geomspace(1e-3, 5.0, 40)
  tanh = np.asarray(jaxrdp.classical.advanced_composition(eps, 0.0, 50, 1e-6).epsilon)
  for kl in ("dwork_roth", "two_epsilon_squared", "bun_steinke"):
    other = np.asarray(
      jaxrdp.classical.advanced_composition(eps, 0.0, 50, 1e-6, kl_bound=kl).epsilon
    )
    assert np.all(tanh <= other)
  # Tightness: randomized response with p = e^eps / (1 + e^eps) is eps-DP and its
  # KL divergence equals eps tanh(eps/2) (Wang, lecture notes 6, "Tight bound from Adam Smith").
  for e in [0.1, 1.0, 3.0]:
    p = mpmath.exp(e) / (1 + mpmath.exp(e))
    kl_rr = p * mpmath.log(p / (1 - p)) + (1 - p) * mpmath.log((1 - p) / p)
    assert float(kl_rr) == pytest.approx(e * math.tanh(e / 2), rel=1e-14)


@pytest.mark.parametrize("adaptive", [False, True])
def test_advanced_composition_capped_kl(adaptive):
  k, beta, delta = 200, 1e-6, 1e-9
  eps = np.array([0.05, 0.5, math.log(2), 1.5])

  def by_hand(e):
    a = e * math.expm1(e) if e <= math.log(2) else e  # Pei 2019 (6.98)
    spread = e + a if adaptive else e
    return k * a + math.sqrt(2 * k * math.log(1 / beta)) * spread

  r = on_grid(
    jaxrdp.classical.advanced_composition_capped_kl, eps, delta, k, beta, adaptive=adaptive
  )
  np.testing.assert_allclose(np.asarray(r.epsilon), [by_hand(e) for e in eps], rtol=1e-14)
  np.testing.assert_allclose(np.asarray(r.delta), k * delta + beta, rtol=1e-14)


def test_amplify_by_subsampling():
  points = [
    (1.0, 1e-5, 0.01),
    (1e-8, 1e-6, 1e-12),
    (5.0, 0.0, 0.3),
    (2.0, 1e-3, 1.0),
    (2.0, 1e-3, 0.0),
  ]
  eps, delta, rate = (np.array(x, np.float64) for x in zip(*points))
  r = on_grid(jaxrdp.classical.amplify_by_subsampling, eps, delta, rate)
  want = mp_on_grid(
    lambda e, x: mpmath.log(1 + mpmath.mpf(x) * (mpmath.exp(mpmath.mpf(e)) - 1)), eps, rate
  )
  np.testing.assert_allclose(np.asarray(r.epsilon), want, rtol=1e-14, atol=0)
  np.testing.assert_allclose(np.asarray(r.delta), rate * delta, rtol=1e-15, atol=0)


# --- plain / jit / vmap, validation, traced invalid input ----------------------------

_VARIANT_CASES = [
  (jaxrdp.mechanisms.analytic_gaussian_delta, (1.0, 3.73), (0.01, 200.0)),
  (jaxrdp.mechanisms.analytic_gaussian_sigma, (1.0, 1e-5), (0.2, 1e-9)),
  (jaxrdp.classical.classical_gaussian_sigma, (1.0, 1e-5), (0.2, 1e-9)),
  (jaxrdp.classical.gaussian_tail_delta, (1.0, 5.0), (0.3, 0.2)),
  (
    lambda e, d: jaxrdp.classical.gaussian_tail_sigma(e, d, "mills_concave"),
    (1.0, 1e-5),
    (0.2, 1e-9),
  ),
  (jaxrdp.classical.laplace_scale, (1.0,), (0.2,)),
  (jaxrdp.classical.basic_composition, (0.1, 1e-6, 10.0), (1.0, 0.0, 3.0)),
  (jaxrdp.classical.advanced_composition, (0.1, 1e-6, 10.0, 1e-5), (1.0, 0.0, 3.0, 0.1)),
  (jaxrdp.classical.advanced_composition_capped_kl, (0.1, 1e-6, 10.0, 1e-5), (1.0, 0.0, 3.0, 0.1)),
  (jaxrdp.classical.amplify_by_subsampling, (1.0, 1e-5, 0.01), (0.1, 0.0, 0.5)),
]


@pytest.mark.parametrize("fn,args,other", _VARIANT_CASES)
def test_plain_jit_vmap(fn, args, other):
  assert_plain_jit_vmap(fn, args, other)


@pytest.mark.parametrize(
  "fn,args,kwargs,name",
  [
    (jaxrdp.mechanisms.analytic_gaussian_delta, (-1.0, 1.0), {}, "epsilon"),
    (jaxrdp.mechanisms.analytic_gaussian_delta, (1.0, -1.0), {}, "sigma"),
    (jaxrdp.mechanisms.analytic_gaussian_sigma, (1.0, 0.0), {}, "delta"),
    (jaxrdp.mechanisms.analytic_gaussian_sigma, (float("nan"), 1e-5), {}, "epsilon"),
    (jaxrdp.classical.classical_gaussian_sigma, (1.5, 1e-5), {}, "epsilon"),
    (jaxrdp.classical.classical_gaussian_sigma, (0.0, 1e-5), {}, "epsilon"),
    (jaxrdp.classical.classical_gaussian_sigma, (0.5, 1.0), {}, "delta"),
    (jaxrdp.classical.gaussian_tail_sigma, (1.0, 1e-5, "6.85"), {}, "bound"),
    (jaxrdp.classical.gaussian_tail_sigma, (0.0, 1e-5), {}, "epsilon"),
    (jaxrdp.classical.gaussian_tail_delta, (1.0, 0.0), {}, "sigma"),
    (jaxrdp.classical.laplace_scale, (-1.0,), {}, "epsilon"),
    (jaxrdp.classical.basic_composition, (0.1, 1.5, 2), {}, "delta"),
    (jaxrdp.classical.basic_composition, (0.1, 0.1, -2), {}, "k"),
    (jaxrdp.classical.advanced_composition, (0.1, 0.0, 2, 0.0), {}, "delta_prime"),
    (
      jaxrdp.classical.advanced_composition,
      (0.1, 0.0, 2, 0.1),
      {"kl_bound": "pinsker"},
      "kl_bound",
    ),
    (jaxrdp.classical.advanced_composition_capped_kl, (0.1, 0.0, 2, 1.0), {}, "beta"),
    (jaxrdp.classical.amplify_by_subsampling, (0.1, 0.0, 1.5), {}, "rate"),
    (jaxrdp.classical.amplify_by_subsampling, (-0.1, 0.0, 0.5), {}, "epsilon"),
  ],
)
def test_bad_input_raises(fn, args, kwargs, name):
  with pytest.raises(ValueError, match=name):
    fn(*args, **kwargs)


@pytest.mark.parametrize(
  "fn,args",
  [
    (jaxrdp.mechanisms.analytic_gaussian_delta, (-1.0, 1.0)),
    (jaxrdp.mechanisms.analytic_gaussian_sigma, (1.0, 1.5)),
    (jaxrdp.classical.classical_gaussian_sigma, (2.0, 1e-5)),
    (jaxrdp.classical.gaussian_tail_delta, (1.0, -1.0)),
    (jaxrdp.classical.laplace_scale, (-1.0,)),
    (lambda e, d: jaxrdp.classical.basic_composition(e, d, 2.0).epsilon, (0.1, 2.0)),
    (lambda e, r: jaxrdp.classical.amplify_by_subsampling(e, 0.1, r).delta, (0.1, 2.0)),
  ],
)
def test_traced_bad_input_gives_nan(fn, args):
  assert math.isnan(float(jax.jit(fn)(*args)))


def test_analytic_gaussian_delta_gradient_is_finite():
  g = jax.grad(jaxrdp.mechanisms.analytic_gaussian_delta, argnums=(0, 1))(1.0, 3.0)
  assert all(np.isfinite(float(x)) for x in g)
  assert float(g[1]) < 0  # delta decreases in sigma


def test_float32_caller_gets_a_rounded_up_sigma():
  # Under a caller's float32 jit the kernel still runs in float64 and the result
  # is cast to float32 rounding up (core Float64Scope), so the noise never shrinks.
  with jax.enable_x64(False):
    out = jax.jit(jaxrdp.mechanisms.analytic_gaussian_sigma)(1.0, 1e-5)
  assert out.dtype == np.float32
  exact = jaxrdp.mechanisms.analytic_gaussian_sigma(1.0, float(np.float32(1e-5)))
  assert float(out) >= float(exact)
  assert float(out) == pytest.approx(float(exact), rel=2**-22)
