"""Static-index gathers and scatters: the same arrays as NumPy's indexing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrdp._core import static_index as _static_index


def _index_cases(n, rng):
  return {
    "identity": np.arange(n),
    "runs": np.concatenate([np.arange(5, 9), [0, 1], np.arange(12, n)]),
    "shuffled": rng.permutation(n),  # ~n runs: the general gather
    "subset": np.sort(rng.choice(n, n // 2, replace=False)),
    "single": np.array([n - 1]),
    "empty": np.array([], dtype=np.int64),
  }


@pytest.mark.parametrize("case", ["identity", "runs", "shuffled", "subset", "single", "empty"])
def test_take_last_equals_numpy_indexing(case):
  rng = np.random.default_rng(0)
  n = 100
  idx = _index_cases(n, rng)[case]
  x = rng.normal(size=(3, 4, n))
  got = jax.jit(lambda x: _static_index.take_last(x, idx))(jnp.asarray(x))
  np.testing.assert_array_equal(np.asarray(got), x[..., idx])
  flat = np.asarray(_static_index.take_last(jnp.asarray(x[0, 0]), idx))
  np.testing.assert_array_equal(flat, x[0, 0][idx])


@pytest.mark.parametrize("case", ["identity", "runs", "shuffled", "subset", "single", "empty"])
@pytest.mark.parametrize("dtype", [np.float64, np.bool_])
def test_put_last_equals_numpy_assignment(case, dtype):
  rng = np.random.default_rng(1)
  n = 100
  idx = _index_cases(n, rng)[case]
  x = (rng.normal(size=(3, n)) > 0).astype(dtype) if dtype == np.bool_ else rng.normal(size=(3, n))
  values = (
    (rng.normal(size=(3, idx.size)) > 0).astype(dtype)
    if dtype == np.bool_
    else rng.normal(size=(3, idx.size))
  )
  want = x.copy()
  want[..., idx] = values
  got = jax.jit(lambda x, v: _static_index.put_last(x, idx, v))(jnp.asarray(x), jnp.asarray(values))
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(np.asarray(got), want)


def test_take_and_put_are_differentiable():
  idx = np.array([3, 4, 5, 0, 1])
  x = jnp.arange(8.0)
  grad = jax.grad(lambda x: jnp.sum(_static_index.take_last(x, idx) ** 2))(x)
  np.testing.assert_array_equal(np.asarray(grad), [0, 2, 0, 6, 8, 10, 0, 0])
  grad = jax.grad(lambda v: jnp.sum(_static_index.put_last(x, idx, v) * jnp.arange(8.0)))(
    jnp.ones(5)
  )
  np.testing.assert_array_equal(np.asarray(grad), idx.astype(float))


def test_concatenate_to_puts_every_column_back():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(3, 20))
  positions = [np.array([4, 0, 7]), np.arange(8, 20), np.array([1, 2, 3, 5, 6])]
  parts = [jnp.asarray(x[:, p]) for p in positions]
  np.testing.assert_array_equal(np.asarray(_static_index.concatenate_to(parts, positions)), x)
  flat = [jnp.asarray(x[0, p]) for p in positions]
  np.testing.assert_array_equal(np.asarray(_static_index.concatenate_to(flat, positions)), x[0])
