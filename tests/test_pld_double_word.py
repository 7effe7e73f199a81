"""Double-word arithmetic and the double-word FFT composition, against exact and mpmath oracles."""

from fractions import Fraction

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from helpers import run_fresh_python

from jaxrdp.pld import _compose
from jaxrdp.pld import _double_word as dw

U2 = 2.0**-106


def _value(x):
  """A double word ``(hi, lo)`` as an exact Fraction."""
  return Fraction(float(x[0])) + Fraction(float(x[1]))


def _mp(re, im, k):
  return mpmath.mpc(
    mpmath.mpf(float(re[0][k])) + mpmath.mpf(float(re[1][k])),
    mpmath.mpf(float(im[0][k])) + mpmath.mpf(float(im[1][k])),
  )


def test_error_free_sum_and_product_are_exact_under_jit():
  rng = np.random.default_rng(0)
  # magnitudes e^-300 .. e^300: products stay clear of underflow and overflow
  a = rng.standard_normal(300) * np.exp(rng.uniform(-300, 300, 300))
  b = rng.standard_normal(300) * np.exp(rng.uniform(-300, 300, 300))
  b[:20] = a[:20] * (1 + 2.0**-40)  # near cancellation
  with jax.enable_x64(True):
    s = jax.jit(dw.two_sum)(a, b)
    p = jax.jit(dw.two_prod)(a, b)
  for i in range(a.size):
    assert Fraction(float(s[0][i])) + Fraction(float(s[1][i])) == Fraction(a[i]) + Fraction(b[i])
    assert Fraction(float(p[0][i])) + Fraction(float(p[1][i])) == Fraction(a[i]) * Fraction(b[i])


def test_product_and_sum_of_double_words_within_their_bounds():
  rng = np.random.default_rng(1)
  hi = rng.uniform(0.5, 2, (2, 200))
  lo = hi * rng.uniform(-1, 1, (2, 200)) * 2.0**-53
  x, y = (hi[0], lo[0]), (hi[1], lo[1])
  with jax.enable_x64(True):
    prod = jax.jit(dw.mul)(x, y)
    total = jax.jit(dw.add)(x, (-hi[1], -lo[1]))
  for i in range(200):
    xi, yi = _value((hi[0][i], lo[0][i])), _value((hi[1][i], lo[1][i]))
    assert abs(_value((prod[0][i], prod[1][i])) - xi * yi) <= Fraction(7 * U2) * abs(xi * yi)
    exact = xi - yi
    assert abs(_value((total[0][i], total[1][i])) - exact) <= Fraction(4 * U2) * abs(exact)


def test_twiddles_accurate_to_a_few_units_of_the_double_word():
  n = 4096
  tw = dw.twiddles(n)
  with mpmath.workdps(40):
    for k in range(0, n // 2, 37):
      exact = mpmath.expjpi(-2 * mpmath.mpf(k) / n)
      assert abs(_mp(tw[0], tw[1], k) - exact) <= 4 * U2


@pytest.mark.parametrize("n", [1, 2, 64, 256])
def test_fft_matches_mpmath_within_its_bound(n):
  rng = np.random.default_rng(n)
  x = rng.uniform(0, 1, n) * np.exp(rng.uniform(-50, 0, n))
  x /= x.sum()
  z = np.zeros(n)
  with jax.enable_x64(True):
    c = jax.jit(dw.fft)(((jnp.asarray(x), z), (z, z)))
    back = jax.jit(lambda v: dw.fft(v, inverse=True))(c)
  bound = dw.bound_stages(n) * x.sum() + n * max(np.log2(n), 1) * dw.TINY
  assert bound < 1e-29
  with mpmath.workdps(50):
    for k in range(0, n, max(1, n // 32)):
      exact = mpmath.fsum(
        mpmath.mpf(float(x[j])) * mpmath.expjpi(-2 * mpmath.mpf(j * k) / n) for j in range(n)
      )
      assert abs(_mp(c[0], c[1], k) - exact) <= bound
      # inverse of the forward: n x, within both transforms' bounds
      assert abs(_mp(back[0], back[1], k) / n - mpmath.mpf(float(x[k]))) <= 3 * bound


def test_power_within_its_relative_bound():
  rng = np.random.default_rng(2)
  r = 1.0 - rng.uniform(0.0, 1e-8, 8)  # |c|^t stays far from underflow
  theta = rng.uniform(-np.pi, np.pi, 8)
  re, im = r * np.cos(theta), r * np.sin(theta)
  z = np.zeros(8)
  steps = np.array([1.0, 2.0, 3.0, 7.0, 100.0, 1000.0, 12345.0, 2.0**23 - 1])
  with jax.enable_x64(True):
    got = jax.jit(lambda c, t: dw.power(c, t, 24))(((re, z), (im, z)), steps)
  with mpmath.workdps(60):
    for i in range(8):
      exact = mpmath.mpc(re[i], im[i]) ** int(steps[i])
      rel = abs(_mp(got[0], got[1], i) - exact) / abs(exact)
      assert rel <= dw.MUL_ERROR * (2 * steps[i] + 48), (steps[i], float(rel))


def test_double_word_composition_matches_exact_convolution():
  """Two phases (3 and 2 steps) on a circle of 16 bins, against exact rational arithmetic."""
  rng = np.random.default_rng(3)
  n = 16
  x = rng.uniform(0, 1, (2, n)) * np.exp(rng.uniform(-60, 0, (2, n)))
  x[:, 5:11] = 0.0
  x /= x.sum(axis=-1, keepdims=True)
  steps = np.array([3.0, 2.0])

  def conv(a, b):
    out = [Fraction(0)] * n
    for i in range(n):
      for j in range(n):
        out[(i + j) % n] += a[i] * b[j]
    return out

  exact = [Fraction(1)] + [Fraction(0)] * (n - 1)
  for phase, t in enumerate(steps):
    p = [Fraction(float(v)) for v in x[phase]]
    for _ in range(int(t)):
      exact = conv(exact, p)
  with jax.enable_x64(True):
    r, (err_inf, err_l2) = jax.jit(lambda x, s: _compose.compose_double_word(x, s, n))(x, steps)
    _, (err64, _) = jax.jit(lambda x, s: _compose.compose(x, s, n))(x, steps)
  assert float(err_inf) < 1e-28 and float(err_l2) <= np.sqrt(n) * float(err_inf) * (1 + 1e-12)
  assert float(err64) > 1e4 * float(err_inf)  # the float64 bound is far larger
  for k in range(n):
    # within the certified bound plus the final rounding to float64 (relative u)
    assert abs(Fraction(float(r[k])) - exact[k]) <= Fraction(float(err_inf)) + Fraction(
      2.0**-52
    ) * abs(exact[k])


def test_the_checks_above_hold_at_xla_default_optimization_level():
  """The suite compiles at XLA's optimization level 0 (conftest); users run at the
  default level 2, where XLA:CPU contracts products and sums into fused
  multiply-adds and XLA recomputes a value in each fusion that uses it. Before
  ``_double_word._product``, that made the powering and the composition above
  lose their low words at level 2 while passing at level 0."""
  script = (
    "import sys, pytest\n"
    "sys.exit(pytest.main(['-q', '-n', '0', '-p', 'no:cacheprovider', "
    f"{__file__!r}, '-k', 'not default_optimization_level']))\n"
  )
  out = run_fresh_python(script, env={"XLA_FLAGS": "--xla_backend_optimization_level=2"})
  assert " passed" in out and "failed" not in out, out[-2000:]
