"""dpsgd_epsilon: golden values, dp_accounting cross-check, the order search.

The exhaustive oracles of the order search (every order evaluated, a compilation
per grid and shape) are stored in tests/data/dpsgd_reference.json by
tests/make_dpsgd_reference.py, which also defines the configurations they belong to.
"""

import json

import jax
import jax.numpy as jnp
import make_dpsgd_reference as ref
import numpy as np
import pytest
from helpers import central_difference, variants

import jaxrdp
from jaxrdp.rdp import _order_search

dp_accounting = pytest.importorskip("dp_accounting")


def _dpa_epsilon(q, sigma, steps, delta):
  acc = dp_accounting.rdp.RdpAccountant()  # its 156 default orders
  acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
  return acc.get_epsilon(delta)


@pytest.mark.parametrize("name", ["plain", "jit", "vmap"])
def test_golden_values(name):
  # REFERENCE.md golden values (improved conversion).
  fn = variants(
    lambda q, s, t, d: jaxrdp.dpsgd_epsilon(q, s, t, d, orders=jaxrdp.DP_ACCOUNTING_ORDERS), 4
  )[name]
  res = fn(150 / 60000, 1.3, 15 * 60000 // 150, 1e-5)
  assert abs(float(res.epsilon) - 0.7242234) < 5e-7 and float(res.order) == 19.0
  res = fn(100 / 100000, 1.0, 30 * 1000, 1e-7)
  assert abs(float(res.epsilon) - 1.4154988) < 5e-7 and float(res.order) == 13.0


def test_mnist_example_both_conversions():
  q = 256 / 60000
  assert round(float(jaxrdp.dpsgd_epsilon(q, 1.1, 14063, 1e-5).epsilon), 3) == 2.597
  classic = jaxrdp.dpsgd_epsilon(
    q, 1.1, 14063, 1e-5, orders=jaxrdp.DP_ACCOUNTING_ORDERS, method="classic"
  )
  assert round(float(classic.epsilon), 2) == 3.01


@pytest.fixture(scope="module")
def reference():
  with open(ref.PATH) as f:
    stored = json.load(f)
  # Stored for these configurations (else: rerun tests/make_dpsgd_reference.py).
  assert stored["config"] == json.loads(json.dumps(ref.config()))
  return stored


# One broadcast grid, q x sigma x steps x delta (1008 cells, integer steps), searched once
# for the exhaustive and dp_accounting comparisons, the monotonicity and the edge cells
# below.
GRID_Q, GRID_SIGMA, GRID_STEPS, GRID_DELTA = (
  np.array(v) for v in (ref.GRID_Q, ref.GRID_SIGMA, ref.GRID_STEPS, ref.GRID_DELTA)
)


def cell(q, sigma, steps, delta):
  """The grid's index of a cell, by value."""
  return tuple(
    list(axis).index(v)
    for axis, v in zip((GRID_Q, GRID_SIGMA, GRID_STEPS, GRID_DELTA), (q, sigma, steps, delta))
  )


@pytest.fixture(scope="module")
def grid_search():
  return jaxrdp.dpsgd_epsilon(
    GRID_Q[:, None, None, None],
    GRID_SIGMA[None, :, None, None],
    GRID_STEPS[None, None, :, None],
    GRID_DELTA[None, None, None, :],
  )


@pytest.fixture(scope="module")
def grid_epsilon(grid_search):
  return np.asarray(grid_search.epsilon)


def test_never_looser_than_dp_accounting(grid_epsilon):
  qs, ss = [1e-3, 0.01, 0.05, 0.1], [0.6, 0.9, 1.5, 3.0]
  for q in qs:
    for s in ss:
      ours = grid_epsilon[cell(q, s, 1000, 1e-5)]
      theirs = _dpa_epsilon(q, s, 1000, 1e-5)
      assert np.isfinite(ours)
      # dp_accounting itself rounds by up to ~3e-12 relative (checked with mpmath).
      assert ours <= theirs * (1 + 1e-10)


def test_order_search_equals_exhaustive_minimum(grid_search, reference):
  # The search evaluates few orders exactly; it must return the exact grid minimum
  # (oracle: every order evaluated, stored) on every live cell of the grid: q from 1e-4
  # to 0.2, sigma from 0.5 to 4, 1 to 10^4 steps, delta from 1e-3 to 1e-7.
  want_eps = np.array(reference["grid"]["epsilon"])
  want_order = np.array(reference["grid"]["order"])
  live = (slice(1, None), slice(1, None), slice(1, None))  # q > 0, sigma > 0, steps > 0
  np.testing.assert_allclose(np.asarray(grid_search.epsilon)[live], want_eps, rtol=1e-12)
  np.testing.assert_array_equal(np.asarray(grid_search.order)[live], want_order)
  # Traced orders take the exhaustive path (the q x sigma plane at 1000 steps, 1e-5).
  q, s = GRID_Q[1:, None], GRID_SIGMA[None, 1:]
  t, d = list(GRID_STEPS[1:]).index(1000), list(GRID_DELTA).index(1e-5)
  traced = jax.jit(lambda o: jaxrdp.dpsgd_epsilon(q, s, 1000, 1e-5, orders=o))(
    jaxrdp.DEFAULT_ORDERS
  )
  np.testing.assert_allclose(traced.epsilon, want_eps[:, :, t, d], rtol=1e-12)
  np.testing.assert_array_equal(traced.order, want_order[:, :, t, d])


def test_edges_and_broadcasting(grid_epsilon):
  # q = 0 spends nothing (even at sigma = 0), 0 steps spend nothing, sigma = 0 with
  # q > 0 and steps > 0 is infinite; everything else is finite, in one batch.
  eps = grid_epsilon
  assert eps.shape == (7, 8, 6, 3)
  assert np.all(eps[0] == 0.0)
  assert np.all(eps[:, :, 0] == 0.0)
  assert np.all(np.isinf(eps[1:, 0, 1:]))
  assert np.all((eps[1:, 1:, 1:] >= 0.0) & np.isfinite(eps[1:, 1:, 1:]))
  assert 0.0 < eps[cell(0.01, 1.0, 100, 1e-5)] < np.inf


def test_monotone_in_steps_and_delta(grid_epsilon):
  # q = 0.01, sigma = 1: epsilon rises with the steps at every delta, and as delta
  # falls at every number of steps; over the whole grid it never falls.
  i, j = list(GRID_Q).index(0.01), list(GRID_SIGMA).index(1.0)
  eps = grid_epsilon[i, j, 1:]  # steps 1 .. 10000 by delta
  assert np.all(np.diff(eps, axis=0) > 0)
  assert np.all(np.diff(eps, axis=1) > 0)
  live = grid_epsilon[1:, 1:]  # q > 0, sigma > 0
  assert np.all(np.diff(live, axis=2) >= 0) and np.all(np.diff(live, axis=3) >= 0)


def test_delta_round_trip():
  eps = jaxrdp.dpsgd_epsilon(0.01, 1.0, 1000, 1e-6).epsilon
  d = jaxrdp.dpsgd_delta(0.01, 1.0, 1000, eps)
  assert abs(float(d.delta) - 1e-6) <= 1e-6 * 1e-6


@pytest.mark.parametrize(
  "args,match",
  [
    ((0.01, 1.0, -1, 1e-5), r"steps must be in \[0.0, inf\)"),
    ((0.01, 1.0, 10, 1.0), r"delta must be in \(0.0, 1.0\)"),
    ((2.0, 1.0, 10, 1e-5), r"q must be in \[0.0, 1.0\]"),
    ((0.01, -1.0, 10, 1e-5), r"sigma must be in"),
  ],
)
def test_bad_arguments(args, match):
  with pytest.raises(ValueError, match=match):
    jaxrdp.dpsgd_epsilon(*args)


def test_no_recompilation_for_same_shapes():
  # Integer orders: the cache is the subject, not the quadrature (cheap to compile).
  orders = np.array([2.0, 3.0, 4.0, 8.0, 16.0, 32.0])
  f = jax.jit(lambda q, s: jaxrdp.dpsgd_epsilon(q, s, 1000, 1e-5, orders).epsilon)
  f(jnp.full(3, 0.01), jnp.full(3, 1.0)).block_until_ready()
  f(jnp.full(3, 0.02), jnp.full(3, 2.0)).block_until_ready()
  assert f._cache_size() == 1


def test_batched_search_equals_one_row_at_a_time():
  # The compiled search once returned inf (order 0) for this batch of two rows, which
  # it got right one row at a time: its argmin compared the epsilons with their
  # minimum computed in another fusion, with different rounding.
  orders = np.array([2.0, 3.0, 4.0, 8.0, 16.0, 32.0])
  one = jaxrdp.dpsgd_epsilon(0.05, 1.0, 300, 1e-5, orders)
  two = jaxrdp.dpsgd_epsilon([0.05, 0.05], 1.0, 300, 1e-5, orders)
  acc = dp_accounting.rdp.RdpAccountant(orders=list(orders))
  acc.compose(dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(1.0)), 300)
  ref = acc.get_epsilon(1e-5)  # an upper bound on the same orders
  for eps, order in zip(np.asarray(two.epsilon), np.asarray(two.order)):
    assert np.isfinite(eps) and order == 4.0
    assert eps == pytest.approx(float(one.epsilon), rel=1e-14)
    assert eps <= ref * (1 + 1e-12) and eps >= 0.99 * ref


