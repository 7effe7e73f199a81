"""Random allocation of the Gaussian: the RDP kernel, the event, its rule and conversions.

References (tests/allocation_oracle.py): Feldman and Shenfeld 2025's partition sum and a
recursion over occupied bins in 50-digit mpmath (remove direction), a one-integral
closed form for t = 2 in mpmath and adaptive quadrature for any t (add direction),
the Sampled Gaussian Mechanism at rate 1/t (a proven upper bound of the remove
direction at integer orders), and pld-accounting's certified interval for the tight
epsilon (a lower bound every sound RDP epsilon must exceed).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from allocation_oracle import (
  add_log_moment_adaptive,
  add_rdp_two_steps,
  remove_log_moment_bins,
  remove_log_moment_partitions,
)

import jaxrdp
from jaxrdp.events import Gaussian, RandomAllocation
from jaxrdp.mechanisms import random_allocation_rdp, sgm_rdp

# One batch of configurations per direction (one compilation each).
_SIGMAS = np.array([0.3, 1.1, 100.0])
_STEPS = np.array([1, 2, 234, 10**6])
_ORDERS = np.array([2.0, 3.0, 5.0, 8.0, 12.0, 40.0])


@pytest.fixture(scope="module")
def remove_grid():
  return np.asarray(
    random_allocation_rdp(
      _SIGMAS[:, None, None], _STEPS[None, :, None], _ORDERS[None, None, :], direction="remove"
    )
  )


def test_remove_direction_is_the_partition_sum(remove_grid):
  # Feldman and Shenfeld 2025's formula, enumerated literally (orders <= 12), and the
  # occupied-bins recursion (order 40), both in 50-digit mpmath.
  worst = 0.0
  for i, sigma in enumerate(_SIGMAS):
    for j, t in enumerate(_STEPS):
      for k, a in enumerate(_ORDERS):
        a = int(a)
        if a <= 12 and t <= 234:
          ref = remove_log_moment_partitions(a, sigma, int(t))
        elif a <= 12 or sigma >= 1.0:
          ref = remove_log_moment_bins(a, sigma, int(t))
        else:
          continue
        want = float(ref) / (a - 1)
        got = remove_grid[i, j, k]
        worst = max(worst, abs(got - want) / want)
  assert worst < 1e-11, worst


def test_remove_direction_never_exceeds_poisson_at_rate_one_over_t(remove_grid):
  # Proven (module docstring): E[(1 + sum b_i)^alpha] <= prod E[(1 + b_i)^alpha] term by
  # term, the moments E[(Y - 1)^n] being >= 0. Equality at t = 1 (both are Gaussian).
  pois = _STEPS[None, :, None] * np.asarray(
    sgm_rdp(1.0 / _STEPS[None, :, None], _SIGMAS[:, None, None], _ORDERS[None, None, :])
  )
  assert np.all(remove_grid <= pois * (1 + 1e-10)), np.max(remove_grid / pois)
  np.testing.assert_allclose(remove_grid[:, 0], pois[:, 0], rtol=1e-12)
  # and it is a real gain for many steps: at t = 234, sigma = 1.1, alpha = 8 by 3.7%.
  assert remove_grid[1, 2, 3] < 0.97 * pois[1, 2, 3]


def test_add_direction_against_references():
  # t = 2: an independent one-integral form (mpmath, 40 digits), fractional orders too;
  # any t: adaptive quadrature (scipy) of the one-dimensional integral. One call.
  two = [(1.1, 2, 1.5), (1.1, 2, 10.0), (2.0, 2, 8.0), (5.0, 2, 30.0), (0.8, 2, 4.0)]
  many = [(0.8, 30, 5.0), (1.1, 234, 1.3)]
  heavy = [(0.5, 2, 3.0), (2.0, 2, 64.0)]  # mass far beyond the grid: the AM-GM bound
  s, t, a = (np.array(x) for x in zip(*(two + many + heavy)))
  got = np.asarray(random_allocation_rdp(s, t, a, direction="add"))
  want = [float(add_rdp_two_steps(x, y)) for x, _, y in two]
  want += [add_log_moment_adaptive(*c) / (c[2] - 1) for c in many]
  np.testing.assert_allclose(got[:7], want, rtol=1e-11)
  exact = np.array([float(add_rdp_two_steps(x, y)) for x, _, y in heavy])
  amgm = np.array([(1 + (y - 1) / 2) / (2 * x**2) for x, _, y in heavy])
  np.testing.assert_allclose(got[7:], amgm, rtol=1e-14)
  assert np.all(got[7:] > exact)


def test_directions_and_their_maximum():
  sig = np.array([[0.3], [1.1], [20.0]])
  orders = np.array([1.5, 2.0, 7.5, 64.0, 256.0, 300.0, np.inf])
  both = np.asarray(random_allocation_rdp(sig, 50, orders))
  rem = np.asarray(random_allocation_rdp(sig, 50, orders, direction="remove"))
  add = np.asarray(random_allocation_rdp(sig, 50, orders, direction="add"))
  np.testing.assert_array_equal(both, np.maximum(rem, add))
  # The add direction never exceeds the AM-GM bound, nor the Gaussian one.
  c = 1.0 / sig**2
  finite = np.isfinite(orders)
  amgm = 0.5 * c + 0.5 * (orders - 1) * c / 50
  assert np.all(add[:, finite] <= amgm[:, finite] * (1 + 1e-12))
  assert np.all(both[:, finite] <= (0.5 * orders * c)[:, finite] * (1 + 1e-12))
  # Above 256: the Gaussian bound; at inf: inf.
  np.testing.assert_allclose(both[:, 5], 0.5 * 300.0 * c[:, 0], rtol=1e-15)
  assert np.all(np.isinf(both[:, 6]))
  # Fractional orders: the chord of the convex log-moment, between its integer values.
  r7, r8 = (np.asarray(random_allocation_rdp(1.1, 50, a, direction="remove")) for a in (7.0, 8.0))
  chord = (0.5 * 6 * r7 + 0.5 * 7 * r8) / 6.5
  np.testing.assert_allclose(rem[1, 2], chord, rtol=1e-13)


def test_k_out_of_t_is_k_blocks():
  # k = 3 of t = 12: three 1-out-of-4 blocks; of t = 13: two blocks of 4 and one of 5.
  orders = np.array([2.0, 6.0, 20.0])
  one = np.asarray(random_allocation_rdp(1.3, np.array([[4], [5]]), orders))
  three = np.asarray(random_allocation_rdp(1.3, np.array([[12], [13]]), orders, 3))
  np.testing.assert_allclose(three[0], 3 * one[0], rtol=1e-14)
  np.testing.assert_allclose(three[1], 2 * one[0] + one[1], rtol=1e-14)
  # k = t: every example in every step, t Gaussian mechanisms.
  np.testing.assert_allclose(
    np.asarray(random_allocation_rdp(1.3, 4, orders, 4)), 4 * orders / (2 * 1.3**2), rtol=1e-14
  )


def test_edges_and_validation():
  assert float(random_allocation_rdp(np.inf, 10, 3.0)) == 0.0
  assert float(random_allocation_rdp(0.0, 10, 3.0)) == np.inf
  with pytest.raises(ValueError, match="^sigma"):
    random_allocation_rdp(-1.0, 10, 2.0)
  with pytest.raises(ValueError, match="^steps_per_epoch must be an integer"):
    random_allocation_rdp(1.0, 10.5, 2.0)
  with pytest.raises(ValueError, match="^steps_per_epoch must be at least"):
    random_allocation_rdp(1.0, 2, 2.0, 3)
  with pytest.raises(ValueError, match="^alpha"):
    random_allocation_rdp(1.0, 10, 1.0)
  with pytest.raises(TypeError, match="^selected"):
    random_allocation_rdp(1.0, 10, 2.0, 1.0)
  with pytest.raises(ValueError, match="^direction"):
    random_allocation_rdp(1.0, 10, 2.0, direction="both ways")


def test_jit_and_vmap():
  orders = jnp.array([4.0, 9.0])
  f = jax.jit(jax.vmap(lambda s, t: random_allocation_rdp(s, t, orders)))
  got = np.asarray(f(jnp.array([0.9, 1.7, 1.0]), jnp.array([20.0, 21.0, 2.5])))
  want = np.asarray(random_allocation_rdp(np.array([[0.9], [1.7]]), np.array([[20], [21]]), orders))
  np.testing.assert_allclose(got[:2], want, rtol=1e-13)
  # A traced invalid step count gives NaN, not a number.
  assert np.all(np.isnan(got[2]))


# --- The event and its RDP rule ---------------------------------------------------------

# pld-accounting 2.0, gaussian_allocation_epsilon_range(delta=1e-5, sigma=1.1,
# num_steps=234, num_selected=1, num_epochs=60): the tight epsilon lies in
# [2.301, 2.383] (measured, 109 s). Poisson at q = 1/234: tight 2.3817.
_TIGHT_LOWER = 2.301


def test_event_epsilon_epochs_and_edges():
  # One accountant, one event structure: the compiled composition is reused.
  acct = jaxrdp.RdpAccountant()
  orders = np.asarray(acct.orders)

  def curve(ev):
    return np.asarray(acct.compose(acct.init(), ev).rdp)

  state = acct.compose(acct.init(), RandomAllocation(1 / 234, Gaussian(1.1), 60 * 234))
  eps = float(acct.get_epsilon(state, 1e-5).epsilon)
  pois = float(jaxrdp.dpsgd_epsilon(1 / 234, 1.1, 60 * 234, 1e-5).epsilon)
  assert _TIGHT_LOWER < eps < pois, (eps, pois)
  assert eps == pytest.approx(2.5486, abs=1e-3)
  np.testing.assert_allclose(
    np.asarray(state.rdp), 60 * np.asarray(random_allocation_rdp(1.1, 234, orders)), rtol=1e-13
  )
  one = np.asarray(random_allocation_rdp(1.1, 10, orders))
  np.testing.assert_allclose(curve(RandomAllocation(0.1, Gaussian(1.1), 10)), one, rtol=1e-13)
  # A started epoch counts whole: 11 steps of t = 10 are two epochs.
  np.testing.assert_allclose(curve(RandomAllocation(0.1, Gaussian(1.1), 11)), 2 * one, rtol=1e-13)
  assert np.all(curve(RandomAllocation(0.0, Gaussian(1.1), 10)) == 0.0)
  assert np.all(curve(RandomAllocation(0.1, Gaussian(1.1), 0)) == 0.0)
  with pytest.raises(ValueError, match="RandomAllocation.q must be selected / t"):
    curve(RandomAllocation(0.3, Gaussian(1.1), 10))
  with pytest.raises(ValueError, match="RandomAllocation.q"):
    curve(RandomAllocation(1.5, Gaussian(1.1), 10))
  with pytest.raises(TypeError, match="selected"):
    RandomAllocation(0.1, Gaussian(1.1), 10, selected=2.0)


def test_dp_accounting_conversion(monkeypatch):
  import attr
  import dp_accounting
  from dp_accounting import dp_event as d

  from jaxrdp.events import from_dp_accounting, to_dp_accounting

  # The installed dp_accounting (0.6) has no RandomAllocationDpEvent: refused both ways.
  if not hasattr(d, "RandomAllocationDpEvent"):
    with pytest.raises(TypeError, match="RandomAllocationDpEvent"):
      to_dp_accounting(RandomAllocation(0.1, Gaussian(1.0), 10))

    # The later versions' event (fields as upstream: event, num_selected, num_steps).
    @attr.s(frozen=True, slots=True, auto_attribs=True)
    class RandomAllocationDpEvent(d.DpEvent):
      event: d.DpEvent
      num_selected: int
      num_steps: int

    monkeypatch.setattr(d, "RandomAllocationDpEvent", RandomAllocationDpEvent, raising=False)
  cls = d.RandomAllocationDpEvent
  ev = from_dp_accounting(
    cls(event=dp_accounting.GaussianDpEvent(2.0), num_selected=10, num_steps=100)
  )
  assert isinstance(ev, RandomAllocation)
  assert (ev.q, ev.inner.sigma, ev.steps, ev.selected) == (0.1, 2.0, 100, 10)
  back = to_dp_accounting(RandomAllocation(1 / 234, Gaussian(1.1), 3 * 234))
  assert isinstance(back, d.SelfComposedDpEvent) and back.count == 3
  assert (back.event.num_selected, back.event.num_steps) == (1, 234)
  assert back.event.event == dp_accounting.GaussianDpEvent(1.1)
  with pytest.raises(TypeError, match="Gaussian"):
    from_dp_accounting(cls(event=dp_accounting.LaplaceDpEvent(1.0), num_selected=1, num_steps=2))


def test_event_epsilon_in_jit_with_float32_and_traced_rates():
  # The in-jit budget guard's route: JAX's default x64-off gives a float32 q and sigma,
  # whose t = k / q is an integer only up to float32 rounding. The answer is finite and
  # never below the concrete one.
  def eps(q, s):
    r = jaxrdp.dpsgd_epsilon(q, s, 50, 1e-5, sampling="allocation", accountant="rdp")
    return r.epsilon

  want = float(eps(0.1, 1.0))
  with jax.enable_x64(False):
    got = [
      jax.jit(lambda s: eps(0.1, s))(jnp.float32(1.0)),
      jax.jit(lambda q: eps(q, 1.0))(0.1),
      jax.jit(eps)(jnp.float32(0.1), jnp.float32(1.0)),
      jax.jit(lambda q: eps(q, 1.0))(1 / 3),
    ]
    # Not 1 / t for an integer t: NaN, as documented for traced invalid input.
    assert np.isnan(float(jax.jit(lambda q: eps(q, 1.0))(0.13)))
  for g in got[:3]:
    assert g.dtype == jnp.float32
    assert np.isfinite(float(g)) and want <= float(g) <= want * (1 + 1e-6)
  third = float(eps(1 / 3, 1.0))
  assert np.isfinite(float(got[3])) and third <= float(got[3]) <= third * (1 + 1e-6)
  # Traced float64 (x64 on): the concrete answer.
  assert float(jax.jit(lambda q: eps(q, 1.0))(0.1)) == pytest.approx(want, rel=1e-12)
