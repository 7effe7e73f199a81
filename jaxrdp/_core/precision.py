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
import functools

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
  "x64_context",
  "as_float64",
  "broadcast_float64",
  "round_up_to",
  "Float64Scope",
  "finalize",
  "elementwise_float64",
  "rowwise_float64",
]


def x64_context() -> contextlib.AbstractContextManager:
  """Returns a context manager in which JAX creates float64 arrays."""
  return jax.enable_x64(True)


def as_float64(x) -> jax.Array:
  """Converts ``x`` to a float64 array (call inside :func:`x64_context`)."""
  return jnp.asarray(x, dtype=jnp.float64)


def broadcast_float64(*xs) -> list[jax.Array]:
  """The arguments as float64 arrays broadcast to one shape (NumPy rules)."""
  return jnp.broadcast_arrays(*(as_float64(x) for x in xs))


def round_up_to(x: jax.Array, dtype) -> jax.Array:
  """Casts float64 ``x`` to ``dtype`` rounding towards +inf.

  A privacy loss that is reported in a narrower dtype must never be smaller
  than the float64 value, so plain round-to-nearest is not acceptable: it can
  lower epsilon by half an ulp. The result is at most one ulp of ``dtype`` above
  ``x``, except below the smallest normal number of ``dtype`` (1.2e-38 for
  float32), where a positive ``x`` gives that number and a negative one 0: XLA's
  CPU flushes subnormal operands and results to zero, so no subnormal result
  would stay what it is.
  """
  dtype = jnp.dtype(dtype)
  if dtype == jnp.float64:
    return x
  y = x.astype(dtype)
  too_small = jax.lax.stop_gradient(y.astype(jnp.float64) < x)
  # nextafter has no derivative rule: the result is a constant plus y - y_const,
  # which is exactly 0 (for finite y) and carries y's derivative. (The bump itself,
  # up - y, is subnormal for |y| < 1e-31 in float32 and would be flushed to zero.)
  y_const = jax.lax.stop_gradient(y)
  keep = y - y_const
  up = jnp.nextafter(y_const, jnp.asarray(np.inf, dtype))
  tiny = jnp.finfo(dtype).tiny
  normal = jnp.isfinite(y_const) & (jnp.abs(up) >= tiny)
  out = jnp.where(too_small, jnp.where(normal, up + keep, up), y)
  below_normal = jnp.abs(x) < tiny
  floor = jnp.where(x > 0, tiny, 0.0).astype(dtype)
  return jnp.where(below_normal, floor + keep, out)


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
  under-reported, and the error is at most one float32 ulp (2^-23 relative; below
  the smallest normal float32, 1.2e-38, a positive value is reported as that float,
  see :func:`round_up_to`).
  """

  def __enter__(self):
    self.outer_x64 = bool(jax.config.jax_enable_x64)
    self._ctx = x64_context()
    self._ctx.__enter__()
    return self

  def __exit__(self, *exc):
    return self._ctx.__exit__(*exc)

  def finalize(self, tree, down=None):
    return finalize(tree, self.outer_x64, down)


def finalize(tree, outer_x64: bool, down=None):
  """The float64 results ``tree`` in a dtype the caller can use (see Float64Scope).

  Args:
    tree: a pytree of results computed in float64.
    outer_x64: whether the caller has ``jax_enable_x64`` on (read before the
      float64 scope was entered).
    down: optional pytree of bools with the structure of ``tree``: True where a
      leaf's safe side is smaller (a number of steps or a sampling rate that fits
      a budget), so that it is rounded towards -inf instead of +inf.
  """
  if outer_x64:
    return tree

  def cast(x, to_minus_inf=False):
    return _float32_directed(x, to_minus_inf) if isinstance(x, jax.core.Tracer) else x

  if down is None:
    return jax.tree_util.tree_map(cast, tree)
  return jax.tree_util.tree_map(cast, tree, down)


def _float32_directed(x, down: bool = False):
  """A floating leaf as float32 rounded towards +inf (other leaves unchanged).

  ``down``: towards -inf instead, for quantities whose safe side is smaller
  (a number of steps or a sampling rate that fits a budget).
  """
  if not jnp.issubdtype(x.dtype, jnp.floating):
    return x
  with x64_context():
    if down:
      return -round_up_to(-x, jnp.float32)
    return round_up_to(x, jnp.float32)


def _as_array(x):
  """Python scalars and (nested) lists as float64 numpy arrays, so that the kernels
  see one array: a list would be a pytree of scalars, and a Python int beyond
  int64 would not convert at all. Arrays and tracers are passed through; the
  arguments have been validated by then."""
  if isinstance(x, (bool, int, float, list, tuple)):
    return np.asarray(x, dtype=np.float64)
  return x


def elementwise_float64(kernel, diff_args, const_args=(), *, tangent_trailing=None, down=None):
  """``kernel(*diff_args, *const_args)`` in float64, finalized as by Float64Scope.

  For kernels whose outputs are elementwise (NumPy-broadcast) functions of
  ``diff_args``; ``const_args`` are not differentiated (their derivative is
  taken as zero). Concrete calls, and callers with ``jax_enable_x64`` on, simply
  run the kernel in a Float64Scope.

  Why the rest: with x64 off, a caller's ``jax.grad`` transposes the derivative
  *after* this function has returned, outside the float64 scope, where JAX
  canonicalizes every new float64 array to float32 and the transpose of a
  float64 gather or scatter fails on the dtype mismatch (forward mode fails the
  same way on the tangents' dtype). So traced calls with x64 off go through a
  ``custom_jvp`` whose rule computes, inside the scope, the partial derivative
  of every output with respect to every diff argument (one ``jax.linearize``,
  one tangent per argument), and leaves only ``sum_i J_i * t_i`` in the caller's
  dtype to be transposed. That is exact for elementwise kernels, costs one
  linearized evaluation per diff argument, and only runs when a derivative is
  actually taken.

  ``tangent_trailing``: for kernels whose outputs carry trailing axes that some
  diff arguments lack (an RDP curve over orders from scalar mechanism fields),
  the number of trailing axes to append to each diff argument's tangent, so
  that it lines up with the output (default: none).

  ``down``: as in :func:`finalize`, a pytree of bools with the structure of the
  kernel's output, True where a leaf's safe side is smaller (a certified lower
  bound), which is then rounded towards -inf when cast to float32.
  """
  diff_args, const_args = tuple(_as_array(x) for x in diff_args), tuple(const_args)
  n = len(diff_args)
  trailing = (0,) * n if tangent_trailing is None else tuple(tangent_trailing)

  def run(*args):
    with Float64Scope() as scope:
      out = kernel(*args)
    return scope.finalize(out, down)

  def directed(out):
    if down is None:
      return jax.tree_util.tree_map(_float32_directed, out)
    return jax.tree_util.tree_map(_float32_directed, out, down)

  traced = any(isinstance(x, jax.core.Tracer) for x in diff_args + const_args)
  if bool(jax.config.jax_enable_x64) or not traced:
    return run(*diff_args, *const_args)

  # Inside the custom_jvp the primals may be concrete (an eager jax.grad), and the
  # tangents must match the primal dtype, which cannot be float64 out here: the
  # results are always float32 (rounded up), as finalize gives a tracing caller.
  @jax.custom_jvp
  def call(*args):
    with x64_context():
      out = kernel(*args)
    return directed(out)

  @call.defjvp
  def call_jvp(primals, tangents):
    with x64_context():
      p64 = [as_float64(p) for p in primals[:n]]
      consts = primals[n:]
      # linearize evaluates the kernel once: its primal output is the result.
      out64, lin = jax.linearize(lambda *d: kernel(*d, *consts), *p64)
      jac = [
        lin(*[jnp.ones_like(p) if j == i else jnp.zeros_like(p) for j, p in enumerate(p64)])
        for i in range(n)
      ]
    out = directed(out64)

    def tangent(leaf, *partials):
      if not jnp.issubdtype(leaf.dtype, jnp.floating):
        return jnp.zeros(leaf.shape, jax.dtypes.float0)
      total = jnp.zeros(leaf.shape, leaf.dtype)
      for d, t, extra in zip(partials, tangents[:n], trailing):
        t = jnp.asarray(t)
        if t.dtype == jax.dtypes.float0:  # integer argument: no tangent
          continue
        t = t.reshape(t.shape + (1,) * extra)
        total = total + d.astype(leaf.dtype) * t.astype(leaf.dtype)
      return total

    return out, jax.tree_util.tree_map(tangent, out, *jac)

  return call(*diff_args, *const_args)


def rowwise_float64(kernel, rows, values):
  """``kernel(rows, values)`` in float64, finalized as by Float64Scope.

  For kernels that reduce the last axis of ``rows`` (an RDP curve over orders,
  shape ``batch + [n]``) with one element of ``values`` (shape ``batch``, both
  broadcasting) into outputs of shape ``batch``: epsilon or delta from a
  running RDP curve. As :func:`elementwise_float64`, concrete calls and
  callers with ``jax_enable_x64`` on run the kernel in a Float64Scope; traced
  calls with x64 off go through a ``custom_jvp`` whose rule computes the
  partial derivatives inside the scope, here by reverse mode (each output
  element depends on one row, so one ``jax.vjp`` per output gives every
  row's gradient), and leaves ``sum_k J_k t_k + J_v t_v`` to the caller.
  """
  rows, values = _as_array(rows), _as_array(values)
  traced = any(isinstance(x, jax.core.Tracer) for x in (rows, values))
  if bool(jax.config.jax_enable_x64) or not traced:
    with Float64Scope() as scope:
      out = kernel(rows, values)
    return scope.finalize(out)

  def broadcast(r, v):
    batch = jnp.broadcast_shapes(jnp.shape(r)[:-1], jnp.shape(v))
    r = jnp.broadcast_to(as_float64(r), batch + jnp.shape(r)[-1:])
    return r, jnp.broadcast_to(as_float64(v), batch)

  @jax.custom_jvp
  def call(r, v):
    with x64_context():
      out = kernel(*broadcast(r, v))
    return jax.tree_util.tree_map(_float32_directed, out)

  @call.defjvp
  def call_jvp(primals, tangents):
    with x64_context():
      r, v = broadcast(*primals)
      out64, pullback = jax.vjp(kernel, r, v)
      leaves, treedef = jax.tree_util.tree_flatten(out64)
      jac = []
      for i, leaf in enumerate(leaves):
        if not jnp.issubdtype(leaf.dtype, jnp.floating):
          jac.append(None)
          continue
        cot = [jnp.ones_like(x) if j == i else jnp.zeros_like(x) for j, x in enumerate(leaves)]
        jac.append(pullback(jax.tree_util.tree_unflatten(treedef, cot)))
    out = [_float32_directed(leaf) for leaf in leaves]
    t_rows, t_values = (jnp.asarray(t) for t in tangents)
    tan = []
    for leaf, j in zip(out, jac):
      if j is None:
        tan.append(jnp.zeros(leaf.shape, jax.dtypes.float0))
        continue
      total = jnp.zeros(leaf.shape, leaf.dtype)
      if t_rows.dtype != jax.dtypes.float0:
        total = total + jnp.sum(j[0].astype(leaf.dtype) * t_rows.astype(leaf.dtype), axis=-1)
      if t_values.dtype != jax.dtypes.float0:
        total = total + j[1].astype(leaf.dtype) * t_values.astype(leaf.dtype)
      tan.append(total)
    unflat = functools.partial(jax.tree_util.tree_unflatten, treedef)
    return unflat(out), unflat(tan)

  return call(rows, values)
