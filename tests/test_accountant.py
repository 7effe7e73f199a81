"""The functional accountant and the eager RdpAccountant."""

import json

import numpy as np
import pytest
import jax
import jax.numpy as jnp

import jaxrdp

ORDERS = np.array([1.5, 2.0, 3.0, 5.5, 8.0, 16.0, 32.0, 64.0])


def test_heterogeneous_composition_is_the_sum_of_curves():
  state = jaxrdp.accountant_init(ORDERS)
  phases = [(0.01, 1.0, 100), (0.02, 1.5, 50), (0.005, 0.8, 200)]
  for q, s, n in phases:
    state = jaxrdp.accountant_compose_sgm(state, q, s, n)
  by_hand = sum(n * np.asarray(jaxrdp.mechanisms.sgm_rdp(q, s, ORDERS)) for q, s, n in phases)
  np.testing.assert_allclose(state.rdp, by_hand, rtol=1e-13)
  eps = jaxrdp.accountant_epsilon(state, 1e-5)
  ref = jaxrdp.rdp_to_epsilon(by_hand, ORDERS, 1e-5)
  assert abs(float(eps.epsilon) - float(ref.epsilon)) <= 1e-12 * float(ref.epsilon)
  d = jaxrdp.accountant_delta(state, eps.epsilon)
  assert abs(float(d.delta) - 1e-5) <= 1e-9 * 1e-5


def test_constant_schedule_equals_dpsgd_epsilon():
  state = jaxrdp.accountant_compose_sgm(jaxrdp.accountant_init(), 256 / 60000, 1.1, 14063)
  a = jaxrdp.accountant_epsilon(state, 1e-5)
  b = jaxrdp.dpsgd_epsilon(256 / 60000, 1.1, 14063, 1e-5)
  assert abs(float(a.epsilon) - float(b.epsilon)) <= 1e-12 * float(b.epsilon)


def test_jit_with_traced_q_and_sigma_and_scan():
  @jax.jit
  def train(state, qs, sigmas):
    def body(st, qs_):
      st = jaxrdp.accountant_compose_sgm(st, qs_[0], qs_[1])
      return st, jaxrdp.accountant_epsilon(st, 1e-5).epsilon
    return jax.lax.scan(body, state, jnp.stack([qs, sigmas], axis=1))

  qs = jnp.array([0.01, 0.01, 0.02, 0.02])
  ss = jnp.array([1.0, 1.0, 1.2, 1.2])
  state, eps = train(jaxrdp.accountant_init(ORDERS), qs, ss)
  eager = jaxrdp.accountant_init(ORDERS)
  for q, s in zip(qs, ss):
    eager = jaxrdp.accountant_compose_sgm(eager, float(q), float(s))
  np.testing.assert_allclose(state.rdp, eager.rdp, rtol=1e-12)
  assert np.all(np.diff(np.asarray(eps)) > 0)


def test_save_restore_is_lossless_and_validated():
  state = jaxrdp.accountant_compose_sgm(jaxrdp.accountant_init(ORDERS), 0.01, 1.0, 123)
  text = json.dumps(jaxrdp.accountant_to_dict(state))
  back = jaxrdp.accountant_from_dict(json.loads(text), expected_orders=ORDERS)
  assert np.array_equal(np.asarray(back.rdp), np.asarray(state.rdp))
  assert np.array_equal(np.asarray(back.orders), ORDERS)
  d = jaxrdp.accountant_to_dict(state)
  with pytest.raises(ValueError, match="expected orders"):
    jaxrdp.accountant_from_dict(d, expected_orders=ORDERS[:-1])
  with pytest.raises(ValueError, match="not a jaxrdp accountant state"):
    jaxrdp.accountant_from_dict({**d, "format": "other"})
  with pytest.raises(ValueError, match="corrupted"):
    jaxrdp.accountant_from_dict({**d, "rdp": d["rdp"][:-1]})
  with pytest.raises(ValueError, match="saved rdp"):
    jaxrdp.accountant_from_dict({**d, "rdp": [(-1.0).hex()] + d["rdp"][1:]})
  with pytest.raises(ValueError, match="corrupted"):
    jaxrdp.accountant_from_dict({**d, "rdp": ["zz"] + d["rdp"][1:]})


def test_state_is_a_pytree():
  state = jaxrdp.accountant_init(ORDERS)
  leaves = jax.tree_util.tree_leaves(state)
  assert len(leaves) == 2 and all(leaf.dtype == jnp.float64 for leaf in leaves)


def test_compose_generic_rdp_curve():
  state = jaxrdp.accountant_init(ORDERS)
  state = jaxrdp.accountant_compose_rdp(state, ORDERS / (2 * 4.0), count=3)  # Gaussian, sigma = 2
  np.testing.assert_allclose(state.rdp, 3 * ORDERS / 8.0)
  with pytest.raises(ValueError, match="shape of state.orders"):
    jaxrdp.accountant_compose_rdp(state, ORDERS[:3])


def test_eager_accountant():
  acc = jaxrdp.RdpAccountant()
  acc.step(q=256 / 60000, sigma=1.1, steps=14063)
  assert round(acc.get_epsilon(1e-5), 3) == 2.597
  eps, order = acc.get_privacy_spent(1e-5)
  assert order > 1 and abs(acc.get_delta(eps) - 1e-5) < 1e-12
  assert acc.history == [(256 / 60000, 1.1, 14063)]


@pytest.mark.parametrize("call,match", [
    (lambda s: jaxrdp.accountant_compose_sgm(s, 1.5, 1.0), r"q must be in"),
    (lambda s: jaxrdp.accountant_compose_sgm(s, 0.1, 1.0, -2), r"count must be in"),
    (lambda s: jaxrdp.accountant_compose_sgm(s, np.ones(2) * 0.1, 1.0), r"q must be a scalar"),
    (lambda s: jaxrdp.accountant_epsilon(s, 2.0), r"delta must be in"),
    (lambda s: jaxrdp.accountant_delta(s, -1.0), r"epsilon must be in"),
    (lambda s: jaxrdp.accountant_init([1.0, 2.0]), r"orders must be in"),
])
def test_bad_arguments(call, match):
  with pytest.raises(ValueError, match=match):
    call(jaxrdp.accountant_init(ORDERS))
