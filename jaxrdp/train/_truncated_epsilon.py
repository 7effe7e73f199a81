"""epsilon of a run with truncated batches, read from its accountant inside jit.

A sampler that truncates its batches at a capacity (random allocation,
:class:`jaxrdp.train.RandomAllocationSampler`) releases what the untruncated
sampler would, except with probability at most eta (the total-variation term
of :func:`jaxrdp.train.truncation_delta`). An (epsilon, delta')-DP guarantee of
the untruncated run then gives (epsilon, delta' + (1 + e^epsilon) eta) for the
truncated one (:func:`jaxrdp.train.truncated_poisson_delta`). This module reads,
from a Renyi-DP accountant state, an epsilon that holds at a total delta
``delta`` with the term included: the epsilon at a delta' with
delta' + (1 + e^epsilon) eta <= delta, by the search the RDP accountant uses for the additive terms it carries
(:mod:`jaxrdp.rdp._additive_delta`), a ``lax.while_loop`` of at most a few
candidates, so that it traces (eta is a traced scalar: it grows with the steps
taken) and compiles one conversion body.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._core.precision import as_float64, x64_context
from ..rdp._accountant import RdpAccountant, RdpState
from ..rdp._additive_delta import epsilon_with_additive_f64
from ..rdp._conversions import EpsilonResult

__all__ = ["epsilon_paying_truncation"]

# Candidates of the search: one or two for any capacity whose term is far below
# delta; a term that is not is reported as inf.
_ITERATIONS = 4


def epsilon_paying_truncation(
  acct: RdpAccountant, state: RdpState, delta, eta, iterations: int = _ITERATIONS
) -> EpsilonResult:
  """epsilon at which the truncated run is (epsilon, ``delta``)-DP (jittable).

  The search of :func:`jaxrdp.rdp._additive_delta.epsilon_with_additive_f64`
  (the accountant's own, for states that carry additive terms), with ``eta``
  added to any term the state carries: each candidate epsilon is checked
  against its total delta, rounded up, so the result is sound whatever the
  search does; if none of the ``iterations`` candidates passes (the term uses up
  delta), the epsilon is inf and the order NaN. A NaN epsilon (a NaN state)
  stays NaN; ``eta = 0`` gives exactly the state's epsilon.

  Args:
    acct: the Renyi-DP accountant of ``state`` (its orders and conversion).
    state: the untruncated run's accountant state.
    delta: the total delta, in (0, 1).
    eta: the truncation term (a float64 scalar >= 0, may be traced).
    iterations: how many candidates to try (static).

  Returns:
    ``EpsilonResult(epsilon, order)``, float64 scalars.
  """
  with x64_context():
    eta = as_float64(eta)
    log_survival = jnp.zeros((), jnp.float64)
    if state.has_additive:
      log_survival = as_float64(state.log_survival)
      eta = eta + as_float64(state.eta)
    return epsilon_with_additive_f64(
      as_float64(state.rdp),
      jnp.asarray(acct.orders, jnp.float64),
      as_float64(delta),
      log_survival,
      eta,
      acct.method,
      iterations,
    )
