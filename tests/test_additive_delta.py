"""The RDP accountant's additive deltas: EpsilonDelta(delta > 0) and truncated batches.

Oracles: the exact optimal composition of (epsilon, delta)-DP steps (Kairouz, Oh and
Viswanath 2015, arXiv:1311.0776: the k-fold composition of their four-output
randomized-response pair, evaluated here in mpmath), the tight accountant's certified
bracket, and the host search for truncated Poisson batches
(``jaxrdp.dpsgd_epsilon(..., capacity=..., dataset_size=...)``, a separate code path).
"""

import json
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

import jaxrdp
from jaxrdp.events import (
  Composed,
  EpsilonDelta,
  Gaussian,
  PoissonSampled,
  SelfComposed,
  TruncatedSubsampledGaussian,
)
from jaxrdp.rdp._accountant import state_from_dict, state_to_dict

ACCT = jaxrdp.RdpAccountant()
SGM = PoissonSampled(0.01, Gaussian(1.0))


def _kov_delta(k, eps, delta, eps_target):
  """Exact delta(eps_target) of k adaptively composed (eps, delta)-DP steps (mpmath).

  The worst case is k independent copies of the pair that reveals the neighbour with
  probability delta and is otherwise eps-randomized response (KOV 2015, Thm 3.3):
  1 - (1 - delta)^k (1 - H), with H the hockey-stick divergence of k-fold randomized
  response, sum_l C(k, l) [e^{(k-l) eps} - e^{eps_target + l eps}]_+ / (1 + e^eps)^k.
  """
  with mp.workdps(40):
    eps, delta, t = mp.mpf(eps), mp.mpf(delta), mp.mpf(eps_target)
    h = (
      mp.fsum(
        mp.binomial(k, j) * max(mp.mpf(0), mp.e ** ((k - j) * eps) - mp.e ** (t + j * eps))
        for j in range(k + 1)
      )
      / (1 + mp.e**eps) ** k
    )
    return 1 - (1 - delta) ** k * (1 - h)


def _kov_epsilon(k, eps, delta, target):
  """Smallest eps_target with _kov_delta <= target (bisection: delta is decreasing)."""
  lo, hi = mp.mpf(0), mp.mpf(k * eps)
  for _ in range(200):
    mid = (lo + hi) / 2
    lo, hi = (lo, mid) if _kov_delta(k, eps, delta, mid) <= target else (mid, hi)
  return float(hi)


@pytest.mark.parametrize("k, eps, delta", [(1, 1.0, 1e-6), (5, 0.3, 1e-7), (20, 0.1, 1e-8)])
def test_composed_epsilon_delta_steps_are_never_below_the_exact_composition(k, eps, delta):
  event = SelfComposed(EpsilonDelta(eps, delta), k)
  for target in (1e-5, 1e-3):
    got = float(jaxrdp.epsilon_from_event(event, target).epsilon)
    exact = _kov_epsilon(k, eps, delta, target)
    assert exact <= got <= 1.6 * exact + 0.05, (target, got, exact)
    # delta at an epsilon: never below the exact one, at most 1.
    for t in (0.5 * got, got, 2.0 * got):
      d = float(jaxrdp.delta_from_event(event, t).delta)
      assert float(_kov_delta(k, eps, delta, t)) <= d <= 1.0


