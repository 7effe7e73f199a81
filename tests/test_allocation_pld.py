"""The tight (PLD) accountant on random allocation: brackets against independent references.

* one epoch, t = 2 and 3: the exact delta by quadrature (``allocation_pld_oracle``,
  mpmath, sharing no code with jaxrdp) lies in jaxrdp's ``[delta_lower, delta]``;
* t = 1 is the Gaussian mechanism, whose delta is closed form for any number of epochs:
  both through the dispatch (a block of one step is the Gaussian pair) and with the
  exp-space construction forced on it;
* invariants: the bracket is ordered and narrow, the PLD epsilon is below the Renyi-DP
  epsilon of the same event, k-out-of-t with t = k m is 1-out-of-m over k times the
  epochs, and the answer does not depend on which entry point asked;
* refusals: traced inputs, non-Gaussian inner mechanisms, a q that is not k / t.
"""

from __future__ import annotations

import math

import allocation_pld_oracle as oracle
import jax
import numpy as np
import pytest
from scipy.stats import norm

import jaxrdp
from jaxrdp.events import Gaussian, Laplace, RandomAllocation


def _gaussian_delta(mu, eps):
  return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def _delta(event, eps):
  res = jaxrdp.delta_from_event(event, eps, accountant="pld")
  return float(res.delta), float(res.delta_lower)


@pytest.mark.parametrize(
  "sigma, t, eps",
  # The last two at small sigma and large eps, where a coordinate above the lattice's
  # split (the large cells, summed with the others' coarse sum) carries part of delta.
  [(1.5, 2, 0.5), (1.5, 3, 0.5), (1.0, 3, 1.0), (0.7, 2, 6.0), (0.7, 3, 4.0)],
)
def test_one_epoch_contains_the_quadrature(sigma, t, eps):
  if sigma < 1:
    from jaxrdp.pld._allocation_pld import plan

    h, big_j, y_max = plan(sigma, t)
    assert y_max > 10 * big_j * h  # the split is in use
  if t == 2:
    ref = max(float(oracle.delta(sigma, t, eps, d, dps=20)) for d in ("remove", "add"))
  else:
    ref = max(oracle.delta_float64(sigma, t, eps, d) for d in ("remove", "add"))
  up, low = _delta(RandomAllocation(1.0 / t, Gaussian(sigma), t), eps)
  assert low <= ref <= up
  assert up - low <= 1e-3 * ref


@pytest.mark.parametrize("epochs", [1, 10])
def test_one_step_epochs_are_the_gaussian_mechanism(epochs):
  sigma, eps = 1.0, 1.5
  exact = _gaussian_delta(math.sqrt(epochs) / sigma, eps)
  up, low = _delta(RandomAllocation(1.0, Gaussian(sigma), epochs), eps)
  assert low <= exact <= up
  assert up - low <= 1e-4 * exact


def test_exp_space_construction_at_one_step_contains_the_gaussian(monkeypatch):
  from jaxrdp.pld import _allocation_rule

  monkeypatch.setattr(_allocation_rule, "_block_parts", _allocation_rule._epoch_parts)
  sigma, eps, epochs = 2.0, 0.5, 4
  exact = _gaussian_delta(math.sqrt(epochs) / sigma, eps)
  up, low = _delta(RandomAllocation(1.0, Gaussian(sigma), epochs), eps)
  assert low <= exact <= up
  assert up - low <= 1e-3 * exact


def test_dpsgd_epsilon_bracket_rdp_and_entry_points():
  q, sigma, steps = 1 / 20, 2.0, 20 * 5
  res = jaxrdp.dpsgd_epsilon(q, sigma, steps, 1e-6, sampling="allocation", accountant="pld")
  up, low = float(res.epsilon), float(res.epsilon_lower)
  assert 0 < low <= up <= low * (1 + 1e-3)
  rdp = float(jaxrdp.dpsgd_epsilon(q, sigma, steps, 1e-6, sampling="allocation").epsilon)
  assert up <= rdp
  same = jaxrdp.epsilon_from_event(
    RandomAllocation(q, Gaussian(sigma), steps), 1e-6, accountant="pld"
  )
  assert float(same.epsilon) == up and float(same.epsilon_lower) == low
  d = jaxrdp.dpsgd_delta(q, sigma, steps, up, sampling="allocation", accountant="pld")
  assert float(d.delta_lower) <= float(d.delta) <= 1e-6 * (1 + 1e-9)


@pytest.mark.slow
def test_dpsgd_epsilon_bracket_and_rdp():
  res = jaxrdp.dpsgd_epsilon(1 / 234, 1.1, 234 * 60, 1e-5, sampling="allocation", accountant="pld")
  up, low = float(res.epsilon), float(res.epsilon_lower)
  # pld-accounting 2.0's certified interval: [2.301, 2.383].
  assert 2.301 <= up and low <= 2.383
  assert low <= up <= low * (1 + 1e-3)
  rdp = float(jaxrdp.dpsgd_epsilon(1 / 234, 1.1, 234 * 60, 1e-5, sampling="allocation").epsilon)
  assert up <= rdp
  ev = RandomAllocation(1 / 234, Gaussian(1.1), 234 * 60)
  same = jaxrdp.epsilon_from_event(ev, 1e-5, accountant="pld")
  assert float(same.epsilon) == up and float(same.epsilon_lower) == low


