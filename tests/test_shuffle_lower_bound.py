"""The lower bound on shuffled DP-SGD's epsilon (Chua et al. 2024, arXiv:2403.17673).

References: the paper's cube-event bound maximized in 40-digit mpmath
(tests/shuffle_oracle.py; its values stored in tests/data/shuffle_reference.json by
tests/make_shuffle_reference.py); the exact Gaussian mechanism (one batch per epoch,
where the bound is tight, and an upper bound on shuffling); dp_accounting's PLD
accountant for Poisson sampling (the comparison the paper's first figure draws).
"""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrdp.mechanisms import (
  analytic_gaussian_delta,
  shuffle_delta_lower_bound,
  shuffle_epsilon_lower_bound,
)


def _mpmath_cases(kind, given):
  """``(sigma, t, given, mpmath value)`` arrays of the stored single-epoch references
  (tests/data/shuffle_reference.json: the oracle's values, by tests/make_shuffle_reference.py)."""
  with open(os.path.join(os.path.dirname(__file__), "data", "shuffle_reference.json")) as f:
    cases = json.load(f)["single_epoch"][kind]
  return tuple(np.array([c[k] for c in cases]) for k in ("sigma", "t", given)) + (
    np.array([float(c["mpmath"]) for c in cases]),
  )


def test_single_epoch_against_mpmath():
  s, t, d, want = _mpmath_cases("epsilon", "delta")
  assert s.tolist() == [0.5, 2.0, 0.8] and t.tolist() == [1000, 100, 10]
  got = np.asarray(shuffle_epsilon_lower_bound(s, t, d))
  # A lower bound of a maximum found by search: never above it, and within 1e-10.
  assert np.all(got <= want * (1 + 1e-15)), got - want
  np.testing.assert_allclose(got, want, rtol=1e-10)
  s, t, e, want = _mpmath_cases("delta", "epsilon")
  assert s.tolist() == [0.5, 1.0, 2.0, 1.3] and t.tolist() == [1000, 1000, 100, 1]
  got = np.asarray(shuffle_delta_lower_bound(s, t, e))
  assert np.all(got <= want)
  np.testing.assert_allclose(got, want, rtol=1e-9)
  # t = 1 (last case): N(2, s^2) against N(1, s^2), where threshold events are optimal:
  # the Gaussian mechanism's exact delta.
  np.testing.assert_allclose(got[3], float(analytic_gaussian_delta(0.5, 1.3)), rtol=1e-9)


def test_between_the_gaussian_bound_and_zero_and_monotone():
  sig = np.array([0.4, 0.7, 1.0, 2.0])
  epochs = np.array([[1], [3], [8]])
  eps = np.array([1.0])
  dyn = np.asarray(shuffle_delta_lower_bound(sig, 500, eps, epochs))
  # Persistent shuffling, and in the same call one epoch at sigma / sqrt(E).
  both = np.asarray(
    shuffle_delta_lower_bound(
      np.concatenate([np.broadcast_to(sig, (3, 4)), sig / np.sqrt(epochs)]),
      500,
      eps,
      np.concatenate([np.broadcast_to(epochs, (3, 4)), np.ones((3, 4))]),
      reshuffle=False,
    )
  )
  per, one = both[:3], both[3:]
  # Without amplification, E epochs are a Gaussian mechanism at sigma / sqrt(E): an
  # upper bound on shuffling, persistent or dynamic.
  gauss = np.asarray(analytic_gaussian_delta(eps, sig / np.sqrt(epochs)))
  assert np.all(dyn <= gauss) and np.all(per <= gauss) and np.all(dyn >= 0)
  # Persistent shuffling is exactly one epoch at sigma / sqrt(E).
  np.testing.assert_allclose(per, one, rtol=1e-12)
  # More epochs, less noise: never a smaller lower bound.
  assert np.all(np.diff(dyn, axis=0) >= 0) and np.all(np.diff(dyn, axis=1) <= 0)


def test_shuffling_gap_against_poisson():
  # The paper's first figure: for T = 1000 steps (one epoch) and delta = 1e-6, the
  # epsilon of shuffled batches is at least this lower bound, which lies far above
  # the epsilon of Poisson sampling at rate 1/1000 (dp_accounting's PLD upper bound)
  # for small noise multipliers, and below the Gaussian mechanism's.
  from dp_accounting import pld

  sig = np.array([0.5, 0.6, 0.8])
  # (t and delta as arrays of the same shape: the program of test_single_epoch_against_mpmath)
  lb = np.asarray(shuffle_epsilon_lower_bound(sig, np.full(3, 1000), np.full(3, 1e-6)))
  pois = np.array(
    [
      pld.privacy_loss_distribution.from_gaussian_mechanism(
        s, sampling_prob=1e-3, value_discretization_interval=1e-3
      )
      .self_compose(1000)
      .get_epsilon_for_delta(1e-6)
      for s in sig
    ]
  )
  assert np.all(lb > 2.0 * pois), (lb, pois)
  assert lb[0] == pytest.approx(10.9969, abs=1e-4)


