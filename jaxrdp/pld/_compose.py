"""T-fold composition of tilted single-step PMFs by FFT, with a round-off bound.

The privacy losses of independent steps add, so the composed PLD is the
convolution power of the single-step PMF (Koskela, Jalko, Honkela 2020,
arXiv:2006.07134; heterogeneous steps: Koskela et al. 2021, arXiv:2102.12412).
Every phase ``j`` contributes ``c_j(k)^{T_j}`` in the frequency domain; the
product is inverted with one real FFT of static length ``n``.

Round-off (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed.,
Thm 24.2): a radix-2 FFT of length ``n`` has
``||fl(F x) - F x||_2 <= g log2(n) ||F x||_2`` with ``g ~ 6.7 u`` (here ``g = 10 u``,
``u = 2^-53``), and ``||F x||_2 = sqrt(n) ||x||_2``. So every coefficient has an
absolute error at most ``dc = g log2(n) sqrt(n) ||x||_2``. Raising to ``T``:
``|c'^T - c^T| <= T m^{T-1} dc`` with ``m = min(|c'| + dc, 1 + dc)`` (``|c| <= 1``
for a sub-probability vector), plus ``4 u (1 + sum_j T_j (1 + |log c_j|)) |c^T|`` for
evaluating the power as ``exp(T log c)``. The inverse transform (with its
``1/n``) maps a spectral error ``E`` to ``||E||_2 / sqrt(n)`` and adds at most
``g log2(n) ||y||_2``. The result is an a-posteriori bound ``err_l2`` on the
Euclidean norm of the error of the composed (tilted) PMF; readers turn it into a
delta bound with Cauchy-Schwarz.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

__all__ = ["compose"]

_U = 2.0**-53


def compose(x, steps, n: int):
  """Composes phases of tilted PMFs by FFT.

  Args:
    x: ``(..., P, n)`` non-negative tilted single-step PMFs (each sums to 1), phase
      axis second to last, placed at the start of a length-``n`` array.
    steps: ``(..., P)`` number of steps per phase (float64).
    n: static FFT length (power of two).

  Returns:
    ``(r, err_l2)``: the circular ``T``-fold composition ``(..., n)`` (index ``k``
    is the loss ``origin + k d`` modulo ``n d``) and the bound on the Euclidean
    norm of its round-off error ``(...)``.
  """
  g = 10.0 * _U * math.log2(n)
  c = jnp.fft.rfft(x, n=n, axis=-1)  # (..., P, K)
  absc = jnp.abs(c)
  nonzero = absc > 0
  logc = jnp.log(jnp.where(nonzero, c, 1.0))
  t = steps[..., None]
  total = jnp.exp(jnp.sum(t * logc, axis=-2))
  total = jnp.where(jnp.all(nonzero, axis=-2), total, 0.0)
  y = jnp.fft.irfft(total, n=n, axis=-1)
  # A-posteriori error bound of the spectrum, then of y.
  dc = g * math.sqrt(n) * jnp.sqrt(jnp.sum(x * x, axis=-1))  # (..., P)
  m = jnp.minimum(absc + dc[..., None], 1.0 + dc[..., None])  # (..., P, K)
  logm = jnp.log(m)
  s = jnp.sum(t * logm, axis=-2)  # (..., K)
  prop = jnp.sum(t * dc[..., None] * jnp.exp(s[..., None, :] - logm), axis=-2)
  abs_log = jnp.sum(t * (1.0 + jnp.abs(jnp.where(nonzero, logc, 0.0))), axis=-2)
  power = 4.0 * _U * (1.0 + abs_log) * jnp.abs(total)
  e = prop + power
  k = e.shape[-1]
  weight = np.full(k, 2.0)
  weight[[0, -1]] = 1.0  # interior bins of a real FFT stand for two coefficients
  e_l2 = jnp.sqrt(jnp.sum(weight * e * e, axis=-1))
  y_l2 = jnp.sqrt(jnp.sum(y * y, axis=-1))
  err_l2 = e_l2 / math.sqrt(n) + 2.0 * g * y_l2
  return y, err_l2
