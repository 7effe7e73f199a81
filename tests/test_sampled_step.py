"""The DP-SGD step on sampler batches (make_dpsgd_step(sampler=...)), for every sampler.

In-jit epsilon against jaxrdp.dpsgd_epsilon(sampling=, relation=); a resumed run
(through a checkpoint, the sampler rebuilt from it) equals an uninterrupted one; a
host pipeline and a device-resident dataset give the same run.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxrdp
from jaxrdp import train

DELTA = 1e-5
ORDERS = np.array([2.0, 3.0, 4.0, 8.0, 16.0, 32.0])
N, CAP = 60, 12
SIGMA = 1.0


def _problem():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(N, 3)).astype(np.float32)
  y = (x @ np.array([1.0, -2.0, 0.5], np.float32)).astype(np.float32)
  return {"x": x, "y": y}, jnp.zeros(3, jnp.float32)


def _loss(w, ex):
  return (ex["x"] @ w - ex["y"]) ** 2


SAMPLERS = {
  "poisson": lambda: train.PoissonSampler(n=N, q=0.1, capacity=CAP, seed=1),
  "fixed": lambda: train.FixedSizeSampler(n=N, batch_size=CAP, seed=2),
  "shuffle": lambda: train.ShuffleSampler(n=N, batch_size=CAP, seed=3),
}


@functools.cache
def _setup(kind):
  sampler = SAMPLERS[kind]()
  data, params = _problem()
  opt = optax.sgd(0.05)
  step = jax.jit(
    train.make_dpsgd_step(
      _loss, opt, sampler=sampler, clip_norm=1.0, sigma=SIGMA, delta=DELTA, orders=ORDERS
    )
  )
  return sampler, data, params, opt, step


def _run(step, sampler, data, state, k):
  infos = []
  for _ in range(k):
    batch, mask = train.next_batch(sampler, data, state)
    state, info = step(state, batch, mask)
    infos.append(info)
  return state, infos


def _same(a, b):
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  return jax.tree.structure(a) == jax.tree.structure(b) and all(
    np.array_equal(
      np.asarray(x), np.asarray(y), equal_nan=np.issubdtype(np.asarray(x).dtype, np.floating)
    )
    for x, y in zip(la, lb)
  )


@pytest.mark.parametrize("kind", ["poisson", "fixed", "shuffle"])
def test_resume_equals_uninterrupted_and_epsilon_matches(kind, tmp_path):
  sampler, data, params, opt, step = _setup(kind)
  state0 = train.dpsgd_init(params, opt, jax.random.PRNGKey(0), orders=ORDERS, sampler=sampler)
  full, infos = _run(step, sampler, data, state0, 7)
  half, _ = _run(step, sampler, data, state0, 3)
  path = tmp_path / "ckpt.npz"
  train.save_checkpoint(path, half)
  template = train.dpsgd_init(params, opt, jax.random.PRNGKey(9), orders=ORDERS, sampler=sampler)
  loaded = train.load_checkpoint(path, template)
  again = train.sampler_from_state(loaded.sampler)
  assert again == sampler
  resumed, _ = _run(step, again, data, loaded, 4)
  assert _same(resumed, full)
  assert all(bool(i.applied) for i in infos) and int(full.step) == 7
  # The in-jit epsilon is the scheme's accounting (q = B / n for fixed and shuffle).
  q = sampler.q if kind == "poisson" else CAP / N
  ref = jaxrdp.dpsgd_epsilon(q, SIGMA, 7, DELTA, ORDERS, sampling=kind)
  assert float(infos[-1].epsilon) == pytest.approx(float(ref.epsilon), rel=1e-10)


def test_device_resident_dataset_gives_the_same_run():
  sampler, data, params, opt, step = _setup("poisson")
  state0 = train.dpsgd_init(params, opt, jax.random.PRNGKey(0), orders=ORDERS, sampler=sampler)
  host, _ = _run(step, sampler, data, state0, 3)
  data_dev = jax.tree.map(jnp.asarray, data)
  step_dev = jax.jit(lambda s, idx, m: step(s, train.gather_batch(data_dev, idx), m))
  state = state0
  for _ in range(3):
    idx, mask = sampler.sample(int(state.step))
    state, _ = step_dev(state, idx, mask)
  assert _same(state, host)


def test_replace_one_and_guard_and_bad_arguments():
  sampler, data, params, opt, _ = _setup("shuffle")
  step = jax.jit(
    train.make_dpsgd_step(
      _loss,
      opt,
      sampler=sampler,
      clip_norm=1.0,
      sigma=SIGMA,
      delta=DELTA,
      orders=ORDERS,
      relation="replace_one",
      target_epsilon=20.0,
    )
  )
  state = train.dpsgd_init(params, opt, jax.random.PRNGKey(0), orders=ORDERS, sampler=sampler)
  state, infos = _run(step, sampler, data, state, 12)
  applied = [bool(i.applied) for i in infos]
  # Epochs of 5 steps; the guard stops at the start of the epoch that would exceed 20.
  k = sum(applied)
  assert applied == [True] * k + [False] * (12 - k) and k % 5 == 0 and 0 < k < 12
  ref = jaxrdp.dpsgd_epsilon(
    CAP / N, SIGMA, k, DELTA, ORDERS, sampling="shuffle", relation="replace_one"
  )
  assert float(infos[-1].epsilon) == pytest.approx(float(ref.epsilon), rel=1e-10)
  assert float(ref.epsilon) <= 20.0
  with pytest.raises(ValueError, match="relation"):
    train.make_dpsgd_step(
      _loss,
      opt,
      sampler=train.FixedSizeSampler(N, CAP),
      clip_norm=1.0,
      sigma=1.0,
      delta=DELTA,
      relation="add_remove",
    )
  with pytest.raises(ValueError, match="relation must be one of"):
    train.make_dpsgd_step(
      _loss, opt, sampler=sampler, clip_norm=1.0, sigma=1.0, delta=DELTA, relation="x"
    )
  with pytest.raises(ValueError, match="q or sampler"):
    train.make_dpsgd_step(_loss, opt, sampler=sampler, q=0.1, clip_norm=1.0, sigma=1.0, delta=DELTA)
  with pytest.raises(ValueError, match="sampler must be"):
    train.make_dpsgd_step(_loss, opt, sampler=object(), clip_norm=1.0, sigma=1.0, delta=DELTA)


def test_epsilon_with_truncation_equals_dpsgd_epsilon_with_capacity():
  from jaxrdp.events import Gaussian, PoissonSampled, SelfComposed

  n, q, steps, cap = 1000, 0.05, 300, 120
  acct = jaxrdp.RdpAccountant(ORDERS)
  state = acct.compose(acct.init(), SelfComposed(PoissonSampled(q, Gaussian(1.0)), steps))
  s = train.PoissonSampler(n=n, q=q, capacity=cap, seed=0)
  got = train.epsilon_with_truncation(state, s, steps, DELTA)
  ref = jaxrdp.dpsgd_epsilon(q, 1.0, steps, DELTA, ORDERS, capacity=cap, dataset_size=n)
  assert float(got.epsilon) == pytest.approx(float(ref.epsilon), rel=1e-12)
  with pytest.raises(ValueError, match="PoissonSampler"):
    train.epsilon_with_truncation(state, train.FixedSizeSampler(n, 10), steps, DELTA)


@pytest.mark.parametrize("kind", ["poisson", "fixed", "shuffle"])
def test_per_step_curve_stays_float64_with_x64_off(kind):
  # As the full-mask step's constant curve: with JAX's defaults (x64 off) the curve the
  # sampler step adds must be the float64 one, not a float32 rounding of it.
  sampler = SAMPLERS[kind]()
  data, params = _problem()
  opt = optax.sgd(0.05)
  with jax.enable_x64(False):
    step = jax.jit(
      train.make_dpsgd_step(
        _loss, opt, sampler=sampler, clip_norm=1.0, sigma=SIGMA, delta=DELTA, orders=ORDERS
      )
    )
    state = train.dpsgd_init(params, opt, jax.random.PRNGKey(0), orders=ORDERS, sampler=sampler)
    state, infos = _run(step, sampler, data, state, 2)
  assert all(bool(i.applied) for i in infos)
  rdp = np.asarray(state.accountant.rdp)
  assert rdp.dtype == np.float64
  # Two steps: two curves, or one epoch's curve for shuffling (5 steps per epoch).
  with jax.enable_x64(True):
    q = sampler.q if kind == "poisson" else sampler.batch_size / sampler.n
    scheme = jaxrdp.rdp._sampling.dpsgd_scheme(
      jaxrdp.events.dpsgd_event(q, SIGMA, 2.0, sampling=kind)
    )
    ref = np.asarray(scheme.rdp_f64(q, SIGMA, 2.0, ORDERS))
  np.testing.assert_allclose(rdp, ref, rtol=1e-14)
