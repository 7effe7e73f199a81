"""T-fold composition of tilted single-step PMFs by FFT, with a round-off bound.

The privacy losses of independent steps add, so the composed PLD is the
convolution power of the single-step PMF (Koskela, Jalko, Honkela 2020,
arXiv:2006.07134; heterogeneous steps: Koskela et al. 2021, arXiv:2102.12412).
Every phase ``j`` contributes ``c_j(k)^{T_j}`` in the frequency domain; the
product is inverted with one real FFT of static length ``n``.

Round-off. Each stage of a fast Fourier transform computes butterflies
``a +- w b`` with a relative error of at most ``g = 10 u`` (``u = 2^-53``;
Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., Sec. 24.1,
Thm 24.2, whose constant covers the twiddle factors), so by induction over the
``log2(n)`` stages every computed coefficient of a non-negative ``x`` is off by
at most ``dc = ((1 + g)^{log2 n + 2} - 1) sum(x)`` (two stages of margin for the
real-input packing), and the whole vector by at most ``dc_2 = ((1 + g)^{log2 n + 2}
- 1) ||F x||_2`` in Euclidean norm (Higham's normwise theorem). Raising to ``T``:
``|c'^T - c^T| <= T m^{T-1} dc`` with ``m = min(|c'| + dc, sum(x) + dc)``, plus
``4 u (1 + sum_j T_j (1 + |log c_j|)) |c^T|`` for evaluating the power as
``exp(T log c)``. The inverse transform (with its exact ``1/n``) maps a
spectral error ``E`` to at most ``sum_k |E_k| / n`` in every bin and
``||E||_2 / sqrt(n)`` in norm, and adds its own round-off, bounded the same way.
The result is an a-posteriori bound on the composed (tilted) PMF's error, both
in every bin (``err_inf``) and in Euclidean norm (``err_l2``); readers turn
either into a delta bound (Holder or Cauchy-Schwarz with the reading weights).

These bounds are relative to the total tilted mass (1), so where delta is tiny
and the tilted mass near the answer is far below 1 (a lumpy privacy-loss
distribution), they can be large next to delta. :func:`compose_double_word`
then does the same in double-word arithmetic (``_double_word``, about 106
bits), whose bounds are about ``1e-16`` times smaller; the power ``c^T`` is
taken by binary powering in it. Its output is rounded to float64 once, a
relative error of ``u`` per bin, which the reader's summation bound (``8 n u``
relative) covers.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxrdp._core.numerics import UNIT_ROUNDOFF

from . import _double_word

__all__ = ["compose", "compose_double_word"]


def _power(c, t, dc, l1, g, n, weight):
  """Composed spectrum and its error terms on the coefficients given (last axis)."""
  absc = jnp.abs(c)
  nonzero = absc > 0
  logc = jnp.log(jnp.where(nonzero, c, 1.0))
  total = jnp.exp(jnp.sum(t * logc, axis=-2))
  total = jnp.where(jnp.all(nonzero, axis=-2), total, 0.0)
  logm = jnp.log(jnp.minimum(absc + dc, dc + l1))  # (..., P, K')
  s = jnp.sum(t * logm, axis=-2)  # (..., K')
  prop = jnp.sum(t * dc * jnp.exp(s[..., None, :] - logm), axis=-2)
  abs_log = jnp.sum(t * (1.0 + jnp.abs(jnp.where(nonzero, logc, 0.0))), axis=-2)
  power = 4.0 * UNIT_ROUNDOFF * (1.0 + abs_log) * jnp.abs(total)
  e = prop + power
  size = jnp.abs(total) + e  # bound on the computed spectrum's magnitude
  err_inf = (jnp.sum(weight * e, axis=-1) + g * jnp.sum(weight * size, axis=-1)) / n
  err_l2 = (
    jnp.sqrt(jnp.sum(weight * e * e, axis=-1))
    + g * jnp.sqrt(jnp.sum(weight * size * size, axis=-1))
  ) / math.sqrt(n)
  return total, err_inf, err_l2


def _weights(k, dtype, n):
  """Interior bins of a real FFT stand for two coefficients (an iota, not a constant)."""
  pos = jax.lax.iota(dtype, k)
  return jnp.where((pos == 0) | (pos == n // 2), 1.0, 2.0)


# Coefficients at or above n / _BAND are dropped when the bound on their composed
# magnitude is below e^-700 (then they are below the float64 range anyway).
_BAND = 64
_DROP = -700.0


def compose(x, steps, n: int):
  """Composes phases of tilted PMFs by FFT.

  The composed spectrum ``prod_j c_j^{T_j}`` of a smooth composition lives on
  few low frequencies: where the bound ``prod_j (|c_j| + dc)^{T_j}`` of every
  coefficient from ``n / 64`` up is below ``e^-700``, only the lower ones are
  raised to the power (the others are zero, and their bound is added to the
  error); otherwise all are.

  Args:
    x: ``(..., P, n)`` non-negative tilted single-step PMFs (each sums to 1), phase
      axis second to last, placed on a length-``n`` circle.
    steps: ``(..., P)`` number of steps per phase (float64).
    n: static FFT length (a power of two, or three times one).

  Returns:
    ``(r, (err_inf, err_l2))``: the circular ``T``-fold composition ``(..., n)``
    (index ``k`` is the loss ``origin + k d`` modulo ``n d``) and bounds on its
    round-off error in every bin and in Euclidean norm ``(...)``.
  """
  g = (1.0 + 10.0 * UNIT_ROUNDOFF) ** (math.ceil(math.log2(n)) + 2.0) - 1.0
  c = jnp.fft.rfft(x, n=n, axis=-1)  # (..., P, K)
  k = c.shape[-1]
  t = steps[..., None]
  # |c_k| <= sum(x) (with a margin for the rounding of the sum), and each computed
  # coefficient is off by at most dc.
  l1 = ((1.0 + g) * jnp.sum(jnp.abs(x), axis=-1))[..., None]
  dc = g * l1
  weight = _weights(k, x.dtype, n)
  band = k if n < 16 * _BAND else n // _BAND

  def full(c):
    return _power(c, t, dc, l1, g, n, weight)

  if band >= k:
    total, err_inf, err_l2 = full(c)
  else:
    # Bound on the composed magnitude of the coefficients that would be dropped.
    logm = jnp.log(jnp.minimum(jnp.abs(c[..., band:]) + dc, dc + l1))
    top = jnp.max(jnp.sum(t * logm, axis=-2), axis=-1)  # (...)

    def low(c):
      total, err_inf, err_l2 = _power(c[..., :band], t, dc, l1, g, n, weight[:band])
      pad = jnp.zeros(total.shape[:-1] + (k - band,), total.dtype)
      dropped = 2.0 * (k - band) * jnp.exp(top)  # their sum of weights times magnitudes
      err_inf = err_inf + (1.0 + g) * dropped / n
      err_l2 = err_l2 + (1.0 + g) * jnp.sqrt(2.0 * (k - band)) * jnp.exp(top) / math.sqrt(n)
      return jnp.concatenate([total, pad], axis=-1), err_inf, err_l2

    if top.ndim == 0:
      total, err_inf, err_l2 = jax.lax.cond(top < _DROP, low, full, c)
    else:  # batched: both are evaluated anyway
      lo_, hi_ = low(c), full(c)
      pick = top < _DROP
      total, err_inf, err_l2 = (
        jnp.where(pick[..., None] if a.ndim > pick.ndim else pick, a, b) for a, b in zip(lo_, hi_)
      )
  y = jnp.fft.irfft(total, n=n, axis=-1)
  return _one_step_exact(x, steps, n, y, err_inf, err_l2)


def _one_step_exact(x, steps, n, y, err_inf, err_l2):
  """``(y, (err_inf, err_l2))``, where one phase of one step takes the PMF itself.

  Its composition is ``x`` exactly (zero-padded to ``n``), with no round-off.
  """
  if x.shape[-2] == 1:
    single = steps[..., 0] == 1.0
    pad = [(0, 0)] * (x.ndim - 2) + [(0, n - x.shape[-1])]
    y = jnp.where(single[..., None], jnp.pad(x[..., 0, :], pad), y)
    err_inf = jnp.where(single, 0.0, err_inf)
    err_l2 = jnp.where(single, 0.0, err_l2)
  return y, (err_inf, err_l2)


# Binary digits of the step counts (MAX_STEPS = 1e7 < 2^24).
_STEP_BITS = 24


def compose_double_word(x, steps, n: int):
  """:func:`compose` in double-word arithmetic (``n`` a power of two), for one job.

  ``x``: ``(P, n)`` non-negative tilted PMFs; ``steps``: ``(P,)``. Returns
  ``(r, (err_inf, err_l2))`` like :func:`compose`. Error terms, each from
  ``_double_word``'s constants: the forward transform (``g ||x||_1`` per
  coefficient, ``g = (1 + STAGE_ERROR)^{log2 n} - 1``) raised to the power
  (``T m^{T-1} dc`` as in :func:`compose`), binary powering (``MUL_ERROR (2 T +
  2 bits)`` relative per phase, one product per further phase), the inverse
  transform (``g`` times the spectrum's L1 norm, over ``n``) and underflow
  (``TINY`` per operation).
  """
  p = x.shape[-2]
  g = _double_word.bound_stages(n)
  zero = jnp.zeros_like(x)
  c = _double_word.fft(((x, zero), (zero, zero)))
  l1 = (1.0 + 2.0 * n * UNIT_ROUNDOFF) * jnp.sum(x, axis=-1, keepdims=True)  # (P, 1)
  ops = n * math.log2(n) * _double_word.TINY
  dc = g * l1 + ops
  t = steps[:, None]
  powered = _double_word.power(c, t, _STEP_BITS)
  total = jax.tree_util.tree_map(lambda v: v[0], powered)
  for j in range(1, p):
    total = _double_word.cmul(total, jax.tree_util.tree_map(lambda v, j=j: v[j], powered))
  re = total[0][0] + total[0][1]
  im = total[1][0] + total[1][1]
  absc = (1.0 + 4.0 * UNIT_ROUNDOFF) * jnp.hypot(c[0][0] + c[0][1], c[1][0] + c[1][1])
  logm = jnp.log(jnp.minimum(absc + dc, dc + l1))  # (P, n)
  s = jnp.sum(t * logm, axis=0)  # (n,) bound on log |computed c|^T products
  prop = jnp.sum(t * dc * jnp.exp(s[None, :] - logm), axis=0)
  rel = _double_word.MUL_ERROR * (jnp.sum(2.0 * steps + 2.0 * _STEP_BITS) + p)
  e = prop + rel * jnp.exp(s) + 2.0 * _STEP_BITS * p * _double_word.TINY
  size = (1.0 + 4.0 * UNIT_ROUNDOFF) * jnp.hypot(re, im) + e
  y = _double_word.fft(total, inverse=True)
  r = (y[0][0] + y[0][1]) / n
  err_inf = (jnp.sum(e) + g * jnp.sum(size)) / n + ops
  return _one_step_exact(x, steps, n, r, err_inf, math.sqrt(n) * err_inf)
