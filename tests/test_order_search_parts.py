"""The order search's index bookkeeping against the plain definitions.

Each faster form in jaxrdp.rdp._order_search is checked against what it replaces: the
row selection against lax.top_k, the neighbours kept in the loop state and the
static ones against a direct search of the known mask.
"""

import numpy as np
import jax
import jax.numpy as jnp
import pytest

from jaxrdp.rdp import _order_search as m


def _nearest(known):
  """Two nearest known indices on each side of every point, by direct search."""
  n = known.size
  kn = np.flatnonzero(known)
  out = np.empty((4, n), dtype=np.int64)
  for i in range(n):
    left, right = kn[kn < i], kn[kn > i]
    out[:, i] = (
      left[-1] if left.size else -1,
      left[-2] if left.size > 1 else -1,
      right[0] if right.size else n,
      right[1] if right.size > 1 else n,
    )
  return out


@pytest.mark.parametrize("n,max_priority", [(1, 1), (3, 5), (100, 1), (400, 110), (4097, 200)])
def test_top_rows_is_top_k(n, max_priority):
  rng = np.random.default_rng(n)
  priority = jnp.asarray(rng.integers(0, max_priority + 1, n).astype(np.int32))
  for k in sorted({1, max(1, n // 4), n}):
    want = jax.lax.top_k(priority, k)
    got = jax.jit(m._top_rows, static_argnums=(1, 2))(priority, k, max_priority)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("n", [2, 5, 17, 109])
def test_neighbours_static_scanned_and_updated(n):
  rng = np.random.default_rng(n)
  for trial in range(10):
    known = rng.random(n) < rng.random()
    if trial % 2:
      known[0] = True  # as in the search, where the order 0 is always known
    want = _nearest(known)
    np.testing.assert_array_equal(np.stack(m._static_neighbours(known)), want)
    np.testing.assert_array_equal(
      np.stack([np.asarray(v)[0] for v in m._neighbours(jnp.asarray(known)[None])]), want
    )
    # Points joining one at a time, as the search's rounds add them.
    near = tuple(jnp.asarray(v, jnp.int32)[None] for v in m._static_neighbours(known))
    add = jax.jit(m._add_known)
    for j in rng.permutation(np.flatnonzero(~known))[:8]:
      near = add(near, jnp.asarray([j], jnp.int32))
      known[j] = True
      np.testing.assert_array_equal(np.stack([np.asarray(v)[0] for v in near]), _nearest(known))