def test_k_out_of_t_blocks():
  # t = k m: k blocks of m steps, i.e. k epochs of 1-out-of-m per epoch.
  k, m, epochs, sigma = 2, 5, 3, 2.0
  a = jaxrdp.epsilon_from_event(
    RandomAllocation(k / (k * m), Gaussian(sigma), k * m * epochs, selected=k),
    1e-6,
    accountant="pld",
  )
  b = jaxrdp.epsilon_from_event(
    RandomAllocation(1 / m, Gaussian(sigma), m * k * epochs), 1e-6, accountant="pld"
  )
  assert float(a.epsilon) == pytest.approx(float(b.epsilon), rel=1e-12)
  rdp = jaxrdp.epsilon_from_event(
    RandomAllocation(k / (k * m), Gaussian(sigma), k * m * epochs, selected=k), 1e-6
  )
  assert float(a.epsilon_lower) <= float(a.epsilon) <= float(rdp.epsilon)


def test_delta_bracket_is_monotone_in_epochs():
  ev1 = RandomAllocation(1 / 20, Gaussian(2.0), 20 * 2)
  ev2 = RandomAllocation(1 / 20, Gaussian(2.0), 20 * 4)
  up1, low1 = _delta(ev1, 1.0)
  up2, low2 = _delta(ev2, 1.0)
  assert 0 <= low1 <= up1 and 0 <= low2 <= up2
  assert low2 >= low1 * (1 - 1e-9) or up2 >= up1  # more epochs never spend less
  assert up2 >= low1


def test_refusals():
  acct = jaxrdp.accountants.PldAccountant()
  assert acct.supports(RandomAllocation(0.1, Gaussian(1.0), 10))
  why = acct.unsupported(RandomAllocation(0.1, Laplace(1.0), 10))
  assert why is not None and "RandomAllocation(Laplace)" in why
  with pytest.raises(NotImplementedError, match="RandomAllocation"):
    jaxrdp.epsilon_from_event(RandomAllocation(0.1, Laplace(1.0), 10), 1e-5, accountant="pld")
  with pytest.raises(ValueError, match="q"):
    jaxrdp.epsilon_from_event(RandomAllocation(0.3, Gaussian(1.0), 10), 1e-5, accountant="pld")

  def traced(sigma):
    ev = RandomAllocation(0.1, Gaussian(sigma), 10)
    return jaxrdp.epsilon_from_event(ev, 1e-5, accountant="pld").epsilon

  with pytest.raises(TypeError, match="concrete"):
    jax.jit(traced)(1.0)


def test_nothing_released():
  up, low = _delta(RandomAllocation(0.0, Gaussian(1.0), 10), 0.5)
  assert up == low == 0.0
  res = jaxrdp.epsilon_from_event(
    RandomAllocation(0.1, Gaussian(np.inf), 10), 1e-5, accountant="pld"
  )
  assert float(res.epsilon) == 0.0


def test_small_sigma_few_steps_gives_a_narrow_bracket_below_the_renyi_dp_bound():
  # At sigma 0.6 the likelihood ratio's tail reaches e^15: the lattice stops at the split
  # (about 1.5e4) and a coordinate above it is summed on geometric cells, so the
  # bracket is narrow (pld-accounting 2.0 at its default accuracy: [17.371, 17.464]).
  res = jaxrdp.dpsgd_epsilon(0.1, 0.6, 100, 1e-5, sampling="allocation", accountant="pld")
  up, low = float(res.epsilon), float(res.epsilon_lower)
  rdp = float(jaxrdp.dpsgd_epsilon(0.1, 0.6, 100, 1e-5, sampling="allocation").epsilon)
  assert 17.371 <= up and low <= 17.464
  assert 0.0 < low <= up <= low * (1 + 1e-3) and up < rdp


def test_a_loose_exp_space_bound_falls_back_to_the_renyi_dp_bound():
  # With t = 2 at sigma 0.7 the spread of the lattice's first cell puts a Q-mass of
  # about 1e-5 at S = 0, an infinite loss of the add direction: the exp-space upper
  # bound on delta at eps = 7 is above the Renyi-DP bound of the same event, which is
  # sound and is returned; the bracket still holds the exact delta (quadrature).
  ev = RandomAllocation(0.5, Gaussian(0.7), 2)
  res = jaxrdp.delta_from_event(ev, 7.0, accountant="pld")
  up, low = float(res.delta), float(res.delta_lower)
  rdp = float(jaxrdp.delta_from_event(ev, 7.0).delta)
  ref = max(float(oracle.delta(0.7, 2, 7.0, d, dps=20)) for d in ("remove", "add"))
  assert up == rdp and 0.0 < low <= ref <= up < 1e-5


def test_the_split_lattice_agrees_with_the_unsplit_one(monkeypatch):
  # Two constructions of the same one-epoch pairs: the lattice split at B (a coordinate
  # above it on geometric cells beside the others' coarse sum) and the lattice to Y_max
  # (forced: the split put at Y_max). Both brackets are certified, so they intersect at
  # every eps, including where a coordinate above B carries much of delta.
  from jaxrdp.pld import _allocation_pld, _allocation_rule

  sigma, t, epochs = 1.0, 8, 2
  h, big_j, y_max = _allocation_pld.plan(sigma, t)
  assert y_max > 10 * big_j * h  # the split is in use
  ev = RandomAllocation(1.0 / t, Gaussian(sigma), t * epochs)
  eps = [3.0, 4.0]
  split = [_delta(ev, e) for e in eps]
  _allocation_rule._epoch_parts.cache_clear()
  monkeypatch.setattr(_allocation_pld, "_split_z", lambda sc, t, z_max: z_max)
  whole = [_delta(ev, e) for e in eps]
  _allocation_rule._epoch_parts.cache_clear()
  for (up, low), (up_w, low_w) in zip(split, whole):
    assert max(low, low_w) <= min(up, up_w)
    assert up - low <= 1e-3 * up
