"""Calibration: budgets met, tight to 1e-6, closed-form oracles, jit/vmap, errors; the core.

The SGM kernel takes seconds to compile, so every call here uses arrays of one
shape (N cells) and each solver compiles once for it (plus once under jit and
once under vmap).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import run_fresh_python

import jaxrdp
from jaxrdp._core.precision import x64_context
from jaxrdp.calibration import _calibration, _sgm_calibration
from jaxrdp.calibration._core import Budget, Domain, Evaluator, Known, calibrate

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


def _kwargs(name, by_delta, grid):
  q, steps, delta, eps, sigma = grid
  budget = (
    dict(target_delta=delta, epsilon=eps) if by_delta else dict(target_epsilon=eps, delta=delta)
  )
  if name == "calibrate_noise":
    return dict(budget, q=q, steps=steps)
  if name == "calibrate_steps":
    return dict(budget, q=q, sigma=sigma)
  return dict(budget, sigma=sigma, steps=steps)


@pytest.fixture(scope="module")
def calibrated(grid):
  """``calibrated(name, by_delta)``: the calibration of the grid, computed once (each
  takes seconds to run at the suite's XLA level) for its budget checks and for
  test_plain_jit_vmap_agree."""
  done = {}

  def get(name, by_delta):
    if (name, by_delta) not in done:
      done[name, by_delta] = getattr(jaxrdp, name)(**_kwargs(name, by_delta, grid))
    return done[name, by_delta]

  return get


# --------------------------------------------------------------------------------------
# calibrate_noise


def test_noise_meets_budget_and_is_tight(grid, calibrated):
  q, steps, delta, eps, _ = grid
  noise = calibrated("calibrate_noise", False)
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
  # 1e-4 is below the floor of the order-wise conversion; the total-variation rule
  # (epsilon = 0 where delta >= sqrt(1 - exp(-RDP))) can still meet it with enough
  # noise. Either way no sigma is returned that misses the budget.
  assert np.isnan(sigma[-1]) or eps_of(q[-1], sigma[-1], steps[-1], delta[-1]) <= 1e-4


# --------------------------------------------------------------------------------------
# calibrate_noise, delta budget


def test_noise_delta_budget_meets_budget_and_is_tight(grid, calibrated):
  q, steps, delta, eps, _ = grid
  res = calibrated("calibrate_noise", True)
  ok = np.asarray(res.feasible)
  sigma = np.asarray(res.sigma)
  assert ok.sum() >= N - 2
  assert np.all(delta_of(q[ok], sigma[ok], steps[ok], eps[ok]) <= delta[ok])
  assert np.all(delta_of(q[ok], sigma[ok] * (1 - 1e-6), steps[ok], eps[ok]) > delta[ok])
  assert np.all(np.isnan(sigma[~ok]))


# --------------------------------------------------------------------------------------
# calibrate_steps


def test_steps_largest_integer(grid, calibrated):
  q, _, delta, eps, sigma = grid
  res = calibrated("calibrate_steps", False)
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


def test_steps_delta_budget(grid, calibrated):
  q, _, delta, eps, sigma = grid
  res = calibrated("calibrate_steps", True)
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
  # Tightness where epsilon is positive at the answer (where the total-variation rule
  # gives epsilon = 0, epsilon jumps at the boundary and q is only the end of that range).
  inner = ok & (q < 1) & (eps_of(q, sigma, steps, delta) > 0)
  assert inner.sum() >= 5
  tight = eps_of(q[inner] * (1 + 1e-6), sigma[inner], steps[inner], delta[inner]) > eps[inner]
  # Every cell, including one (sigma 6.9, T = 131, delta 1.2e-7, target 0.12) whose
  # search starts where the total-variation rule gives epsilon = 0 (its answer was
  # once q = 1.1e-7 instead of 0.0158).
  assert np.all(tight), np.nonzero(~tight)
  assert np.all(np.isnan(q[~ok]))


def test_sampling_rate_delta_budget(grid, calibrated):
  _, steps, delta, eps, sigma = grid
  res = calibrated("calibrate_sampling_rate", True)
  q = np.asarray(res.q)
  ok = np.asarray(res.feasible) & (q < 1)
  assert ok.sum() >= 5
  assert np.all(delta_of(q[ok], sigma[ok], steps[ok], eps[ok]) <= delta[ok])
  assert np.all(delta_of(q[ok] * (1 + 1e-6), sigma[ok], steps[ok], eps[ok]) > delta[ok])


# --------------------------------------------------------------------------------------
# Transformations, recompilation, validation.


FIELDS = {"calibrate_noise": "sigma", "calibrate_steps": "steps", "calibrate_sampling_rate": "q"}


@pytest.mark.parametrize("by_delta", [False, True], ids=["epsilon_budget", "delta_budget"])
@pytest.mark.parametrize("name", ["calibrate_noise", "calibrate_steps", "calibrate_sampling_rate"])
def test_plain_jit_vmap_agree(name, by_delta, grid, calibrated):
  fn = getattr(jaxrdp, name)
  field = FIELDS[name]
  kwargs = {k: jnp.asarray(a) for k, a in _kwargs(name, by_delta, grid).items()}
  keys = list(kwargs)
  args = [kwargs[k] for k in keys]

  def positional(*a):
    return fn(**dict(zip(keys, a)))

  full = calibrated(name, by_delta)  # fn(**kwargs), the plain call
  # Eight of the N cells, four feasible and four not where there are: a vmapped
  # calibration runs every cell until the slowest has converged (20 s for N cells
  # of calibrate_sampling_rate under jit of vmap at the suite's XLA level, 5 s for 8).
  feasible = np.asarray(full.feasible)
  pick = np.concatenate([np.flatnonzero(feasible)[:4], np.flatnonzero(~feasible)[:4]])
  pick = np.sort(np.concatenate([pick, np.setdiff1d(np.arange(N), pick)[: 8 - pick.size]]))
  plain = np.asarray(getattr(full, field))[pick]
  args = [a[pick] for a in args]
  with jax.enable_x64(True):  # float64 under the transformations, to compare at 1e-12
    # jit of vmap: both transformations in one compilation (the SGM kernel takes
    # seconds to compile).
    transformed = jax.jit(jax.vmap(positional))
    both = np.asarray(getattr(transformed(*args), field))
    np.testing.assert_allclose(both, plain, rtol=1e-12, equal_nan=True)
    if name == "calibrate_noise" and not by_delta:
      # Traced invalid input gives NaN with feasible == False, never a number.
      bad = list(args)
      bad[keys.index("q")] = bad[keys.index("q")].at[0].set(2.0)  # q = 2
      res = transformed(*bad)
      assert np.isnan(float(res.sigma[0])) and not bool(res.feasible[0])
      np.testing.assert_allclose(np.asarray(res.sigma)[1:], plain[1:], rtol=1e-12, equal_nan=True)


_FLOAT32_ARGS = (2.0, 1e-5, 0.01, 1.0)  # target epsilon, delta, q, sigma
_FLOAT32_SCRIPT = """
import numpy as np, jax, jax.numpy as jnp, jaxrdp
assert not jax.config.jax_enable_x64
args32 = [np.float32(x) for x in {args!r}]
exact_steps, exact_epsilon = {exact!r}  # the same inputs, in float64
res = jax.jit(jaxrdp.calibrate_steps)(*args32)
assert res.steps.dtype == jnp.float32, res.steps.dtype
assert float(res.steps) <= exact_steps, (res.steps, exact_steps)
assert float(res.epsilon) >= exact_epsilon, (res.epsilon, exact_epsilon)
print("FLOAT32-OK")
"""


def test_float32_callers_get_safe_rounding():
  # Under a float32 jit (x64 off, as by default) the results are float32, rounded so
  # that the budget still holds: steps and q down, sigma and epsilon up. A fresh
  # interpreter, since the test session runs with x64 on. The float64 answer for the
  # same (float32) inputs is computed here, at the N cells every call of this file
  # uses (its program is compiled already), not in the fresh interpreter.
  inputs = cells(*[float(np.float32(x)) for x in _FLOAT32_ARGS])
  exact = jaxrdp.calibrate_steps(*inputs)
  exact = (float(exact.steps[0]), float(exact.epsilon[0]))
  assert np.isfinite(exact).all() and exact[0] >= 1
  script = _FLOAT32_SCRIPT.format(args=_FLOAT32_ARGS, exact=exact)
  assert "FLOAT32-OK" in run_fresh_python(script)


def test_same_shape_does_not_recompile(grid, calibrated):
  q, steps, delta, eps, _ = grid
  calibrated("calibrate_noise", False)  # jaxrdp.calibrate_noise(eps, delta, q, steps)
  before = _sgm_calibration._noise_jit._cache_size()
  jaxrdp.calibrate_noise(eps * 1.1, delta, q, steps * 2)
  assert _sgm_calibration._noise_jit._cache_size() == before


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
    jaxrdp.calibrate_sampling_rate(sigma=1.0, steps=10, target_delta=1.5, epsilon=1.0)
  with pytest.raises(ValueError, match="epsilon"):
    jaxrdp.calibrate_noise(q=0.1, steps=10, target_delta=1e-5, epsilon=-1.0)


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(q=0.1, steps=10), "either target_epsilon and delta"),
    (
      dict(target_epsilon=1.0, delta=1e-5, target_delta=1e-5, epsilon=1.0, q=0.1, steps=10),
      "either target_epsilon and delta",
    ),
    (dict(target_epsilon=1.0, q=0.1, steps=10), "'delta'"),
    (dict(epsilon=1.0, q=0.1, steps=10), "'target_delta'"),
    (dict(target_epsilon=1.0, delta=1e-5, q=0.1), "'steps'"),
  ],
)
def test_budget_arguments(kwargs, match):
  # One budget per call: target_epsilon with delta, or target_delta with epsilon.
  with pytest.raises(TypeError, match=match):
    jaxrdp.calibrate_noise(**kwargs)


def test_unknown_accountant_raises():
  with pytest.raises(ValueError, match="accountant"):
    jaxrdp.calibrate_steps(1.0, 1e-5, 0.1, 1.0, accountant="unknown")


# --------------------------------------------------------------------------------------
# The core on its own: synthetic monotone evaluators with known thresholds, value only.

MARGIN = 1 - 1e-12  # the core's budget margin
_rng = np.random.default_rng(99)
C = 10 ** _rng.uniform(-2, 2, N)  # one scale per cell
TARGET = 10 ** _rng.uniform(-1, 1, N)


def _zeros_order(p):
  return jnp.zeros_like(p)


def _run_core(make_ev, budget, target, given, known=None):
  # jit, so that the loops compile once per test; float64 inside.
  with x64_context():
    fn = jax.jit(lambda t, g, c: calibrate(make_ev(c), budget, t, g, known=known))
    return jax.tree_util.tree_map(
      np.asarray, fn(jnp.asarray(target), jnp.asarray(given), jnp.asarray(C))
    )


def _decreasing(c):
  # value = c / p: the smallest p meeting the budget is c / (target * margin).
  return Evaluator(
    lambda p, live: (c / p, _zeros_order(p)), increasing=False, domain=Domain(1e-3, 1e6, "log")
  )


def _increasing(c):
  # value = c p^2: the largest p meeting the budget is sqrt(target * margin / c), or 1.
  return Evaluator(
    lambda p, live: (c * p * p, _zeros_order(p)), increasing=True, domain=Domain(1e-10, 1.0, "log")
  )


def test_core_decreasing_log_parameter():
  res = _run_core(_decreasing, Budget.EPSILON, TARGET, np.full(N, DELTA))
  expected = C / (TARGET * MARGIN)
  feasible = (expected >= 1e-3) & (expected <= 1e6)
  np.testing.assert_array_equal(res.feasible, feasible)
  p = res.param[feasible]
  # Conservative: the margin absorbs a different rounding of the recomputation.
  assert np.all(C[feasible] / p <= TARGET[feasible])
  assert np.all(C[feasible] / (p * (1 - 1e-6)) > TARGET[feasible])  # tight
  np.testing.assert_allclose(p, expected[feasible], rtol=1e-7)
  np.testing.assert_allclose(res.epsilon[feasible], C[feasible] / p, rtol=1e-15)
  np.testing.assert_array_equal(res.delta[feasible], DELTA)


def test_core_increasing_log_parameter_caps_and_infeasible():
  target = TARGET.copy()
  target[:3] = [1e-30, 1e3, 5.0]  # q below 1e-10: infeasible; q above 1: capped at 1
  c = C.copy()
  res = _run_core(_increasing, Budget.EPSILON, target, np.full(N, DELTA))
  expected = np.sqrt(target * MARGIN / c)
  assert not res.feasible[0] and np.isnan(res.param[0]) and np.isnan(res.epsilon[0])
  inner = (expected > 1e-10) & (expected < 1)
  assert inner.sum() >= 5
  np.testing.assert_array_equal(res.feasible, expected > 1e-10)
  np.testing.assert_array_equal(res.param[expected >= 1], 1.0)
  p = res.param[inner]
  assert np.all(c[inner] * p * p <= target[inner])
  assert np.all(c[inner] * (p * (1 + 1e-6)) ** 2 > target[inner])
  np.testing.assert_allclose(p, expected[inner], rtol=1e-7)


def test_core_delta_budget_and_invalid_cells():
  # A delta budget: the value is a delta, the given half an epsilon.
  target = 10 ** np.random.default_rng(3).uniform(-6, -1, N)
  given = np.full(N, 2.0)
  target[0], given[1] = 1.5, np.nan  # out of range: not searched, NaN
  res = _run_core(_decreasing, Budget.DELTA, target, given)
  assert not res.feasible[:2].any() and np.all(np.isnan(res.param[:2]))
  ok = res.feasible
  np.testing.assert_array_equal(ok[2:], (C / (target * MARGIN) <= 1e6)[2:])
  assert ok.sum() >= 5
  np.testing.assert_allclose(res.param[ok], (C / (target * MARGIN))[ok], rtol=1e-7)
  np.testing.assert_allclose(res.delta[ok], (C / res.param)[ok], rtol=1e-15)
  np.testing.assert_array_equal(res.epsilon[ok], 2.0)


def test_core_integer_parameter_both_directions():
  bound = TARGET * MARGIN

  def more_is_worse(c):  # value = c n: the largest n with c n <= bound
    return Evaluator(
      lambda n, live: (c * n, _zeros_order(n)), True, Domain(1.0, 2.0**52, "integer")
    )

  def more_is_better(c):  # value = c / n: the smallest n with c / n <= bound
    return Evaluator(lambda n, live: (c / n, _zeros_order(n)), False, Domain(1.0, 1e6, "integer"))

  res = _run_core(more_is_worse, Budget.EPSILON, TARGET, np.full(N, DELTA))
  expected = np.floor(bound / C)
  np.testing.assert_array_equal(res.feasible, expected >= 1)
  assert 0 < (expected < 1).sum() < N
  ok = res.feasible
  # Tight to one step: n meets the budget, n + 1 does not (floor may round either way).
  assert np.all(C[ok] * res.param[ok] <= bound[ok])
  assert np.all(C[ok] * (res.param[ok] + 1) > bound[ok])
  assert np.all(np.abs(res.param[ok] - expected[ok]) <= 1)

  res = _run_core(more_is_better, Budget.EPSILON, TARGET, np.full(N, DELTA))
  expected = np.maximum(np.ceil(C / bound), 1.0)
  assert np.all(res.feasible)
  n = res.param
  assert np.all(C / n <= bound)
  assert np.all((n == 1) | (C / np.maximum(n - 1, 1) > bound))
  assert np.all(np.abs(n - expected) <= 1)


def test_core_known_cells_and_accelerators():
  # Cells answered in closed form are feasible and untouched by the search; a proxy
  # (never below the value) and a memo change the work, not the answer.
  known = Known(jnp.arange(N) < 2, jnp.full(N, 7.0), jnp.full(N, 0.25), jnp.full(N, 3.0))

  def plain(c):
    return _decreasing(c)

  def accelerated(c):
    def value(p, live, hint):
      # The memo is the value at the best acceptable point; beyond it, the value is
      # at least that (more budget is spent there).
      v = c / p
      assert hint.beyond.shape == p.shape
      return v, _zeros_order(p), jnp.maximum(v, jnp.where(hint.beyond, 0.0, 0.0))[..., None]

    return Evaluator(
      value,
      False,
      Domain(1e-3, 1e6, "log"),
      start=c,
      proxy=lambda p: 1.05 * c / p,
      memo_like=jax.ShapeDtypeStruct((N, 1), jnp.float64),
    )

  a = _run_core(plain, Budget.EPSILON, TARGET, np.full(N, DELTA), known)
  b = _run_core(accelerated, Budget.EPSILON, TARGET, np.full(N, DELTA), known)
  for res in (a, b):
    np.testing.assert_array_equal(res.param[:2], 7.0)
    np.testing.assert_array_equal(res.epsilon[:2], 0.25)
    np.testing.assert_array_equal(res.order[:2], 3.0)
  np.testing.assert_array_equal(a.feasible, b.feasible)
  ok = b.feasible
  assert np.all(C[ok][2:] / b.param[ok][2:] <= TARGET[ok][2:])
  np.testing.assert_allclose(b.param, a.param, rtol=1e-7)


def test_fixed_size_calibration_memory_is_bounded():
  # FINDINGS 5: calibrate_noise(..., sampling="fixed") on 400 cells asked for 45 GB
  # (112 MB per cell at the default orders, all cells at once). The bound's kernel
  # now runs in batches of elements: the compiled calibration's working memory does
  # not grow with the grid. Compiled, not run (the memory analysis is XLA's).
  from jaxrdp._core.validation import StaticArray
  from jaxrdp.calibration import _schemes
  from jaxrdp.rdp._sampling import FixedSizeSteps

  orders = _calibration.orders_array(None)

  def temp_bytes(n):
    with x64_context():
      args = [jnp.full(n, 3.0), jnp.full(n, 1e-5), jnp.full(n, 0.01), jnp.full(n, 100.0)]
      compiled = (
        _schemes.JITS["noise"]
        .lower(
          *args,
          jnp.asarray(orders),
          orders_static=StaticArray(orders),
          budget=Budget.EPSILON,
          scheme=FixedSizeSteps("replace_one"),
        )
        .compile()
      )
    analysis = compiled.memory_analysis()
    if analysis is None:
      pytest.skip("no memory analysis on this backend")
    return analysis.temp_size_in_bytes

  big = temp_bytes(64)  # 7.2 GB before
  assert big < 1e9, big


def test_fixed_size_calibration_of_a_grid_meets_the_budget():
  # A grid larger than one batch of the kernel (16 cells x 42 orders = 672 > 512
  # elements): every cell meets its budget and is tight.
  orders = np.concatenate([np.linspace(1.25, 10.0, 36), [12.0, 16.0, 24.0, 32.0, 48.0, 64.0]])
  q = np.geomspace(1e-3, 0.3, 16)
  res = jaxrdp.calibrate_noise(2.0, 1e-5, q, 500, orders, sampling="fixed")
  sigma = np.asarray(res.sigma)
  assert np.all(np.asarray(res.feasible))
  both = np.stack([sigma, sigma * (1 - 1e-6)])
  eps = np.asarray(jaxrdp.dpsgd_epsilon(q, both, 500, 1e-5, orders, sampling="fixed").epsilon)
  assert np.all(eps[0] <= 2.0) and np.all(eps[1] > 2.0)
