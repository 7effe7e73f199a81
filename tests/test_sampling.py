"""Batch samplers with static shapes, the truncation term, and the gathered gradient."""

import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from scipy import stats

from jaxrdp.train import (
  FixedSizeSampler,
  PoissonSampler,
  RandomAllocationSampler,
  ShuffleSampler,
  default_capacity,
  dp_gradient,
  gathered_dp_gradient,
  truncated_poisson_delta,
  truncation_delta,
)

# Two-sided z for a family-wise 1e-3 error over the tested quantities.
_Z = 4.5


def test_poisson_batch_size_fits_binomial():
  n, q, steps = 200, 0.1, 3000
  s = PoissonSampler(n=n, q=q, capacity=n, seed=7)  # capacity n: never truncated
  sizes = np.array([s.sample(t)[1].sum() for t in range(steps)])
  # Chi-square against Binomial(n, q), bins with expected counts >= 5 (tails merged).
  k = np.arange(n + 1)
  expected = stats.binom.pmf(k, n, q) * steps
  lo, hi = np.flatnonzero(expected >= 5)[[0, -1]]
  obs = np.concatenate(
    [[np.sum(sizes <= lo)], [np.sum(sizes == i) for i in range(lo + 1, hi)], [np.sum(sizes >= hi)]]
  )
  exp = (
    np.concatenate(
      [
        [stats.binom.cdf(lo, n, q)],
        stats.binom.pmf(np.arange(lo + 1, hi), n, q),
        [stats.binom.sf(hi - 1, n, q)],
      ]
    )
    * steps
  )
  _, p = stats.chisquare(obs, exp)
  assert p > 1e-3, p
  # The power is real: a rate 10% off fails.
  exp_wrong = (
    np.concatenate(
      [
        [stats.binom.cdf(lo, n, 1.1 * q)],
        stats.binom.pmf(np.arange(lo + 1, hi), n, 1.1 * q),
        [stats.binom.sf(hi - 1, n, 1.1 * q)],
      ]
    )
    * steps
  )
  assert stats.chisquare(obs, exp_wrong * obs.sum() / exp_wrong.sum())[1] < 1e-3


def test_truncation_rate_matches_formula():
  n, q, cap, steps = 200, 0.1, 24, 3000
  s = PoissonSampler(n=n, q=q, capacity=cap, seed=3)
  truncated = 0
  for t in range(steps):
    k = s.batch_size(t)
    idx, mask = s.sample(t)
    assert mask.sum() == min(k, cap)
    assert len(set(idx[mask].tolist())) == mask.sum()
    truncated += k > cap
  p = truncation_delta(n, q, cap, 1)
  assert p == pytest.approx(stats.binom.sf(cap, n, q), rel=1e-8)
  sd = math.sqrt(steps * p * (1 - p))
  assert abs(truncated - steps * p) <= _Z * sd, (truncated, steps * p)


def test_poisson_inclusion_frequency_is_q():
  n, q, steps = 60, 0.2, 3000
  s = PoissonSampler(n=n, q=q, capacity=n, seed=11)
  counts = np.zeros(n)
  for t in range(steps):
    idx, mask = s.sample(t)
    np.add.at(counts, idx[mask], 1)
  sd = math.sqrt(steps * q * (1 - q))
  assert np.all(np.abs(counts - steps * q) <= _Z * sd), counts


def test_poisson_large_n_shapes_and_distinct():
  s = PoissonSampler(n=10**6, q=1e-3, capacity=default_capacity(10**6, 1e-3, 1000, 1e-6), seed=0)
  idx, mask = s.sample(5)
  assert idx.dtype == np.int32 and idx.shape == mask.shape == (s.capacity,)
  valid = idx[mask]
  assert np.all(np.diff(valid) > 0) and valid.min() >= 0 and valid.max() < 10**6
  assert np.all(idx[~mask] == 0)


def test_fixed_size_exactly_b_distinct_and_uniform():
  n, b, steps = 40, 8, 2000
  s = FixedSizeSampler(n=n, batch_size=b, seed=5)
  counts = np.zeros(n)
  for t in range(steps):
    idx, mask = s.sample(t)
    assert mask.all() and idx.shape == (b,)
    assert len(set(idx.tolist())) == b and idx.min() >= 0 and idx.max() < n
    np.add.at(counts, idx, 1)
  g = b / n
  assert np.all(np.abs(counts - steps * g) <= _Z * math.sqrt(steps * g * (1 - g)))
  assert s.sampling_ratio == 0.2


