"""The events of the other mechanisms dp_accounting describes, and hyperparameter tuning.

Every RDP curve is checked against an oracle that shares no code with it: mpmath
closed forms or sums at 50 digits, dp_accounting's own test values (written out
here), or, where jaxrdp is tighter than dp_accounting, the exact Renyi divergence
of a mechanism the bound must cover (soundness).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from _oracle_helpers import mp_on_grid, on_grid

import jaxrdp
from jaxrdp.events import (
  Composed,
  DiscreteGaussian,
  DiscreteLaplace,
  EpsilonDelta,
  ExponentialMechanism,
  FixedSizeSampled,
  Gaussian,
  KaryRandomizedResponse,
  Laplace,
  MixtureOfGaussians,
  NonPrivate,
  NoOp,
  PermuteAndFlip,
  PoissonSampled,
  RandomizedResponse,
  RepeatAndSelect,
  SelfComposed,
  SingleEpochTreeAggregation,
  TruncatedSubsampledGaussian,
  ZCDp,
  from_dp_accounting,
  to_dp_accounting,
)
from jaxrdp.mechanisms._kary_randomized_response import replace_one_impl, replace_special_impl
from jaxrdp.mechanisms._pure_dp import bounded_range_rdp_impl, pure_dp_rdp_impl
from jaxrdp.rdp._mechanism_rules import tree_depth

mpmath.mp.dps = 50
INF = math.inf
mpf = mpmath.mpf

# dp_accounting's test orders for randomized response.
RR_ORDERS = np.array([1.5, 2.5, 5.0, 50.0, 100.0, INF])
RR_ACCT = jaxrdp.RdpAccountant(RR_ORDERS)


def curve(event, acct=RR_ACCT):
  return np.asarray(acct.compose(acct.init(), event).rdp)


# --- zCDP and no privacy ------------------------------------------------------------


def test_zcdp_curve_is_xi_plus_rho_alpha():
  # dp_accounting's test_compute_rdp_multi_zcdp and test_zcdp_matches_gaussian.
  acct = jaxrdp.RdpAccountant([2.0, 2.71828, INF])
  got = curve(Composed((ZCDp(2.71828, 3.14159), ZCDp(6.28319, 1.23456))), acct)
  assert got[0] == pytest.approx(3.14159 + 1.23456 + 2.0 * (2.71828 + 6.28319), rel=1e-15)
  assert got[2] == INF
  sigma = 3.14159
  np.testing.assert_allclose(
    curve(ZCDp(1 / (2 * sigma**2)), acct)[:2], [a / (2 * sigma**2) for a in (2.0, 2.71828)], 1e-15
  )
  assert curve(ZCDp(0.0, 0.5), acct).tolist() == [0.5, 0.5, 0.5]


def test_non_private_gives_infinite_epsilon_and_delta_one():
  e = Composed((Gaussian(2.0), NonPrivate()))
  assert np.all(curve(e) == INF)
  assert float(jaxrdp.epsilon_from_event(e, 1e-5, accountant=RR_ACCT).epsilon) == INF
  assert float(jaxrdp.delta_from_event(e, 10.0, accountant=RR_ACCT).delta) == 1.0


# --- k-ary randomized response ------------------------------------------------------

# dp_accounting's expected values (rdp_privacy_accountant_test, orders RR_ORDERS).
_DPA_RR = {
  ("replace_special", 0.3, 10): [1.50305525841469, 1.78011824788697, 1.90919692568336,
                                 1.98145167989231, 1.98469545174182, 1.98787434815435],
  ("replace_special", 0.05, 20): [2.89853122220567, 2.96154146205140, 2.98290894995773,
                                  2.99468547162771, 2.99521415946927, 2.99573227355399],
  ("replace_special", 0.01, 3): [3.85134534352646, 4.33492490768514, 4.50380390897689,
                                 4.59689538786343, 4.60107457883548, 4.60517018598809],
  ("replace_one", 0.3, 10): [2.69463202265463, 2.98386536402886, 3.11316970070507,
                             3.18542448421825, 3.18866825606776, 3.19184715248028],
  ("replace_one", 0.05, 20): [5.85031770337438, 5.91036016230746, 5.93063308213194,
                              5.94180620835157, 5.94230780773295, 5.94279937512670],
  ("replace_one", 0.01, 3): [5.68412677093273, 5.69263459603457, 5.69542123946781,
                             5.69695697654314, 5.69702592096852, 5.69709348650541],
}  # fmt: skip


@pytest.mark.parametrize("relation", ["replace_one", "replace_special"])
def test_kary_randomized_response_matches_dp_accountings_values(relation):
  for (rel, p, k), want in _DPA_RR.items():
    if rel == relation:
      np.testing.assert_allclose(curve(KaryRandomizedResponse(p, k, relation)), want, rtol=1e-13)
  # Its boundary and infinite-order cases: p = 1 or one bucket release nothing, p = 0 all.
  for p, k, want in [(1.0, 2, 0.0), (0.0, 2, INF), (0.1, 1, 0.0)]:
    assert np.all(curve(KaryRandomizedResponse(p, k, relation)) == want)
  inf_order = {"replace_special": 2.302585092994046, "replace_one": 4.51085950651685}
  assert curve(KaryRandomizedResponse(0.1, 10, relation))[-1] == pytest.approx(
    inf_order[relation], rel=1e-14
  )


def _mp_rr(relation, p, k, a):
  p, k = mpf(p), mpf(k)
  if relation == "replace_one":
    big, small = 1 - p + p / k, p / k
    if a == INF:
      return mpmath.log(big / small)
    a = mpf(a)
    return mpmath.log(big**a * small ** (1 - a) + small**a * big ** (1 - a) + (k - 2) * small) / (
      a - 1
    )
  x = k * (1 - p) + p  # k times the law of the true bucket, against the uniform law

  def log_moment(b):
    return mpmath.log(x**b / k + (k - 1) * p**b / k)

  if a == INF:
    return max(mpmath.log(x), -mpmath.log(p))
  a = mpf(a)
  return max(log_moment(a), log_moment(1 - a)) / (a - 1)


@pytest.mark.parametrize("relation", ["replace_one", "replace_special"])
def test_kary_randomized_response_against_mpmath(relation):
  # Corners included: p near 0 and 1 (tiny and huge RDP), alpha near 1 and large, k up to 1e6.
  p = np.array([1e-6, 0.01, 0.3, 0.9, 1 - 1e-9])[:, None, None]
  k = np.array([2.0, 3.0, 10.0, 1e6])[None, :, None]
  a = np.array([1.01, 1.5, 2.0, 7.5, 64.0, 1e4, INF])[None, None, :]
  impl = replace_one_impl if relation == "replace_one" else replace_special_impl
  got = on_grid(impl, p, k, a)
  want = mp_on_grid(lambda *x: _mp_rr(relation, *x), p, k, a)
  np.testing.assert_allclose(got, want, rtol=2e-13, atol=0)


def test_kary_randomized_response_relations_and_binary_case():
  p = np.array([0.05, 0.4, 0.9])
  # Two buckets under replace-one is binary randomized response with p_true = 1 - p / 2.
  np.testing.assert_allclose(
    curve(KaryRandomizedResponse(p[:, None], 2)), curve(RandomizedResponse(1 - p[:, None] / 2))
  )
  # Replace-special is never above replace-one (the uniform law is the buckets' average).
  one = curve(KaryRandomizedResponse(p[:, None], np.array([2.0, 5.0, 50.0])[:, None, None]))
  special = curve(
    KaryRandomizedResponse(p[:, None], np.array([2.0, 5.0, 50.0])[:, None, None], "replace_special")
  )
  assert np.all(special <= one)


def test_kary_randomized_response_traced():
  init = RR_ACCT.init()
  f = jax.jit(jax.vmap(lambda p, k: RR_ACCT.compose(init, KaryRandomizedResponse(p, k)).rdp))
  p, k = np.array([0.3, 0.05, 1.5]), np.array([10.0, 20.0, 3.0])
  out = np.asarray(f(p, k))
  np.testing.assert_allclose(out[0], _DPA_RR[("replace_one", 0.3, 10)], rtol=1e-13)
  assert np.isnan(out[2]).all()  # p outside [0, 1]
  g = jax.grad(lambda p: RR_ACCT.compose(init, KaryRandomizedResponse(p, 10)).rdp[2])(0.3)
  assert np.isfinite(g) and g < 0  # more noise, less privacy loss


# --- pure DP: EpsilonDelta(eps, 0), PermuteAndFlip, DiscreteLaplace ------------------


def _mp_pure(eps, a):
  eps = mpf(eps)
  if a == INF:
    return eps
  a = mpf(a)
  num = mpmath.exp(eps * a) + mpmath.exp(eps * (1 - a))
  return mpmath.log(num / (1 + mpmath.exp(eps))) / (a - 1)


def test_pure_dp_bound_against_mpmath():
  # The RDP of randomized response with e^eps / (1 + e^eps), the worst eps-DP mechanism.
  eps = np.array([1e-8, 1e-3, 0.1, 1.0, 5.0, 50.0, 800.0])[:, None]
  a = np.array([1.001, 1.01, 1.5, 2.0, 8.0, 100.0, 1e6, INF])[None, :]
  got = on_grid(pure_dp_rdp_impl, eps, a)
  np.testing.assert_allclose(got, mp_on_grid(_mp_pure, eps, a), rtol=1e-13, atol=0)
  assert float(pure_dp_rdp_impl(0.0, 3.0)) == 0.0 and float(pure_dp_rdp_impl(INF, 3.0)) == INF


def test_pure_dp_events():
  # EpsilonDelta(eps, 0): dp_accounting's (newer) formula
  # (eps a + log(1 + e^(eps (1 - 2a))) - log(1 + e^eps)) / (a - 1), here at eps = 1.3.
  a = RR_ORDERS[:-1]
  theirs = (1.3 * a + np.logaddexp(0, 1.3 * (1 - 2 * a)) - np.logaddexp(0, 1.3)) / (a - 1)
  np.testing.assert_allclose(curve(EpsilonDelta(1.3))[:-1], theirs, rtol=1e-13)
  assert curve(EpsilonDelta(1.3))[-1] == 1.3
  np.testing.assert_array_equal(curve(PermuteAndFlip(1.3)), curve(EpsilonDelta(1.3)))
  # The discrete Laplace mechanism is (a Delta)-DP.
  np.testing.assert_array_equal(curve(DiscreteLaplace(0.65, 2)), curve(EpsilonDelta(1.3)))


def _mp_discrete_laplace(a, delta, alpha):
  """max of both directions of D_alpha(DLap(0, a) || DLap(delta, a)), summed over the integers."""
  a, alpha = mpf(a), mpf(alpha)
  n = int(60 / float(a)) + 2 * delta + 10
  xs = range(-n, n + 1)
  out = []
  for shift in (delta, -delta):
    terms = [mpmath.exp(-a * (alpha * abs(x) + (1 - alpha) * abs(x - shift))) for x in xs]
    out.append(mpmath.log(mpmath.fsum(terms) * mpmath.tanh(a / 2)) / (alpha - 1))
  return max(out)


def test_discrete_laplace_bound_is_sound():
  acct = jaxrdp.RdpAccountant([1.5, 2.0, 5.0, 20.0])
  for a, d in [(0.1, 1), (1.0, 1), (1.0, 3), (3.0, 2)]:
    got = curve(DiscreteLaplace(a, d), acct)
    exact = np.array([float(_mp_discrete_laplace(a, d, alpha)) for alpha in acct.orders])
    assert np.all(got >= exact * (1 - 1e-14)) and np.all(got <= a * d)


def test_epsilon_delta_with_positive_delta_is_refused_under_sampling_or_infinite():
  with pytest.raises(
    NotImplementedError, match=r"cannot account EpsilonDelta events with delta > 0"
  ):
    jaxrdp.epsilon_from_event(
      PoissonSampled(0.1, Composed((Gaussian(1.0), EpsilonDelta(1.0, 1e-6)))), 1e-5
    )
  with pytest.raises(NotImplementedError, match="EpsilonDelta"):
    RR_ACCT.compose(RR_ACCT.init(), SelfComposed(PoissonSampled(0.1, EpsilonDelta(1.0, 1e-6)), 3))
  # Traced under sampling: the true RDP of the worst (eps, delta)-DP mechanism, inf at
  # every order (and delta 0: the pure-DP curve, amplified).
  rdp = jax.jit(
    lambda d: RR_ACCT.compose(RR_ACCT.init(), PoissonSampled(0.1, EpsilonDelta(1.0, d))).rdp
  )
  assert np.all(np.asarray(rdp(1e-6)) == INF)
  pure = RR_ACCT.compose(RR_ACCT.init(), PoissonSampled(0.1, EpsilonDelta(1.0))).rdp
  np.testing.assert_allclose(rdp(0.0), pure, rtol=1e-15)


# --- the exponential mechanism (bounded range): tighter than dp_accounting, sound ---


def _mp_bounded_range_exact(eps, alpha):
  """The largest D_alpha over eps-bounded-range pairs: loss in [t - eps, t], t in [0, eps].

  For each t the extreme pair is two-point (RDP is a convex function of the likelihood
  ratio, which is confined to [e^(t - eps), e^t] with mean 1 under Q); maximised over t
  on a grid, then refined by golden-section search around the best grid point.
  """
  eps, a = mpf(eps), mpf(alpha)

  def f(t):
    w = (1 - mpmath.exp(t - eps)) / (mpmath.exp(t) - mpmath.exp(t - eps))  # Q-mass at e^t
    return mpmath.log(w * mpmath.exp(a * t) + (1 - w) * mpmath.exp(a * (t - eps))) / (a - 1)

  grid = [eps * i / 200 for i in range(201)]
  i = max(range(201), key=lambda j: f(grid[j]))
  lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, 200)]
  g = (mpmath.sqrt(5) - 1) / 2
  for _ in range(100):
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    if f(x1) < f(x2):
      lo = x1
    else:
      hi = x2
  return max(f(grid[i]), f((lo + hi) / 2))


def _mp_cesar_rogers(eps, alpha):
  eps, a = mpf(eps), mpf(alpha)
  r = eps / mpmath.expm1(eps)
  return r - 1 - mpmath.log(r) + eps**2 / 8 * (a - 1)


def test_exponential_mechanism_bound_is_sound_and_tighter_than_dp_accounting():
  eps = np.array([0.01, 0.1, 0.5, 1.0, 2.0, 5.0])[:, None]
  a = np.array([1.01, 1.5, 2.0, 4.0, 10.0, 100.0])[None, :]
  got = on_grid(bounded_range_rdp_impl, eps, a)
  exact = mp_on_grid(_mp_bounded_range_exact, eps, a)
  assert np.all(got >= exact * (1 - 1e-13)), (got - exact).min()
  # It is the smaller of the two bounds it names, to float64 precision...
  want = np.minimum(mp_on_grid(_mp_cesar_rogers, eps, a), mp_on_grid(_mp_pure, eps, a))
  np.testing.assert_allclose(got, want, rtol=1e-13)
  # ... never above dp_accounting's min(xi + eps^2 alpha / 8, eps), and below it somewhere.
  theirs = np.minimum(mp_on_grid(_mp_cesar_rogers, eps, a), eps)
  assert np.all(got <= theirs * (1 + 1e-14)) and np.any(got < theirs * (1 - 1e-3))
  np.testing.assert_array_equal(curve(ExponentialMechanism(1.0))[-1], 1.0)


# --- the discrete Gaussian ----------------------------------------------------------


def _mp_discrete_gaussian(sigma, shift, alpha):
  """D_alpha(N_Z(0, sigma^2) || N_Z(shift, sigma^2)) for an integer shift, summed over Z."""
  s, a = mpf(sigma), mpf(alpha)
  n = int(40 * sigma + abs(shift) * (abs(alpha) + 1)) + 10
  num = mpmath.fsum(
    mpmath.exp(-(a * x**2 + (1 - a) * (x - shift) ** 2) / (2 * s**2)) for x in range(-n, n + 1)
  )
  den = mpmath.fsum(mpmath.exp(-(x**2) / (2 * s**2)) for x in range(-n, n + 1))
  return mpmath.log(num / den) / (a - 1)


def test_discrete_gaussian_bound_is_exact_at_integer_orders_and_sound():
  orders = np.array([1.5, 2.0, 2.5, 3.0, 5.0, 7.5, 10.0])
  acct = jaxrdp.RdpAccountant(orders)
  integer = orders == np.round(orders)
  for sigma, delta in [(0.7, 1), (1.5, 1), (3.0, 2)]:
    got = curve(DiscreteGaussian(sigma, delta), acct)
    np.testing.assert_allclose(got, orders * delta**2 / (2 * sigma**2), rtol=1e-14)
    exact = np.array([float(_mp_discrete_gaussian(sigma, delta, a)) for a in orders])
    np.testing.assert_allclose(got[integer], exact[integer], rtol=1e-13)
    assert np.all(got >= exact * (1 - 1e-14))
  # A query in Z^2 shifted by (1, 1) (L2 sensitivity sqrt 2): independent coordinates
  # add their divergences, below the bound at sensitivity sqrt 2.
  got = curve(DiscreteGaussian(0.8, math.sqrt(2)), acct)
  exact = np.array([2 * float(_mp_discrete_gaussian(0.8, 1, a)) for a in orders])
  assert np.all(got >= exact * (1 - 1e-14))
  assert curve(DiscreteGaussian(1.0, 0.0), acct).tolist() == [0.0] * len(orders)


# --- tree aggregation ---------------------------------------------------------------


def _released_nodes_on_path(steps):
  """Most dyadic intervals [j 2^h + 1, (j + 1) 2^h] inside [1, steps] holding one step."""
  best = 0
  for t in range(1, steps + 1):
    n, h = 0, 0
    while 2**h <= steps:
      start = ((t - 1) // 2**h) * 2**h + 1
      n += start + 2**h - 1 <= steps
      h += 1
    best = max(best, n)
  return best


def test_tree_depth_counts_the_released_nodes_on_a_path():
  steps = np.arange(0, 200, dtype=np.float64)
  want = [_released_nodes_on_path(int(n)) for n in steps]
  assert np.asarray(tree_depth(jnp.asarray(steps))).tolist() == want
  big = np.array([2.0**k + d for k in range(10, 50) for d in (-1, 0, 1)])
  assert np.asarray(tree_depth(jnp.asarray(big))).tolist() == [int(x).bit_length() for x in big]


def test_tree_aggregation_curve():
  acct = jaxrdp.RdpAccountant([1.5, 2.0, 10.0])
  # 1600 steps: depth 11 (2^10 <= 1600 < 2^11).
  np.testing.assert_allclose(
    curve(SingleEpochTreeAggregation(1.13, 1600), acct),
    np.array([1.5, 2.0, 10.0]) * 11 / (2 * 1.13**2),
    rtol=1e-14,
  )
  # dp_accounting's test_compute_eps_tree (the StackOverflow setting of Kairouz et al.):
  # 1600 steps at delta 1e-6 cost less than 19.74 at sigma 1.13 and 2.04 at sigma 8.83.
  so = jaxrdp.RdpAccountant([1 + x / 10 for x in range(1, 100)] + list(range(12, 64)))
  eps = so.epsilon(SingleEpochTreeAggregation(np.array([1.13, 8.83]), 1600), 1e-6).epsilon
  assert float(eps[0]) < 19.74 and float(eps[1]) < 2.04
  # Trees of one step are Gaussian mechanisms (dp_accounting's test_no_tree_no_sampling).
  np.testing.assert_allclose(
    curve(SelfComposed(SingleEpochTreeAggregation(0.1, 1), 100), acct),
    curve(SelfComposed(Gaussian(0.1), 100), acct),
    rtol=1e-14,
  )
  assert np.all(curve(SingleEpochTreeAggregation(1.0, 0), acct) == 0.0)
  assert np.all(curve(SingleEpochTreeAggregation(0.0, 3), acct) == INF)


# --- Gaussians composed on one Poisson sample -----------------------------------------


def test_sampled_composition_reduces_to_the_effective_sigma():
  # dp_accounting's test_effective_gaussian_noise_multiplier_composed structure.
  rng = np.random.default_rng(0xBAD5EED)
  s = rng.uniform(0.5, 3.0, size=4)
  tree = Composed(
    (Gaussian(s[0]), SelfComposed(Gaussian(s[1]), 3), Composed((Gaussian(s[2]), Gaussian(s[3]))))
  )
  effective = float(np.sum(np.concatenate([s, [s[1]] * 2]) ** -2.0) ** -0.5)
  acct = jaxrdp.RdpAccountant([2.0, 3.0, 8.0])
  np.testing.assert_allclose(
    curve(PoissonSampled(0.05, tree), acct),
    curve(PoissonSampled(0.05, Gaussian(effective)), acct),
    rtol=1e-13,
  )
  # NoOp adds nothing; a count-0 noiseless Gaussian adds nothing; a noiseless one is fatal.
  np.testing.assert_allclose(
    curve(PoissonSampled(0.05, Composed((tree, NoOp(), SelfComposed(Gaussian(0.0), 0)))), acct),
    curve(PoissonSampled(0.05, tree), acct),
    rtol=1e-15,
  )
  assert np.all(curve(PoissonSampled(0.05, Composed((tree, Gaussian(0.0)))), acct) == INF)


_GH = {}


def _mp_sampled_two_gaussians(q, s1, s2, alpha):
  """D_alpha((1-q) N(0, S) + q N((1, 1), S) || N(0, S)), S = diag(s1^2, s2^2), in R^2.

  The expectation under N(0, S) of ((1-q) + q L(x, y))^alpha, L the density ratio of the
  shifted Gaussian, by an 80 x 80 Gauss-Hermite product rule in mpmath (converged to
  1e-28 at these points: 120 nodes agree), without reducing the two Gaussians to one.
  """
  if "nodes" not in _GH:
    with mpmath.workdps(30):
      _GH["nodes"] = mpmath.gauss_quadrature(80, "hermite")
  xs, ws = _GH["nodes"]
  with mpmath.workdps(30):
    a, q, r2 = mpf(alpha), mpf(q), mpmath.sqrt(2)
    l1 = [mpmath.exp((2 * r2 * s1 * t - 1) / (2 * s1**2)) for t in xs]
    l2 = [mpmath.exp((2 * r2 * s2 * t - 1) / (2 * s2**2)) for t in xs]
    total = mpmath.fsum(
      w1 * mpmath.fsum(w2 * ((1 - q) + q * u1 * u2) ** a for w2, u2 in zip(ws, l2))
      for w1, u1 in zip(ws, l1)
    )
    return mpmath.log(total / mpmath.pi) / (a - 1)


def test_sampled_composition_of_gaussians_against_the_two_dimensional_mixture():
  # At q = 1 it is the composition (dp_accounting's test_compute_rdp_multi_gaussian:
  # alpha 3.14159, sigmas 2.71828 and 6.28319); at q < 1 the mixture's divergence in R^2.
  acct = jaxrdp.RdpAccountant([2.5, 3.0, 3.14159, 6.5])
  q, s1, s2 = np.array([1.0, 0.1, 0.02]), np.array([2.71828, 1.0, 0.9]), np.array([6.28319, 2, 1.7])
  got = curve(PoissonSampled(q, Composed((Gaussian(s1), Gaussian(s2)))), acct)
  a = np.asarray(acct.orders)
  np.testing.assert_allclose(got[0], a / (2 * s1[0] ** 2) + a / (2 * s2[0] ** 2), rtol=1e-13)
  for row, case in zip(got[1:], zip(q[1:], s1[1:], s2[1:])):
    want = [float(_mp_sampled_two_gaussians(*case, alpha)) for alpha in a]
    np.testing.assert_allclose(row, want, rtol=1e-12)


def test_sampled_composition_traced():
  acct = jaxrdp.RdpAccountant([2.0, 3.0, 8.0])

  def eps(q, s):
    e = SelfComposed(PoissonSampled(q, Composed((Gaussian(s), Gaussian(2.0 * s)))), 100.0)
    return acct.epsilon(e, 1e-5).epsilon

  qs = np.array([0.01, 0.05])
  batched = np.asarray(jax.jit(jax.vmap(eps, in_axes=(0, None)))(qs, 1.0))
  np.testing.assert_allclose(batched, [float(eps(float(q), 1.0)) for q in qs], rtol=1e-13)
  assert np.isnan(float(jax.jit(eps)(0.01, -1.0)))


# --- repeat and select (hyperparameter tuning) --------------------------------------


def test_repeat_select_pure_negative_binomial():
  # dp_accounting's test_repeat_select_pure_negative_binomial (Papernot and Steinke,
  # Cor. 3): Laplace(1/eps) at order 1e10 (almost pure DP) costs eps (2 + shape).
  acct = jaxrdp.RdpAccountant([1e10])
  mean = np.array([1000.0, 1000.0, 1000.0, 100.0, 1000.0])
  shape = np.array([0.0, 1.0, 0.5, 2.0, 5.0])
  got = curve(RepeatAndSelect(Laplace(1.0), mean, shape), acct)[:, 0]
  np.testing.assert_allclose(got, 2 + shape, atol=1e-7)


def test_repeat_select_of_one_run_is_the_run():
  # dp_accounting's test_repeat_select_trivial: mean 1 for a truncated negative binomial.
  orders = np.array([1 + 1e-6, 2, 3, 4, 5, 8, 16, 32, 64, 256, 1024], np.float64)
  acct = jaxrdp.RdpAccountant(orders)
  shape = np.array([0.0, 0.5, 1.0, 2.0])
  sigma = np.array([1.0, 10.0, 0.1, 1.0])
  got = curve(RepeatAndSelect(Gaussian(sigma), 1.0, shape), acct)
  np.testing.assert_allclose(got, orders / (2 * sigma[:, None] ** 2), rtol=1e-14)


def _tnb_mean(gamma, shape):
  if shape == 0:
    return (1 / gamma - 1) / math.log(1 / gamma)
  return shape * (1 / gamma - 1) / (1 - gamma**shape)


def test_repeat_select_gaussian_negative_binomial():
  # dp_accounting's test_repeat_select_gaussian_negative_binomial (Papernot and Steinke,
  # Cor. 4), on its cases whose optimal order sqrt(log(1/gamma) / rho) exceeds 1 (the
  # accountant's orders are > 1). All cases share one set of orders: the closed form
  # holds as long as each case's optimal orders are among them.
  cases = [(r, g, s) for s in (0, 0.5, 1, 5) for r, g in ((0.01, 0.01), (1, 0.1))]
  orders = {1.1, 2.0, 3.0, 5.0, 10.0, 100.0, 1000.0, 10000.0}
  for rho, gamma, shape in cases:
    mean = _tnb_mean(gamma, shape)
    orders |= {math.sqrt(-math.log(gamma) / rho), 1 + math.sqrt(math.log(mean) / rho)}
  orders = np.array(sorted(orders))
  rho, gamma, shape = (np.array(v) for v in zip(*cases))
  mean = np.array([_tnb_mean(g, s) for _, g, s in cases])
  acct = jaxrdp.RdpAccountant(orders)
  got = curve(RepeatAndSelect(Gaussian(np.sqrt(0.5 / rho)), mean, shape), acct)
  const = 2 * (1 + shape) * np.sqrt(-rho * np.log(gamma)) - shape * rho
  turn = 1 + np.sqrt(np.log(mean) / rho)
  a = orders[None, :]
  want = np.where(
    a <= turn[:, None],
    (2 * np.sqrt(rho * np.log(mean)) + const)[:, None],
    rho[:, None] * (a - 1) + np.log(mean)[:, None] / (a - 1) + const[:, None],
  )
  np.testing.assert_allclose(got, want, rtol=1e-9)


def test_repeat_select_pure_poisson():
  # dp_accounting's test_repeat_and_select_pure_poisson (Papernot and Steinke, Thm 6):
  # at alpha = 1 + 1 / expm1(eps), Laplace(1/eps) repeated Poisson(mean) times costs
  # the Laplace RDP plus log(mean) expm1(eps).
  cases = [(1, 1), (0.1, 2), (10, 10), (0.001, 100), (2, 1000), (1, 1e10)]
  eps, mean = (np.array(v, np.float64) for v in zip(*cases))
  alpha = 1 + 1 / np.expm1(eps)
  acct = jaxrdp.RdpAccountant(np.concatenate([alpha, [1e10, 1e15]]))  # (1e15: jaxrdp's top)
  got = curve(RepeatAndSelect(Laplace(1 / eps), mean, INF), acct)
  got = got[np.arange(len(cases)), np.arange(len(cases))]  # each case at its own alpha
  laplace = eps + np.log1p(np.expm1((1 - 2 * alpha) * eps) * (alpha - 1) / (2 * alpha - 1)) / (
    alpha - 1
  )
  want = laplace + np.log(mean) * np.expm1(eps)
  # At eps = 10 (alpha = 1.00005) the order 1e10 gives a far smaller bound (20, not 5e4),
  # which jaxrdp's monotone envelope takes (dp_accounting's Poisson branch does not).
  assert got[2] == pytest.approx(20.0, abs=0.01)
  keep = np.arange(len(cases)) != 2
  np.testing.assert_allclose(got[keep], want[keep], rtol=1e-3)
  # (delta_hat is ~2e-16 from the order 1e15, where dp_accounting's 1e100 gave ~1e-100.)
  assert np.all(got <= want + mean * 1e-15)


def _mp_max_of_randomized_response(p, mean_law, alpha):
  """Exact D_alpha, both directions, of releasing the largest of K binary randomized
  responses (1 w.p. p on one input, 1 - p on the other), or nothing if K = 0."""
  pgf, p0 = mean_law  # E[z^K] and P(K = 0)
  p, a = mpf(p), mpf(alpha)
  laws = []
  for z in (1 - p, p):  # P(all K answers are 0) on either input
    laws.append([p0, pgf(z) - p0, 1 - pgf(z)])
  out = []
  for u, v in ((0, 1), (1, 0)):
    terms = [x**a * y ** (1 - a) for x, y in zip(laws[u], laws[v]) if x > 0]
    out.append(mpmath.log(mpmath.fsum(terms)) / (a - 1))
  return max(out)


def _law(shape, gamma=None, mean=None):
  """(pgf, P(K = 0)) of the law of K, and its mean, in mpmath."""
  if shape == INF:
    m = mpf(mean)
    return (lambda z: mpmath.exp(m * (z - 1)), mpmath.exp(-m)), m
  g, eta = mpf(gamma), mpf(shape)
  if shape == 0:
    pgf = lambda z: mpmath.log(1 - (1 - g) * z) / mpmath.log(g)
    m = (1 / g - 1) / mpmath.log(1 / g)
  else:
    pgf = lambda z: ((1 - (1 - g) * z) ** -eta - 1) / (g**-eta - 1)
    m = eta * (1 / g - 1) / (1 - g**eta)
  return (pgf, mpf(0)), m


def test_repeat_and_select_bound_covers_an_exact_tuning_run():
  # Soundness where the bound is all there is: the best of K randomized responses, for
  # each law of K, has exact Renyi divergences below the bound at every order.
  orders = np.array([1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0])
  acct = jaxrdp.RdpAccountant(orders)
  p = 0.6
  specs = [(0.0, 0.05), (0.5, 0.1), (1.0, 0.05), (2.0, 0.2), (INF, 10.0), (INF, 1.5)]
  laws = [_law(s, gamma=x) if s != INF else _law(s, mean=x) for s, x in specs]
  means = np.array([float(m) for _, m in laws])
  shapes = np.array([s for s, _ in specs])
  got = curve(RepeatAndSelect(RandomizedResponse(p), means, shapes), acct)
  for row, (law, _) in zip(got, laws):
    exact = np.array([float(_mp_max_of_randomized_response(p, law, a)) for a in orders])
    assert np.all(row >= exact), (row, exact)


def test_repeat_and_select_traced_and_invalid():
  acct = jaxrdp.RdpAccountant([2.0, 5.0])
  f = jax.jit(
    jax.vmap(lambda m, s: acct.compose(acct.init(), RepeatAndSelect(Gaussian(2.0), m, s)).rdp)
  )
  out = np.asarray(f(np.array([10.0, 0.5, 10.0]), np.array([1.0, 1.0, -1.0])))
  np.testing.assert_allclose(out[0], curve(RepeatAndSelect(Gaussian(2.0), 10.0, 1.0), acct), 1e-14)
  assert np.isnan(out[1:]).all()
  with pytest.raises(ValueError, match=r"RepeatAndSelect.mean must be in \[1.0"):
    jaxrdp.epsilon_from_event(RepeatAndSelect(Gaussian(2.0), 0.5, 1.0), 1e-5)


def test_derivatives_are_finite_with_an_infinite_order_and_right():
  # An order inf among the accountant's (its values there are inf) must not turn any
  # derivative into NaN; repeat-and-select's gamma is differentiated implicitly.
  from helpers import central_difference

  acct = jaxrdp.RdpAccountant([2.0, 5.0, INF])

  def at(event_of, order=1):
    return lambda x: acct.compose(acct.init(), event_of(x)).rdp[order]

  fns = {
    "gaussian": at(lambda s: Gaussian(s)),
    "discrete gaussian": at(lambda s: DiscreteGaussian(s, 2.0)),
    "tree": at(lambda s: SingleEpochTreeAggregation(s, 7.0)),
    "tnb mean": at(lambda m: RepeatAndSelect(Gaussian(2.0), m, 1.0)),
    "poisson mean": at(lambda m: RepeatAndSelect(Gaussian(2.0), m, INF)),
    "tnb shape": at(lambda s: RepeatAndSelect(Gaussian(2.0), 7.0, s)),
    "exponential": at(lambda e: ExponentialMechanism(e)),
    "sampled pair": at(lambda s: PoissonSampled(0.1, Composed((Gaussian(s), Gaussian(4.0))))),
  }
  for name, f in fns.items():
    x = 7.0 if "mean" in name else 2.0 if name != "tnb shape" else 0.5
    got = float(jax.grad(f)(x))
    want = float(central_difference(f, x, 1e-5 * x))
    assert got == pytest.approx(want, rel=1e-6), name
  assert curve(Gaussian(INF), acct).tolist() == [0.0, 0.0, 0.0]  # was NaN at inf (inf / inf)


# --- validation and refusals --------------------------------------------------------


def test_validation_and_refusals_name_the_event():
  with pytest.raises(ValueError, match="buckets must be an integer"):
    curve(KaryRandomizedResponse(0.3, 2.5))
  with pytest.raises(ValueError, match="relation must be one of"):
    KaryRandomizedResponse(0.3, 3, "add_remove")
  with pytest.raises(ValueError, match="probs must sum to 1"):
    curve(MixtureOfGaussians(1.0, (0.0, 1.0), (0.5, 0.4)))
  with pytest.raises(ValueError, match="as many sensitivities as probs"):
    MixtureOfGaussians(1.0, (0.0, 1.0), (1.0,))
  with pytest.raises(ValueError, match=r"ZCDp.rho must be in"):
    curve(ZCDp(-1.0))
  refusals = [
    (
      PoissonSampled(0.5, TruncatedSubsampledGaussian(1000, 0.1, 200, 1.0)),
      r"cannot account PoissonSampled\(TruncatedSubsampledGaussian\)",
    ),
    (
      PoissonSampled(0.1, KaryRandomizedResponse(0.3, 3)),
      r"cannot account PoissonSampled\(KaryRandomizedResponse\)",
    ),
    (
      PoissonSampled(0.1, Composed((Gaussian(1.0), RandomizedResponse(0.7)))),
      r"PoissonSampled\(Composed\).*RandomizedResponse has none",
    ),
    (PoissonSampled(0.1, Laplace(1.0), "replace_one"), r"relation='replace_one'"),
  ]
  for event, match in refusals:
    with pytest.raises(NotImplementedError, match=match):
      jaxrdp.epsilon_from_event(event, 1e-5)


def test_new_event_types_have_their_own_treedefs():
  events = [
    ZCDp(0.1),
    NonPrivate(),
    NoOp(),
    DiscreteGaussian(1.0),
    DiscreteLaplace(1.0),
    KaryRandomizedResponse(0.3, 3),
    KaryRandomizedResponse(0.3, 3, "replace_special"),
    ExponentialMechanism(1.0),
    PermuteAndFlip(1.0),
    EpsilonDelta(1.0),
    SingleEpochTreeAggregation(1.0, 3),
    TruncatedSubsampledGaussian(10, 0.1, 5, 1.0),
    RepeatAndSelect(Gaussian(1.0), 2.0, 1.0),
    Laplace(1.0),
    Gaussian(1.0),
  ]
  defs = [jax.tree.structure(e) for e in events]
  for i, a in enumerate(defs):
    for j, b in enumerate(defs):
      assert (a == b) == (i == j), (events[i], events[j])


# --- dp_accounting ----------------------------------------------------------------

dp_accounting = pytest.importorskip("dp_accounting")


def _theirs(dp_event, orders, relation=None):
  rel = dp_accounting.NeighboringRelation
  acct = dp_accounting.rdp.RdpAccountant(list(orders), relation or rel.ADD_OR_REMOVE_ONE)
  acct.compose(dp_event)
  return np.asarray(acct._rdp)


def test_the_same_curves_as_dp_accountings_accountant():
  from dp_accounting import dp_event as d

  rel = dp_accounting.NeighboringRelation
  orders = np.array([1.25, 2.0, 3.5, 8.0, 32.0, 256.0])
  acct = jaxrdp.RdpAccountant(orders)
  cases = [
    (d.ZCDpEvent(0.3, 0.1), None, None),
    (d.RandomizedResponseDpEvent(0.3, 15), "replace_one", rel.REPLACE_ONE),
    (d.RandomizedResponseDpEvent(0.3, 15), "replace_special", rel.REPLACE_SPECIAL),
    (d.RandomizedResponseDpEvent(0.3, 2), "replace_special", rel.REPLACE_SPECIAL),
    (d.SingleEpochTreeAggregationDpEvent(1.13, [400, 1600, 30]), None, rel.REPLACE_SPECIAL),
    (d.RepeatAndSelectDpEvent(d.GaussianDpEvent(3.0), 10.0, 0.5), None, None),
    (d.RepeatAndSelectDpEvent(d.GaussianDpEvent(3.0), 10.0, INF), None, None),
  ]
  for dp_event, relation, their_relation in cases:
    ours = curve(from_dp_accounting(dp_event, relation=relation), acct)
    theirs = _theirs(dp_event, orders, their_relation)
    # Never above theirs, and equal to 1e-9 to the least of their values at the orders
    # at or above (jaxrdp takes that envelope for repeat-and-select's Poisson law too;
    # dp_accounting only for the others).
    assert np.all(ours <= theirs * (1 + 1e-12)), dp_event
    envelope = np.array([theirs[orders >= o].min() for o in orders])
    np.testing.assert_allclose(ours, envelope, rtol=1e-9, err_msg=str(dp_event))


def test_repeat_select_gaussian_poisson_lower_bound():
  # dp_accounting's test_repeat_and_select_gaussian_poisson: the bound is at least
  # Thm 6 with the Gaussian's exact delta, minimised over the orders at or above.
  orders = np.asarray(jaxrdp.DP_ACCOUNTING_ORDERS)
  acct = jaxrdp.RdpAccountant(orders)
  sigma = np.array([0.001, 0.001, 1.0, 1.0, 1000.0, 1000.0])
  mean = np.array([1.0, 1e9, 1.0, 1000.0, 1.0, 1e9])
  got = curve(RepeatAndSelect(Gaussian(sigma), mean, INF), acct)
  for s, m, row in zip(sigma, mean, got):
    eps = np.log1p(1 / (orders - 1))
    x, y = (eps * s - 0.5 / s) / math.sqrt(2), (eps * s + 0.5 / s) / math.sqrt(2)
    from scipy.special import erfc

    delta = erfc(x) / 2 - np.exp(eps) * erfc(y) / 2
    thm6 = orders * 0.5 / s**2 + m * delta + np.log(m) / (orders - 1)
    lower = np.array([thm6[orders >= o].min() for o in orders])
    assert np.all(lower <= row * (1 + 1e-12))


def test_sampled_without_replacement_is_the_same_mechanism():
  from dp_accounting import dp_event as d

  rel = dp_accounting.NeighboringRelation.REPLACE_ONE
  swor = d.SampledWithoutReplacementDpEvent(60000, 256, d.GaussianDpEvent(1.1))
  ours = from_dp_accounting(swor)
  assert isinstance(ours, FixedSizeSampled) and ours.gamma == 256 / 60000
  assert ours.inner.sigma == 1.1 and ours.relation == "replace_one"
  # jaxrdp accounts the replace-one sensitivity 2C: its curve is dp_accounting's at sigma / 2.
  orders = np.array([2.0, 3.0, 4.0, 8.0, 16.0])
  acct = jaxrdp.RdpAccountant(orders)
  half = d.SampledWithoutReplacementDpEvent(60000, 256, d.GaussianDpEvent(0.55))
  np.testing.assert_allclose(curve(ours, acct), _theirs(half, orders, rel), rtol=1e-9)
  assert np.all(curve(ours, acct) > 3 * _theirs(swor, orders, rel))
  # Gaussians composed on the batch are one, and the way back keeps B / n exactly.
  composed = d.SampledWithoutReplacementDpEvent(
    1000, 10, d.ComposedDpEvent([d.GaussianDpEvent(1.0), d.GaussianDpEvent(2.0)])
  )
  assert from_dp_accounting(composed).inner.sigma == pytest.approx(1.25**-0.5, rel=1e-15)
  back = to_dp_accounting(ours)
  assert (back.sample_size, back.source_dataset_size) == (8, 1875)
  assert back.sample_size / back.source_dataset_size == 256 / 60000
  odd = to_dp_accounting(FixedSizeSampled(0.1 + 2**-40, Gaussian(1.0)))
  assert odd.sample_size / odd.source_dataset_size == 0.1 + 2**-40


def test_round_trips_of_the_new_events():
  from dp_accounting import dp_event as d

  same = [
    d.ZCDpEvent(0.1, 0.2),
    d.NonPrivateDpEvent(),
    d.DiscreteLaplaceDpEvent(0.5, 2),
    d.RandomizedResponseDpEvent(0.3, 10),
    d.SingleEpochTreeAggregationDpEvent(1.0, 10),
    d.RepeatAndSelectDpEvent(d.LaplaceDpEvent(2.0), 10.0, 1.0),
    d.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.25, 0.75]),
    d.TruncatedSubsampledGaussianDpEvent(1000, 0.1, 200, 1.0),
    d.PoissonSampledDpEvent(0.1, d.ComposedDpEvent([d.GaussianDpEvent(1.0)] * 2)),
  ]
  for e in same:
    assert to_dp_accounting(from_dp_accounting(e)) == e
  # A list of trees in one epoch becomes its largest tree.
  tree = from_dp_accounting(d.SingleEpochTreeAggregationDpEvent(1.0, [5, 40, 7]))
  assert tree.steps == 40
  # The relation of randomized response is chosen on conversion.
  special = from_dp_accounting(
    d.RandomizedResponseDpEvent(0.3, 2), relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
  )
  assert isinstance(special, KaryRandomizedResponse) and special.relation == "replace_special"


def test_types_of_later_dp_accounting_versions(monkeypatch):
  import attr
  from dp_accounting import dp_event as d

  for name in ("DiscreteGaussianDpEvent", "ExponentialMechanismDpEvent", "EpsilonDeltaDpEvent"):
    if not hasattr(d, name):
      with pytest.raises(TypeError, match=f"has no {name}"):
        to_dp_accounting(
          {
            "DiscreteGaussianDpEvent": DiscreteGaussian(2.0),
            "ExponentialMechanismDpEvent": ExponentialMechanism(1.0),
            "EpsilonDeltaDpEvent": EpsilonDelta(1.0, 0.0),
          }[name]
        )

  # A stand-in with the later version's fields converts both ways.
  @attr.s(frozen=True, slots=True, auto_attribs=True)
  class DiscreteGaussianDpEvent(d.DpEvent):
    sigma: float
    sensitivity: float = 1.0
    dimension: int = 1

  monkeypatch.setattr(d, "DiscreteGaussianDpEvent", DiscreteGaussianDpEvent, raising=False)
  event = from_dp_accounting(DiscreteGaussianDpEvent(sigma=2.0, sensitivity=3.0))
  assert isinstance(event, DiscreteGaussian) and (event.sigma, event.sensitivity) == (2.0, 3.0)
  assert to_dp_accounting(event) == DiscreteGaussianDpEvent(sigma=2.0, sensitivity=3.0)
