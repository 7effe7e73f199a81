"""The tight epsilon of a run, read from its training state (jaxrdp.train.tight_epsilon)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxrdp
from jaxrdp.train._tight import schedule_phases


def _state(steps):
  params = {"w": jnp.zeros(3)}
  state = jaxrdp.train.dpsgd_init(params, optax.sgd(0.1), jax.random.PRNGKey(0))
  return state._replace(step=jnp.int32(steps))


def test_constant_schedule_equals_the_one_line_call():
  got = jaxrdp.train.tight_epsilon(_state(300), q=0.02, sigma=1.2, delta=1e-5)
  want = jaxrdp.dpsgd_epsilon(0.02, 1.2, 300, 1e-5, accountant="pld")
  assert float(got.epsilon) == float(want.epsilon)
  assert float(jaxrdp.train.tight_epsilon(_state(0), q=0.02, sigma=1.2, delta=1e-5).epsilon) == 0.0


def test_schedule_phases_and_their_composition():
  sigma = lambda t: jnp.where(t < 100, 2.0, 1.2)  # noqa: E731
  assert schedule_phases(0.02, sigma, 300) == [(0.02, 2.0, 100), (0.02, 1.2, 200)]
  got = float(jaxrdp.train.tight_epsilon(_state(300), q=0.02, sigma=sigma, delta=1e-5).epsilon)
  # The two phases compose to less than 300 steps at the smaller sigma and more than
  # 200 steps at it alone (the tight accountant is monotone in both).
  lo = float(jaxrdp.dpsgd_epsilon(0.02, 1.2, 200, 1e-5, accountant="pld").epsilon)
  hi = float(jaxrdp.dpsgd_epsilon(0.02, 1.2, 300, 1e-5, accountant="pld").epsilon)
  assert lo < got < hi
  # And it is below the Renyi-DP epsilon of the same run.
  rdp = jaxrdp.train.tight_epsilon(_state(300), q=0.02, sigma=sigma, delta=1e-5, accountant="rdp")
  assert got < float(rdp.epsilon) and np.isfinite(float(rdp.epsilon))


def _sampler_state(sampler, steps):
  params = {"w": jnp.zeros(3)}
  state = jaxrdp.train.dpsgd_init(params, optax.sgd(0.1), jax.random.PRNGKey(0), sampler=sampler)
  return state._replace(step=jnp.int32(steps))


def test_sampler_runs_include_the_truncation_term_or_are_refused():
  import pytest

  n, q, steps = 1000, 0.02, 300
  capacity = jaxrdp.train.default_capacity(n, q, steps, 1e-5)
  poisson = jaxrdp.train.PoissonSampler(n, q, capacity=capacity, seed=0)
  got = jaxrdp.train.tight_epsilon(_sampler_state(poisson, steps), q=q, sigma=1.2, delta=1e-5)
  want = jaxrdp.dpsgd_epsilon(
    q, 1.2, steps, 1e-5, accountant="pld", capacity=capacity, dataset_size=n
  )
  plain = jaxrdp.dpsgd_epsilon(q, 1.2, steps, 1e-5, accountant="pld")
  assert float(got.epsilon) == float(want.epsilon) >= float(plain.epsilon)
  with pytest.raises(ValueError, match="rate"):
    jaxrdp.train.tight_epsilon(_sampler_state(poisson, steps), q=0.03, sigma=1.2, delta=1e-5)
  # Fixed-size and shuffled runs have no tight construction: their Poisson epsilon
  # would under-report them.
  for other in (
    jaxrdp.train.FixedSizeSampler(n, 20, seed=0),
    jaxrdp.train.ShuffleSampler(n, 20, seed=0),
  ):
    with pytest.raises(ValueError, match="sampling="):
      jaxrdp.train.tight_epsilon(_sampler_state(other, steps), q=q, sigma=1.2, delta=1e-5)
