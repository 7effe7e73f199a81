"""The Laplace mechanism, plain and Poisson-subsampled, on the tight engine.

Oracles: the hockey-stick divergence of one step by mpmath quadrature of the two
Laplace densities (split where they cross); its moment-generating function the same
way; dp_accounting's PLD of the composed mechanism at a fine interval (its
pessimistic and optimistic estimates bracket the truth); and the closed form
``1 - e^{(eps - a) / 2}`` of one plain step. Invariants: jit and vmap against the
concrete call.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

import jaxrdp
from jaxrdp.events import Composed, Gaussian, Laplace, PoissonSampled, SelfComposed
from jaxrdp.pld import _laplace_step

ACCT = jaxrdp.accountants.PldAccountant()


def _hockey_stick(eps, q, scale, add):
  """``delta(eps)`` of one step by 30-digit quadrature, split at the densities' crossing."""
  with mp.workdps(30):
    e, q, b = mp.e ** mp.mpf(eps), mp.mpf(q), mp.mpf(scale)

    def mu(c, x):
      return mp.e ** (-abs(x - c) / b) / (2 * b)

    def gap(x):
      p = (1 - q) * mu(0, x) + q * mu(1, x)
      return mu(0, x) - e * p if add else p - e * mu(0, x)

    cuts = [-mp.inf, -1, 0, 1, 2, mp.inf]
    lo, hi = mp.mpf("1e-25"), 1 - mp.mpf("1e-25")
    if gap(lo) * gap(hi) < 0:
      cuts.append(mp.findroot(gap, (lo, hi), solver="bisect"))
    return mp.quad(lambda x: max(gap(x), 0), sorted(set(cuts)))


def test_one_step_curve_against_quadrature():
  rng = np.random.default_rng(7)
  for _ in range(40):
    q = float(rng.choice([1.0, 0.5, 0.1, 1e-3]))
    scale = float(np.exp(rng.uniform(np.log(0.05), np.log(20.0))))
    top = float(np.log1p(q * np.expm1(1.0 / scale)))  # the largest loss
    eps = float(rng.uniform(-0.2, 1.1)) * top
    add = bool(rng.integers(2))
    got = float(np.exp(_laplace_step.log_delta_curve(jnp.float64(eps), q, scale, add)))
    want = float(_hockey_stick(eps, q, scale, add))
    if want < 1e-250:
      assert got < 1e-250, (q, scale, eps, add, got)
    else:
      assert got == pytest.approx(want, rel=1e-12), (q, scale, eps, add)


@pytest.mark.parametrize("q", [1.0, 0.3])
def test_planning_mgf_against_quadrature(q):
  # Only plans the grid: at q = 1 the cells' exponentials are exact; below, 1e-4.
  scale = 0.5
  lam = np.array([-3.0, -0.5, 0.5, 2.0, 10.0])
  got = np.asarray(_laplace_step.log_mgf(jnp.float64(q), jnp.float64(scale), jnp.asarray(lam), 128))
  with mp.workdps(30):
    b = mp.mpf(scale)

    def mu(c, x):
      return mp.e ** (-abs(x - c) / b) / (2 * b)

    def mgf(a):
      ratio = lambda x: ((1 - q) * mu(0, x) + q * mu(1, x)) / mu(0, x)  # noqa: E731
      return mp.log(mp.quad(lambda x: mu(0, x) * ratio(x) ** (1 + a), [-mp.inf, 0, 1, mp.inf]))

    want = np.array([float(mgf(a)) for a in lam])
  np.testing.assert_allclose(got, want, rtol=1e-12 if q == 1.0 else 1e-4, atol=1e-12)


@functools.cache
def _dp_accounting(scale, q, steps, delta, interval=1e-5):
  """dp_accounting's (optimistic, pessimistic) epsilon: they bracket the truth."""
  from dp_accounting.pld import privacy_loss_distribution as pld

  out = []
  for pessimistic in (False, True):
    dist = pld.from_laplace_mechanism(
      scale,
      sampling_prob=q,
      value_discretization_interval=interval,
      pessimistic_estimate=pessimistic,
      use_connect_dots=pessimistic,  # (its optimistic estimate is privacy buckets)
    )
    out.append(dist.self_compose(steps).get_epsilon_for_delta(delta))
  return tuple(out)


