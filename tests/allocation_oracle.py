"""Independent references for random allocation of the Gaussian mechanism.

* ``remove_log_moment_partitions``: Feldman and Shenfeld 2025 (arXiv:2502.08202)'s
  sum over the integer partitions of alpha with at most t parts, literally, in
  mpmath: for a partition with parts lambda_1 >= ... >= lambda_p, the number of
  placements is t! / (t - p)! / prod_j mult_j! (mult_j: how many parts equal j)
  times the multinomial alpha! / prod lambda_i!, each weighted by
  exp(sum_i lambda_i (lambda_i - 1) / (2 sigma^2)), over t^alpha.
* ``remove_log_moment_bins``: the same expectation by a recursion over the
  number of occupied bins (polynomial powers in exact rationals times mpmath
  exponentials), for orders too large to enumerate partitions.
* ``add_rdp_two_steps``: the add direction for t = 2 in closed form up to one
  integral: S = (Y_1 + Y_2) / 2 = exp(s a / sqrt 2 - s^2 / 2) cosh(s b / sqrt 2)
  with a, b independent standard normals, so
  E[S^-m] = exp(m s^2 / 2 + m^2 s^2 / 4) E[cosh(s b / sqrt 2)^-m], in mpmath.
* ``add_log_moment_adaptive``: the add direction for any t by adaptive quadrature
  (scipy, float64) of the one-dimensional representation, for checking the
  fixed-grid quadrature of jaxrdp (a different integration method, not a
  different formula).
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import numpy as np


def _partitions(n, max_parts, largest=None):
  largest = n if largest is None else largest
  if n == 0:
    yield ()
    return
  if max_parts == 0:
    return
  for first in range(min(n, largest), 0, -1):
    for rest in _partitions(n - first, max_parts - 1, first):
      yield (first,) + rest


def remove_log_moment_partitions(alpha: int, sigma, t: int, dps: int = 50):
  """log E_Q[(P/Q)^alpha] of one 1-out-of-t allocation, by the partition sum (mpmath)."""
  with mp.workdps(dps):
    c = 1 / mp.mpf(sigma) ** 2
    total = mp.mpf(0)
    for part in _partitions(alpha, t):
      p = len(part)
      mult = {}
      for x in part:
        mult[x] = mult.get(x, 0) + 1
      placements = Fraction(math.perm(t, p), math.prod(math.factorial(v) for v in mult.values()))
      multinom = math.factorial(alpha) // math.prod(math.factorial(x) for x in part)
      pairs = sum(x * (x - 1) // 2 for x in part)
      total += mp.mpf(placements.numerator) / placements.denominator * multinom * mp.exp(c * pairs)
    return mp.log(total / mp.mpf(t) ** alpha)


def remove_log_moment_bins(alpha: int, sigma, t: int, dps: int = 50):
  """The same by occupied bins: sum_m t!/((t-m)! m!) alpha! [x^alpha] g(x)^m / t^alpha,
  g(x) = sum_{a >= 1} e^{c a (a-1)/2} x^a / a!."""
  with mp.workdps(dps):
    c = 1 / mp.mpf(sigma) ** 2
    g = [mp.mpf(0)] + [mp.exp(c * a * (a - 1) / 2) / mp.factorial(a) for a in range(1, alpha + 1)]
    power = [mp.mpf(1)] + [mp.mpf(0)] * alpha
    total = mp.mpf(0)
    for m in range(1, min(alpha, t) + 1):
      power = [mp.fsum(power[n - a] * g[a] for a in range(1, n + 1)) for n in range(alpha + 1)]
      total += mp.mpf(math.comb(t, m)) * power[alpha]
    return mp.log(total * mp.factorial(alpha) / mp.mpf(t) ** alpha)


def add_rdp_two_steps(sigma, alpha, dps: int = 40):
  """D_alpha(Q || P) of one 1-out-of-2 allocation (mpmath, one integral)."""
  with mp.workdps(dps):
    s = 1 / mp.mpf(sigma)
    m = mp.mpf(alpha) - 1
    beta = s / mp.sqrt(2)
    inner = mp.quad(lambda b: mp.npdf(b) * mp.cosh(beta * b) ** (-m), [-mp.inf, -5, 0, 5, mp.inf])
    return (m * s * s / 2 + m * m * s * s / 4 + mp.log(inner)) / m


def add_log_moment_adaptive(sigma, t: int, alpha):
  """log E_Q[S^-(alpha - 1)] of one 1-out-of-t allocation by adaptive quadrature (float64).

  E[S^-m] = 1 + Gamma(m)^-1 int e^{m w - e^w} expm1(t log(1 + H(e^w / t))) dw,
  H(u) = E[e^{-u (Y - 1)} - 1 + u (Y - 1)] (non-negative integrands throughout).
  """
  from scipy import integrate, special

  s = 1.0 / sigma
  m = alpha - 1.0

  def log_mgf(u):
    """log E[e^{-u (Y - 1)}] >= 0."""
    zs = np.linspace(-40 - s, 20 + 2 * s, 4001)
    expo = -0.5 * zs * zs - u * np.expm1(s * zs - 0.5 * s * s)
    top = float(np.max(expo))
    if u * math.expm1(s * s) < 0.5:  # E[E2] route: 1 + H, H >= 0 and small

      def f(z):
        x = -u * math.expm1(s * z - 0.5 * s * s)
        e2 = x * x / 2 * (1 + x / 3 + x * x / 12) if abs(x) < 1e-4 else math.expm1(x) - x
        return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) * e2

      val, _ = integrate.quad(
        f, -30 - s, 20 + 2 * s, points=[0.0, s, 2 * s], limit=400, epsabs=0, epsrel=1e-13
      )
      return math.log1p(val)
    z_top = float(zs[np.argmax(expo)])

    def f2(z):
      return math.exp(-0.5 * z * z - u * math.expm1(s * z - 0.5 * s * s) - top)

    val, _ = integrate.quad(
      f2,
      -40 - s,
      20 + 2 * s,
      points=[z_top - 1, z_top, z_top + 1],
      limit=400,
      epsabs=0,
      epsrel=1e-13,
    )
    return top + math.log(val / math.sqrt(2 * math.pi))

  def g(w):
    tl = t * log_mgf(math.exp(w) / t)
    if tl <= 0.0:
      return 0.0
    log_expm1 = tl + math.log(-math.expm1(-tl))
    return math.exp(m * w - math.exp(w) + log_expm1)

  peak = math.log(max(m, 1e-3))
  val, _ = integrate.quad(
    g, -40, 12, points=[peak - 3, peak, peak + 3], limit=600, epsabs=0, epsrel=1e-12
  )
  return math.log1p(val / special.gamma(m))


def gaussian_log_moment(alpha, sigma):
  return alpha * (alpha - 1) / (2 * sigma**2)


__all__ = [
  "add_log_moment_adaptive",
  "add_rdp_two_steps",
  "gaussian_log_moment",
  "remove_log_moment_bins",
  "remove_log_moment_partitions",
]
