"""mpmath oracle for the tight delta of one and two Sampled Gaussian steps.

Test infrastructure, sharing no code with jaxrdp. One step of rate ``q`` and
noise ``sigma`` compares ``A`` and ``B``: remove, ``A = (1 - q) N(0, s^2) + q N(1,
s^2)`` against ``B = N(0, s^2)``; add, the reverse (in ``y = 1 - x`` both keep
an increasing privacy loss ``l(y) = log A(y) / B(y)``). Then

    delta_1(eps) = int (A - e^eps B)_+ = Abar(t) - e^eps Bbar(t),  t = l^{-1}(eps),

and, for two independent steps, the region ``l(y1) + l(y2) > eps`` is
``y2 > l^{-1}(eps - l(y1))``, so

    delta_2(eps) = int A(y1) Abar(t(y1)) - e^eps B(y1) Bbar(t(y1)) dy1,

a one-dimensional integral of a non-negative integrand, by tanh-sinh
quadrature at 30 digits.
"""

from __future__ import annotations

import mpmath as mp

_DPS = 30


def _pair(q, s, direction):
  """``(A, Abar, B, Bbar, loss, loss range, inverse loss)`` of one step."""
  one = mp.mpf(1)
  if direction == "remove":
    a = lambda y: (1 - q) * mp.npdf(y, 0, s) + q * mp.npdf(y, 1, s)
    abar = lambda t: (1 - q) * mp.ncdf(-t / s) + q * mp.ncdf((1 - t) / s)
    b = lambda y: mp.npdf(y, 0, s)
    bbar = lambda t: mp.ncdf(-t / s)
    loss = lambda y: mp.log((1 - q) + q * mp.exp((2 * y - 1) / (2 * s**2)))
    lmin, lmax = (mp.log(1 - q) if q < 1 else -mp.inf), mp.inf
    inv = lambda v: s**2 * mp.log((mp.exp(v) - (1 - q)) / q) + one / 2
  else:
    a = lambda y: mp.npdf(y, 1, s)
    abar = lambda t: mp.ncdf((1 - t) / s)
    b = lambda y: (1 - q) * mp.npdf(y, 1, s) + q * mp.npdf(y, 0, s)
    bbar = lambda t: (1 - q) * mp.ncdf((1 - t) / s) + q * mp.ncdf(-t / s)
    loss = lambda y: -mp.log((1 - q) + q * mp.exp((1 - 2 * y) / (2 * s**2)))
    lmin, lmax = -mp.inf, (-mp.log(1 - q) if q < 1 else mp.inf)
    inv = lambda v: one / 2 - s**2 * mp.log((mp.exp(-v) - (1 - q)) / q)
  return a, abar, b, bbar, loss, (lmin, lmax), inv


def _one_step(q, s, eps, direction):
  _, abar, _, bbar, _, (lmin, lmax), inv = _pair(q, s, direction)
  if eps >= lmax:
    return mp.mpf(0)
  if eps <= lmin:
    return 1 - mp.exp(eps)
  t = inv(eps)
  return abar(t) - mp.exp(eps) * bbar(t)


def _two_steps(q, s, eps, direction):
  a, abar, b, bbar, loss, (lmin, lmax), inv = _pair(q, s, direction)

  def f(y):
    rest = eps - loss(y)
    if rest >= lmax:
      return mp.mpf(0)
    if rest <= lmin:
      return a(y) - mp.exp(eps) * b(y)
    t = inv(rest)
    return a(y) * abar(t) - mp.exp(eps) * b(y) * bbar(t)

  width = 40 * s + 10
  points = [-width] + [mp.mpf(k) / 2 for k in range(-8, 12)] + [width]
  return mp.quad(f, points)


def tight_delta(q, sigma, steps, epsilon):
  """Add/remove delta of ``steps`` (1 or 2) steps at ``epsilon``: the larger direction."""
  if steps not in (1, 2):
    raise ValueError("the oracle covers one or two steps")
  fn = _one_step if steps == 1 else _two_steps
  with mp.workdps(_DPS):
    q, s, eps = mp.mpf(q), mp.mpf(sigma), mp.mpf(epsilon)
    return float(max(fn(q, s, eps, d) for d in ("remove", "add")))
