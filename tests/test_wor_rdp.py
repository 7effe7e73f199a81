"""RDP of the Gaussian mechanism on samples drawn without replacement (WBK19 Thm 27).

The reference is an mpmath evaluation of the same theorem: 80 significant
digits, with the working precision raised by alpha + 40 digits so that the
alternating chi-moment sums are exact to that level.
"""

import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from _oracle_helpers import mp_wor_log_a
from helpers import central_difference

import jaxrdp
from jaxrdp.mechanisms import (
  effective_noise_multiplier,
  sampled_without_replacement_gaussian_log_a,
  sampled_without_replacement_gaussian_rdp,
)

rdp = sampled_without_replacement_gaussian_rdp


def _oracle_rdp(gamma, sigma, alpha):
  """Thm 27 at integer orders, Cor. 10 interpolation of log A at fractional ones."""
  lo, hi = math.floor(alpha), math.ceil(alpha)
  with mp.workdps(80):
    if lo == hi:
      return mp_wor_log_a(gamma, sigma, lo) / (mp.mpf(alpha) - 1)
    t = mp.mpf(alpha) - lo
    x = mp_wor_log_a(gamma, sigma, lo) if lo >= 2 else mp.mpf(0)
    return ((1 - t) * x + t * mp_wor_log_a(gamma, sigma, hi)) / (mp.mpf(alpha) - 1)


def _random_points(seed, count, max_order):
  rng = np.random.default_rng(seed)
  pts = []
  for _ in range(count):
    g = float(10 ** rng.uniform(-4, math.log10(0.5)))
    s = float(10 ** rng.uniform(math.log10(0.5), math.log10(50)))
    a = float(rng.integers(1, max_order))
    if rng.random() < 0.4:
      a += float(rng.random())
    pts.append((g, s, max(a, 1.0 + 1e-3) if a == 1.0 else a))
  return pts


def test_matches_mpmath_on_random_points():
  # Points drawn once from a fixed seed, never adjusted.
  pts = _random_points(20261125, 14, 64)
  g, s, a = (np.array(x) for x in zip(*pts))
  got = np.asarray(rdp(g, s, a))
  for (gi, si, ai), v in zip(pts, got):
    ref = float(_oracle_rdp(gi, si, ai))
    assert abs(v - ref) <= 1e-10 * ref, (gi, si, ai, v, ref)


# Higher orders, computed once by _oracle_rdp (up to a minute each with mpmath).
# The third and last are where dp_accounting 0.6's float64 alternating sums
# lose all accuracy (it returns 0.207 and 0.387, 4.6x and 12x too large).
_HIGH_ORDER_REFERENCE = [
  # (gamma, sigma, alpha, rdp by _oracle_rdp, 25 digits)
  (0.0041, 0.55, 256.0, "417.6248898325958407440339"),
  (0.013, 2.7, 131.5, "4.64856443313133915751223"),
  (0.28, 14.1, 147.546, "0.04514823332103740094467526"),
  (0.07, 6.2, 200.0, "0.03348481148002947771491478"),
  (0.0009, 0.9, 97.0, "52.79759440883991317150503"),
  (0.45, 33.0, 250.0, "0.0314416721694809886411548"),
]


def test_matches_stored_mpmath_at_high_orders():
  g, s, a, ref = zip(*_HIGH_ORDER_REFERENCE)
  got = np.asarray(rdp(np.array(g), np.array(s), np.array(a)))
  ref = np.array([float(r) for r in ref])
  np.testing.assert_array_less(np.abs(got - ref), 1e-10 * ref)


def test_agrees_with_dp_accounting():
  from dp_accounting.rdp import rdp_privacy_accountant as ra

  orders = np.array([1.5, 2.0, 3.0, 4.5, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0])
  for gamma, sigma in [(256 / 60000, 0.55), (0.01, 1.0), (0.05, 2.0), (1e-3, 4.0)]:
    ours = np.asarray(rdp(gamma, sigma, orders))
    theirs = ra._compute_rdp_sample_wor_gaussian(gamma, sigma, orders)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)


def test_mnist_settings_match_published_table():
  # SAMPLING.md: n = 60000, B = 256, sigma = 1.1, 14063 steps, delta = 1e-5,
  # integer orders 2..256, improved conversion: 5.24 with sigma as given,
  # 24.1 with the replace-one multiplier sigma / 2.
  orders = np.arange(2.0, 257.0)
  gamma, steps = 256 / 60000, 14063
  eps = {}
  for relation in ("add_remove", "replace_one"):
    s = effective_noise_multiplier(1.1, relation)
    curve = steps * np.asarray(rdp(gamma, s, orders))
    eps[relation] = float(jaxrdp.rdp_to_epsilon(curve, orders, 1e-5).epsilon)
  assert round(eps["add_remove"], 2) == 5.24
  assert round(eps["replace_one"], 1) == 24.1


def test_vectorized_grid_equals_elementwise():
  gammas = np.array([[1e-3], [0.02], [0.3]])
  sigmas = np.array([[0.7], [3.0], [12.0]])
  orders = np.array([1.25, 2.0, 7.0, 33.5, 100.0])
  grid = np.asarray(rdp(gammas, sigmas, orders))
  assert grid.shape == (3, 5)
  # The same 15 elements as a flat batch (one element per configuration and order).
  g, s, a = (np.broadcast_to(x, (3, 5)).ravel() for x in (gammas, sigmas, orders))
  flat = np.asarray(rdp(g, s, a))
  np.testing.assert_allclose(grid.ravel(), flat, rtol=1e-13)
  assert grid[1, 2] == pytest.approx(float(rdp(0.02, 3.0, 7.0)), rel=1e-13)


