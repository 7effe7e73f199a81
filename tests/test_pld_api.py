"""jaxrdp.pld: validation, broadcasting, phases, invariants, jit / vmap / grad."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import central_difference

import jaxrdp
from jaxrdp.pld import pld_delta, pld_delta_phases, pld_epsilon, pld_epsilon_phases

N = 2**12  # a small fixed grid: these tests check plumbing, not the last digit


@pytest.mark.parametrize(
  "kwargs, name",
  [
    (dict(q=-0.1), "q"),
    (dict(q=1.5), "q"),
    (dict(q=float("nan")), "q"),
    (dict(sigma=0.0), "sigma"),
    (dict(sigma=-1.0), "sigma"),
    (dict(steps=-1), "steps"),
    (dict(steps=2.5), "steps"),
    (dict(steps=1e8), "steps"),
    (dict(delta=0.0), "delta"),
    (dict(delta=1.0), "delta"),
    (dict(rtol=0.0), "rtol"),
    (dict(grid_size=1000), "grid_size"),
    (dict(max_grid_size=3), "max_grid_size"),
    (dict(memory_limit=10), "memory_limit"),
  ],
)
def test_bad_arguments_raise(kwargs, name):
  args = dict(q=0.01, sigma=1.0, steps=10, delta=1e-5)
  opts = {k: kwargs.pop(k) for k in list(kwargs) if k not in args}
  args.update(kwargs)
  with pytest.raises(ValueError, match=name):
    pld_epsilon(**args, **opts)


def test_bad_epsilon_and_phases_raise():
  with pytest.raises(ValueError, match="epsilon"):
    pld_delta(0.01, 1.0, 10, -1.0)
  with pytest.raises(ValueError, match="phases"):
    pld_epsilon_phases([], 1e-5)
  with pytest.raises(ValueError, match=r"sigma\[1\]"):
    pld_epsilon_phases([(0.01, 1.0, 10), (0.01, -1.0, 10)], 1e-5)


@pytest.fixture(scope="module")
def grid():
  q = np.array([[0.01], [0.05]])
  sigma = np.array([0.8, 1.0, 2.0])
  return q, sigma, pld_epsilon(q, sigma, 200, 1e-5, grid_size=N)


def test_broadcasting_and_monotonicity(grid):
  q, sigma, r = grid
  assert r.epsilon.shape == (2, 3) and r.epsilon_lower.shape == (2, 3)
  e = np.asarray(r.epsilon)
  assert np.all(np.isfinite(e)) and np.all(e > 0)
  assert np.all(np.diff(e, axis=1) < 0)  # more noise, less epsilon
  assert np.all(np.diff(e, axis=0) > 0)  # more sampling, more epsilon
  assert np.all(np.asarray(r.epsilon_lower) <= e)


def test_tight_is_below_rdp(grid):
  q, sigma, r = grid
  orders = np.concatenate([np.linspace(1.1, 10.9, 99), np.arange(12, 64), [128, 256]])
  rdp = jaxrdp.dpsgd_epsilon(q, sigma, 200, 1e-5, orders=orders).epsilon
  assert np.all(np.asarray(r.epsilon) < np.asarray(rdp))


def test_delta_and_epsilon_are_consistent(grid):
  q, sigma, r = grid
  # The two modes plan their own grids, so they are compared through the
  # certified sides: the true delta at epsilon (upper) is <= 1e-5, so the
  # certified lower delta there must be too; at epsilon_lower it is >= 1e-5.
  d = pld_delta(q, sigma, 200, r.epsilon, grid_size=N)
  assert np.all(np.asarray(d.delta_lower) <= 1e-5)
  np.testing.assert_allclose(np.asarray(d.delta), 1e-5, rtol=1e-2)
  d_low = pld_delta(q, sigma, 200, r.epsilon_lower, grid_size=N)
  assert np.all(np.asarray(d_low.delta) >= 1e-5)


def test_phases_equal_one_long_phase():
  one = pld_epsilon(0.02, 1.2, 300, 1e-6, grid_size=N)
  two = pld_epsilon_phases([(0.02, 1.2, 100), (0.02, 1.2, 200)], 1e-6, grid_size=N)
  assert abs(float(two.epsilon) - float(one.epsilon)) <= 1e-4 * float(one.epsilon)
  # A heterogeneous schedule lies between its two homogeneous ends.
  mixed = pld_epsilon_phases([(0.02, 1.2, 150), (0.02, 2.0, 150)], 1e-6, grid_size=N)
  lo = pld_epsilon(0.02, 2.0, 300, 1e-6, grid_size=N).epsilon
  assert float(lo) < float(mixed.epsilon) < float(one.epsilon)
  d = pld_delta_phases([(0.02, 1.2, 100), (0.02, 1.2, 200)], one.epsilon, grid_size=N)
  assert float(d.delta_lower) <= 1e-6 <= float(d.delta) * 1.01


def test_jit_vmap_grad():
  sig = np.array([0.9, 1.3])
  eager = np.asarray(pld_epsilon(0.01, sig, 500, 1e-5, grid_size=N).epsilon)
  with jax.enable_x64(True):
    jitted = np.asarray(
      jax.jit(lambda s: pld_epsilon(0.01, s, 500, 1e-5, grid_size=N).epsilon)(jnp.asarray(sig))
    )
    vmapped = np.asarray(
      jax.vmap(lambda s: pld_epsilon(0.01, s, 500, 1e-5, grid_size=N).epsilon)(jnp.asarray(sig))
    )
  np.testing.assert_allclose(jitted, eager, rtol=1e-12)
  np.testing.assert_allclose(vmapped, eager, rtol=1e-12)


def test_grad_matches_finite_differences():
  # The derivative is taken with the grid held fixed (an envelope derivative of
  # the discretized bound); finite differences move the grid with sigma, which
  # changes the discretization error by ~T d^2, so a fine grid is used.
  n = 2**15
  f = lambda s: pld_epsilon(0.01, s, 500, 1e-5, grid_size=n).epsilon
  with jax.enable_x64(True):
    g = float(jax.grad(f)(1.3))
  fd = central_difference(lambda s: float(f(s)), 1.3, 1e-3)
  assert g < 0
  assert abs(g - fd) <= 2e-3 * abs(fd), (g, fd)


def test_float32_callers_rounded_up_and_traced_invalid_is_nan():
  # x64 off, traced: float32 results rounded towards +inf; invalid values give NaN.
  with jax.enable_x64(False):
    out = jax.jit(lambda s: pld_epsilon(0.01, s, 500, 1e-5, grid_size=N).epsilon)(
      jnp.array([-1.0, 1.3], jnp.float32)
    )
  assert out.dtype == jnp.float32
  e64 = float(pld_epsilon(0.01, 1.3, 500, 1e-5, grid_size=N).epsilon)
  assert np.isnan(out[0])
  assert float(out[1]) >= e64 and float(out[1]) - e64 <= 1e-6 * e64


def test_answer_does_not_depend_on_the_batch_or_the_threads(monkeypatch):
  # A configuration gets the same plan and the same grid, hence bit for bit the
  # same certified epsilon, whatever batch it comes in and however many jobs
  # run at once.
  # Calibration relies on it: a budget met in a batch is met when recomputed.
  from jaxrdp.pld import _driver

  q = np.geomspace(2e-3, 0.2, 20)  # >= 16 rows: the add direction goes coarse first
  sigma = np.linspace(0.7, 2.5, 20)
  kw = dict(rtol=1e-3)
  batch = np.asarray(pld_epsilon(q, sigma, 300, 1e-6, **kw).epsilon)
  for i in (0, 7, 19):
    alone = float(pld_epsilon(q[i], sigma[i], 300, 1e-6, **kw).epsilon)
    assert alone == batch[i], (i, alone, batch[i])
  monkeypatch.setattr(_driver, "_WORKERS", 1)
  serial = np.asarray(pld_epsilon(q, sigma, 300, 1e-6, **kw).epsilon)
  np.testing.assert_array_equal(serial, batch)
  # Float64 is a thread-local setting that the workers enter themselves: the
  # same bits with x64 off globally (JAX's default; this session turns it on).
  monkeypatch.setattr(_driver, "_WORKERS", 4)
  jax.config.update("jax_enable_x64", False)
  try:
    off = np.asarray(pld_epsilon(q, sigma, 300, 1e-6, **kw).epsilon)
  finally:
    jax.config.update("jax_enable_x64", True)
  np.testing.assert_array_equal(off, batch)
  # Under a default-device context the workers use the caller's device.
  with jax.default_device(jax.devices()[0]):
    np.testing.assert_array_equal(np.asarray(pld_epsilon(q, sigma, 300, 1e-6, **kw).epsilon), batch)
