"""DP-SGD training with the random-allocation sampler (make_dpsgd_step(sampler=RandomAllocationSampler)).

* What the step trains on: with sigma = 0 and a loss whose clipped gradient is the
  example's one-hot vector, one SGD step at learning rate n k / t subtracts the
  indicator of the batch the step used, so the batches are read off the parameters:
  every example in exactly k steps of an epoch without truncation, a truncated batch
  a subset of its allocation of exactly the capacity, padding never counted.
* Accounting: the step's epsilon against the one-shot jaxrdp.dpsgd_epsilon(
  sampling="allocation", capacity=, dataset_size=) (equal at epoch boundaries,
  never below mid-epoch), its truncation term against scipy's binomial tail, and
  its RDP against the mpmath sum over partitions of Feldman and Shenfeld 2025
  (tests/allocation_oracle.py); the budget guard refuses a whole epoch.
* A checkpoint resumes the run bit-exactly, mid-epoch.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from allocation_oracle import remove_log_moment_partitions
from scipy import stats

import jaxrdp
from jaxrdp import train

ORDERS = np.array([2.0, 3.0, 4.0, 6.0, 8.0, 16.0])


def _same(a, b):
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  return jax.tree.structure(a) == jax.tree.structure(b) and all(
    np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True) for x, y in zip(la, lb)
  )


def _run(step, sampler, data, state, k):
  infos = []
  for _ in range(k):
    batch, mask = train.next_batch(sampler, data, state)
    state, info = step(state, batch, mask)
    infos.append(info)
  return state, infos


# --------------------------------------------------------------------------
# The batches the step uses (sigma = 0: the update is the batch's indicator).

N1, T1, K1, CAP1 = 30, 5, 2, 16


def _onehot_loss(w, ex):
  return jnp.dot(w, ex["onehot"])


def _seed_with_truncation_in_epoch_1_only():
  """A seed whose epoch 0 never exceeds the capacity and whose epoch 1 does (host only)."""
  for seed in range(200):
    s = train.RandomAllocationSampler(N1, T1, CAP1, selected=K1, seed=seed)
    sizes = [s.batch_size(t) for t in range(2 * T1)]
    if max(sizes[:T1]) <= CAP1 < max(sizes[T1:]):
      return s
  raise AssertionError("no seed found")


@functools.cache
def _membership_setup():
  sampler = _seed_with_truncation_in_epoch_1_only()
  data = {"onehot": np.eye(N1, dtype=np.float32)}
  opt = optax.sgd(sampler.expected_batch_size)  # update = minus the batch's indicator
  # delta = 0.9: this small capacity truncates often (its term must stay below delta / 2).
  step = jax.jit(
    train.make_dpsgd_step(
      _onehot_loss, opt, sampler=sampler, clip_norm=1.0, sigma=0.0, delta=0.9, orders=ORDERS
    )
  )
  return sampler, data, opt, step


def test_each_example_in_exactly_k_steps_per_epoch_and_truncation_keeps_the_capacity():
  sampler, data, opt, step = _membership_setup()
  state = train.dpsgd_init(
    jnp.zeros(N1), opt, jax.random.PRNGKey(0), sampler=sampler, orders=ORDERS
  )
  used = []  # the indicator of each step's batch, read off the parameters
  for _ in range(2 * T1):
    idx, mask = sampler.sample(int(state.step))
    before = np.asarray(state.params)
    state, info = step(state, train.gather_batch(data, idx), mask)
    assert bool(info.applied)
    got = before - np.asarray(state.params)
    np.testing.assert_allclose(got, np.round(got), atol=1e-5)  # float32 rounding only
    used.append(np.round(got).astype(int))
    # The step used exactly the masked entries (the padding, index 0, is not counted).
    want = np.zeros(N1, int)
    want[idx[mask]] = 1
    np.testing.assert_array_equal(used[-1], want)
  used = np.array(used)  # [steps, examples]
  assert set(np.unique(used)) <= {0, 1}  # never twice in one step
  # Epoch 0 (no batch above the capacity): every example in exactly k of its t steps.
  np.testing.assert_array_equal(used[:T1].sum(axis=0), np.full(N1, K1))
  # Epoch 1: a batch above the capacity keeps exactly `capacity` of its members, a
  # subset of the allocation; the others keep all of theirs; nobody gets more than k.
  members_epoch_1 = sampler._epoch(1)
  truncated = 0
  for s in range(T1):
    allocated = np.zeros(N1, int)
    members, ends = members_epoch_1
    allocated[members[(ends[s - 1] if s else 0) : ends[s]]] = 1
    row = used[T1 + s]
    assert np.all(row <= allocated)
    assert row.sum() == min(allocated.sum(), CAP1)
    truncated += allocated.sum() > CAP1
  assert truncated >= 1
  assert np.all(used[T1:].sum(axis=0) <= K1) and used[T1:].sum() < N1 * K1
  # A batch of the wrong size is refused when the step is traced.
  with pytest.raises(ValueError, match="capacity"):
    step(state, train.gather_batch(data, np.zeros(CAP1 - 1, np.int32)), np.ones(CAP1 - 1, bool))


def test_a_capacity_whose_epoch_term_uses_up_delta_is_refused():
  opt = optax.sgd(0.1)
  s = train.RandomAllocationSampler(N1, T1, CAP1, selected=K1, seed=0)
  with pytest.raises(ValueError, match=r"capacity 16 is too small.*raise the capacity"):
    train.make_dpsgd_step(_onehot_loss, opt, sampler=s, clip_norm=1.0, sigma=1.0, delta=1e-5)


# --------------------------------------------------------------------------
# Accounting, the budget guard and checkpoints (k = 1, sigma = 1).

N2, T2, SIGMA, DELTA = 40, 4, 1.0, 1e-5
# Tight enough that the truncation term moves epsilon well above rounding (eta = 4e-9
# per epoch, (1 + e^eps) eta about a tenth of delta after two epochs), loose enough
# that it leaves most of delta.
CAP2 = 28
TARGET = 5.0  # allows two epochs of this run, not three (checked below)


def _quadratic_loss(w, ex):
  return (ex["x"] @ w - ex["y"]) ** 2


@functools.cache
def _accounting_setup():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(N2, 3)).astype(np.float32)
  data = {"x": x, "y": (x @ np.array([1.0, -2.0, 0.5], np.float32)).astype(np.float32)}
  sampler = train.RandomAllocationSampler(N2, T2, CAP2, seed=7)
  opt = optax.adam(0.05)
  step = jax.jit(
    train.make_dpsgd_step(
      _quadratic_loss,
      opt,
      sampler=sampler,
      clip_norm=1.0,
      sigma=SIGMA,
      delta=DELTA,
      target_epsilon=TARGET,
      orders=ORDERS,
    )
  )
  return sampler, data, opt, step


def _init(opt, sampler, key=0):
  return train.dpsgd_init(
    jnp.zeros(3, jnp.float32), opt, jax.random.PRNGKey(key), orders=ORDERS, sampler=sampler
  )


def _one_shot(steps, capacity=CAP2):
  """jaxrdp.dpsgd_epsilon of the run (truncation term included unless capacity is None)."""
  kw = {} if capacity is None else dict(capacity=capacity, dataset_size=N2)
  got = jaxrdp.dpsgd_epsilon(1 / T2, SIGMA, steps, DELTA, ORDERS, sampling="allocation", **kw)
  return np.asarray(got.epsilon, np.float64)


def test_step_epsilon_equals_one_shot_at_epoch_ends_never_below_it_and_the_guard_refuses_an_epoch():
  sampler, data, opt, step = _accounting_setup()
  state = _init(opt, sampler)
  state, infos = _run(step, sampler, data, state, 3 * T2)
  applied = [bool(i.applied) for i in infos]
  # Two epochs fit the budget; the third is refused at its first step, and so are the
  # steps after it (the counter does not advance).
  assert applied == [True] * (2 * T2) + [False] * T2 and int(state.step) == 2 * T2
  ends = {t: _one_shot(t) for t in (T2, 2 * T2, 2 * T2 + 1)}  # the one-shot at epoch ends
  assert ends[2 * T2] <= TARGET < ends[2 * T2 + 1]
  eps = np.array([float(i.epsilon) for i in infos])
  for t in range(1, 2 * T2 + 1):
    epoch_end = -(-t // T2) * T2
    # Mid-epoch: the whole epoch (and its truncation term) is already paid.
    assert eps[t - 1] == pytest.approx(ends[epoch_end], rel=1e-12), t
    assert eps[t - 1] <= TARGET
  # Never below the one-shot epsilon of the steps taken so far (mid-epoch: ceil(T / t)
  # epochs and T steps' truncation term), here where it is closest, one step before an end.
  for t in (T2 - 1, 2 * T2 - 1):
    assert eps[t - 1] >= _one_shot(t), t
  # A refused step reports the epsilon spent, unchanged.
  assert np.all(eps[2 * T2 :] == eps[2 * T2 - 1])
  # The truncation term is really paid: above the untruncated epsilon by more than rounding.
  for t in (T2, 2 * T2):
    assert eps[t - 1] > _one_shot(t, capacity=None) * (1 + 1e-6), t


def test_truncation_term_and_rdp_against_independent_references():
  sampler, data, opt, step = _accounting_setup()
  state, infos = _run(step, sampler, data, _init(opt, sampler), T2 + 1)  # two started epochs
  # The RDP the step composed: two epochs of Feldman and Shenfeld's remove-direction
  # moment, summed over the integer partitions of alpha in mpmath (the curve is the
  # maximum of the two directions; the remove direction is the larger one here).
  rdp = np.asarray(state.accountant.rdp)
  for i, a in enumerate(ORDERS):
    want = 2 * float(remove_log_moment_partitions(int(a), SIGMA, T2)) / (a - 1)
    assert rdp[i] == pytest.approx(want, rel=1e-10), a
  # The truncation term of the two epochs, from scipy's binomial tail at n + 1 examples:
  # the reported epsilon leaves room for it at delta (the untruncated delta at the
  # reported epsilon, plus (1 + e^eps) eta, is within delta).
  eta = 2 * T2 * float(stats.binom.sf(CAP2, N2 + 1, 1 / T2))
  assert 1e-9 < eta < DELTA / 2
  eps = float(infos[-1].epsilon)
  acct = jaxrdp.RdpAccountant(ORDERS)
  d_untruncated = float(acct.get_delta(state.accountant, eps).delta)
  assert d_untruncated + (1 + np.exp(eps)) * eta <= DELTA
  # Not wasteful: the fixed point leaves at most twice the term unused.
  assert d_untruncated + (1 + np.exp(eps)) * eta >= DELTA - 2.5 * (1 + np.exp(eps)) * eta
  # epsilon_with_truncation reads the same number from the state.
  again = train.epsilon_with_truncation(state.accountant, sampler, int(state.step), DELTA)
  assert float(again.epsilon) == pytest.approx(eps, rel=1e-12)


def test_resume_from_checkpoint_mid_epoch_is_bit_exact(tmp_path):
  sampler, data, opt, step = _accounting_setup()
  state0 = _init(opt, sampler)
  full, _ = _run(step, sampler, data, state0, 7)
  half, _ = _run(step, sampler, data, state0, 3)
  path = tmp_path / "allocation.npz"
  train.save_checkpoint(path, half)
  loaded = train.load_checkpoint(path, _init(opt, sampler, key=9))
  again = train.sampler_from_state(loaded.sampler)
  assert again == sampler and isinstance(loaded.sampler, train.AllocationSamplerState)
  resumed, _ = _run(step, again, data, loaded, 4)  # a fresh sampler object: no cache carried
  assert _same(resumed, full)
  # A template of another sampler refuses the checkpoint instead of resuming it.
  other = train.dpsgd_init(
    jnp.zeros(3, jnp.float32),
    opt,
    jax.random.PRNGKey(0),
    orders=ORDERS,
    sampler=train.PoissonSampler(N2, 1 / T2, CAP2),
  )
  with pytest.raises(train.CheckpointError, match="structure"):
    train.load_checkpoint(path, other)
  # The sampler's state round-trips for k > 1 as well; a mislabelled state is refused.
  s = train.RandomAllocationSampler(100, 7, 60, selected=3, seed=2**40)
  assert train.sampler_from_state(train.sampler_state(s)) == s
  with pytest.raises(ValueError, match="kind"):
    train.sampler_from_state(train.sampler_state(s)._replace(kind=jnp.int32(0)))


def test_k_out_of_t_composes_the_samplers_epoch_event():
  # k = 2: no dpsgd_epsilon spelling; the one-shot event RandomAllocation(k/t, ., T, k)
  # through the Renyi-DP accountant (capacity n: the truncation term is
  # (k/t)^(n+1) per step, 1e-29 here, far below rounding).
  n, t, k = 60, 6, 2
  s = train.RandomAllocationSampler(n, t, n, selected=k, seed=1)
  data = {"onehot": np.eye(n, dtype=np.float32)}
  opt = optax.sgd(0.1)
  step = jax.jit(
    train.make_dpsgd_step(
      _onehot_loss, opt, sampler=s, clip_norm=1.0, sigma=SIGMA, delta=DELTA, orders=ORDERS
    )
  )
  state = train.dpsgd_init(jnp.zeros(n), opt, jax.random.PRNGKey(0), orders=ORDERS, sampler=s)
  state, infos = _run(step, s, data, state, t + 1)
  event = jaxrdp.events.RandomAllocation(k / t, jaxrdp.events.Gaussian(SIGMA), t + 1, k)
  want = jaxrdp.RdpAccountant(ORDERS).epsilon(event, DELTA)
  assert float(infos[-1].epsilon) == pytest.approx(float(want.epsilon), rel=1e-12)
  assert float(infos[0].epsilon) == float(infos[t - 1].epsilon) < float(infos[t].epsilon)


def test_tight_epsilon_of_an_allocation_run_charges_started_epochs_with_truncation():
  # jaxrdp.train.tight_epsilon reads the run from its state: ceil(T / t) whole epochs
  # by the tight accountant, the truncation term of all their steps, as the step
  # charges them. Its certified bracket sits below the step's Renyi-DP epsilon and
  # above the untruncated tight bracket's lower end; a sigma or q that is not the
  # run's is refused by the state's own accountant.
  sampler, data, opt, step = _accounting_setup()
  state, infos = _run(step, sampler, data, _init(opt, sampler), T2 + 1)  # epoch 2 started
  got = train.tight_epsilon(state, q=1 / T2, sigma=SIGMA, delta=DELTA)
  want = jaxrdp.dpsgd_epsilon(
    1 / T2,
    SIGMA,
    2 * T2,
    DELTA,
    sampling="allocation",
    accountant="pld",
    capacity=CAP2,
    dataset_size=N2,
  )
  assert float(got.epsilon) == float(want.epsilon)
  # The lower bound is the run's (T2 + 1 steps), not the two whole epochs'.
  assert float(got.epsilon_lower) < float(want.epsilon_lower)
  # The truncated run's lower bound is the untruncated run's read at delta plus the
  # truncation term (jaxrdp.accountants._truncation), so at most the one at delta.
  run = jaxrdp.dpsgd_epsilon(1 / T2, SIGMA, T2 + 1, DELTA, sampling="allocation", accountant="pld")
  assert float(got.epsilon_lower) <= float(run.epsilon_lower)
  plain = jaxrdp.dpsgd_epsilon(
    1 / T2, SIGMA, 2 * T2, DELTA, sampling="allocation", accountant="pld"
  )
  assert float(plain.epsilon) < float(got.epsilon) < float(infos[-1].epsilon)
  rdp_acct = jaxrdp.accountants.RdpAccountant(ORDERS)  # the step's orders
  rdp = train.tight_epsilon(state, q=1 / T2, sigma=SIGMA, delta=DELTA, accountant=rdp_acct)
  assert float(rdp.epsilon) == pytest.approx(float(infos[-1].epsilon), rel=1e-9)
  with pytest.raises(ValueError, match="epochs of random allocation"):
    train.tight_epsilon(state, q=1 / T2, sigma=1.5 * SIGMA, delta=DELTA)
  with pytest.raises(ValueError, match="RandomAllocationSampler rate"):
    train.tight_epsilon(state, q=0.5, sigma=SIGMA, delta=DELTA)
  with pytest.raises(ValueError, match="schedule"):
    train.tight_epsilon(state, q=1 / T2, sigma=lambda t: SIGMA, delta=DELTA)
  fresh = train.tight_epsilon(_init(opt, sampler), q=1 / T2, sigma=SIGMA, delta=DELTA)
  assert float(fresh.epsilon) == 0.0
