"""Calibration: budgets met, tight to 1e-6, closed-form oracles, jit/vmap, errors.

The SGM kernel takes seconds to compile, so every call here uses arrays of one
shape (N cells) and each solver compiles once for it (plus once under jit and
once under vmap).
"""


import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxrdp
from helpers import run_fresh_python
from jaxrdp.calibration import _calibration

DELTA = 1e-5
N = 32


def cells(*values):
  """Each argument tiled to N cells (so every call has the same shape)."""
  return [np.resize(np.asarray(v, dtype=np.float64), N) for v in values]


def conversion_offsets(delta, orders):
  # Improved conversion (Canonne, Kamath, Steinke 2020, Prop. 12) at zero RDP:
  # c_a = log1p(-1/a) - (log delta + log a) / (a - 1), per order.
  a = np.asarray(orders, dtype=np.float64)
  return np.log1p(-1 / a) - (np.log(delta) + np.log(a)) / (a - 1)


@pytest.fixture(scope="module")
def grid():
  # Random targets and configurations, drawn once with a fixed seed (not hand-picked).
  rng = np.random.default_rng(20261122)
  q = 10 ** rng.uniform(-4, 0, N)
  steps = np.round(10 ** rng.uniform(0, 4.5, N))
  delta = 10 ** rng.uniform(-9, -3, N)
  eps = 10 ** rng.uniform(-1, 1.3, N)
  sigma = 10 ** rng.uniform(-0.2, 1.0, N)
  return q, steps, delta, eps, sigma


_EPS_JIT = jax.jit(jaxrdp.dpsgd_epsilon)
_DELTA_JIT = jax.jit(jaxrdp.dpsgd_delta)


def _EPS(*args):
  with jax.enable_x64(True):  # float64 results whatever the global setting
    return _EPS_JIT(*args)


def _DELTA(*args):
  with jax.enable_x64(True):
    return _DELTA_JIT(*args)


def _recompute(fn, field, *args):
  # The accountant at full-size (N) arrays, so that it compiles once; masked cells
  # get harmless values and the caller selects.
  args = [np.where(np.isfinite(a), a, 1.0) for a in np.broadcast_arrays(*args)]
  full = [np.resize(a, N) for a in args]
  return np.asarray(getattr(fn(*full), field))[: args[0].size].reshape(args[0].shape)


def eps_of(q, sigma, steps, delta):
  return _recompute(_EPS, "epsilon", q, sigma, steps, delta)


def delta_of(q, sigma, steps, eps):
  return _recompute(_DELTA, "delta", q, sigma, steps, eps)


# --------------------------------------------------------------------------------------
# calibrate_noise


@pytest.fixture(scope="module")
def noise(grid):
  q, steps, delta, eps, _ = grid
  return jaxrdp.calibrate_noise(eps, delta, q, steps)


def test_noise_meets_budget_and_is_tight(grid, noise):
  q, steps, delta, eps, _ = grid
  ok = np.asarray(noise.feasible)
  sigma = np.asarray(noise.sigma)
  assert ok.sum() >= N - 2
  assert np.all(eps_of(q[ok], sigma[ok], steps[ok], delta[ok]) <= eps[ok])
  assert np.all(eps_of(q[ok], sigma[ok] * (1 - 1e-6), steps[ok], delta[ok]) > eps[ok])
  # The reported epsilon and order are the accountant's at sigma.
  ref = _EPS(q, np.where(ok, sigma, 1.0), steps, delta)
  np.testing.assert_allclose(np.asarray(noise.epsilon)[ok], np.asarray(ref.epsilon)[ok], rtol=1e-12)
  np.testing.assert_array_equal(np.asarray(noise.order)[ok], np.asarray(ref.order)[ok])
  # Infeasible cells are those at or below the infinite-noise floor.
  floors = np.array([max(conversion_offsets(d, jaxrdp.DEFAULT_ORDERS).min(), 0) for d in delta])
  np.testing.assert_array_equal(ok, eps > floors * (1 + 1e-9))
  assert np.all(np.isnan(sigma[~ok]))


