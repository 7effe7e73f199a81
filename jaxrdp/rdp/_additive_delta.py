"""An additive delta beside the RDP curve: (epsilon, delta)-DP parts and truncated batches.

Two events have no RDP curve, but a sound treatment beside one.

1. ``EpsilonDelta(eps, delta)`` with ``delta > 0``. Every (eps, delta)-DP pair of
   output distributions is a post-processing of the four-output randomized-response
   pair (Kairouz, Oh, Viswanath 2015, arXiv:1311.0776, Thm 2.1): with probability
   delta it reveals which neighbour it came from, and otherwise it is eps-DP
   randomized response, the same probability under both neighbours. In a run
   that composes such steps (adaptively) with others, no step reveals anything
   with probability ``1 - delta_mix``, ``delta_mix = 1 - prod_i (1 - delta_i)``,
   and then the run is the composition with each of them replaced by its eps_i-DP
   part, whose RDP curve is the pure-DP bound. So for every epsilon

       delta_run(eps) <= delta_mix + (1 - delta_mix) * delta_pure(eps),

   with ``delta_pure`` the delta of that pure composition (a mixture bound on the
   hockey-stick divergence: the revealing branch contributes at most its weight).
2. ``TruncatedSubsampledGaussian(n, q, B, sigma)``. The truncated sampler and the
   Poisson sampler can be coupled to give the same batch unless the Poisson batch
   exceeds ``B``, so the step is within total variation
   ``eta = P[Binomial(n + 1, q) > B]`` of ``PoissonSampled(q, Gaussian(sigma))``
   (``n + 1``: the larger of two add/remove neighbours, whichever of them
   ``dataset_size`` names). Over a run the terms add, and a run within total
   variation ``eta`` of an (eps, delta)-DP one is (eps, delta + (1 + e^eps) eta)-DP
   (:func:`jaxrdp.train.truncation_delta`).

Together: ``delta_total(eps) <= delta_mix + (1 - delta_mix) delta_pure(eps) + (1 + e^eps) eta``
(the total-variation step applied last, to the run whose other parts are exact).

:func:`pure_part` turns an event into the pure event whose RDP curve the
accountant composes, :func:`additive_terms` gives the two terms
``(log(1 - delta_mix), eta)`` it carries beside it; :func:`epsilon_with_additive_f64` and :func:`delta_with_additive_f64`
read epsilon and delta from the three. The treatment applies where the parts sit
under compositions only (``Composed``, ``SelfComposed``); under sampling, selection
or any other event they are refused (``rdp_values_unsupported``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .._core import precision as _precision
from .._core.validation import concrete_or_none
from ..events._events import Composed, Event, Gaussian, PoissonSampled, SelfComposed
from ..events._mechanism_events import EpsilonDelta, TruncatedSubsampledGaussian
from ..mechanisms._truncated_poisson import _SF_MARGIN, binomial_log_sf
from ._conversions import EpsilonResult, delta_from_rdp_f64, epsilon_from_rdp_f64

__all__ = [
  "has_additive_parts",
  "pure_part",
  "additive_terms",
  "epsilon_with_additive_f64",
  "delta_with_additive_f64",
]

_ADDITIVE = (EpsilonDelta, TruncatedSubsampledGaussian)

# Candidates of the epsilon search (each one conversion, in one while-loop body): one
# when the terms are zero, one or two for any term far below delta.
_ITERATIONS = 4


def has_additive_parts(event: Event) -> bool:
  """Whether ``event`` has an EpsilonDelta or TruncatedSubsampledGaussian under compositions."""
  if isinstance(event, _ADDITIVE):
    return True
  if isinstance(event, SelfComposed):
    return has_additive_parts(event.event)
  if isinstance(event, Composed):
    return any(has_additive_parts(e) for e in event.events)
  return False


def _overflow_probability(n, q, batch):
  """P[Binomial(n + 1, q) > batch] elementwise, rounded up (host; concrete values)."""
  n, q, batch = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in (n, q, batch)))
  out = np.zeros(n.shape)
  for i in np.ndindex(n.shape):
    ni, qi, bi = n[i], q[i], batch[i]
    if not (np.isfinite(ni) and np.isfinite(bi) and 0.0 <= qi <= 1.0):
      out[i] = np.nan  # invalid (validate_event refuses concrete ones before this)
      continue
    trials, cap = int(round(ni)) + 1, int(np.floor(bi))
    if qi == 0.0 or cap >= trials:
      continue
    log_sf = float(binomial_log_sf(cap, trials, qi))
    value = np.exp(log_sf) * (1.0 + _SF_MARGIN) if log_sf > -np.inf else 0.0
    out[i] = min(1.0, float(np.nextafter(max(value, np.nextafter(0.0, 1.0)), np.inf)))
  return out


def _truncation_term(event: TruncatedSubsampledGaussian):
  values = [concrete_or_none(getattr(event, f)) for f in ("dataset_size", "q", "batch_size")]
  if any(v is None for v in values):
    raise NotImplementedError(
      "the Renyi-DP accountant cannot account TruncatedSubsampledGaussian events with traced "
      "dataset_size, q or batch_size (their overflow probability is computed on the host); "
      "give them as concrete values (sigma may be traced)"
    )
  return jnp.asarray(_overflow_probability(*values))


def _log_survival(delta):
  """log(1 - delta), NaN for a delta outside [0, 1] (traceable)."""
  delta = _precision.as_float64(delta)
  invalid = jnp.isnan(delta) | (delta < 0) | (delta > 1)
  return jnp.where(invalid, jnp.nan, jnp.log1p(-jnp.where(invalid, 0.0, delta)))


def pure_part(event: Event) -> Event:
  """``event`` with each EpsilonDelta under compositions given delta 0 and each
  TruncatedSubsampledGaussian replaced by the Poisson-sampled Gaussian it truncates
  (structural: nothing is computed but the replaced deltas, NaN kept NaN)."""
  if isinstance(event, EpsilonDelta):
    delta = _precision.as_float64(event.delta)
    return EpsilonDelta(event.epsilon, jnp.where(jnp.isnan(delta), jnp.nan, 0.0))
  if isinstance(event, TruncatedSubsampledGaussian):
    return PoissonSampled(event.q, Gaussian(event.sigma))
  if isinstance(event, SelfComposed):
    return SelfComposed(pure_part(event.event), event.count)
  if isinstance(event, Composed):
    return Composed(tuple(pure_part(e) for e in event.events))
  return event


def additive_terms(event: Event):
  """``(log_survival, eta)`` of ``event``: float64 arrays of its batch shape.

  ``log_survival = sum_i log(1 - delta_i)`` over its EpsilonDelta parts (so
  ``delta_mix = -expm1(log_survival)``), and ``eta`` the total-variation term of
  its truncated parts; counts of ``SelfComposed`` multiply them (0 repetitions add
  nothing). Traceable in the deltas and counts; the truncated parts' sizes and
  rates must be concrete. Call it inside a float64 scope.
  """
  zero = jnp.zeros(())
  if isinstance(event, EpsilonDelta):
    return _log_survival(event.delta), zero
  if isinstance(event, TruncatedSubsampledGaussian):
    return zero, _truncation_term(event)
  if isinstance(event, SelfComposed):
    log_s, eta = additive_terms(event.event)
    count = _precision.as_float64(event.count)
    scale = lambda x: jnp.where(count == 0, 0.0, count * x)  # noqa: E731
    return scale(log_s), scale(eta)
  if isinstance(event, Composed):
    parts = [additive_terms(e) for e in event.events]
    return sum((p[0] for p in parts), zero), sum((p[1] for p in parts), zero)
  return zero, zero


def _up(x):
  """``x >= 0`` raised by 8 ulps relative: above the rounding of a sum of a few
  nonnegative products (a product, not ``nextafter``, so that it differentiates)."""
  return x * (1.0 + 8.0 * jnp.finfo(jnp.float64).eps)


def _total_delta(d, eps, delta_mix, eta):
  """``delta_mix + (1 - delta_mix) d + (1 + e^eps) eta`` rounded up, ``d`` when both terms are 0."""
  total = _up(delta_mix + (1.0 - delta_mix) * d + (1.0 + jnp.exp(eps)) * eta)
  return jnp.where((delta_mix == 0.0) & (eta == 0.0), d, total)


def _budget(delta, delta_mix, eta, eps):
  """The delta left for the RDP part at a candidate epsilon ``eps`` (twice the
  total-variation term at ``eps``: the next epsilon may grow by up to log 2 and still
  pass), with a margin of 16 ulps of delta for rounding; ``delta`` itself when both
  terms are 0."""
  left = (
    delta - delta_mix - 2.0 * (1.0 + jnp.exp(eps)) * eta - 16.0 * jnp.finfo(jnp.float64).eps * delta
  )
  d = left / (1.0 - delta_mix)
  return jnp.where((delta_mix == 0.0) & (eta == 0.0), delta, d)


def epsilon_with_additive_f64(
  rdp, orders, delta, log_survival, eta, method, iterations: int = _ITERATIONS
) -> EpsilonResult:
  """epsilon at which the run is (epsilon, ``delta``)-DP, its terms included (traceable).

  Candidates: ``d_0`` = what delta leaves for the RDP part beside the
  (epsilon, delta) parts, then ``d_{j+1}`` from the epsilon at ``d_j`` with the
  truncation term (see ``_budget``; with no (epsilon, delta) parts, the sequence of
  the host search for truncated batches, ``truncated_poisson_epsilon``);
  the first candidate whose total delta (rounded up) is at most ``delta`` gives
  the answer. Every candidate is checked, so the result is sound whatever the
  iteration does; when none passes (the terms use up delta) the epsilon is inf and
  the order NaN. NaN anywhere stays NaN. Both terms 0: exactly the RDP conversion.
  """
  delta = _precision.as_float64(delta)
  log_survival = _precision.as_float64(log_survival)
  eta = _precision.as_float64(eta)
  delta_mix = -jnp.expm1(log_survival)
  batch = jnp.broadcast_shapes(jnp.shape(rdp)[:-1], jnp.shape(delta), jnp.shape(delta_mix))
  batch = jnp.broadcast_shapes(batch, jnp.shape(eta))
  delta, delta_mix, eta = (jnp.broadcast_to(x, batch) for x in (delta, delta_mix, eta))
  rdp = jnp.broadcast_to(rdp, batch + jnp.shape(rdp)[-1:])
  inf = jnp.full(batch, jnp.inf)
  nan = jnp.full(batch, jnp.nan)
  # The search picks the candidate delta without derivatives (a while loop does not
  # differentiate in reverse mode); the answer is then the conversion at that delta,
  # differentiable in the curve, and never below the epsilon the search checked.
  fixed = lax.stop_gradient((rdp, delta, delta_mix, eta))
  rdp_s, delta_s, mix_s, eta_s = fixed

  def candidate(d):
    positive = d > 0.0
    res = epsilon_from_rdp_f64(
      rdp_s, orders, jnp.where(positive, jnp.minimum(d, delta_s), delta_s), method
    )
    eps = jnp.asarray(res.epsilon, jnp.float64)
    ok = positive & (_total_delta(d, eps, mix_s, eta_s) <= delta_s)
    return eps, ok

  # The first candidate ignores the truncation term (with none, it is the answer; with
  # one, the next is the host search's second, jaxrdp.accountants._truncation).
  d0 = jnp.where(mix_s == 0.0, delta_s, (delta_s - mix_s) / (1.0 - mix_s))
  eps0, ok0 = candidate(d0)
  init = (
    jnp.asarray(1, jnp.int32),
    _budget(delta_s, mix_s, eta_s, eps0),
    jnp.where(ok0, d0, nan),
    jnp.where(ok0, eps0, inf),
    ok0,
  )

  def cond(carry):
    j, _, _, _, done = carry
    return (j < iterations) & ~jnp.all(done)

  def body(carry):
    j, d, d_out, eps_out, done = carry
    eps, ok = candidate(d)
    take = ~done & ok
    return (
      j + 1,
      jnp.where(done, d, _budget(delta_s, mix_s, eta_s, eps)),
      jnp.where(take, d, d_out),
      jnp.where(take, eps, eps_out),
      done | ok,
    )

  _, _, d_star, eps_checked, found = lax.while_loop(cond, body, init)
  # Both terms 0: the candidate is delta itself, kept differentiable.
  plain = (mix_s == 0.0) & (eta_s == 0.0)
  at = jnp.where(plain, delta, jnp.where(found, d_star, delta_s))
  res = epsilon_from_rdp_f64(rdp, orders, at, method)
  # (where, not maximum: maximum splits the derivative between equal arguments)
  eps_at = jnp.asarray(res.epsilon, jnp.float64)
  eps = jnp.where(found, jnp.where(eps_at >= eps_checked, eps_at, eps_checked), inf)
  order = jnp.where(found, jnp.asarray(res.order, jnp.float64), nan)
  bad = jnp.isnan(eps0) | jnp.isnan(delta_mix) | jnp.isnan(eta)
  return EpsilonResult(jnp.where(bad, nan, eps), jnp.where(bad, nan, order))


def delta_with_additive_f64(rdp, orders, epsilon, log_survival, eta, method):
  """delta of the run at ``epsilon``, its terms included, rounded up and at most 1 (traceable)."""
  res = delta_from_rdp_f64(rdp, orders, epsilon, method)
  delta_mix = -jnp.expm1(_precision.as_float64(log_survival))
  eta = _precision.as_float64(eta)
  eps = _precision.as_float64(epsilon)
  total = jnp.minimum(1.0, _total_delta(res.delta, eps, delta_mix, eta))
  return type(res)(total, res.order)
