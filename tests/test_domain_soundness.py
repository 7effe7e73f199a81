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


def _gaussian_rows():
  """q = 1 compositions (``test_gaussian_compositions_are_gaussian_dp``): ``(q, sigma,
  steps, eps, delta)``, eps around the truth at delta."""
  rng = np.random.default_rng(35)
  n = 7
  sigma = _log_uniform(rng, 0.05, 50.0, n)
  steps = np.round(_log_uniform(rng, 2.0, 2000.0, n))
  delta = _log_uniform(rng, 1e-12, 0.3, n)
  sigma[:3], steps[:3], delta[:3] = [0.5, 0.3, 0.2], [300.0, 40.0, 100.0], [1e-4, 1e-6, 1e-9]
  mu = np.sqrt(steps) / sigma
  eps = np.array([float(_gdp_epsilon(d, m)) for d, m in zip(delta, mu)]) * rng.uniform(0.5, 1.5, n)
  return np.ones(n), sigma, steps, eps, delta


# The configuration of _gaussian_rows beyond the PLD grid (epsilon 3.5e5, where the
# tight accountant falls back to the Renyi-DP bound): the only one it warns about.
_BEYOND_GRID = 5


def _rows(acct):
  """``{group: (q, sigma, steps, eps, delta)}``: every Sampled Gaussian run ``acct`` answers here.

  ``one_step``: ``_draw(34)`` (40 configurations for Renyi DP, 16 for PLD), then
  ``_LARGE``; ``gauss``: :func:`_gaussian_rows`; ``edges``: q = 0, a subnormal q and
  zero steps; ``huge``: delta at epsilon 1e308 (PLD only; no delta given).
  """
  q, sigma, eps, delta = (
    np.concatenate([a, np.array(b, float)])
    for a, b in zip(_draw(seed=34, n=16 if acct == "pld" else 40), zip(*_LARGE))
  )
  edge_q = np.array([0.0, 5e-324, 1e-310, 0.01, 0.01])
  edge_steps = np.array([100.0, 100.0, 100.0, 0.0, 100.0])
  return {
    "one_step": (q, sigma, np.ones(q.size), eps, delta),
    "gauss": _gaussian_rows(),
    "edges": (edge_q, np.ones(5), edge_steps, np.ones(5), np.full(5, 1e-5)),
    "huge": (
      np.array([0.01, 1.0]),
      np.array([1.0, 0.5]),
      np.full(2, 100.0),
      np.full(2, 1e308),
      None,
    ),
  }


def _ask(acct, rows, query, quiet=True):
  """Upper and lower bounds (zeros where there is none) of the rows ``[(q, sigma, steps,
  eps, delta)]``, joined into one ``query`` ("epsilon" or "delta") of ``SelfComposed(
  PoissonSampled(q, Gaussian(sigma)), steps)``: a list of ``(up, low)`` in the order of
  ``rows``. ``quiet``: a RuntimeWarning is an error; else ignored (the PLD accountant
  warns where it falls back to a looser certified bound)."""
  q, sigma, steps = (np.concatenate([r[i] for r in rows]) for i in range(3))
  given = np.concatenate([r[4 if query == "epsilon" else 3] for r in rows])
  event = SelfComposed(PoissonSampled(q, Gaussian(sigma)), steps)
  ask = jaxrdp.epsilon_from_event if query == "epsilon" else jaxrdp.delta_from_event
  with warnings.catch_warnings():
    warnings.simplefilter("error" if quiet else "ignore", RuntimeWarning)
    res = ask(event, given, accountant=acct)
  up = np.asarray(res[0])
  low = np.asarray(res[1]) if acct == "pld" else np.zeros(up.shape)
  ends = np.cumsum([r[0].size for r in rows])[:-1]
  return list(zip(np.split(up, ends), np.split(low, ends)))


def _answer(acct):
  """``{group: (up_e, low_e, up_d, low_d)}`` for the row groups of :func:`_rows` (None
  where a group is not asked), from as few calls as the checks allow."""
  rows = _rows(acct)
  got = {"epsilon": {}, "delta": {}}
  if acct == "rdp":
    for query, names in (
      ("epsilon", ["one_step", "gauss"]),
      ("delta", ["one_step", "gauss", "edges"]),
    ):
      got[query].update(zip(names, _ask(acct, [rows[k] for k in names], query)))
    # The edges' epsilon is asked alone: with no sigma below the quadrature's verified
    # domain the search is compiled without the small-sigma bound (the program most
    # callers run), as it was before the rows were joined.
    (got["epsilon"]["edges"],) = _ask(acct, [rows["edges"]], "epsilon")
  else:
    gauss = rows["gauss"]
    calm = np.arange(gauss[0].size) != _BEYOND_GRID
    part = lambda mask: tuple(c[mask] for c in gauss)  # noqa: E731
    for query, names in (
      ("epsilon", ["one_step", "edges"]),
      ("delta", ["one_step", "edges", "huge"]),
    ):
      *parts, calm_part = _ask(acct, [rows[k] for k in names] + [part(calm)], query)
      got[query].update(zip(names, parts))
      (loud_part,) = _ask(acct, [part(~calm)], query, quiet=False)
      up, low = np.empty(calm.size), np.empty(calm.size)
      (up[calm], low[calm]), (up[~calm], low[~calm]) = calm_part, loud_part
      got[query]["gauss"] = (up, low)
  none = (None, None)
  return {k: (*got["epsilon"].get(k, none), *got["delta"].get(k, none)) for k in rows}, rows


