"""References for the shuffled-batch lower bound of Chua et al. 2024 (arXiv:2403.17673).

One epoch of t batches, noise multiplier sigma: the outputs under the two neighbouring
datasets are the mixtures P (target's batch mean 2) and Q (mean ``q_mean``: 1 for the
zero-out pair, 0 for replace-one, where D' holds an example like the others and Q is
N(0, sigma^2 I_t)) of N(mu e_j, sigma^2 I_t) over the batch j, and for the "cube" events

  P(max_j x_j <= C) = Phi((C - 2)/sigma) Phi(C/sigma)^(t-1),  Q: the same with C - q_mean.

``epsilon_lower_bound`` maximizes log((P(S) - delta)/Q(S)) over S = {max > C} (and
log((Q(S') - delta)/P(S')) over S' = {max <= C}) by a scan and a golden-section search
in 30-digit arithmetic; ``delta_lower_bound`` likewise for P(S) - e^eps Q(S);
``delta_lower_bound_epochs`` for E independent epochs (a fresh permutation each) and
the events {N >= j} of the count N of epochs whose maximum exceeds C (and {N <= j} the
other way round), exact binomial sums in mpmath.

Independent of the bound's events, the true hockey-stick divergence of the pair
(P, Q), which no lower bound built from it may exceed (and which is itself at most the
mechanism's delta: the pair is realized by two neighbouring datasets):

* ``pair_delta_t2``: t = 2, one epoch, by a 2-D tensor-product quadrature in numpy;
* ``pair_delta_monte_carlo``: any t and E epochs, E_P[(1 - e^eps q/p)_+] by sampling
  from P (the integrand lies in [0, 1]), with its standard error.

``simulate_cube_probability`` samples the mechanism itself (a permutation of the n
examples, batches of b with a short last one, batch sums plus noise) to check the
closed-form cube probabilities that everything above rests on.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
from scipy import special as sp_special


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


def epsilon_lower_bound(sigma, t, delta, dps=30, q_mean=1):
  with mp.workdps(dps):
    sigma, delta = mp.mpf(sigma), mp.mpf(delta)

    def upper(c):  # S = {max > C}, P against Q
      p, q = 1 - _cube(c, 2, sigma, t), 1 - _cube(c, q_mean, sigma, t)
      return mp.log((p - delta) / q) if p > delta else mp.mpf("-inf")

    def lower(c):  # S = {max <= C}, Q against P
      q, p = _cube(c, q_mean, sigma, t), _cube(c, 2, sigma, t)
      return mp.log((q - delta) / p) if q > delta else mp.mpf("-inf")

    lo, hi = -8 * sigma, 2 + sigma * (mp.sqrt(2 * mp.log(max(t, 2))) + 12)
    return max(_maximize(upper, lo, hi), _maximize(lower, lo, hi), mp.mpf(0))


def delta_lower_bound(sigma, t, epsilon, dps=30, q_mean=1):
  with mp.workdps(dps):
    sigma, e = mp.mpf(sigma), mp.exp(mp.mpf(epsilon))

    def upper(c):
      return (1 - _cube(c, 2, sigma, t)) - e * (1 - _cube(c, q_mean, sigma, t))

    def lower(c):
      return _cube(c, q_mean, sigma, t) - e * _cube(c, 2, sigma, t)

    lo, hi = -8 * sigma, 2 + sigma * (mp.sqrt(2 * mp.log(max(t, 2))) + 12)
    return max(_maximize(upper, lo, hi), _maximize(lower, lo, hi), mp.mpf(0))


def _binomial_upper(p, epochs, j):
  """P(Binomial(E, p) >= j), exactly (mpmath)."""
  return mp.fsum(
    mp.binomial(epochs, k) * p**k * (1 - p) ** (epochs - k) for k in range(j, epochs + 1)
  )


def delta_lower_bound_epochs(sigma, t, epsilon, epochs, q_mean=1, dps=30):
  """max over C and j of the count events' P(S) - e^eps Q(S), E independent epochs."""
  with mp.workdps(dps):
    sigma, e = mp.mpf(sigma), mp.exp(mp.mpf(epsilon))

    def best(c):
      p_in, q_in = _cube(c, 2, sigma, t), _cube(c, q_mean, sigma, t)
      vals = []
      for j in range(epochs + 1):
        vals.append(_binomial_upper(1 - p_in, epochs, j) - e * _binomial_upper(1 - q_in, epochs, j))
        vals.append(_binomial_upper(q_in, epochs, j) - e * _binomial_upper(p_in, epochs, j))
      return max(vals)

    lo, hi = -8 * sigma, 2 + sigma * (mp.sqrt(2 * mp.log(max(t, 2))) + 12)
    return max(_maximize(best, lo, hi, n=120), mp.mpf(0))