def test_epsilon_delta_beside_a_gaussian_run_pays_its_delta_as_stated():
  # delta(eps) = delta_mix + (1 - delta_mix) delta_pure(eps), delta_pure from the curve of
  # the run with the step's pure part, composed by hand.
  steps, eps_step, delta_step = 1000, 0.5, 1e-7
  event = Composed((SelfComposed(SGM, steps), EpsilonDelta(eps_step, delta_step)))
  orders = np.asarray(ACCT.orders)
  curve = steps * np.asarray(jaxrdp.mechanisms.sgm_rdp(0.01, 1.0, orders))
  pure = np.asarray(jaxrdp.RdpAccountant().compose(ACCT.init(), EpsilonDelta(eps_step)).rdp)
  for eps in (1.5, 2.5, 4.0):
    d_pure = float(jaxrdp.rdp_to_delta(curve + pure, orders, eps).delta)
    want = delta_step + (1 - delta_step) * d_pure
    got = float(jaxrdp.delta_from_event(event, eps).delta)
    assert want <= got <= want * (1 + 1e-14), eps
  # epsilon: the smallest on the curve whose total delta fits, so at most the pure
  # epsilon at the delta left, and never below the tight accountant's lower bound.
  res = jaxrdp.epsilon_from_event(event, 1e-5)
  left = (1e-5 - delta_step) / (1 - delta_step)
  plain = float(jaxrdp.rdp_to_epsilon(curve + pure, orders, left).epsilon)
  assert float(res.epsilon) == pytest.approx(plain, rel=1e-12)
  tight = jaxrdp.epsilon_from_event(event, 1e-5, accountant="pld")
  assert float(tight.epsilon_lower) <= float(res.epsilon)
  assert float(jaxrdp.delta_from_event(event, float(res.epsilon)).delta) <= 1e-5


def test_sampling_an_infinite_curve_gives_inf_and_keeps_the_shapes():
  traced = jax.jit(
    lambda d, q: ACCT.compose(ACCT.init(), PoissonSampled(q, EpsilonDelta(1.0, d))).rdp
  )
  assert np.all(np.asarray(traced(1e-6, 0.1)) == np.inf)
  assert np.all(np.asarray(traced(1e-6, 0.0)) == 0.0)
  assert np.all(np.isnan(np.asarray(traced(1e-6, jnp.nan))))
  assert traced(1e-6, 0.1).shape == (len(ACCT.orders),)
  # The general bound keeps a scalar event scalar and a grid its shape.
  laplace = jaxrdp.epsilon_from_event(PoissonSampled(0.1, jaxrdp.events.Laplace(1.0)), 1e-5)
  assert laplace.epsilon.shape == ()
  grid = jaxrdp.epsilon_from_event(
    PoissonSampled(np.array([0.05, 0.1]), jaxrdp.events.Laplace(1.0)), 1e-5
  )
  assert grid.epsilon.shape == (2,) and np.all(np.diff(np.asarray(grid.epsilon)) > 0)


def test_delta_used_up_by_the_steps_gives_inf_not_a_number_below_the_truth():
  event = SelfComposed(EpsilonDelta(0.1, 1e-6), 20)  # delta_mix = 2e-5 > 1e-5
  res = jaxrdp.epsilon_from_event(event, 1e-5)
  assert float(res.epsilon) == np.inf and np.isnan(float(res.order))
  assert float(jaxrdp.epsilon_from_event(event, 1e-4).epsilon) < np.inf


N, Q, CAP, SIGMA, STEPS = 60000, 256 / 60000, 420, 1.1, 2000


def test_truncated_batches_agree_with_the_host_search_and_are_sound():
  event = SelfComposed(TruncatedSubsampledGaussian(N, Q, CAP, SIGMA), STEPS)
  state = ACCT.compose(ACCT.init(), event)
  # The term: the overflow probability of n + 1 examples, per step, times the steps.
  eta = jaxrdp.train.truncation_delta(N + 1, Q, CAP, STEPS)
  assert float(state.eta) == pytest.approx(eta, rel=1e-9) and float(state.log_survival) == 0.0
  orders = np.asarray(ACCT.orders)
  curve = STEPS * np.asarray(jaxrdp.mechanisms.sgm_rdp(Q, SIGMA, orders))
  np.testing.assert_allclose(state.rdp, curve)
  got = float(ACCT.get_epsilon(state, 1e-5).epsilon)
  host = jaxrdp.dpsgd_epsilon(Q, SIGMA, STEPS, 1e-5, capacity=CAP, dataset_size=N)
  assert got == pytest.approx(float(host.epsilon), rel=1e-9)
  untruncated = float(jaxrdp.dpsgd_epsilon(Q, SIGMA, STEPS, 1e-5).epsilon)
  assert got > untruncated
  assert float(ACCT.get_delta(state, got).delta) <= 1e-5
  # delta(eps) = delta_rdp(eps) + (1 + e^eps) eta, rounded up; delta_rdp converted from
  # the untruncated run's curve (rdp_to_delta, whose program an earlier test compiled).
  d_rdp = float(jaxrdp.rdp_to_delta(curve, orders, 2.0).delta)
  want = d_rdp + (1 + np.exp(2.0)) * eta
  assert want <= float(ACCT.get_delta(state, 2.0).delta) <= want * (1 + 1e-9)
  tight = jaxrdp.epsilon_from_event(event, 1e-5, accountant="pld")
  assert float(tight.epsilon_lower) <= got
  # A capacity that truncates too often uses delta up: inf.
  small = SelfComposed(TruncatedSubsampledGaussian(N, Q, 300, SIGMA), STEPS)
  assert float(jaxrdp.epsilon_from_event(small, 1e-5).epsilon) == np.inf