@pytest.mark.parametrize("n,b", [(103, 10), (100, 10), (7, 7)])
def test_shuffle_each_index_once_per_epoch(n, b):
  s = ShuffleSampler(n=n, batch_size=b, seed=2)
  epochs = []
  for e in range(3):
    seen = []
    for t in range(e * s.steps_per_epoch, (e + 1) * s.steps_per_epoch):
      idx, mask = s.sample(t)
      assert idx.shape == (b,)
      seen.extend(idx[mask].tolist())
    assert sorted(seen) == list(range(n))
    epochs.append(seen)
    last_mask = s.sample((e + 1) * s.steps_per_epoch - 1)[1]
    assert last_mask.sum() == (n % b or b)
  if n > b:
    assert epochs[0] != epochs[1]


def test_reproducible_and_resumable():
  for make in (
    lambda: PoissonSampler(n=500, q=0.05, capacity=50, seed=9),
    lambda: FixedSizeSampler(n=500, batch_size=20, seed=9),
    lambda: ShuffleSampler(n=500, batch_size=30, seed=9),
    lambda: RandomAllocationSampler(n=500, steps_per_epoch=16, capacity=45, selected=2, seed=9),
  ):
    a = [make().sample(t) for t in range(40)]
    resumed = make()  # a fresh sampler from the stored config, asked for steps 20..39
    b = [resumed.sample(t) for t in range(20, 40)]
    for (i1, m1), (i2, m2) in zip(a[20:], b):
      np.testing.assert_array_equal(i1, i2)
      np.testing.assert_array_equal(m1, m2)
    assert type(make())(**make().config()).sample(3)[0].tolist() == a[3][0].tolist()
  assert not np.array_equal(
    PoissonSampler(500, 0.05, 50, seed=1).sample(0)[0],
    PoissonSampler(500, 0.05, 50, seed=2).sample(0)[0],
  )


def test_bad_arguments_name_the_argument():
  with pytest.raises(ValueError, match="capacity"):
    PoissonSampler(n=100, q=0.1, capacity=0)
  with pytest.raises(ValueError, match="q"):
    PoissonSampler(n=100, q=0.0, capacity=10)
  with pytest.raises(ValueError, match="q"):
    PoissonSampler(n=100, q=1.5, capacity=10)
  with pytest.raises(ValueError, match="q"):
    PoissonSampler(n=100, q=float("nan"), capacity=10)
  with pytest.raises(ValueError, match="batch_size"):
    FixedSizeSampler(n=10, batch_size=11)
  with pytest.raises(ValueError, match="batch_size"):
    ShuffleSampler(n=10, batch_size=0)
  with pytest.raises(ValueError, match="n"):
    FixedSizeSampler(n=0, batch_size=1)
  with pytest.raises(ValueError, match="step"):
    FixedSizeSampler(n=10, batch_size=2).sample(-1)
  with pytest.raises(ValueError, match="capacity"):
    truncation_delta(100, 0.1, 0, 10)
  with pytest.raises(ValueError, match="q"):
    truncation_delta(100, 2.0, 10, 10)
  with pytest.raises(ValueError, match="delta"):
    default_capacity(100, 0.1, 10, 0.0)
  with pytest.raises(ValueError, match="steps"):
    default_capacity(100, 0.1, 0, 1e-5)


def test_truncation_delta_is_exact_tail_rounded_up():
  # Against the exact tail sum in 50-digit arithmetic.
  for n, q, cap, steps in [
    (200, 0.1, 40, 7),
    (1000, 0.01, 30, 100),
    (60001, 256 / 60000, 330, 14063),
  ]:
    with mp.workdps(50):
      qq = mp.mpf(q)
      exact = steps * mp.fsum(
        mp.binomial(n, k) * qq**k * (1 - qq) ** (n - k)
        for k in range(cap + 1, min(n, cap + 400) + 1)
      )
    got = truncation_delta(n, q, cap, steps)
    assert got >= float(exact) and got <= float(exact) * (1 + 1e-8), (got, exact)
  assert truncation_delta(100, 0.5, 100, 10) == 0.0
  assert truncation_delta(100, 0.5, 10, 0) == 0.0


