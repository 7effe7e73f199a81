"""Soundness of every accountant over the whole domain, against exact references.

The upper bound of each accountant must never be below the truth, and a certified
lower bound never above it, for epsilon from 1e-6 to 1e4, delta from 1e-300 to
1 - 1e-16 and sigma from 1e-3 to 1e4, including where e^epsilon leaves float64
(epsilon above 709.78), where the answers used to collapse (a delta of 0 at
epsilon 800 whose truth is 0.74, a tight epsilon of 709.78 whose truth is 1044.8).

The references are exact and share no code with jaxrdp:

* one Sampled Gaussian step: the hockey-stick divergence in each direction at 50
  digits from the Gaussian tails at the inverse of the privacy loss
  (``pld_oracle``'s pair), its root in epsilon by bisection in mpmath;
* q = 1: T Gaussian steps are exactly mu-GDP with mu = sqrt(T) / sigma
  (Dong, Roth, Su 2019, arXiv:1905.02383, Cor. 2.13): ``delta(eps) =
  Phi(-eps / mu + mu / 2) - e^eps Phi(-eps / mu - mu / 2)``;
* Laplace and binary randomized response: their closed-form privacy profiles.

The draws use a fixed seed and were not used to tune anything.
"""

from __future__ import annotations

import warnings

import mpmath as mp
import numpy as np
import pytest
from pld_oracle import _pair

import jaxrdp
from jaxrdp.events import Gaussian, Laplace, PoissonSampled, RandomizedResponse, SelfComposed

_DPS = 50
# The references are exact to far below this; it only absorbs the conversion of
# the 50-digit truth to a float (half an ulp).
_SLACK = 1e-15


def _one_step_delta(eps, q, sigma):
  """Add/remove delta of one Sampled Gaussian step at ``eps`` (mpmath, 50 digits)."""
  with mp.workdps(_DPS):
    q, s, eps = mp.mpf(q), mp.mpf(sigma), mp.mpf(eps)
    best = mp.mpf(0)
    for direction in ("remove", "add"):
      _, abar, _, bbar, _, (lmin, lmax), inv = _pair(q, s, direction)
      if eps >= lmax:
        continue
      if eps <= lmin:
        best = max(best, 1 - mp.exp(eps))
        continue
      t = inv(eps)
      best = max(best, abar(t) - mp.exp(eps) * bbar(t))
    return best


def _one_step_epsilon(delta, q, sigma):
  """Smallest epsilon with ``delta(eps) <= delta`` (mpmath bisection to 1e-30 relative)."""
  with mp.workdps(_DPS):
    delta = mp.mpf(delta)
    if _one_step_delta(0, q, sigma) <= delta:
      return mp.mpf(0)
    lo, hi = mp.mpf(0), mp.mpf(1)
    while _one_step_delta(hi, q, sigma) > delta:
      lo, hi = hi, 2 * hi
    while hi - lo > mp.mpf(10) ** -30 * hi:
      mid = (lo + hi) / 2
      lo, hi = (mid, hi) if _one_step_delta(mid, q, sigma) > delta else (lo, mid)
    return hi


def _gdp_delta(eps, mu):
  with mp.workdps(_DPS):
    eps, mu = mp.mpf(eps), mp.mpf(mu)
    return mp.ncdf(-eps / mu + mu / 2) - mp.exp(eps) * mp.ncdf(-eps / mu - mu / 2)


def _gdp_epsilon(delta, mu):
  with mp.workdps(_DPS):
    delta = mp.mpf(delta)
    if _gdp_delta(0, mu) <= delta:
      return mp.mpf(0)
    lo, hi = mp.mpf(0), mp.mpf(1)
    while _gdp_delta(hi, mu) > delta:
      lo, hi = hi, 2 * hi
    while hi - lo > mp.mpf(10) ** -30 * hi:
      mid = (lo + hi) / 2
      lo, hi = (mid, hi) if _gdp_delta(mid, mu) > delta else (lo, mid)
    return hi


def _log_uniform(rng, lo, hi, n):
  return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def _draw(seed, n):
  rng = np.random.default_rng(seed)
  q = _log_uniform(rng, 1e-8, 1.0, n)
  q[rng.random(n) < 0.3] = 1.0
  sigma = _log_uniform(rng, 1e-3, 1e4, n)
  eps = _log_uniform(rng, 1e-6, 1e4, n)
  delta = _log_uniform(rng, 1e-300, 0.5, n)
  delta[rng.random(n) < 0.15] = 1.0 - 1e-16
  return q, sigma, eps, delta