@pytest.mark.parametrize("name", sorted(ref.DENSE))
def test_dense_order_grid_is_still_the_exact_minimum(name, reference):
  # Closely spaced orders can leave many in contention: the search runs until none
  # is left (203 quadratures for q = 0.001, sigma = 0.98 on the 4000-order grid,
  # where the epsilon curve is flat around its minimum), never stopping early with
  # a looser value. Oracle: every order evaluated (stored).
  orders = ref.dense_orders(name)
  q, s = np.array(ref.DENSE_Q), np.array(ref.DENSE_SIGMA)
  got = jaxrdp.dpsgd_epsilon(q, s, ref.DENSE_STEPS, ref.DENSE_DELTA, orders=orders)
  want = reference["dense"][name]
  np.testing.assert_allclose(got.epsilon, want["epsilon"], rtol=1e-12)
  np.testing.assert_array_equal(got.order, want["order"])
  if orders.size == 4000:
    with jax.enable_x64(True):
      # Jitted: op by op, the search dispatches hundreds of small programs (~20 s).
      # Without the bound for sigmas below the quadrature's domain (small_sigma=False),
      # as dpsgd_epsilon compiles the search for these sigmas (>= 0.1): a smaller program.
      steps, delta = jnp.full(2, float(ref.DENSE_STEPS)), jnp.full(2, ref.DENSE_DELTA)
      search = jax.jit(
        lambda q, s: _order_search.min_epsilon_over_orders(
          q, s, steps, delta, orders, "improved", small_sigma=False
        )
      )
      res = search(jnp.asarray(q), jnp.asarray(s))
    assert bool(jnp.all(res.exact)) and int(jnp.max(res.evaluations)) > 16


