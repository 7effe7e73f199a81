"""Shared helpers for the tests of the mechanisms and classical theorems: a plain/jit/vmap runner and mpmath oracles."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath
import numpy as np


def assert_plain_jit_vmap(fn, args, other_args, rtol=1e-13):
  """Check ``fn`` gives the same result plainly, under ``jax.jit`` and under ``jax.vmap``.

  ``args`` and ``other_args`` are two tuples of scalar arguments; vmap runs
  over the batch ``[args, other_args]`` and each row must equal the plain
  call on its own arguments. Results may be arrays or NamedTuples of arrays.
  Returns the plain result for ``args``.
  """

  def leaves(x):
    return [np.asarray(leaf) for leaf in jax.tree.leaves(x)]

  plain = [fn(*a) for a in (args, other_args)]
  # Traced float inputs are float64 only with x64 on (the library computes in
  # float64 either way, but would receive float32-rounded arguments).
  with jax.enable_x64(True):
    for a, expected in zip((args, other_args), plain):
      for got, want in zip(leaves(jax.jit(fn)(*a)), leaves(expected)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=0)
    batch = [np.asarray([a, b], np.float64) for a, b in zip(args, other_args)]
    batched = leaves(jax.vmap(fn)(*batch))
  for row, expected in enumerate(plain):
    for got, want in zip(batched, leaves(expected)):
      np.testing.assert_allclose(got[row], want, rtol=rtol, atol=0)
  return plain[0]


def mp_log_gauss(z, mean, sigma):
  return -((z - mean) ** 2) / (2 * sigma**2) - mpmath.log(sigma) - mpmath.log(2 * mpmath.pi) / 2


def mp_log_mixture(z, q, sigma):
  """log density of (1 - q) N(0, sigma^2) + q N(1, sigma^2)."""
  return mpmath.log(
    (1 - q) * mpmath.exp(mp_log_gauss(z, 0, sigma)) + q * mpmath.exp(mp_log_gauss(z, 1, sigma))
  )


def mp_renyi(log_p, log_q, alpha, points):
  """D_alpha(P || Q) = log(int p^alpha q^(1-alpha)) / (alpha - 1) by mpmath quadrature."""
  alpha = mpmath.mpf(alpha)
  integral = mpmath.quad(
    lambda z: mpmath.exp(alpha * log_p(z) + (1 - alpha) * log_q(z)),
    [-mpmath.inf] + list(points) + [mpmath.inf],
  )
  return mpmath.log(integral) / (alpha - 1)
