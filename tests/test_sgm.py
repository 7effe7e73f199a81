"""Properties, edge cases, transformations and errors of sgm_log_a / sgm_rdp."""

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from helpers import variants

import jaxrdp

ORDERS = np.array([1.01, 1.1, 1.5, 2.0, 2.5, 3.0, 7.5, 16.0, 63.0, 100.5, 256.0, 1024.0])


@pytest.mark.parametrize("name", ["plain", "jit", "vmap"])
def test_variants_agree_with_oracle(name):
  fn = variants(jaxrdp.mechanisms.sgm_rdp, 3)[name]
  for q, s, a in [(0.01, 1.0, 2.5), (0.1, 2.0, 8.0), (1e-4, 0.8, 1.5)]:
    ref = float(oracle.rdp_quad(q, s, a, dps=30))
    assert abs(float(fn(q, s, a)) - ref) <= 1e-12 * ref


def test_mixed_integer_and_fractional_orders_broadcast():
  q = np.geomspace(1e-6, 0.5, 5)[:, None, None]
  s = np.array([0.5, 1.0, 10.0])[None, :, None]
  rdp = jaxrdp.mechanisms.sgm_rdp(q, s, ORDERS)
  assert rdp.shape == (5, 3, ORDERS.size) and rdp.dtype == jnp.float64
  # Same values whether the orders are concrete (series for integers) or traced.
  traced = jax.jit(jaxrdp.mechanisms.sgm_rdp)(q, s, ORDERS)
  np.testing.assert_allclose(rdp, traced, rtol=1e-12)


def test_monotone_in_alpha_q_and_sigma():
  a = np.linspace(1.05, 40, 120)
  r = np.asarray(jaxrdp.mechanisms.sgm_rdp(0.05, 1.3, a))
  assert np.all(np.diff(r) >= -1e-15 * r[1:])
  qs = np.geomspace(1e-7, 1.0, 60)
  r = np.asarray(jaxrdp.mechanisms.sgm_rdp(qs, 1.3, 4.5))
  assert np.all(np.diff(r) > 0)
  ss = np.geomspace(0.2, 300, 60)
  r = np.asarray(jaxrdp.mechanisms.sgm_rdp(0.05, ss, 4.5))
  assert np.all(np.diff(r) < 0)


def test_limits():
  a = np.array([1.5, 2.0, 9.75, 300.0])
  np.testing.assert_allclose(jaxrdp.mechanisms.sgm_rdp(1.0, 1.7, a), a / (2 * 1.7**2), rtol=1e-14)
  assert np.all(np.asarray(jaxrdp.mechanisms.sgm_rdp(0.0, 1.0, a)) == 0)
  assert np.all(np.isinf(jaxrdp.mechanisms.sgm_rdp(0.3, 0.0, a)))
  assert float(jaxrdp.mechanisms.sgm_rdp(0.3, 1.0, np.inf)) == np.inf
  assert float(jaxrdp.mechanisms.sgm_rdp(0.0, 1.0, np.inf)) == 0.0
  assert float(jaxrdp.mechanisms.sgm_rdp(0.3, np.inf, 2.5)) == 0.0
  # Small-q asymptotics: RDP ~ alpha q^2 (e^{1/sigma^2} - 1) / 2 (integer alpha = 2 exactly:
  # log A_2 = log1p(q^2 (e^{1/sigma^2} - 1))).
  q, s = 1e-7, 3.0
  exact = np.log1p(q * q * np.expm1(1 / s**2))
  assert abs(float(jaxrdp.mechanisms.sgm_log_a(q, s, 2.0)) - exact) <= 1e-14 * exact


