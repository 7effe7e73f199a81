"""mpmath reference for the shuffled-batch lower bound of Chua et al. 2024 (arXiv:2403.17673).

One epoch of t batches, noise multiplier sigma: the outputs under the two neighbouring
datasets are the mixtures P (target's batch mean 2) and Q (mean 1) of
N(mu e_j, sigma^2 I_t) over the batch j, and for the "cube" events

  P(max_j x_j <= C) = Phi((C - 2)/sigma) Phi(C/sigma)^(t-1),  Q: the same with C - 1.

``epsilon_lower_bound`` maximizes log((P(S) - delta)/Q(S)) over S = {max > C} (and
log((Q(S') - delta)/P(S')) over S' = {max <= C}) by a scan and a golden-section search
in 30-digit arithmetic; ``delta_lower_bound`` likewise for P(S) - e^eps Q(S).
"""

from __future__ import annotations

import mpmath as mp


def _cube(c, mean, sigma, t):
  return mp.ncdf((c - mean) / sigma) * mp.ncdf(c / sigma) ** (t - 1)


def _maximize(f, lo, hi, n=200):
  xs = [lo + (hi - lo) * i / n for i in range(n + 1)]
  vals = [f(x) for x in xs]
  k = max(range(len(xs)), key=lambda i: vals[i])
  a, b = xs[max(k - 1, 0)], xs[min(k + 1, n)]
  g = (mp.sqrt(5) - 1) / 2
  for _ in range(90):
    x1, x2 = b - g * (b - a), a + g * (b - a)
    if f(x1) >= f(x2):
      b = x2
    else:
      a = x1
  return max(vals[k], f((a + b) / 2))


def epsilon_lower_bound(sigma, t, delta, dps=30):
  with mp.workdps(dps):
    sigma, delta = mp.mpf(sigma), mp.mpf(delta)

    def upper(c):  # S = {max > C}, P against Q
      p, q = 1 - _cube(c, 2, sigma, t), 1 - _cube(c, 1, sigma, t)
      return mp.log((p - delta) / q) if p > delta else mp.mpf("-inf")

    def lower(c):  # S = {max <= C}, Q against P
      q, p = _cube(c, 1, sigma, t), _cube(c, 2, sigma, t)
      return mp.log((q - delta) / p) if q > delta else mp.mpf("-inf")

    lo, hi = -8 * sigma, 2 + sigma * (mp.sqrt(2 * mp.log(max(t, 2))) + 12)
    return max(_maximize(upper, lo, hi), _maximize(lower, lo, hi), mp.mpf(0))


def delta_lower_bound(sigma, t, epsilon, dps=30):
  with mp.workdps(dps):
    sigma, e = mp.mpf(sigma), mp.exp(mp.mpf(epsilon))

    def upper(c):
      return (1 - _cube(c, 2, sigma, t)) - e * (1 - _cube(c, 1, sigma, t))

    def lower(c):
      return _cube(c, 1, sigma, t) - e * _cube(c, 2, sigma, t)

    lo, hi = -8 * sigma, 2 + sigma * (mp.sqrt(2 * mp.log(max(t, 2))) + 12)
    return max(_maximize(upper, lo, hi), _maximize(lower, lo, hi), mp.mpf(0))
