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
events in mpmath (tests/shuffle_oracle.py); dp_accounting for Poisson sampling. The
values of those that take seconds are stored (tests/data/shuffle_reference.json, written
by tests/make_shuffle_reference.py from tests/shuffle_oracle.py and dp_accounting).
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


# The lower bound pads each cell's complete epochs to a power of two (its bucket), and a
# concrete call evaluates its cells in groups of buckets
# (``jaxrdp.mechanisms._shuffle_lower_bound._epoch_groups``), each group one compiled
# program of its own flat size and top bucket; a call of one group runs at its own
# shape. Compilation is most of these tests' time, so the cell lists below are built
# to land on programs compiled once for the file: test_lower_below_upper_on_a_small_grid's
# grid evaluates its cells as a group of 16 padded to 32 epochs and one of 2 padded to
# 256, and so do the add/remove lists here (16 cells of at most 30 complete epochs, one
# of them above 16, then 2 of 129 to 256); the tight accountant's calls take the same
# cells, so its lower bound reuses the Renyi-DP call's programs. The tight accountant
# itself compiles one program per FFT length (``jaxrdp.pld._driver._sizes``): its cells
# are chosen among those of few lengths (8192 for up to 4 epochs, 32768 for 30 epochs at
# sigma 0.3 or 61 at 1.1, 98304 for 250 epochs at sigma 0.3 or 0.8), and replace-one at
# 2 sigma is the Gaussian of add/remove at sigma, the same lengths again.
TINY = 256 / 60000  # MNIST's q: t = 235 batches per epoch, n / B = 234.375 not an integer

# (q, sigma, steps): every q (t = 1, 2, 10 and 235 batches per epoch) and sigma (0.3:
# epsilon in the thousands, 0.8, 2.0), 0 (steps below an epoch), 1, 2, 3, 4, 30 and 250
# complete epochs; the first 16 are one group (at most 30 epochs), the last 2 another.
# One cell of one step (no complete epoch), solved by the tight accountant in closed
# form: one program for that one row, the one of the one-step cell of
# test_one_batch_per_epoch_is_the_gaussian_and_the_bracket_closes.
_GRID = [
  (1.0, 0.3, 2),  # one step on the whole dataset per epoch: the Gaussian mechanism
  (1.0, 0.8, 4),
  (1.0, 2.0, 3),
  (1.0, 0.3, 30),
  (0.5, 2.0, 4),
  (0.5, 0.3, 7),
  (0.5, 0.3, 60),
  (0.5, 0.8, 7),
  (0.1, 0.8, 40),
  (0.1, 2.0, 20),
  (0.1, 0.8, 30),
  (0.1, 0.3, 300),
  (TINY, 0.3, 235),  # exactly one complete epoch (234.375 steps, and a short batch)
  (TINY, 2.0, 30),  # no complete epoch: the trivial lower bound
  (TINY, 0.8, 500),  # 2 complete epochs of 235 steps
  (TINY, 2.0, 500),
  (1.0, 0.3, 250),  # hundreds of epochs
  (0.5, 0.8, 500),
]


def _on_cells(call, cells):
  """``call(*columns)`` on a flat list of cells (tuples of equal length: q, sigma, steps
  and possibly the epsilon or delta given), as 1-D columns: one call of the one-call
  function. Returns the result's type and its fields as arrays of one value per cell."""
  res = call(*(np.array(col, np.float64) for col in zip(*cells)))
  fields = {}
  for name, value in res._asdict().items():
    value = np.asarray(value)
    assert value.shape == (len(cells),), (name, value.shape)
    fields[name] = value
  return type(res), fields


