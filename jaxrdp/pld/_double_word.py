"""Double-word (float64 + float64) arithmetic and a complex FFT in it, with error constants.

A double word is an unevaluated sum ``hi + lo`` of two float64 with
``|lo| <= u |hi|`` (``u = 2^-53``): about 106 bits. Used where the float64
FFT's round-off would be large next to the answer (tiny delta with a lumpy
privacy-loss distribution, ``_compose``); it costs about 30 times a float64 FFT.

Algorithms (Joldes, Muller, Popescu 2017, "Tight and rigorous error bounds for
basic building blocks of double-word arithmetic", ACM TOMS 44(2)):

* ``two_sum`` (Knuth) and ``fast_two_sum`` (Dekker): exact sums;
* ``two_prod``: the exact product (Dekker) from a split of each factor into two
  halves of at most 26 significant bits each (the low one signed): the high
  half is the factor rounded to 26 bits by integer operations on its bits
  (add half of the dropped range, then clear the low 27 bits of the
  significand), not Veltkamp's ``C a - (C a - a)``, so no contraction into
  fused multiply-adds can change it; every partial product is then exact, so
  contraction cannot change those either. The rounded product ``fl(a b)`` is
  the one inexact product, and it passes through its bits (``_product``) so
  that no copy of it is contracted. (Truncating instead of rounding leaves a
  low half of 27 bits, whose square is not exact.) Valid for ``|a| < 2^1023``;
* addition: the accurate algorithm (their Alg. 6), relative error at most
  ``3 u^2 + 13 u^3``;
* multiplication: their Alg. 10 (no fused multiply-add), relative error at most
  ``7 u^2``.

This module charges a complex multiplication ``16 u^2 |x| |y|`` (per part, two
real products of error ``7 u^2`` each and one sum of error ``3 u^2``: at most
``10 u^2 (|ac| + |bd|)``, and the two parts together at most ``10 sqrt 2 u^2
|x| |y|``, rounded up) and a complex addition ``3 u^2 |x + y|`` (per part).

Underflow: below ``2^-969`` the low word loses bits (and is flushed to zero where
the hardware flushes subnormals), so every operation also carries an absolute
error of at most ``2^-960``; :func:`fft` reports a bound that includes it.
"""

from __future__ import annotations

import decimal
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp._core.numerics import UNIT_ROUNDOFF

__all__ = ["MUL_ERROR", "STAGE_ERROR", "TINY", "fft", "power", "twiddles"]

# Relative error of one complex multiplication, and of one butterfly ``a +- w b``
# relative to ``|a| + |b|``: the twiddle's 18 u^2 (see twiddles) and the
# product's 16 u^2 on ``|b|``, the sum's 3 u^2, 37 u^2 in all, rounded up.
MUL_ERROR = 16.0 * UNIT_ROUNDOFF * UNIT_ROUNDOFF
STAGE_ERROR = 64.0 * UNIT_ROUNDOFF * UNIT_ROUNDOFF
# Absolute error per operation from underflow of the low word.
TINY = 2.0**-960


_KEEP = 0xFFFFFFFFF8000000  # sign, exponent and the top 25 stored significand bits
_HALF = 0x4000000  # half of the 27 dropped bits' range: rounds to nearest


def _split(a):
  """``a = hi + lo`` exactly, ``hi`` = ``a`` rounded to 26 significant bits, ``|lo|`` < 2^26 ulp.

  On numpy arrays (the twiddle tables, built on the host) with numpy's bit
  view, on anything else with JAX's bitcast; every other operation of this
  module is plain arithmetic, so it serves both.
  """
  if isinstance(a, np.ndarray):
    hi = ((a.view(np.uint64) + np.uint64(_HALF)) & np.uint64(_KEEP)).view(np.float64)
    return hi, a - hi
  bits = jax.lax.bitcast_convert_type(a, jnp.uint64)
  hi = jax.lax.bitcast_convert_type((bits + jnp.uint64(_HALF)) & jnp.uint64(_KEEP), jnp.float64)
  return hi, a - hi


