"""Oracle for the tight delta of T composed Sampled Gaussian steps, by Laplace inversion.

Test infrastructure, sharing no code with jaxrdp, and no FFT of a privacy-loss
distribution. With ``L`` the privacy loss of one step (remove or add, as in
``pld_oracle``) and ``M(z) = E[e^{z L}]`` its moment-generating function, the
function ``f(u) = (1 - e^{eps - u})_+`` has the two-sided Laplace transform
``e^{-z eps} / (z (z + 1))`` for ``Re z > 0``, so for any ``c > 0``

    delta_T(eps) = E[f(L_1 + ... + L_T)]
                 = (1 / pi) int_0^inf Re[ M(c + i y)^T e^{-(c + i y) eps} / ((c + i y)(c + 1 + i y)) ] dy

(Bromwich inversion; the Sampled Gaussian's ``M`` is finite for every real
``c``). ``M(z)`` is the one-dimensional integral ``int N(x; 0, s^2) R(x)^{1+z}
dx`` (remove) or ``int N(x; 0, s^2) R(x)^{-z} dx`` (add), ``R(x) = 1 - q + q
e^{(2x - 1) / (2 s^2)}``, taken by the trapezoidal rule on a wide uniform grid
(spectrally accurate for these smooth, Gaussian-decaying integrands), on a
grid fine enough that one step turns the phase ``Im(z) log R(x)`` by at most
an eighth of a turn.

Choosing ``c`` at the saddle point of the integrand makes it positive and
bell-shaped near ``y = 0``, so the answer comes with relative (not absolute)
accuracy: there is no float64 noise floor at tiny delta, which is what limits
an FFT of the whole distribution. The trapezoidal rule in ``y`` with step
``h`` computes ``sum_k e^{c 2 pi k / h} delta_T(eps + 2 pi k / h)``, every term
non-negative, so the step is chosen to make the ``k != 0`` terms negligible,
and the ``y`` range ends where ``|M(c + iy) / M(c)|^T`` has fallen below e^-50.
Both are checked by the caller through :func:`epsilon` at two resolutions
(``refine``: twice the points in ``x``, half the step in ``y``), which must
agree.

Where few steps include the example (``q T`` near 1 and small sigma), the
loss has a near-atom at ``log(1 - q)`` whose characteristic function decays
only at very large ``y``; the tilt ``c`` is then raised above the saddle point
until the integrand decays within the allowed range (it then cancels more,
which costs a few of the sixteen digits). Where no tilt achieves that, or the
quadrature in ``x`` would need more than ``N_MAX`` points (an epsilon far
below one step's loss scale, e.g. large sigma and few steps), the functions
raise ``ValueError``: the oracle has no answer there, never a wrong one that
it knows of.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _x_grid(q, s, a_re, n):
  """Uniform grid of ``n`` points over where ``N(x; 0, s^2) R(x)^a_re`` is above e^-750 of its peak."""
  lo = -(abs(a_re) + 1.0) - 40.0 * s - 1.0
  hi = (abs(a_re) + 1.0) + 40.0 * s + 1.0
  coarse = np.linspace(lo, hi, 1 << 15)
  re = -coarse * coarse / (2.0 * s * s) + a_re * _log_r(coarse, q, s)
  keep = np.nonzero(re > re.max() - 750.0)[0]
  x = np.linspace(coarse[max(keep[0] - 1, 0)], coarse[min(keep[-1] + 1, coarse.size - 1)], n)
  return x, x[1] - x[0]


def _log_r(x, q, s):
  e = (2.0 * x - 1.0) / (2.0 * s * s)
  if q >= 1.0:
    return e
  return np.logaddexp(math.log1p(-q), math.log(q) + e)


# Most quadrature points per MGF evaluation; beyond, log_mgf raises.
N_MAX = 1 << 18
# Most integrand evaluations (y points times x points) of one contour.
WORK_MAX = 1e10


def _points_per_unit_im(q, s, a_re, n):
  """Quadrature points per unit of ``Im z`` for a step to turn ``Im(z) log R(x)`` by at most ``2 pi / 8``."""
  x, hx = _x_grid(q, s, a_re, n)
  slope = np.max(np.abs(np.diff(_log_r(x, q, s)))) / hx
  return (x[-1] - x[0]) * 8.0 * slope / (2.0 * math.pi)


def _grid_size(n, need, im):
  """The least ``n 2^k`` of at least ``need`` points; ValueError beyond ``N_MAX``."""
  m = n
  while m < need:
    m *= 2
  if m > N_MAX:
    raise ValueError(f"resolving Im z = {im:.3g} needs more than {N_MAX} points")
  return m


def log_mgf(z, q, s, direction, n=1 << 16):
  """``log M(z)`` (complex, principal branch) of one step for an array of ``z``.

  ``n`` is the least number of quadrature points. The grid is refined, per
  group of ``z``, until a step moves the phase ``Im(z) log R(x)`` by at most
  ``2 pi / 8`` (``log R`` is monotone, its slope at most ``1 / s^2``); a
  ``z`` that would need more than ``N_MAX`` points raises ``ValueError``.
  """
  z = np.atleast_1d(np.asarray(z, complex))
  a = (1.0 + z) if direction == "remove" else -z
  if np.ptp(a.real) > 0:
    raise ValueError("one real part of z per call")
  a_re = float(a.real[0])
  rate = _points_per_unit_im(q, s, a_re, n)
  grids = {}
  out = np.empty(z.shape, complex)
  for i0 in range(0, z.size, 64):
    ai = a[i0 : i0 + 64, None]
    im = np.max(np.abs(ai.imag))
    m = _grid_size(n, rate * im, im)
    if m not in grids:
      x, hx = _x_grid(q, s, a_re, m)
      grids[m] = (hx, _log_r(x, q, s), -x * x / (2.0 * s * s))
    hx, lr, w = grids[m]
    re = w + ai.real * lr
    top = np.max(re, axis=1, keepdims=True)
    tot = np.sum(np.exp(re - top + 1j * ai.imag * lr), axis=1)
    tot = np.where(tot == 0, 1e-300, tot)  # cancelled below the float64 floor: ~0
    out[i0 : i0 + 64] = np.log(tot) + top[:, 0] + math.log(hx / s) - _LOG_SQRT_2PI
  return out


def _loss_max(q, direction):
  """Largest loss of one step (``inf`` for remove)."""
  return -math.log1p(-q) if (direction == "add" and q < 1.0) else math.inf


class _Contour:
  """``M(c + i y)^T`` on a uniform ``y`` grid, reusable for every epsilon near one."""

  def __init__(self, q, s, steps, eps0, direction, refine=1):
    self.q, self.s, self.steps, self.direction = q, s, steps, direction
    n = (1 << 16) * refine
    self.n, self.refine = n, refine
    # log M(c) of one step at real c, each evaluated once (a quadrature of n points).
    self.log_m1 = functools.cache(lambda c: log_mgf(c, q, s, direction, n)[0].real)
    self.obj = lambda c: steps * self.log_m1(c) - c * eps0 - math.log(c * (c + 1.0))
    res = optimize.minimize_scalar(
      lambda t: self.obj(math.exp(t)),
      bounds=(-12.0, 16.0),
      method="bounded",
      options={"xatol": 1e-10},
    )
    c0 = math.exp(res.x)
    cap = (1 << 16) * refine * refine  # most y points
    # The saddle point, or, where the integrand decays too slowly in y there
    # (a near-atom of the loss), the first of c0 1.5^k that decays within
    # ``cap`` points, as long as the off-saddle cancellation stays below e^14;
    # otherwise ValueError.
    for k in range(12):
      c = c0 * 1.5**k
      period, y_end = self._scales(c, cap)
      if y_end is not None or self.obj(c * 1.5) - self.obj(c0) > 14.0:
        break
    self.c = c
    self.h = 2.0 * math.pi / period / refine
    if y_end is None:
      raise ValueError(f"the inversion integrand does not decay within {cap} points")
    self.y = self.h * np.arange(int(math.ceil(y_end / self.h)) + 1)
    a_re = 1.0 + c if direction == "remove" else -c
    need = _points_per_unit_im(q, s, a_re, n) * self.y[-1]
    _grid_size(n, need, self.y[-1])  # raises now if the end is unresolvable
    if self.y.size * max(need, n) > WORK_MAX:
      raise ValueError(f"the inversion needs more than {WORK_MAX:.0e} integrand evaluations")
    self.log_mt = steps * log_mgf(c + 1j * self.y, q, s, direction, n)

  def _scales(self, c, cap):
    """``(period, y_end)`` of the contour at ``c``; ``y_end`` is None if it decays too slowly."""
    steps, n = self.steps, self.n
    kt = lambda c: steps * self.log_m1(c)
    # Standard deviation of the tilted composed loss.
    hc = 1e-4 * c
    var = (kt(c + hc) - 2.0 * kt(c) + kt(c - hc)) / (hc * hc)
    sd = math.sqrt(max(var, 1e-300))
    # Period 2 pi / h in the loss: above the answer, the tilted distribution
    # has decayed (40 sd); below it, e^{-c P} kills any mass: delta <= 1, and
    # the answer is about e^obj(c) (a Chernoff-type estimate).
    period = max(40.0 * sd, (40.0 - self.obj(c)) / c)
    h = 2.0 * math.pi / period / self.refine
    # y range: |M(c + iy) / M(c)|^T below e^-50 from there on, probed on a
    # geometric grid up to the cap.
    ys = np.geomspace(0.1 / sd, cap * h, 96)
    log_m0 = self.log_m1(c)
    last, done = -1, 0
    for i0 in range(0, ys.size, 8):
      try:
        lm = log_mgf(c + 1j * ys[i0 : i0 + 8], self.q, self.s, self.direction, n).real
      except ValueError:  # beyond what the quadrature resolves
        break
      big = np.nonzero(steps * (lm - log_m0) > -50.0)[0]
      if big.size:
        last = i0 + big[-1]
      done = i0 + lm.size
      if done - last > 16:  # decayed over a factor of (cap h sd)^(16/96) in y
        break
    if last + 1 >= done:
      return period, None
    return period, ys[last + 1]

  def delta(self, eps):
    if eps >= self.steps * _loss_max(self.q, self.direction):
      return 0.0
    z = self.c + 1j * self.y
    f = np.exp(self.log_mt - z * eps) / (z * (z + 1.0))
    wts = np.full(self.y.shape, self.h)
    wts[0] = 0.5 * self.h
    return float(np.sum(wts * f.real) / math.pi)


def delta(q, sigma, steps, epsilon, direction, refine=1):
  """Tight delta of one direction at ``epsilon`` (composition of ``steps`` steps)."""
  return _Contour(q, sigma, steps, epsilon, direction, refine).delta(epsilon)


def epsilon(q, sigma, steps, delta, eps0, refine=1, rtol=1e-12):
  """Tight epsilon (maximum over remove and add) at ``delta``, near the guess ``eps0``.

  Each direction's contour is set up at ``eps0``; epsilon is the root of
  ``log delta(eps) = log delta`` by Brent's method.
  """
  best = -math.inf
  for direction in ("remove", "add"):
    if steps * _loss_max(q, direction) <= max(best, 0.0):
      continue  # delta is 0 from there on: this direction's epsilon is smaller
    cont = _Contour(q, sigma, steps, eps0, direction, refine)
    g = lambda e: math.log(max(cont.delta(e), 1e-320)) - math.log(delta)
    lo, hi = eps0 * 0.98, eps0 * 1.02
    for _ in range(40):
      if g(lo) > 0:
        break
      lo *= 0.9
    else:  # this direction's epsilon is far below the guess: the other one is the maximum
      continue
    while g(hi) > 0:
      hi *= 1.05
    best = max(best, optimize.brentq(g, lo, hi, rtol=rtol))
  return best