@pytest.mark.slow
def test_lower_below_upper_on_a_grid_both_accountants():
  kind, res = _on_cells(lambda *a: jaxrdp.dpsgd_epsilon(*a, 1e-5, sampling="shuffle"), _GRID)
  assert kind is EpsilonBracket
  eps, low = res["epsilon"], res["epsilon_lower"]
  assert np.all(np.isfinite(low)) and np.all(low >= 0)
  assert np.all(low <= eps), np.argwhere(low > eps)
  # Some cells are far from trivial: the bracket is informative.
  assert np.sum(low > 0.5 * eps) >= 12
  # The tight accountant on the same cells (each a composition of its own), whose upper
  # bound is the lower of the two, and whose lower bound is the event's, as above.
  kind, pld = _on_cells(
    lambda *a: jaxrdp.dpsgd_epsilon(*a, 1e-5, sampling="shuffle", accountant="pld"), _GRID
  )
  assert kind is jaxrdp.pld.PldEpsilon
  up, low_pld = pld["epsilon"], pld["epsilon_lower"]
  np.testing.assert_array_equal(low_pld, low)
  assert np.all(low_pld <= up) and np.all(up <= eps)
  # A scalar call (2 complete epochs: the program of the scalar calls of 2 epochs below).
  assert isinstance(jaxrdp.dpsgd_epsilon(0.1, 1.0, 20, 1e-5, sampling="shuffle"), EpsilonBracket)


# Replace-one: the add/remove grid's first 16 cells at twice sigma (the same Gaussians for
# the tight accountant), then 250 complete epochs at t = 1 and 2 (a group padded to 256).
_GRID_REPLACE = [(q, 2 * s, n) for q, s, n in _GRID[:16]] + [(1.0, 0.6, 250), (0.5, 1.6, 500)]
# (q, sigma, steps, epsilon) for delta, both epsilons: the first 12 cells (0, 1, 2, 3, 10
# and 30 complete epochs, sigma 0.3 to 3; delta from 4e-33 to near 1) are those of the
# tight accountant too (one step in closed form, the others of one FFT length, 65536);
# the last 2, 250 epochs, where delta is 1 or nearly so, the Renyi-DP accountant's alone
# (at sigma 0.5 the tight one needs a grid beyond its cap).
_DELTA_CELLS = [
  (1.0, 0.5, 1, 0.5),
  (1.0, 1.0, 1, 4.0),
  (1.0, 3.0, 30, 0.5),
  (1.0, 1.0, 30, 4.0),
  (0.1, 0.3, 30, 0.5),
  (0.1, 0.4, 100, 4.0),
  (0.1, 0.5, 1, 4.0),
  (0.1, 1.0, 7, 0.5),
  (TINY, 0.3, 500, 0.5),
  (TINY, 0.4, 2350, 4.0),
  (TINY, 0.5, 30, 0.5),
  (TINY, 3.0, 1, 4.0),
  (1.0, 0.5, 250, 0.5),
  (1.0, 3.0, 250, 4.0),
]


@pytest.mark.slow
def test_lower_below_upper_replace_one_and_delta():
  kw = dict(sampling="shuffle", relation="replace_one")
  _, rdp = _on_cells(lambda *a: jaxrdp.dpsgd_epsilon(*a, 1e-5, **kw), _GRID_REPLACE)
  eps, low = rdp["epsilon"], rdp["epsilon_lower"]
  assert np.all(np.isfinite(low)) and np.all(low >= 0) and np.all(low <= eps)
  assert np.sum(low > 0.5 * eps) >= 7
  kind, pld = _on_cells(
    lambda *a: jaxrdp.dpsgd_epsilon(*a, 1e-5, accountant="pld", **kw), _GRID_REPLACE[:16]
  )
  assert kind is jaxrdp.pld.PldEpsilon
  np.testing.assert_array_equal(pld["epsilon_lower"], low[:16])
  assert np.all(pld["epsilon_lower"] <= pld["epsilon"]) and np.all(pld["epsilon"] <= eps[:16])
  for accountant, cells in (("rdp", _DELTA_CELLS), ("pld", _DELTA_CELLS[:12])):
    kind, d = _on_cells(
      lambda *a: jaxrdp.dpsgd_delta(*a, sampling="shuffle", accountant=accountant), cells
    )
    assert kind is (DeltaBracket if accountant == "rdp" else jaxrdp.pld.PldDelta)
    low, up = d["delta_lower"], d["delta"]
    assert np.all((0 <= low) & (low <= up) & (up <= 1)), accountant
  # A scalar call.
  assert isinstance(jaxrdp.dpsgd_delta(0.5, 1.0, 2, 1.0, sampling="shuffle"), DeltaBracket)


