"""Dataset-level conveniences: sampling rate and step count of a DP-SGD run.

DP-SGD with Poisson sampling draws each example independently with probability
q per step; with an expected batch size B over N examples, q = B / N. One epoch is
N / B steps, so E epochs take T = ceil(E * N / B) steps (Abadi et al. 2016,
"Deep Learning with Differential Privacy", arXiv:1607.00133, Sec. 3.1).
"""

from __future__ import annotations

import fractions

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core.precision import x64_context
from .._core.validation import check_range, concrete_or_none

__all__ = ["sampling_rate", "epochs_to_steps"]

# Traced arguments only (concrete ones are counted exactly, _exact_steps): a float64
# product like 0.3 * 60000 can land one ulp above an integer, which ceil would turn
# into one extra step. Shaving this relative amount first makes such cases round to
# the integer; it is far below any real fraction of a step for runs shorter than
# 10**11 steps.
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
    float64 array of integer values T. Concrete arguments are counted exactly, in
    integer arithmetic: E as the decimal it prints as (0.3 is 3/10, not the binary
    fraction nearest to it), times N, divided by B, rounded up; so any dataset size
    gives the exact count (exact as a float64 up to 2**53 steps). Traced arguments
    take the ceiling of the float64 E * N / B after shaving a relative 1e-12, so
    that its rounding never adds a step (exact below about 1e11 steps). Concrete
    invalid input raises ValueError; traced invalid input gives NaN.

  Examples:
    >>> int(epochs_to_steps(60, 60000, 256))
    14063
    >>> int(epochs_to_steps(1, 2_000_000_000_001, 1_000_000))
    2000001
  """
  _check_dataset(dataset_size, batch_size)
  check_range("epochs", epochs, lower=0.0)
  values = [concrete_or_none(x) for x in (epochs, dataset_size, batch_size)]
  if all(v is not None for v in values):
    with x64_context():
      return jnp.asarray(_exact_steps(epochs, dataset_size, batch_size), jnp.float64)
  with x64_context():
    e = jnp.asarray(epochs, jnp.float64)
    b = jnp.asarray(batch_size, jnp.float64)
    n = jnp.asarray(dataset_size, jnp.float64)
    ok = (e >= 0) & jnp.isfinite(e) & (b >= 1) & (n >= b) & jnp.isfinite(n)
    x = e * n / jnp.where(ok, b, 1.0)
    return jnp.where(ok, jnp.ceil(x * (1.0 - _CEIL_SLACK)), jnp.nan)


def _as_exact(x) -> np.ndarray:
  """A concrete argument as an object array of exact numbers: Python ints for ints
  (and integer-valued floats), Fractions of the shortest decimal for other floats."""
  arr = np.asarray(x)
  if arr.dtype.kind in "iu":
    return arr.astype(object)
  flat = np.asarray(arr, np.float64).ravel()
  out = np.empty(flat.size, dtype=object)
  out[:] = [int(v) if v.is_integer() else fractions.Fraction(repr(v)) for v in flat.tolist()]
  return out.reshape(arr.shape)


def _exact_steps(epochs, dataset_size, batch_size) -> np.ndarray:
  """ceil(E * N / B) in exact arithmetic (validated, concrete arguments), as float64."""
  as_float = [np.asarray(x, np.float64) for x in (epochs, dataset_size, batch_size)]
  e, n, b = np.broadcast_arrays(*as_float)
  if (
    np.all(e == np.floor(e))
    and float(np.max(e, initial=0.0)) * float(np.max(n, initial=0.0)) < 2.0**62
  ):
    # Integers whose product fits an int64: numpy's exact integer arithmetic.
    ei, ni, bi = (x.astype(np.int64) for x in (e, n, b))
    return (-(-(ei * ni) // bi)).astype(np.float64)
  e, n, b = np.broadcast_arrays(*(_as_exact(x) for x in (epochs, dataset_size, batch_size)))
  out = np.empty(e.shape, dtype=np.float64)
  for i in np.ndindex(e.shape):
    ratio = fractions.Fraction(e[i]) * n[i] / b[i]
    out[i] = float(-(-ratio.numerator // ratio.denominator))
  return out