def test_default_capacity_is_smallest_meeting_target():
  for n, q, steps, delta in [
    (60000, 256 / 60000, 14063, 1e-5),
    (10**6, 1e-3, 10**4, 1e-6),
    (1437, 0.05, 500, 1e-5),
  ]:
    b = default_capacity(n, q, steps, delta)
    target = 1e-3 * delta
    assert truncated_poisson_delta(truncation_delta(n + 1, q, b, steps), 16.0) <= target * (
      1 + 1e-6
    )
    assert truncated_poisson_delta(truncation_delta(n + 1, q, b - 1, steps), 16.0) > target
    assert q * n < b < q * n + 12 * math.sqrt(q * n) + 20


def test_truncated_poisson_delta():
  assert truncated_poisson_delta(0.0, 3.0, 1e-5) == 1e-5
  v = truncated_poisson_delta(1e-10, math.log(3.0), 1e-5)
  assert v >= 1e-5 + 4e-10 and v == pytest.approx(1e-5 + 4e-10, rel=1e-14)


def _model():
  def loss(params, ex):
    h = jnp.tanh(ex["x"] @ params["w1"])
    return (h @ params["w2"] - ex["y"]) ** 2

  k1, k2 = jax.random.split(jax.random.PRNGKey(0))
  params = {"w1": jax.random.normal(k1, (5, 4)), "w2": jax.random.normal(k2, (4,))}
  rng = np.random.default_rng(0)
  data = {
    "x": rng.normal(size=(300, 5)).astype(np.float32),
    "y": rng.normal(size=300).astype(np.float32),
  }
  return loss, params, data


def test_gathered_gradient_equals_masked_gradient_at_zero_noise():
  loss, params, data = _model()
  n = 300
  key = jax.random.PRNGKey(1)
  dev_data = jax.tree.map(jnp.asarray, data)
  full = jax.jit(
    lambda p, m, denom: dp_gradient(
      loss, p, dev_data, m, key, clip_norm=0.5, noise_multiplier=0.0, expected_batch_size=denom
    )
  )
  gathered = jax.jit(
    lambda p, d, i, m, denom: gathered_dp_gradient(
      loss, p, d, i, m, key, clip_norm=0.5, noise_multiplier=0.0, expected_batch_size=denom
    )
  )
  samplers = (
    PoissonSampler(n=n, q=0.05, capacity=32, seed=4),
    FixedSizeSampler(n=n, batch_size=32, seed=4),
    ShuffleSampler(n=n, batch_size=32, seed=4),
  )
  for sampler in samplers:
    idx, mask = sampler.sample(
      9
    )  # ShuffleSampler: step 9 is the short last batch (300 = 9 * 32 + 12)
    full_mask = np.zeros(n, bool)
    full_mask[idx[mask]] = True
    denom = sampler.expected_batch_size
    want = full(params, full_mask, denom)
    results = [gathered(params, dev_data, jnp.asarray(idx), jnp.asarray(mask), denom)]
    if isinstance(sampler, PoissonSampler):  # host data, host gather, eager
      results.append(
        gathered_dp_gradient(
          loss,
          params,
          data,
          idx,
          mask,
          key,
          clip_norm=0.5,
          noise_multiplier=0.0,
          expected_batch_size=denom,
        )
      )
    for got in results:
      for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-7)


def test_gathered_gradient_noise_std():
  # Zero data gradient: the result is pure noise with std sigma * C / m.
  loss = lambda w, ex: 0.0 * jnp.sum(w) * ex
  data = np.zeros(10, np.float32)
  idx, mask = FixedSizeSampler(n=10, batch_size=4, seed=0).sample(0)
  g = gathered_dp_gradient(
    loss,
    jnp.zeros(20000),
    data,
    idx,
    mask,
    jax.random.PRNGKey(3),
    clip_norm=2.0,
    noise_multiplier=1.5,
    expected_batch_size=4.0,
  )
  assert float(jnp.std(g)) == pytest.approx(1.5 * 2.0 / 4.0, rel=0.03)