@pytest.mark.parametrize(
  "relation, mu_per_sigma",
  [("add_remove", 1.0), pytest.param("replace_one", 2.0, marks=pytest.mark.slow)],
)
def test_one_batch_per_epoch_is_the_gaussian_and_the_bracket_closes(relation, mu_per_sigma):
  # q = 1: every epoch is one step on the whole dataset, the Gaussian mechanism
  # (sensitivity 1, or 2 under replace-one). One epoch: the cube event is the optimal
  # threshold test, so lower = exact = tight upper; E epochs: the Gaussian at
  # sigma / sqrt(E) is the truth, above the count statistic's bound. One call for 1 and 4
  # epochs (the lower bound's program of 2 cells padded to 4 epochs, that of the
  # divergence test's epsilon call and, under add/remove, of
  # test_lower_below_upper_on_a_small_grid's tight call).
  sigma, delta = 1.3, 1e-5
  res = jaxrdp.dpsgd_epsilon(
    1.0, sigma, np.array([1.0, 4.0]), delta, sampling="shuffle", relation=relation, accountant="pld"
  )
  (one_up, four_up), (one_low, four_low) = np.asarray(res.epsilon), np.asarray(res.epsilon_lower)
  exact = gaussian_epsilon(mu_per_sigma / sigma, delta)
  assert one_low <= exact * (1 + 1e-12)
  assert one_low == pytest.approx(exact, rel=1e-9)
  assert exact <= one_up <= exact * (1 + 2e-5)
  exact4 = gaussian_epsilon(mu_per_sigma * 2 / sigma, delta)
  assert exact4 <= four_up <= exact4 * (1 + 2e-5)
  assert 0.5 * exact4 < four_low <= exact4


def test_tight_upper_bound_is_the_gaussian_composed_per_started_epoch():
  # E = ceil(T q) started epochs, each one Gaussian mechanism per example: the tight
  # accountant's epsilon is the exact Gaussian's at sigma / sqrt(E) (to its rtol), below
  # the Renyi-DP bound. Arrays of one cell, as the command line's columns: the lower
  # bound's program is the one test_cli_prints_both runs, and the PLD's job the same.
  q, sigma, steps, delta = 256 / 60000, 1.1, 14063, 1e-5
  cell = (np.array([q]), np.array([sigma]), np.array([float(steps)]))
  pld = jaxrdp.dpsgd_epsilon(*cell, delta, sampling="shuffle", accountant="pld")
  rdp = jaxrdp.dpsgd_epsilon(*cell, delta, sampling="shuffle")
  ((pld_up, pld_low), (rdp_up, rdp_low)) = (
    (float(x[0]) for x in (r.epsilon, r.epsilon_lower)) for r in (pld, rdp)
  )
  epochs = math.ceil(steps * q)
  assert epochs == 61
  exact = gaussian_epsilon(math.sqrt(epochs) / sigma, delta)
  assert exact <= pld_up <= exact * (1 + 2e-5)
  assert pld_up < rdp_up
  # Both report the same certified lower bound (the event's): 59 complete epochs of 235.
  assert pld_low == rdp_low
  want = shuffle_epsilon_lower_bound(*(np.array([x]) for x in (sigma, 235.0, delta, 59.0)))
  assert rdp_low == float(want[0])
  assert 6.84 < rdp_low < 6.86