def test_a_capacity_of_the_dataset_size_or_more_is_the_poisson_step_exactly():
  a = jaxrdp.epsilon_from_event(
    SelfComposed(TruncatedSubsampledGaussian(50, 0.1, 51, 1.0), 9), 1e-5
  )
  b = jaxrdp.epsilon_from_event(SelfComposed(PoissonSampled(0.1, Gaussian(1.0)), 9), 1e-5)
  assert float(a.epsilon) == pytest.approx(float(b.epsilon), rel=1e-13)


def test_traced_sizes_of_a_truncated_step_are_refused_with_a_reason():
  with pytest.raises(NotImplementedError, match="traced dataset_size, q or batch_size"):
    jax.jit(lambda q: ACCT.compose(ACCT.init(), TruncatedSubsampledGaussian(N, q, CAP, 1.0)).rdp)(Q)


def test_grids_jit_and_grad():
  deltas = np.array([0.0, 1e-8, 1e-7, 1e-6])
  grid = jaxrdp.epsilon_from_event(
    Composed((SelfComposed(SGM, 500), EpsilonDelta(0.2, deltas))), 1e-5
  )
  one = [
    float(
      jaxrdp.epsilon_from_event(
        Composed((SelfComposed(SGM, 500), EpsilonDelta(0.2, d))), 1e-5
      ).epsilon
    )
    for d in deltas
  ]
  np.testing.assert_allclose(grid.epsilon, one, rtol=1e-13)
  assert np.all(np.diff(np.asarray(grid.epsilon)) > 0)

  def eps_of(sigma):
    event = Composed(
      (SelfComposed(PoissonSampled(0.01, Gaussian(sigma)), 500), EpsilonDelta(0.2, 1e-7))
    )
    return ACCT.get_epsilon(ACCT.compose(ACCT.init(), event), 1e-5).epsilon

  assert float(jax.jit(eps_of)(1.0)) == pytest.approx(float(eps_of(1.0)), rel=1e-13)
  g = float(jax.grad(eps_of)(1.0))
  h = 1e-5
  fd = (float(eps_of(1.0 + h)) - float(eps_of(1.0 - h))) / (2 * h)
  assert g < 0 and g == pytest.approx(fd, rel=1e-4)


# One step of the scans below: a Sampled Gaussian step and an (epsilon, delta) step.
STEP = Composed((SGM, EpsilonDelta(0.01, 1e-9)))


def _steps_at_once(state, k):
  """``state`` after ``k`` steps ``STEP``, composed at once: the Sampled Gaussian run with
  one (epsilon, delta) step beside it (the program test_epsilon_delta_beside... compiled),
  then the other ``k - 1`` (epsilon, delta) steps (that of the exact-composition test)."""
  state = ACCT.compose(state, Composed((SelfComposed(SGM, k), EpsilonDelta(0.01, 1e-9))))
  return ACCT.compose(state, SelfComposed(EpsilonDelta(0.01, 1e-9), k - 1))


