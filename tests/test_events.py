"""Events (jaxrdp.events), their accounting through the protocol, and dp_accounting interop."""

import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrdp
from jaxrdp.events import (
  Composed,
  Gaussian,
  Laplace,
  NoOp,
  PoissonSampled,
  RandomizedResponse,
  SelfComposed,
  from_dp_accounting,
  to_dp_accounting,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
ORDERS = np.array([1.5, 2.0, 3.0, 5.5, 8.0, 16.0, 32.0, 64.0])
ACCT = jaxrdp.RdpAccountant(ORDERS)
# Integer orders only: the SGM's exact series, no quadrature, so these compile fast.
INT_ORDERS = np.array([2.0, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0])
INT = jaxrdp.RdpAccountant(INT_ORDERS)
Q = np.array([0.001, 0.01, 0.1])
S = np.array([0.8, 1.5])


def sgm(q, sigma, count):
  return SelfComposed(PoissonSampled(q, Gaussian(sigma)), count)


def _curve(event, acct=INT):
  return np.asarray(acct.compose(acct.init(), event).rdp)


# --- pytrees: jit, vmap, built inside jit --------------------------------------------


def test_events_are_pytrees_with_numeric_leaves():
  e = Composed((sgm(0.01, 1.0, 10), Laplace(2.0), RandomizedResponse(0.7), NoOp()))
  leaves, treedef = jax.tree.flatten(e)
  assert leaves == [0.01, 1.0, 10, 2.0, 0.7]
  back = jax.tree.unflatten(treedef, leaves)
  assert isinstance(back, Composed) and isinstance(back.events[0].event.inner, Gaussian)
  assert jaxrdp.events.event_shape(sgm(Q[:, None], S[None, :], 5)) == (3, 2)


def test_treedefs_of_different_event_types_differ():
  # jax.tree_util.register_dataclass makes equal treedefs for different classes with
  # the same fields (jaxlib 0.10), and jit's dispatch cache then ran the program
  # traced for Laplace on a RandomizedResponse: every pair must compare unequal.
  from jaxrdp.events import FixedSizeSampled, ShuffledEpochs

  events = [
    Gaussian(1.0),
    Laplace(1.0),
    RandomizedResponse(0.7),
    NoOp(),
    PoissonSampled(0.1, Gaussian(1.0)),
    PoissonSampled(0.1, Laplace(1.0)),
    SelfComposed(Gaussian(1.0), 3),
    Composed((Gaussian(1.0),)),
    FixedSizeSampled(0.1, Gaussian(1.0)),
    ShuffledEpochs(10, Gaussian(1.0)),
  ]
  defs = [jax.tree.structure(e) for e in events]
  for i, a in enumerate(defs):
    for j, b in enumerate(defs):
      assert (a == b) == (i == j), (events[i], events[j])
  state = jaxrdp.RdpAccountant(INT_ORDERS).init()
  assert jax.tree.structure(state) != jax.tree.structure(Gaussian(1.0))


def test_jit_cache_tells_same_shaped_classes_apart():
  # The registration itself, on many one-field classes: with register_dataclass,
  # 46 of 300 such calls returned another class's result.
  import dataclasses

  from jaxrdp._core.pytrees import register_dataclass_pytree

  classes = []
  for i in range(120):
    cls = dataclasses.make_dataclass(f"C{i}", [("x", float)], frozen=True, eq=False)
    cls.tag = float(i)
    classes.append(register_dataclass_pytree(cls, data_fields=["x"]))
  f = jax.jit(lambda e: e.x + type(e).tag)
  assert [float(f(cls(0.0))) for cls in classes] == [cls.tag for cls in classes]


def test_built_inside_jit_and_vmapped():
  def eps(q, s, b):  # general path (Composed), built from traced values
    return INT.epsilon(Composed((sgm(q, s, 100.0), Laplace(b))), 1e-5).epsilon

  eager = np.array([float(eps(float(q), 1.0, 20.0)) for q in Q])
  np.testing.assert_allclose(
    jax.jit(jax.vmap(eps, in_axes=(0, None, None)))(Q, 1.0, 20.0), eager, rtol=1e-12
  )
  # Events themselves as arguments of jit and vmap.
  batched = Composed(
    (sgm(jnp.asarray(Q), jnp.full(3, 1.0), jnp.full(3, 100.0)), Laplace(jnp.full(3, 20.0)))
  )
  np.testing.assert_allclose(
    jax.jit(jax.vmap(lambda e: INT.epsilon(e, 1e-5).epsilon))(batched), eager, rtol=1e-12
  )
  # The fast path (one SGM, dpsgd_epsilon's search) on a traced event, against
  # the general path (every order) in the same program.
  both = jax.jit(
    lambda q: (
      INT.epsilon(sgm(q, 1.0, 100.0), 1e-5).epsilon,
      INT.epsilon(Composed((sgm(q, 1.0, 100.0),)), 1e-5).epsilon,
    )
  )
  fast, general = both(Q)
  np.testing.assert_allclose(fast, general, rtol=1e-12)


def test_grid_event_broadcasts():
  grid = Composed((sgm(Q[:, None], S[None, :], 100.0), Laplace(20.0)))
  res = INT.epsilon(grid, 1e-5)
  assert res.epsilon.shape == (3, 2) and res.order.shape == (3, 2)
  for i, q in enumerate(Q):
    for j, s in enumerate(S):
      cell = INT.epsilon(Composed((sgm(float(q), float(s), 100.0), Laplace(20.0))), 1e-5)
      assert abs(float(res.epsilon[i, j]) / float(cell.epsilon) - 1) <= 1e-12
  # get_epsilon of a grid state is the same grid.
  state = INT.compose(INT.init(), grid)
  assert state.rdp.shape == (3, 2, len(INT_ORDERS))
  np.testing.assert_allclose(INT.get_epsilon(state, 1e-5).epsilon, res.epsilon, rtol=1e-12)


# --- the fast path is dpsgd_epsilon ------------------------------------------------


def test_grid_event_equals_dpsgd_epsilon_bit_for_bit():
  q = np.geomspace(1e-3, 1e-1, 4)[:, None]
  s = np.linspace(0.6, 3.0, 3)[None, :]
  event = SelfComposed(PoissonSampled(q, Gaussian(s)), 1e4)
  ours = jaxrdp.epsilon_from_event(event, 1e-5)
  ref = jaxrdp.dpsgd_epsilon(q, s, 1e4, 1e-5)
  assert np.array_equal(ours.epsilon, ref.epsilon) and np.array_equal(ours.order, ref.order)
  d = jaxrdp.delta_from_event(event, 2.0, accountant=INT)
  dref = jaxrdp.dpsgd_delta(q, s, 1e4, 2.0, orders=INT_ORDERS)
  assert np.array_equal(d.delta, dref.delta) and np.array_equal(d.order, dref.order)
  # Nested SelfComposed multiply their counts.
  nested = SelfComposed(SelfComposed(PoissonSampled(q, Gaussian(s)), 100.0), 100.0)
  assert np.array_equal(jaxrdp.epsilon_from_event(nested, 1e-5).epsilon, ref.epsilon)


def test_fast_path_equals_general_path():
  e = sgm(Q[:, None], S[None, :], 1000)
  fast = ACCT.epsilon(e, 1e-5)
  general = ACCT.epsilon(Composed((e,)), 1e-5)  # every order, then the conversion
  np.testing.assert_allclose(fast.epsilon, general.epsilon, rtol=1e-12)
  np.testing.assert_array_equal(fast.order, general.order)


# --- composition -------------------------------------------------------------------


def test_composition_is_additive():
  a, b = sgm(0.02, 1.2, 30), Laplace(5.0)
  np.testing.assert_allclose(_curve(Composed((a, b))), _curve(a) + _curve(b), rtol=1e-14)
  np.testing.assert_allclose(_curve(SelfComposed(b, 7)), 7 * _curve(b), rtol=1e-14)
  np.testing.assert_allclose(_curve(SelfComposed(a, 3)), 3 * _curve(a), rtol=1e-14)
  assert np.array_equal(_curve(SelfComposed(Gaussian(0.0), 0)), np.zeros(len(INT_ORDERS)))
  assert np.array_equal(_curve(NoOp()), np.zeros(len(INT_ORDERS)))
  np.testing.assert_allclose(_curve(Gaussian(2.0)), INT_ORDERS / 8.0, rtol=1e-15)
  np.testing.assert_allclose(
    _curve(Laplace(3.0)), jaxrdp.mechanisms.laplace_rdp(3.0, INT_ORDERS), rtol=1e-15
  )
  np.testing.assert_allclose(
    _curve(RandomizedResponse(0.7)),
    jaxrdp.mechanisms.randomized_response_rdp(0.7, INT_ORDERS),
    rtol=1e-15,
  )
  # Composing one by one into a state equals composing the Composed event.
  state = INT.compose(INT.compose(INT.init(), a), b)
  np.testing.assert_allclose(state.rdp, _curve(Composed((a, b))), rtol=1e-14)
  assert float(INT.epsilon(NoOp(), 1e-5).epsilon) == 0.0


# --- validation --------------------------------------------------------------------


@pytest.mark.parametrize(
  "event,match",
  [
    (sgm(1.5, 1.0, 1), r"PoissonSampled.q must be in \[0.0, 1.0\]"),
    (sgm(0.1, -1.0, 1), r"Gaussian.sigma must be in"),
    (sgm(0.1, 1.0, -1), r"SelfComposed.count must be in"),
    (Laplace(-2.0), r"Laplace.scale must be in"),
    (RandomizedResponse(1.2), r"RandomizedResponse.p must be in"),
    (Composed((Gaussian(1.0), Gaussian(float("nan")))), r"Gaussian.sigma must not be NaN"),
  ],
)
def test_invalid_concrete_fields_name_the_field(event, match):
  with pytest.raises(ValueError, match=match):
    INT.epsilon(event, 1e-5)
  with pytest.raises(ValueError, match=match):
    INT.compose(INT.init(), event)


def test_invalid_traced_fields_give_nan_and_unsupported_events_raise():
  f = jax.jit(lambda q, s, c: INT.epsilon(Composed((sgm(q, s, c), Laplace(1.0))), 1e-5).epsilon)
  out = np.asarray(
    f(jnp.array([1.5, 0.1, 0.1]), jnp.array([1.0, -1.0, 1.0]), jnp.array([1.0, 1.0, -1.0]))
  )
  assert np.isnan(out).all()
  with pytest.raises(
    NotImplementedError, match=r"cannot account PoissonSampled\(RandomizedResponse\)"
  ):
    ACCT.epsilon(PoissonSampled(0.1, RandomizedResponse(0.7)), 1e-5)
  with pytest.raises(TypeError, match="jaxrdp event"):
    ACCT.epsilon(Composed((Gaussian(1.0), "x")), 1e-5)


# --- the accountant registry -------------------------------------------------------


def test_registry_is_open():
  class Classic(jaxrdp.RdpAccountant):
    pass

  jaxrdp.accountants.register_accountant("rdp-classic-test", lambda: Classic(ORDERS, "classic"))
  try:
    got = jaxrdp.epsilon_from_event(Gaussian(2.0), 1e-5, accountant="rdp-classic-test")
    ref = jaxrdp.rdp_to_epsilon(ORDERS / 8.0, ORDERS, 1e-5, method="classic")
    assert float(got.epsilon) == pytest.approx(float(ref.epsilon), rel=1e-14)
  finally:
    jaxrdp.accountants._protocol._FACTORIES.pop("rdp-classic-test")
    jaxrdp.accountants._protocol._DEFAULTS.pop("rdp-classic-test", None)
  with pytest.raises(ValueError, match="unknown accountant 'prv'.*pld.*rdp"):
    jaxrdp.epsilon_from_event(Gaussian(2.0), 1e-5, accountant="prv")
  with pytest.raises(TypeError, match="accountant"):
    jaxrdp.epsilon_from_event(Gaussian(2.0), 1e-5, accountant=3)


# --- dp_accounting interop ---------------------------------------------------------

dp_accounting = pytest.importorskip("dp_accounting")


def test_mnist_dp_event_gives_dp_accountings_example_epsilon():
  d = dp_accounting
  event = d.SelfComposedDpEvent(d.PoissonSampledDpEvent(256 / 60000, d.GaussianDpEvent(1.1)), 14063)
  res = jaxrdp.epsilon_from_event(event, 1e-5)
  assert round(float(res.epsilon), 4) == 2.5967
  ours = jaxrdp.epsilon_from_event(from_dp_accounting(event), 1e-5)
  assert float(ours.epsilon) == float(res.epsilon)


def test_round_trips():
  d = dp_accounting
  dp_events = [
    d.GaussianDpEvent(1.3),
    d.LaplaceDpEvent(0.5),
    d.NoOpDpEvent(),
    d.RandomizedResponseDpEvent(0.5, 2),
    d.ComposedDpEvent(
      [
        d.SelfComposedDpEvent(d.PoissonSampledDpEvent(0.01, d.GaussianDpEvent(1.1)), 100),
        d.LaplaceDpEvent(2.0),
        d.SelfComposedDpEvent(d.RandomizedResponseDpEvent(0.25, 2), 3),
      ]
    ),
  ]
  for e in dp_events:
    assert to_dp_accounting(from_dp_accounting(e)) == e
  # Randomized response round-trips up to the rounding of 1 - p / 2.
  rr = to_dp_accounting(from_dp_accounting(d.RandomizedResponseDpEvent(0.4, 2)))
  assert rr.num_buckets == 2 and rr.noise_parameter == pytest.approx(0.4, rel=1e-15)
  ours = Composed((sgm(0.01, 1.1, 100), Laplace(2.0), RandomizedResponse(0.8), NoOp()))
  back = from_dp_accounting(to_dp_accounting(ours))
  assert jax.tree.structure(back) == jax.tree.structure(ours)
  np.testing.assert_allclose(jax.tree.leaves(back), jax.tree.leaves(ours), rtol=1e-15)
  # p < 1/2 maps to the relabelled mechanism 1 - p (the same privacy curve).
  assert to_dp_accounting(RandomizedResponse(0.2)) == d.RandomizedResponseDpEvent(0.4, 2)
  assert to_dp_accounting(RandomizedResponse(0.8)).noise_parameter == pytest.approx(0.4, rel=1e-15)
  assert isinstance(from_dp_accounting(d.RandomizedResponseDpEvent(0.3, 1)), NoOp)


def test_randomized_response_parametrisation_matches_dp_accounting():
  from dp_accounting.rdp import rdp_privacy_accountant as r

  e = from_dp_accounting(dp_accounting.RandomizedResponseDpEvent(0.4, 2))
  assert isinstance(e, RandomizedResponse) and e.p == 0.8
  theirs = [r._randomized_response_rdp_replace_one(0.4, 2, a) for a in INT_ORDERS]
  np.testing.assert_allclose(_curve(e), theirs, rtol=1e-12)


def test_interop_errors():
  d = dp_accounting
  with pytest.raises(TypeError, match="SampledWithReplacementDpEvent"):
    from_dp_accounting(d.SampledWithReplacementDpEvent(100, 10, d.GaussianDpEvent(1.0)))
  with pytest.raises(TypeError, match="UnsupportedDpEvent"):
    jaxrdp.epsilon_from_event(
      d.ComposedDpEvent([d.GaussianDpEvent(1.0), d.UnsupportedDpEvent()]), 1e-5
    )
  with pytest.raises(TypeError, match="only around Gaussian"):
    from_dp_accounting(d.SampledWithoutReplacementDpEvent(100, 10, d.LaplaceDpEvent(1.0)))
  with pytest.raises(ValueError, match="relation must be one of"):
    from_dp_accounting(d.RandomizedResponseDpEvent(0.4, 3), relation="add_remove")
  with pytest.raises(ValueError, match=r"shape \(3,\).*one grid cell at a time"):
    to_dp_accounting(sgm(Q, 1.0, 10))
  with pytest.raises(ValueError, match="integer"):
    to_dp_accounting(sgm(0.1, 1.0, 2.5))


def test_never_looser_than_dp_accounting_on_the_same_orders():
  d = dp_accounting
  orders = np.array([1.5, 2.0, 2.5, 3.0, 4.0, 5.5, 8.0, 12.0, 16.0, 32.0, 64.0, 128.0])
  dp_event = d.ComposedDpEvent(
    [
      d.SelfComposedDpEvent(d.PoissonSampledDpEvent(0.01, d.GaussianDpEvent(1.1)), 1000),
      d.LaplaceDpEvent(20.0),
      d.SelfComposedDpEvent(d.GaussianDpEvent(5.0), 3),
    ]
  )
  theirs = d.rdp.RdpAccountant(list(orders))
  theirs.compose(dp_event)
  acct = jaxrdp.RdpAccountant(orders)
  ours = acct.compose(acct.init(), from_dp_accounting(dp_event))
  curve, their_curve = np.asarray(ours.rdp), np.asarray(theirs._rdp)
  integer = orders == np.round(orders)
  np.testing.assert_allclose(curve[integer], their_curve[integer], rtol=1e-10)
  assert np.all(curve[integer] <= their_curve[integer] * (1 + 1e-12))
  assert np.all(curve <= their_curve * (1 + 1e-12))  # fractional orders: theirs is a bound
  eps = float(acct.get_epsilon(ours, 1e-5).epsilon)
  assert eps <= theirs.get_epsilon(1e-5) * (1 + 1e-12)


def test_dp_accounting_stays_optional():
  code = (
    "import sys, jaxrdp\n"
    "from jaxrdp.events import Gaussian\n"
    "acct = jaxrdp.RdpAccountant([2.0, 4.0])\n"
    "jaxrdp.epsilon_from_event(Gaussian(2.0), 1e-5, accountant=acct)\n"
    "assert 'dp_accounting' not in sys.modules\n"
  )
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)
