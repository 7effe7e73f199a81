"""epsilon of a run with truncated batches, read from its accountant inside jit.

A sampler that truncates its batches at a capacity (random allocation,
:class:`jaxrdp.train.RandomAllocationSampler`) releases what the untruncated
sampler would, except with probability at most eta (the total-variation term
of :func:`jaxrdp.train.truncation_delta`). An (epsilon, delta')-DP guarantee of
the untruncated run then gives (epsilon, delta' + (1 + e^epsilon) eta) for the
truncated one (:func:`jaxrdp.train.truncated_poisson_delta`). This module reads,
from a Renyi-DP accountant state, an epsilon that holds at a total delta
``delta`` with the term included: the epsilon at a delta' with
delta' + (1 + e^epsilon) eta <= delta, by the fixed-point iteration of
:func:`jaxrdp.accountants._truncation.truncated_poisson_epsilon` (the host
version), as a ``lax.while_loop`` of at most a few candidates so that it traces (eta is
a traced scalar: it grows with the steps taken) and compiles one conversion
body.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .._core.precision import x64_context
from ..rdp._accountant import RdpAccountant, RdpState
from ..rdp._conversions import EpsilonResult

__all__ = ["epsilon_paying_truncation"]

# Fixed-point iterations: the host version needs one or two for any capacity
# whose term is far below delta; a term that is not is reported as inf.
_ITERATIONS = 4


def _total_delta(d, eps, eta):
  """``d + (1 + e^eps) eta`` rounded up by two ulps (as ``truncated_poisson_delta``),
  ``d`` itself when eta = 0."""
  total = d + (1.0 + jnp.exp(eps)) * eta
  total = jnp.nextafter(jnp.nextafter(total, jnp.inf), jnp.inf)
  return jnp.where(eta == 0.0, d, total)


def epsilon_paying_truncation(
  acct: RdpAccountant, state: RdpState, delta, eta, iterations: int = _ITERATIONS
) -> EpsilonResult:
  """epsilon at which the truncated run is (epsilon, ``delta``)-DP (jittable).

  With d_0 = delta and d_{j+1} = (delta - 2 (1 + e^{eps_j}) eta) (1 - 1e-15),
  eps_j = epsilon of ``state`` at d_j, it returns the first eps_j with
  d_j > 0 and ``_total_delta(d_j, eps_j, eta) <= delta`` (the delta of the
  truncated run at eps_j, rounded up), for j < ``iterations``. Every
  candidate is checked, so the result is sound whatever the iteration does; if
  none of the ``iterations`` candidates passes (the term uses up delta), the epsilon is inf and the order
  NaN. A NaN epsilon (a NaN state) stays NaN.

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
    delta = jnp.asarray(delta, jnp.float64)
    eta = jnp.asarray(eta, jnp.float64)
    first = acct.get_epsilon(state, delta)

    def candidate(d):
      """(epsilon at d, its order, whether it holds at total delta)."""
      positive = d > 0.0
      res = acct.get_epsilon(state, jnp.where(positive, d, delta))
      eps = jnp.asarray(res.epsilon, jnp.float64)
      return (
        eps,
        jnp.asarray(res.order, jnp.float64),
        positive & (_total_delta(d, eps, eta) <= delta),
      )

    def next_delta(eps):
      return (delta - 2.0 * (1.0 + jnp.exp(eps)) * eta) * (1.0 - 1e-15)

    eps0 = jnp.asarray(first.epsilon, jnp.float64)
    ok0 = _total_delta(delta, eps0, eta) <= delta
    inf = jnp.asarray(jnp.inf, jnp.float64)
    nan = jnp.asarray(jnp.nan, jnp.float64)
    init = (
      jnp.asarray(1, jnp.int32),
      next_delta(eps0),
      jnp.where(ok0, eps0, inf),
      jnp.where(ok0, jnp.asarray(first.order, jnp.float64), nan),
      ok0,
    )

    def cond(carry):
      j, _, _, _, done = carry
      return (j < iterations) & ~done

    def body(carry):
      j, d, _, _, _ = carry
      eps, order, ok = candidate(d)
      return j + 1, next_delta(eps), jnp.where(ok, eps, inf), jnp.where(ok, order, nan), ok

    # One conversion when the term is zero, two for any sensible capacity.
    _, _, eps_out, order_out, _ = lax.while_loop(cond, body, init)
    bad = jnp.isnan(eps0)
    return EpsilonResult(jnp.where(bad, nan, eps_out), jnp.where(bad, nan, order_out))
