"""Accounting of each batching scheme and neighbouring relation (jaxrdp.rdp._sampling).

Each scheme's epsilon against an independent computation: dp_accounting's
SampledWithoutReplacementDpEvent under REPLACE_ONE (with sigma / 2) for fixed-size
batches, the closed form ceil(T q) alpha / (2 s^2) for shuffled epochs; the MNIST
table of SAMPLING.md; bad arguments; calibration, sweep and CLI dispatch.
Integer orders keep the kernels cheap where the orders are not the subject.
"""

import math

import numpy as np
import pytest

import jaxrdp
from jaxrdp.events import FixedSizeSampled, Gaussian, SelfComposed, ShuffledEpochs

Q, SIGMA, T, DELTA = 256 / 60000, 1.1, 14063, 1e-5
INT_ORDERS = np.arange(2.0, 257.0)  # SAMPLING.md's table: integer orders 2..256
SMALL_ORDERS = np.array([2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0])


def test_mnist_table_of_the_three_conventions():
  poisson = jaxrdp.dpsgd_epsilon(Q, SIGMA, T, DELTA, INT_ORDERS).epsilon
  # "sigma as given" (jax_privacy's convention) is the sound value at twice the noise.
  as_given = jaxrdp.dpsgd_epsilon(Q, 2 * SIGMA, T, DELTA, INT_ORDERS, sampling="fixed").epsilon
  sound = jaxrdp.dpsgd_epsilon(
    Q, SIGMA, T, DELTA, INT_ORDERS, sampling="fixed", relation="replace_one"
  ).epsilon
  assert float(poisson) == pytest.approx(2.60, abs=0.005)
  assert float(as_given) == pytest.approx(5.24, abs=0.005)
  assert float(sound) == pytest.approx(24.1, abs=0.05)
  # The default relation of "fixed" is replace-one.
  default = jaxrdp.dpsgd_epsilon(Q, SIGMA, T, DELTA, INT_ORDERS, sampling="fixed").epsilon
  assert float(default) == float(sound)


def _dp_accounting_epsilon(event, relation, orders, delta):
  import dp_accounting
  from dp_accounting.rdp import rdp_privacy_accountant as ra

  rel = dp_accounting.NeighboringRelation[relation]
  acc = ra.RdpAccountant(list(orders), rel)
  acc.compose(event)
  return acc.get_epsilon(delta)


@pytest.mark.parametrize("q,sigma,steps", [(0.01, 1.3, 700), (0.05, 3.0, 200), (0.2, 0.9, 17)])
def test_fixed_matches_dp_accounting_replace_one_at_half_sigma(q, sigma, steps):
  import dp_accounting

  ev = dp_accounting.SelfComposedDpEvent(
    dp_accounting.SampledWithoutReplacementDpEvent(
      10**6, int(q * 10**6), dp_accounting.GaussianDpEvent(sigma / 2)
    ),
    steps,
  )
  ref = _dp_accounting_epsilon(ev, "REPLACE_ONE", SMALL_ORDERS, DELTA)
  ours = jaxrdp.dpsgd_epsilon(q, sigma, steps, DELTA, SMALL_ORDERS, sampling="fixed")
  assert float(ours.epsilon) == pytest.approx(ref, rel=1e-9)
  # The event and the accountant protocol give the same number.
  via_event = jaxrdp.epsilon_from_event(
    SelfComposed(FixedSizeSampled(q, Gaussian(sigma)), steps),
    DELTA,
    accountant=jaxrdp.RdpAccountant(SMALL_ORDERS),
  )
  assert float(via_event.epsilon) == pytest.approx(float(ours.epsilon), rel=1e-12)


