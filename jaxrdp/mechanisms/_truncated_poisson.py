"""Truncated Poisson batches: the total-variation cost of a capacity, and the capacity to use.

A Poisson sampler whose batches are cut at a capacity B_max (static shapes for a
jitted step) differs from the Poisson sampler only when a batch would exceed
B_max. :func:`truncation_delta` bounds that event's probability over a run,
:func:`truncated_poisson_delta` turns it into the delta the truncated run adds,
and :func:`default_capacity` picks the smallest capacity whose cost is a given
share of delta. The samplers (``jaxrdp.train``) and the accounting functions
(``capacity=`` of ``jaxrdp.dpsgd_epsilon``) use them; they are re-exported by
``jaxrdp.train``.
"""

from __future__ import annotations

import math

import numpy as np

from .._core.validation import check_int as _check_int
from .._core.validation import real_scalar as _real

__all__ = ["binomial_log_sf", "truncation_delta", "truncated_poisson_delta", "default_capacity"]


def _check_q(q):
  q = _real("q", q)
  if not (0.0 < q <= 1.0):  # also rejects NaN
    raise ValueError(f"q must be in (0, 1], got {q!r}")
  return q


def binomial_log_sf(k, n, q):
  """log P[Binomial(n, q) > k] in float64 (scipy's regularized incomplete beta).

  ``scipy.stats.binom.logsf``: the survival function is the regularized
  incomplete beta function I_q(k + 1, n - k) (Boost), accurate to a few ulps
  in relative terms far into the tail (it is not computed as 1 - cdf), and
  its log does not underflow before 1e-308.

  Args:
    k: threshold (array-like of ints); k >= n gives -inf.
    n: number of trials, an int >= 0.
    q: success probability in [0, 1].

  Returns:
    float64 array of log P[X > k].
  """
  from scipy.stats import binom

  return np.asarray(binom.logsf(np.asarray(k), n, q), dtype=np.float64)


# Relative rounding margin on the binomial tail: Boost's incomplete beta is
# accurate to a few hundred ulps at worst; 1e-9 covers that with room.
_SF_MARGIN = 1e-9


def truncation_delta(n: int, q: float, capacity: int, steps: int) -> float:
  """Total-variation cost of truncating Poisson batches at ``capacity``, over T steps.

      eta = T * P[Binomial(n, q) > B_max].

  At one step the truncated sampler and the Poisson sampler can be coupled
  to give the same batch except on the event ``K = |batch| > B_max``, so their
  outputs (and those of anything computed from them) are within total
  variation P[K > B_max]; over T adaptive steps, within eta.

  What to add to delta. If the untruncated (Poisson) run is
  (epsilon, delta)-DP, the truncated run is

      (epsilon, delta + (1 + e^epsilon) * eta)-DP,

  because for neighbours D, D' and any event S,
  P_T(D)(S) <= P(D)(S) + eta <= e^eps P(D')(S) + delta + eta
  <= e^eps (P_T(D')(S) + eta) + delta + eta. (The factor 1 + e^eps is needed
  for a generic TV perturbation: the perturbations on D and D' can point in
  opposite directions. Adding only eta, as sometimes stated, is not
  justified by this argument alone.) Use :func:`truncated_poisson_delta`.
  P[Binomial(n, q) > B] increases with n, and add/remove neighbours have n
  and n + 1 examples: pass the larger size (:meth:`PoissonSampler.truncation_delta`
  uses n + 1).

  Tighter, tailored analyses exist (dp_accounting's truncated subsampled
  Gaussian; Chua et al. arXiv:2411.04205; Ganesh et al. arXiv:2508.15089);
  with B_max from :func:`default_capacity` this simple term is already
  at most 1e-3 delta.

  Args:
    n: dataset size (int >= 1).
    q: Poisson sampling rate in (0, 1].
    capacity: B_max, an int >= 1.
    steps: T, an int >= 0.

  Returns:
    eta as a Python float, rounded up: never below the exact value (the tail
    probability is raised by a relative margin of 1e-9 for rounding, then
    to the next float).

  Raises:
    ValueError: naming the argument, for n < 1, q outside (0, 1],
      capacity < 1, steps < 0.
    TypeError: naming the argument, for a str, bytes, bool, Decimal, Fraction or
      np.longdouble (as ``jaxrdp.dpsgd_epsilon``).

  Examples:
    >>> from jaxrdp.train import truncation_delta
    >>> truncation_delta(1000, 0.01, 1000, 100)   # capacity n: never truncated
    0.0
    >>> 0 < truncation_delta(60000, 0.004, 400, 10000) < 1e-6
    True
  """
  n = _check_int("n", n, 1)
  q = _check_q(q)
  capacity = _check_int("capacity", capacity, 1)
  steps = _check_int("steps", steps, 0)
  if capacity >= n or steps == 0:
    return 0.0
  log_sf = float(binomial_log_sf(capacity, n, q))
  if log_sf == -np.inf:
    return float(np.nextafter(0.0, 1.0))  # underflow: the smallest positive float
  value = steps * math.exp(log_sf) * (1.0 + _SF_MARGIN)
  return float(np.nextafter(value, np.inf))