def test_noise_gaussian_closed_form():
  # q = 1 is the Gaussian mechanism, RDP a T / (2 sigma^2) at order a: the budget
  # a T / (2 sigma^2) + c_a <= eps holds iff sigma >= sqrt(a T / (2 (eps - c_a))), so
  # the smallest sigma is the minimum of that over the orders with c_a < eps.
  orders = jaxrdp.DEFAULT_ORDERS
  rng = np.random.default_rng(7)
  eps, steps = cells(10 ** rng.uniform(-0.5, 1.0, N), np.round(10 ** rng.uniform(0, 3, N)))
  c = conversion_offsets(DELTA, orders)
  expected = [np.min(np.sqrt(orders[c < e] * t / (2 * (e - c[c < e])))) for e, t in zip(eps, steps)]
  q, delta = cells(1.0, DELTA)
  res = jaxrdp.calibrate_noise(eps, delta, q, steps)
  np.testing.assert_allclose(np.asarray(res.sigma), expected, rtol=1e-7)


def test_noise_monotone_mnist_and_degenerate():
  eps, q, steps, delta = cells(np.linspace(0.5, 8, N), 256 / 60000, 14063, DELTA)
  eps[-3:] = [2.597, 1.0, 1e-4]
  q[-2] = 0.0  # no sampling: no noise needed
  sigma = np.asarray(jaxrdp.calibrate_noise(eps, delta, q, steps).sigma)
  assert np.all(np.diff(sigma[: N - 3]) < 0)
  # REFERENCE.md: sigma = 1.1 gives epsilon 2.597 for this configuration.
  assert sigma[-3] == pytest.approx(1.1, rel=1e-3)
  assert sigma[-2] == 0.0
  assert np.isnan(sigma[-1])  # 1e-4 is below the infinite-noise floor


# --------------------------------------------------------------------------------------
# calibrate_noise_for_delta


def test_noise_for_delta_meets_budget_and_is_tight(grid):
  q, steps, delta, eps, _ = grid
  res = jaxrdp.calibrate_noise_for_delta(delta, eps, q, steps)
  ok = np.asarray(res.feasible)
  sigma = np.asarray(res.sigma)
  assert ok.sum() >= N - 2
  assert np.all(delta_of(q[ok], sigma[ok], steps[ok], eps[ok]) <= delta[ok])
  assert np.all(delta_of(q[ok], sigma[ok] * (1 - 1e-6), steps[ok], eps[ok]) > delta[ok])
  assert np.all(np.isnan(sigma[~ok]))


# --------------------------------------------------------------------------------------
# calibrate_steps


def test_steps_largest_integer(grid):
  q, _, delta, eps, sigma = grid
  res = jaxrdp.calibrate_steps(eps, delta, q, sigma)
  ok = np.asarray(res.feasible)
  steps = np.asarray(res.steps)
  assert 3 <= ok.sum() < N  # both kinds occur in this draw
  assert np.all(steps[ok] == np.round(steps[ok])) and np.all(steps[ok] >= 1)
  assert np.all(eps_of(q[ok], sigma[ok], steps[ok], delta[ok]) <= eps[ok])
  assert np.all(eps_of(q[ok], sigma[ok], steps[ok] + 1, delta[ok]) > eps[ok])
  # Infeasible: not even one step fits.
  assert np.all(eps_of(q[~ok], sigma[~ok], 1.0, delta[~ok]) > eps[~ok] * (1 - 1e-12))
  assert np.all(np.isnan(steps[~ok]))


