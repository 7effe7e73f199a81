"""Exact one-epoch deltas of random 1-out-of-t allocation (t = 2, 3), by quadrature.

Test infrastructure, sharing no code with jaxrdp. One epoch is the pair
``P = (1/t) sum_i N(e_i, s^2 I)``, ``Q = N(0, s^2 I)`` (Feldman and Shenfeld 2025,
arXiv:2502.08202), with likelihood ratio ``S = (1/t) sum_i Y_i``, ``Y_i = exp(x_i / s^2 -
1 / (2 s^2))`` i.i.d. log-normal under ``Q``. Then

    remove: delta(eps) = E_Q[(S - e^eps)_+],   add: delta(eps) = E_Q[(1 - e^eps S)_+].

Given all coordinates but the last, the expectation over the last is in closed form
(the log-normal's partial moments: ``E[(Y - a)_+] = Phi(sc - z_a) - a Phi(-z_a)`` and
``E[(b - Y)_+]``-type terms with ``z_y = (log y + sc^2 / 2) / sc``, ``sc = 1 / s``), so
t = 2 is one integral and t = 3 two, taken by mpmath's tanh-sinh quadrature over the
standard normal variables (split at the points where the integrand's form changes);
``delta_float64`` takes the same integrals by scipy's adaptive quadrature (QUADPACK),
faster for t = 3.
"""

from __future__ import annotations

import mpmath as mp


def _ncdf(x):
  return mp.ncdf(x)


def _last_remove(a, sc):
  """``E[(Y - a)_+]`` for one log-normal coordinate (``a`` may be <= 0)."""
  if a <= 0:
    return 1 - a
  z = (mp.log(a) + sc * sc / 2) / sc
  return _ncdf(sc - z) - a * _ncdf(-z)


def _last_add(b, sc):
  """``E[(b - Y)_+]`` for one log-normal coordinate (0 if ``b <= 0``)."""
  if b <= 0:
    return mp.mpf(0)
  z = (mp.log(b) + sc * sc / 2) / sc
  return b * _ncdf(z) - _ncdf(z - sc)


def _y(z, sc):
  return mp.exp(sc * z - sc * sc / 2)


def _phi(z):
  return mp.exp(-z * z / 2) / mp.sqrt(2 * mp.pi)


def delta(sigma, t, eps, direction, dps=30):
  """The exact one-epoch delta of 1-out-of-``t`` allocation (``t`` in 1, 2, 3)."""
  with mp.workdps(dps):
    sc = 1 / mp.mpf(sigma)
    e = mp.exp(mp.mpf(eps))
    if direction == "remove":
      # E[(sum Y - t e^eps)_+] / t.
      def last(rest):
        return _last_remove(t * e - rest, sc) / t
    else:
      # E[(1 - e^eps sum Y / t)_+] = (e^eps / t) E[(t e^-eps - sum Y)_+].
      def last(rest):
        return e / t * _last_add(t / e - rest, sc)

    # ``last`` changes form where the coordinates so far reach ``kink`` (remove: ``t
    # e^eps``; add: ``t e^-eps``): that point, and unit steps out to the tails.
    kink = t * e if direction == "remove" else t / e

    def cuts(rest=0):
      out = [mp.mpf(k) for k in range(-10, 15)]
      if kink - rest > 0:
        out.append((mp.log(kink - rest) + sc * sc / 2) / sc)
      return [-mp.inf] + sorted(set(out)) + [mp.inf]

    if t == 1:
      return last(mp.mpf(0))
    if t == 2:
      return mp.quad(lambda z: _phi(z) * last(_y(z, sc)), cuts())

    def inner(z1):
      y1 = _y(z1, sc)
      return mp.quad(lambda z2: _phi(z2) * last(y1 + _y(z2, sc)), cuts(y1))

    return mp.quad(lambda z1: _phi(z1) * inner(z1), cuts())


def delta_float64(sigma, t, eps, direction):
  """:func:`delta` in float64 by nested ``scipy.integrate.quad`` (``t`` in 2, 3)."""
  import math

  from scipy import integrate, special

  sc = 1.0 / sigma
  e = math.exp(eps)

  def ncdf(x):
    return 0.5 * special.erfc(-x / math.sqrt(2.0))

  def last(rest):
    if direction == "remove":
      a = t * e - rest
      if a <= 0:
        return (1.0 - a) / t
      z = (math.log(a) + sc * sc / 2) / sc
      return (ncdf(sc - z) - a * ncdf(-z)) / t
    b = t / e - rest
    if b <= 0:
      return 0.0
    z = (math.log(b) + sc * sc / 2) / sc
    return e / t * (b * ncdf(z) - ncdf(z - sc))

  def y(z):
    return math.exp(sc * z - sc * sc / 2)

  def phi(z):
    return math.exp(-z * z / 2) / math.sqrt(2 * math.pi)

  opts = dict(epsabs=1e-14, epsrel=1e-11, limit=200)
  lo, hi = -12.0, 12.0
  kink = t * e if direction == "remove" else t / e  # where ``last`` changes form

  def one(f, rest=0.0):
    pts = [-4.0, -2.0, -1.0, 0.0, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    if kink - rest > 0:
      z = (math.log(kink - rest) + sc * sc / 2) / sc
      if lo < z < hi:
        pts.append(z)
    return integrate.quad(f, lo, hi, points=sorted(pts), **opts)[0]

  if t == 2:
    return one(lambda z: phi(z) * last(y(z)))
  return one(lambda z1: phi(z1) * one(lambda z2: phi(z2) * last(y(z1) + y(z2)), y(z1)))