@pytest.mark.slow
@pytest.mark.parametrize("scale, q, steps", [(10.0, 1.0, 20), (1.0, 0.01, 1000)])
def test_composed_bracket_meets_dp_accounting(scale, q, steps):
  optimistic, pessimistic = _dp_accounting(scale, q, steps, 1e-5)
  event = SelfComposed(PoissonSampled(q, Laplace(scale)) if q < 1 else Laplace(scale), steps)
  res = ACCT.epsilon(event, 1e-5)
  up, low = float(res.epsilon), float(res.epsilon_lower)
  # Never below the truth, within the default rtol of it; the lower bound below it.
  assert up >= optimistic and up <= pessimistic * (1 + 1e-5)
  assert low <= pessimistic and low >= 0.99 * optimistic


@pytest.mark.slow
def test_one_step_is_the_closed_form():
  # Plain Laplace: delta = 1 - e^{(eps - a) / 2}, a = 1 / scale. Subsampled: the root of
  # the larger direction's curve by quadrature (the remove direction here).
  scale, delta = np.array([0.25, 1.0, 4.0]), 1e-6
  res = ACCT.epsilon(Laplace(scale), delta)
  truth = 1.0 / scale + 2.0 * np.log1p(-delta)
  up, low = np.asarray(res.epsilon), np.asarray(res.epsilon_lower)
  assert np.all(low <= truth) and np.all(truth <= up)
  np.testing.assert_allclose(up, truth, rtol=1e-11)
  np.testing.assert_allclose(low, truth, rtol=1e-11)
  q, scale, delta = 0.1, 0.5, 1e-3
  res = ACCT.epsilon(PoissonSampled(q, Laplace(scale)), delta)
  up, low = float(res.epsilon), float(res.epsilon_lower)
  assert float(_hockey_stick(up, q, scale, False)) <= delta * (1 + 1e-9)
  assert float(_hockey_stick(low, q, scale, False)) >= delta * (1 - 1e-9)
  assert up - low <= 1e-10 * up
  # Delta at epsilon: the same curve.
  d = ACCT.delta(PoissonSampled(q, Laplace(scale)), up)
  assert float(d.delta_lower) <= delta * (1 + 1e-9) and float(d.delta) >= delta * (1 - 1e-9)


@pytest.mark.slow
def test_jit_vmap_and_grad_of_the_composed_epsilon():
  steps, delta = 20, 1e-5

  def eps(scale):
    return ACCT.epsilon(SelfComposed(Laplace(scale), steps), delta).epsilon

  scales = np.array([5.0, 10.0])
  concrete = np.array([float(eps(s)) for s in scales])
  with jax.enable_x64(True):
    # Traced: the static grid (``jaxrdp.pld.TRACED_GRID_SIZE``), another certified bound.
    jitted = np.array([float(jax.jit(eps)(jnp.float64(s))) for s in scales])
    mapped = np.asarray(jax.vmap(eps)(jnp.asarray(scales)))
    bad = float(jax.jit(eps)(jnp.float64(-1.0)))
  np.testing.assert_allclose(jitted, concrete, rtol=2e-5)
  np.testing.assert_allclose(mapped, jitted, rtol=1e-12)
  for s, up in zip(scales, jitted):
    assert up >= _dp_accounting(float(s), 1.0, steps, delta)[0]
  assert np.isnan(bad)
  # No derivative yet (the fixed grid of the partials job misses the atoms at the ends
  # of the support moving with the scale): refused, not a wrong number.
  with pytest.raises(NotImplementedError, match="Laplace"):
    jax.grad(eps)(10.0)


@pytest.mark.slow
def test_a_gaussian_and_a_laplace_phase_compose_on_one_grid():
  # One program for both families (the phases' producers are static); under jit it
  # matches the concrete call, which matches the generic path's bracket (held out:
  # the generic path composes each configuration on the host).
  from jaxrdp.pld import _generic

  def event(sigma):
    return Composed((SelfComposed(PoissonSampled(0.02, Gaussian(sigma)), 300), Laplace(4.0)))

  res = ACCT.epsilon(event(1.0), 1e-5)
  up, low = float(res.epsilon), float(res.epsilon_lower)
  g_up, g_low = _generic.generic_epsilon(event(1.0), 1e-5, ACCT.rtol, ACCT.max_grid_size)
  assert low <= g_up and g_low <= up
  assert up <= g_up * (1 + 2e-5)
  with jax.enable_x64(True):
    traced = float(jax.jit(lambda s: ACCT.epsilon(event(s), 1e-5).epsilon)(jnp.float64(1.0)))
  assert traced == pytest.approx(up, rel=2e-5) and traced >= g_low
