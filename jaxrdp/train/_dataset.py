"""Dataset-level conveniences: sampling rate and step count of a DP-SGD run.

DP-SGD with Poisson sampling draws each example independently with probability
q per step; with an expected batch size B over N examples, q = B / N. One epoch is
N / B steps, so E epochs take T = ceil(E * N / B) steps (Abadi et al. 2016,
"Deep Learning with Differential Privacy", arXiv:1607.00133, Sec. 3.1).
"""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core.precision import x64_context
from .._core.validation import check_range, concrete_or_none

__all__ = ["sampling_rate", "epochs_to_steps"]

# epochs * N / B is exact in float64 when it is an integer below 2**53 and epochs is an
# integer; for fractional epochs a product like 0.3 * 60000 can land one ulp above an
# integer, which ceil would turn into one extra step. Shaving this relative amount
# first makes such cases round to the integer; it is far below any real fraction of a
# step for runs shorter than 10**11 steps.
_CEIL_SLACK = 1e-12


def _check_dataset(dataset_size, batch_size) -> None:
  for name, value in (("dataset_size", dataset_size), ("batch_size", batch_size)):
    check_range(name, value, lower=1.0)
    arr = concrete_or_none(value)
    if arr is not None and np.any(arr != np.round(arr)):
      raise ValueError(f"{name} must be a positive integer, got {value!r}")
  if not isinstance(dataset_size, jax.core.Tracer) and not isinstance(batch_size, jax.core.Tracer):
    if np.any(np.asarray(batch_size) > np.asarray(dataset_size)):
      raise ValueError(
        f"batch_size must be <= dataset_size, got batch_size={batch_size!r}, "
        f"dataset_size={dataset_size!r}"
      )


def sampling_rate(batch_size: ArrayLike, dataset_size: ArrayLike) -> jax.Array:
  """Poisson sampling rate q = B / N of DP-SGD with expected batch size B.

  Args:
    batch_size: expected batch size B, a positive integer (broadcasts).
    dataset_size: number of examples N, a positive integer with N >= B (broadcasts).

  Returns:
    float64 array q = B / N in (0, 1]. Concrete invalid input raises ValueError;
    traced invalid input gives NaN.

  Examples:
    >>> float(sampling_rate(256, 60000))
    0.004266666666666667
  """
  _check_dataset(dataset_size, batch_size)
  with x64_context():
    b = jnp.asarray(batch_size, jnp.float64)
    n = jnp.asarray(dataset_size, jnp.float64)
    ok = (b >= 1) & (n >= b) & jnp.isfinite(n)
    return jnp.where(ok, b / jnp.where(ok, n, 1.0), jnp.nan)


def epochs_to_steps(epochs: ArrayLike, dataset_size: ArrayLike, batch_size: ArrayLike) -> jax.Array:
  """Number of DP-SGD steps T = ceil(E * N / B) for E epochs (Abadi et al. 2016).

  Args:
    epochs: number of passes E >= 0 over the data (may be fractional; broadcasts).
    dataset_size: number of examples N, a positive integer (broadcasts).
    batch_size: expected batch size B, a positive integer with B <= N (broadcasts).

  Returns:
    float64 array of integer values T. The ceiling is taken after shaving a relative
    1e-12, so that float rounding of E * N / B never adds a step. Concrete invalid
    input raises ValueError; traced invalid input gives NaN.

  Examples:
    >>> int(epochs_to_steps(60, 60000, 256))
    14063
  """
  _check_dataset(dataset_size, batch_size)
  check_range("epochs", epochs, lower=0.0)
  with x64_context():
    e = jnp.asarray(epochs, jnp.float64)
    b = jnp.asarray(batch_size, jnp.float64)
    n = jnp.asarray(dataset_size, jnp.float64)
    ok = (e >= 0) & jnp.isfinite(e) & (b >= 1) & (n >= b) & jnp.isfinite(n)
    x = e * n / jnp.where(ok, b, 1.0)
    return jnp.where(ok, jnp.ceil(x * (1.0 - _CEIL_SLACK)), jnp.nan)