def test_scan_from_an_additive_state_equals_the_composition():
  want = ACCT.get_epsilon(_steps_at_once(ACCT.init(), 300), 1e-5)
  state, _ = jax.lax.scan(
    lambda s, _: (ACCT.compose(s, STEP), None), ACCT.init(additive=True), None, length=300
  )
  assert float(ACCT.get_epsilon(state, 1e-5).epsilon) == pytest.approx(
    float(want.epsilon), rel=1e-12
  )
  assert float(state.log_survival) == pytest.approx(300 * np.log1p(-1e-9), rel=1e-12)
  # A fresh state without terms keeps the tree it always had (a property of the trace:
  # jax.eval_shape compiles nothing).
  composed = jax.eval_shape(lambda: ACCT.compose(ACCT.init(), SGM))
  assert jax.tree.structure(ACCT.init()) == jax.tree.structure(composed)
  assert ACCT.init(additive=True).has_additive and not ACCT.init().has_additive


def test_a_float64_carry_with_x64_off_is_rounded_up_and_keeps_its_type():
  # With x64 off, in a fresh interpreter: 1000 steps scanned from a fresh state (SGM)
  # and from an additive one (STEP), both carries in one scan (one program to compile;
  # each carry is its own). The exact epsilons of the same 1000 steps composed at once
  # are this process's (float64: the float32 answers must not be below them), from
  # programs that earlier tests compiled (the Sampled Gaussian search of
  # test_truncated_batches..., and _steps_at_once).
  code = """
      import jax, jaxrdp
      from jaxrdp.events import *
      assert not jax.config.jax_enable_x64
      acct = jaxrdp.RdpAccountant()
      steps = [PoissonSampled(0.01, Gaussian(1.0)),
               Composed((PoissonSampled(0.01, Gaussian(1.0)), EpsilonDelta(0.01, 1e-9)))]
      init = (acct.init(additive=False), acct.init(additive=True))
      body = lambda states, _: (tuple(acct.compose(s, e) for s, e in zip(states, steps)), None)
      states, _ = jax.lax.scan(body, init, None, length=1000)
      for s in states:
        print(float(acct.get_epsilon(s, 1e-5).epsilon))
  """
  out = subprocess.run(
    [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600
  )
  assert out.returncode == 0, out.stderr
  got = [float(x) for x in out.stdout.split()]
  exact = [
    float(jaxrdp.epsilon_from_event(SelfComposed(SGM, 1000), 1e-5).epsilon),
    float(ACCT.get_epsilon(_steps_at_once(ACCT.init(), 1000), 1e-5).epsilon),
  ]
  assert len(got) == len(exact), out.stdout
  for g, e in zip(got, exact):
    rel = g / e - 1
    assert 0.0 <= rel <= 1000 * 2.0**-23, rel


def test_checkpoints_keep_the_terms_and_old_ones_still_load():
  # Ten steps of a Sampled Gaussian, an (epsilon, delta) step and a truncated batch
  # (composed from programs that earlier tests compiled).
  trunc = TruncatedSubsampledGaussian(N, Q, CAP, SIGMA)
  state = _steps_at_once(ACCT.compose(ACCT.init(), SelfComposed(trunc, 10)), 10)
  assert float(state.log_survival) < 0.0 < float(state.eta)
  d = json.loads(json.dumps(state_to_dict(state)))
  assert d["format"] == "jaxrdp.AccountantState/2"
  back = state_from_dict(d, expected_orders=ACCT.orders)
  for name in ("rdp", "log_survival", "eta"):
    assert np.array_equal(np.asarray(getattr(back, name)), np.asarray(getattr(state, name)))
  assert float(ACCT.get_epsilon(back, 1e-5).epsilon) == float(ACCT.get_epsilon(state, 1e-5).epsilon)
  # A state without terms (a Gaussian's curve: no Sampled Gaussian kernel to compile).
  old = state_to_dict(ACCT.compose(ACCT.init(), Gaussian(1.0)))
  assert old["format"] == "jaxrdp.AccountantState/1" and not state_from_dict(old).has_additive
  for name, bad in (("log_survival", 1e-3), ("eta", -1e-3)):
    with pytest.raises(ValueError, match=f"saved {name}"):
      state_from_dict({**d, name: float(bad).hex()})
  grid = ACCT.compose(ACCT.init(), EpsilonDelta(0.1, jnp.array([1e-9, 1e-8])))
  with pytest.raises(ValueError, match="only a state of one configuration"):
    state_to_dict(grid)
