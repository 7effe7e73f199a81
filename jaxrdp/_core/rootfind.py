"""Vectorized bracketing root finder used by the calibrations (pure jnp / lax)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

# Geometric bisection halves log(hi / lo) each step. Brackets span at most
# e^50, and 50 * 2^-64 < 3e-18 is below the float64 spacing, so after 64 steps
# lo and hi are adjacent floats (or equal).
BISECTION_STEPS = 64


def smallest_feasible(log_f, log_target, lo, hi, steps=BISECTION_STEPS):
  """Smallest ``x`` in ``[lo, hi]`` with ``log_f(x) <= log_target``, for non-increasing ``f``.

  Elementwise over arrays (``lo``, ``hi`` and ``log_target`` broadcast
  together); a fixed number of geometric bisection steps under
  ``lax.fori_loop``, so it is jittable and vmappable with no data-dependent
  Python control flow.

  The caller must pass a feasible ``hi`` (``log_f(hi) <= log_target``) and
  ``0 < lo <= hi``. The invariant ``log_f(hi) <= log_target`` is kept at
  every step and ``hi`` is returned, so the answer is always feasible
  (conservative): it exceeds the true root by at most one float spacing plus
  the error of ``log_f``. If ``lo`` itself is feasible the result is ``lo``
  rounded up by the same amount.

  Derivatives (with respect to what ``log_f`` closes over and to ``log_target``) are
  those of the root, by the implicit function theorem (:func:`_implicit_derivative`),
  not those of the bisection's arithmetic.
  """
  lo, hi, log_target = jnp.broadcast_arrays(lo, hi, log_target)

  def body(_, carry):
    lo, hi = carry
    # sqrt(lo) * sqrt(hi) cannot overflow or underflow where lo * hi might.
    mid = jnp.sqrt(lo) * jnp.sqrt(hi)
    feasible = log_f(mid) <= log_target
    return jnp.where(feasible, lo, mid), jnp.where(feasible, mid, hi)

  _, hi = lax.fori_loop(0, steps, body, (lo, hi))
  return _implicit_derivative(hi, log_f, log_target)


def _implicit_derivative(x, log_f, log_target):
  """``x``, a root of ``log_f(x) = log_target``, with the derivative of that root.

  The bisection's own derivative is that of its bracket's ends, which says nothing
  about the root. By the implicit function theorem the root moves by
  dx = -(d log_f - d log_target) / (d log_f / dx), d log_f being the change of
  ``log_f`` through what it closes over. That is the derivative of the Newton step
  s = -(log_f(x0) - log_target) / slope at x0 = x held constant, so ``x0 + (s - s)``,
  with the second s held constant, has x's value (exactly: s is finite) and the
  root's derivative. Where the slope is 0 or not finite, the derivative is 0.
  """
  x0 = lax.stop_gradient(x)
  value, slope = jax.jvp(log_f, (x0,), (jnp.ones_like(x0),))
  slope = lax.stop_gradient(slope)
  ok = jnp.isfinite(value) & jnp.isfinite(slope) & (slope != 0)
  step = -(value - log_target) / jnp.where(ok, slope, 1.0)
  step = jnp.where(ok & jnp.isfinite(step), step, 0.0)
  return x0 + (step - lax.stop_gradient(step))
