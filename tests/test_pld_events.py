"""The tight accountant on events other than (subsampled) Gaussians: bracketed around oracles.

Oracles, sharing no code with jaxrdp:

* one Laplace step: ``delta(eps) = 1 - e^{(eps - a) / 2}`` for ``|eps| < a``
  (``a = 1 / scale``), ``1 - e^eps`` below, 0 above; compositions with another
  mechanism ``M`` are ``E_{L_M}[delta_Lap(eps - L_M)]``, a sum or a 1-D integral
  (mpmath);
* ``k`` compositions of eps-DP mechanisms: the canonical pair's binomial sum
  (Kairouz, Oh, Viswanath 2015, arXiv:1311.0776), in mpmath;
* k-ary randomized response and the discrete Laplace: the hockey-stick divergence
  summed over the outputs from the two output laws;
* a pair with a monotone likelihood ratio (subsampled Laplace, mixtures of
  Gaussians): ``sup_t P(O > t) - e^eps Q(O > t)`` (Neyman-Pearson), maximized
  numerically;
* dp_accounting's PLD accountant, a pessimistic estimate on its own grid (not on
  mixtures of Gaussians: it takes 20 to 60 seconds per event there).
"""

import math

import mpmath as mp
import numpy as np
import pytest
from scipy import optimize, stats

import jaxrdp
from jaxrdp.events import (
  Composed,
  DiscreteLaplace,
  EpsilonDelta,
  ExponentialMechanism,
  Gaussian,
  KaryRandomizedResponse,
  Laplace,
  MixtureOfGaussians,
  NonPrivate,
  NoOp,
  PoissonSampled,
  RandomizedResponse,
  SelfComposed,
  TruncatedSubsampledGaussian,
)

mp.mp.dps = 40
ACCT = jaxrdp.accountants.PldAccountant()


def _delta(event, eps):
  r = ACCT.delta(event, eps)
  return float(r.delta), float(r.delta_lower)


def _eps(event, delta):
  r = ACCT.epsilon(event, delta)
  return float(r.epsilon), float(r.epsilon_lower)


def _bracket(up, low, truth, rtol):
  """``low <= truth <= up`` and ``up`` within ``rtol`` of the truth."""
  assert np.isfinite(up) and np.isfinite(low) and low >= 0
  assert low <= truth * (1 + 1e-12) + 1e-300, (low, truth)
  assert up >= truth * (1 - 1e-12), (up, truth)
  assert up <= truth * (1 + rtol) + 1e-14, (up, truth)


# ---------------------------------------------------------------- closed forms


def _laplace_step(x, a):
  """Hockey-stick curve of one Laplace step of ``a = sensitivity / scale`` at any real x."""
  x, a = mp.mpf(x), mp.mpf(a)
  if x >= a:
    return mp.mpf(0)
  if x <= -a:
    return 1 - mp.exp(x)
  return 1 - mp.exp((x - a) / 2)


@pytest.mark.parametrize("scale, delta", [(1.0, 1e-5), (0.3, 1e-3), (4.0, 1e-6)])
def test_one_laplace_step_epsilon_is_the_closed_form(scale, delta):
  truth = 1 / mp.mpf(scale) + 2 * mp.log(1 - mp.mpf(delta))  # root of 1 - e^{(eps - a)/2}
  up, low = _eps(Laplace(scale), delta)
  assert low <= float(truth) <= up
  assert up - float(truth) <= 1e-4 * float(truth)
  assert float(truth) - low <= 2e-4 * float(truth)


def test_two_laplace_steps_delta_is_the_convolution_integral():
  a, eps = 1.0, 1.2

  def density(u):  # the continuous part of one step's loss, on (-a, a)
    return mp.exp((u - a) / 2) / 4

  truth = (
    mp.mpf(0.5) * _laplace_step(eps - a, a)
    + mp.exp(-a) / 2 * _laplace_step(eps + a, a)
    + mp.quad(lambda u: density(u) * _laplace_step(eps - u, a), [-a, eps - a, a])
  )
  up, low = _delta(SelfComposed(Laplace(1 / a), 2), eps)
  _bracket(up, low, float(truth), 1e-4)


def test_gaussian_with_laplace_delta_is_the_gaussian_average():
  sigma, a, eps = 1.5, 0.7, 1.0
  mu = 1 / (2 * mp.mpf(sigma) ** 2)
  sd = mp.sqrt(2 * mu)

  def integrand(u):
    return mp.npdf(u, mu, sd) * _laplace_step(eps - u, a)

  truth = mp.quad(integrand, [-mp.inf, eps - a, eps + a, mp.inf])
  up, low = _delta(Composed((Gaussian(sigma), Laplace(1 / a))), eps)
  _bracket(up, low, float(truth), 1e-4)


