"""Shared helpers for the tests of the mechanisms and classical theorems: a plain/jit/vmap runner and mpmath oracles."""

from __future__ import annotations

import jax
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


def mp_wor_log_a(gamma, sigma, a, dps=80):
  """log A_alpha of the bound of Wang, Balle, Kasiviswanathan 2019 (arXiv:1808.00087,
  Thm 27) at integer ``a`` for the Gaussian mechanism with multiplier ``sigma``: 80
  significant digits, with the working precision raised by a + 40 digits so that the
  alternating chi-moment sums are exact to that level."""
  g, s = mpmath.mpf(gamma), mpmath.mpf(sigma)
  with mpmath.workdps(dps + a + 40):
    c = 1 / (2 * s * s)
    moments = {}

    def m(k):
      if k not in moments:
        moments[k] = mpmath.fsum(
          [
            (-1) ** (k - i) * mpmath.binomial(k, i) * mpmath.exp(c * i * (i - 1))
            for i in range(k + 1)
          ]
        )
      return moments[k]

    total = 1 + g**2 * mpmath.binomial(a, 2) * min(4 * mpmath.expm1(2 * c), 2 * mpmath.exp(2 * c))
    for j in range(3, a + 1):
      chi = 4 * mpmath.sqrt(m(2 * (j // 2)) * m(2 * ((j + 1) // 2)))
      total += g**j * mpmath.binomial(a, j) * min(chi, 2 * mpmath.exp(c * j * (j - 1)))
    return mpmath.log(total)


# One batch length for the grid comparisons of the test files: every grid is
# evaluated as a flat batch of this many elements (padded by repeating it), so that a
# kernel compiles once per file however many grids of different shapes it is checked on.
GRID_BATCH = 256


def on_grid(fn, *args, **kwargs):
  """``fn(*args, **kwargs)`` at the broadcast ``args``, as NumPy arrays of their shape.

  The call is made on one flat batch of ``GRID_BATCH`` elements (the grid, repeated),
  so that grids of any shape share one compiled program. Results may be arrays or
  NamedTuples of arrays.
  """
  arrays = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in args))
  shape, size = arrays[0].shape, arrays[0].size
  assert size <= GRID_BATCH, size
  out = fn(*(np.resize(a.ravel(), GRID_BATCH) for a in arrays), **kwargs)
  return jax.tree.map(lambda x: np.asarray(x)[:size].reshape(shape), out)


def mp_on_grid(f, *args):
  """The mpmath oracle ``f`` (floats in, a number or a tuple of numbers out) at every
  point of the broadcast ``args``: a float64 array of their shape, or a tuple of them."""
  arrays = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in args))
  shape = arrays[0].shape
  rows = [f(*(float(a) for a in x)) for x in zip(*(a.ravel() for a in arrays))]
  if rows and isinstance(rows[0], tuple):
    return tuple(np.array([float(r[k]) for r in rows]).reshape(shape) for k in range(len(rows[0])))
  return np.array([float(r) for r in rows]).reshape(shape)
