"""The exact ("analytic") Gaussian mechanism: its delta(epsilon) and its calibration.

B. Balle and Y.-X. Wang (2018), "Improving the Gaussian Mechanism for
Differential Privacy: Analytical Calibration and Optimal Denoising",
arXiv:1805.06530, Theorem 8.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core import rootfind as _rootfind
from .._core.validation import check_range
from ..mechanisms import _hockey_stick

__all__ = ["analytic_gaussian_delta", "analytic_gaussian_sigma"]

# e^-50: the lower end of the sigma bracket relative to the upper one.
_BRACKET_LOG_RATIO = 50.0


def _log_delta_kernel(epsilon, sigma):
  # Balle-Wang Thm 8 with sensitivity 1:
  #   delta = Phi(1/(2 sigma) - eps sigma) - e^eps Phi(-1/(2 sigma) - eps sigma),
  # i.e. w1 Phi(x) - w2 Phi(x - h) with w1 = 1, w2 = e^eps, h = 1/sigma, and
  # e^eps phi(x - h) = phi(x).
  pos = sigma > 0
  s = jnp.where(pos, sigma, 1.0)
  out = _hockey_stick.log_gaussian_hockey_stick(jnp.zeros_like(s), 0.5 / s - epsilon * s, 1.0 / s)
  # sigma = 0: the two outputs are distinct points, delta = 1.
  return jnp.where(pos, out, 0.0)


def analytic_gaussian_delta(epsilon: ArrayLike, sigma: ArrayLike) -> jax.Array:
  r"""Exact delta(epsilon) of the Gaussian mechanism ``N(f(x), sigma^2)``, sensitivity 1.

  .. math::
      \delta(\epsilon) = \Phi\left(\frac{1}{2\sigma} - \epsilon\sigma\right)
      - e^\epsilon \Phi\left(-\frac{1}{2\sigma} - \epsilon\sigma\right)

  This is the hockey-stick divergence ``H_{e^eps}(N(1, sigma^2) || N(0, sigma^2))``,
  the smallest delta for which the mechanism is ``(epsilon, delta)``-DP.
  Computed in log space without subtracting the two terms: the difference is
  ``Phi(x) (1 - exp(-gap))`` with the gap integrated from the Mills ratio
  (see ``_hockey_stick``), so it keeps ~1e-14 relative accuracy wherever
  delta > 1e-20 (~3e-13 down to 1e-300; measured against 40-digit mpmath),
  even when delta is far below the two terms (large sigma). It is never
  negative and never NaN. ``sigma = 0`` gives 1 and ``epsilon = inf`` gives 0.

  Args:
    epsilon: epsilon, ``>= 0`` (``inf`` allowed).
    sigma: noise standard deviation (noise multiplier), ``>= 0``.

  Returns:
    float64 array of the broadcast shape. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete ``epsilon < 0``, ``sigma < 0`` or NaN.

  References:
    B. Balle, Y.-X. Wang, Improving the Gaussian Mechanism for Differential
    Privacy, arXiv:1805.06530, Theorem 8.

  Examples:
    >>> import jaxrdp
    >>> round(float(jaxrdp.mechanisms.analytic_gaussian_delta(1.0, 3.730632)), 10)
    1e-05
  """
  check_range("epsilon", epsilon, lower=0.0, allow_inf=True)
  check_range("sigma", sigma, lower=0.0)
  with _precision.Float64Scope() as scope:
    out = _delta_impl(*(_precision.as_float64(x) for x in (epsilon, sigma)))
  return scope.finalize(out)


@jax.jit
def _delta_impl(epsilon, sigma):
  finite = jnp.isfinite(epsilon)
  out = jnp.exp(_log_delta_kernel(jnp.where(finite, epsilon, 0.0), sigma))
  out = jnp.where(finite, out, 0.0)
  invalid = jnp.isnan(epsilon) | jnp.isnan(sigma) | (epsilon < 0) | (sigma < 0)
  return jnp.where(invalid, jnp.nan, out)


def _sigma_upper_bracket(epsilon, delta):
  # Two sigmas known to meet (epsilon, delta):
  # * the tail bound (Pei 2019 (6.81)), an upper bound on delta(eps, sigma):
  #   sigma = sqrt(2 log(1/delta)) / eps + 1/sqrt(2 eps);
  # * total variation: delta(eps, sigma) <= delta(0, sigma) = 2 Phi(1/(2 sigma)) - 1
  #   <= 1/(sigma sqrt(2 pi)), so sigma = 1/(delta sqrt(2 pi)) (covers eps = 0).
  eps_s = jnp.where(epsilon > 0, epsilon, 1.0)
  tail = jnp.sqrt(-2.0 * jnp.log(delta)) / eps_s + jnp.sqrt(0.5 / eps_s)
  tv = 1.0 / (delta * jnp.sqrt(2.0 * jnp.pi))
  return jnp.where(epsilon > 0, jnp.minimum(tail, tv), tv)


def analytic_gaussian_sigma(epsilon: ArrayLike, delta: ArrayLike) -> jax.Array:
  r"""Smallest noise multiplier for which the Gaussian mechanism is ``(epsilon, delta)``-DP.

  Solves :func:`analytic_gaussian_delta` ``(epsilon, sigma) = delta`` for
  ``sigma`` (delta is strictly decreasing in sigma) by a vectorized
  geometric bisection with a fixed number of steps, on the log of delta. The
  bracket's upper end is the tail-bound calibration (6.81) of Pei 2019 (or
  the total-variation bound at ``epsilon = 0``). The returned sigma is
  conservative: it aims at ``delta (1 - 1e-13)`` so that
  ``analytic_gaussian_delta(epsilon, sigma) <= delta`` holds despite rounding,
  and it exceeds the exact root by at most about 1e-13 relative (tests check
  that ``sigma (1 - 1e-12)`` misses the target). ``epsilon = inf`` gives 0.

  Args:
    epsilon: target epsilon, ``>= 0`` (``inf`` allowed).
    delta: target delta, in ``(0, 1)``.

  Returns:
    float64 array of the broadcast shape. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete ``epsilon < 0``, ``delta`` outside ``(0, 1)`` or NaN.

  References:
    B. Balle, Y.-X. Wang, Improving the Gaussian Mechanism for Differential
    Privacy, arXiv:1805.06530, Theorem 8 and Algorithm 1 (which solves
    the same equation with a different root finder).

  Examples:
    >>> import jaxrdp
    >>> round(float(jaxrdp.mechanisms.analytic_gaussian_sigma(1.0, 1e-5)), 6)
    3.730632
  """
  check_range("epsilon", epsilon, lower=0.0, allow_inf=True)
  check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  with _precision.Float64Scope() as scope:
    out = _sigma_impl(*(_precision.as_float64(x) for x in (epsilon, delta)))
  return scope.finalize(out)


@jax.jit
def _sigma_impl(epsilon, delta):
  epsilon, delta = jnp.broadcast_arrays(epsilon, delta)
  invalid = jnp.isnan(epsilon) | jnp.isnan(delta) | (epsilon < 0) | (delta <= 0) | (delta >= 1)
  finite = jnp.isfinite(epsilon) & ~invalid
  eps_s = jnp.where(finite, epsilon, 1.0)
  delta_s = jnp.where(invalid, 0.5, delta)
  hi = _sigma_upper_bracket(eps_s, delta_s)
  lo = hi * jnp.exp(-_BRACKET_LOG_RATIO)
  target = jnp.log(delta_s) - _hockey_stick.LOG_SAFETY_MARGIN
  sigma = _rootfind.smallest_feasible(lambda s: _log_delta_kernel(eps_s, s), target, lo, hi)
  sigma = jnp.where(jnp.isinf(epsilon), 0.0, sigma)
  return jnp.where(invalid, jnp.nan, sigma)
