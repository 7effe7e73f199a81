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
  [(1.5, 2, 0.5), (1.5, 3, 0.5), (1.0, 3, 1.0)],
)
def test_one_epoch_contains_the_quadrature(sigma, t, eps):
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


def test_a_lattice_too_coarse_for_the_event_falls_back_to_the_renyi_dp_bound():
  # At sigma 0.6 the likelihood ratio's tail reaches e^15, so the one-epoch lattice is
  # capped at cells of width 1.5: with t = 10 the spread puts a large mass at S = 0,
  # an infinite loss of the add direction, and the exp-space upper end alone is inf
  # (it was returned as such). The Renyi-DP bound of the same event is also sound:
  # the upper end is now the smaller of the two, finite, and the bracket still holds.
  res = jaxrdp.dpsgd_epsilon(0.1, 0.6, 10, 1e-5, sampling="allocation", accountant="pld")
  up, low = float(res.epsilon), float(res.epsilon_lower)
  rdp = float(jaxrdp.dpsgd_epsilon(0.1, 0.6, 10, 1e-5, sampling="allocation").epsilon)
  assert math.isfinite(up) and 0.0 < low <= up <= rdp
  # The same for delta, never above the Renyi-DP delta at the same epsilon.
  d = jaxrdp.dpsgd_delta(0.1, 0.6, 10, 8.0, sampling="allocation", accountant="pld")
  d_rdp = float(jaxrdp.dpsgd_delta(0.1, 0.6, 10, 8.0, sampling="allocation").delta)
  assert 0.0 <= float(d.delta_lower) <= float(d.delta) <= d_rdp < 1.0
