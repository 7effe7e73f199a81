"""One step needs no composition: its exact (epsilon, delta) from the closed-form curve.

The hockey-stick divergence of one Sampled Gaussian step has a closed form in
each direction (Kalinin 2024; ``jaxrdp.mechanisms.sgm_single_step_delta``),
accurate to about ``3e-13`` relative down to ``1e-300``; so has one step of the
Poisson-subsampled Laplace mechanism (``_laplace_step``). For a configuration of
one phase of one step, the accountant replaces the composed PLD's interval
(whose grid cannot resolve an epsilon far below its window, such as ``1e-4``
after one step with a small ``q``) by the root of that curve:

* epsilon given delta: the smallest epsilon whose computed delta is at most
  ``delta e^-m`` (upper bound) and the largest whose computed delta exceeds
  ``delta e^m`` (lower bound), by bisection (``_core.rootfind``), with
  ``m = 1e-12`` covering the curve's rounding;
* delta given epsilon: the curve times ``e^{+-m}``.

Both stay within the PLD interval they replace (each side keeps the tighter
certified bound). Derivatives are those of the root (implicit function theorem).

The Laplace curve is ``q (1 - e^x)`` (or ``e^eps c (1 - e^x)``) with ``x = (t -
r) / 2`` near the top of its support, where ``t`` is a log ratio of ``eps`` and ``r
= 1 / scale``: its relative error grows like ``u (|t| + r) / |x|`` as ``x -> 0``,
which no margin on delta covers. Its error is a shift in ``eps`` instead: the
rounding of ``t``, ``r`` and ``x`` moves ``x`` by at most ``8 u (|t| + r)``, which is a
shift of ``t`` by twice that, and ``|dt / d eps| >= 1`` in both directions, so the
computed curve is the true one at an ``eps`` within ``_slack`` (times ``e^{+-m}``).
The Laplace answers are therefore widened by that slack: epsilon by ``+-_slack``,
delta read at ``eps -+ _slack``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._core import rootfind
from .._core.numerics import UNIT_ROUNDOFF
from .._core.stored_programs import stored_jit
from ..mechanisms import _sgm_single_step
from . import _laplace_step, _producers

__all__ = ["refine", "exact", "log_delta_max", "closed_form"]

# The families whose one step has a closed form here.
_FAMILIES = (_producers.GAUSSIAN, _producers.LAPLACE, _producers.FIXED_SIZE)


def closed_form(families) -> bool:
  """Whether rows of these phases' families have a closed form at one step (one phase)."""
  return len(families) == 1 and families[0] in _FAMILIES


def log_delta_max(eps, q, scale, family):
  """``log delta(eps)`` of one step of ``family``, the larger of the two directions."""
  if family in (_producers.GAUSSIAN, _producers.FIXED_SIZE):
    # (the fixed-size envelope's profile is the Sampled Gaussian's larger direction)
    return _sgm_single_step._log_delta_kernel(eps, q, scale, "max")
  return jnp.maximum(
    _laplace_step.log_delta_curve(eps, q, scale, "remove"),
    _laplace_step.log_delta_curve(eps, q, scale, "add"),
  )


def _slack(eps, q, scale, family):
  """Shift of ``eps`` covering the curve's rounding beyond its relative margin (see
  the module docstring): 0 for the Gaussian, whose relative error is bounded."""
  if family != _producers.LAPLACE:
    return jnp.zeros_like(eps)
  # |t| <= |eps| - log q + 1 where the curve is positive (t < r remove, t > -r add).
  size = 1.0 / scale + jnp.abs(eps) - jnp.log(q) + 1.0
  return 64.0 * UNIT_ROUNDOFF * size


# Covers the closed form's rounding: at most 7.9e-13 relative on 400 random
# points across q in [1e-10, 1], sigma in [1e-3, 1e4], epsilon in [1e-8, 1e4]
# (against 50-digit mpmath, 2026-11-28; the largest at q = 1, sigma > 1000).
_LOG_MARGIN = 4e-12
# Bisection brackets span at most e^50 (rootfind).
_LOG_SPAN = 49.0


