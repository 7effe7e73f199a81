"""Regression guard for performance: counts, never timings.

These tests fail when the work per configuration (integrand evaluations,
series terms, orders evaluated by quadrature) or the number of compiled
programs grows.
If a change is *meant* to alter one of these counts, update the expected
constant here together with the change and say why in the commit message.

Work is measured by tracing only (``jax.eval_shape``): the kernels' inner
functions are wrapped with counters that record the shapes they are traced
with, so nothing is compiled or run for part (a).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrdp
from jaxrdp._core import precision as _precision
from jaxrdp._core import validation as _validation
from jaxrdp.mechanisms import _sgm, _sgm_quadrature, _sgm_series
from jaxrdp.rdp import _dpsgd, _order_search

# Expected counts (see the module docstrings of the kernels).
QUAD_EVALS_PER_ORDER = 768  # 2 windows x (16 + 1) panels x 16 nodes + 2 x 7 kink panels x 16 nodes
QUAD_EVALS_LIGHT = 272  # the light layout: 1 window x (12 + 1) panels x 16 + 2 x 2 kink panels x 16
FULL_SERIES_TERMS = 64  # integer orders n <= 65: k = 2..65
WINDOWED_SERIES_TERMS = 2 * 64  # integer orders n > 65: two windows of 64 terms
# The shared-work grid form for orders 2..64 (one configuration against 63 orders):
# blocks of orders, each summing its own k = 2..(largest order) terms.
GRID_SERIES_TERMS_2_TO_64 = 2361
# dpsgd_epsilon's order search on the standard benchmark grid (20 x 20, T = 1e4,
# delta = 1e-5, dp_accounting's orders): quadratures per configuration.
SEARCH_EVALS_MAX = 6
SEARCH_EVALS_TOTAL = 760  # 1.90 per configuration on average (977 before the cubic estimate)
# Points of dp_accounting's orders the search loop re-bounds every round: its 90
# fractional orders and the 4 above 64, plus the two nearest integers known from
# the start on each side of each (0..12, 63 and 64); all 159 points otherwise.
SEARCH_LOOP_POINTS = 90 + 4 + 15
SEARCH_ALL_POINTS = 2 + 63 + 94


def _spy(monkeypatch, module, name, record):
  """Replace module.name by a wrapper that appends (args shapes) to ``record``."""
  orig = getattr(module, name)

  def wrapper(*args, **kwargs):
    record.append(tuple(jnp.shape(a) for a in args))
    return orig(*args, **kwargs)

  monkeypatch.setattr(module, name, wrapper)


# --- (a) work per configuration ---------------------------------------------


def test_quadrature_node_count_from_constants():
  m = _sgm_quadrature
  windows = 2 * (m._PANELS + 1) * m._NODES  # each window: _PANELS panels, one split at the gap
  kink = 2 * m._KINK * m._NODES
  assert windows + kink == QUAD_EVALS_PER_ORDER == m.FULL_NODES
  assert (
    (m._LIGHT_PANELS + 1) * m._NODES + 2 * m._LIGHT_KINK * m._NODES
    == QUAD_EVALS_LIGHT
    == m.LIGHT_NODES
  )
  assert m._GL_X.size == m._NODES


def _integrand_sizes(calls):
  # z is the first argument; q, sigma, alpha are scalars inside the vmapped kernel.
  return sorted(int(np.prod(shape[0])) for shape in calls)


def _traced_integrands(monkeypatch, *args):
  """Sizes of the z arrays of the quadrature's integrand calls, when traced with
  ``args``: (light layout's shifted sums, log-integrands). Both branches of the
  run-time layout choice are traced."""
  shifted, logs = [], []
  _spy(monkeypatch, _sgm_quadrature, "_shifted_integrand", shifted)
  _spy(monkeypatch, _sgm_quadrature, "_log_integrand", logs)
  # A fresh lambda: eval_shape caches traces per function and shapes.
  jax.eval_shape(lambda *a: _sgm_quadrature.log_a_minus_1_quadrature(*a), *args)
  return _integrand_sizes(shifted), _integrand_sizes(logs)


# The light layout's nodes (shifted sum), and the log-integrand at its panel
# midpoints (the shift) and at the full layout's nodes (logsumexp).
LIGHT_PANELS = QUAD_EVALS_LIGHT // 16
EXPECTED_INTEGRANDS = ([QUAD_EVALS_LIGHT], [LIGHT_PANELS, QUAD_EVALS_PER_ORDER])


@pytest.mark.parametrize("alpha", [1.5, 7.3, 250.5])
def test_quadrature_node_count_traced(monkeypatch, alpha):
  """The sizes of the z arrays the integrand is actually traced with."""
  with _precision.x64_context():
    args = [jnp.float64(v) for v in (0.01, 1.1, alpha)]
    assert _traced_integrands(monkeypatch, *args) == EXPECTED_INTEGRANDS


def test_quadrature_node_count_under_vmap(monkeypatch):
  """Batching must not change the per-element node count (vmap traces one element)."""
  with _precision.x64_context():
    q = jnp.full((5, 3), 0.01)
    assert _traced_integrands(monkeypatch, q, q + 1.0, q + 3.0) == EXPECTED_INTEGRANDS


def test_quadrature_layout_choice():
  """The light layout is allowed exactly where its conditions hold, element by element."""
  m = _sgm_quadrature
  with _precision.x64_context():
    choose = jax.jit(lambda q, s, a: m._choose_layout(q, s, a)[1])

    def light(q, s, a):
      # One compiled shape for every case (op by op, or one program per shape, this
      # test took ~25 s): each batch repeated to 75 elements.
      shape = np.broadcast_shapes(np.shape(q), np.shape(s), np.shape(a))
      size = int(np.prod(shape))
      q, s, a = (np.resize(np.broadcast_to(v, shape), 75) for v in (q, s, a))
      return np.asarray(choose(*(jnp.asarray(v, jnp.float64) for v in (q, s, a))))[:size]

    # The standard benchmark domain: q in [1e-3, 0.1], sigma in [0.6, 3], orders to 11.
    q, s, a = np.meshgrid(np.geomspace(1e-3, 0.1, 5), np.linspace(0.6, 3.0, 5), [1.1, 5.5, 11.0])
    assert light(q, s, a).all()
    assert not light(0.01, 0.2, 5.5).any()  # sigma below _LIGHT_SIGMA
    assert not light(0.01, 0.6, 3000.5).any()  # a window too long for 12 panels of 5 sigma
    assert light([0.01, 0.01], [1.0, 0.2], [5.5, 5.5]).tolist() == [True, False]


# (batch size n, elements that need the full layout, chunk size, chunks run): chunks
# of 16 elements (n / 8, at least 16, at most n), as many as the heavy elements fill.
@pytest.mark.parametrize(
  "n, heavy, chunk, runs",
  [(100, 15, 16, 1), (100, 0, 16, 0), (40, 40, 16, 3), (7, 3, 7, 1), (1, 1, 1, 1)],
)
def test_full_layout_chunks(monkeypatch, n, heavy, chunk, runs):
  """The full layout runs in chunks over only the elements that need it: as many
  chunks as they fill, none if there are none."""
  m = _sgm_quadrature
  assert m._chunk_size(n) == chunk
  ran = []
  full = m._log_a_minus_1_full

  def counted(*args):
    jax.debug.callback(lambda: ran.append(1))
    return full(*args)

  monkeypatch.setattr(m, "_log_a_minus_1_full", counted)
  with _precision.x64_context():
    sigma = np.full(n, 1.0)
    sigma[np.linspace(0, n - 1, heavy).astype(int)] = 0.2  # below _LIGHT_SIGMA
    jax.block_until_ready(
      jax.jit(lambda *a: m.log_a_minus_1_quadrature(*a))(
        jnp.full(n, 0.01), jnp.asarray(sigma), jnp.full(n, 5.5)
      )
    )
    jax.effects_barrier()
  # The callback takes no batched argument: it runs once per chunk that ran.
  assert len(ran) == runs


def test_series_term_counts_from_constants():
  assert _sgm_series._FULL == FULL_SERIES_TERMS
  assert _sgm_series.FULL_MAX_ORDER == FULL_SERIES_TERMS + 1
  assert 2 * _sgm_series._WINDOW == WINDOWED_SERIES_TERMS


def test_series_term_counts_traced(monkeypatch):
  calls = []
  _spy(monkeypatch, _sgm_series, "_log_terms", calls)
  with _precision.x64_context():
    q = jnp.full((3,), 0.01)
    s = jnp.full((3,), 1.0)
    # Full series: 3 (configuration, integer order) pairs, one row of terms each.
    jax.eval_shape(
      lambda q, s: _sgm_series.log_a_minus_1_integer_full(q, s, np.array([2, 30, 65])), q, s
    )
    full = calls[:]
    calls.clear()
    jax.eval_shape(
      lambda *a: _sgm_series.log_a_minus_1_integer_windowed(*a), q, s, jnp.full((3,), 300.0)
    )
    windowed = calls[:]
  # Full: one call, terms shaped [orders, _FULL] -> 64 terms per (configuration, order).
  assert len(full) == 1
  shape = np.broadcast_shapes(*full[0])
  assert shape == (3, FULL_SERIES_TERMS)
  # Windowed: traced per element (vmap), two windows.
  assert sum(int(np.prod(np.broadcast_shapes(*c))) for c in windowed) == WINDOWED_SERIES_TERMS


def test_grid_series_term_count(monkeypatch):
  """Terms summed per configuration by log_a_minus_1_integer_grid for orders 2..64."""
  calls = []
  _spy(monkeypatch, _sgm_series, "_log_sum_exp_shifted", calls)
  with _precision.x64_context():
    q = jnp.full((3,), 0.01)
    jax.eval_shape(
      lambda q, s: _sgm_series.log_a_minus_1_integer_grid(q, s, np.arange(2, 65)), q, q * 100
    )
  # Each block's terms array is [configurations, orders in the block, terms].
  assert all(shape[0][0] == 3 for shape in calls)
  assert sum(int(np.prod(shape[0][1:])) for shape in calls) == GRID_SERIES_TERMS_2_TO_64


def test_dpsgd_epsilon_work_per_round(monkeypatch):
  """dpsgd_epsilon on dp_accounting's 156 orders: one quadrature per configuration per round."""
  quad = []
  _spy(monkeypatch, _sgm, "log_a_minus_1_quadrature", quad)
  grid_series = []
  _spy(monkeypatch, _sgm, "log_a_minus_1_integer_grid", grid_series)
  full = []
  _spy(monkeypatch, _sgm, "log_a_minus_1_integer_full", full)
  windowed = []
  _spy(monkeypatch, _sgm, "log_a_minus_1_integer_windowed", windowed)
  bounds = []
  _spy(monkeypatch, _order_search, "_bounds", bounds)
  orders = _dpsgd.DP_ACCOUNTING_ORDERS
  batch = 7
  with _precision.x64_context():
    x = jnp.full((batch,), 0.5)
    jax.eval_shape(
      lambda q, s, t, d: _dpsgd._dpsgd_epsilon_f64(
        q, s, t, d, orders, _validation.StaticArray(orders), "improved", "search"
      ),
      x * 0.02,
      x * 2.0,
      x * 2e4,
      x * 2e-5,
    )
  # Quadrature: traced once, in the loop body, on one order per configuration.
  assert len(quad) == 1 and quad[0][0] == (batch,)
  assert _order_search._rows_per_round(400) == 100
  # Exact series on the coarse integer set, every integer 2..64 (2.0..10.0 come
  # from the 1 + x/10 part), with the per-configuration part shared by all orders.
  coarse, _ = _order_search._point_sets(orders)
  np.testing.assert_array_equal(coarse, np.arange(2.0, 65.0))
  assert len(grid_series) == 1 and grid_series[0][0] == (batch,)
  assert full == []
  # Orders beyond 65 are bounded by convexity, never summed in this path; the
  # windowed series appears once, inside the quadrature, for the small-sigma bound
  # (both neighbouring integers of each configuration's order in one call).
  assert len(windowed) == 1 and windowed[0][0] == (2 * batch,)
  # Bounds: before the loop and in its body on the loop's points; once on all
  # points for the table (which dpsgd_epsilon does not use).
  points = [shapes[1] for shapes in bounds]  # _bounds(xs, fv, known, sigma): fv's shape
  assert points == [(batch, SEARCH_LOOP_POINTS)] * 2 + [(batch, SEARCH_ALL_POINTS)]


def test_traced_dpsgd_epsilon_and_its_derivative_evaluate_no_order_grid(monkeypatch):
  """A traced call (user jit or grad) holds the search only: no second, exhaustive
  evaluation of every order (it doubled compile times until 2026-11-22)."""
  quad, grid_series, full, windowed = [], [], [], []
  _spy(monkeypatch, _sgm, "log_a_minus_1_quadrature", quad)
  _spy(monkeypatch, _sgm, "log_a_minus_1_integer_grid", grid_series)
  _spy(monkeypatch, _sgm, "log_a_minus_1_integer_full", full)
  _spy(monkeypatch, _sgm, "log_a_minus_1_integer_windowed", windowed)
  orders = _dpsgd.DP_ACCOUNTING_ORDERS
  eps = lambda q, s: jnp.sum(jaxrdp.dpsgd_epsilon(q, s, 2e4, 2e-5, orders=orders).epsilon)
  # Shapes no other call traces, so nothing comes from a cache.
  x, y = jnp.full((13,), 0.5), jnp.full((17,), 0.5)
  with _precision.x64_context():
    jax.eval_shape(eps, x * 0.02, x * 2.0)
    assert len(quad) == 1 and len(grid_series) == 1  # the loop body; the coarse integers
    assert len(windowed) == 1  # the quadrature's small-sigma bound
    quad.clear(), grid_series.clear(), windowed.clear()
    jax.eval_shape(jax.grad(eps, argnums=(0, 1)), y * 0.02, y * 2.0)
  # The value, plus one quadrature at the selected order for the derivative.
  assert len(quad) == 2 and len(grid_series) == 1
  assert full == [] and len(windowed) == len(quad)


def test_dpsgd_epsilon_search_evaluations_on_the_standard_grid():
  """Orders evaluated by quadrature per configuration: a count, not a timing."""
  q, s = np.meshgrid(np.geomspace(1e-3, 1e-1, 20), np.linspace(0.6, 3.0, 20), indexing="ij")
  orders = _dpsgd.DP_ACCOUNTING_ORDERS
  with _precision.x64_context():
    res = jax.jit(
      lambda q, s: _order_search.min_epsilon_over_orders(
        q, s, jnp.full(q.shape, 1e4), jnp.full(q.shape, 1e-5), orders, "improved"
      )
    )(q, s)
  evals = np.asarray(res.evaluations)
  assert np.all(np.asarray(res.exact))
  assert evals.max() <= SEARCH_EVALS_MAX
  assert evals.sum() <= SEARCH_EVALS_TOTAL


# --- (b) number of compiled programs ------------------------------------------


def _compile_events():
  events = []

  def listener(event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
      events.append(event)

  jax.monitoring.register_event_duration_secs_listener(listener)
  return events, listener


def _unregister(listener):
  jax.monitoring.unregister_event_duration_listener(listener)


def test_dpsgd_epsilon_no_recompilation_on_new_values():
  fn = _dpsgd._dpsgd_epsilon_jit
  rng = np.random.default_rng(0)

  def call():
    q = rng.uniform(1e-3, 0.1, (3, 4))
    s = rng.uniform(0.6, 3.0, (3, 4))
    return jaxrdp.dpsgd_epsilon(
      q, s, float(rng.integers(1, 10_000)), float(rng.uniform(1e-7, 1e-4))
    )

  jax.block_until_ready(call())  # warm-up (may compile)
  size = fn._cache_size()
  events, listener = _compile_events()
  try:
    for _ in range(3):
      jax.block_until_ready(call())
  finally:
    _unregister(listener)
  assert fn._cache_size() == size
  assert events == [], f"{len(events)} new XLA compilations for same-shape inputs"


def test_sgm_rdp_no_recompilation_on_new_values():
  fn = _sgm._rdp_jit
  rng = np.random.default_rng(1)
  alpha = np.array([1.5, 2.0, 8.0, 100.0, 2.5])

  def call():
    return jaxrdp.mechanisms.sgm_rdp(
      rng.uniform(1e-3, 0.1, (6, 1)), rng.uniform(0.6, 3.0, (6, 1)), alpha
    )

  jax.block_until_ready(call())
  size = fn._cache_size()
  events, listener = _compile_events()
  try:
    for _ in range(3):
      jax.block_until_ready(call())
  finally:
    _unregister(listener)
  assert fn._cache_size() == size
  assert events == [], f"{len(events)} new XLA compilations for same-shape inputs"


@pytest.mark.parametrize("stored", [False, True])
def test_one_program_per_public_call(stored, tmp_path, monkeypatch):
  """A fresh input shape costs exactly one new compiled program (no op-by-op dispatch).

  The shape (2, 5, 9) is one no other test of this file uses. With stored
  programs (a persistent cache directory), the one program is the stored one,
  run instead of the jit.
  """
  from jaxrdp._core import stored_programs

  monkeypatch.setattr(stored_programs, "program_dir", lambda: tmp_path if stored else None)
  events, listener = _compile_events()
  try:
    before = _dpsgd._dpsgd_epsilon_jit._cache_size()
    jax.block_until_ready(jaxrdp.dpsgd_epsilon(np.full((2, 5, 9), 0.01), 1.0, 1000.0, 1e-5))
  finally:
    _unregister(listener)
  assert _dpsgd._dpsgd_epsilon_jit._cache_size() == before + (0 if stored else 1)
  assert len(list(tmp_path.iterdir())) == (1 if stored else 0)
  assert len(events) == 1, f"{len(events)} XLA compilations for one dpsgd_epsilon call"