def _kov_delta(eps0, k, eps, delta0=0.0):
  """Exact delta(eps) of k compositions of the (eps0, delta0)-DP canonical pair."""
  eps0, eps = mp.mpf(eps0), mp.mpf(eps)
  p = mp.exp(eps0) / (1 + mp.exp(eps0))
  tot = mp.mpf(0)
  for i in range(k + 1):
    loss = (k - 2 * i) * eps0
    if loss > eps:
      tot += mp.binomial(k, i) * p ** (k - i) * (1 - p) ** i * (1 - mp.exp(eps - loss))
  keep = (1 - mp.mpf(delta0)) ** k
  return 1 - keep + keep * tot


@pytest.mark.parametrize(
  "event, eps0, k, delta0",
  [
    (SelfComposed(EpsilonDelta(0.5), 10), 0.5, 10, 0.0),
    (SelfComposed(EpsilonDelta(0.2, 1e-6), 30), 0.2, 30, 1e-6),
    (SelfComposed(ExponentialMechanism(1.0), 4), 1.0, 4, 0.0),
    (SelfComposed(RandomizedResponse(0.75), 7), math.log(3.0), 7, 0.0),
  ],
)
@pytest.mark.parametrize("eps", [0.3, 2.0])
def test_pure_dp_compositions_match_the_optimal_composition(event, eps0, k, delta0, eps):
  truth = float(_kov_delta(eps0, k, eps, delta0))
  up, low = _delta(event, eps)
  _bracket(up, low, truth, 1e-4)


def test_pure_dp_epsilon_is_bracketed_around_the_optimal_composition():
  k, eps0, delta = 20, 0.3, 1e-5
  f = lambda e: float(_kov_delta(eps0, k, e)) - delta  # noqa: E731
  truth = optimize.brentq(f, 0.0, k * eps0, xtol=1e-14)
  up, low = _eps(SelfComposed(EpsilonDelta(eps0), k), delta)
  assert low <= truth <= up
  assert up - truth <= 1e-4 * truth


def _hockey_stick(p, q, eps):
  p, q = [mp.mpf(v) for v in p], [mp.mpf(v) for v in q]
  return sum(max(a - mp.exp(eps) * b, 0) for a, b in zip(p, q))


@pytest.mark.parametrize("relation", ["replace_one", "replace_special"])
def test_kary_randomized_response_three_steps(relation):
  noise, k, steps, eps = 0.4, 5, 3, 1.5
  top, rest = 1 - mp.mpf(noise) + mp.mpf(noise) / k, mp.mpf(noise) / k
  p = [top] + [rest] * (k - 1)
  if relation == "replace_one":
    q = [rest, top] + [rest] * (k - 2)
    pairs = [(p, q)]
  else:
    u = [mp.mpf(1) / k] * k
    pairs = [(p, u), (u, p)]
  truth = 0
  for a, b in pairs:  # the product laws of three steps, per direction
    pa = [x * y * z for x in a for y in a for z in a]
    pb = [x * y * z for x in b for y in b for z in b]
    truth = max(truth, _hockey_stick(pa, pb, eps))
  up, low = _delta(SelfComposed(KaryRandomizedResponse(noise, k, relation), steps), eps)
  _bracket(up, low, float(truth), 1e-4)


@pytest.mark.parametrize("a, sens, eps", [(0.5, 3, 0.4), (1.3, 1, 0.2), (0.2, 7, 1.0)])
def test_discrete_laplace_one_step(a, sens, eps):
  xs = range(-200, 200 + sens)
  a_ = mp.mpf(a)
  norm = (1 - mp.exp(-a_)) / (1 + mp.exp(-a_))
  p = [norm * mp.exp(-a_ * abs(x)) for x in xs]
  q = [norm * mp.exp(-a_ * abs(x - sens)) for x in xs]
  truth = _hockey_stick(p, q, eps)
  up, low = _delta(DiscreteLaplace(a, sens), eps)
  _bracket(up, low, float(truth), 1e-4)


# ---------------------------------------------------------------- monotone pairs


def _np_oracle(sf_p, sf_q, eps, lo, hi):
  """``sup_t P(O > t) - e^eps Q(O > t)`` over t in [lo, hi] (and t = -inf)."""
  t = np.linspace(lo, hi, 200001)
  v = sf_p(t) - math.exp(eps) * sf_q(t)
  i = int(np.argmax(v))
  res = optimize.minimize_scalar(
    lambda x: -(sf_p(x) - math.exp(eps) * sf_q(x)),
    bounds=(t[max(i - 1, 0)], t[min(i + 1, t.size - 1)]),
    method="bounded",
    options=dict(xatol=1e-13),
  )
  return max(float(v.max()), -float(res.fun), 1 - math.exp(eps))