@pytest.fixture(scope="module")
def answers():
  """``answers(acct)``: ``(answers, rows)`` of :func:`_answer`, computed once per module.

  Every Sampled Gaussian run of this file is answered here, a few calls per accountant
  and query, so that each program the accountants compile for them (the Renyi-DP
  order search, the tight accountant's closed form for one step, its jobs, its
  Renyi-DP fallback) compiles once for the file, not once per test: compilation,
  not arithmetic, is what these checks cost. A configuration's answer does not
  depend on the batch it comes in. One step is ``steps = 1`` of a
  ``SelfComposed(PoissonSampled(...))``, the count both accountants give a lone
  ``PoissonSampled``.
  """
  cache = {}

  def get(acct):
    if acct not in cache:
      cache[acct] = _answer(acct)
    return cache[acct]

  return get


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


@pytest.mark.slow  # the file's answers (every configuration, few calls)
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_one_step_over_the_whole_domain(accountant, answers):
  got, rows = answers(accountant)
  n = 16 if accountant == "pld" else 40
  q, sigma, _, eps, delta = (c[:n] for c in rows["one_step"])
  true_e = [_one_step_epsilon(d, a, s) for d, a, s in zip(delta, q, sigma)]
  true_d = [_one_step_delta(e, a, s) for e, a, s in zip(eps, q, sigma)]
  _check(accountant, *(x[:n] for x in got["one_step"]), true_e, true_d)


@pytest.mark.slow  # the file's answers (every configuration, few calls)
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_one_step_beyond_exp_overflow(accountant, answers):
  got, rows = answers(accountant)
  n = len(_LARGE)
  q, sigma, _, eps, delta = (c[-n:] for c in rows["one_step"])
  got = [x[-n:] for x in got["one_step"]]
  true_e = [_one_step_epsilon(d, a, s) for d, a, s in zip(delta, q, sigma)]
  true_d = [_one_step_delta(e, a, s) for e, a, s in zip(eps, q, sigma)]
  _check(accountant, *got, true_e, true_d)
  if accountant == "pld":
    # The tight accountant solves one step exactly: within 1e-9 of the truth.
    np.testing.assert_allclose(got[0], np.array(true_e, float), rtol=1e-9)
    np.testing.assert_allclose(got[2], np.array(true_d, float), rtol=1e-9, atol=1e-300)


@pytest.mark.slow  # the file's answers (every configuration, few calls)
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_gaussian_compositions_are_gaussian_dp(accountant, answers):
  """q = 1: T steps are exactly mu-GDP, also where epsilon is in the hundreds."""
  got, rows = answers(accountant)
  _, sigma, steps, eps, delta = rows["gauss"]
  got = got["gauss"]
  mu = np.sqrt(steps) / sigma
  true_e = [_gdp_epsilon(d, m) for d, m in zip(delta, mu)]
  true_d = [_gdp_delta(e, m) for e, m in zip(eps, mu)]
  _check(accountant, *got, true_e, true_d)
  if accountant == "pld":
    # The tight bound's promise: within 1e-5 relative (epsilon) of the truth where
    # the grid holds the answer (beyond ~1e4 it falls back to the Renyi-DP bound).
    te = np.array(true_e, float)
    held = te < 1e4
    assert np.all(got[0][held] <= te[held] * (1 + 1e-5) + 1e-9), got[0] / te - 1
    assert not held[_BEYOND_GRID]


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


@pytest.mark.slow  # the file's answers (every configuration, few calls)
def test_edges_answer_consistently(answers):
  """q = 0, a subnormal q and zero steps: both accountants answer, never NaN."""
  for acct in ("rdp", "pld"):
    eps, _, delta, _ = answers(acct)[0]["edges"]
    assert not np.any(np.isnan(eps)), (acct, eps)
    # Nothing released, or a rate so small that delta(0) << 1e-5: epsilon is 0.
    np.testing.assert_array_equal(eps[:4], 0.0)
    assert np.all(np.isfinite(delta)), (acct, delta)
    assert np.all(delta[[0, 3]] == 0.0), (acct, delta)


@pytest.mark.slow  # the file's answers (every configuration, few calls)
def test_huge_epsilon_gives_a_finite_delta(answers):
  """Tight delta at epsilon 1e308: at most the Renyi-DP delta there (0), never NaN."""
  _, _, delta, delta_lower = answers("pld")[0]["huge"]
  np.testing.assert_array_equal(delta, 0.0)
  np.testing.assert_array_equal(delta_lower, 0.0)