def _results(acct, event, delta, eps):
  with warnings.catch_warnings():
    # The PLD accountant warns where it falls back to a looser certified bound.
    warnings.simplefilter("ignore", RuntimeWarning)
    e = jaxrdp.epsilon_from_event(event, delta, accountant=acct)
    d = jaxrdp.delta_from_event(event, eps, accountant=acct)
  zero = np.zeros(np.shape(delta))
  return (
    np.asarray(e.epsilon),
    np.asarray(getattr(e, "epsilon_lower", zero)),
    np.asarray(d.delta),
    np.asarray(getattr(d, "delta_lower", zero)),
  )


def _check(label, up_e, low_e, up_d, low_d, true_e, true_d):
  bad = []
  for i, (te, td) in enumerate(zip(true_e, true_d)):
    te, td = float(te), float(td)
    if not up_e[i] >= te * (1 - _SLACK):
      bad.append(f"{label}[{i}] epsilon {up_e[i]!r} < truth {te!r}")
    if not low_e[i] <= te * (1 + _SLACK):
      bad.append(f"{label}[{i}] epsilon_lower {low_e[i]!r} > truth {te!r}")
    if not up_d[i] >= td * (1 - _SLACK):
      bad.append(f"{label}[{i}] delta {up_d[i]!r} < truth {td!r}")
    if not low_d[i] <= td * (1 + _SLACK):
      bad.append(f"{label}[{i}] delta_lower {low_d[i]!r} > truth {td!r}")
    if not np.isfinite(up_e[i]):
      bad.append(f"{label}[{i}] epsilon {up_e[i]!r} where the truth is {te!r}")
  for name, x in (("epsilon", up_e), ("delta", up_d), ("lower", low_e), ("lower", low_d)):
    if np.any(np.isnan(x)) or np.any(x < 0) or (name == "delta" and np.any(x > 1)):
      bad.append(f"{label}: {name} has NaN or values out of range: {x}")
  assert not bad, "\n".join(bad)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_one_step_over_the_whole_domain(accountant):
  q, sigma, eps, delta = _draw(seed=34, n=16 if accountant == "pld" else 40)
  event = PoissonSampled(q, Gaussian(sigma))
  got = _results(accountant, event, delta, eps)
  true_e = [_one_step_epsilon(d, a, s) for d, a, s in zip(delta, q, sigma)]
  true_d = [_one_step_delta(e, a, s) for e, a, s in zip(eps, q, sigma)]
  _check(accountant, *got, true_e, true_d)


# Where e^epsilon leaves float64: the cases that used to collapse to 709.78 or 0.
_LARGE = [
  # (q, sigma, epsilon, delta)
  (1.0, 0.03, 696.0, 1e-5),
  (1.0, 0.024, 800.0, 1e-5),
  (1.0, 0.0245818, 800.0, 1e-10),
  (1.0, 0.0245818, 1000.0, 0.1),
  (1.0, 0.0245818, 709.9, 0.5),
  (0.5, 0.02, 710.0, 0.3),
  (0.01, 0.02, 709.0, 1e-3),
  (0.9, 0.015, 2000.0, 1e-12),
]


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_one_step_beyond_exp_overflow(accountant):
  q, sigma, eps, delta = (np.array(c) for c in zip(*_LARGE))
  got = _results(accountant, PoissonSampled(q, Gaussian(sigma)), delta, eps)
  true_e = [_one_step_epsilon(d, a, s) for d, a, s in zip(delta, q, sigma)]
  true_d = [_one_step_delta(e, a, s) for e, a, s in zip(eps, q, sigma)]
  _check(accountant, *got, true_e, true_d)
  if accountant == "pld":
    # The tight accountant solves one step exactly: within 1e-9 of the truth.
    np.testing.assert_allclose(got[0], np.array(true_e, float), rtol=1e-9)
    np.testing.assert_allclose(got[2], np.array(true_d, float), rtol=1e-9, atol=1e-300)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_gaussian_compositions_are_gaussian_dp(accountant):
  """q = 1: T steps are exactly mu-GDP, also where epsilon is in the hundreds."""
  rng = np.random.default_rng(35)
  n = 7
  sigma = _log_uniform(rng, 0.05, 50.0, n)
  steps = np.round(_log_uniform(rng, 2.0, 2000.0, n))
  delta = _log_uniform(rng, 1e-12, 0.3, n)
  sigma[:3], steps[:3], delta[:3] = [0.5, 0.3, 0.2], [300.0, 40.0, 100.0], [1e-4, 1e-6, 1e-9]
  mu = np.sqrt(steps) / sigma
  eps = np.array([float(_gdp_epsilon(d, m)) for d, m in zip(delta, mu)]) * rng.uniform(0.5, 1.5, n)
  event = SelfComposed(PoissonSampled(1.0, Gaussian(sigma)), steps)
  got = _results(accountant, event, delta, eps)
  true_e = [_gdp_epsilon(d, m) for d, m in zip(delta, mu)]
  true_d = [_gdp_delta(e, m) for e, m in zip(eps, mu)]
  _check(accountant, *got, true_e, true_d)
  if accountant == "pld":
    # The tight bound's promise: within 1e-5 relative (epsilon) of the truth where
    # the grid holds the answer (beyond ~1e4 it falls back to the Renyi-DP bound).
    te = np.array(true_e, float)
    held = te < 1e4
    assert np.all(got[0][held] <= te[held] * (1 + 1e-5) + 1e-9), got[0] / te - 1