def test_golden_values_from_reference_md():
  # REFERENCE.md: q=0.01, sigma=2.5, 50 steps; fractional entries come from an
  # absolute-value series (an upper bound), so ours must be slightly lower.
  orders = np.array([1.5, 2.5, 5, 50, 100, np.inf])
  ref = np.array(
    [6.70579741e-04, 1.08548710e-03, 2.18075656e-03, 2.38460375e-02, 167.416308, np.inf]
  )
  got = 50 * np.asarray(jaxrdp.mechanisms.sgm_rdp(0.01, 2.5, orders))
  np.testing.assert_allclose(got[2:5], ref[2:5], rtol=1e-8)
  assert np.isinf(got[5])
  assert np.all(got[:2] < ref[:2]) and np.all(got[:2] > 0.9 * ref[:2])


def test_gradients_are_finite_and_correct():
  g = jax.grad(lambda q, s: jaxrdp.mechanisms.sgm_rdp(q, s, 3.5), argnums=(0, 1))
  for q, s in [(0.1, 1.0), (1e-6, 0.3), (0.9, 20.0)]:
    dq, ds = g(q, s)
    h = 1e-6
    fd_q = (
      jaxrdp.mechanisms.sgm_rdp(q * (1 + h), s, 3.5)
      - jaxrdp.mechanisms.sgm_rdp(q * (1 - h), s, 3.5)
    ) / (2 * q * h)
    fd_s = (
      jaxrdp.mechanisms.sgm_rdp(q, s * (1 + h), 3.5)
      - jaxrdp.mechanisms.sgm_rdp(q, s * (1 - h), 3.5)
    ) / (2 * s * h)
    np.testing.assert_allclose([dq, ds], [fd_q, fd_s], rtol=1e-5)
  # Edges: finite (q = 0: the true derivative, 0).
  for q, s in [(0.0, 1.0), (1.0, 1.0), (0.5, 0.0), (0.5, np.inf)]:
    dq, ds = g(q, s)
    assert np.isfinite(dq) and np.isfinite(ds)
  assert float(g(0.0, 1.0)[0]) == 0.0


def test_vmap_and_grad_compose():
  qs = jnp.linspace(0.01, 0.2, 4)
  grads = jax.vmap(jax.grad(lambda q: jaxrdp.mechanisms.sgm_rdp(q, 1.0, 2.5)))(qs)
  assert grads.shape == (4,) and np.all(np.asarray(grads) > 0)


def test_traced_invalid_values_give_nan():
  f = jax.jit(jaxrdp.mechanisms.sgm_rdp)
  out = np.asarray(
    f(
      jnp.array([-0.1, 1.5, 0.1, 0.1, jnp.nan]),
      jnp.array([1.0, 1.0, -1.0, 1.0, 1.0]),
      jnp.array([2.0, 2.0, 2.0, 0.5, 2.0]),
    )
  )
  assert np.all(np.isnan(out))


@pytest.mark.parametrize(
  "args,match",
  [
    ((-0.1, 1.0, 2.0), r"q must be in \[0.0, 1.0\]"),
    ((1.1, 1.0, 2.0), r"q must be in"),
    ((0.1, -1.0, 2.0), r"sigma must be in \[0.0, inf\]"),
    ((0.1, 1.0, 1.0), r"alpha must be in \(1.0, inf\]"),
    ((0.1, 1.0, 0.5), r"alpha must be in"),
    ((np.nan, 1.0, 2.0), r"q must not be NaN"),
    ((0.1, np.nan, 2.0), r"sigma must not be NaN"),
    ((0.1, 1.0, np.nan), r"alpha must not be NaN"),
  ],
)
def test_bad_input_raises(args, match):
  for fn in (
    jaxrdp.mechanisms.sgm_rdp,
    jaxrdp.mechanisms.sgm_log_a,
    jaxrdp.mechanisms.sgm_log_a_minus_1,
  ):
    with pytest.raises(ValueError, match=match):
      fn(*args)


def test_no_recompilation_for_same_shapes():
  f = jax.jit(lambda q, s: jaxrdp.mechanisms.sgm_rdp(q, s, ORDERS))
  f(jnp.full((7, 1), 0.01), jnp.full((7, 1), 1.0)).block_until_ready()
  before = f._cache_size()
  f(jnp.full((7, 1), 0.02), jnp.full((7, 1), 2.0)).block_until_ready()
  assert f._cache_size() == before == 1
