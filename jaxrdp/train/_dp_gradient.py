"""The DP-SGD gradient: per-example clipping, masked sum, Gaussian noise.

One DP-SGD step releases

    g = (sum_{i in B} clip_C(grad_i) + N(0, sigma^2 C^2 I)) / (q n)

where B is a Poisson sample of rate q (:func:`jaxrdp.train.poisson_sample_mask`),
clip_C(v) = v * min(1, C / ||v||_2), and ``q n`` is the expected batch size.
The sum has L2 sensitivity C under add/remove-one adjacency, so with noise std
sigma * C it is one step of the Sampled Gaussian Mechanism with noise multiplier
sigma, and dividing by the data-independent constant q n is post-processing.

References:
  Abadi et al. 2016, "Deep Learning with Differential Privacy",
  arXiv:1607.00133, Algorithm 1.
  Mironov, Talwar, Zhang 2019, arXiv:1908.10530 (the SGM).

Why not ``optax.contrib.differentially_private_aggregate`` (optax 0.2.8):
it divides by ``grads_flat[0].shape[0]``, the leading dimension of the
per-example gradients. With batches gathered from the sampled indices that is
the realized batch size (data-dependent shape, a recompilation per size, and a
normalization outside the SGM analysis, see :func:`dp_gradient`). With the
fixed-shape masked buffer used here it is n, so ``aggregate / q`` would equal
this module's result; but its noise multiplier is fixed when the transformation
is built, so a noise schedule would need a new transformation each step, and it
cannot take the Poisson mask. The tests check that, at sigma = 0 on a masked
buffer, ``aggregate / q`` equals :func:`dp_gradient`. The optimizer applied
after this gradient is any optax ``GradientTransformation``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core.precision import round_up_to, x64_context
from .._core.validation import check_range

__all__ = [
  "clip_per_example",
  "per_example_grads",
  "dp_gradient",
  "gather_batch",
  "gathered_dp_gradient",
]

PyTree = Any


def per_example_grads(
  loss_fn: Callable[[PyTree, PyTree], jax.Array], params: PyTree, batch: PyTree
) -> PyTree:
  """Gradients of ``loss_fn(params, example)`` for every example in ``batch``.

  ``jax.vmap(jax.grad(loss_fn), in_axes=(None, 0))``: every leaf of the result
  has the leading axis of ``batch``.

  Args:
    loss_fn: scalar loss of one example, ``loss_fn(params, example)``.
    params: model parameters (a pytree).
    batch: pytree whose leaves share a leading axis of length n.

  Returns:
    Pytree like ``params`` with an extra leading axis of length n.
  """
  return jax.vmap(jax.grad(loss_fn), in_axes=(None, 0))(params, batch)


def _per_example_norms(grads: PyTree) -> jax.Array:
  # Global L2 norm over all leaves, one value per example (leading axis).
  leaves = jax.tree.leaves(grads)
  sq = sum(jnp.sum(jnp.square(g.reshape(g.shape[0], -1)), axis=1) for g in leaves)
  return jnp.sqrt(sq)


def _clip_factors(norms: jax.Array, clip_norm: jax.Array) -> jax.Array:
  # min(1, C / ||v||): the branch not taken gets a safe denominator, so a zero
  # gradient (norm 0) gives factor 1 instead of inf * 0 = NaN.
  over = norms > clip_norm
  safe = jnp.where(over, norms, 1.0)
  return jnp.where(over, clip_norm / safe, 1.0)


def clip_per_example(grads: PyTree, clip_norm: ArrayLike) -> tuple[PyTree, jax.Array]:
  """Scales each example's gradient to global L2 norm at most ``clip_norm``.

  clip_C(v) = v * min(1, C / ||v||_2), with ||v||_2 taken over all leaves of
  one example (Abadi et al. 2016, arXiv:1607.00133, Algorithm 1).

  Args:
    grads: per-example gradients, every leaf with leading axis n.
    clip_norm: C > 0 (may be traced; a traced C <= 0 or NaN gives NaN).

  Returns:
    ``(clipped, norms)``: the clipped gradients (same structure) and the
    ``float[n]`` norms before clipping.

  Raises:
    ValueError: if a concrete ``clip_norm`` is not > 0.
  """
  check_range("clip_norm", clip_norm, lower=0.0, lower_open=True)
  norms = _per_example_norms(grads)
  c = _clip_in(clip_norm, norms.dtype)
  factors = _clip_factors(norms, c)
  clipped = jax.tree.map(
    lambda g: g * factors.reshape((-1,) + (1,) * (g.ndim - 1)).astype(g.dtype), grads
  )
  return clipped, norms


def _clip_in(clip_norm: ArrayLike, dtype) -> jax.Array:
  """C in the gradients' dtype; traced C <= 0 or NaN -> NaN."""
  with x64_context():  # a float64 C may arrive; convert it where that is allowed
    c = jnp.asarray(clip_norm).astype(dtype)
    return jnp.where(c > 0, c, jnp.asarray(jnp.nan, dtype))