@pytest.mark.parametrize("relation,factor", [("add_remove", 1.0), ("replace_one", 0.5)])
def test_shuffle_closed_form_and_dp_accounting(relation, factor):
  q, sigma, steps = 0.01, 2.0, 1234  # 12.34 epochs -> 13 Gaussian mechanisms
  epochs = math.ceil(steps * q)
  assert epochs == 13
  s = sigma * factor
  rdp = epochs * SMALL_ORDERS / (2 * s * s)
  closed = jaxrdp.rdp_to_epsilon(rdp, SMALL_ORDERS, DELTA).epsilon
  ours = jaxrdp.dpsgd_epsilon(
    q, sigma, steps, DELTA, SMALL_ORDERS, sampling="shuffle", relation=relation
  )
  assert float(ours.epsilon) == pytest.approx(float(closed), rel=1e-12)
  import dp_accounting

  ev = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(s), epochs)
  ref = _dp_accounting_epsilon(ev, "ADD_OR_REMOVE_ONE", SMALL_ORDERS, DELTA)
  assert float(ours.epsilon) == pytest.approx(ref, rel=1e-9)
  via_event = jaxrdp.epsilon_from_event(
    ShuffledEpochs(steps * q, Gaussian(sigma), relation),
    DELTA,
    accountant=jaxrdp.RdpAccountant(SMALL_ORDERS),
  )
  assert float(via_event.epsilon) == pytest.approx(float(ours.epsilon), rel=1e-12)


def test_poisson_replace_one_is_the_sgm_at_half_sigma():
  a = jaxrdp.dpsgd_epsilon(Q, SIGMA, T, DELTA, SMALL_ORDERS, relation="replace_one").epsilon
  b = jaxrdp.dpsgd_epsilon(Q, SIGMA / 2, T, DELTA, SMALL_ORDERS).epsilon
  assert float(a) == float(b)
  d = jaxrdp.dpsgd_delta(Q, SIGMA, T, 3.0, SMALL_ORDERS, relation="replace_one").delta
  assert float(d) == float(jaxrdp.dpsgd_delta(Q, SIGMA / 2, T, 3.0, SMALL_ORDERS).delta)


def test_poisson_replace_one_pair_is_dominated_by_the_sgm_at_twice_the_sensitivity():
  # The replace-one pair under Poisson sampling, ((1-q) N(0) + q N(1), (1-q) N(0) + q N(-1))
  # (noise std s, clip 1), against the SGM pair at sensitivity 2 (what relation=
  # "replace_one" accounts): a numerical check, by quadrature, of the claim in
  # jaxrdp.rdp._sampling's docstring.
  from scipy import integrate
  from scipy.stats import norm

  def renyi(alpha, log_p, log_r):
    f = lambda x: np.exp(alpha * log_p(x) + (1 - alpha) * log_r(x))
    return math.log(integrate.quad(f, -40, 40, limit=400, points=[-1, 0, 1, 2])[0]) / (alpha - 1)

  for q in (0.05, 0.3):
    for s in (1.0, 2.0):
      for alpha in (2.0, 6.0):
        mix = lambda x, m: np.logaddexp(
          math.log1p(-q) + norm.logpdf(x, 0, s), math.log(q) + norm.logpdf(x, m, s)
        )
        pair = renyi(alpha, lambda x: mix(x, 1.0), lambda x: mix(x, -1.0))
        sgm = float(jaxrdp.mechanisms.sgm_rdp(q, s / 2, alpha))
        assert pair <= sgm * (1 + 1e-6)


@pytest.mark.parametrize(
  "kwargs,name",
  [
    (dict(sampling="uniform"), "sampling"),
    (dict(relation="substitute"), "relation"),
    (dict(sampling="fixed", relation="add_remove"), "add_remove"),
  ],
)
def test_bad_arguments_name_the_argument(kwargs, name):
  for call in (
    lambda: jaxrdp.dpsgd_epsilon(Q, SIGMA, 10, DELTA, **kwargs),
    lambda: jaxrdp.dpsgd_delta(Q, SIGMA, 10, 1.0, **kwargs),
    lambda: jaxrdp.calibrate_noise(1.0, DELTA, Q, 10, **kwargs),
    lambda: jaxrdp.sweep(q=Q, sigma=SIGMA, steps=10, **kwargs),
  ):
    with pytest.raises(ValueError, match=name):
      call()