def test_samplers_refuse_non_numbers_and_name_the_argument():
  # As jaxrdp.dpsgd_epsilon does: "0.1", b"0.1", Decimal, Fraction, a bool and a
  # longdouble are refused, not converted (a Decimal or Fraction rounded to a float
  # can land below the value given; q=True is not a rate of 1).
  import decimal
  import fractions

  bad = ["0.1", b"0.1", decimal.Decimal("0.1"), fractions.Fraction(1, 10), True, np.longdouble(0.1)]
  for x in bad:
    with pytest.raises(TypeError, match="^q must"):
      PoissonSampler(n=100, q=x, capacity=10)
    with pytest.raises(TypeError, match="^q must"):
      truncation_delta(100, x, 10, 10)
    with pytest.raises(TypeError, match="^q must"):
      default_capacity(100, x, 10, 1e-5)
    with pytest.raises(TypeError, match="^delta must"):
      default_capacity(100, 0.1, 10, x)
    with pytest.raises(TypeError, match="^fraction must"):
      default_capacity(100, 0.1, 10, 1e-5, fraction=x)
  for x in ["10", b"10", decimal.Decimal(10), fractions.Fraction(10), True]:
    with pytest.raises(TypeError, match="^capacity must"):
      PoissonSampler(n=100, q=0.1, capacity=x)
    with pytest.raises(TypeError, match="^batch_size must"):
      FixedSizeSampler(n=100, batch_size=x)
    with pytest.raises(TypeError, match="^steps must"):
      truncation_delta(100, 0.1, 10, x)


def test_seed_must_fit_an_int64():
  # The train state and its checkpoints store the seed as an int64: 2**63 used to be
  # accepted here and fail later in sampler_state with OverflowError.
  from jaxrdp.train._sampled_step import sampler_from_state, sampler_state

  for make in (
    lambda s: PoissonSampler(n=100, q=0.1, capacity=10, seed=s),
    lambda s: FixedSizeSampler(n=100, batch_size=10, seed=s),
    lambda s: ShuffleSampler(n=100, batch_size=10, seed=s),
  ):
    for seed in (2**63, 2**64 + 5, -1):
      with pytest.raises(ValueError, match="^seed must be in \\[0, 2\\*\\*63 - 1\\]"):
        make(seed)
    top = make(2**63 - 1)
    assert sampler_from_state(sampler_state(top)) == top


# --- Random allocation ("balls in bins", k-out-of-t) -------------------------------


@pytest.mark.parametrize("k", [1, 3])
def test_allocation_each_example_k_times_per_epoch(k):
  n, t = 103, 8
  s = RandomAllocationSampler(n=n, steps_per_epoch=t, capacity=n, selected=k, seed=4)
  epochs = []
  for e in range(3):
    counts = np.zeros(n, int)
    steps_of = [set() for _ in range(n)]
    for j in range(t):
      idx, mask = s.sample(e * t + j)
      batch = idx[mask]
      assert len(set(batch.tolist())) == batch.size == s.batch_size(e * t + j)
      assert np.all(idx[~mask] == 0)
      np.add.at(counts, batch, 1)
      for i in batch:
        steps_of[i].add(j)
    assert np.all(counts == k)  # never truncated (capacity n): exactly k steps each
    epochs.append([frozenset(x) for x in steps_of])
  assert epochs[0] != epochs[1]


def test_allocation_batch_size_fits_binomial():
  # Each example is in a given step with probability k / t independently of the others:
  # the batch size is Binomial(n, k / t). Chi-square over 3000 steps (375 epochs).
  n, t, k, steps = 120, 8, 2, 3000
  s = RandomAllocationSampler(n=n, steps_per_epoch=t, capacity=n, selected=k, seed=7)
  sizes = np.array([s.batch_size(j) for j in range(steps)])
  q = k / t
  lo, hi = int(stats.binom.ppf(0.003, n, q)), int(stats.binom.ppf(0.997, n, q))
  edges = np.arange(lo, hi + 1)
  obs = np.array([np.sum(sizes <= lo)] + [np.sum(sizes == i) for i in edges[1:-1]])
  obs = np.append(obs, np.sum(sizes >= hi))
  exp = np.concatenate(
    [
      [stats.binom.cdf(lo, n, q)],
      stats.binom.pmf(edges[1:-1], n, q),
      [stats.binom.sf(hi - 1, n, q)],
    ]
  )
  _, p = stats.chisquare(obs, exp * steps)
  assert p > 1e-3, p
  # Power: a rate 10% off fails.
  wrong = np.concatenate(
    [
      [stats.binom.cdf(lo, n, 1.1 * q)],
      stats.binom.pmf(edges[1:-1], n, 1.1 * q),
      [stats.binom.sf(hi - 1, n, 1.1 * q)],
    ]
  )
  assert stats.chisquare(obs, wrong * steps / wrong.sum())[1] < 1e-3