@pytest.mark.parametrize("q, scale, eps", [(0.1, 1.0, 0.1), (0.3, 0.5, 0.8)])
def test_poisson_sampled_laplace_one_step(q, scale, eps):
  lap = stats.laplace(scale=scale)
  lap1 = stats.laplace(loc=1.0, scale=scale)
  remove = _np_oracle(
    lambda t: (1 - q) * lap.sf(t) + q * lap1.sf(t), lap.sf, eps, -30 * scale, 1 + 30 * scale
  )
  # add: P = Lap(0), Q = the mixture; the likelihood ratio is decreasing, so the set is {O < t}.
  add = _np_oracle(
    lambda t: lap.cdf(-t),
    lambda t: (1 - q) * lap.cdf(-t) + q * lap1.cdf(-t),
    eps,
    -1 - 30 * scale,
    30 * scale,
  )
  up, low = _delta(PoissonSampled(q, Laplace(scale)), eps)
  _bracket(up, low, max(remove, add), 1e-4)


def test_mixture_of_gaussians_one_step():
  sigma, sens, probs, eps = 1.0, (0.0, 1.0, 2.0), (0.5, 0.3, 0.2), 0.5
  g = [stats.norm(loc=c, scale=sigma) for c in sens]
  g0 = stats.norm(scale=sigma)
  remove = _np_oracle(lambda t: sum(p * d.sf(t) for p, d in zip(probs, g)), g0.sf, eps, -15, 17)
  add = _np_oracle(
    lambda t: g0.cdf(-t), lambda t: sum(p * d.cdf(-t) for p, d in zip(probs, g)), eps, -17, 15
  )
  up, low = _delta(MixtureOfGaussians(sigma, sens, probs), eps)
  _bracket(up, low, max(remove, add), 1e-4)


# ---------------------------------------------------------------- invariants


def test_gaussian_parts_agree_with_the_gaussian_engine():
  """A subsampled Gaussian run through the Gaussian engine (unchanged: the accountant's
  answer is ``pld_epsilon``'s) and through the generic path (a zero-loss event joins it):
  both brackets are certified, so they must overlap."""
  run = SelfComposed(PoissonSampled(0.05, Gaussian(2.0)), 30)
  direct = jaxrdp.pld.pld_epsilon(0.05, 2.0, 30, 1e-5)
  g_up, g_low = _eps(run, 1e-5)
  assert (g_up, g_low) == (float(direct.epsilon), float(direct.epsilon_lower))
  up, low = _eps(Composed((run, EpsilonDelta(0.0))), 1e-5)
  assert low <= g_up and g_low <= up
  assert abs(up - g_up) <= 1e-4 * g_up


def test_broadcast_and_invariants():
  scales = np.array([0.5, 1.0, 2.0, 8.0])
  r = ACCT.epsilon(SelfComposed(Laplace(scales), 3), np.array([[1e-3], [1e-6]]))
  up, low = np.asarray(r.epsilon), np.asarray(r.epsilon_lower)
  assert up.shape == (2, 4)
  assert np.all(np.isfinite(up)) and np.all(low >= 0) and np.all(up >= low)
  assert np.all(np.diff(up, axis=1) < 0)  # more noise, less epsilon
  assert np.all(up[1] > up[0])  # smaller delta, more epsilon
  d = ACCT.delta(
    Composed((Laplace(1.0), KaryRandomizedResponse(0.5, 4.0))), np.array([0.0, 1.0, 50.0])
  )
  du, dl = np.asarray(d.delta), np.asarray(d.delta_lower)
  assert np.all((0 <= dl) & (dl <= du) & (du <= 1)) and du[-1] <= 1e-9


def test_edges_non_private_and_no_op():
  assert _eps(Composed((Laplace(1.0), NonPrivate())), 1e-5)[0] == math.inf
  assert _delta(Composed((Laplace(1.0), NonPrivate())), 3.0) == (1.0, 1.0)
  assert _eps(Composed((Laplace(math.inf), NoOp())), 1e-5) == (0.0, 0.0)
  up, low = _eps(SelfComposed(EpsilonDelta(1.0, 1e-3), 2), 1e-3)  # delta of 2e-3 > 1e-3
  assert up == math.inf
  # Below the round-off floor, a bounded loss still gives a finite (sound) epsilon.
  up, low = _eps(SelfComposed(Laplace(1.0), 2), 1e-15)
  assert 2.0 - 1e-9 <= up <= 2.0 + 1e-3 and low <= 2.0


def test_refusals_name_the_event():
  with pytest.raises(ValueError, match="whole number"):
    ACCT.epsilon(SelfComposed(Laplace(1.0), 2.5), 1e-5)
  with pytest.raises(NotImplementedError, match="replace_one"):
    ACCT.epsilon(PoissonSampled(0.1, Laplace(1.0), "replace_one"), 1e-5)
  with pytest.raises(NotImplementedError, match="PoissonSampled\\(KaryRandomizedResponse\\)"):
    ACCT.epsilon(PoissonSampled(0.1, KaryRandomizedResponse(0.5, 3.0)), 1e-5)


