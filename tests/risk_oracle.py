"""Oracle for the attack risk of T composed Sampled Gaussian steps: TPR at a given FPR, advantage.

Test infrastructure, sharing no code with jaxrdp. The privacy profile of each
adjacency direction comes from ``laplace_oracle`` (Laplace inversion of the
composed moment-generating function), and the true-positive rate of the most
powerful test at false-positive rate ``alpha`` from the convex duality

    TPR(alpha) = min over eps of [delta(eps) + e^eps alpha]

(the minimum is at the Neyman-Pearson threshold, where ``Q(L > eps) = alpha``),
by Brent's method on a bracket around a Gaussian-DP guess; the function is
smooth and convex in ``e^eps`` there, and its minimum value is insensitive to
the minimizer's error (second order). The advantage is ``delta(0)``, the total
variation distance, the same in both directions. At ``q = 1`` the truth is
Gaussian-DP: ``TPR(alpha) = Phi(Phi^-1(alpha) + mu)``, ``mu = sqrt(T) / sigma``.
"""

from __future__ import annotations

import math

import laplace_oracle
from scipy import optimize, stats


def gdp_tpr(alpha, mu):
  """``Phi(Phi^-1(alpha) + mu)``: the TPR of ``mu``-Gaussian-DP at FPR ``alpha``."""
  return float(stats.norm.cdf(stats.norm.ppf(alpha) + mu))


def _guess(q, sigma, steps, alpha):
  """The Neyman-Pearson threshold of the Gaussian-DP pair with the CLT ``mu`` (a start only)."""
  mu = q * math.sqrt(steps * math.expm1(1.0 / sigma**2))
  return mu * stats.norm.isf(alpha) - 0.5 * mu * mu


def tpr_direction(q, sigma, steps, alpha, direction, refine=1, eps0=None):
  """``(tpr, threshold)`` of one direction at FPR ``alpha``.

  The inversion is most accurate near the point its contour is set up at, so
  the search walks: set up at ``t``, compare ``f`` at ``t`` and ``t +- w``, and
  move to the better neighbour (set up again there) until ``t`` is the best of
  the three; then Brent's method on ``[t - w, t + w]``, and once more with the
  contour set up at the minimizer.
  """
  t = _guess(q, sigma, steps, alpha) if eps0 is None else eps0
  w = 0.05 * max(1.0, abs(t))

  def objective(cont):
    return lambda e: cont.delta(e) + math.exp(min(e, 700.0)) * alpha

  for _ in range(60):
    f = objective(laplace_oracle._Contour(q, sigma, steps, t, direction, refine))
    lo, mid, hi = f(t - w), f(t), f(t + w)
    if mid <= lo and mid <= hi:
      break
    t = t - w if lo < hi else t + w
    w *= 1.5
  else:
    raise ValueError("the minimum over epsilon was not bracketed")
  for _ in range(2):
    res = optimize.minimize_scalar(
      f, bounds=(t - w, t + w), method="bounded", options={"xatol": 1e-10}
    )
    t = float(res.x)
    f = objective(laplace_oracle._Contour(q, sigma, steps, t, direction, refine))
  return float(f(t)), t


def tpr(q, sigma, steps, alpha, refine=1):
  """``(tpr, tpr_remove, tpr_add)``: the attacker's TPR at FPR ``alpha`` (the larger direction)."""
  if q >= 1.0:
    v = gdp_tpr(alpha, math.sqrt(steps) / sigma)
    return v, v, v
  r, _ = tpr_direction(q, sigma, steps, alpha, "remove", refine)
  a, _ = tpr_direction(q, sigma, steps, alpha, "add", refine)
  return max(r, a), r, a


def advantage(q, sigma, steps, refine=1):
  """The advantage ``delta(0)`` (total variation), from the remove direction."""
  if q >= 1.0:
    mu = math.sqrt(steps) / sigma
    return float(2.0 * stats.norm.cdf(0.5 * mu) - 1.0)
  return laplace_oracle.delta(q, sigma, steps, 0.0, "remove", refine)


def single_step_tpr(q, sigma, alpha):
  """Closed form of one step: ``(remove, add)`` TPRs at FPR ``alpha``.

  Remove (``Q = N(0, s^2)``, ``P`` the mixture, the loss increasing in the
  output): ``(1 - q) alpha + q Phi(Phi^-1(alpha) + 1/s)``. Add (``Q`` the
  mixture, ``P = N(0, s^2)``, reject small outputs): ``Phi(x / s)`` with
  ``(1 - q) Phi(x / s) + q Phi((x - 1) / s) = alpha``.
  """
  remove = (1.0 - q) * alpha + q * stats.norm.cdf(stats.norm.ppf(alpha) + 1.0 / sigma)

  def g(x):
    return (1.0 - q) * stats.norm.cdf(x / sigma) + q * stats.norm.cdf((x - 1.0) / sigma) - alpha

  x = optimize.brentq(g, -50.0 * sigma - 1.0, 50.0 * sigma + 1.0, xtol=1e-15, rtol=1e-15)
  return float(remove), float(stats.norm.cdf(x / sigma))