def _laplace_delta(eps, scale):
  # One Laplace step of scale b (sensitivity 1): delta = 1 - e^{(eps - 1/b) / 2} below 1/b.
  with mp.workdps(_DPS):
    eps0 = 1 / mp.mpf(scale)
    return max(mp.mpf(0), 1 - mp.exp((mp.mpf(eps) - eps0) / 2))


def _rr_delta(eps, p):
  # Binary randomized response, truthful with probability p >= 1/2.
  with mp.workdps(_DPS):
    p = mp.mpf(p)
    return max(mp.mpf(0), p - mp.exp(mp.mpf(eps)) * (1 - p))


def _root(fn, delta):
  with mp.workdps(_DPS):
    delta = mp.mpf(delta)
    if fn(0) <= delta:
      return mp.mpf(0)
    lo, hi = mp.mpf(0), mp.mpf(1)
    while fn(hi) > delta:
      lo, hi = hi, 2 * hi
    while hi - lo > mp.mpf(10) ** -30 * hi:
      mid = (lo + hi) / 2
      lo, hi = (mid, hi) if fn(mid) > delta else (lo, mid)
    return hi


@pytest.mark.parametrize("mechanism", ["laplace", "randomized_response"])
def test_other_mechanisms_rdp_bound_above_truth(mechanism):
  """The RDP accountant's answers for one step of these mechanisms bound the exact profile."""
  rng = np.random.default_rng(36)
  n = 24
  delta = _log_uniform(rng, 1e-300, 0.5, n)
  eps = _log_uniform(rng, 1e-6, 1e4, n)
  if mechanism == "laplace":
    param = _log_uniform(rng, 1e-3, 1e4, n)
    event, profile = Laplace(param), _laplace_delta
  else:
    param = rng.uniform(0.5, 1.0 - 1e-9, n)
    event, profile = RandomizedResponse(param), _rr_delta
  got = _results("rdp", event, delta, eps)
  true_e = [_root(lambda e, p=p: profile(e, p), d) for d, p in zip(delta, param)]
  true_d = [profile(e, p) for e, p in zip(eps, param)]
  _check(mechanism, *got, true_e, true_d)


def test_edges_answer_consistently():
  """q = 0, a subnormal q and zero steps: both accountants answer, never NaN."""
  q = np.array([0.0, 5e-324, 1e-310, 0.01, 0.01])
  steps = np.array([100.0, 100.0, 100.0, 0.0, 100.0])
  for acct in ("rdp", "pld"):
    e = jaxrdp.dpsgd_epsilon(q, 1.0, steps, 1e-5, accountant=acct)
    assert not np.any(np.isnan(np.asarray(e.epsilon))), (acct, e)
    # Nothing released, or a rate so small that delta(0) << 1e-5: epsilon is 0.
    np.testing.assert_array_equal(np.asarray(e.epsilon)[:4], 0.0)
    d = jaxrdp.dpsgd_delta(q, 1.0, steps, 1.0, accountant=acct)
    assert np.all(np.isfinite(np.asarray(d.delta))), (acct, d)
    assert np.all(np.asarray(d.delta)[[0, 3]] == 0.0), (acct, d)


def test_huge_epsilon_gives_a_finite_delta():
  """Tight delta at epsilon 1e308: at most the Renyi-DP delta there (0), never NaN."""
  d = jaxrdp.dpsgd_delta([0.01, 1.0], [1.0, 0.5], 100, 1e308, accountant="pld")
  np.testing.assert_array_equal(np.asarray(d.delta), 0.0)
  np.testing.assert_array_equal(np.asarray(d.delta_lower), 0.0)
