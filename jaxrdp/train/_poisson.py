"""Poisson subsampling inside jit with a fixed-shape mask.

The Sampled Gaussian Mechanism analysed by the RDP accountant draws each batch
by Poisson sampling: every example enters the batch independently with
probability q, so the batch size is Binomial(n, q) and changes from step to step.
Returning the batch as a boolean mask over all n examples keeps every shape
static, so a jitted training step compiles once however many examples are drawn.

Shuffled fixed-size batches (the usual data loader) are a different mechanism:
sampling without replacement at a fixed size. The SGM bound is not proved for it
and must not be quoted for it.

References:
  Mironov, Talwar, Zhang 2019, "Renyi Differential Privacy of the Sampled
  Gaussian Mechanism", arXiv:1908.10530, Sec. 3 (sampling model).
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core.precision import x64_context
from .._core.validation import check_range

__all__ = ["poisson_sample_mask"]


def poisson_sample_mask(key: jax.Array, n: int, q: ArrayLike) -> jax.Array:
  """Draws a Poisson-sampled batch as a boolean mask of static shape ``(n,)``.

  Each entry is ``True`` independently with probability ``q``; the number of
  ``True`` entries is therefore Binomial(n, q). This is the sampling the
  Sampled Gaussian Mechanism accounting assumes (arXiv:1908.10530, Sec. 3).

  The draw compares 32 random bits with ``floor(q * 2**32)``, so the exact
  inclusion probability is ``floor(q * 2**32) / 2**32``: within 2**-32 of q and
  never above it (q = 1 selects everything). Because the RDP of the SGM is
  non-decreasing in q (arXiv:1908.10530, Sec. 3), accounting with q itself is
  an upper bound for the mechanism actually run. A threshold on a float32
  uniform would not have that property: float32 rounding of q can round up.

  Args:
    key: a JAX PRNG key (raw ``uint32[2]`` or typed).
    n: number of examples; a static Python int >= 0 (it fixes the shape).
    q: sampling probability in [0, 1]; may be traced (e.g. a schedule).

  Returns:
    ``bool[n]`` mask of the examples in this step's batch.

  Raises:
    ValueError: if ``n`` is not a non-negative int, or a concrete ``q`` is
      outside [0, 1] or NaN.

  A traced ``q`` outside [0, 1] cannot be reported through a boolean mask: it
  selects nothing (q < 0, NaN) or everything (q > 1). The accountant returns
  NaN for such a q in the same step, and :func:`jaxrdp.train.privacy_guard` refuses
  a step whose epsilon is NaN, so no step with an invalid q is ever applied by
  :func:`jaxrdp.train.make_dpsgd_step`.

  Examples:
    >>> import jax, jaxrdp
    >>> mask = jaxrdp.train.poisson_sample_mask(jax.random.PRNGKey(0), 1000, 0.1)
    >>> mask.shape, mask.dtype
    ((1000,), dtype('bool'))
  """
  try:
    if isinstance(n, (bool, np.bool_)):  # True is not a number of examples
      raise TypeError
    n = operator.index(n)
  except TypeError:
    raise ValueError(f"n must be a static Python int >= 0, got {n!r}") from None
  if n < 0:
    raise ValueError(f"n must be a static Python int >= 0, got {n}")
  if jnp.ndim(q) != 0:
    raise ValueError(f"q must be a scalar, got shape {jnp.shape(q)}")
  check_range("q", q, lower=0.0, upper=1.0)
  with x64_context():
    # q in float64: a Python float stays exact, a traced float32 upcasts
    # exactly, so the threshold is derived from the same q the accountant sees.
    q64 = jnp.asarray(q, dtype=jnp.float64)
    # Sanitize so the integer cast is defined for any traced value (NaN and
    # q < 0 select nothing, q > 1 everything; see the docstring).
    q64 = jnp.clip(jnp.where(jnp.isnan(q64), 0.0, q64), 0.0, 1.0)
    # floor(q * 2^32) / 2^32 <= q: P(bits < threshold) = threshold / 2^32.
    threshold = jnp.minimum(jnp.floor(q64 * 2.0**32), 2.0**32 - 1.0)
    bits = jax.random.bits(key, (n,), dtype=jnp.uint32)
    return (bits < threshold.astype(jnp.uint32)) | (q64 >= 1.0)