def _log_mixture(x, mean, sigma):
  """log of (1/t) sum_j prod_i phi((x_i - mean [i = j]) / sigma) / sigma, over the last axis."""
  t = x.shape[-1]
  base = -0.5 * np.sum((x / sigma) ** 2, axis=-1) - t * math.log(sigma * math.sqrt(2 * math.pi))
  shift = (mean * x - 0.5 * mean**2) / sigma**2  # the log ratio of coordinate j's density
  return base + sp_special.logsumexp(shift, axis=-1) - math.log(t)


def pair_delta_t2(sigma, epsilon, q_mean=1, n=2401):
  """The exact hockey-stick divergence of the pair for t = 2, one epoch (a 2-D quadrature)."""
  lo, hi = -9.0 * sigma, 2.0 + 9.0 * sigma
  x = np.linspace(lo, hi, n)
  w = np.full(n, (hi - lo) / (n - 1))
  w[0] = w[-1] = w[0] / 2  # trapezoid weights

  # The mixture (1/2) [phi(x1 - m) phi(x2) + phi(x1) phi(x2 - m)] as outer products of
  # the 1-D densities on the grid: the same quadrature as exp(_log_mixture) on the
  # 2401^2 points (the divergences agree to 4e-16 relative), about 30 times faster.
  def density(mean):
    return np.exp(-0.5 * ((x - mean) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))

  def mixture(mean):
    moved, still = density(mean), density(0.0)
    return 0.5 * (moved[:, None] * still[None, :] + still[:, None] * moved[None, :])

  p, q = mixture(2.0), mixture(float(q_mean))
  return float(np.sum(np.maximum(p - math.exp(epsilon) * q, 0.0) * w[:, None] * w[None, :]))


def pair_delta_monte_carlo(sigma, t, epsilon, epochs=1, q_mean=1, n=200_000, seed=0):
  """``(estimate, standard error)`` of the pair's divergence over E independent epochs."""
  rng = np.random.default_rng(seed)
  x = rng.normal(0.0, sigma, size=(n, epochs, t))
  x[np.arange(n)[:, None], np.arange(epochs)[None, :], rng.integers(0, t, (n, epochs))] += 2.0
  log_ratio = np.sum(_log_mixture(x, float(q_mean), sigma) - _log_mixture(x, 2.0, sigma), axis=1)
  values = np.maximum(1.0 - np.exp(np.minimum(epsilon + log_ratio, 700.0)), 0.0)
  return float(values.mean()), float(values.std() / math.sqrt(n))


def simulate_cube_probability(sigma, n, b, c, target, neighbour, trials=200_000, seed=0):
  """Frequency of {max_j (s_j + b_j) > C} in the mechanism itself: n examples (example 0
  contributes ``target``, the others -1), a fresh permutation cut into batches of b (the
  last one short), s_j the batch sums plus N(0, sigma^2), b_j the batch sizes (public).
  ``neighbour`` replaces the target's contribution (the other dataset)."""
  rng = np.random.default_rng(seed)
  t = -(-n // b)
  sizes = np.array([min(b, n - j * b) for j in range(t)], np.float64)
  out = {}
  for name, value in (("D", target), ("D'", neighbour)):
    # Only the target's batch differs from -b_j: its position is uniform over the n slots.
    slot = rng.integers(0, n, trials)
    batch = slot // b
    sums = -sizes[None, :] + rng.normal(0.0, sigma, (trials, t))
    sums[np.arange(trials), batch] += value + 1.0
    out[name] = float(np.mean(np.max(sums + sizes[None, :], axis=1) > c))
  return out
