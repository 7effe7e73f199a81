"""The tight epsilon of a run, read from its training state (jaxrdp.train.tight_epsilon)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxrdp
from jaxrdp.train._tight import schedule_phases


def _composed(state, phases):
  """``state`` after the steps of ``phases`` [(q, sigma, count), ...]: the step
  counter and the Renyi-DP accountant, as the training step leaves them."""
  acc = state.accountant
  for q, sigma, count in phases:
    acc = jaxrdp.train.privacy_guard(acc, q, sigma, delta=1e-5, count=count).accountant
  steps = sum(count for _, _, count in phases)
  return state._replace(step=jnp.int32(steps), accountant=acc)


def _state(steps, phases=None):
  params = {"w": jnp.zeros(3)}
  state = jaxrdp.train.dpsgd_init(params, optax.sgd(0.1), jax.random.PRNGKey(0))
  return _composed(state, [(0.02, 1.2, steps)] if phases is None else phases)


def test_constant_schedule_equals_the_one_line_call():
  got = jaxrdp.train.tight_epsilon(_state(300), q=0.02, sigma=1.2, delta=1e-5)
  want = jaxrdp.dpsgd_epsilon(0.02, 1.2, 300, 1e-5, accountant="pld")
  assert float(got.epsilon) == float(want.epsilon)
  assert float(jaxrdp.train.tight_epsilon(_state(0), q=0.02, sigma=1.2, delta=1e-5).epsilon) == 0.0


def test_schedule_phases_and_their_composition():
  sigma = lambda t: jnp.where(t < 100, 2.0, 1.2)  # noqa: E731
  assert schedule_phases(0.02, sigma, 300) == [(0.02, 2.0, 100), (0.02, 1.2, 200)]
  state = _state(300, [(0.02, 2.0, 100), (0.02, 1.2, 200)])
  got = float(jaxrdp.train.tight_epsilon(state, q=0.02, sigma=sigma, delta=1e-5).epsilon)
  # The two phases compose to less than 300 steps at the smaller sigma and more than
  # 200 steps at it alone (the tight accountant is monotone in both).
  lo = float(jaxrdp.dpsgd_epsilon(0.02, 1.2, 200, 1e-5, accountant="pld").epsilon)
  hi = float(jaxrdp.dpsgd_epsilon(0.02, 1.2, 300, 1e-5, accountant="pld").epsilon)
  assert lo < got < hi
  # And it is below the Renyi-DP epsilon of the same run.
  rdp = jaxrdp.train.tight_epsilon(state, q=0.02, sigma=sigma, delta=1e-5, accountant="rdp")
  assert got < float(rdp.epsilon) and np.isfinite(float(rdp.epsilon))


def _sampler_state(sampler, steps, sigma=1.2):
  params = {"w": jnp.zeros(3)}
  state = jaxrdp.train.dpsgd_init(params, optax.sgd(0.1), jax.random.PRNGKey(0), sampler=sampler)
  rate = sampler.q if hasattr(sampler, "q") else sampler.batch_size / sampler.n
  return _composed(state, [(rate, sigma, steps)])


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


def test_q_and_sigma_must_be_what_the_state_composed():
  # FINDINGS 6: sigma 4.5 instead of the 1.5 the run used gave 0.40 where the state's
  # own accountant held 1.88, silently. The call now checks q and sigma against the
  # RDP the state's accountant composed and names them.
  import pytest

  state = _state(300, [(0.02, 1.5, 300)])
  good = jaxrdp.train.tight_epsilon(state, q=0.02, sigma=1.5, delta=1e-5)
  assert float(good.epsilon) == float(
    jaxrdp.dpsgd_epsilon(0.02, 1.5, 300, 1e-5, accountant="pld").epsilon
  )
  for q, sigma in ((0.02, 4.5), (0.01, 1.5), (0.02, 1.5 * (1 + 1e-6))):
    with pytest.raises(ValueError, match="q or sigma"):
      jaxrdp.train.tight_epsilon(state, q=q, sigma=sigma, delta=1e-5)
  # A schedule whose phases differ from those composed.
  with pytest.raises(ValueError, match="q or sigma"):
    jaxrdp.train.tight_epsilon(
      state, q=0.02, sigma=lambda t: jnp.where(t < 100, 3.0, 1.5), delta=1e-5
    )
  # With a PoissonSampler the rate is the sampler's, so a mismatch is sigma's.
  poisson = jaxrdp.train.PoissonSampler(1000, 0.02, capacity=60, seed=0)
  with pytest.raises(ValueError, match="so sigma"):
    jaxrdp.train.tight_epsilon(_sampler_state(poisson, 300, 1.5), q=0.02, sigma=4.5, delta=1e-5)


def test_a_trained_state_passes_the_check():
  # The state a jitted training step leaves, with a two-phase schedule.
  data = {"x": jnp.linspace(-1.0, 1.0, 50)}
  params = {"w": jnp.zeros(())}

  def loss(p, ex):
    return (p["w"] - ex["x"]) ** 2

  sigma = lambda t: jnp.where(t < 3, 2.0, 1.1)  # noqa: E731
  step = jax.jit(
    jaxrdp.train.make_dpsgd_step(
      loss, optax.sgd(0.1), clip_norm=1.0, q=0.1, sigma=sigma, delta=1e-5
    )
  )
  state = jaxrdp.train.dpsgd_init(params, optax.sgd(0.1), jax.random.PRNGKey(1))
  for _ in range(6):
    state, _ = step(state, data)
  assert int(state.step) == 6
  got = jaxrdp.train.tight_epsilon(state, q=0.1, sigma=sigma, delta=1e-5, accountant="rdp")
  want = jaxrdp.dpsgd_epsilon(0.1, 1.1, 6, 1e-5)  # more noise on the first three steps
  assert 0 < float(got.epsilon) < float(want.epsilon)
