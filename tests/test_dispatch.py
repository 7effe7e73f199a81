"""One path from a question to an accountant: events decide, accountants say what they support.

The public functions take an accountant by name or as an object, build the event of
the question (``jaxrdp.events.dpsgd_event``), and ask the accountant whether it can
account it (``supports``): a refusal is generated from that answer, so it names what
is missing and the accountants that can. Unknown options are errors, not dropped.
"""

from __future__ import annotations

import numpy as np
import pytest

import jaxrdp
from jaxrdp.accountants import PldAccountant, RdpAccountant, get_accountant
from jaxrdp.events import (
  Composed,
  EpsilonDelta,
  FixedSizeSampled,
  Gaussian,
  KaryRandomizedResponse,
  Laplace,
  NoOp,
  PoissonSampled,
  SelfComposed,
  ShuffledEpochs,
  TruncatedSubsampledGaussian,
  ZCDp,
  dpsgd_event,
)

Q, SIGMA, STEPS, DELTA = 256 / 60000, 1.1, 1000, 1e-5


def test_an_accountant_object_is_accepted_wherever_a_name_is():
  by_name = jaxrdp.dpsgd_epsilon(Q, SIGMA, STEPS, DELTA, sampling="shuffle")
  by_object = jaxrdp.dpsgd_epsilon(
    Q, SIGMA, STEPS, DELTA, accountant=RdpAccountant(), sampling="shuffle"
  )
  assert float(by_object.epsilon) == float(by_name.epsilon)
  cal_name = jaxrdp.calibrate_noise(3.0, DELTA, Q, STEPS)
  cal_object = jaxrdp.calibrate_noise(3.0, DELTA, Q, STEPS, accountant=RdpAccountant())
  assert float(cal_object.sigma) == float(cal_name.sigma)
  res = jaxrdp.sweep(q=[Q], sigma=[SIGMA], steps=[STEPS], accountant=RdpAccountant())
  assert res.accountant == "rdp"
  np.testing.assert_allclose(
    res.epsilon.ravel(), float(jaxrdp.dpsgd_epsilon(Q, SIGMA, STEPS, DELTA).epsilon), rtol=1e-12
  )
  # An object carries its own orders: the result is that accountant's.
  few = RdpAccountant(orders=(2.0, 4.0, 8.0))
  got = jaxrdp.dpsgd_epsilon(Q, SIGMA, STEPS, DELTA, accountant=few)
  want = jaxrdp.dpsgd_epsilon(Q, SIGMA, STEPS, DELTA, orders=np.array([2.0, 4.0, 8.0]))
  assert float(got.epsilon) == float(want.epsilon)


def test_a_refusal_names_the_real_reason_and_who_can():
  with pytest.raises(NotImplementedError, match="relation='replace_one'.*accountant='rdp' can"):
    jaxrdp.dpsgd_epsilon(Q, SIGMA, STEPS, DELTA, accountant=PldAccountant(), relation="replace_one")
  with pytest.raises(
    NotImplementedError,
    match=r"PoissonSampled\(TruncatedSubsampledGaussian\).*no registered accountant can",
  ):
    jaxrdp.epsilon_from_event(
      PoissonSampled(0.1, TruncatedSubsampledGaussian(1000, 0.1, 200, 1.0)), DELTA
    )
  with pytest.raises(
    NotImplementedError, match=r"PoissonSampled\(KaryRandomizedResponse\).*no registered accountant"
  ):
    jaxrdp.epsilon_from_event(PoissonSampled(0.1, KaryRandomizedResponse(0.5, 3.0)), DELTA)
  with pytest.raises(NotImplementedError, match="ZCDp events; accountant='rdp' can"):
    jaxrdp.epsilon_from_event(ZCDp(0.1), DELTA, accountant="pld")
  with pytest.raises(NotImplementedError, match="relation='replace_one'"):
    jaxrdp.calibrate_noise(3.0, DELTA, Q, STEPS, accountant="pld", relation="replace_one")


def test_a_value_refusal_reads_as_one_sentence_and_names_who_can():
  # EpsilonDelta with delta > 0 is paid beside the RDP curve where it is composed, but
  # refused from its values under sampling (no RDP curve holds it there): unsupported()
  # says so, and the message of the top-level call names the reason, where it sits in
  # the tree, and that no accountant can.
  rdp, pld = get_accountant("rdp"), get_accountant("pld")
  composed = SelfComposed(Composed((Gaussian(1.0), EpsilonDelta(1.0, 1e-6))), 3)
  assert rdp.supports(composed) and pld.supports(composed)
  assert rdp.supports(EpsilonDelta(1.0)) and rdp.supports(EpsilonDelta(1.0, 0.0))
  sampled = SelfComposed(PoissonSampled(0.1, Composed((Gaussian(1.0), EpsilonDelta(1.0, 1e-6)))), 3)
  assert not rdp.supports(sampled) and not pld.supports(sampled)
  assert rdp.supports(PoissonSampled(0.1, EpsilonDelta(1.0, 0.0)))
  with pytest.raises(NotImplementedError) as e:
    jaxrdp.epsilon_from_event(PoissonSampled(0.1, EpsilonDelta(1.0, 1e-6)), DELTA)
  msg = str(e.value)
  assert msg.startswith(
    "the Renyi-DP accountant (accountant='rdp') cannot account EpsilonDelta events with "
    "delta > 0 (in PoissonSampled > EpsilonDelta), got delta = 1e-06: "
  ), msg
  assert "infinite Renyi divergence" in msg and msg.endswith("; no registered accountant can"), msg
  with pytest.raises(
    NotImplementedError, match=r"\(in SelfComposed > PoissonSampled > Composed > EpsilonDelta\)"
  ):
    jaxrdp.delta_from_event(sampled, 1.0)
  with pytest.raises(NotImplementedError, match="EpsilonDelta events with delta > 0"):
    rdp.compose(rdp.init(), sampled)
  # Both answer the composed one; epsilon(delta_target) of one (1, 1e-6)-DP step is 1
  # once delta_target >= 1e-6 (the tight one up to its discretisation; the Renyi-DP one
  # above it, through the pure-DP curve at the delta left).
  res = jaxrdp.epsilon_from_event(EpsilonDelta(1.0, 1e-6), DELTA, accountant="pld")
  assert float(res.epsilon_lower) <= 1.0 <= float(res.epsilon) * (1 + 1e-3)
  res = jaxrdp.epsilon_from_event(EpsilonDelta(1.0, 1e-6), DELTA, accountant="rdp")
  assert 1.0 <= float(res.epsilon) <= 1.01


