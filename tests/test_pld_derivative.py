"""The tight accountant's derivative: the implicit function at the read point.

Oracle: central differences (step 1e-3 relative) of the certified upper bound computed
at a much finer accuracy (``rtol=1e-7``, function values only), every difference of a
test in one broadcast call; invariants: the derivative of nothing released is 0, of an
invalid traced argument NaN. The cost is guarded by a count: a derivative composes one
delta job per direction more than the value, never a pass back through the search.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp.pld import _kernel, pld_delta, pld_epsilon, pld_epsilon_phases

# The goal: within 1e-3 of a central difference.
GRAD_RTOL = 1e-3
STEP = 1e-3  # relative step of the central differences
FINE = 1e-7  # rtol of the differenced values


def _central_differences(fn, point, names):
  """``d fn / d name`` at ``point`` for each name, from one broadcast call of ``fn``."""
  rows = {k: [] for k in point}
  for name in names:
    for sign in (1.0, -1.0):
      for k, v in point.items():
        v = np.asarray(v, np.float64)
        rows[k].append(v * (1.0 + sign * STEP) if k == name else v)
  values = np.asarray(fn(**{k: np.stack(v) for k, v in rows.items()}))
  pairs = values.reshape((len(names), 2) + values.shape[1:])
  return {
    name: (pairs[i, 0] - pairs[i, 1]) / (2.0 * STEP * np.asarray(point[name], np.float64))
    for i, name in enumerate(names)
  }


def test_epsilon_gradient_matches_central_differences():
  # MNIST's rate (fewer steps), a large rate at small delta, and no subsampling
  # (q = 1, where both directions agree).
  point = dict(
    q=np.array([256 / 60000, 0.05, 1.0]),
    sigma=np.array([1.1, 0.8, 4.0]),
    steps=np.array([2000.0, 300.0, 50.0]),
    delta=np.array([1e-5, 1e-6, 1e-5]),
  )
  with jax.enable_x64(True):
    grads = jax.grad(
      lambda q, s, d: jnp.sum(pld_epsilon(q, s, point["steps"], d).epsilon), argnums=(0, 1, 2)
    )(point["q"], point["sigma"], point["delta"])
  fine = lambda **a: pld_epsilon(**a, rtol=FINE).epsilon
  fd = _central_differences(fine, point, ("sigma", "delta"))
  # (q = 1 ends the domain: the derivative in q is checked on the other two)
  fd |= _central_differences(fine, {k: v[:2] for k, v in point.items()}, ("q",))
  for name, g in zip(("q", "sigma", "delta"), grads):
    g = np.asarray(g)[: len(fd[name])]
    np.testing.assert_allclose(g, fd[name], rtol=GRAD_RTOL, err_msg=name)
    assert np.all(g != 0.0)


def test_delta_and_phases_gradients_match_central_differences():
  point = dict(q=0.01, sigma=1.3, steps=500.0, epsilon=2.0)
  with jax.enable_x64(True):
    grads = jax.grad(lambda *a: pld_delta(*a).delta, argnums=(0, 1, 3))(*point.values())
  fd = _central_differences(
    lambda **a: pld_delta(**a, rtol=FINE).delta, point, ("q", "sigma", "epsilon")
  )
  for name, g in zip(("q", "sigma", "epsilon"), grads):
    np.testing.assert_allclose(float(g), fd[name], rtol=GRAD_RTOL, err_msg=name)

  def phases(sigma, **kw):
    return pld_epsilon_phases([(0.02, sigma, 100), (0.01, 1.0, 200)], 1e-6, **kw).epsilon

  with jax.enable_x64(True):
    g = float(jax.grad(phases)(1.2))
  fd = _central_differences(lambda sigma: phases(sigma, rtol=FINE), {"sigma": 1.2}, ("sigma",))
  np.testing.assert_allclose(g, fd["sigma"], rtol=GRAD_RTOL)


def test_traced_gradient_agrees_with_the_eager_one_and_edges():
  # Under jit and vmap the derivative runs on the static grid; on the same grid size
  # it is the eager (host-planned) derivative. An invalid traced sigma gives NaN.
  n = 2**13
  f = lambda s: pld_epsilon(0.01, s, 500, 1e-5, grid_size=n).epsilon
  with jax.enable_x64(True):
    traced = np.asarray(jax.jit(jax.vmap(jax.grad(f)))(jnp.array([0.9, 1.3, -1.0])))
    eager = [float(jax.grad(f)(s)) for s in (0.9, 1.3)]
    # Nothing released: epsilon is 0 whatever sigma is.
    assert float(jax.grad(lambda s: pld_epsilon(0.0, s, 100, 1e-5).epsilon)(1.0)) == 0.0
  np.testing.assert_allclose(traced[:2], eager, rtol=GRAD_RTOL)
  assert np.all(traced[:2] < 0) and np.isnan(traced[2])


def test_gradient_costs_one_delta_job_per_direction_more_than_the_value(monkeypatch):
  """A count, not a timing: the derivative adds one delta job per direction."""
  calls = []
  orig = _kernel.run_job

  def counted(row, is_add, mode, *args, **kwargs):
    calls.append(mode)
    return orig(row, is_add, mode, *args, **kwargs)

  monkeypatch.setattr(_kernel, "run_job", counted)
  f = lambda s: pld_epsilon(256 / 60000, s, 2000, 1e-5).epsilon
  with jax.enable_x64(True):
    f(1.1)
    value_jobs = list(calls)
    calls.clear()
    jax.grad(f)(1.1)
  assert calls[: len(value_jobs)] == value_jobs
  assert calls[len(value_jobs) :] == ["partials", "partials"]