def test_steps_to_complete_epochs():
  sigma, delta = 1.0, 1e-5
  # One call of 16 cells (the program of the grids' group of 16 cells padded to 32
  # epochs). Runs (q, steps, B, n): B divides n (q = 1/10 exactly: t = 10; 99 steps are 9
  # complete epochs, 100 are 10); B does not (t = ceil(234.375) = 235); one batch per
  # epoch. Then zero steps or q = 0 (nothing released), and no noise.
  runs = [(0.1, k, 1, 10) for k in (5, 10, 99, 100, 299, 300)]
  runs += [(256 / 60000, k, 256, 60000) for k in (234, 235, 469, 470, 7050)]
  runs += [(1.0, k, 1, 1) for k in (1, 30)]
  q = np.array([r[0] for r in runs] + [0.0, 0.1, 0.1])
  steps = np.array([r[1] for r in runs] + [10, 0, 10], np.float64)
  res = jaxrdp.dpsgd_epsilon(q, np.array([sigma] * 15 + [0.0]), steps, delta, sampling="shuffle")
  low, up = np.asarray(res.epsilon_lower), np.asarray(res.epsilon)
  # In integers: t = ceil(n / B) batches per epoch, floor(T / t) complete epochs and
  # ceil(T B / n) started ones.
  t = np.array([-(-n // b) for _, _, b, n in runs])
  complete = np.array([k // ti for (_, k, _, _), ti in zip(runs, t)])
  started = np.array([-(-k * b // n) for _, k, b, n in runs])
  np.testing.assert_array_equal(complete, [0, 1, 9, 10, 29, 30, 0, 1, 1, 2, 30, 1, 30])
  # The lower bound is the kernel's at the complete epochs (one call of the same shape,
  # the last three cells stand-ins), and 0 before the first complete epoch.
  want = shuffle_epsilon_lower_bound(
    np.full(16, sigma),
    np.concatenate([t, np.ones(3)]).astype(np.float64),
    np.full(16, delta),
    np.concatenate([np.maximum(complete, 1), np.ones(3)]).astype(np.float64),
  )
  done = complete >= 1
  np.testing.assert_array_equal(low[:13][done], np.asarray(want)[:13][done])
  np.testing.assert_array_equal(low[:13][~done], 0.0)
  # The upper bound is unchanged: ceil(T q) started epochs without amplification.
  ref = jaxrdp.epsilon_from_event(ShuffledEpochs(started, Gaussian(sigma)), delta).epsilon
  np.testing.assert_array_equal(up[:13], np.asarray(ref))
  # Zero steps or q = 0: nothing released, both bounds 0.
  np.testing.assert_array_equal(low[13:15], [0.0, 0.0])
  np.testing.assert_array_equal(up[13:15], [0.0, 0.0])
  # No noise: the outputs tell the datasets apart, epsilon = inf.
  assert math.isinf(low[15]) and math.isinf(up[15])


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
  # Sigma 0.8: two epochs of t = 3 batches, a fresh permutation each, and four of t = 2.
  # Their epsilon lower bounds for delta 0.1 (one call: the program of 2 cells padded to 4
  # epochs of test_one_batch_per_epoch_is_the_gaussian_and_the_bracket_closes), then the
  # delta lower bounds of five events in one call: both at their epsilon lower bound; t =
  # 2 and one epoch at (sigma, epsilon) = (0.8, 0.5) and (1.5, 0.2); the two epochs at
  # epsilon 1.
  sigma = np.array([0.8, 0.8, 0.8, 1.5, 0.8])
  epochs, t = np.array([2.0, 4.0, 1.0, 1.0, 2.0]), np.array([3.0, 2.0, 2.0, 2.0, 3.0])
  pair = ShuffledEpochs(epochs[:2], Gaussian(sigma[:2]), relation, batches_per_epoch=t[:2])
  eps = np.array([*np.asarray(event_epsilon_lower_bound(pair, 0.1)), 0.5, 0.2, 1.0])
  events = ShuffledEpochs(epochs, Gaussian(sigma), relation, batches_per_epoch=t)
  low = np.asarray(event_delta_lower_bound(events, eps))
  # epsilon and delta agree: at the epsilon lower bound for delta, the delta bound is delta.
  np.testing.assert_allclose(low[:2], 0.1, rtol=1e-6)
  # The oracles' values (stored: tests/make_shuffle_reference.py).
  ref = _reference()["pair"][relation]
  assert ref["q_mean"] == q_mean
  # t = 2, one epoch: the exact divergence of the pair by quadrature.
  for i, point in enumerate(ref["t2"], start=2):
    assert (point["sigma"], point["epsilon"]) == (sigma[i], eps[i])
    exact = point["quadrature"]
    assert 0.9 * exact < low[i] <= exact + 1e-9, (low[i], exact)
    # and the events' value itself, in mpmath
    assert low[i] == pytest.approx(float(point["mpmath"]), rel=1e-9)
  # Two epochs of t = 3: Monte Carlo over the product pair.
  two = ref["epochs"]
  assert (two["sigma"], two["t"], two["epsilon"], two["epochs"]) == (0.8, 3, eps[4], 2)
  assert low[4] <= two["monte_carlo"] + 5 * two["standard_error"]
  assert low[4] == pytest.approx(float(two["mpmath"]), rel=1e-9)


def test_the_tight_accountant_never_reports_the_gaussian_lower_bound_for_shuffling():
  # (2 complete epochs: the lower bound's program of the other scalar calls of 2 epochs)
  acct = PldAccountant()
  shuffled = ShuffledEpochs(2, Gaussian(1.0), batches_per_epoch=50)
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
  unknown = acct.epsilon(ShuffledEpochs(2, Gaussian(1.0)), 1e-5)
  assert float(unknown.epsilon_lower) == 0.0 and float(unknown.epsilon) > 0
  assert event_epsilon_lower_bound(ShuffledEpochs(2, Gaussian(1.0)), 1e-5) is None
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
  # (sigma as an array of one cell: the lower bound's program of the calibration's own calls)
  back = jaxrdp.dpsgd_epsilon(0.01, np.array([tight]), 1000, 1e-5, accountant="pld", **kw)
  assert float(back.epsilon[0]) <= 3.0
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
  # The same cell as an array of one, as the command's columns (the same programs).
  res = jaxrdp.dpsgd_epsilon(
    *(np.array([x]) for x in (256 / 60000, 1.1, 14063.0)), 1e-5, sampling="shuffle"
  )
  up, low = float(res.epsilon[0]), float(res.epsilon_lower[0])
  # Rounded to 5 digits: the upper bound up, the lower bound down.
  assert cells["epsilon"] == "57.653" and up <= 57.653
  assert cells["epsilon_lower"] == "6.8485" and low >= 6.8485
  assert main([*args, "--json", "--accountant", "pld"]) == 0
  (record,) = json.loads(capsys.readouterr().out)
  assert record["epsilon_lower"] == low
  assert record["epsilon_lower"] < record["epsilon"] < up
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
  # (the upper bound of one epoch), and dp_accounting's PLD for Poisson sampling (the
  # first and last stored: tests/make_shuffle_reference.py).
  result = json.loads((ROOT / "benchmarks" / "results" / "shuffle_bracket.json").read_text())
  ref = _reference()["figure"]
  one = result["one_epoch"]
  assert (one["steps"], one["delta"]) == (ref["steps"], ref["delta"]) == (1000, 1e-6)
  for i, point in zip((4, 14, 24), ref["points"], strict=True):  # sigma = 0.5, 1.0, 1.5
    sigma = one["sigmas"][i]
    assert sigma == point["sigma"]
    low = float(point["shuffle_lower_mpmath"])
    assert one["shuffle_lower"][i] == pytest.approx(low, rel=1e-9)
    exact = gaussian_epsilon(1 / sigma, 1e-6)
    assert exact <= one["shuffle_upper"][i] <= exact * (1 + 2e-5)
    assert one["poisson"][i] == pytest.approx(point["poisson_dp_accounting"], rel=2e-3)
  # The gap: at sigma = 0.8 shuffling's epsilon is at least 10 times Poisson's.
  assert one["shuffle_lower"][10] > 10 * one["poisson"][10]


def _reference():
  """The oracles' values (tests/make_shuffle_reference.py writes them)."""
  return json.loads((ROOT / "tests" / "data" / "shuffle_reference.json").read_text())


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