def truncated_poisson_delta(eta: float, epsilon: float, delta: float = 0.0) -> float:
  """delta of the truncated run: ``delta + (1 + e^epsilon) * eta``, rounded up.

  ``eta`` from :func:`truncation_delta`, ``(epsilon, delta)`` the guarantee of
  the same run without truncation (see :func:`truncation_delta` for why).

  Examples:
    >>> from jaxrdp.train import truncated_poisson_delta
    >>> truncated_poisson_delta(1e-12, 0.0, 1e-5) > 1e-5
    True
  """
  eta, epsilon, delta = _real("eta", eta), _real("epsilon", epsilon), _real("delta", delta)
  if not eta >= 0.0:
    raise ValueError(f"eta must be >= 0, got {eta!r}")
  if not epsilon >= 0.0:
    raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
  if not delta >= 0.0:
    raise ValueError(f"delta must be >= 0, got {delta!r}")
  if eta == 0.0:
    return delta
  value = delta + (1.0 + math.exp(epsilon)) * eta
  return float(np.nextafter(np.nextafter(value, np.inf), np.inf))  # two ulps for two roundings


def default_capacity(
  n: int, q: float, steps: int, delta: float, *, fraction: float = 1e-3, epsilon: float = 16.0
) -> int:
  """The smallest capacity B_max whose truncation term is at most ``fraction * delta``.

  Solves ``(1 + e^epsilon) * T * P[Binomial(n + 1, q) > B_max] <= fraction * delta``
  for the smallest integer B_max (bisection on the exact binomial tail in
  log space, :func:`binomial_log_sf`): the delta added by truncation
  (:func:`truncated_poisson_delta`) is then at most ``fraction * delta`` for
  any reported epsilon up to ``epsilon``. The allowance costs little: the
  tail falls faster than exponentially, so a factor e^16 in probability
  moves B_max by a few standard deviations sqrt(q n). Typical values: n = 60000, q = 256/60000,
  T = 14063, delta = 1e-5 gives 413, 1.6 times the mean q n = 256; the relative
  overhead shrinks as q n grows (the tail is about sqrt(q n) wide).

  Args:
    n: dataset size (int >= 1).
    q: Poisson sampling rate in (0, 1].
    steps: number of steps T (int >= 1).
    delta: the target delta of the run, in (0, 1).
    fraction: the share of delta the truncation may take, in (0, 1).
    epsilon: the largest epsilon the run will report (>= 0).

  Returns:
    B_max, a Python int in [1, n].

  Raises:
    ValueError: naming the argument that is out of range.
    TypeError: naming the argument, for a str, bytes, bool, Decimal, Fraction or
      np.longdouble (as ``jaxrdp.dpsgd_epsilon``).

  Examples:
    >>> from jaxrdp.train import default_capacity, truncation_delta, truncated_poisson_delta
    >>> b = default_capacity(60000, 256 / 60000, 14063, 1e-5)
    >>> 256 < b < 450 and truncated_poisson_delta(truncation_delta(60001, 256 / 60000, b, 14063), 16.0) <= 1e-8
    True
  """
  n = _check_int("n", n, 1)
  q = _check_q(q)
  steps = _check_int("steps", steps, 1)
  delta = _real("delta", delta)
  if not (0.0 < delta < 1.0):
    raise ValueError(f"delta must be in (0, 1), got {delta!r}")
  fraction = _real("fraction", fraction)
  if not (0.0 < fraction < 1.0):
    raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
  epsilon = _real("epsilon", epsilon)
  if not (0.0 <= epsilon < 700.0):
    raise ValueError(f"epsilon must be in [0, 700), got {epsilon!r}")
  target = fraction * delta / (1.0 + math.exp(epsilon))

  def ok(b):
    return b >= n or truncation_delta(n + 1, q, b, steps) <= target

  lo, hi = 0, max(1, int(math.ceil(q * n)))
  while not ok(hi):
    lo, hi = hi, min(n, 2 * hi)
  while hi - lo > 1:  # invariant: not ok(lo) (or lo = 0), ok(hi)
    mid = (lo + hi) // 2
    if ok(mid):
      hi = mid
    else:
      lo = mid
  return max(1, hi)