def test_allocation_pairs_independent_and_subsets_uniform():
  # Two given examples share a step with probability 1 - C(t - k, k) / C(t, k) (their
  # k-subsets are independent and uniform), and the k-subset of one example takes
  # each of its C(t, k) values with probability 1 / C(t, k).
  n, t, k, epochs = 40, 5, 2, 600
  s = RandomAllocationSampler(n=n, steps_per_epoch=t, capacity=n, selected=k, seed=11)
  share = 0
  subsets = {}
  for e in range(epochs):
    steps_of = [[] for _ in range(n)]
    for j in range(t):
      idx, mask = s.sample(e * t + j)
      for i in idx[mask]:
        steps_of[i].append(j)
    share += bool(set(steps_of[0]) & set(steps_of[1]))
    key = tuple(steps_of[2])
    subsets[key] = subsets.get(key, 0) + 1
  p = 1 - math.comb(t - k, k) / math.comb(t, k)
  assert abs(share - epochs * p) <= _Z * math.sqrt(epochs * p * (1 - p))
  assert len(subsets) == math.comb(t, k)
  _, pv = stats.chisquare(list(subsets.values()))
  assert pv > 1e-3


def test_allocation_truncation_rate_and_kept_subset():
  n, t, cap, steps = 200, 10, 24, 2000
  s = RandomAllocationSampler(n=n, steps_per_epoch=t, capacity=cap, seed=3)
  truncated = 0
  for j in range(steps):
    k = s.batch_size(j)
    idx, mask = s.sample(j)
    assert mask.sum() == min(k, cap)
    assert len(set(idx[mask].tolist())) == mask.sum()
    truncated += k > cap
  p = stats.binom.sf(cap, n, 1 / t)
  assert abs(truncated - steps * p) <= _Z * math.sqrt(steps * p * (1 - p)), (truncated, steps * p)
  assert s.truncation_delta(steps) == truncation_delta(n + 1, 0.1, cap, steps)
  assert s.truncation_delta(steps) >= steps * stats.binom.sf(cap, n + 1, 0.1)


def test_allocation_truncation_keeps_a_uniform_subset():
  # A truncated batch keeps a uniformly random subset of its members: over many
  # epochs of an overfull step, every member is kept equally often.
  n, t, cap = 30, 2, 5  # steps hold ~15 examples, 5 kept
  s = RandomAllocationSampler(n=n, steps_per_epoch=t, capacity=cap, seed=5)
  kept = np.zeros(n)
  present = np.zeros(n)
  for e in range(3000):
    full = s._members(e * t)
    idx, mask = s.sample(e * t)
    np.add.at(present, full, 1)
    np.add.at(kept, idx[mask], 1)
  rate = kept / present  # ~ cap / (batch size), the same for every example
  assert np.all(np.abs(rate - rate.mean()) < 0.03), rate


def test_allocation_bad_arguments_name_the_argument():
  with pytest.raises(ValueError, match="^capacity"):
    RandomAllocationSampler(n=100, steps_per_epoch=10, capacity=0)
  with pytest.raises(ValueError, match="^capacity"):
    RandomAllocationSampler(n=100, steps_per_epoch=10, capacity=101)
  with pytest.raises(ValueError, match="^selected"):
    RandomAllocationSampler(n=100, steps_per_epoch=10, capacity=20, selected=11)
  with pytest.raises(ValueError, match="^steps_per_epoch"):
    RandomAllocationSampler(n=100, steps_per_epoch=0, capacity=20)
  with pytest.raises(ValueError, match="^step"):
    RandomAllocationSampler(n=100, steps_per_epoch=10, capacity=20).sample(-1)
  with pytest.raises(ValueError, match="^selected must be an integer"):
    RandomAllocationSampler(n=100, steps_per_epoch=10, capacity=20, selected=1.5)
  for x in ["10", b"10", True]:
    with pytest.raises(TypeError, match="^steps_per_epoch must"):
      RandomAllocationSampler(n=100, steps_per_epoch=x, capacity=20)
  for seed in (2**63, -1):
    with pytest.raises(ValueError, match="^seed must be in"):
      RandomAllocationSampler(n=100, steps_per_epoch=10, capacity=20, seed=seed)
  s = RandomAllocationSampler(n=100, steps_per_epoch=10, capacity=20, seed=2**63 - 1)
  assert RandomAllocationSampler(**s.config()) == s
