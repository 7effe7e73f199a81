"""rdp_to_epsilon / rdp_to_delta against hand computations and invariants."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import variants

import jaxrdp

ORDERS = np.array([1.5, 2.0, 4.0, 8.0, 16.0, 32.0, np.inf])
RDP = np.array([0.02, 0.03, 0.07, 0.16, 0.4, 1.0, np.inf])


def _improved(r, a, delta):
  return r + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1)


@pytest.mark.parametrize("name", ["plain", "jit", "vmap"])
def test_epsilon_matches_formula(name):
  fn = variants(lambda r, d: jaxrdp.rdp_to_epsilon(r, ORDERS, d), 2)[name]
  res = fn(RDP, 1e-5)
  by_hand = [_improved(r, a, 1e-5) for r, a in zip(RDP[:-1], ORDERS[:-1])]
  assert abs(float(res.epsilon) - min(by_hand)) <= 1e-13 * min(by_hand)
  assert float(res.order) == ORDERS[int(np.argmin(by_hand))]
  classic = jaxrdp.rdp_to_epsilon(RDP, ORDERS, 1e-5, method="classic")
  by_hand_c = [r + math.log(1e5) / (a - 1) for r, a in zip(RDP[:-1], ORDERS[:-1])]
  assert abs(float(classic.epsilon) - min(by_hand_c)) <= 1e-13 * min(by_hand_c)
  assert float(res.epsilon) < float(classic.epsilon)  # improved is tighter


@pytest.mark.parametrize("name", ["plain", "jit", "vmap"])
def test_delta_epsilon_round_trip(name):
  to_delta = variants(lambda r, e: jaxrdp.rdp_to_delta(r, ORDERS, e), 2)[name]
  for method in ("improved", "classic"):
    for delta in (1e-3, 1e-6, 1e-10):
      eps = jaxrdp.rdp_to_epsilon(RDP, ORDERS, delta, method=method).epsilon
      back = (
        to_delta(RDP, eps)
        if method == "improved"
        else jaxrdp.rdp_to_delta(RDP, ORDERS, eps, method=method)
      )
      assert abs(float(back.delta) - delta) <= 1e-9 * delta


def test_batch_broadcasting_over_last_axis():
  rdp = np.stack([RDP * s for s in (0.5, 1.0, 2.0)])  # [3, n]
  res = jaxrdp.rdp_to_epsilon(rdp, ORDERS, np.array([[1e-5], [1e-6]]))
  assert res.epsilon.shape == (2, 3)
  assert np.all(np.diff(np.asarray(res.epsilon), axis=1) > 0)  # more RDP, more epsilon


def test_epsilon_is_clamped_at_zero_and_delta_at_one():
  res = jaxrdp.rdp_to_epsilon(np.full(3, 1e-9), np.array([2.0, 3.0, 4.0]), 0.9)
  assert float(res.epsilon) == 0.0
  d = jaxrdp.rdp_to_delta(np.full(3, 50.0), np.array([2.0, 3.0, 4.0]), 0.0)
  assert 0.0 <= float(d.delta) <= 1.0


def test_delta_uses_kl_bound_for_tiny_rdp():
  # With r tiny, the TV bound sqrt(1 - e^-r) beats the RDP bound at eps = 0.
  r = np.array([1e-8, 2e-8])
  d = jaxrdp.rdp_to_delta(r, np.array([1.5, 2.0]), 0.0)
  assert abs(float(d.delta) - math.sqrt(-math.expm1(-1e-8))) <= 1e-12


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(delta=0.0), r"delta must be in \(0.0, 1.0\)"),
    (dict(delta=1.0), r"delta must be in"),
    (dict(delta=float("nan")), r"delta must not be NaN"),
  ],
)
def test_bad_delta(kwargs, match):
  with pytest.raises(ValueError, match=match):
    jaxrdp.rdp_to_epsilon(RDP, ORDERS, **kwargs)


def test_bad_epsilon_orders_rdp_and_method():
  with pytest.raises(ValueError, match=r"epsilon must be in \[0.0, inf\)"):
    jaxrdp.rdp_to_delta(RDP, ORDERS, -1.0)
  with pytest.raises(ValueError, match=r"orders must be in \(1.0, inf\]"):
    jaxrdp.rdp_to_epsilon(RDP, np.array([1.0, 2, 4, 8, 16, 32, 64]), 1e-5)
  with pytest.raises(ValueError, match=r"rdp must be in \[0.0, inf\]"):
    jaxrdp.rdp_to_epsilon(-RDP, ORDERS, 1e-5)
  with pytest.raises(ValueError, match=r"last axis"):
    jaxrdp.rdp_to_epsilon(RDP[:3], ORDERS, 1e-5)
  with pytest.raises(ValueError, match=r"method must be one of"):
    jaxrdp.rdp_to_epsilon(RDP, ORDERS, 1e-5, method="fast")


def test_traced_bad_delta_gives_nan():
  out = jax.jit(lambda d: jaxrdp.rdp_to_epsilon(RDP, ORDERS, d).epsilon)(jnp.array([0.0, 1.5]))
  assert np.all(np.isnan(np.asarray(out)))
