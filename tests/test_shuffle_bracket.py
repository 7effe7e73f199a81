"""Shuffled batches answer with a bracket: the sound upper bound and a certified lower bound.

``jaxrdp.dpsgd_epsilon(..., sampling="shuffle")`` returns ``epsilon`` (no amplification:
Renyi DP, or the tight epsilon of the Gaussian composed per epoch) and
``epsilon_lower`` (Chua et al. 2024, arXiv:2403.17673, over the complete epochs).

References, none sharing code with jaxrdp: the exact Gaussian mechanism (scipy, solved
by brentq), where shuffling is exactly known (one batch per epoch); the true
hockey-stick divergence of the lower bound's pair of output distributions, by a 2-D
quadrature (t = 2) and by Monte Carlo over several epochs, which no valid lower bound
built from that pair may exceed; a simulation of the mechanism itself (permutation,
batches with a short last one) for the closed-form event probabilities; the bound's
events in mpmath (tests/shuffle_oracle.py); dp_accounting for Poisson sampling.
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest
import shuffle_oracle as oracle
from scipy import optimize, stats

import jaxrdp
from jaxrdp.accountants import DeltaBracket, EpsilonBracket, PldAccountant
from jaxrdp.cli import main
from jaxrdp.events import (
  Composed,
  Gaussian,
  PoissonSampled,
  SelfComposed,
  ShuffledEpochs,
  event_delta_lower_bound,
  event_epsilon_lower_bound,
)
from jaxrdp.mechanisms import shuffle_epsilon_lower_bound

ROOT = pathlib.Path(__file__).resolve().parents[1]


def gaussian_epsilon(mu, delta):
  """Exact epsilon of the Gaussian mechanism of sensitivity over noise ``mu`` (scipy)."""

  def gap(eps):
    return (
      stats.norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu) - delta
    )

  return optimize.brentq(gap, 0.0, 200.0, xtol=1e-14, rtol=1e-14)


def test_lower_below_upper_on_a_small_grid():
  q = np.array([1.0, 0.1, 256 / 60000])[:, None, None]
  sigma = np.array([0.5, 2.0])[None, :, None]
  steps = np.array([3.0, 30.0, 250.0])[None, None, :]
  res = jaxrdp.dpsgd_epsilon(q, sigma, steps, 1e-5, sampling="shuffle")
  eps, low = np.asarray(res.epsilon), np.asarray(res.epsilon_lower)
  assert np.all(np.isfinite(low)) and np.all(low >= 0) and np.all(low <= eps)
  assert np.sum(low > 0.5 * eps) >= 4
  pld = jaxrdp.dpsgd_epsilon(0.1, sigma[0, :, 0], 30, 1e-5, sampling="shuffle", accountant="pld")
  np.testing.assert_array_equal(np.asarray(pld.epsilon_lower), low[1, :, 1])
  assert np.all(np.asarray(pld.epsilon_lower) <= np.asarray(pld.epsilon))
  assert np.all(np.asarray(pld.epsilon) <= eps[1, :, 1])


def _on_grid(call, q, sigma, steps, blocks):
  """``call(q, sigma, steps)`` over the grid q x sigma x steps (1-D arrays, axes 0 to 2),
  assembled from calls on the sub-grids ``blocks``: (q indices, steps indices) pairs,
  each with all of sigma, that must partition the grid.

  The shuffled lower bound pads each cell's count statistic to a power of two of
  complete epochs; a concrete call groups its cells by that bucket itself
  (``jaxrdp.mechanisms._shuffle_lower_bound._epoch_groups``), so the grids below are
  one block each (separate blocks compile no fewer programs). Each block is itself a
  broadcast 3-D grid of the one-call function. Returns the result's type and its
  fields as arrays of the grid's shape.
  """
  shape = (len(q), len(sigma), len(steps))
  count = np.zeros(shape, int)
  kinds, fields = set(), {}
  for qi, ti in blocks:
    cells = np.ix_(qi, range(len(sigma)), ti)
    res = call(q[qi][:, None, None], sigma[None, :, None], steps[ti][None, None, :])
    kinds.add(type(res))
    count[cells] += 1
    for name, value in res._asdict().items():
      value = np.asarray(value)
      assert value.shape == (len(qi), len(sigma), len(ti)), (name, value.shape)
      fields.setdefault(name, np.full(shape, np.nan))[cells] = value
  assert np.all(count == 1), count  # every cell of the grid, once
  (kind,) = kinds
  return kind, fields


@pytest.mark.slow
def test_lower_below_upper_on_a_grid_both_accountants():
  q = np.array([1.0, 0.5, 0.1, 256 / 60000])
  sigma = np.array([0.3, 0.8, 2.0])
  steps = np.array([1.0, 7.0, 30.0, 500.0])
  # Complete epochs (q, steps): at most 30 for steps <= 30; 500 and 250 (q = 1, 0.5),
  # 50 and 2 (q = 0.1, 256 / 60000) at 500 steps. One call: the lower bound groups the
  # cells by bucket (8: 33 cells, 64: 9, 512: 6), three compilations as the three
  # blocks of (steps <= 30), (q >= 0.5, 500 steps), (q <= 0.1, 500 steps) took, with
  # less padding (those blocks padded the 36 cells of steps <= 30 to 32 epochs).
  blocks = [([0, 1, 2, 3], [0, 1, 2, 3])]
  kind, res = _on_grid(
    lambda *a: jaxrdp.dpsgd_epsilon(*a, 1e-5, sampling="shuffle"), q, sigma, steps, blocks
  )
  assert kind is EpsilonBracket
  eps, low = res["epsilon"], res["epsilon_lower"]
  assert eps.shape == low.shape == (4, 3, 4)
  assert np.all(np.isfinite(low)) and np.all(low >= 0)
  assert np.all(low <= eps), np.argwhere(low > eps)
  # Some cells are far from trivial: the bracket is informative.
  assert np.sum(low > 0.5 * eps) >= 8
  # The tight accountant (each configuration is a composition of its own: a smaller
  # grid), whose upper bound is the lower of the two. One call: the lower bound groups
  # the cells by bucket of complete epochs itself (7 steps: 7, 0 and 0 epochs; 500
  # steps: 500, 50 and 2), two compilations where the two blocks of 7 and 500 steps
  # took three; each cell's bound equals that of the Renyi-DP grid's call.
  sub = np.ix_([0, 2, 3], [0, 2], [1, 3])
  kind, pld = _on_grid(
    lambda *a: jaxrdp.dpsgd_epsilon(*a, 1e-5, sampling="shuffle", accountant="pld"),
    q[[0, 2, 3]],
    sigma[[0, 2]],
    steps[[1, 3]],
    [([0, 1, 2], [0, 1])],
  )
  assert kind is jaxrdp.pld.PldEpsilon
  up, low_pld = pld["epsilon"], pld["epsilon_lower"]
  np.testing.assert_array_equal(low_pld, low[sub])
  assert np.all(low_pld <= up) and np.all(up <= eps[sub])
  assert isinstance(jaxrdp.dpsgd_epsilon(0.1, 1.0, 50, 1e-5, sampling="shuffle"), EpsilonBracket)


@pytest.mark.slow
def test_lower_below_upper_replace_one_and_delta():
  q = np.array([1.0, 0.1, 256 / 60000])
  sigma = np.array([0.5, 1.0, 3.0])
  steps = np.array([1.0, 30.0, 500.0])
  # Complete epochs (q, steps): at most 30 for steps <= 30; 500, 50 and 2 at 500 steps.
  # One call: the lower bound groups the cells by bucket (4: 18 cells, 64: 6, 512: 3),
  # three compilations a kind as the blocks (steps <= 30), (q = 1, 500 steps),
  # (q <= 0.1, 500 steps) took, with less padding (18 cells padded to 32 epochs there).
  blocks = [([0, 1, 2], [0, 1, 2])]
  for accountant in ("rdp", "pld"):
    if accountant == "pld":
      # (epsilons in the hundreds need a larger grid than the tight accountant's
      # default cap, which it says by a warning)
      sigma, steps, blocks = sigma[1:], steps[:2], [([0, 1, 2], [0, 1])]
    kw = dict(sampling="shuffle", accountant=accountant)
    _, res = _on_grid(
      lambda *a: jaxrdp.dpsgd_epsilon(*a, 1e-5, relation="replace_one", **kw),
      q,
      sigma,
      steps,
      blocks,
    )
    assert np.all(res["epsilon_lower"] <= res["epsilon"])
    for eps in (0.5, 4.0):
      kind, d = _on_grid(
        lambda *a: jaxrdp.dpsgd_delta(*a, eps, **kw),
        q,
        sigma,
        steps,
        blocks,
      )
      assert kind is (DeltaBracket if accountant == "rdp" else jaxrdp.pld.PldDelta)
      low, up = d["delta_lower"], d["delta"]
      assert np.all((0 <= low) & (low <= up) & (up <= 1)), accountant
  assert isinstance(jaxrdp.dpsgd_delta(0.1, 1.0, 50, 1.0, sampling="shuffle"), DeltaBracket)


@pytest.mark.parametrize(
  "relation, mu_per_sigma",
  [("add_remove", 1.0), pytest.param("replace_one", 2.0, marks=pytest.mark.slow)],
)
def test_one_batch_per_epoch_is_the_gaussian_and_the_bracket_closes(relation, mu_per_sigma):
  # q = 1: every epoch is one step on the whole dataset, the Gaussian mechanism
  # (sensitivity 1, or 2 under replace-one). One epoch: the cube event is the optimal
  # threshold test, so lower = exact = tight upper; E epochs: the Gaussian at
  # sigma / sqrt(E) is the truth, above the count statistic's bound.
  sigma, delta = 1.3, 1e-5
  one = jaxrdp.dpsgd_epsilon(
    1.0, sigma, 1, delta, sampling="shuffle", relation=relation, accountant="pld"
  )
  exact = gaussian_epsilon(mu_per_sigma / sigma, delta)
  assert float(one.epsilon_lower) <= exact * (1 + 1e-12)
  assert float(one.epsilon_lower) == pytest.approx(exact, rel=1e-9)
  assert exact <= float(one.epsilon) <= exact * (1 + 2e-5)
  four = jaxrdp.dpsgd_epsilon(
    1.0, sigma, 4, delta, sampling="shuffle", relation=relation, accountant="pld"
  )
  exact4 = gaussian_epsilon(mu_per_sigma * 2 / sigma, delta)
  assert exact4 <= float(four.epsilon) <= exact4 * (1 + 2e-5)
  assert 0.5 * exact4 < float(four.epsilon_lower) <= exact4


def test_tight_upper_bound_is_the_gaussian_composed_per_started_epoch():
  # E = ceil(T q) started epochs, each one Gaussian mechanism per example: the tight
  # accountant's epsilon is the exact Gaussian's at sigma / sqrt(E) (to its rtol), below
  # the Renyi-DP bound.
  q, sigma, steps, delta = 256 / 60000, 1.1, 14063, 1e-5
  pld = jaxrdp.dpsgd_epsilon(q, sigma, steps, delta, sampling="shuffle", accountant="pld")
  rdp = jaxrdp.dpsgd_epsilon(q, sigma, steps, delta, sampling="shuffle")
  epochs = math.ceil(steps * q)
  assert epochs == 61
  exact = gaussian_epsilon(math.sqrt(epochs) / sigma, delta)
  assert exact <= float(pld.epsilon) <= exact * (1 + 2e-5)
  assert float(pld.epsilon) < float(rdp.epsilon)
  # Both report the same certified lower bound (the event's): 59 complete epochs of 235.
  assert float(pld.epsilon_lower) == float(rdp.epsilon_lower)
  want = shuffle_epsilon_lower_bound(sigma, 235, delta, 59)
  assert float(rdp.epsilon_lower) == float(want)
  assert 6.84 < float(rdp.epsilon_lower) < 6.86


def test_steps_to_complete_epochs():
  sigma, delta = 1.0, 1e-5
  # B divides n (q = 1/10 exactly: t = 10); 99 steps are 9 complete epochs, 100 are 10.
  res = jaxrdp.dpsgd_epsilon(
    0.1, sigma, np.array([5.0, 10.0, 99.0, 100.0]), delta, sampling="shuffle"
  )
  want = shuffle_epsilon_lower_bound(sigma, 10, delta, np.array([1.0, 1.0, 9.0, 10.0]))
  low = np.asarray(res.epsilon_lower)
  assert low[0] == 0.0  # less than one complete epoch: the trivial bound
  np.testing.assert_array_equal(low[1:], np.asarray(want)[1:])
  # The upper bound is unchanged: ceil(T q) started epochs without amplification.
  for steps, epochs in ((5.0, 1), (99.0, 10), (100.0, 10)):
    up = jaxrdp.dpsgd_epsilon(0.1, sigma, steps, delta, sampling="shuffle").epsilon
    ref = jaxrdp.epsilon_from_event(ShuffledEpochs(epochs, Gaussian(sigma)), delta).epsilon
    assert float(up) == float(ref)
  # Zero steps or q = 0: nothing released, both bounds 0.
  zero = jaxrdp.dpsgd_epsilon(
    np.array([0.0, 0.1]), sigma, np.array([10.0, 0.0]), delta, sampling="shuffle"
  )
  np.testing.assert_array_equal(np.asarray(zero.epsilon_lower), [0.0, 0.0])
  np.testing.assert_array_equal(np.asarray(zero.epsilon), [0.0, 0.0])
  # No noise: the outputs tell the datasets apart, epsilon = inf.
  free = jaxrdp.dpsgd_epsilon(0.1, 0.0, 10, delta, sampling="shuffle")
  assert math.isinf(float(free.epsilon_lower)) and math.isinf(float(free.epsilon))


def test_the_closed_form_event_probabilities_match_the_mechanism():
  # n = 10 examples in batches of 4 (the last one holds 2): the frequency of
  # {max_j (s_j + b_j) > C} in the simulated mechanism against the closed form that
  # the bound uses (with t = ceil(n / B) = 3), under D (target +1) and both neighbours.
  sigma, c, t = 1.0, 1.7, 3
  sim = oracle.simulate_cube_probability(sigma, 10, 4, c, 1.0, 0.0)
  sim_replace = oracle.simulate_cube_probability(sigma, 10, 4, c, 1.0, -1.0, seed=1)
  base = stats.norm.cdf(c / sigma) ** (t - 1)
  for got, mean in ((sim["D"], 2.0), (sim["D'"], 1.0), (sim_replace["D'"], 0.0)):
    want = 1 - stats.norm.cdf((c - mean) / sigma) * base
    assert abs(got - want) < 5 * math.sqrt(want * (1 - want) / 200_000), (got, want)


@pytest.mark.parametrize(
  "relation, q_mean", [("add_remove", 1), pytest.param("replace_one", 0, marks=pytest.mark.slow)]
)
def test_the_lower_bound_never_exceeds_the_true_divergence_of_its_pair(relation, q_mean):
  # t = 2 batches, one epoch: the exact divergence of the pair by quadrature.
  for sigma, eps in ((0.8, 0.5), (1.5, 0.2)):
    ev = ShuffledEpochs(1, Gaussian(sigma), relation, batches_per_epoch=2)
    low = float(event_delta_lower_bound(ev, eps))
    exact = oracle.pair_delta_t2(sigma, eps, q_mean)
    assert 0.9 * exact < low <= exact + 1e-9, (low, exact)
    # and the events' value itself, in mpmath
    assert low == pytest.approx(
      float(oracle.delta_lower_bound(sigma, 2, eps, q_mean=q_mean)), rel=1e-9
    )
  # Two epochs of t = 3, a fresh permutation each: Monte Carlo over the product pair.
  ev = ShuffledEpochs(2, Gaussian(0.8), relation, batches_per_epoch=3)
  low = float(event_delta_lower_bound(ev, 1.0))
  mc, se = oracle.pair_delta_monte_carlo(0.8, 3, 1.0, 2, q_mean, n=100_000)
  assert low <= mc + 5 * se
  assert low == pytest.approx(
    float(oracle.delta_lower_bound_epochs(0.8, 3, 1.0, 2, q_mean=q_mean)), rel=1e-9
  )
  # epsilon and delta agree: at the epsilon lower bound for delta, the delta bound is delta.
  eps_low = float(event_epsilon_lower_bound(ev, 0.1))
  assert float(event_delta_lower_bound(ev, eps_low)) == pytest.approx(0.1, rel=1e-6)


def test_the_tight_accountant_never_reports_the_gaussian_lower_bound_for_shuffling():
  acct = PldAccountant()
  shuffled = ShuffledEpochs(3, Gaussian(1.0), batches_per_epoch=50)
  poisson = SelfComposed(PoissonSampled(0.02, Gaussian(1.0)), 100)
  alone = acct.epsilon(shuffled, 1e-5)
  both = acct.epsilon(Composed((shuffled, poisson)), 1e-5)
  own = float(event_epsilon_lower_bound(shuffled, 1e-5))
  assert float(alone.epsilon_lower) == own == float(both.epsilon_lower)
  assert own < float(alone.epsilon) < float(both.epsilon)
  # Composed one event at a time: the same.
  state = acct.compose(acct.compose(acct.init(), poisson), shuffled)
  assert float(acct.get_epsilon(state, 1e-5).epsilon_lower) == own
  # Without batches_per_epoch no bound is known: 0, never the Gaussian's.
  unknown = acct.epsilon(ShuffledEpochs(3, Gaussian(1.0)), 1e-5)
  assert float(unknown.epsilon_lower) == 0.0 and float(unknown.epsilon) > 0
  assert event_epsilon_lower_bound(ShuffledEpochs(3, Gaussian(1.0)), 1e-5) is None
  # Other events keep the engine's own lower bound.
  plain = acct.epsilon(poisson, 1e-5)
  assert 0 < float(plain.epsilon_lower) <= float(plain.epsilon)


def test_tight_calibration_of_shuffled_epochs_keeps_its_budget():
  # The host refinement asks the tight accountant about shuffled epochs themselves (not
  # Poisson batches): the sigma, pasted back, meets the budget under that scheme, and
  # needs no more noise than the Renyi-DP calibration of the same scheme.
  kw = dict(sampling="shuffle")
  tight = float(jaxrdp.calibrate_noise(3.0, 1e-5, 0.01, 1000, accountant="pld", **kw).sigma)
  rdp = float(jaxrdp.calibrate_noise(3.0, 1e-5, 0.01, 1000, **kw).sigma)
  assert 0 < tight <= rdp
  back = jaxrdp.dpsgd_epsilon(0.01, tight, 1000, 1e-5, accountant="pld", **kw)
  assert float(back.epsilon) <= 3.0
  # Poisson at the same sigma is far below: the calibration did not solve for Poisson.
  assert float(jaxrdp.dpsgd_epsilon(0.01, tight, 1000, 1e-5, accountant="pld").epsilon) < 1.0


def test_cli_prints_both(capsys, monkeypatch):
  monkeypatch.setenv("JAXRDP_CACHE_DIR", "")  # main() would point JAX's cache at ~/.cache
  args = ["epsilon", "--dataset-size", "60000", "--batch-size", "256", "--sigma", "1.1"]
  args += ["--epochs", "60", "--sampling", "shuffle"]
  assert main(args) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[0] == "accountant rdp, sampling shuffle, relation add_remove"
  header, row = out[1].split(), out[3].split()
  assert header[-3:] == ["epsilon", "order", "epsilon_lower"]
  cells = dict(zip(header, row))
  res = jaxrdp.dpsgd_epsilon(256 / 60000, 1.1, 14063, 1e-5, sampling="shuffle")
  # Rounded to 5 digits: the upper bound up, the lower bound down.
  assert cells["epsilon"] == "57.653" and float(res.epsilon) <= 57.653
  assert cells["epsilon_lower"] == "6.8485" and float(res.epsilon_lower) >= 6.8485
  assert main([*args, "--json", "--accountant", "pld"]) == 0
  (record,) = json.loads(capsys.readouterr().out)
  assert record["epsilon_lower"] == float(res.epsilon_lower)
  assert record["epsilon_lower"] < record["epsilon"] < float(res.epsilon)
  assert main(["delta", *args[1:], "--epsilon", "20", "--csv"]) == 0
  lines = capsys.readouterr().out.splitlines()
  head = lines[0].split(",")
  assert "delta" in head and "delta_lower" in head and "order" in head
  values = dict(zip(head, lines[1].split(",")))
  assert 0 < float(values["delta_lower"]) <= float(values["delta"])


def test_the_figure_script_numbers_against_references():
  # benchmarks/shuffle_bracket.py (committed results): one epoch of T = 1000 steps,
  # delta = 1e-6, the comparison of Chua et al. 2024 (arXiv:2403.17673). The paper's
  # text quotes no values of its figure, so its numbers are checked against
  # references here: the lower bound's events in mpmath, the exact Gaussian mechanism
  # (the upper bound of one epoch), and dp_accounting's PLD for Poisson sampling.
  from dp_accounting import pld

  result = json.loads((ROOT / "benchmarks" / "results" / "shuffle_bracket.json").read_text())
  one = result["one_epoch"]
  assert (one["steps"], one["delta"]) == (1000, 1e-6)
  for i in (4, 14, 24):  # sigma = 0.5, 1.0, 1.5
    sigma = one["sigmas"][i]
    low = float(oracle.epsilon_lower_bound(sigma, 1000, 1e-6))
    assert one["shuffle_lower"][i] == pytest.approx(low, rel=1e-9)
    exact = gaussian_epsilon(1 / sigma, 1e-6)
    assert exact <= one["shuffle_upper"][i] <= exact * (1 + 2e-5)
    ref = (
      pld.privacy_loss_distribution.from_gaussian_mechanism(
        sigma, sampling_prob=1e-3, value_discretization_interval=1e-4
      )
      .self_compose(1000)
      .get_epsilon_for_delta(1e-6)
    )
    assert one["poisson"][i] == pytest.approx(ref, rel=2e-3)
  # The gap: at sigma = 0.8 shuffling's epsilon is at least 10 times Poisson's.
  assert one["shuffle_lower"][10] > 10 * one["poisson"][10]


def _figure_reference():
  return json.loads((ROOT / "tests" / "data" / "shuffle_lower_reference.json").read_text())


def test_the_lower_bound_reproduces_the_papers_figure():
  # The lower bound epsilon_S of Chua et al. 2024 (arXiv:2403.17673) at one epoch of
  # T = 1000 steps, delta = 1e-6, sigma 0.3 to 1.5, as the authors' public code computes
  # it (tests/data/shuffle_lower_reference.json: their outputs, not their code). The
  # same pair and events; the code takes the best threshold C on a grid of step 0.01
  # and returns epsilon from a binary search at most 1e-7 above its grid value, so:
  # * jaxrdp (C searched continuously, within 1e-10) can only be higher, by less than
  #   the grid costs: at most 1e-4 relative (3.7e-5 measured, at sigma = 1.1 and 1.3);
  # * against the same code on a grid of step 1e-4, where the grid no longer limits it,
  #   the two agree within 5e-7 absolute (1.2e-7 measured: that grid's own loss and the
  #   search tolerance), i.e. to the reference's accuracy.
  ref = _figure_reference()
  sigma = np.array(ref["sigmas"])
  low = np.asarray(shuffle_epsilon_lower_bound(sigma, ref["steps_per_epoch"], ref["delta"]))
  paper, fine = np.array(ref["shuffle_lower"]), np.array(ref["shuffle_lower_fine_grid"])
  assert np.all(low >= paper - 1e-7) and np.all(low <= paper * (1 + 1e-4)), low - paper
  np.testing.assert_allclose(low, fine, rtol=0, atol=5e-7)
  # A lower bound never above epsilon_D (the Gaussian mechanism without amplification,
  # an upper bound on the truth; the reference's search returns it up to 1e-7 high).
  assert np.all(low <= np.array(ref["deterministic"]) + 1e-12)
  # The figure's point: from sigma = 0.35 on, shuffling's lower bound exceeds the
  # Poisson upper bound at q = 1/T, by more than 10 times from sigma = 0.8 to 1.2.
  pois = np.array(ref["poisson_pld_upper"])
  assert np.all(low[1:] > pois[1:])
  assert np.all(low[10:19] > 10 * pois[10:19])


def test_the_figure_script_matches_the_papers_code():
  # benchmarks/shuffle_bracket.py (committed results), one-epoch panel, against the
  # authors' code at the same parameters (tests/data/shuffle_lower_reference.json).
  ref = _figure_reference()
  one = json.loads((ROOT / "benchmarks" / "results" / "shuffle_bracket.json").read_text())[
    "one_epoch"
  ]
  assert one["sigmas"] == ref["sigmas"]
  assert (one["steps"], one["delta"]) == (ref["steps_per_epoch"], ref["delta"])
  det = np.array(ref["deterministic"])
  # The tight upper bound of one epoch is the Gaussian mechanism, epsilon_D: the
  # reference's binary search returns it up to 1e-7 high, the tight accountant up to
  # its rtol 2e-5 high (both sound: never below the exact value).
  up = np.array(one["shuffle_upper"])
  assert np.all(up >= det - 1e-7) and np.all(up <= det * (1 + 2e-5))
  # Poisson: the tight epsilon lies in the authors' PLD bracket (value discretization
  # 1e-3, pessimistic and optimistic), and so does jaxrdp's own lower end.
  pois, pois_low = np.array(one["poisson"]), np.array(one["poisson_lower"])
  lo, hi = np.array(ref["poisson_pld_lower"]), np.array(ref["poisson_pld_upper"])
  assert np.all(lo <= pois_low) and np.all(pois_low <= pois) and np.all(pois <= hi)
  # The script's comparison block reports what is checked above.
  cmp = one["reference"]
  assert cmp["max_rel_excess_over_paper"] <= 1e-4
  assert cmp["max_abs_diff_fine_grid"] <= 5e-7