def _product(a, b):
  """``a b`` rounded once, in a form no fused multiply-add can absorb.

  XLA recomputes a value in every fusion that uses it, and at its default
  optimization level XLA:CPU contracts a product followed by a sum into one
  fused multiply-add, in some copies and not in others. An error-free
  transformation that sees ``a b`` rounded in one place and exact in another
  is no longer exact (measured: a double-word square inside a loop lost its low
  word). The product therefore passes through its bits, XORed with a flag
  that is zero unless it is NaN (a NaN stays NaN): no compiler can fold that
  away, so every copy of it is the rounded product. Every other product of this
  module is exact (halves of at most 26 bits), so contraction cannot change
  it. NumPy (the host-side twiddle tables) rounds every operation on its own.
  """
  p = a * b
  if isinstance(p, (np.ndarray, np.floating, float)):
    return p
  bits = jax.lax.bitcast_convert_type(p, jnp.uint64)
  flag = jnp.isnan(p).astype(jnp.uint64)
  return jax.lax.bitcast_convert_type(bits ^ flag, jnp.float64)


def two_sum(a, b):
  s = a + b
  bb = s - a
  return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a, b):
  """Exact ``a + b`` for ``|a| >= |b|`` (or ``a`` zero)."""
  s = a + b
  return s, b - (s - a)


def two_prod(a, b):
  p = _product(a, b)
  ah, al = _split(a)
  bh, bl = _split(b)
  return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def add(x, y):
  """Double word ``x + y`` (accurate addition)."""
  sh, sl = two_sum(x[0], y[0])
  th, tl = two_sum(x[1], y[1])
  vh, vl = fast_two_sum(sh, sl + th)
  return fast_two_sum(vh, tl + vl)


def neg(x):
  return -x[0], -x[1]


def mul(x, y):
  """Double word ``x y``."""
  ch, cl1 = two_prod(x[0], y[0])
  cl2 = _product(x[0], y[1]) + _product(x[1], y[0])
  return fast_two_sum(ch, cl1 + cl2)


def cmul(x, y):
  """Complex double words ``x = (re, im)``, each ``(hi, lo)``."""
  (a, b), (c, d) = x, y
  return add(mul(a, c), neg(mul(b, d))), add(mul(a, d), mul(b, c))


def cadd(x, y):
  return add(x[0], y[0]), add(x[1], y[1])


def csub(x, y):
  return add(x[0], neg(y[0])), add(x[1], neg(y[1]))


def _dw_of(value: decimal.Decimal):
  hi = float(value)
  return hi, float(value - decimal.Decimal(hi))


def _cos_sin(theta: decimal.Decimal):
  """``(cos, sin)`` of ``|theta| <= pi`` by Taylor series at the context's precision."""
  c, s = decimal.Decimal(1), theta
  term_c, term_s = decimal.Decimal(1), theta
  sq = theta * theta
  k = 1
  eps = decimal.Decimal(10) ** -(decimal.getcontext().prec + 2)
  while abs(term_c) > eps or abs(term_s) > eps:
    term_c = -term_c * sq / ((2 * k - 1) * (2 * k))
    term_s = -term_s * sq / ((2 * k) * (2 * k + 1))
    c += term_c
    s += term_s
    k += 1
  return c, s


# pi to 60 digits
_PI = decimal.Decimal("3.14159265358979323846264338327950288419716939937510582097494")