def test_events_check_their_relation():
  with pytest.raises(ValueError, match="replace-one"):
    FixedSizeSampled(0.1, Gaussian(1.0), "add_remove")
  with pytest.raises(ValueError, match="relation must be one of"):
    ShuffledEpochs(1.0, Gaussian(1.0), "other")
  with pytest.raises(TypeError, match="inner"):
    ShuffledEpochs(1.0, 3.0)
  with pytest.raises(ValueError, match="gamma"):
    jaxrdp.epsilon_from_event(FixedSizeSampled(1.5, Gaussian(1.0)), DELTA)


def test_truncated_poisson_epsilon_pays_the_truncation_term():
  from jaxrdp.train import truncated_poisson_delta, truncation_delta

  n, q, steps, sigma = 1000, 0.05, 300, 1.0
  plain = float(jaxrdp.dpsgd_epsilon(q, sigma, steps, DELTA, SMALL_ORDERS).epsilon)
  for capacity in (1000, 120, 110):
    eta = truncation_delta(n + 1, q, capacity, steps)
    res = jaxrdp.dpsgd_epsilon(
      q, sigma, steps, DELTA, SMALL_ORDERS, capacity=capacity, dataset_size=n
    )
    eps = float(res.epsilon)
    assert eps >= plain
    # Independently: the untruncated delta at this epsilon (the inverse conversion),
    # plus the truncation term (1 + e^eps) eta, stays within DELTA (up to the
    # round trip epsilon -> delta, 1e-9).
    d_untruncated = float(jaxrdp.dpsgd_delta(q, sigma, steps, eps, SMALL_ORDERS).delta)
    assert truncated_poisson_delta(eta, eps, d_untruncated) <= DELTA * (1 + 1e-9)
    if eta > 1e-12:
      assert eps > plain
  with pytest.raises(ValueError, match="capacity 100 is too small.*capacity 1[0-9][0-9] would do"):
    jaxrdp.dpsgd_epsilon(q, sigma, steps, DELTA, SMALL_ORDERS, capacity=100, dataset_size=n)
  with pytest.raises(ValueError, match="capacity"):
    jaxrdp.dpsgd_epsilon(q, sigma, steps, DELTA, capacity=5)
  with pytest.raises(ValueError, match="capacity"):
    jaxrdp.dpsgd_epsilon(q, sigma, steps, DELTA, capacity=5, dataset_size=n, sampling="shuffle")


@pytest.mark.parametrize("sampling", ["fixed", "shuffle"])
def test_calibrations_meet_the_budget(sampling):
  q, steps = 0.01, 500
  res = jaxrdp.calibrate_noise(4.0, DELTA, q, steps, SMALL_ORDERS, sampling=sampling)
  eps = jaxrdp.dpsgd_epsilon(q, res.sigma, steps, DELTA, SMALL_ORDERS, sampling=sampling).epsilon
  above = jaxrdp.dpsgd_epsilon(
    q, res.sigma * (1 - 1e-6), steps, DELTA, SMALL_ORDERS, sampling=sampling
  ).epsilon
  assert bool(res.feasible) and float(eps) <= 4.0 < float(above)
  st = jaxrdp.calibrate_steps(4.0, DELTA, q, float(res.sigma), SMALL_ORDERS, sampling=sampling)
  assert st.steps >= steps
  e1 = jaxrdp.dpsgd_epsilon(q, res.sigma, st.steps, DELTA, SMALL_ORDERS, sampling=sampling)
  e2 = jaxrdp.dpsgd_epsilon(q, res.sigma, st.steps + 1, DELTA, SMALL_ORDERS, sampling=sampling)
  assert float(e1.epsilon) <= 4.0 < float(e2.epsilon)
  rate = jaxrdp.calibrate_sampling_rate(
    4.0, DELTA, float(res.sigma), steps, SMALL_ORDERS, sampling=sampling
  )
  assert float(rate.q) >= q * (1 - 1e-6)
  e3 = jaxrdp.dpsgd_epsilon(rate.q, res.sigma, steps, DELTA, SMALL_ORDERS, sampling=sampling)
  assert float(e3.epsilon) <= 4.0


