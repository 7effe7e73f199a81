"""Vectorized bracketing root finder used by the calibrations (pure jnp / lax)."""

from __future__ import annotations

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
  """
  lo, hi, log_target = jnp.broadcast_arrays(lo, hi, log_target)

  def body(_, carry):
    lo, hi = carry
    # sqrt(lo) * sqrt(hi) cannot overflow or underflow where lo * hi might.
    mid = jnp.sqrt(lo) * jnp.sqrt(hi)
    feasible = log_f(mid) <= log_target
    return jnp.where(feasible, lo, mid), jnp.where(feasible, mid, hi)

  _, hi = lax.fori_loop(0, steps, body, (lo, hi))
  return hi
