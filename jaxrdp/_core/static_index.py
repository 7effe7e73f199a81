"""Gathers and scatters on the last axis with indices known at trace time.

XLA lowers indexing by a constant index array to a general gather (or scatter),
which on CPU computes an index per element, inside fused loops too: on the
standard benchmark grid the permutations of the order search and of the series
cost about as much as the arithmetic around them. The indices used here are
concrete numpy arrays made of a few runs of consecutive positions, so the same
result is a concatenation of slices, which XLA fuses as plain copies; the
identity permutation is no operation at all. Results are bit-identical to the
indexing they replace (data movement only).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

__all__ = ["take_last", "put_last", "concatenate_to"]

# Beyond this many runs the general gather is used (a concatenation of very many
# slices compiles slowly).
_MAX_RUNS = 64


def _runs(sources, columns):
  """Maximal runs of consecutive columns of one source: (source, start, stop)."""
  runs = []
  for s, c in zip(sources.tolist(), columns.tolist()):
    if runs and runs[-1][0] == s and runs[-1][2] == c:
      runs[-1][2] = c + 1
    else:
      runs.append([s, c, c + 1])
  return runs


def _concatenate(arrays, runs):
  return jnp.concatenate([arrays[s][..., a:b] for s, a, b in runs], axis=-1)


def take_last(x, idx):
  """``x[..., idx]`` for a concrete 1-D integer array ``idx`` of valid, non-negative positions."""
  idx = np.asarray(idx, dtype=np.int64)
  n = x.shape[-1]
  if idx.size == n and np.array_equal(idx, np.arange(n)):
    return x
  runs = _runs(np.zeros_like(idx), idx)
  if idx.size == 0 or len(runs) > _MAX_RUNS:
    return x[..., idx]
  return _concatenate([x], runs)


def concatenate_to(parts, positions):
  """The ``parts`` concatenated on the last axis, each column put back where it belongs:
  ``parts[i]`` holds the columns at the concrete positions ``positions[i]``, which
  together are a permutation of 0..n-1 (kernels that evaluate groups of orders
  separately reassemble them with this)."""
  order = np.concatenate(positions)
  inverse = np.empty_like(order)
  inverse[order] = np.arange(order.size)
  return take_last(jnp.concatenate(parts, axis=-1), inverse)


def put_last(x, idx, values):
  """``x.at[..., idx].set(values)`` for concrete, distinct positions ``idx`` (any order)."""
  idx = np.asarray(idx, dtype=np.int64)
  n = x.shape[-1]
  values = jnp.broadcast_to(jnp.asarray(values, dtype=x.dtype), x.shape[:-1] + (idx.size,))
  sources = np.zeros(n, dtype=np.int64)  # 0: keep x's column, 1: take one of values'
  columns = np.arange(n)
  sources[idx] = 1
  columns[idx] = np.arange(idx.size)
  runs = _runs(sources, columns)
  if len(runs) > _MAX_RUNS:
    return x.at[..., idx].set(values)
  return _concatenate([x, values], runs)