@pytest.mark.parametrize("sampling", ["fixed", "shuffle"])
def test_sweep_equals_dpsgd_epsilon(sampling):
  qs, sigmas, steps = np.array([0.01, 0.03]), np.array([1.0, 2.0]), np.array([100.0, 250.0])
  res = jaxrdp.sweep(
    q=qs,
    sigma=sigmas,
    steps=steps,
    delta=DELTA,
    orders=SMALL_ORDERS,
    sampling=sampling,
    progress=False,
  )
  ref = jaxrdp.dpsgd_epsilon(
    qs[:, None, None, None],
    sigmas[None, :, None, None],
    steps[None, None, :, None],
    DELTA,
    SMALL_ORDERS,
    sampling=sampling,
  )
  np.testing.assert_allclose(res.epsilon, np.asarray(ref.epsilon), rtol=1e-14)


def test_cli_sampling_and_relation(capsys, monkeypatch):
  import json

  from jaxrdp.cli import main

  monkeypatch.setenv("JAXRDP_CACHE_DIR", "")
  base = [
    "epsilon",
    "--dataset-size",
    "1000",
    "--batch-size",
    "10",
    "--sigma",
    "1.0",
    "--steps",
    "300",
    "--json",
  ]
  assert main(base + ["--sampling", "shuffle", "--relation", "replace_one"]) == 0
  (rec,) = json.loads(capsys.readouterr().out)
  ref = jaxrdp.dpsgd_epsilon(0.01, 1.0, 300, DELTA, sampling="shuffle", relation="replace_one")
  assert rec["epsilon"] == pytest.approx(float(ref.epsilon), rel=1e-12)
  assert main(base + ["--capacity", "40"]) == 0
  (rec,) = json.loads(capsys.readouterr().out)
  ref = jaxrdp.dpsgd_epsilon(0.01, 1.0, 300, DELTA, capacity=40, dataset_size=1000)
  assert rec["epsilon"] == pytest.approx(float(ref.epsilon), rel=1e-12)
  assert main(base + ["--sampling", "fixed", "--relation", "add_remove"]) == 2
  assert "--relation" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs", [dict(relation="replace_one")])
def test_other_accountants_refuse_the_other_schemes(kwargs):
  # The tight accountant composes Poisson-sampled Gaussians under add/remove, fixed-size
  # batches under replace-one (tests/test_fixed_size_pld.py) and shuffled epochs
  # (tests/test_shuffle_bracket.py); the other
  # schemes are refused before anything is computed, never quoted with its number.
  calls = (
    lambda: jaxrdp.dpsgd_epsilon(Q, SIGMA, 10, DELTA, accountant="pld", **kwargs),
    lambda: jaxrdp.dpsgd_delta(Q, SIGMA, 10, 1.0, accountant="pld", **kwargs),
    lambda: jaxrdp.calibrate_noise(1.0, DELTA, Q, 10, accountant="pld", **kwargs),
    lambda: jaxrdp.calibrate_steps(1.0, DELTA, Q, SIGMA, accountant="pld", **kwargs),
    lambda: jaxrdp.calibrate_sampling_rate(1.0, DELTA, SIGMA, 10, accountant="pld", **kwargs),
    lambda: jaxrdp.sweep(q=Q, sigma=SIGMA, steps=10, accountant="pld", **kwargs),
  )
  for call in calls:
    # The refusal is the tight accountant's own answer (its supports), naming who can.
    with pytest.raises(NotImplementedError, match="cannot account.*accountant='rdp' can"):
      call()


def test_poisson_replace_one_calibrations_are_the_sgm_at_half_sigma():
  q, steps = 0.01, 500
  noise = jaxrdp.calibrate_noise(2.0, DELTA, q, steps, SMALL_ORDERS, relation="replace_one")
  half = jaxrdp.calibrate_noise(2.0, DELTA, q, steps, SMALL_ORDERS)
  assert float(noise.sigma) == 2.0 * float(half.sigma)
  st = jaxrdp.calibrate_steps(2.0, DELTA, q, 2.0, SMALL_ORDERS, relation="replace_one")
  assert float(st.steps) == float(jaxrdp.calibrate_steps(2.0, DELTA, q, 1.0, SMALL_ORDERS).steps)
  e = jaxrdp.dpsgd_epsilon(q, 2.0, st.steps, DELTA, SMALL_ORDERS, relation="replace_one")
  assert float(e.epsilon) <= 2.0