def test_steps_closed_form_and_degenerate():
  # epsilon(T) = min_a T r_a + c_a is piecewise linear in T, so the largest T is
  # floor(max_a (eps - c_a) / r_a), with the per-step RDP r_a from sgm_rdp.
  orders = jaxrdp.DEFAULT_ORDERS
  with jax.enable_x64(True):
    r = np.asarray(jax.jit(jaxrdp.mechanisms.sgm_rdp)(0.01, 1.2, orders))
  c = conversion_offsets(DELTA, orders)
  eps, delta, q, sigma = cells(np.linspace(0.3, 8.0, N), DELTA, 0.01, 1.2)
  q[-2:], sigma[-2:] = [0.0, 0.1], [1.0, np.inf]  # zero RDP: unlimited steps
  expected = np.floor(np.max((eps[:, None] - c) / r, axis=1))
  got = np.asarray(jaxrdp.calibrate_steps(eps, delta, q, sigma).steps)
  assert np.all(np.isinf(got[-2:]))
  got, expected = got[:-2], expected[:-2]
  none = expected < 1  # not even one step fits
  assert 0 < none.sum() < N - 2 and np.all(np.isnan(got[none]))
  got, expected = got[~none], expected[~none]
  # The solver keeps a 1e-12 relative margin, which can cost at most one step.
  assert np.all((expected - 1 <= got) & (got <= expected))
  assert np.mean(got == expected) > 0.9


def test_steps_for_delta(grid):
  q, _, delta, eps, sigma = grid
  res = jaxrdp.calibrate_steps_for_delta(delta, eps, q, sigma)
  steps = np.asarray(res.steps)
  ok = np.asarray(res.feasible) & np.isfinite(steps)
  assert ok.sum() >= 3
  assert np.all(delta_of(q[ok], sigma[ok], steps[ok], eps[ok]) <= delta[ok])
  assert np.all(delta_of(q[ok], sigma[ok], steps[ok] + 1, eps[ok]) > delta[ok])


# --------------------------------------------------------------------------------------
# calibrate_sampling_rate


def test_sampling_rate_largest(grid):
  _, steps, delta, eps, sigma = grid
  eps, delta, sigma, steps = eps.copy(), delta.copy(), sigma.copy(), steps.copy()
  sigma[-1], steps[-2] = 0.0, 0.0  # no noise: infeasible; no steps: q = 1
  res = jaxrdp.calibrate_sampling_rate(eps, delta, sigma, steps)
  ok = np.asarray(res.feasible)
  q = np.asarray(res.q)
  assert not ok[-1] and q[-2] == 1.0
  assert ok.sum() >= N // 2
  assert np.all((q[ok] > 0) & (q[ok] <= 1))
  assert np.all(eps_of(q[ok], sigma[ok], steps[ok], delta[ok]) <= eps[ok])
  inner = ok & (q < 1)
  assert inner.sum() >= 5
  assert np.all(eps_of(q[inner] * (1 + 1e-6), sigma[inner], steps[inner], delta[inner]) > eps[inner])
  assert np.all(np.isnan(q[~ok]))


def test_sampling_rate_for_delta(grid):
  _, steps, delta, eps, sigma = grid
  res = jaxrdp.calibrate_sampling_rate_for_delta(delta, eps, sigma, steps)
  q = np.asarray(res.q)
  ok = np.asarray(res.feasible) & (q < 1)
  assert ok.sum() >= 5
  assert np.all(delta_of(q[ok], sigma[ok], steps[ok], eps[ok]) <= delta[ok])
  assert np.all(delta_of(q[ok] * (1 + 1e-6), sigma[ok], steps[ok], eps[ok]) > delta[ok])


# --------------------------------------------------------------------------------------
# Transformations, recompilation, validation.


def _args(name, grid):
  q, steps, delta, eps, sigma = grid
  budget, given = (delta, eps) if name.endswith("for_delta") else (eps, delta)
  if name.startswith("calibrate_noise"):
    return budget, given, q, steps
  if name.startswith("calibrate_steps"):
    return budget, given, q, sigma
  return budget, given, sigma, steps


FIELDS = {"noise": "sigma", "steps": "steps", "sampling": "q"}


