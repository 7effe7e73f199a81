"""The order search's index bookkeeping against the plain definitions.

Each faster form in jaxrdp.rdp._order_search is checked against what it replaces: the
row selection against lax.top_k, the neighbours kept in the loop state and the
static ones against a direct search of the known mask.
"""

import jax
import jax.numpy as jnp
import numpy as np
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


def _first_min(v):
  """The first index of the minimum of each row (0 for a row holding NaN), by numpy."""
  v = np.asarray(v)
  return np.where(np.isnan(v).any(axis=-1), 0, np.argmin(np.where(np.isnan(v), np.inf, v), axis=-1))


def _rows_with_ties(rng, rows, n):
  """Random rows of either sign with exact ties, infinities and near-ties (one ulp apart)."""
  v = rng.standard_normal((rows, n)) * 10.0 ** rng.integers(-300, 300, (rows, 1))
  v[::3, ::2] = v[::3, :1]  # exact ties with the first element
  v[1::5] = np.inf
  v[2::5, -1] = -np.inf
  v[3::7] = np.where(rng.random(n) < 0.5, 0.0, -0.0)  # signed zeros compare equal
  if n > 1:
    v[4::6, 1] = np.nextafter(v[4::6, 0], np.inf)  # one ulp above another element
  return v


@pytest.mark.parametrize("n", [1, 2, 24, 109, 160, 1000])
def test_argmin_last_is_the_first_minimum(n):
  from jaxrdp._core.numerics import argmin_last

  rng = np.random.default_rng(n)
  v = _rows_with_ties(rng, 60, n)
  v[5, n // 2] = np.nan  # a row holding NaN gives 0
  with jax.enable_x64(True):
    got = np.asarray(jax.jit(argmin_last)(jnp.asarray(v)))
  np.testing.assert_array_equal(got, _first_min(v))


@pytest.mark.parametrize("n", [1, 2, 24, 109, 160, 1000])
def test_argmin_near_is_a_first_near_minimum(n):
  """argmin_near's index: its value is within 2^(b - 52) relative of the minimum
  (b = bits of an index), and no earlier element is as close (it is the first of
  its bin); where the minimum is alone in its bin, it is the first minimum."""
  from jaxrdp._core.numerics import argmin_near

  rng = np.random.default_rng(n + 1)
  v = _rows_with_ties(rng, 60, n)
  v[v == 0] = 0.0  # (here -0.0 counts as below +0.0)
  with jax.enable_x64(True):
    got = np.asarray(jax.jit(argmin_near)(jnp.asarray(v)))
  bits = max(n - 1, 1).bit_length()
  tol = 2.0 ** (bits - 52)
  m = v.min(axis=-1)
  picked = v[np.arange(v.shape[0]), got]

  def close(x):
    with np.errstate(invalid="ignore"):
      return (x == m) | (np.abs(x - m) <= tol * np.abs(m))

  assert np.all(close(picked))
  near = close(v.T).T
  for r in range(v.shape[0]):  # no earlier element in the minimum's bin
    assert not np.any(near[r, : got[r]] & (v[r, : got[r]] < picked[r]))
  alone = np.sum(near, axis=-1) == np.sum(v == m[:, None], axis=-1)
  np.testing.assert_array_equal(got[alone], _first_min(v)[alone])


def test_argmin_last_falls_back_where_no_element_equals_the_minimum(monkeypatch):
  """Where the second pass finds no element equal to the minimum (XLA computed the
  values twice with different rounding), the index is argmin_near's. Simulated by a
  minimum reduction that returns a value below every element."""
  from jaxrdp._core import numerics

  real_min = jnp.min
  monkeypatch.setattr(
    numerics.jnp, "min", lambda x, *a, **k: real_min(x, *a, **k) - (x.dtype == jnp.float64)
  )
  v = np.array([[3.0, 1.0, 2.0, 1.0], [5.0, 4.0, 4.0, 9.0]])
  with jax.enable_x64(True):
    got = np.asarray(numerics.argmin_last(jnp.asarray(v)))
  np.testing.assert_array_equal(got, [1, 1])
