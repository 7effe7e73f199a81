"""Float64 computation without touching the user's global JAX configuration.

jaxrdp computes privacy quantities in float64. Library code must never flip
``jax_enable_x64`` globally, so every public entry point runs its kernel inside
:func:`x64_context`, a thread-local scope. When a caller traces jaxrdp inside
their own float32 ``jax.jit`` the scope still applies to the ops jaxrdp emits,
so the accounting itself stays in float64 and only the final values are cast
back (rounding *up*, see :func:`round_up_to`).
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["x64_context", "as_float64", "round_up_to", "Float64Scope"]


def x64_context() -> contextlib.AbstractContextManager:
  """Returns a context manager in which JAX creates float64 arrays."""
  return jax.enable_x64(True)


def as_float64(x) -> jax.Array:
  """Converts ``x`` to a float64 array (call inside :func:`x64_context`)."""
  return jnp.asarray(x, dtype=jnp.float64)


def round_up_to(x: jax.Array, dtype) -> jax.Array:
  """Casts float64 ``x`` to ``dtype`` rounding towards +inf.

  A privacy loss that is reported in a narrower dtype must never be smaller
  than the float64 value, so plain round-to-nearest is not acceptable: it can
  lower epsilon by half an ulp.
  """
  dtype = jnp.dtype(dtype)
  if dtype == jnp.float64:
    return x
  y = x.astype(dtype)
  too_small = jax.lax.stop_gradient(y.astype(jnp.float64) < x)
  # nextafter has no derivative rule; the one-ulp bump is a constant offset.
  y_const = jax.lax.stop_gradient(y)
  bump = jnp.nextafter(y_const, jnp.asarray(np.inf, dtype)) - y_const
  return jnp.where(too_small, y + bump, y)


class Float64Scope:
  """Runs a block in float64 and hands results back in a dtype the caller can use.

  Usage::

      with Float64Scope() as scope:
        y = kernel(x)
      return scope.finalize(y)

  ``finalize`` returns float64 when the caller has ``jax_enable_x64`` on, or
  when the value is concrete (eager use: a float64 array is valid and exact
  anywhere). When the caller is tracing with x64 off, a float64 tracer would be
  truncated to float32 by round-to-nearest at its next operation, so the value
  is cast to float32 here, rounded towards +inf: a privacy loss is never
  under-reported, and the error is at most one float32 ulp (2^-23 relative).
  """

  def __enter__(self):
    self.outer_x64 = bool(jax.config.jax_enable_x64)
    self._ctx = x64_context()
    self._ctx.__enter__()
    return self

  def __exit__(self, *exc):
    return self._ctx.__exit__(*exc)

  def finalize(self, tree):
    if self.outer_x64:
      return tree

    def cast(x):
      if not isinstance(x, jax.core.Tracer) or not jnp.issubdtype(x.dtype, jnp.floating):
        return x
      with x64_context():
        return round_up_to(x, jnp.float32)

    return jax.tree_util.tree_map(cast, tree)