# ---------------------------------------------------------------- dp_accounting


def _dp_accounting_cases():
  from dp_accounting import dp_event as D

  return [
    (D.SelfComposedDpEvent(D.LaplaceDpEvent(1.0), 10), None),
    (D.SelfComposedDpEvent(D.PoissonSampledDpEvent(0.1, D.LaplaceDpEvent(1.0)), 50), None),
    (D.SelfComposedDpEvent(D.DiscreteLaplaceDpEvent(0.5, 2), 5), None),
    (D.SelfComposedDpEvent(D.TruncatedSubsampledGaussianDpEvent(1000, 0.1, 110, 1.0), 2), None),
    (
      D.ComposedDpEvent(
        [D.GaussianDpEvent(2.0), D.LaplaceDpEvent(3.0), D.DiscreteLaplaceDpEvent(1.0, 1)]
      ),
      None,
    ),
  ]


@pytest.mark.parametrize("case", range(5))
def test_against_dp_accounting_pld(case):
  pld = pytest.importorskip("dp_accounting.pld")
  event, _ = _dp_accounting_cases()[case]
  acct = pld.PLDAccountant()
  acct.compose(event)
  theirs = acct.get_epsilon(1e-5)
  up, low = _eps(jaxrdp.events.from_dp_accounting(event), 1e-5)
  # dp_accounting's estimate is pessimistic (an upper bound up to its truncation); ours is
  # certified, within its discretization error of it or tighter, and our lower bound stays below.
  assert low <= theirs * (1 + 1e-9)
  assert up <= theirs * (1 + 2e-4)
  assert up >= theirs * (1 - 5e-3)


def test_truncated_subsampled_gaussian_one_step():
  """dp_accounting's construction (Ganesh et al. 2025, arXiv:2508.15089): with the truncation
  probability ``t`` the pair of a replace-one subsampled Gaussian at ``sigma / 2``, else the
  subsampled Gaussian's, on disjoint outputs, so the curves mix linearly."""
  n, q, batch, sigma, eps = 1000, 0.1, 110, 1.0, 1.0
  t = stats.binom.sf(batch - 1, n - 1, q)
  q2 = stats.binom.sf(batch, n, q) * batch / t / n
  g0, g1 = stats.norm(scale=sigma), stats.norm(loc=1.0, scale=sigma)
  h0, h1, hm = (stats.norm(loc=c, scale=sigma / 2) for c in (0.0, 1.0, -1.0))
  remove = _np_oracle(lambda x: (1 - q) * g0.sf(x) + q * g1.sf(x), g0.sf, eps, -15, 16)
  add = _np_oracle(
    lambda x: g0.cdf(-x), lambda x: (1 - q) * g0.cdf(-x) + q * g1.cdf(-x), eps, -16, 15
  )
  replace = _np_oracle(
    lambda x: (1 - q2) * h0.sf(x) + q2 * h1.sf(x),
    lambda x: (1 - q2) * h0.sf(x) + q2 * hm.sf(x),
    eps,
    -8,
    8,
  )
  truth = (1 - t) * max(remove, add) + t * replace  # the replace pair is symmetric
  up, low = _delta(TruncatedSubsampledGaussian(n, q, batch, sigma), eps)
  _bracket(up, low, truth, 1e-4)


@pytest.mark.parametrize("relation", ["replace_one", "replace_special"])
def test_randomized_response_against_dp_accounting_pld(relation):
  """One step only: dp_accounting's PLD accountant composes a ``SelfComposedDpEvent`` of
  randomized response once, whatever its count (it does not self-compose it, unlike its
  Laplace and Gaussian branches); the three-step oracle above checks the composition."""
  pld = pytest.importorskip("dp_accounting.pld")
  from dp_accounting import dp_event as D
  from dp_accounting import privacy_accountant

  rel = getattr(privacy_accountant.NeighboringRelation, relation.upper())
  event = D.RandomizedResponseDpEvent(0.4, 5)
  acct = pld.PLDAccountant(neighboring_relation=rel)
  acct.compose(event)
  theirs = acct.get_epsilon(1e-5)
  up, low = _eps(jaxrdp.events.from_dp_accounting(event, relation=relation), 1e-5)
  assert low <= theirs * (1 + 1e-9)
  assert theirs * (1 - 5e-3) <= up <= theirs * (1 + 2e-4)


def test_traced_inputs_are_refused_by_the_generic_path():
  import jax

  # (Laplace mechanisms are composed by the JAX engine: tests/test_pld_laplace.py)
  with pytest.raises(TypeError, match="concrete"):
    jax.jit(lambda p: ACCT.epsilon(RandomizedResponse(p), 1e-5).epsilon)(0.75)