def test_search_estimate_is_the_cubic_through_the_nearest_known_points():
  # The search evaluates first the order whose estimate is smallest: the cubic
  # through the two nearest known points on each side, kept within the convexity
  # bounds. For a convex cubic f it must be f itself; with fewer than two known
  # points on the right, the midpoint of the bounds.
  xs = np.array([0.0, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 5.5])
  known = np.array([1, 1, 0, 1, 0, 1, 1, 1, 0], dtype=bool)
  f = 0.1 * xs**3 + 0.5 * xs**2 - 0.6 * xs  # convex for x >= 0, f(0) = f(1) = 0
  with jax.enable_x64(True):
    fv = jnp.asarray(np.where(known, f, 0.0))[None]
    # Jitted: op by op, the bounds dispatch about ninety small programs.
    bounds = jax.jit(lambda fv, known, s: _order_search._bounds(xs, fv, known, s, estimate=True))
    lower, upper, est = (
      np.asarray(v)[0] for v in bounds(fv, jnp.asarray(known)[None], jnp.asarray([0.01]))
    )
  inner = np.array([2, 4])
  np.testing.assert_allclose(est[inner], f[inner], rtol=1e-13)
  assert np.all(lower[~known] <= f[~known]) and np.all(f[~known] <= upper[~known])
  assert np.all(lower[inner] < est[inner]) and np.all(est[inner] < upper[inner])  # not clipped
  assert est[8] == 0.5 * (lower[8] + upper[8])


