"""Tests for the DP-SGD training integration.

Oracles: scipy's chi-square distribution and Binomial pmf for the sampler,
per-example gradients computed one at a time in NumPy for the DP gradient,
jaxrdp.dpsgd_epsilon and hand-composed RDP curves for the in-jit accountant,
dp_accounting's RdpAccountant for the example's printed numbers.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

import jaxrdp
from jaxrdp.rdp._accountant import add_rdp_curve

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "dpsgd_digits.py"
DELTA = 1e-5

# dp_accounting's default RDP orders (REFERENCE.md).
DPA_ORDERS = np.array(
  [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024],
  dtype=np.float64,
)


# --------------------------------------------------------------------------
# A tiny problem: logistic regression on 40 synthetic points.


def _tiny_problem(n=40, d=3, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  y = (x[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(np.int32)
  params = {"w": jnp.zeros((d, 2), jnp.float32), "b": jnp.zeros((2,), jnp.float32)}
  return (jnp.asarray(x), jnp.asarray(y)), params


def _tiny_loss(params, example):
  x, y = example
  return optax.softmax_cross_entropy_with_integer_labels(x @ params["w"] + params["b"], y)


def _run_steps(step, state, data, length):
  """``length`` steps in one jitted scan; returns final state and stacked infos."""
  return _scan_runner(step, length)(state, data)


@functools.cache
def _scan_runner(step, length):
  @jax.jit
  def run(s, d):
    return jax.lax.scan(lambda c, _: step(c, d), s, None, length=length)

  return run


@functools.cache
def _adam_setup():
  """Shared tiny configuration (one compilation for the checkpoint tests)."""
  data, params = _tiny_problem()
  opt = optax.adam(0.05)
  step = jaxrdp.train.make_dpsgd_step(_tiny_loss, opt, clip_norm=1.0, q=0.2, sigma=1.0, delta=DELTA)
  return step, opt, data, params


# --------------------------------------------------------------------------
# References, jitted once in float64 (jaxrdp's eager kernels dispatch op by op).

_PAD = 64


@functools.cache
def _ref_fn():
  # One compiled function for both references (the SGM quadrature compiles slowly).
  def f(q, s, steps, d):
    r = jaxrdp.dpsgd_epsilon(q, s, steps, d)
    return r.epsilon, r.order, jaxrdp.mechanisms.sgm_rdp(q, s, jnp.asarray(jaxrdp.DEFAULT_ORDERS))

  return jax.jit(f)


def _ref(q, sigma, steps, delta):
  steps = np.atleast_1d(np.asarray(steps, np.float64))
  padded = np.ones(_PAD)
  padded[: steps.size] = steps
  with jax.enable_x64(True):
    eps, order, curve = _ref_fn()(np.float64(q), np.float64(sigma), padded, np.float64(delta))
    k = steps.size
    return np.asarray(eps)[:k], np.asarray(order)[:k], np.asarray(curve)


def ref_dpsgd_epsilon(q, sigma, steps, delta=DELTA):
  """jaxrdp.dpsgd_epsilon for up to 64 step counts (one compiled shape)."""
  eps, order, _ = _ref(q, sigma, steps, delta)
  return eps, order


def ref_curve(q, sigma):
  """jaxrdp.mechanisms.sgm_rdp(q, sigma, DEFAULT_ORDERS) as a float64 numpy array."""
  return _ref(q, sigma, 1, DELTA)[2]


@functools.cache
def _jit_rdp_to_epsilon():
  return jax.jit(jaxrdp.rdp_to_epsilon)


def ref_rdp_to_epsilon(rdp, orders=None, delta=DELTA):
  orders = jaxrdp.DEFAULT_ORDERS if orders is None else orders
  with jax.enable_x64(True):
    r = _jit_rdp_to_epsilon()(np.asarray(rdp), np.asarray(orders), np.float64(delta))
    return float(r.epsilon), float(r.order)


def f64(x):
  """A float64 jax array (traced arguments keep full precision and one dtype)."""
  with jax.enable_x64(True):
    return jnp.asarray(x, jnp.float64)


@functools.cache
def _vguard():
  """privacy_guard under jit and vmap over (q, sigma, target)."""
  f = lambda acc, q, s, t: jaxrdp.train.privacy_guard(acc, q, s, delta=DELTA, target_epsilon=t)
  return jax.jit(jax.vmap(f, in_axes=(None, 0, 0, 0)))


def _acc_after(q, sigma, steps):
  """Accountant after ``steps`` SGM steps, built from the reference curve."""
  return add_rdp_curve(jaxrdp.RdpAccountant().init(), ref_curve(q, sigma), steps)


def _tree_equal(a, b):
  """Bitwise equality of two pytrees (same structure, dtypes and values; NaN == NaN)."""
  if jax.tree.structure(a) != jax.tree.structure(b):
    return False

  def arr(x):
    if hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    return np.asarray(x)

  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    x, y = arr(x), arr(y)
    nan_ok = np.issubdtype(x.dtype, np.floating)
    if x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=nan_ok):
      return False
  return True


def test_core_does_not_import_optax():
  code = "import sys, jaxrdp; assert 'optax' not in sys.modules and 'sklearn' not in sys.modules"
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_public_names():
  names = {
    "CheckpointError",
    "DPSGDState",
    "PrivacyGuard",
    "SGMCache",
    "StepInfo",
    "clip_per_example",
    "dp_gradient",
    "dpsgd_init",
    "load_checkpoint",
    "make_dpsgd_step",
    "per_example_grads",
    "poisson_sample_mask",
    "privacy_guard",
    "save_checkpoint",
  }
  assert names <= set(jaxrdp.train.__all__)
  assert all(hasattr(jaxrdp.train, n) for n in names)
  assert issubclass(jaxrdp.train.CheckpointError, ValueError)


# --------------------------------------------------------------------------
# Poisson sampling


def _binomial_chi_square(sizes, n, q):
  """Chi-square GOF p-value of observed batch sizes against Binomial(n, q).

  Cells with expected count < 5 are merged into the two tails.
  """
  m = sizes.size
  pmf = stats.binom.pmf(np.arange(n + 1), n, q)
  counts = np.bincount(sizes, minlength=n + 1).astype(float)
  expected = m * pmf
  lo = int(np.argmax(np.cumsum(expected) >= 5))
  hi = n - int(np.argmax(np.cumsum(expected[::-1]) >= 5))
  obs = np.concatenate([[counts[: lo + 1].sum()], counts[lo + 1 : hi], [counts[hi:].sum()]])
  exp = np.concatenate([[expected[: lo + 1].sum()], expected[lo + 1 : hi], [expected[hi:].sum()]])
  stat = float(np.sum((obs - exp) ** 2 / exp))
  return float(stats.chi2.sf(stat, obs.size - 1))


def _sample_sizes(q, n=200, m=4000, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), m)
  masks = jax.jit(jax.vmap(lambda k: jaxrdp.train.poisson_sample_mask(k, n, q)))(keys)
  return np.asarray(masks), np.asarray(masks.sum(axis=1))


def test_poisson_batch_size_is_binomial():
  n, q = 200, 0.1
  masks, sizes = _sample_sizes(q, n)
  assert _binomial_chi_square(sizes, n, q) > 1e-3
  # Each example is included with probability q: per-index counts over
  # m draws are Binomial(m, q), so their standardized squares sum ~ chi2(n).
  m = masks.shape[0]
  counts = masks.sum(axis=0)
  z2 = np.sum((counts - m * q) ** 2 / (m * q * (1 - q)))
  assert stats.chi2.sf(z2, n) > 1e-3


def test_poisson_chi_square_has_power():
  # The same test rejects a sampler whose rate is off by 10%.
  n = 200
  _, sizes = _sample_sizes(0.11, n)
  assert _binomial_chi_square(sizes, n, 0.1) < 1e-6


def test_poisson_mask_edges_plain_jit_vmap():
  key = jax.random.PRNGKey(3)
  m = jaxrdp.train.poisson_sample_mask(key, 500, 0.3)
  assert m.shape == (500,) and m.dtype == jnp.bool_
  assert not bool(jaxrdp.train.poisson_sample_mask(key, 500, 0.0).any())
  assert bool(jaxrdp.train.poisson_sample_mask(key, 500, 1.0).all())
  jitted = jax.jit(jaxrdp.train.poisson_sample_mask, static_argnums=1)
  np.testing.assert_array_equal(jitted(key, 500, 0.3), m)
  qs = jnp.array([0.0, 0.3, 1.0])
  vm = jax.vmap(jaxrdp.train.poisson_sample_mask, in_axes=(None, None, 0))(key, 500, qs)
  np.testing.assert_array_equal(vm[1], m)
  assert not bool(vm[0].any()) and bool(vm[2].all())
  assert jaxrdp.train.poisson_sample_mask(key, 0, 0.5).shape == (0,)


def test_poisson_mask_is_nested_in_q():
  # Same key, larger q: a superset (the threshold rule is monotone), which
  # also shows a schedule changing q needs no new shapes.
  key = jax.random.PRNGKey(7)
  small = np.asarray(jaxrdp.train.poisson_sample_mask(key, 1000, 0.05))
  large = np.asarray(jaxrdp.train.poisson_sample_mask(key, 1000, 0.2))
  assert np.all(large[small])


@pytest.mark.parametrize("q", [-0.1, 1.5, float("nan")])
def test_poisson_mask_rejects_bad_q(q):
  with pytest.raises(ValueError, match="q"):
    jaxrdp.train.poisson_sample_mask(jax.random.PRNGKey(0), 10, q)


def test_poisson_mask_rejects_bad_n():
  with pytest.raises(ValueError, match="n"):
    jaxrdp.train.poisson_sample_mask(jax.random.PRNGKey(0), -1, 0.5)
  with pytest.raises(ValueError, match="n"):
    jaxrdp.train.poisson_sample_mask(jax.random.PRNGKey(0), 2.5, 0.5)
  with pytest.raises(ValueError, match="scalar"):
    jaxrdp.train.poisson_sample_mask(jax.random.PRNGKey(0), 3, jnp.array([0.1, 0.2]))


# --------------------------------------------------------------------------
# Clipping and the DP gradient


def _numpy_dp_sum(params, data, mask, clip):
  """Independent reference: one jax.grad per example, clipped in NumPy."""
  x, y = data
  total = {k: np.zeros(v.shape, np.float64) for k, v in params.items()}
  grad_one = jax.jit(jax.grad(_tiny_loss))  # one example at a time, no vmap
  for i in range(x.shape[0]):
    if not mask[i]:
      continue
    g = grad_one(params, (x[i], y[i]))
    g = {k: np.asarray(v, np.float64) for k, v in g.items()}
    norm = math.sqrt(sum(float(np.sum(v**2)) for v in g.values()))
    f = min(1.0, clip / norm) if norm > 0 else 1.0
    for k in total:
      total[k] += f * g[k]
  return total


def test_clip_bound_holds():
  rng = np.random.default_rng(1)
  grads = {
    "a": jnp.asarray(rng.normal(size=(64, 5, 3)) * rng.uniform(0, 5, size=(64, 1, 1)), jnp.float32),
    "b": jnp.asarray(rng.normal(size=(64, 4)), jnp.float32),
  }
  grads["a"] = grads["a"].at[0].set(0.0)
  grads["b"] = grads["b"].at[0].set(0.0)
  for fn in (jaxrdp.train.clip_per_example, jax.jit(jaxrdp.train.clip_per_example)):
    clipped, norms = fn(grads, 1.5)
    flat = np.concatenate(
      [np.asarray(clipped["a"]).reshape(64, -1), np.asarray(clipped["b"])], axis=1
    )
    after = np.linalg.norm(flat.astype(np.float64), axis=1)
    before = np.linalg.norm(
      np.concatenate([np.asarray(grads["a"]).reshape(64, -1), np.asarray(grads["b"])], 1),
      axis=1,
    )
    np.testing.assert_allclose(np.asarray(norms), before, rtol=1e-5)
    assert np.all(after <= 1.5 * (1 + 1e-6))
    small = before <= 1.5
    np.testing.assert_allclose(after[small], before[small], rtol=1e-6)
    np.testing.assert_allclose(after[~small], 1.5, rtol=1e-5)
    assert np.all(np.isfinite(flat)) and np.all(flat[0] == 0)
  # vmap over the clip norm
  _, norms = jax.vmap(jaxrdp.train.clip_per_example, in_axes=(None, 0))(
    grads, jnp.array([0.5, 2.0])
  )
  assert norms.shape == (2, 64)


def test_dp_gradient_matches_per_example_reference():
  data, params = _tiny_problem()
  params = jax.tree.map(lambda p: p + 0.3, params)
  mask = np.asarray(jaxrdp.train.poisson_sample_mask(jax.random.PRNGKey(2), 40, 0.5))
  q, clip = 0.5, 0.2
  ref = _numpy_dp_sum(params, data, mask, clip)
  kw = dict(clip_norm=clip, noise_multiplier=0.0, expected_batch_size=q * 40)
  # (plain calls of dp_gradient are exercised by the tests below)
  got = jax.jit(
    lambda m: jaxrdp.train.dp_gradient(_tiny_loss, params, data, m, jax.random.PRNGKey(0), **kw)
  )(mask)
  for k in ref:
    np.testing.assert_allclose(np.asarray(got[k]), ref[k] / (q * 40), rtol=2e-5, atol=1e-7)


def test_dp_gradient_sensitivity_is_clip_over_expected_batch():
  # Add/remove one example: the noiseless output moves by at most C / (q n).
  data, params = _tiny_problem()
  params = jax.tree.map(lambda p: p + 1.0, params)
  q, clip = 0.25, 0.7
  mask = np.asarray(jaxrdp.train.poisson_sample_mask(jax.random.PRNGKey(5), 40, q))
  kw = dict(clip_norm=clip, noise_multiplier=0.0, expected_batch_size=q * 40)
  f = jax.jit(
    lambda m: jaxrdp.train.dp_gradient(_tiny_loss, params, data, m, jax.random.PRNGKey(0), **kw)
  )
  base = f(mask)
  for i in range(40):
    toggled = mask.copy()
    toggled[i] = not toggled[i]
    other = f(toggled)
    diff = math.sqrt(
      sum(
        float(jnp.sum((a - b) ** 2)) for a, b in zip(jax.tree.leaves(base), jax.tree.leaves(other))
      )
    )
    assert diff <= clip / (q * 40) * (1 + 1e-5)


def test_dp_gradient_noise_std_and_vmap():
  # Empty batch: the output is pure noise N(0, (sigma C / (q n))^2) per coordinate.
  d = 4000
  params = {"w": jnp.zeros((d,), jnp.float32)}
  data = jnp.zeros((8, d), jnp.float32)
  loss = lambda p, x: jnp.sum(p["w"] * x)
  mask = jnp.zeros((8,), bool)
  sigma, clip, ebs = 1.3, 0.5, 2.0
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  out = jax.vmap(
    lambda k: jaxrdp.train.dp_gradient(
      loss, params, data, mask, k, clip_norm=clip, noise_multiplier=sigma, expected_batch_size=ebs
    )
  )(keys)
  w = np.asarray(out["w"], np.float64)
  assert w.shape == (3, d)
  # std estimate of 12,000 normals: relative s.e. ~ 0.65%; allow 4%.
  np.testing.assert_allclose(w.std(), sigma * clip / ebs, rtol=0.04)
  assert abs(w.mean()) < 4 * sigma * clip / ebs / math.sqrt(w.size)
  assert not np.allclose(w[0], w[1])


def test_dp_gradient_unsampled_nan_example_is_ignored():
  data, params = _tiny_problem()
  x, y = data
  x = x.at[3].set(jnp.nan)
  mask = jnp.ones((40,), bool).at[3].set(False)
  g = jaxrdp.train.dp_gradient(
    _tiny_loss,
    params,
    (x, y),
    mask,
    jax.random.PRNGKey(0),
    clip_norm=1.0,
    noise_multiplier=1.0,
    expected_batch_size=20.0,
  )
  assert all(bool(jnp.all(jnp.isfinite(v))) for v in jax.tree.leaves(g))


def test_dp_gradient_invalid_arguments():
  data, params = _tiny_problem()
  mask = jnp.ones((40,), bool)
  key = jax.random.PRNGKey(0)
  with pytest.raises(ValueError, match="clip_norm"):
    jaxrdp.train.dp_gradient(
      _tiny_loss,
      params,
      data,
      mask,
      key,
      clip_norm=0.0,
      noise_multiplier=1.0,
      expected_batch_size=1.0,
    )
  with pytest.raises(ValueError, match="noise_multiplier"):
    jaxrdp.train.dp_gradient(
      _tiny_loss,
      params,
      data,
      mask,
      key,
      clip_norm=1.0,
      noise_multiplier=-1.0,
      expected_batch_size=1.0,
    )
  with pytest.raises(ValueError, match="expected_batch_size"):
    jaxrdp.train.dp_gradient(
      _tiny_loss,
      params,
      data,
      mask,
      key,
      clip_norm=1.0,
      noise_multiplier=1.0,
      expected_batch_size=0.0,
    )
  traced = jax.jit(
    lambda s: jaxrdp.train.dp_gradient(
      _tiny_loss,
      params,
      data,
      mask,
      key,
      clip_norm=1.0,
      noise_multiplier=s,
      expected_batch_size=1.0,
    )
  )(-1.0)
  assert all(bool(jnp.all(jnp.isnan(v))) for v in jax.tree.leaves(traced))


def test_optax_contrib_aggregate_over_masked_buffer_agrees_at_zero_noise():
  # optax.contrib divides by the leading dimension; on the full masked buffer
  # that is n, so dividing its output by q gives the expected-batch normalization.
  data, params = _tiny_problem()
  params = jax.tree.map(lambda p: p + 0.5, params)
  q, clip = 0.3, 0.4
  mask = jaxrdp.train.poisson_sample_mask(jax.random.PRNGKey(9), 40, q)
  per_ex = jaxrdp.train.per_example_grads(_tiny_loss, params, data)
  masked = jax.tree.map(
    lambda g: jnp.where(mask.reshape((-1,) + (1,) * (g.ndim - 1)), g, 0.0), per_ex
  )
  np.testing.assert_allclose(
    np.asarray(
      jax.jit(jaxrdp.train.per_example_grads, static_argnums=0)(_tiny_loss, params, data)["w"]
    ),
    np.asarray(per_ex["w"]),
    rtol=1e-6,
  )
  agg = optax.contrib.differentially_private_aggregate(clip, 0.0, key=jax.random.key(0))
  out, _ = agg.update(masked, agg.init(params))
  ours = jaxrdp.train.dp_gradient(
    _tiny_loss,
    params,
    data,
    mask,
    jax.random.PRNGKey(0),
    clip_norm=clip,
    noise_multiplier=0.0,
    expected_batch_size=q * 40,
  )
  for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ours)):
    np.testing.assert_allclose(np.asarray(a) / q, np.asarray(b), rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------
# Accounting inside the jitted step


def test_in_jit_epsilon_equals_dpsgd_epsilon_constant_schedule():
  data, params = _tiny_problem()
  opt = optax.sgd(0.1)
  q, sigma, steps = 0.125, 1.1, 48
  step = jaxrdp.train.make_dpsgd_step(_tiny_loss, opt, clip_norm=1.0, q=q, sigma=sigma, delta=DELTA)
  state = jaxrdp.train.dpsgd_init(params, opt, jax.random.PRNGKey(0))
  state, info = _run_steps(step, state, data, steps)
  assert bool(info.applied.all()) and int(state.step) == steps
  ref_eps, ref_order = ref_dpsgd_epsilon(q, sigma, np.arange(1, steps + 1))
  np.testing.assert_allclose(np.asarray(info.epsilon), ref_eps, rtol=1e-11)
  np.testing.assert_array_equal(np.asarray(info.order), ref_order)
  outside = jaxrdp.RdpAccountant().get_epsilon(state.accountant, DELTA)
  assert float(outside.epsilon) == float(info.epsilon[-1])


def test_constant_schedule_accounts_in_float64_with_x64_off():
  # With JAX's defaults (x64 off) the per-step curve of a constant schedule must still
  # be the float64 curve: it was once rounded to nearest float32 on its way out of a
  # jitted call, which under-reported the RDP by up to ~1e-7 relative.
  data, params = _tiny_problem()
  opt = optax.sgd(0.1)
  q, sigma, steps = 0.25, 1.5, 3
  with jax.enable_x64(False):
    step = jaxrdp.train.make_dpsgd_step(
      _tiny_loss, opt, clip_norm=1.0, q=q, sigma=sigma, delta=DELTA
    )
    state = jaxrdp.train.dpsgd_init(params, opt, jax.random.PRNGKey(0))
    state, info = jax.jit(lambda s, d: jax.lax.scan(lambda c, _: step(c, d), s, None, length=3))(
      state, data
    )
  assert bool(np.asarray(info.applied).all())
  np.testing.assert_allclose(
    np.asarray(state.accountant.rdp, np.float64), steps * ref_curve(q, sigma), rtol=1e-14
  )


def test_in_jit_epsilon_equals_hand_composition_for_schedules():
  data, params = _tiny_problem()
  opt = optax.adam(0.05)
  # Noise decays in three phases and the sampling rate doubles after step 20;
  # from step 40 on the schedule gives an invalid sigma, which must be refused.
  sigma_sched = lambda t: jnp.where(
    t < 10, 2.0, jnp.where(t < 25, 1.4, jnp.where(t < 40, 0.9, -1.0))
  )
  q_sched = lambda t: jnp.where(t < 20, 0.1, 0.2)
  step = jaxrdp.train.make_dpsgd_step(
    _tiny_loss, opt, clip_norm=0.5, q=q_sched, sigma=sigma_sched, delta=DELTA
  )
  state = jaxrdp.train.dpsgd_init(params, opt, jax.random.PRNGKey(1))
  state, info = _run_steps(step, state, data, 45)
  np.testing.assert_array_equal(np.asarray(info.q)[[0, 19, 20, 39]], [0.1, 0.1, 0.2, 0.2])
  np.testing.assert_array_equal(
    np.asarray(info.sigma)[[9, 10, 24, 25, 40]], [2.0, 1.4, 1.4, 0.9, -1.0]
  )
  # phases (q, sigma, count): t in [0,10), [10,20), [20,25), [25,40)
  phases = [(0.1, 2.0, 10), (0.1, 1.4, 10), (0.2, 1.4, 5), (0.2, 0.9, 15)]
  rdp = sum(c * ref_curve(qq, ss) for qq, ss, c in phases)
  ref_eps, _ = ref_rdp_to_epsilon(rdp)
  np.testing.assert_allclose(float(info.epsilon[39]), ref_eps, rtol=1e-11)
  # Invalid steps are refused: nothing applied, nothing spent.
  applied = np.asarray(info.applied)
  assert applied[:40].all() and not applied[40:].any()
  assert int(state.step) == 40
  np.testing.assert_array_equal(np.asarray(info.epsilon[40:]), float(info.epsilon[39]))
  assert all(bool(jnp.all(jnp.isfinite(p))) for p in jax.tree.leaves(state.params))
  # A constant-schedule value is different (the test can fail).
  assert not np.isclose(ref_eps, ref_dpsgd_epsilon(0.2, 0.9, 40)[0][0], rtol=1e-3)
  # Independent accountant (dp_accounting's fractional orders are upper bounds).
  import dp_accounting

  acc = dp_accounting.rdp.RdpAccountant(list(DPA_ORDERS))
  for qq, ss, c in phases:
    acc.compose(dp_accounting.PoissonSampledDpEvent(qq, dp_accounting.GaussianDpEvent(ss)), c)
  in_dpa = np.isin(jaxrdp.DEFAULT_ORDERS, DPA_ORDERS)
  ours, _ = ref_rdp_to_epsilon(rdp[in_dpa], jaxrdp.DEFAULT_ORDERS[in_dpa])
  theirs = acc.get_epsilon(DELTA)
  assert theirs >= ours * (1 - 1e-12)
  assert theirs <= ours * 1.01


def test_guard_stops_before_target():
  data, params = _tiny_problem()
  opt = optax.sgd(0.1)
  q, sigma = 0.2, 1.0
  eps_k, _ = ref_dpsgd_epsilon(q, sigma, np.arange(1, 60))
  target = 0.5 * (eps_k[16] + eps_k[17])  # between 17 and 18 steps
  step = jaxrdp.train.make_dpsgd_step(
    _tiny_loss, opt, clip_norm=1.0, q=q, sigma=sigma, delta=DELTA, target_epsilon=target
  )
  state = jaxrdp.train.dpsgd_init(params, opt, jax.random.PRNGKey(0))
  state, info = _run_steps(step, state, data, 30)
  applied = np.asarray(info.applied)
  assert applied[:17].all() and not applied[17:].any()
  assert int(state.step) == 17
  assert np.all(np.asarray(info.epsilon) <= target)
  np.testing.assert_allclose(float(info.epsilon[-1]), eps_k[16], rtol=1e-11)
  # Refused steps leave the whole state (params, optimizer, key, accountant) unchanged.
  again, info2 = _run_steps(step, state, data, 30)
  assert not np.asarray(info2.applied).any()
  assert _tree_equal(again, state)


def test_privacy_guard_plain_jit_vmap():
  acc = _acc_after(0.05, 1.0, 100)
  (now, nxt), _ = ref_dpsgd_epsilon(0.05, 1.0, [100, 101])
  ok = jaxrdp.train.privacy_guard(acc, 0.05, 1.0, delta=DELTA, target_epsilon=nxt * (1 + 1e-9))
  assert bool(ok.allowed)
  np.testing.assert_allclose([float(ok.epsilon), float(ok.proposed_epsilon)], nxt, rtol=1e-11)
  np.testing.assert_allclose(np.asarray(ok.accountant.rdp), 101 * ref_curve(0.05, 1.0), rtol=1e-12)
  mid = 0.5 * (now + nxt)
  no = jaxrdp.train.privacy_guard(acc, 0.05, 1.0, delta=DELTA, target_epsilon=mid)
  assert not bool(no.allowed) and _tree_equal(no.accountant, acc)
  np.testing.assert_allclose(float(no.epsilon), now, rtol=1e-11)
  # jit + vmap: q = 0 spends nothing, q = 0.05 fits, q = 0.5 does not; no budget: allowed.
  g = _vguard()(
    acc,
    f64([0.0, 0.05, 0.5, 0.5, 0.05]),
    f64([1.0] * 5),
    f64([mid, nxt * (1 + 1e-8), nxt, np.inf, now]),
  )
  np.testing.assert_array_equal(np.asarray(g.allowed), [True, True, False, True, False])
  # (vmap batches the quadrature differently: agreement to ~1e-10, not bitwise)
  np.testing.assert_allclose(np.asarray(g.epsilon)[:3], [now, nxt, now], rtol=1e-9)
  assert float(g.epsilon[3]) > nxt and float(g.proposed_epsilon[2]) > nxt
  # count composes several steps at once.
  many = jaxrdp.train.privacy_guard(
    jaxrdp.RdpAccountant().init(), 0.05, 1.0, delta=DELTA, count=101
  )
  np.testing.assert_allclose(float(many.epsilon), nxt, rtol=1e-11)


def test_invalid_traced_q_or_sigma_is_refused():
  acc = _acc_after(0.1, 1.0, 3)
  nan = float("nan")
  qs = f64([1.5, -0.1, 0.1, nan, 0.1])
  sigmas = f64([1.0, 1.0, -1.0, 1.0, nan])
  g = _vguard()(acc, qs, sigmas, f64([np.inf] * 5))
  assert not np.asarray(g.allowed).any()
  for i in range(5):
    np.testing.assert_array_equal(np.asarray(g.accountant.rdp[i]), np.asarray(acc.rdp))
  # (The training step's refusal of an invalid scheduled sigma is tested with
  # the schedules above.)


def test_make_dpsgd_step_validates_concrete_arguments():
  opt = optax.sgd(0.1)
  good = dict(clip_norm=1.0, q=0.1, sigma=1.0, delta=DELTA)
  for name, bad in [
    ("clip_norm", 0.0),
    ("q", 1.5),
    ("q", 0.0),
    ("sigma", -1.0),
    ("delta", 1.0),
    ("target_epsilon", -1.0),
  ]:
    with pytest.raises(ValueError, match=name):
      jaxrdp.train.make_dpsgd_step(_tiny_loss, opt, **{**good, name: bad})
  with pytest.raises(ValueError, match="delta"):
    jaxrdp.train.privacy_guard(jaxrdp.RdpAccountant().init(), 0.1, 1.0, delta=0.0)
  with pytest.raises(ValueError, match="q"):
    jaxrdp.train.privacy_guard(jaxrdp.RdpAccountant().init(), 1.1, 1.0, delta=DELTA)
  with pytest.raises(ValueError, match="sigma"):
    jaxrdp.train.privacy_guard(jaxrdp.RdpAccountant().init(), 0.1, -1.0, delta=DELTA)


def test_step_refuses_a_state_with_other_orders_when_traced():
  # The orders are static metadata of the accountant state: a mismatch is an
  # error when the step is traced, never a run-time comparison.
  data, params = _tiny_problem()
  opt = optax.sgd(0.1)
  step = jaxrdp.train.make_dpsgd_step(
    _tiny_loss, opt, clip_norm=1.0, q=lambda t: 0.1, sigma=lambda t: 1.0, delta=DELTA
  )
  state = jaxrdp.train.dpsgd_init(params, opt, jax.random.PRNGKey(0), orders=np.array([2.0, 4.0]))
  with pytest.raises(ValueError, match="orders"):
    jax.eval_shape(step, state, data)


def test_step_under_vmap_and_without_recompilation():
  data, params = _tiny_problem()
  opt = optax.adam(0.1)
  step = jaxrdp.train.make_dpsgd_step(
    _tiny_loss, opt, clip_norm=1.0, q=0.25, sigma=1.0, delta=DELTA
  )
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  states = jax.vmap(lambda k: jaxrdp.train.dpsgd_init(params, opt, k))(keys)
  vstep = jax.jit(jax.vmap(step, in_axes=(0, None)))
  for _ in range(4):
    states, info = vstep(states, data)
  assert bool(info.applied.all()) and np.all(np.asarray(states.step) == 4)
  e = np.asarray(info.epsilon)
  assert e[0] == e[1] == e[2]
  w = np.asarray(states.params["w"])
  assert not np.allclose(w[0], w[1])  # independent sampling and noise per run
  # Different masks every step (different batch sizes), one compilation.
  assert vstep._cache_size() == 1


def test_tree_select():
  from jaxrdp.train._step import tree_select

  a = {"x": jnp.ones(3), "acc": jaxrdp.RdpAccountant().init()}
  b = {"x": jnp.zeros(3), "acc": _acc_after(0.1, 1.0, 1)}
  assert _tree_equal(tree_select(True, a, b), a)
  out = jax.jit(tree_select)(False, a, b)
  assert _tree_equal(out, b) and out["acc"].rdp.dtype == jnp.float64


# --------------------------------------------------------------------------
# Checkpoints


def _trained_state(orders=None):
  step, opt, data, params = _adam_setup()
  state = jaxrdp.train.dpsgd_init(params, opt, jax.random.PRNGKey(0), orders=orders)
  return step, opt, data, params, state


def test_resume_equals_uninterrupted(tmp_path):
  step, opt, data, params, state = _trained_state()
  half, _ = _run_steps(step, state, data, 6)
  full, info_full = _run_steps(step, half, data, 6)
  path = tmp_path / "ckpt.npz"
  jaxrdp.train.save_checkpoint(path, half)
  template = jaxrdp.train.dpsgd_init(params, opt, jax.random.PRNGKey(123))
  resumed = jaxrdp.train.load_checkpoint(path, template)
  assert _tree_equal(resumed, half)
  resumed, info_res = _run_steps(step, resumed, data, 6)
  assert _tree_equal(resumed, full)
  assert float(info_res.epsilon[-1]) == float(info_full.epsilon[-1])
  acct = jaxrdp.RdpAccountant()
  assert float(acct.get_epsilon(resumed.accountant, DELTA).epsilon) == float(
    acct.get_epsilon(full.accountant, DELTA).epsilon
  )
  np.testing.assert_allclose(
    float(info_res.epsilon[-1]), ref_dpsgd_epsilon(0.2, 1.0, 12)[0][0], rtol=1e-11
  )


def test_checkpoint_round_trip_typed_key_and_no_temp_files(tmp_path):
  _, _, _, _, state = _trained_state()
  state = state._replace(key=jax.random.key(4))
  path = tmp_path / "c.npz"
  jaxrdp.train.save_checkpoint(path, state)
  jaxrdp.train.save_checkpoint(path, state)  # overwrite in place
  back = jaxrdp.train.load_checkpoint(path, state)
  assert np.array_equal(jax.random.key_data(back.key), jax.random.key_data(state.key))
  assert _tree_equal(back._replace(key=None), state._replace(key=None))
  assert back.accountant.rdp.dtype == jnp.float64
  assert sorted(os.listdir(tmp_path)) == ["c.npz"]


def test_failed_save_keeps_old_checkpoint(tmp_path, monkeypatch):
  _, _, _, _, state = _trained_state()
  path = tmp_path / "c.npz"
  jaxrdp.train.save_checkpoint(path, state)
  before = path.read_bytes()

  def boom(src, dst):
    raise OSError("disk full")

  monkeypatch.setattr(os, "replace", boom)
  newer = state._replace(step=state.step + 1)
  with pytest.raises(OSError, match="disk full"):
    jaxrdp.train.save_checkpoint(path, newer)
  assert path.read_bytes() == before
  assert sorted(os.listdir(tmp_path)) == ["c.npz"]


@pytest.fixture
def saved(tmp_path):
  step, opt, data, params, state = _trained_state()
  state, _ = _run_steps(step, state, data, 6)
  path = tmp_path / "c.npz"
  jaxrdp.train.save_checkpoint(path, state)
  template = jaxrdp.train.dpsgd_init(params, opt, jax.random.PRNGKey(0))
  return path, template, state


def _rewrite(path, header_fn=None, leaf_fn=None):
  """Rewrites a checkpoint as a valid zip with a modified header or leaf."""
  with np.load(path) as npz:
    members = {k: npz[k] for k in npz.files}
  header = json.loads(members["header"].tobytes().decode())
  if header_fn:
    header = header_fn(header)
  if leaf_fn:
    leaf_fn(members)
  members["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
  with open(path, "wb") as f:
    np.savez(f, **members)


def _write_zip(path, members):
  """A zip of raw members (name -> bytes), as np.savez would name them."""
  import zipfile

  with zipfile.ZipFile(path, "w") as z:
    for name, data in members.items():
      z.writestr(name, data)


def _npy(a):
  import io

  buf = io.BytesIO()
  np.save(buf, a, allow_pickle=False)
  return buf.getvalue()


def test_foreign_members_refused_as_checkpoint_errors(saved):
  # FINDINGS 7: a header.npy member that is not an .npy file escaped as
  # AttributeError. So did a leaf, and a header nested too deep or holding an
  # integer too long for Python to parse.
  path, template, _ = saved
  with np.load(path) as npz:
    members = {k: npz[k] for k in npz.files}
  leaves = {f"{k}.npy": _npy(v) for k, v in members.items() if k != "header"}
  header = _npy(members["header"])
  deep = np.frombuffer(b"[" * 100000 + b"]" * 100000, np.uint8)
  long_int = np.frombuffer(b'{"version": 1' + b"0" * 5000 + b"}", np.uint8)
  variants = {
    "header not npy": {"header.npy": b"PK not an npy", **leaves},
    "empty header": {"header.npy": b"", **leaves},
    "leaf not npy": {"header.npy": header, **leaves, "leaf_00000.npy": b"\x93NUMPX"},
    "header 2-D": {"header.npy": _npy(members["header"][None, :]), **leaves},
    "header floats": {"header.npy": _npy(np.arange(4.0)), **leaves},
    "deep nesting": {"header.npy": _npy(deep), **leaves},
    "long integer": {"header.npy": _npy(long_int), **leaves},
  }
  for zipped in variants.values():
    _write_zip(path, zipped)
    with pytest.raises(jaxrdp.train.CheckpointError, match="corrupted|not an .npy"):
      jaxrdp.train.load_checkpoint(path, template)


def test_truncated_checkpoint_refused(saved):
  path, template, _ = saved
  data = path.read_bytes()
  for cut in (len(data) // 2, len(data) - 10, 30, 0):
    path.write_bytes(data[:cut])
    with pytest.raises(jaxrdp.train.CheckpointError, match="truncated or corrupted|not a jaxrdp"):
      jaxrdp.train.load_checkpoint(path, template)


def test_bit_flip_refused(saved):
  path, template, _ = saved
  data = bytearray(path.read_bytes())
  for pos in (len(data) // 3, len(data) // 2, len(data) - 200):
    flipped = bytearray(data)
    flipped[pos] ^= 0x10
    path.write_bytes(bytes(flipped))
    with pytest.raises(jaxrdp.train.CheckpointError):
      jaxrdp.train.load_checkpoint(path, template)


def test_bad_checksum_refused(saved):
  path, template, _ = saved

  def bump(members):
    a = members["leaf_00000"].copy()
    a.flat[0] += 1
    members["leaf_00000"] = a

  _rewrite(path, leaf_fn=bump)  # valid zip, stale checksum
  with pytest.raises(jaxrdp.train.CheckpointError, match="checksum"):
    jaxrdp.train.load_checkpoint(path, template)


def test_tampered_accountant_refused(saved):
  path, template, _ = saved

  def zero_spent(h):
    for leaf in h["leaves"]:
      if leaf["kind"] == "accountant":
        leaf["state"]["rdp"] = [(0.0).hex()] * len(leaf["state"]["rdp"])
    return h

  _rewrite(path, header_fn=zero_spent)
  with pytest.raises(jaxrdp.train.CheckpointError, match="checksum"):
    jaxrdp.train.load_checkpoint(path, template)


def test_invalid_accountant_values_refused_even_with_valid_checksum(saved):
  from jaxrdp.train import _checkpoint

  path, template, _ = saved

  def negative(h):
    for leaf in h["leaves"]:
      if leaf["kind"] == "accountant":
        leaf["state"]["rdp"][0] = (-1.0).hex()
    meta = {k: v for k, v in h.items() if k != "sha256"}
    with np.load(path) as npz:
      arrays = [npz[f"leaf_{i:05d}"] for i in range(len(npz.files) - 1)]
    h["sha256"] = _checkpoint._digest(meta, arrays)
    return h

  _rewrite(path, header_fn=negative)
  with pytest.raises(jaxrdp.train.CheckpointError, match="accountant"):
    jaxrdp.train.load_checkpoint(path, template)


def test_wrong_orders_refused(saved):
  path, _, _ = saved
  _, opt, _, params, _ = _trained_state()
  fewer = jaxrdp.train.dpsgd_init(
    params, opt, jax.random.PRNGKey(0), orders=np.array([2.0, 4.0, 8.0, 16.0])
  )
  with pytest.raises(jaxrdp.train.CheckpointError, match="orders mismatch"):
    jaxrdp.train.load_checkpoint(path, fewer)
  shifted_orders = np.asarray(jaxrdp.DEFAULT_ORDERS).copy()
  shifted_orders[3] += 0.05
  shifted = jaxrdp.train.dpsgd_init(params, opt, jax.random.PRNGKey(0), orders=shifted_orders)
  with pytest.raises(jaxrdp.train.CheckpointError, match="orders mismatch"):
    jaxrdp.train.load_checkpoint(path, shifted)


def test_wrong_structure_dtype_shape_refused(saved):
  path, template, _ = saved
  with pytest.raises(jaxrdp.train.CheckpointError, match="structure"):
    jaxrdp.train.load_checkpoint(path, template._replace(params={"w": template.params["w"]}))
  with pytest.raises(jaxrdp.train.CheckpointError, match="structure"):
    jaxrdp.train.load_checkpoint(
      path, jaxrdp.train.dpsgd_init(template.params, optax.sgd(0.1), jax.random.PRNGKey(0))
    )
  with pytest.raises(jaxrdp.train.CheckpointError, match="structure"):
    jaxrdp.train.load_checkpoint(path, template.params)  # no accountant at all
  wide = jax.tree.map(lambda p: jnp.zeros(p.shape + (1,), p.dtype), template.params)
  opt = optax.adam(0.05)
  with pytest.raises(jaxrdp.train.CheckpointError, match="template has"):
    jaxrdp.train.load_checkpoint(path, jaxrdp.train.dpsgd_init(wide, opt, jax.random.PRNGKey(0)))
  with pytest.raises(jaxrdp.train.CheckpointError, match="template has"):
    jaxrdp.train.load_checkpoint(path, template._replace(step=jnp.zeros((), jnp.int16)))


def test_other_files_refused(tmp_path, saved):
  _, template, _ = saved
  junk = tmp_path / "junk.npz"
  junk.write_bytes(os.urandom(1000))
  with pytest.raises(jaxrdp.train.CheckpointError):
    jaxrdp.train.load_checkpoint(junk, template)
  plain = tmp_path / "plain.npz"
  np.savez(plain, a=np.zeros(3))
  with pytest.raises(jaxrdp.train.CheckpointError, match="not a jaxrdp"):
    jaxrdp.train.load_checkpoint(plain, template)
  with pytest.raises(FileNotFoundError):
    jaxrdp.train.load_checkpoint(tmp_path / "missing.npz", template)


def test_future_version_refused(saved):
  path, template, _ = saved
  _rewrite(path, header_fn=lambda h: {**h, "version": 99})
  with pytest.raises(jaxrdp.train.CheckpointError, match="version"):
    jaxrdp.train.load_checkpoint(path, template)


# --------------------------------------------------------------------------
# The example


def _load_example():
  spec = importlib.util.spec_from_file_location("dpsgd_digits_example", EXAMPLE)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


FINAL_RE = re.compile(
  r"^final: epsilon=(?P<epsilon>\S+) delta=(?P<delta>\S+) q=(?P<q>\S+) sigma=(?P<sigma>\S+) "
  r"steps=(?P<steps>\d+) test_accuracy=(?P<test_accuracy>\S+) baseline_accuracy=(?P<baseline_accuracy>\S+)$"
)


TRUNC_RE = re.compile(
  r"^truncation: capacity=(?P<capacity>\d+) eta=(?P<eta>\S+) epsilon_untruncated=(?P<untruncated>\S+)$"
)


TIGHT_RE = re.compile(
  r"^tight: epsilon=(?P<epsilon>\S+) epsilon_lower=(?P<lower>\S+) \(Renyi DP: \S+\)$"
)


def _the_line(regex, lines):
  """The one printed line ``regex`` matches."""
  (m,) = [m for m in map(regex.match, lines) if m]
  return m


def ref_dpsgd_delta(q, sigma, steps, epsilon):
  """delta of the untruncated run at epsilon, by jaxrdp's own dpsgd_delta (the
  inverse conversion of the reference epsilon; the epsilon itself is checked
  against dp_accounting below)."""
  return jaxrdp.dpsgd_delta(q, sigma, steps, epsilon).delta


def _dp_accounting_epsilon(q, sigma, steps, delta):
  import dp_accounting

  acc = dp_accounting.rdp.RdpAccountant(list(DPA_ORDERS))
  acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
  return acc.get_epsilon(delta)


def _assert_agrees_with_dp_accounting(eps, q, sigma, steps, delta):
  ref = _dp_accounting_epsilon(q, sigma, steps, delta)
  assert ref >= eps * (1 - 1e-12), (ref, eps)
  assert abs(ref - eps) <= 1e-3 * eps, (ref, eps)


# Tiny configuration shared by the example tests (one compilation).
TINY = dict(epochs=2, hidden=8, q=0.25)


@functools.cache
def _example():
  return _load_example()


def test_example_tiny_run_last_line_parses_and_agrees(capsys):
  ex = _example()
  argv = [f"--{k}={v}" for k, v in TINY.items()]
  assert ex.main(argv) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert sum(line.startswith("epoch ") for line in lines) == TINY["epochs"]
  m = FINAL_RE.match(lines[-1])
  assert m, lines[-1]
  v = {k: float(x) for k, x in m.groupdict().items()}
  steps = int(m["steps"])
  assert steps == TINY["epochs"] * round(1 / TINY["q"]) and v["q"] == TINY["q"]
  assert 0.0 <= v["test_accuracy"] <= 1.0 and 0.0 <= v["baseline_accuracy"] <= 1.0
  # The in-loop accountant's (untruncated) epsilon equals the closed composition ...
  trunc = _the_line(TRUNC_RE, lines)
  ref, _ = ref_dpsgd_epsilon(v["q"], v["sigma"], steps, v["delta"])
  np.testing.assert_allclose(float(trunc["untruncated"]), ref[0], rtol=1e-11)
  # ... the printed epsilon includes the truncation term: independently, eta from the
  # binomial tail at the printed capacity (n + 1 examples), and the untruncated delta
  # at the printed epsilon plus (1 + e^eps) eta stays within delta ...
  n = ex.load_data().x_train.shape[0]
  eta = float(stats.binom.sf(int(trunc["capacity"]), n + 1, v["q"])) * steps
  assert float(trunc["eta"]) == pytest.approx(eta, rel=1e-6, abs=1e-300)
  d_untruncated = float(ref_dpsgd_delta(v["q"], v["sigma"], steps, v["epsilon"]))
  assert d_untruncated + (1 + np.exp(v["epsilon"])) * eta <= v["delta"] * (1 + 1e-9)
  assert ref[0] <= v["epsilon"] <= ref[0] * (1 + 1e-6)
  # ... and an independent accountant given the printed q, sigma, steps agrees.
  _assert_agrees_with_dp_accounting(v["epsilon"], v["q"], v["sigma"], steps, v["delta"])
  # The tight epsilon to publish: a bracket below the Renyi-DP bound of the same run.
  tight = _the_line(TIGHT_RE, lines)
  assert 0.0 < float(tight["lower"]) <= float(tight["epsilon"]) <= v["epsilon"]


ALLOCATION_RE = re.compile(
  r"^allocation: steps_per_epoch=(?P<t>\d+) capacity=(?P<capacity>\d+) eta=(?P<eta>\S+) "
  r"epsilon_in_step=(?P<epsilon>\S+); runtime \S+ s$"
)


def test_example_allocation_run_prints_the_epsilon_accounted_in_the_step(capsys):
  ex = _example()
  argv = [f"--{k}={v}" for k, v in TINY.items()] + ["--sampling=allocation"]
  assert ex.main(argv) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert sum(line.startswith("epoch ") for line in lines) == TINY["epochs"]
  m = FINAL_RE.match(lines[-1])
  assert m, lines[-1]
  v = {k: float(x) for k, x in m.groupdict().items()}
  alloc = _the_line(ALLOCATION_RE, lines)
  t, capacity, steps = int(alloc["t"]), int(alloc["capacity"]), int(m["steps"])
  assert t == round(1 / TINY["q"]) and steps == TINY["epochs"] * t and v["q"] == 1 / t
  # The printed epsilon is the step's own; the one-shot accountant on the same event
  # (RandomAllocation of `steps` steps, truncation term at the printed capacity) agrees.
  assert v["epsilon"] == float(alloc["epsilon"])
  n = ex.load_data().x_train.shape[0]
  ref = jaxrdp.dpsgd_epsilon(
    v["q"], v["sigma"], steps, v["delta"], sampling="allocation", capacity=capacity, dataset_size=n
  )
  assert v["epsilon"] == pytest.approx(float(ref.epsilon), rel=1e-10)
  eta = float(stats.binom.sf(capacity, n + 1, v["q"])) * steps
  assert float(alloc["eta"]) == pytest.approx(eta, rel=1e-6, abs=1e-300)
  # The tight bracket of the same run: below the step's Renyi-DP epsilon, and it
  # brackets the one-shot tight accountant's upper end (truncation term included).
  tight = _the_line(TIGHT_RE, lines)
  one_shot = jaxrdp.dpsgd_epsilon(
    v["q"],
    v["sigma"],
    steps,
    v["delta"],
    sampling="allocation",
    accountant="pld",
    capacity=capacity,
    dataset_size=n,
  )
  assert float(tight["epsilon"]) == float(one_shot.epsilon)
  assert 0.0 < float(tight["lower"]) <= float(tight["epsilon"]) < v["epsilon"]
  # Training works: well above chance (0.1) after 2 epochs, as the Poisson run (0.40).
  assert 0.25 <= v["test_accuracy"] <= 1.0 and 0.0 <= v["baseline_accuracy"] <= 1.0


def test_example_cli_runs_as_script():
  # The script entry point itself (argument errors exit before any training).
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  proc = subprocess.run(
    [sys.executable, str(EXAMPLE), "--resume"],
    capture_output=True,
    text=True,
    env=env,
    cwd=ROOT,
    timeout=120,
  )
  assert proc.returncode == 2 and "--resume needs --checkpoint" in proc.stderr


def test_example_operating_point_agrees_with_dp_accounting():
  ex = _example()
  d = ex.DEFAULTS
  steps = d["epochs"] * ex.steps_per_epoch(d["q"])
  eps = float(ref_dpsgd_epsilon(d["q"], d["sigma"], steps, d["delta"])[0][0])
  assert eps <= d["target_epsilon"] <= 8.0
  _assert_agrees_with_dp_accounting(eps, d["q"], d["sigma"], steps, d["delta"])


def test_example_resume_matches_uninterrupted(tmp_path):
  ex = _example()
  data = ex.load_data()
  cfg = dict(ex.DEFAULTS, **TINY)
  quiet = lambda *_: None
  full, hist_full = ex.train_private(cfg, data, log=quiet)
  path = str(tmp_path / "run.npz")
  ex.train_private(dict(cfg, epochs=1), data, checkpoint=path, log=quiet)
  resumed, hist_res = ex.train_private(cfg, data, checkpoint=path, resume=True, log=quiet)
  assert hist_res[-1] == hist_full[-1]
  assert _tree_equal(resumed, full)
  # A checkpoint from another accountant configuration is refused, not reset.
  other = jaxrdp.train.dpsgd_init(
    full.params,
    optax.adam(cfg["lr"]),
    jax.random.PRNGKey(0),
    orders=np.array([2.0, 3.0]),
    sampler=ex.make_sampler(cfg, data.x_train.shape[0]),
  )
  jaxrdp.train.save_checkpoint(path, other)
  with pytest.raises(jaxrdp.train.CheckpointError, match="orders"):
    ex.train_private(cfg, data, checkpoint=path, resume=True, log=quiet)
