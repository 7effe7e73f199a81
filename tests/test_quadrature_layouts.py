"""How a batch is split between the quadrature's two node layouts
(jaxrdp.mechanisms._sgm_quadrature.log_a_minus_1_quadrature).

The light layout's sum is taken in linear space relative to the weighted
log-integrand at the panel midpoints (_log_integral_shifted). It is exact only while
that shift is within ~600 nats of the largest weighted node value; these tests
check the margin against the node values themselves, and that a batch whose
shift is off takes the full layout. Elements that do not allow the light layout
take the full one, gathered in chunks (_full_where): their values and
derivatives are checked element by element.

The batches all have 60 elements, so that the tests share the compiled layouts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import central_difference

from jaxrdp._core import precision as _precision
from jaxrdp.mechanisms import _sgm_quadrature as m


def _random_domain(n, seed):
  """Points spread over the domain of the accuracy guarantee (log-uniform)."""
  rng = np.random.default_rng(seed)
  q = 10.0 ** rng.uniform(-8, -1e-6, n)
  sigma = 10.0 ** rng.uniform(-1, 3, n)
  alpha = 1.0 + 10.0 ** rng.uniform(-3, 4, n)
  return q, sigma, alpha


def _shift_and_node_max(q, sigma, alpha):
  """(midpoint shift, largest weighted log-integrand at a node) in the light layout."""
  g = m._geometry(q, sigma, alpha)
  left, half, log_half = (jnp.concatenate(p) for p in zip(*m._light_parts(g)))
  shift = m._midpoint_shift(left, half, log_half, q, sigma, alpha)
  z = m._panel_nodes(left, half)
  nodes = log_half[:, None] + np.log(m._GL_W) + m._log_integrand(z, q, sigma, alpha)
  return shift, jnp.max(nodes), m._light_enough(sigma, g)


def test_midpoint_shift_is_near_the_largest_node_value():
  """Overflow needs the largest node 700 nats above the shift, digits are lost
  600 below it: the shift stays within 20 nats on 20,000 random points (the
  largest gap measured on 200,000 points was 5.4, 2026-11-23)."""
  with _precision.x64_context():
    args = (jnp.asarray(v) for v in _random_domain(20_000, seed=20261123))
    shift, node_max, light = (np.asarray(v) for v in jax.jit(jax.vmap(_shift_and_node_max))(*args))
  gap = (node_max - shift)[light]
  assert light.sum() > 5_000
  assert np.all(np.isfinite(gap))
  assert np.all(np.abs(gap) < 20.0), (gap.min(), gap.max())


@pytest.mark.parametrize("offset", [-1000.0, 1000.0])  # overflow, then underflow to 0
def test_an_inexact_shift_takes_the_full_layout(monkeypatch, offset):
  """With the shift moved far off, the light layout reports its sums inexact
  and the batch's result is the full layout's, still exact."""
  q, sigma, alpha = np.meshgrid(  # 60 elements, as _mixed_batch()
    np.geomspace(1e-3, 0.1, 5), np.linspace(0.6, 3.0, 4), [1.5, 6.3, 11.0]
  )
  with _precision.x64_context():
    q, sigma, alpha = (jnp.asarray(v.ravel()) for v in (q, sigma, alpha))
    g, light = jax.jit(m._choose_layout)(q, sigma, alpha)
    full = np.asarray(jax.jit(jax.vmap(m._log_a_minus_1_full))(q, sigma, alpha, g))
    before = np.asarray(jax.jit(m.log_a_minus_1_quadrature)(q, sigma, alpha))
    shift = m._midpoint_shift
    monkeypatch.setattr(m, "_midpoint_shift", lambda *args: shift(*args) + offset)
    _, exact = jax.jit(jax.vmap(m._log_a_minus_1_light))(q, sigma, alpha, g)
    after = np.asarray(jax.jit(lambda *a: m.log_a_minus_1_quadrature(*a))(q, sigma, alpha))
  assert np.asarray(light).all()  # the batch takes the light layout
  assert not np.asarray(exact).any()
  np.testing.assert_allclose(before, full, rtol=1e-13)
  np.testing.assert_array_equal(after, full)


def _mixed_batch(n=60, seed=7):  # 20 elements in the full layout: two chunks of 16
  """q, sigma, alpha with every third element below the light layout's sigma."""
  rng = np.random.default_rng(seed)
  q = 10.0 ** rng.uniform(-3, -1, n)
  sigma = rng.uniform(0.6, 3.0, n)
  sigma[::3] = rng.uniform(0.12, 0.25, sigma[::3].size)
  alpha = rng.uniform(1.5, 12.0, n)
  return q, sigma, alpha


def test_mixed_batch_takes_each_layout_per_element():
  q, sigma, alpha = _mixed_batch()
  with _precision.x64_context():
    q, sigma, alpha = (jnp.asarray(v) for v in (q, sigma, alpha))
    g, light = (
      np.asarray(v) if i else v for i, v in enumerate(jax.jit(m._choose_layout)(q, sigma, alpha))
    )
    light_v = np.asarray(jax.jit(jax.vmap(m._log_a_minus_1_light))(q, sigma, alpha, g)[0])
    full_v = np.asarray(jax.jit(jax.vmap(m._log_a_minus_1_full))(q, sigma, alpha, g))
    got = np.asarray(jax.jit(m.log_a_minus_1_quadrature)(q, sigma, alpha))
    # As a [3, 20] batch: the same values (the layouts work on the flattened batch).
    got2 = np.asarray(
      jax.jit(m.log_a_minus_1_quadrature)(*(v.reshape(20, 3).T for v in (q, sigma, alpha)))
    )
  assert light.sum() == 40
  np.testing.assert_allclose(got[light], light_v[light], rtol=1e-14)
  np.testing.assert_allclose(got[~light], full_v[~light], rtol=1e-14)
  np.testing.assert_allclose(got2, got.reshape(20, 3).T, rtol=1e-14)


def test_reverse_mode_derivative_through_the_chunks():
  """jax.grad through the chunked full layout: against forward mode, and against
  a central difference."""
  q, sigma, alpha = _mixed_batch()
  with _precision.x64_context():
    q, sigma, alpha = (jnp.asarray(v) for v in (q, sigma, alpha))
    f = lambda s: m.log_a_minus_1_quadrature(q, s, alpha)
    rev = np.asarray(jax.jit(jax.grad(lambda s: jnp.sum(f(s))))(sigma))
    fwd = np.asarray(jax.jit(lambda s: jax.jvp(f, (s,), (jnp.ones_like(s),))[1])(sigma))
    value = jax.jit(m.log_a_minus_1_quadrature)  # the program of the tests above
    fd = central_difference(
      lambda s: np.asarray(value(q, s, alpha)), sigma, 1e-6 * np.asarray(sigma)
    )
  assert np.all(np.isfinite(rev)) and np.all(rev < 0)  # log A decreases with more noise
  np.testing.assert_allclose(rev, fwd, rtol=1e-12)
  np.testing.assert_allclose(rev, fd, rtol=1e-6)