def test_floors_from_more_noise_prune_without_changing_the_minimum(reference):
  # What a search at more noise learnt bounds log A from below at less noise
  # (log A_alpha falls with sigma). The second search must still give the exact
  # minimum over all orders (oracle: the minimum over every order of log A computed
  # directly, stored), with fewer quadratures; its table must bound log A from below
  # (oracle: log A at every point of the table, stored).
  orders = jaxrdp.DEFAULT_ORDERS
  shape = (4, 4)
  rise = ref.FLOORS["rise"]
  q = np.broadcast_to(np.array(ref.FLOORS["q"])[:, None], shape)
  s = np.broadcast_to(np.array(ref.FLOORS["sigma"])[None, :], shape)
  coarse, others = _order_search._point_sets(orders)
  points = np.sort(np.concatenate([coarse, others]))
  stored = reference["floors"]
  np.testing.assert_array_equal(points, stored["points"])
  with jax.enable_x64(True):
    steps, delta = jnp.full(shape, ref.FLOORS["steps"]), jnp.full(shape, ref.FLOORS["delta"])
    search = jax.jit(
      lambda s, floor: _order_search.min_epsilon_over_orders(
        jnp.asarray(q), s, steps, delta, orders, "improved", None, floor
      )
    )
    above = search(jnp.asarray(s * (1 + rise)), None)
    plain = search(jnp.asarray(s), None)
    floored = search(jnp.asarray(s), above.table)
  exact_above = np.array(stored["log_a_above"])
  for res in (plain, floored):
    np.testing.assert_allclose(res.epsilon, stored["epsilon"], rtol=1e-12)
    np.testing.assert_array_equal(res.order, stored["order"])
    assert bool(jnp.all(res.exact))
  assert int(jnp.sum(floored.evaluations)) < 0.6 * int(jnp.sum(plain.evaluations))
  table = np.asarray(above.table)
  assert table.shape == shape + (_order_search.table_size(orders),) == shape + (points.size + 2,)
  assert np.all(table[..., :2] == 0.0)  # orders 0 and 1: log A = 0
  assert np.all(table[..., 2:] >= 0.0)
  assert np.all(table[..., 2:] <= exact_above * (1 + 1e-12))
  # Where the search evaluated (at least the integer orders), the table is the value itself.
  evaluated = np.isin(points, coarse)
  np.testing.assert_allclose(
    table[..., 2:][..., evaluated], exact_above[..., evaluated], rtol=1e-12
  )


@pytest.mark.parametrize("kind", ["epsilon", "delta"])
def test_derivatives_match_finite_differences(kind):
  # Oracle: central differences of float64 values (function values only). The
  # derivative is taken at the selected order (envelope theorem); each case
  # checks that the selected order does not change within the difference step.
  if kind == "epsilon":
    fn, last, field = jaxrdp.dpsgd_epsilon, ("delta", 1e-5), "epsilon"
  else:
    fn, last, field = jaxrdp.dpsgd_delta, ("epsilon", 2.0), "delta"
  point = dict(q=0.01, sigma=1.1, steps=1000.0, **dict([last]))
  names = tuple(point)

  def at(**kw):
    return fn(**{**point, **kw})

  grads = jax.jit(
    jax.grad(lambda *a: getattr(at(**dict(zip(names, a))), field), argnums=(0, 1, 2, 3))
  )(*point.values())
  for name, g in zip(names, grads):
    x = point[name]
    fd = central_difference(lambda v: float(getattr(at(**{name: v}), field)), x, 1e-6 * x)
    assert float(at(**{name: x * (1 + 1e-6)}).order) == float(at(**{name: x * (1 - 1e-6)}).order)
    assert abs(float(g) - fd) <= 1e-6 * abs(fd), (name, float(g), fd)