def test_validation_and_tracing():
  with pytest.raises(ValueError, match="^sigma"):
    shuffle_epsilon_lower_bound(0.0, 10, 1e-5)
  with pytest.raises(ValueError, match="^delta"):
    shuffle_epsilon_lower_bound(1.0, 10, 1.0)
  with pytest.raises(ValueError, match="^steps_per_epoch must be an integer"):
    shuffle_epsilon_lower_bound(1.0, 10.5, 1e-5)
  with pytest.raises(ValueError, match="^epochs"):
    shuffle_delta_lower_bound(1.0, 10, 1.0, 0)
  with pytest.raises(TypeError, match="^reshuffle"):
    shuffle_delta_lower_bound(1.0, 10, 1.0, reshuffle=1)
  # Under jit and vmap (persistent shuffling: no static epoch count needed).
  # (the reference: arrays of three, the program of test_single_epoch_against_mpmath)
  f = jax.jit(jax.vmap(lambda s: shuffle_epsilon_lower_bound(s, 1000, 1e-6, 4, reshuffle=False)))
  got = np.asarray(f(jnp.array([1.0, 2.0, 1.6])))
  want = np.asarray(
    shuffle_epsilon_lower_bound(np.array([0.5, 1.0, 0.8]), np.full(3, 1000), np.full(3, 1e-6))
  )
  np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_mixed_grid_is_evaluated_by_epoch_bucket(monkeypatch):
  # Dynamic shuffling: the count statistic of a call is padded to a power of two (a
  # bucket). A call of small epoch counts and a few large ones is evaluated in groups:
  # the small cells are not padded to the large cells' bucket.
  from jaxrdp.mechanisms import _shuffle_lower_bound as slb

  # 24 cells of 1 to 30 epochs and 3 of 500: two groups (another compilation costs less
  # than padding 24 cells to 512), and the small cells stay together (their 32 costs
  # less than a compilation per bucket).
  epochs = np.array([1, 2, 3, 5, 7, 12, 20, 30] * 3 + [500] * 3)[:, None]
  shape, groups = slb._epoch_groups((np.array([0.5, 1.0]), 50, epochs, 1e-5), True)
  assert shape == (27, 2)
  assert [b for b, _ in groups] == [32, 512]
  np.testing.assert_array_equal(groups[1][1], np.arange(48, 54))
  # Every cell of the grid once, in C order within a group.
  np.testing.assert_array_equal(np.sort(np.concatenate([i for _, i in groups])), np.arange(54))

  # Below: every bucket a group of its own (no compilation cost), for small calls.
  monkeypatch.setattr(slb, "_COMPILE_COST", 0)
  sigma = np.array([[0.5, 0.8], [1.2, 0.7]])
  epochs = np.array([[1, 3], [4, 40]])
  shape, groups = slb._epoch_groups((sigma, 50, epochs, 1e-5), True)
  assert shape == (2, 2)
  assert [(b, i.tolist()) for b, i in groups] == [(1, [0]), (4, [1, 2]), (64, [3])]
  # One piece: a single bucket (the call as it is), persistent shuffling, traced values.
  assert slb._epoch_groups((sigma, 50, np.array([[3, 4]]), 1e-5), True) is None
  assert slb._epoch_groups((sigma, 50, epochs, 1e-5), False) is None
  assert slb._epoch_groups((sigma, 50, jnp.asarray(epochs), 1e-5), True) is not None

  # Each cell's value is that of the cell alone, bit for bit (each cell a call of its own,
  # as arrays of one cell: the groups of one cell above are the same programs).
  got = np.asarray(shuffle_epsilon_lower_bound(sigma, 50, 1e-5, epochs))
  assert got.shape == (2, 2) and got.dtype == np.float64 and np.all(got > 0)
  alone = [
    float(shuffle_epsilon_lower_bound(*(np.array([x], np.float64) for x in (s, 50, 1e-5, e)))[0])
    for s, e in zip(sigma.flat, epochs.flat)
  ]
  np.testing.assert_array_equal(got.ravel(), alone)
  # A second call of the same grid compiles nothing new.
  compiled = slb._bound_jit._cache_size()
  np.testing.assert_array_equal(
    np.asarray(shuffle_epsilon_lower_bound(sigma, 50, 1e-5, epochs)), got
  )
  assert slb._bound_jit._cache_size() == compiled

  # The compiled calls each makes (the kernel replaced by one that returns its bucket).
  seen = []

  def marker(sigma, t, epochs, given, *, kind, reshuffle, e_max, relation):
    seen.append((np.shape(sigma), e_max))
    return jnp.full(jnp.broadcast_shapes(*map(jnp.shape, (sigma, t, epochs, given))), e_max * 1.0)

  monkeypatch.setattr(slb, "_bound_jit", marker)
  for fn, given in ((shuffle_epsilon_lower_bound, 1e-5), (shuffle_delta_lower_bound, 1.0)):
    seen.clear()
    out = np.asarray(fn(sigma, 50, given, epochs))
    assert seen == [((1,), 1), ((2,), 4), ((1,), 64)], seen
    np.testing.assert_array_equal(out, [[1, 4], [4, 64]])
  # Traced (jit): the values, and so the groups, are unknown: one call padded to the
  # largest count, as before.
  seen.clear()
  out = jax.jit(lambda s: shuffle_epsilon_lower_bound(s, 50, 1e-5, epochs))(sigma)
  assert seen == [((2, 2), 64)], seen
  np.testing.assert_array_equal(out, np.full((2, 2), 64.0))