def test_edges_of_float64_never_report_less_than_the_bound():
  # sigma beyond 1e154 (sigma^2 overflows): a positive RDP, never 0.
  for sampling in ("fixed", "shuffle"):
    event = jaxrdp.events.dpsgd_event(0.5, 1e155, 10.0, sampling=sampling, relation="replace_one")
    rdp = jaxrdp.rdp._sampling.dpsgd_scheme(event).rdp_f64(0.5, 1e155, 10.0, SMALL_ORDERS)
    assert np.all(np.asarray(rdp) > 0)
  # The Gaussian curve of shuffling is rounded up, and finite where sigma^2 underflows:
  # alpha / (2 sigma^2) at sigma = 1e-154 is 1e308 at order 2, 1.5e308 at 3, inf beyond.
  g = np.asarray(jaxrdp.rdp._sampling._gaussian_rdp_f64(1e-154, SMALL_ORDERS))
  assert g[0] >= 1e308 and g[1] >= 1.5e308 and np.all(np.isfinite(g[:2]))
  assert np.all(np.isinf(g[2:]))
  # Subnormal q and steps are not read as 0: T > 0 steps on a non-empty batch start an epoch.
  one_epoch = jaxrdp.dpsgd_epsilon(0.5, 1.0, 1.0, DELTA, SMALL_ORDERS, sampling="shuffle")
  tiny = jaxrdp.dpsgd_epsilon(1e-310, 1.0, 5e-324, DELTA, SMALL_ORDERS, sampling="shuffle")
  assert float(tiny.epsilon) == float(one_epoch.epsilon)
  # No complete epoch of 1 / q = inf batches: the trivial lower bound, never NaN.
  assert float(tiny.epsilon_lower) == 0.0
  assert (
    float(jaxrdp.dpsgd_epsilon(1e-310, 0.0, 100, DELTA, SMALL_ORDERS, sampling="fixed").epsilon)
    == np.inf
  )
  ev = ShuffledEpochs(5e-324, Gaussian(1.0))
  acct = jaxrdp.RdpAccountant(SMALL_ORDERS)
  assert float(jaxrdp.epsilon_from_event(ev, DELTA, accountant=acct).epsilon) == float(
    one_epoch.epsilon
  )


def test_cli_refuses_another_accountant_with_another_scheme(capsys, monkeypatch):
  from jaxrdp.cli import main

  monkeypatch.setenv("JAXRDP_CACHE_DIR", "")
  args = ["epsilon", "--q", "0.01", "--sigma", "1.0", "--steps", "10", "--accountant", "pld"]
  # Poisson batches under replace-one: the Renyi-DP accountant's alone.
  assert main(args + ["--relation", "replace_one"]) == 2
  assert "--accountant" in capsys.readouterr().err


def test_truncated_poisson_lower_bound_pays_the_truncation_term():
  # The tight answer is read at a delta' below delta; its lower bound must hold for the
  # truncated run at delta, so it is read at delta + (1 + e^eps) eta instead: at most
  # the untruncated lower bound there (independently computed), and below the upper.
  from jaxrdp.train import truncation_delta

  n, q, steps, sigma, capacity = 1000, 0.05, 300, 2.0, 98
  eta = truncation_delta(n + 1, q, capacity, steps)
  assert 1e-3 * DELTA < eta < 0.1 * DELTA
  res = jaxrdp.dpsgd_epsilon(
    q, sigma, steps, DELTA, accountant="pld", capacity=capacity, dataset_size=n
  )
  d_low = DELTA + (1 + np.exp(float(res.epsilon))) * eta
  untruncated = jaxrdp.dpsgd_epsilon(q, sigma, steps, d_low, accountant="pld")
  assert float(res.epsilon_lower) <= float(untruncated.epsilon_lower) * (1 + 1e-9)
  assert 0 < float(res.epsilon_lower) <= float(res.epsilon)
