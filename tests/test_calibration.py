"""Calibration: budgets met, tight to 1e-6, closed-form oracles, jit/vmap, errors."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxrdp
from jaxrdp import _calibration

DELTA = 1e-5
N_CELLS = 48  # one array shape for the random grids, so each solver compiles once


def _floor_eps(delta, orders):
    # Improved conversion (Canonne, Kamath, Steinke 2020, Prop. 12) at zero RDP:
    # min_a log1p(-1/a) - (log delta + log a) / (a - 1); infinite noise cannot beat it.
    a = np.asarray(orders, dtype=np.float64)
    c = np.log1p(-1 / a) - (np.log(delta) + np.log(a)) / (a - 1)
    return max(float(np.min(c)), 0.0)


def _conversion_offsets(delta, orders):
    a = np.asarray(orders, dtype=np.float64)
    return np.log1p(-1 / a) - (np.log(delta) + np.log(a)) / (a - 1)


@pytest.fixture(scope="module")
def random_grid():
    # Random targets and configurations, drawn once with a fixed seed (not hand-picked).
    rng = np.random.default_rng(20261122)
    q = 10 ** rng.uniform(-4, 0, N_CELLS)
    steps = np.round(10 ** rng.uniform(0, 4.5, N_CELLS))
    delta = 10 ** rng.uniform(-9, -3, N_CELLS)
    eps = 10 ** rng.uniform(-1, 1.3, N_CELLS)
    sigma = 10 ** rng.uniform(-0.2, 1.0, N_CELLS)
    return q, steps, delta, eps, sigma


def _eps(q, sigma, steps, delta):
    return np.asarray(jaxrdp.dpsgd_epsilon(q, sigma, steps, delta).epsilon)


def _delta(q, sigma, steps, eps):
    return np.asarray(jaxrdp.dpsgd_delta(q, sigma, steps, eps).delta)


# --------------------------------------------------------------------------------------
# calibrate_noise


def test_noise_meets_budget_and_is_tight(random_grid):
    q, steps, delta, eps, _ = random_grid
    res = jaxrdp.calibrate_noise(eps, delta, q, steps)
    ok = np.asarray(res.feasible)
    sigma = np.asarray(res.sigma)
    assert ok.sum() >= N_CELLS // 2
    # Budget met on recomputation, and 1e-6 less noise breaks it.
    assert np.all(_eps(q[ok], sigma[ok], steps[ok], delta[ok]) <= eps[ok])
    assert np.all(_eps(q[ok], sigma[ok] * (1 - 1e-6), steps[ok], delta[ok]) > eps[ok])
    # The reported epsilon is the recomputed one.
    np.testing.assert_allclose(np.asarray(res.epsilon)[ok], _eps(q[ok], sigma[ok], steps[ok], delta[ok]), rtol=1e-12)
    # Infeasible cells are exactly those at or below the infinite-noise floor.
    floors = np.array([_floor_eps(d, jaxrdp.DEFAULT_ORDERS) for d in delta])
    np.testing.assert_array_equal(ok, eps > floors * (1 + 1e-9))
    assert np.all(np.isnan(sigma[~ok]))


def test_noise_gaussian_closed_form():
    # q = 1 is the Gaussian mechanism: RDP(a) = a T / (2 sigma^2), so per order the
    # budget a T / (2 sigma^2) + c_a <= eps holds iff sigma >= sqrt(a T / (2 (eps - c_a)));
    # the smallest sigma is the minimum of that over the orders with c_a < eps.
    orders = jaxrdp.DEFAULT_ORDERS
    rng = np.random.default_rng(7)
    eps = 10 ** rng.uniform(-0.5, 1.0, 8)
    steps = np.round(10 ** rng.uniform(0, 3, 8))
    expected = []
    for e, t in zip(eps, steps):
        c = _conversion_offsets(DELTA, orders)
        m = c < e
        expected.append(np.min(np.sqrt(orders[m] * t / (2 * (e - c[m])))))
    res = jaxrdp.calibrate_noise(eps, DELTA, 1.0, steps)
    np.testing.assert_allclose(np.asarray(res.sigma), expected, rtol=1e-9)


def test_noise_monotone_in_target():
    eps = np.linspace(0.5, 8, 16)
    sigma = np.asarray(jaxrdp.calibrate_noise(eps, DELTA, 0.01, 1000).sigma)
    assert np.all(np.diff(sigma) < 0)


def test_noise_mnist_reference():
    # REFERENCE.md: q = 256/60000, sigma = 1.1, 14,063 steps, delta = 1e-5 -> eps 2.597.
    eps = float(jaxrdp.dpsgd_epsilon(256 / 60000, 1.1, 14063, DELTA).epsilon)
    sigma = float(jaxrdp.calibrate_noise(eps, DELTA, 256 / 60000, 14063).sigma)
    assert sigma == pytest.approx(1.1, rel=1e-6)


def test_noise_degenerate_cells():
    res = jaxrdp.calibrate_noise([1.0, 1.0, 1e-4], DELTA, [0.0, 0.5, 0.5], [100, 0, 100])
    np.testing.assert_array_equal(np.asarray(res.sigma)[:2], [0.0, 0.0])
    assert np.asarray(res.feasible).tolist() == [True, True, False]
    assert np.isnan(np.asarray(res.sigma)[2])


def test_noise_broadcasts_grid():
    q = np.geomspace(1e-3, 1e-1, 4)[:, None]
    eps = np.array([1.0, 2.0, 4.0])[None, :]
    res = jaxrdp.calibrate_noise(eps, DELTA, q, 1000)
    assert res.sigma.shape == (4, 3) and res.sigma.dtype == jnp.float64
    cell = jaxrdp.calibrate_noise(eps[0, 1], DELTA, q[2, 0], 1000)
    assert float(cell.sigma) == pytest.approx(float(res.sigma[2, 1]), rel=1e-9)


# --------------------------------------------------------------------------------------
# calibrate_noise_for_delta


def test_noise_for_delta_meets_budget_and_is_tight(random_grid):
    q, steps, delta, eps, _ = random_grid
    res = jaxrdp.calibrate_noise_for_delta(delta, eps, q, steps)
    ok = np.asarray(res.feasible)
    sigma = np.asarray(res.sigma)
    assert ok.sum() >= N_CELLS // 2
    assert np.all(_delta(q[ok], sigma[ok], steps[ok], eps[ok]) <= delta[ok])
    assert np.all(_delta(q[ok], sigma[ok] * (1 - 1e-6), steps[ok], eps[ok]) > delta[ok])
    assert np.all(np.isnan(sigma[~ok]))


# --------------------------------------------------------------------------------------
# calibrate_steps


def test_steps_largest_integer(random_grid):
    q, _, delta, eps, sigma = random_grid
    res = jaxrdp.calibrate_steps(eps, delta, q, sigma)
    ok = np.asarray(res.feasible)
    steps = np.asarray(res.steps)
    assert 5 <= ok.sum() <= N_CELLS - 5  # both kinds occur in this draw
    assert np.all(steps[ok] == np.round(steps[ok])) and np.all(steps[ok] >= 1)
    assert np.all(_eps(q[ok], sigma[ok], steps[ok], delta[ok]) <= eps[ok])
    assert np.all(_eps(q[ok], sigma[ok], steps[ok] + 1, delta[ok]) > eps[ok])
    # Infeasible: not even one step fits.
    assert np.all(_eps(q[~ok], sigma[~ok], 1.0, delta[~ok]) > eps[~ok] * (1 - 1e-12))
    assert np.all(np.isnan(steps[~ok]))


def test_steps_closed_form_per_order():
    # epsilon(T) = min_a T r_a + c_a is piecewise linear in T, so the largest T is
    # floor(max_a (eps - c_a) / r_a), with the per-step RDP r_a from sgm_rdp.
    orders = jaxrdp.DEFAULT_ORDERS
    q, sigma = 0.01, 1.2
    r = np.asarray(jaxrdp.sgm_rdp(q, sigma, orders))
    c = _conversion_offsets(DELTA, orders)
    eps = np.array([0.3, 1.0, 3.0, 8.0])
    expected = np.floor(np.max((eps[:, None] - c) / r, axis=1))
    got = np.asarray(jaxrdp.calibrate_steps(eps, DELTA, q, sigma).steps)
    assert expected[0] < 1 and np.isnan(got[0])  # not even one step fits
    # The solver keeps a 1e-12 relative margin, which can cost at most one step.
    assert np.all((expected[1:] - 1 <= got[1:]) & (got[1:] <= expected[1:]))


def test_steps_degenerate():
    res = jaxrdp.calibrate_steps([1.0, 1.0], DELTA, [0.0, 0.1], [1.0, np.inf])
    assert np.all(np.isinf(np.asarray(res.steps)))
    assert np.all(np.asarray(res.feasible))


def test_steps_for_delta(random_grid):
    q, _, delta, eps, sigma = random_grid
    res = jaxrdp.calibrate_steps_for_delta(delta, eps, q, sigma)
    ok = np.asarray(res.feasible) & np.isfinite(np.asarray(res.steps))
    steps = np.asarray(res.steps)
    assert ok.sum() >= 5
    assert np.all(_delta(q[ok], sigma[ok], steps[ok], eps[ok]) <= delta[ok])
    assert np.all(_delta(q[ok], sigma[ok], steps[ok] + 1, eps[ok]) > delta[ok])


# --------------------------------------------------------------------------------------
# calibrate_sampling_rate


def test_sampling_rate_largest(random_grid):
    _, steps, delta, eps, sigma = random_grid
    res = jaxrdp.calibrate_sampling_rate(eps, delta, sigma, steps)
    ok = np.asarray(res.feasible)
    q = np.asarray(res.q)
    assert ok.sum() >= N_CELLS // 2
    assert np.all((q[ok] > 0) & (q[ok] <= 1))
    assert np.all(_eps(q[ok], sigma[ok], steps[ok], delta[ok]) <= eps[ok])
    inner = ok & (q < 1)
    assert inner.sum() >= 5
    assert np.all(_eps(q[inner] * (1 + 1e-6), sigma[inner], steps[inner], delta[inner]) > eps[inner])
    full = ok & (q == 1)  # q = 1 fits: nothing larger to find
    assert np.all(_eps(1.0, sigma[full], steps[full], delta[full]) <= eps[full])
    assert np.all(np.isnan(q[~ok]))


def test_sampling_rate_edge_cases():
    res = jaxrdp.calibrate_sampling_rate([1.0, 1.0, 1e-4], DELTA, [0.0, 1.0, 1.0], [10, 0, 10])
    assert np.asarray(res.feasible).tolist() == [False, True, False]
    assert float(res.q[1]) == 1.0


def test_sampling_rate_for_delta(random_grid):
    _, steps, delta, eps, sigma = random_grid
    res = jaxrdp.calibrate_sampling_rate_for_delta(delta, eps, sigma, steps)
    ok = np.asarray(res.feasible) & (np.asarray(res.q) < 1)
    q = np.asarray(res.q)
    assert ok.sum() >= 5
    assert np.all(_delta(q[ok], sigma[ok], steps[ok], eps[ok]) <= delta[ok])
    assert np.all(_delta(q[ok] * (1 + 1e-6), sigma[ok], steps[ok], eps[ok]) > delta[ok])


# --------------------------------------------------------------------------------------
# Transformations, recompilation, validation.

CALLS = [
    (jaxrdp.calibrate_noise, "sigma", (0.01, 1000.0)),
    (jaxrdp.calibrate_noise_for_delta, "sigma", (0.01, 1000.0)),
    (jaxrdp.calibrate_steps, "steps", (0.01, 1.0)),
    (jaxrdp.calibrate_steps_for_delta, "steps", (0.01, 1.0)),
    (jaxrdp.calibrate_sampling_rate, "q", (1.0, 1000.0)),
    (jaxrdp.calibrate_sampling_rate_for_delta, "q", (1.0, 1000.0)),
]


@pytest.mark.parametrize("fn,field,args", CALLS, ids=lambda x: getattr(x, "__name__", ""))
def test_plain_jit_vmap_agree(fn, field, args):
    budget, given = (1e-5, 2.0) if "for_delta" in fn.__name__ else (2.0, 1e-5)
    targets = jnp.asarray([budget, budget * 2]) if "for_delta" in fn.__name__ else jnp.asarray([1.0, 2.0])
    plain = getattr(fn(targets, given, *args), field)
    jitted = getattr(jax.jit(fn)(targets, given, *args), field)
    vmapped = getattr(jax.vmap(lambda t: fn(t, given, *args))(targets), field)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(plain), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(vmapped), np.asarray(plain), rtol=1e-12)


def test_same_shape_does_not_recompile():
    jaxrdp.calibrate_noise(np.array([1.0, 2.0, 3.0]), DELTA, 0.01, 1000)
    before = _calibration._noise_jit._cache_size()
    jaxrdp.calibrate_noise(np.array([1.5, 2.5, 3.5]), DELTA, 0.02, 500)
    assert _calibration._noise_jit._cache_size() == before


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(target_epsilon=1.0, delta=1e-5, q=2.0, steps=10), "q"),
        (dict(target_epsilon=1.0, delta=1.0, q=0.1, steps=10), "delta"),
        (dict(target_epsilon=-1.0, delta=1e-5, q=0.1, steps=10), "target_epsilon"),
        (dict(target_epsilon=1.0, delta=1e-5, q=0.1, steps=-3), "steps"),
        (dict(target_epsilon=float("nan"), delta=1e-5, q=0.1, steps=10), "target_epsilon"),
    ],
)
def test_concrete_invalid_raises(kwargs, name):
    with pytest.raises(ValueError, match=name):
        jaxrdp.calibrate_noise(**kwargs)


def test_invalid_sigma_and_orders_raise():
    with pytest.raises(ValueError, match="sigma"):
        jaxrdp.calibrate_steps(1.0, 1e-5, 0.1, -1.0)
    with pytest.raises(ValueError, match="orders"):
        jaxrdp.calibrate_noise(1.0, 1e-5, 0.1, 10, orders=[0.5, 2.0])


def test_traced_invalid_gives_nan():
    res = jax.jit(jaxrdp.calibrate_noise)(1.0, 1e-5, 2.0, 10.0)
    assert np.isnan(float(res.sigma)) and not bool(res.feasible)
