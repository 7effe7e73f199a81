"""One step needs no composition: its exact (epsilon, delta) from the closed-form curve.

The hockey-stick divergence of one Sampled Gaussian step has a closed form in
each direction (Kalinin 2024; ``jaxrdp.mechanisms.sgm_single_step_delta``),
accurate to about ``3e-13`` relative down to ``1e-300``. For a configuration of
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
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._core import rootfind
from .._core.stored_programs import stored_jit
from ..mechanisms import _sgm_single_step

__all__ = ["refine", "exact"]

# Covers the closed form's rounding: at most 7.9e-13 relative on 400 random
# points across q in [1e-10, 1], sigma in [1e-3, 1e4], epsilon in [1e-8, 1e4]
# (against 50-digit mpmath, 2026-11-28; the largest at q = 1, sigma > 1000).
_LOG_MARGIN = 4e-12
# Bisection brackets span at most e^50 (rootfind).
_LOG_SPAN = 49.0


def refine(q, sigma, steps, target, up, low, mode):
  """``(up, low)`` with the rows of one step (``steps == 1``) replaced by the exact interval.

  ``q, sigma, steps, target, up, low``: ``(B,)``; ``mode``: ``"epsilon"`` (the
  target is delta) or ``"delta"`` (the target is epsilon).
  """
  one = steps == 1.0
  q_s = jnp.where(one, q, 0.5)
  sigma_s = jnp.where(one, sigma, 1.0)

  def log_delta(eps):
    return _sgm_single_step._log_delta_kernel(eps, q_s, sigma_s, "max")

  if mode == "delta":
    eps = jnp.where(one & jnp.isfinite(target), target, 1.0)
    exact = jnp.exp(log_delta(eps))
    new_up = jnp.minimum(exact * jnp.exp(_LOG_MARGIN), up)
    new_low = jnp.maximum(exact * jnp.exp(-_LOG_MARGIN), low)
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
    lower = jnp.where(root > lo, root * (1.0 - 2.0**-52), low)
    zero = log_delta(jnp.zeros_like(hi)) <= log_t - _LOG_MARGIN
    # A PLD answer of 0 or inf, or one whose bracket misses the root, keeps the PLD value.
    usable = (up > 0) & jnp.isfinite(up)
    new_up = jnp.where(zero, 0.0, jnp.where(usable, jnp.minimum(upper, up), up))
    new_low = jnp.where(zero, 0.0, jnp.where(usable, jnp.maximum(lower, low), low))
    new_low = jnp.minimum(new_low, new_up)
  return jnp.where(one, new_up, up), jnp.where(one, new_low, low)


# Doublings of the bracket's top in :func:`exact` (epsilon up to 2^64).
_DOUBLINGS = 64


@stored_jit(static_argnames="mode")
def exact(q, sigma, target, mode):
  """``(up, low)`` of one step (rows ``(B,)``) from the closed-form curve alone, no composition.

  Epsilon mode: the bracket's top is the first power of two (from 1, up to
  ``2^64``) whose delta is at most the target, found by doubling; :func:`refine`
  then solves inside it with 0 as the lower end. A top beyond ``2^64`` gives
  ``inf`` (sound). Delta mode: the curve times ``e^{+-m}``, capped at 1.
  """
  ones = jnp.ones_like(q)
  if mode == "delta":
    return refine(q, sigma, ones, target, ones, jnp.zeros_like(q), mode)

  def log_delta(eps):
    return _sgm_single_step._log_delta_kernel(eps, q, sigma, "max")

  log_t = jnp.log(target) - _LOG_MARGIN
  hi = jax.lax.fori_loop(
    0, _DOUBLINGS, lambda _, h: jnp.where(log_delta(h) <= log_t, h, 2.0 * h), ones
  )
  found = log_delta(hi) <= log_t
  up, low = refine(q, sigma, ones, target, hi, jnp.zeros_like(q), mode)
  return jnp.where(found, up, jnp.inf), jnp.where(found, low, 0.0)