def dp_gradient(
  loss_fn: Callable[[PyTree, PyTree], jax.Array],
  params: PyTree,
  batch: PyTree,
  mask: ArrayLike,
  key: jax.Array,
  *,
  clip_norm: ArrayLike,
  noise_multiplier: ArrayLike,
  expected_batch_size: ArrayLike,
) -> PyTree:
  """One noisy DP-SGD gradient from a Poisson-sampled, masked batch.

  g = (sum_i mask_i clip_C(grad_i) + N(0, sigma^2 C^2 I)) / (q n)

  (Abadi et al. 2016, arXiv:1607.00133, Algorithm 1, with Poisson sampling as
  in the SGM of arXiv:1908.10530.) ``batch`` holds all n candidate examples;
  ``mask`` marks the ones drawn this step, so shapes never change.

  The divisor is the *expected* batch size q n, never the realized one
  ``sum(mask)``. The privacy analysis covers the noisy sum; anything done to
  it afterwards must not look at the data or at the sample. The realized size
  depends on which examples were drawn: it differs between neighbouring
  datasets (Binomial(n, q) against Binomial(n + 1, q)) and is not noised, so
  dividing by it would release information the SGM bound does not pay for,
  and the result would no longer be a fixed rescaling of the analysed sum.
  The constant q n is public, so dividing by it is free post-processing.

  Args:
    loss_fn: scalar loss of one example, ``loss_fn(params, example)``.
    params: model parameters (a pytree of float arrays).
    batch: pytree of arrays with a common leading axis n (all examples).
    mask: ``bool[n]`` from :func:`jaxrdp.train.poisson_sample_mask`.
    key: PRNG key for the noise.
    clip_norm: C > 0.
    noise_multiplier: sigma >= 0; noise std is sigma * C.
    expected_batch_size: q * n > 0.

  Returns:
    Pytree like ``params``: the noisy, clipped, normalized gradient.

  Raises:
    ValueError: if a concrete ``clip_norm`` or ``expected_batch_size`` is not
      > 0, or a concrete ``noise_multiplier`` is negative or NaN.

  Traced invalid ``clip_norm``, ``noise_multiplier`` or
  ``expected_batch_size`` give a NaN gradient, never a silently wrong one.

  Precision: the scalars are handled in float64; the noise std is
  sigma * C with C as applied in the gradients' dtype, rounded up into each
  leaf's dtype. (Rounding inside the float32 clipping and noise sampling
  themselves, at the 1e-7 level, is outside the accounting, as in every
  floating-point DP-SGD implementation.)
  """
  check_range("clip_norm", clip_norm, lower=0.0, lower_open=True)
  check_range("noise_multiplier", noise_multiplier, lower=0.0)
  check_range("expected_batch_size", expected_batch_size, lower=0.0, lower_open=True)
  grads = per_example_grads(loss_fn, params, batch)
  clipped, norms = clip_per_example(grads, clip_norm)
  mask = jnp.asarray(mask, dtype=bool)
  # Select with where rather than multiply by the mask: an unsampled example
  # whose gradient is inf/NaN must not turn the sum into NaN (0 * inf = NaN).
  summed = jax.tree.map(
    lambda g: jnp.sum(
      jnp.where(mask.reshape((-1,) + (1,) * (g.ndim - 1)), g, jnp.zeros((), g.dtype)),
      axis=0,
    ),
    clipped,
  )
  with x64_context():
    # Scalars in float64 (Python floats stay exact). The noise std uses the
    # clip norm actually applied (C in the gradients' dtype) and is rounded
    # up into each leaf's dtype, so rounding never shrinks the noise below
    # sigma times the sensitivity.
    c_used = _clip_in(clip_norm, norms.dtype).astype(jnp.float64)
    sigma = jnp.asarray(noise_multiplier, jnp.float64)
    std = jnp.where(sigma >= 0, sigma * c_used, jnp.nan)
    denom = jnp.asarray(expected_batch_size, jnp.float64)
    denom = jnp.where(denom > 0, denom, jnp.nan)
  leaves, treedef = jax.tree.flatten(summed)
  keys = jax.random.split(key, len(leaves))
  noisy = []
  for s, k in zip(leaves, keys):
    with x64_context():
      std_l = round_up_to(std, s.dtype)
      denom_l = denom.astype(s.dtype)
    noisy.append((s + std_l * jax.random.normal(k, s.shape, s.dtype)) / denom_l)
  return jax.tree.unflatten(treedef, noisy)