@functools.lru_cache(maxsize=8)
def twiddles(n: int):
  """``e^{-2 pi i k / n}`` for ``k < n / 2`` as double words: ``((re_hi, re_lo), (im_hi, im_lo))``.

  Two short tables computed at 45 digits (``w^{j m}`` and ``w^j``, ``m`` about
  ``sqrt(n / 2)``), combined by one double-word complex product each: relative
  error at most ``MUL_ERROR + 2 u^2`` (well within ``STAGE_ERROR``).
  """
  half = n // 2
  m = 1 << max(0, (half.bit_length() - 1) // 2)
  rows = -(-half // m)
  with decimal.localcontext() as ctx:
    ctx.prec = 45

    def table(ks):
      out = np.zeros((4, len(ks)))
      for i, k in enumerate(ks):
        c, s = _cos_sin(-2 * _PI * k / n)
        (out[0, i], out[1, i]), (out[2, i], out[3, i]) = _dw_of(c), _dw_of(s)
      return out

    coarse = table([j * m for j in range(rows)])
    fine = table(list(range(m)))
  x = ((coarse[0][:, None], coarse[1][:, None]), (coarse[2][:, None], coarse[3][:, None]))
  y = ((fine[0][None, :], fine[1][None, :]), (fine[2][None, :], fine[3][None, :]))
  with np.errstate(all="ignore"):
    w = cmul(x, y)
  return tuple(tuple(np.ascontiguousarray(p.reshape(-1)[:half]) for p in part) for part in w)


def fft(x, inverse: bool = False):
  """Complex DFT of double words along the last axis (length a power of two).

  ``x = ((re_hi, re_lo), (im_hi, im_lo))``. Forward: ``X_k = sum_j x_j
  e^{-2 pi i j k / n}``; inverse: the same with ``+i`` and no ``1/n``. Radix-2,
  decimation in time, self-sorting (Stockham): stage ``s`` combines the DFTs of
  length ``L = 2^s`` of the residue classes ``j`` and ``j + M/2`` modulo ``M =
  n / L``. Each computed coefficient is within ``((1 + STAGE_ERROR)^{log2 n} -
  1) sum_j |x_j| + n log2(n) TINY`` of the exact one (induction over stages).
  """
  n = x[0][0].shape[-1]
  stages = n.bit_length() - 1
  if n != 1 << stages:
    raise ValueError(f"double-word FFT length must be a power of two, got {n}")
  w_all = twiddles(n) if n > 1 else ((np.ones(1), np.zeros(1)), (np.zeros(1), np.zeros(1)))
  batch = x[0][0].shape[:-1]
  # a[..., k, j]: DFT of length L of residue class j (mod M), k < L
  a = jax.tree_util.tree_map(lambda v: v.reshape(batch + (1, n)), x)
  length, m = 1, n
  for _ in range(stages):
    half = m // 2
    even = jax.tree_util.tree_map(lambda v, h=half: v[..., :h], a)
    odd = jax.tree_util.tree_map(lambda v, h=half: v[..., h:], a)
    stride = n // (2 * length)
    tw = tuple(tuple(jnp.asarray(p[::stride][:length])[:, None] for p in part) for part in w_all)
    if inverse:
      tw = (tw[0], neg(tw[1]))
    t = cmul(tw, odd)
    top = cadd(even, t)
    bottom = csub(even, t)
    a = jax.tree_util.tree_map(lambda u, v: jnp.concatenate([u, v], axis=-2), top, bottom)
    length, m = 2 * length, half
  return jax.tree_util.tree_map(lambda v: v.reshape(batch + (n,)), a)


def power(c, t, bits: int):
  """``c^t`` for complex double words ``c`` and integers ``0 <= t < 2^bits`` (float64, traced).

  Binary powering: at most ``2 bits`` complex products; the relative error of
  ``c^t`` is at most ``MUL_ERROR (2 t + 2 bits)`` to first order (each squaring
  doubles the relative error of the square).
  """
  zero = jnp.zeros_like(c[0][0])
  one = ((zero + 1.0, zero), (zero, zero))

  def body(i, carry):
    result, base, rest = carry
    bit = jnp.mod(rest, 2.0) == 1.0
    prod = cmul(result, base)
    result = jax.tree_util.tree_map(lambda p, r: jnp.where(bit, p, r), prod, result)
    return result, cmul(base, base), jnp.floor(rest / 2.0)

  t = jnp.broadcast_to(t, c[0][0].shape)
  result, _, _ = jax.lax.fori_loop(0, bits, body, (one, c, t))
  return result


def bound_stages(n: int) -> float:
  """``(1 + STAGE_ERROR)^{log2 n} - 1``, rounded up."""
  return math.expm1(math.ceil(math.log2(max(n, 2))) * math.log1p(STAGE_ERROR)) * (1.0 + 1e-12)