@pytest.mark.parametrize("name", ["calibrate_noise", "calibrate_steps", "calibrate_sampling_rate",
                                  "calibrate_noise_for_delta", "calibrate_steps_for_delta",
                                  "calibrate_sampling_rate_for_delta"])
def test_plain_jit_vmap_agree(name, grid):
  fn = getattr(jaxrdp, name)
  field = FIELDS[name.split("_")[1]]
  args = [jnp.asarray(a) for a in _args(name, grid)]
  plain = np.asarray(getattr(fn(*args), field))
  with jax.enable_x64(True):  # float64 under the transformations, to compare at 1e-12
    # jit of vmap: both transformations in one compilation (the SGM kernel takes
    # seconds to compile).
    transformed = jax.jit(jax.vmap(fn))
    both = np.asarray(getattr(transformed(*args), field))
    np.testing.assert_allclose(both, plain, rtol=1e-12, equal_nan=True)
    if name == "calibrate_noise":
      # Traced invalid input gives NaN with feasible == False, never a number.
      bad = list(args)
      bad[2] = bad[2].at[0].set(2.0)  # q = 2
      res = transformed(*bad)
      assert np.isnan(float(res.sigma[0])) and not bool(res.feasible[0])
      np.testing.assert_allclose(np.asarray(res.sigma)[1:], plain[1:], rtol=1e-12, equal_nan=True)


_FLOAT32_SCRIPT = """
import numpy as np, jax, jax.numpy as jnp, jaxrdp
assert not jax.config.jax_enable_x64
args32 = [np.float32(x) for x in (2.0, 1e-5, 0.01, 1.0)]
exact = jaxrdp.calibrate_steps(*[float(x) for x in args32])  # the same inputs, in float64
res = jax.jit(jaxrdp.calibrate_steps)(*args32)
assert res.steps.dtype == jnp.float32, res.steps.dtype
assert float(res.steps) <= float(exact.steps), (res.steps, exact.steps)
assert float(res.epsilon) >= float(exact.epsilon), (res.epsilon, exact.epsilon)
print("FLOAT32-OK")
"""


def test_float32_callers_get_safe_rounding():
  # Under a float32 jit (x64 off, as by default) the results are float32, rounded so
  # that the budget still holds: steps and q down, sigma and epsilon up. A fresh
  # interpreter, since the test session runs with x64 on.
  assert "FLOAT32-OK" in run_fresh_python(_FLOAT32_SCRIPT)


def test_same_shape_does_not_recompile(grid):
  q, steps, delta, eps, _ = grid
  jaxrdp.calibrate_noise(eps, delta, q, steps)
  before = _calibration._noise_jit._cache_size()
  jaxrdp.calibrate_noise(eps * 1.1, delta, q, steps * 2)
  assert _calibration._noise_jit._cache_size() == before


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(target_epsilon=1.0, delta=1e-5, q=2.0, steps=10), "q"),
        (dict(target_epsilon=1.0, delta=1.0, q=0.1, steps=10), "delta"),
        (dict(target_epsilon=-1.0, delta=1e-5, q=0.1, steps=10), "target_epsilon"),
        (dict(target_epsilon=1.0, delta=1e-5, q=0.1, steps=-3), "steps"),
        (dict(target_epsilon=float("nan"), delta=1e-5, q=0.1, steps=10), "target_epsilon"),
        (dict(target_epsilon=1.0, delta=1e-5, q=0.1, steps=10, orders=[0.5, 2.0]), "orders"),
    ],
)
def test_concrete_invalid_raises(kwargs, name):
  with pytest.raises(ValueError, match=name):
    jaxrdp.calibrate_noise(**kwargs)


def test_invalid_sigma_raises():
  with pytest.raises(ValueError, match="sigma"):
    jaxrdp.calibrate_steps(1.0, 1e-5, 0.1, -1.0)
  with pytest.raises(ValueError, match="target_delta"):
    jaxrdp.calibrate_sampling_rate_for_delta(1.5, 1.0, 1.0, 10)