def refine(q, sigma, steps, target, up, low, mode, family=_producers.GAUSSIAN):
  """``(up, low)`` with the rows of one step (``steps == 1``) replaced by the exact interval.

  ``q, sigma, steps, target, up, low``: ``(B,)``; ``mode``: ``"epsilon"`` (the
  target is delta) or ``"delta"`` (the target is epsilon); ``family``: the phase's
  producer (one with a closed form, :func:`closed_form`; ``sigma`` is its scale).
  """
  one = steps == 1.0
  q_s = jnp.where(one, q, 0.5)
  sigma_s = jnp.where(one, sigma, 1.0)

  def log_delta(eps):
    return log_delta_max(eps, q_s, sigma_s, family)

  def slack(eps):
    return _slack(eps, q_s, sigma_s, family)

  if mode == "delta":
    eps = jnp.where(one & jnp.isfinite(target), target, 1.0)
    # (delta falls with epsilon: the curve read a slack below and above bounds it)
    new_up = jnp.minimum(jnp.exp(log_delta(eps - slack(eps)) + _LOG_MARGIN), up)
    new_low = jnp.maximum(jnp.exp(log_delta(eps + slack(eps)) - _LOG_MARGIN), low)
  else:
    log_t = jnp.log(jnp.where(one, target, 0.5))
    hi = jnp.where(one & (up > 0) & jnp.isfinite(up), up, 1.0)
    floor = hi * jnp.exp(-_LOG_SPAN)
    lo = jnp.where(one & (low > floor), low, floor)
    upper = rootfind.smallest_feasible(log_delta, log_t - _LOG_MARGIN, lo, hi)
    # At the float just below the smallest point whose delta is at most
    # delta e^m, the computed delta exceeds delta e^m, so the true one exceeds
    # delta: the true epsilon is above it. root (1 - 2^-52) is at or below that
    # float (and, unlike nextafter, differentiable).
    root = rootfind.smallest_feasible(log_delta, log_t + _LOG_MARGIN, lo, hi)
    lower = jnp.where(root > lo, root * (1.0 - 2.0**-52) - slack(root), low)
    upper = upper + slack(upper)
    zero = log_delta(-slack(jnp.zeros_like(hi))) <= log_t - _LOG_MARGIN
    # A PLD answer of 0 or inf, or one whose bracket misses the root, keeps the PLD value.
    usable = (up > 0) & jnp.isfinite(up)
    new_up = jnp.where(zero, 0.0, jnp.where(usable, jnp.minimum(upper, up), up))
    new_low = jnp.where(zero, 0.0, jnp.where(usable, jnp.maximum(lower, low), low))
    new_low = jnp.minimum(new_low, new_up)
  return jnp.where(one, new_up, up), jnp.where(one, new_low, low)


# Doublings of the bracket's top in :func:`exact` (epsilon up to 2^64).
_DOUBLINGS = 64


@stored_jit(static_argnames=("mode", "family"))
def exact(q, sigma, target, mode, family=_producers.GAUSSIAN):
  """``(up, low)`` of one step (rows ``(B,)``) from the closed-form curve alone, no composition.

  Epsilon mode: the bracket's top is the first power of two (from 1, up to
  ``2^64``) whose delta is at most the target, found by doubling; :func:`refine`
  then solves inside it with 0 as the lower end. A top beyond ``2^64`` gives
  ``inf`` (sound). Delta mode: the curve times ``e^{+-m}``, capped at 1.
  """
  ones = jnp.ones_like(q)
  if mode == "delta":
    return refine(q, sigma, ones, target, ones, jnp.zeros_like(q), mode, family)

  def log_delta(eps):
    return log_delta_max(eps, q, sigma, family)

  log_t = jnp.log(target) - _LOG_MARGIN
  hi = jax.lax.fori_loop(
    0, _DOUBLINGS, lambda _, h: jnp.where(log_delta(h) <= log_t, h, 2.0 * h), ones
  )
  found = log_delta(hi) <= log_t
  up, low = refine(q, sigma, ones, target, hi, jnp.zeros_like(q), mode, family)
  return jnp.where(found, up, jnp.inf), jnp.where(found, low, 0.0)