def test_jit_vmap_grad():
  orders = jnp.array([2.0, 8.0, 32.0])
  f = jax.jit(lambda g, s: rdp(g, s, np.array([2.0, 8.0, 32.0])))
  v = f(0.01, 1.5)
  np.testing.assert_allclose(np.asarray(v), np.asarray(rdp(0.01, 1.5, orders)), rtol=1e-6)
  batched = jax.vmap(lambda g: rdp(g, 1.5, 8.0))(jnp.array([0.01, 0.02]))
  assert batched.shape == (2,)
  with jax.enable_x64(True):
    grad = jax.grad(lambda s: rdp(0.01, s, 8.0))(jnp.float64(1.5))
    fd = central_difference(lambda s: float(rdp(0.01, s, 8.0)), 1.5, 1e-6)
  assert np.isfinite(float(grad)) and float(grad) == pytest.approx(fd, rel=1e-5)
  gq = jax.grad(lambda g: rdp(g, 1.5, 8.0))(0.01)
  assert np.isfinite(float(gq)) and float(gq) > 0
  # A traced order works up to 256.
  with jax.enable_x64(True):
    ta = jax.jit(lambda a: rdp(0.01, 1.5, a))(jnp.float64(8.0))
  assert float(ta) == pytest.approx(float(rdp(0.01, 1.5, 8.0)), rel=1e-13)


def test_edge_cases():
  assert float(rdp(0.0, 1.0, 4.0)) == 0.0
  assert float(rdp(0.1, np.inf, 4.0)) == 0.0
  assert float(rdp(1.0, 2.0, 3.0)) == pytest.approx(3.0 / 8.0)
  assert float(rdp(0.1, 0.0, 4.0)) == np.inf
  assert float(rdp(0.1, 1.0, np.inf)) == np.inf
  assert float(sampled_without_replacement_gaussian_log_a(1.0, 2.0, 3.0)) == pytest.approx(0.75)


def test_monotone_and_sound_above_chi_moment_limit():
  # Above order 256 the chi moments are dropped for j > 256 only: never below
  # the value at the Thm 27 terms we keep, and never above dp_accounting's
  # (which drops them for every j there).
  from dp_accounting.rdp import rdp_privacy_accountant as ra

  orders = np.array([256.0, 300.0, 512.0, 1024.0])
  for gamma, sigma in [(0.01, 8.0), (0.001, 30.0)]:
    ours = np.asarray(rdp(gamma, sigma, orders))
    theirs = ra._compute_rdp_sample_wor_gaussian(gamma, sigma, orders)
    assert np.all(ours[1:] <= theirs[1:] * (1 + 1e-12))
    assert np.all(np.diff(ours * (orders - 1)) > 0)  # log A increases with the order


def test_bad_arguments_raise():
  with pytest.raises(ValueError, match="gamma"):
    rdp(1.5, 1.0, 2.0)
  with pytest.raises(ValueError, match="sigma"):
    rdp(0.1, -1.0, 2.0)
  with pytest.raises(ValueError, match="alpha"):
    rdp(0.1, 1.0, 1.0)
  with pytest.raises(ValueError, match="alpha"):
    rdp(0.1, 1.0, 20000.0)
  with pytest.raises(ValueError, match="relation"):
    effective_noise_multiplier(1.0, "substitute")


def test_traced_invalid_gives_nan():
  with jax.enable_x64(True):
    v = jax.jit(lambda g: rdp(g, 1.0, 4.0))(jnp.float64(1.5))
    w = jax.jit(lambda a: rdp(0.1, 1.0, a))(jnp.float64(300.0))  # beyond the traced limit
  assert np.isnan(float(v)) and np.isnan(float(w))


def test_effective_noise_multiplier():
  assert effective_noise_multiplier(1.1, "add_remove") == 1.1
  assert effective_noise_multiplier(1.1, "replace_one") == pytest.approx(0.55)
  np.testing.assert_allclose(
    effective_noise_multiplier(jnp.array([2.0, 4.0]), "replace_one"), [1.0, 2.0]
  )


def test_tables_built_inside_a_trace_are_concrete(monkeypatch):
  # The constant tables are cached module-wide on first use; a first use under jit
  # once stored a tracer there, and every later call failed (UnexpectedTracerError).
  from jaxrdp.mechanisms import _sampled_without_replacement as wor

  monkeypatch.setattr(wor, "_DEVICE_TABLES", None)
  traced = jax.jit(lambda g: rdp(g, 1.0, 2.0))(0.1)
  assert float(rdp(0.1, 1.0, 2.0)) == float(traced)


def test_batched_evaluation_equals_elementwise(monkeypatch):
  # Large grids run the kernel a batch of elements at a time (bounded memory); a
  # batch of 4 here, so that 3 x 7 elements take five full batches and a remainder.
  from jaxrdp.mechanisms import _sampled_without_replacement as wor

  monkeypatch.setattr(wor, "_ELEMENT_BATCH", 4)
  gammas = np.array([[2e-3], [0.05], [0.4]])
  sigmas = np.array([[0.8], [2.5], [9.0]])
  orders = np.array([1.5, 2.0, 3.0, 6.5, 12.0, 40.0, 130.0])
  grid = np.asarray(rdp(gammas, sigmas, orders))
  assert grid.shape == (3, 7)
  for i in range(3):
    for k in range(7):
      one = float(rdp(float(gammas[i, 0]), float(sigmas[i, 0]), float(orders[k])))
      assert grid[i, k] == pytest.approx(one, rel=1e-13)
  with jax.enable_x64(True):
    g = jax.grad(lambda s: jnp.sum(rdp(jnp.full(5, 0.01), s, orders[:5])))(jnp.float64(1.5))
  assert np.isfinite(float(g)) and float(g) < 0