def gather_batch(data: PyTree, indices: ArrayLike) -> PyTree:
  """``data[indices]`` on every leaf: the examples of one batch, O(batch) work.

  Works where the data is: numpy leaves with numpy indices are gathered on
  the host (then only the batch is transferred to the device); JAX arrays,
  or any traced argument, are gathered on the device with ``jnp.take``
  (inside ``jit`` for a dataset kept on the device).

  Args:
    data: pytree of arrays with a common leading axis n.
    indices: ``int[B_max]`` indices into that axis (padding entries must be
      valid indices, e.g. 0; they are masked later).

  Returns:
    Pytree like ``data`` with leading axis B_max.

  Examples:
    >>> import numpy as np
    >>> from jaxrdp.train import gather_batch
    >>> gather_batch({"x": np.arange(10) * 2}, np.array([3, 0]))["x"].tolist()
    [6, 0]
  """
  host_indices = isinstance(indices, np.ndarray)

  def take(x):
    if host_indices and isinstance(x, np.ndarray):
      return np.take(x, indices, axis=0)
    return jnp.take(jnp.asarray(x), jnp.asarray(indices), axis=0)

  return jax.tree.map(take, data)


def gathered_dp_gradient(
  loss_fn: Callable[[PyTree, PyTree], jax.Array],
  params: PyTree,
  data: PyTree,
  indices: ArrayLike,
  mask: ArrayLike,
  key: jax.Array,
  *,
  clip_norm: ArrayLike,
  noise_multiplier: ArrayLike,
  expected_batch_size: ArrayLike,
) -> PyTree:
  """One noisy DP-SGD gradient from the B_max gathered examples of a sampler.

      g = (sum_{i < B_max} mask_i clip_C(grad(data[indices_i])) + N(0, sigma^2 C^2 I)) / m

  Per-example gradients are computed for the B_max gathered examples only,
  so the cost is O(B_max), independent of the dataset size n. ``indices``
  and ``mask`` come from a sampler in :mod:`jaxrdp.train`
  (``PoissonSampler``, ``FixedSizeSampler``, ``ShuffleSampler``); the
  divisor m is the sampler's ``expected_batch_size``: q n for Poisson
  sampling, B for fixed-size and shuffled batches (constants, so the
  division is post-processing; never the realized batch size, see
  :func:`dp_gradient`). Same clipping, noise and precision rules as
  :func:`dp_gradient`, to which this delegates after the gather
  (Abadi et al. 2016, arXiv:1607.00133, Algorithm 1).

  Args:
    loss_fn: scalar loss of one example, ``loss_fn(params, example)``.
    params: model parameters (a pytree of float arrays).
    data: the dataset, a pytree of arrays with leading axis n, on the host
      (numpy) or on the device (see :func:`gather_batch`).
    indices: ``int[B_max]`` indices of the batch (padding: any valid index).
    mask: ``bool[B_max]``, True for the entries in the batch.
    key: PRNG key for the noise.
    clip_norm: C > 0.
    noise_multiplier: sigma >= 0; noise std sigma * C.
    expected_batch_size: the normalizer m > 0 (q n or B).

  Returns:
    Pytree like ``params``: the noisy, clipped, normalized gradient.

  Raises:
    ValueError: as :func:`dp_gradient`.

  Examples:
    >>> import jax, jax.numpy as jnp, numpy as np
    >>> from jaxrdp.train import PoissonSampler, gathered_dp_gradient
    >>> data = {"x": np.ones((1000, 3), np.float32), "y": np.zeros(1000, np.float32)}
    >>> loss = lambda w, ex: (ex["x"] @ w - ex["y"]) ** 2
    >>> s = PoissonSampler(n=1000, q=0.01, capacity=32, seed=0)
    >>> idx, mask = s.sample(0)
    >>> g = gathered_dp_gradient(loss, jnp.zeros(3), data, idx, mask, jax.random.PRNGKey(0),
    ...                          clip_norm=1.0, noise_multiplier=1.0,
    ...                          expected_batch_size=s.expected_batch_size)
    >>> g.shape
    (3,)
  """
  batch = gather_batch(data, indices)
  return dp_gradient(
    loss_fn,
    params,
    batch,
    mask,
    key,
    clip_norm=clip_norm,
    noise_multiplier=noise_multiplier,
    expected_batch_size=expected_batch_size,
  )
