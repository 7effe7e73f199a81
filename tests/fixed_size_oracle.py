"""Oracle for fixed-size (without replacement) sampled Gaussian steps under replace-one.

Test infrastructure, sharing no code with jaxrdp. One DP-SGD step at sampling ratio
``q = m / n`` and noise multiplier ``sigma`` is, under replace-one, the Gaussian of
sensitivity 2 subsampled without replacement; by Dong, Roth, Su 2019
(arXiv:1905.02383, Thm 4.2) its privacy profile is

    delta(eps) = max(delta_remove(eps), delta_add(eps)),

those of the Poisson pair at noise ``s = sigma / 2`` (unit sensitivity):
``mu = (1 - q) N(0, s^2) + q N(1, s^2)`` against ``mu0 = N(0, s^2)`` (remove) and the
swapped pair (add).

* :func:`one_step_delta`: that maximum from Gaussian CDFs in mpmath (50 digits).
* :func:`delta` / :func:`epsilon`: ``T`` steps by Laplace (Bromwich) inversion of the
  moment-generating function of the one-step loss of the symmetric pair with that
  profile. Its loss law: where remove's profile is the larger (``eps > 0``, checked by
  :func:`crossing_is_at_zero`) the loss is remove's, ``log R(x)`` with ``x ~ mu``
  (``R(x) = 1 - q + q e^{(2x - 1)/(2 s^2)}``); where add's is the larger (``eps < 0``)
  it is add's, ``-log R(x)`` with ``x ~ mu0``; at the crossing ``eps = 0`` an atom of
  mass ``1 - mu(x > 1/2) - mu0(x > 1/2)``. So

      M(z) = int_{x > 1/2} mu0(x) R(x)^{1 + z} dx + a0 + int_{x > 1/2} mu0(x) R(x)^{-z} dx,

  computed by composite Gauss-Legendre quadrature on panels fine enough for the phase
  ``Im(z) log R(x)``. Then ``delta_T(eps) = (1 / pi) int_0^inf Re[(M(z)^T - a0^T)
  e^{-z eps} / (z (z + 1))] dy``, ``z = c + i y`` (the atom's own term contributes
  ``a0^T (1 - e^eps)_+ = 0`` for ``eps >= 0``), ``c`` at the saddle point.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
from scipy import optimize

_GL_X, _GL_W = np.polynomial.legendre.leggauss(24)


def _log_r(x, q, s):
  e = (2.0 * x - 1.0) / (2.0 * s * s)
  if q >= 1.0:
    return e
  return np.logaddexp(math.log1p(-q), math.log(q) + e)


def _mp_pair_delta(q, s, eps, direction):
  """Hockey-stick divergence of one direction at ``eps`` (any real) in mpmath."""
  q, s, eps = mpmath.mpf(q), mpmath.mpf(s), mpmath.mpf(eps)
  cdf = lambda x: mpmath.ncdf(x)  # noqa: E731
  if direction == "remove":
    # mu(x) > e^eps mu0(x) iff q e^{(2x-1)/(2s^2)} > e^eps - 1 + q.
    h = mpmath.exp(eps) - 1 + q
    if h <= 0:
      return 1 - mpmath.exp(eps)
    x0 = mpmath.mpf(1) / 2 + s * s * mpmath.log(h / q)
    return (
      (1 - q) * (1 - cdf(x0 / s))
      + q * (1 - cdf((x0 - 1) / s))
      - mpmath.exp(eps) * (1 - cdf(x0 / s))
    )
  # add: mu0(x) > e^eps mu(x) iff R(x) < e^-eps iff x < x0.
  h = mpmath.exp(-eps) - 1 + q
  if h <= 0:
    return mpmath.mpf(0)
  x0 = mpmath.mpf(1) / 2 + s * s * mpmath.log(h / q)
  return cdf(x0 / s) - mpmath.exp(eps) * ((1 - q) * cdf(x0 / s) + q * cdf((x0 - 1) / s))


def one_step_delta(q, sigma, eps, directions=False):
  """``max(delta_remove, delta_add)`` of one step at DP-SGD multiplier ``sigma``."""
  with mpmath.workdps(50):
    s = mpmath.mpf(sigma) / 2
    r = _mp_pair_delta(q, s, eps, "remove")
    a = _mp_pair_delta(q, s, eps, "add")
    if directions:
      return float(r), float(a)
    return float(max(r, a))


def crossing_is_at_zero(q, sigma, eps_grid):
  """Whether remove's profile is at least add's for ``eps > 0`` and at most for ``eps < 0``."""
  for e in eps_grid:
    r, a = one_step_delta(q, sigma, e, directions=True)
    if e > 0 and r < a * (1 - 1e-12):
      return False
    if e < 0 and a < r * (1 - 1e-12):
      return False
  return True


def atom(q, sigma):
  """P-mass of the loss atom at 0: ``1 - mu(x > 1/2) - mu0(x > 1/2)``."""
  s = sigma / 2.0
  with mpmath.workdps(30):
    b = mpmath.mpf(1) / (2 * s)
    return float((1 - mpmath.mpf(q)) * (2 * mpmath.ncdf(b) - 1))


def _panels(lo, hi, width):
  k = max(1, int(math.ceil((hi - lo) / width)))
  edges = np.linspace(lo, hi, k + 1)
  mid, half = 0.5 * (edges[1:] + edges[:-1]), 0.5 * np.diff(edges)
  x = (mid[:, None] + half[:, None] * _GL_X[None, :]).ravel()
  w = (half[:, None] * _GL_W[None, :]).ravel()
  return x, w


def log_mgf(z, q, sigma, refine=1):
  """``log M(z)`` (complex) of the one-step loss of the symmetric pair, for an array ``z``
  of one real part (evaluated 64 at a time on panels fine enough for the largest ``Im z``)."""
  s = sigma / 2.0
  z = np.atleast_1d(np.asarray(z, complex))
  c = float(z.real.max())
  a0 = atom(q, sigma)
  out = np.empty(z.shape, complex)
  for i0 in range(0, z.size, 64):
    zi = z[i0 : i0 + 64, None]
    y = float(np.max(np.abs(zi.imag)))
    # Panels: at most s / 4 wide and turning the phase (slope <= 1 / s^2) by <= 2.
    width = min(s / 4.0, 2.0 * s * s / max(y, 1e-12)) / refine
    total = np.full(zi.shape[0], a0, complex)
    for expo in (1.0 + zi, -zi):
      centre = max(1.0 + c, 0.5) if expo.real.max() > 0 else 0.5
      x, w = _panels(0.5, centre + 40.0 * s + 2.0, width)
      lr = _log_r(x, q, s)
      dens = w * np.exp(-x * x / (2 * s * s)) / (s * math.sqrt(2 * math.pi))
      total += np.sum(dens * np.exp(expo * lr), axis=1)
    out[i0 : i0 + 64] = np.log(total)
  return out


class _Contour:
  def __init__(self, q, sigma, steps, eps0, refine=1):
    self.q, self.sigma, self.steps, self.refine = q, sigma, steps, refine
    self.a0 = atom(q, sigma)
    self.log_m1 = lambda c: float(log_mgf(c, q, sigma, refine)[0].real)
    obj = lambda c: steps * self.log_m1(c) - c * eps0 - math.log(c * (c + 1.0))  # noqa: E731
    res = optimize.minimize_scalar(
      lambda t: obj(math.exp(t)), bounds=(-8.0, 4.0), method="bounded", options={"xatol": 1e-8}
    )
    c = math.exp(res.x)
    hc = 1e-4 * c
    kt = lambda v: steps * self.log_m1(v)  # noqa: E731
    sd = math.sqrt(max((kt(c + hc) - 2 * kt(c) + kt(c - hc)) / (hc * hc), 1e-300))
    period = max(40.0 * sd, (40.0 - obj(c)) / c)
    self.c, self.h = c, 2.0 * math.pi / period / refine
    # y range: |M(c + iy)^T - a0^T| / M(c)^T below e^-30 (the atom's own term, which
    # does not decay, is removed; what remains decays like the continuous part).
    log_m0 = self.log_m1(c)
    log_a0t = steps * math.log(self.a0)
    y_end, y = None, 0.5 / sd
    while y < 1e4:
      lm = log_mgf(c + 1j * y, q, sigma, refine)[0]
      rest = abs(np.exp(steps * lm - steps * log_m0) - math.exp(log_a0t - steps * log_m0))
      if rest < math.exp(-30.0):
        y_end = y
        break
      y *= 1.25
    if y_end is None:
      raise ValueError("the inversion integrand does not decay")
    self.y = self.h * np.arange(int(math.ceil(y_end / self.h)) + 1)
    self.log_mt = steps * log_mgf(c + 1j * self.y, q, sigma, refine)

  def delta(self, eps):
    z = self.c + 1j * self.y
    mt = np.exp(self.log_mt - z * eps) - np.exp(self.steps * math.log(self.a0) - z * eps)
    f = mt / (z * (z + 1.0))
    wts = np.full(self.y.shape, self.h)
    wts[0] = 0.5 * self.h
    return float(np.sum(wts * f.real) / math.pi)


def delta(q, sigma, steps, eps, refine=1):
  """Tight delta at ``eps >= 0`` of ``steps`` fixed-size steps (replace-one)."""
  return _Contour(q, sigma, steps, eps, refine).delta(eps)


def epsilon(q, sigma, steps, target, eps0, refine=1):
  """Tight epsilon at ``delta = target`` near the guess ``eps0`` (Brent on ``log delta``)."""
  cont = _Contour(q, sigma, steps, eps0, refine)
  g = lambda e: math.log(max(cont.delta(e), 1e-320)) - math.log(target)  # noqa: E731
  lo, hi = 0.97 * eps0, 1.03 * eps0
  while g(lo) < 0:
    lo *= 0.95
  while g(hi) > 0:
    hi *= 1.05
  return optimize.brentq(g, lo, hi, rtol=1e-12)
