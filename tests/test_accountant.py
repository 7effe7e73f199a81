"""The RDP accountant (jaxrdp.RdpAccountant, its RdpState) and the eager PrivacyAccountant."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrdp
from jaxrdp.events import Gaussian, PoissonSampled, SelfComposed
from jaxrdp.rdp._accountant import state_from_dict, state_to_dict

ORDERS = np.array([1.5, 2.0, 3.0, 5.5, 8.0, 16.0, 32.0, 64.0])
ACCT = jaxrdp.RdpAccountant(ORDERS)


def sgm(q, sigma, count=1):
  return SelfComposed(PoissonSampled(q, Gaussian(sigma)), count)


def test_heterogeneous_composition_is_the_sum_of_curves():
  state = ACCT.init()
  phases = [(0.01, 1.0, 100), (0.02, 1.5, 50), (0.005, 0.8, 200)]
  for q, s, n in phases:
    state = ACCT.compose(state, sgm(q, s, n))
  by_hand = sum(n * np.asarray(jaxrdp.mechanisms.sgm_rdp(q, s, ORDERS)) for q, s, n in phases)
  np.testing.assert_allclose(state.rdp, by_hand, rtol=1e-13)
  eps = ACCT.get_epsilon(state, 1e-5)
  ref = jaxrdp.rdp_to_epsilon(by_hand, ORDERS, 1e-5)
  assert abs(float(eps.epsilon) - float(ref.epsilon)) <= 1e-12 * float(ref.epsilon)
  d = ACCT.get_delta(state, eps.epsilon)
  assert abs(float(d.delta) - 1e-5) <= 1e-9 * 1e-5


def test_constant_schedule_equals_dpsgd_epsilon():
  acct = jaxrdp.RdpAccountant()
  state = acct.compose(acct.init(), sgm(256 / 60000, 1.1, 14063))
  a = acct.get_epsilon(state, 1e-5)
  b = jaxrdp.dpsgd_epsilon(256 / 60000, 1.1, 14063, 1e-5)
  assert abs(float(a.epsilon) - float(b.epsilon)) <= 1e-12 * float(b.epsilon)


def test_jit_with_traced_q_and_sigma_and_scan():
  @jax.jit
  def train(state, qs, sigmas):
    def body(st, qs_):
      st = ACCT.compose(st, PoissonSampled(qs_[0], Gaussian(qs_[1])))  # built inside jit
      return st, ACCT.get_epsilon(st, 1e-5).epsilon

    return jax.lax.scan(body, state, jnp.stack([qs, sigmas], axis=1))

  qs = jnp.array([0.01, 0.01, 0.02, 0.02])
  ss = jnp.array([1.0, 1.0, 1.2, 1.2])
  state, eps = train(ACCT.init(), qs, ss)
  eager = ACCT.init()
  for q, s in zip(qs, ss):
    eager = ACCT.compose(eager, sgm(float(q), float(s)))
  np.testing.assert_allclose(state.rdp, eager.rdp, rtol=1e-12)
  assert np.all(np.diff(np.asarray(eps)) > 0)


def test_save_restore_is_lossless_and_validated():
  state = ACCT.compose(ACCT.init(), sgm(0.01, 1.0, 123))
  text = json.dumps(state_to_dict(state))
  back = state_from_dict(json.loads(text), expected_orders=ORDERS)
  assert np.array_equal(np.asarray(back.rdp), np.asarray(state.rdp))
  assert np.array_equal(np.asarray(back.orders), ORDERS)
  assert back.orders == ACCT.orders
  d = state_to_dict(state)
  with pytest.raises(ValueError, match="expected orders"):
    state_from_dict(d, expected_orders=ORDERS[:-1])
  with pytest.raises(ValueError, match="not a jaxrdp accountant state"):
    state_from_dict({**d, "format": "other"})
  with pytest.raises(ValueError, match="corrupted"):
    state_from_dict({**d, "rdp": d["rdp"][:-1]})
  with pytest.raises(ValueError, match="saved rdp"):
    state_from_dict({**d, "rdp": [(-1.0).hex()] + d["rdp"][1:]})
  with pytest.raises(ValueError, match="corrupted"):
    state_from_dict({**d, "rdp": ["zz"] + d["rdp"][1:]})


def test_state_is_a_pytree_with_static_orders():
  state = ACCT.init()
  leaves, treedef = jax.tree_util.tree_flatten(state)
  assert len(leaves) == 1 and leaves[0].dtype == jnp.float64
  assert state.orders == tuple(ORDERS.tolist())
  # The orders are part of the tree structure, not a leaf: other orders, other treedef.
  other = jaxrdp.RdpAccountant(ORDERS[:-1]).init()
  assert jax.tree_util.tree_structure(other) != treedef
  shifted = jaxrdp.RdpAccountant(ORDERS + np.r_[0.0, 0.0, 0.0, 0.25, 0, 0, 0, 0]).init()
  assert jax.tree_util.tree_structure(shifted) != treedef
  assert jax.tree_util.tree_structure(jaxrdp.RdpAccountant(list(ORDERS)).init()) == treedef


def test_accountant_is_hashable_static_configuration():
  a, b = jaxrdp.RdpAccountant(ORDERS), jaxrdp.RdpAccountant(tuple(ORDERS.tolist()))
  assert a == b and hash(a) == hash(b) and isinstance(a.orders, tuple)
  assert a != jaxrdp.RdpAccountant(ORDERS, method="classic")
  assert jaxrdp.RdpAccountant().orders == tuple(jaxrdp.DEFAULT_ORDERS.tolist())
  assert jaxrdp.accountants.get_accountant("rdp") == jaxrdp.RdpAccountant()
  assert "rdp" in jaxrdp.accountants.registered_accountants()
  assert isinstance(a, jaxrdp.accountants.Accountant)


def test_compose_generic_mechanism():
  state = ACCT.compose(ACCT.init(), SelfComposed(Gaussian(2.0), 3))
  np.testing.assert_allclose(state.rdp, 3 * ORDERS / 8.0)
  with pytest.raises(ValueError, match="other orders"):
    jaxrdp.RdpAccountant(ORDERS[:3]).compose(state, Gaussian(1.0))


def test_eager_accountant():
  acc = jaxrdp.PrivacyAccountant()
  acc.step(q=256 / 60000, sigma=1.1, steps=14063)
  assert round(acc.get_epsilon(1e-5), 3) == 2.597
  eps, order = acc.get_privacy_spent(1e-5)
  assert order > 1 and abs(acc.get_delta(eps) - 1e-5) < 1e-12
  assert acc.history == [(256 / 60000, 1.1, 14063)]


def test_eager_accountant_history_and_events():
  acc = jaxrdp.PrivacyAccountant(jaxrdp.RdpAccountant(ORDERS))
  acc.step(q=0.01, sigma=1.0, steps=10)
  acc.compose(Gaussian(5.0))
  acc.step(q=0.02, sigma=1.5)
  assert acc.history[0] == (0.01, 1.0, 10) and acc.history[2] == (0.02, 1.5, 1)
  assert isinstance(acc.history[1], Gaussian)
  by_hand = (
    10 * np.asarray(jaxrdp.mechanisms.sgm_rdp(0.01, 1.0, ORDERS))
    + ORDERS / 50.0
    + np.asarray(jaxrdp.mechanisms.sgm_rdp(0.02, 1.5, ORDERS))
  )
  np.testing.assert_allclose(acc.state.rdp, by_hand, rtol=1e-13)
  assert (
    acc.get_epsilon(1e-5) == float(jaxrdp.rdp_to_epsilon(by_hand, ORDERS, 1e-5).epsilon)
    or abs(acc.get_epsilon(1e-5) / float(jaxrdp.rdp_to_epsilon(by_hand, ORDERS, 1e-5).epsilon) - 1)
    < 1e-12
  )
  with pytest.raises(ValueError, match="unknown accountant"):
    jaxrdp.PrivacyAccountant("nope")


@pytest.mark.parametrize(
  "call,match",
  [
    (lambda s: ACCT.compose(s, sgm(1.5, 1.0)), r"q must be in"),
    (lambda s: ACCT.compose(s, sgm(0.1, 1.0, -2)), r"count must be in"),
    (lambda s: ACCT.compose(s, sgm(0.1, -1.0)), r"Gaussian.sigma must be in"),
    (lambda s: ACCT.compose(s, 0.5), r"must be a jaxrdp event"),
    (lambda s: ACCT.get_epsilon(s, 2.0), r"delta must be in"),
    (lambda s: ACCT.get_delta(s, -1.0), r"epsilon must be in"),
    (lambda s: jaxrdp.RdpAccountant([1.0, 2.0]), r"orders must be in"),
    (lambda s: jaxrdp.RdpAccountant(method="other"), r"method must be one of"),
  ],
)
def test_bad_arguments(call, match):
  with pytest.raises((ValueError, TypeError), match=match):
    call(ACCT.init())


def test_checkpoint_restores_state_and_refuses_other_orders(tmp_path):
  state = ACCT.compose(ACCT.init(), SelfComposed(Gaussian(2.0), 3))
  path = tmp_path / "acc.npz"
  jaxrdp.train.save_checkpoint(path, {"acc": state})
  back = jaxrdp.train.load_checkpoint(path, {"acc": ACCT.init()})["acc"]
  assert back.orders == ACCT.orders and np.array_equal(back.rdp, state.rdp)
  with pytest.raises(jaxrdp.train.CheckpointError, match="orders mismatch"):
    jaxrdp.train.load_checkpoint(path, {"acc": jaxrdp.RdpAccountant(ORDERS[:-1]).init()})