def test_an_unknown_option_is_an_error():
  with pytest.raises(TypeError, match="rtoll"):
    PldAccountant(rtoll=1e-3)
  with pytest.raises(TypeError, match="rtoll"):
    jaxrdp.pld.pld_epsilon_phases([(Q, SIGMA, STEPS)], DELTA, rtoll=1e-3)
  with pytest.raises(TypeError, match="rtoll"):
    jaxrdp.pld.pld_epsilon(Q, SIGMA, STEPS, DELTA, rtoll=1e-3)


def test_supports_follows_the_structure():
  rdp, pld = get_accountant("rdp"), get_accountant("pld")
  sgm = SelfComposed(PoissonSampled(Q, Gaussian(SIGMA)), STEPS)
  fixed = SelfComposed(FixedSizeSampled(Q, Gaussian(1.0)), 10)
  for event in (sgm, Gaussian(1.0), NoOp(), Composed((sgm, Gaussian(2.0))), fixed):
    assert rdp.supports(event) and pld.supports(event), event
  # Shuffled epochs: both (the tight accountant as the Gaussian composed per epoch).
  assert rdp.supports(ShuffledEpochs(3.0, Gaussian(1.0)))
  assert pld.supports(ShuffledEpochs(3.0, Gaussian(1.0), "replace_one"))
  for event in (
    ZCDp(0.1),
    PoissonSampled(Q, Gaussian(1.0), "replace_one"),
  ):
    assert rdp.supports(event) and not pld.supports(event), event
    assert pld.unsupported(event)
  assert rdp.supports(PoissonSampled(Q, Laplace(1.0)))  # the general Poisson bound
  assert pld.supports(PoissonSampled(Q, Laplace(1.0))) and pld.supports(Laplace(1.0))
  # Gaussians composed on one Poisson sample: one Gaussian (both accountants).
  composed = PoissonSampled(1.0, Composed((Gaussian(1.0), Gaussian(2.0))))
  assert rdp.supports(composed) and pld.supports(composed)
  one = jaxrdp.epsilon_from_event(Gaussian(1.0 / np.sqrt(1.0 + 0.25)), DELTA, accountant="pld")
  both = jaxrdp.epsilon_from_event(composed, DELTA, accountant="pld")
  assert float(both.epsilon) == pytest.approx(float(one.epsilon), rel=1e-9)


def test_dpsgd_event_reads_the_scheme_once():
  assert isinstance(dpsgd_event(Q, SIGMA, STEPS, sampling="shuffle"), ShuffledEpochs)
  fixed = dpsgd_event(Q, SIGMA, STEPS, sampling="fixed")
  assert isinstance(fixed.event, FixedSizeSampled) and fixed.event.relation == "replace_one"
  poisson = dpsgd_event(Q, SIGMA, STEPS, relation="replace_one")
  assert poisson.event.relation == "replace_one"
  with pytest.raises(ValueError, match="sampling must be one of"):
    dpsgd_event(Q, SIGMA, STEPS, sampling="allocated")
  # The samplers own the event of their step.
  from jaxrdp.train import FixedSizeSampler, PoissonSampler, ShuffleSampler

  assert isinstance(PoissonSampler(1000, 0.01, 40).event(1.0), PoissonSampled)
  assert isinstance(FixedSizeSampler(1000, 10).event(1.0), FixedSizeSampled)
  assert isinstance(ShuffleSampler(1000, 10).event(1.0), ShuffledEpochs)


def test_random_allocation_is_a_scheme_of_the_one_call_functions():
  # sampling="allocation": q = 1 / t (epochs of t steps), its event decides (Renyi DP).
  from jaxrdp import cli
  from jaxrdp.events import SAMPLINGS, RandomAllocation

  assert cli._SAMPLINGS == SAMPLINGS
  event = dpsgd_event(1 / 234, 1.1, 234 * 60, sampling="allocation")
  assert isinstance(event, RandomAllocation)
  got = jaxrdp.dpsgd_epsilon(1 / 234, 1.1, 234 * 60, DELTA, sampling="allocation")
  assert float(got.epsilon) == float(jaxrdp.epsilon_from_event(event, DELTA).epsilon)
  # Below Poisson's Renyi-DP epsilon at the same rate (Feldman and Shenfeld 2025).
  assert float(got.epsilon) < float(jaxrdp.dpsgd_epsilon(1 / 234, 1.1, 234 * 60, DELTA).epsilon)
  # The tight accountant accounts it too (tests/test_allocation_pld.py).
  assert jaxrdp.accountants.PldAccountant().supports(event)
