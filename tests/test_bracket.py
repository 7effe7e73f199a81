"""The vectorized threshold search (jaxrdp._core.bracket) on functions with known roots."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrdp._core.bracket import solve_threshold

TOL = 2e-8
V_RANGE = (-20.0, 20.0)


def _kinked(c, s):
  """f(v) = min_i (c_i - s_i v): decreasing, kinked; threshold min_i c_i / s_i."""

  def f(v):
    return jnp.min(c - s * v[..., None], axis=-1)

  return f, np.min(c / s, axis=-1)


def _smooth(t):
  """f(v) = log(exp(-2 v) + exp(-v)) - log t: smooth, convex; closed-form threshold."""

  def f(v):
    return jnp.logaddexp(-2.0 * v, -v) - jnp.log(t)

  # exp(-2v) + exp(-v) = t  <=>  y^2 + y - t = 0 with y = exp(-v).
  y = (-1.0 + np.sqrt(1.0 + 4.0 * t)) / 2.0
  return f, -np.log(y)


def _solve(f, v0, **kw):
  def score(v, live):
    fv = f(v)
    return fv <= 0, fv, (fv, 2.0 * v)  # aux: anything, checked at the answer

  active = jnp.ones(v0.shape, bool)
  return jax.jit(lambda v0: solve_threshold(score, v0, *V_RANGE, active, TOL, **kw))(v0)


def _check(res, f, root):
  v = np.asarray(res.v)
  assert not np.any(np.asarray(res.infeasible))
  # The answer meets the predicate and 2 tol below it does not: the bracket
  # holds the threshold.
  assert np.all(np.asarray(f(jnp.asarray(v))) <= 0)
  assert np.all(np.asarray(f(jnp.asarray(v - 2 * TOL))) > 0)
  assert np.all(v >= root - 1e-12) and np.all(v - root <= 2 * TOL + 1e-12)
  # aux is the score's output at the answer itself.
  fv, twice = res.aux
  np.testing.assert_array_equal(np.asarray(twice), 2.0 * v)
  # (f itself to rounding: jit and eager may fuse differently.)
  np.testing.assert_allclose(np.asarray(fv), np.asarray(f(jnp.asarray(v))), rtol=0, atol=1e-13)


@pytest.mark.parametrize("k1", [0.2, 0.02])
def test_kinked_thresholds_from_far_starts(k1):
  rng = np.random.default_rng(0)
  c = rng.uniform(0.5, 3.0, (200, 5))
  s = rng.uniform(0.2, 4.0, (200, 5))
  f, root = _kinked(jnp.asarray(c), jnp.asarray(s))
  v0 = jnp.asarray(root + rng.uniform(-5.0, 5.0, root.shape))
  res = _solve(f, v0, slope=1.0, k1=k1)
  _check(res, f, root)
  # ITP's bound: expansion plus at most one step over bisection's count.
  assert int(res.iterations) <= 1 + 12 + int(np.ceil(np.log2(10.0 / (2 * TOL)))) + 1


def test_smooth_thresholds_with_newton_start():
  rng = np.random.default_rng(1)
  t = rng.uniform(0.01, 10.0, 300)
  f, root = _smooth(jnp.asarray(t))
  v0 = jnp.asarray(root + rng.uniform(0.0, 0.05, root.shape))  # a start on the acceptable side
  # |f'| = (2 e^-2v + e^-v) / (e^-2v + e^-v), per element, as a caller would estimate it.
  y = np.exp(-np.asarray(v0))
  slope = jnp.asarray((2 * y * y + y) / (y * y + y))
  res = _solve(f, v0, slope=slope, first_min=1.99 * TOL, overshoot=1.1, k1=0.02)
  _check(res, f, root)
  assert int(res.iterations) <= 8


def test_start_within_tol_costs_two_evaluations():
  # The calibration's proxy hands over a start within tol above the threshold:
  # one evaluation there, one Newton-sized step across, and the bracket is done.
  t = jnp.asarray(np.linspace(0.1, 5.0, 50))
  f, root = _smooth(t)
  v0 = jnp.asarray(root + 0.5 * TOL)
  res = _solve(f, v0, slope=1.5, first_min=1.99 * TOL, overshoot=1.1, k1=0.02)
  _check(res, f, root)
  assert int(res.iterations) == 2


def test_expansion_from_a_zero_value_region_reaches_the_threshold():
  # A budgeted value of 0 (the total-variation rule) has f = log 0 = -inf, and the
  # value can jump from 0 to a positive plateau. The expansion from such a start
  # must keep doubling its steps: a secant through -inf once gave a zero Newton
  # step, the search crawled at first_min, ran out of expansion steps and returned
  # the start's neighbourhood, 1.4e5 times below the largest sampling rate.
  roots = jnp.asarray([-2.0, 0.5, 3.0])

  def f(v):
    finite = -(v - roots[: v.shape[0]])  # decreasing, root at roots
    return jnp.where(v >= 5.0, -jnp.inf, finite)

  v0 = jnp.full(3, 5.0 + 1e-3)  # in the zero-value region, as the proxy hands it over
  res = _solve(f, v0, slope=1.0, first_min=1.99 * TOL, overshoot=1.1, k1=0.02)
  v = np.asarray(res.v)
  assert not np.any(np.asarray(res.infeasible))
  np.testing.assert_array_less(np.asarray(roots) - 1e-12, v)
  assert np.all(v - np.asarray(roots) <= 2 * TOL + 1e-12), v


def test_infeasible_and_inactive_elements():
  # f > 0 everywhere in range: no acceptable point; inactive elements are reported too.
  def score(v, live):
    fv = 1.0 + 0.0 * v
    return fv <= 0, fv, ()

  v0 = jnp.zeros(4)
  active = jnp.asarray([True, True, False, False])
  res = jax.jit(lambda v0: solve_threshold(score, v0, *V_RANGE, active, TOL))(v0)
  assert np.all(np.asarray(res.infeasible))


def test_score_sees_the_smallest_acceptable_point_and_its_aux():
  # The calibration reuses what it learnt at the smallest acceptable point so far.
  # Record every call and check, independently, that (v_ok, aux_ok) is that point
  # and the aux returned there, for aux arrays with trailing axes too.
  t = jnp.asarray(np.linspace(0.1, 5.0, 20))
  f, root = _smooth(t)
  calls = []

  def record(v, ok, v_ok, aux_ok):
    calls.append(tuple(np.asarray(x) for x in (v, ok, v_ok, aux_ok)))

  def score(v, live, v_ok, aux_ok):
    fv = f(v)
    jax.debug.callback(record, v, fv <= 0, v_ok, aux_ok[1], ordered=True)
    return fv <= 0, fv, (fv, jnp.stack([v, 2.0 * v], axis=-1))

  active = jnp.ones(t.shape, bool)
  aux_like = (jax.ShapeDtypeStruct(t.shape, t.dtype), jax.ShapeDtypeStruct(t.shape + (2,), t.dtype))
  res = jax.jit(
    lambda v0: solve_threshold(
      score, v0, *V_RANGE, active, TOL, slope=1.5, aux_like=aux_like, score_sees_best=True
    )
  )(jnp.asarray(root + 0.3))
  assert len(calls) == int(res.iterations) >= 3
  smallest = np.full(t.shape, np.inf)
  for v, ok, v_ok, aux_ok in calls:
    np.testing.assert_array_equal(v_ok, smallest)
    seen = np.isfinite(smallest)
    np.testing.assert_array_equal(aux_ok[seen], np.stack([smallest, 2 * smallest], -1)[seen])
    assert np.all(aux_ok[~seen] == 0.0)
    smallest = np.where(ok, np.minimum(smallest, v), smallest)
  np.testing.assert_array_equal(np.asarray(res.v), smallest)
  np.testing.assert_array_equal(np.asarray(res.aux[1]), np.stack([smallest, 2 * smallest], -1))


def test_score_sees_best_needs_aux_like():
  with pytest.raises(ValueError, match="aux_like"):
    solve_threshold(
      lambda v, live, v_ok, aux: (v > 0, -v, ()),
      jnp.zeros(2),
      *V_RANGE,
      jnp.ones(2, bool),
      TOL,
      score_sees_best=True,
    )
