"""Exact (epsilon, delta) of one step of the Sampled Gaussian Mechanism, and its calibration.

N. P. Kalinin (2024), "Notes on Sampled Gaussian Mechanism", eq. (1)
and Lemma 1; the add direction is derived below.

With ``mu0 = N(0, sigma^2)``, ``mu1 = N(1, sigma^2)`` and the mixture
``mu = (1 - q) mu0 + q mu1`` (Poisson sampling with rate ``q``, sensitivity 1),
the two hockey-stick divergences of one step are

* remove: ``H_{e^eps}(mu || mu0) = int (q mu1 - h mu0)_+`` with ``h = e^eps - 1 + q``.
  The integrand is positive for ``z > sigma^2 log(h/q) + 1/2``, which gives
  Kalinin 2024 eq. (1):
  ``q Phi(-sigma log(h/q) + 1/(2 sigma)) - h Phi(-sigma log(h/q) - 1/(2 sigma))``.
* add: ``H_{e^eps}(mu0 || mu) = e^eps int (c mu0 - q mu1)_+`` with
  ``c = q - (1 - e^-eps)``. It is 0 when ``c <= 0``; otherwise the integrand is
  positive for ``z < sigma^2 l + 1/2`` with ``l = log(c/q) < 0``, which gives
  ``e^eps [c Phi(sigma l + 1/(2 sigma)) - q Phi(sigma l - 1/(2 sigma))]``.

An add/remove guarantee is the maximum of the two.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core import rootfind as _rootfind
from .._core.validation import check_range
from ..mechanisms import _analytic_gaussian, _hockey_stick

__all__ = ["sgm_single_step_delta", "sgm_single_step_sigma"]

_DIRECTIONS = ("remove", "add", "max")


# Beyond this |epsilon| the one-step curve is written without e^{+-eps}: e^710
# overflows float64 and e^-745 underflows it, and the privacy loss of a step with
# little noise reaches thousands.
_LARGE_EPS = 700.0


def log_remove_ratio(epsilon, q):
  """``(full, log(h / q))`` with ``h = e^eps - 1 + q``, for every real ``eps``.

  ``full`` is ``h <= 0`` (``e^eps <= 1 - q``): the remove direction's region
  ``mu > e^eps mu0`` is then everything and ``delta = 1 - e^eps``; the ratio is
  set to 0 there. Elsewhere ``log(h / q)`` is ``log1p(expm1(eps) / q)`` for
  ``|eps| <= 1`` (accurate for small ``eps``) and ``eps - log q + log(1 - x)``
  with ``log x = log(1 - q) - eps`` beyond, which never forms ``e^eps`` (it
  overflows float64 beyond 709, and the privacy loss of a step with little noise
  reaches thousands).
  """
  near = jnp.abs(epsilon) <= 1.0
  v = jnp.expm1(jnp.where(near, epsilon, 0.0)) / q
  full_near = v <= -1.0
  e_f = jnp.where(near, 2.0, epsilon)
  below_one = q < 1.0  # log(1 - q) = -inf at q = 1, with a finite derivative in q
  log_x = jnp.where(below_one, jnp.log1p(-jnp.where(below_one, q, 0.5)), -jnp.inf) - e_f
  full_far = log_x >= 0.0
  far = e_f - jnp.log(q) + jax.nn.log1mexp(-jnp.where(full_far, -1.0, log_x))
  full = jnp.where(near, full_near, full_far)
  ell = jnp.where(near, jnp.log1p(jnp.where(full_near, 0.0, v)), far)
  return full, jnp.where(full, 0.0, ell)


def log_add_weight(epsilon, q):
  """``(positive, log c, log(c / q))`` with ``c = q - (1 - e^-eps) = e^-eps - (1 - q)``.

  The add direction's hockey-stick divergence is 0 unless ``c > 0``. For
  ``|eps| <= 700``: ``c = e^-eps - (1 - q)`` when ``q >= 1/2`` (``1 - q`` is exact,
  Sterbenz, so a tiny ``c`` stays accurate, e.g. ``q = 1``), ``q + expm1(-eps)``
  otherwise. Beyond, ``e^-eps`` leaves float64: ``log c = -eps + log1p(-(1 - q)
  e^eps)``, positive for ``eps < 0`` and, for ``eps > 700``, only at ``q = 1`` (for
  ``q < 1``, ``1 - q >= 2^-53 > e^-700``). ``log(c / q)`` is ``log1p((c - q) / q)``
  where ``c`` is near ``q`` and ``log c - log q`` elsewhere.
  """
  moderate = jnp.abs(epsilon) <= _LARGE_EPS
  e_m = jnp.where(moderate, epsilon, 0.0)
  c = jnp.where(q >= 0.5, jnp.exp(-e_m) - (1.0 - q), q + jnp.expm1(-e_m))
  c_pos = c > 0
  c_s = jnp.where(c_pos, c, q)
  log_q = jnp.log(q)
  e_l = jnp.where(moderate, -1.0, epsilon)
  large_pos = (e_l < 0.0) | (q >= 1.0)
  log_c_large = -e_l + jnp.log1p(-jnp.where(e_l < 0.0, (1.0 - q) * jnp.exp(e_l), 0.0))
  positive = jnp.where(moderate, c_pos, large_pos)
  log_c = jnp.where(moderate, jnp.log(c_s), log_c_large)
  ell = jnp.where(moderate & (c_s >= 0.5 * q), jnp.log1p((c_s - q) / q), log_c - log_q)
  return positive, log_c, ell


def _log_delta_remove(epsilon, q, sigma):
  # Kalinin 2024 eq. (1): q Phi(x) - h Phi(x - 1/sigma), x = -sigma log(h/q) + 1/(2 sigma),
  # where h phi(x - 1/sigma) = q phi(x). Callers pass epsilon >= 0, where h >= q > 0.
  _, ell = log_remove_ratio(epsilon, q)  # never full: epsilon >= 0 and q > 0
  x = -sigma * ell + 0.5 / sigma
  return _hockey_stick.log_gaussian_hockey_stick(jnp.log(q), x, 1.0 / sigma)


def _log_delta_add(epsilon, q, sigma):
  # e^eps [c Phi(x) - q Phi(x - 1/sigma)], x = sigma log(c/q) + 1/(2 sigma), where
  # c = q - (1 - e^-eps) and q phi(x - 1/sigma) = c phi(x). Zero unless c > 0.
  positive, log_c, ell = log_add_weight(epsilon, q)
  ell = jnp.where(positive, ell, 0.0)
  x = sigma * ell + 0.5 / sigma
  out = _hockey_stick.log_gaussian_hockey_stick(
    epsilon + jnp.where(positive, log_c, 0.0), x, 1.0 / sigma
  )
  return jnp.where(positive, out, -jnp.inf)


def _log_delta_kernel(epsilon, q, sigma, direction):
  """log delta for q in (0, 1], sigma > 0, finite epsilon >= 0 (callers sanitize)."""
  if direction == "remove":
    return _log_delta_remove(epsilon, q, sigma)
  if direction == "add":
    return _log_delta_add(epsilon, q, sigma)
  return jnp.maximum(_log_delta_remove(epsilon, q, sigma), _log_delta_add(epsilon, q, sigma))


def _delta_no_noise(epsilon, q, direction):
  # sigma = 0: mu0, mu1 are point masses at 0 and 1. remove: q; add: (1 - e^eps (1-q))_+.
  # add: 1 - (1 - q) e^eps, formed without e^eps alone (which overflows at eps > 709).
  remove = q
  add = jnp.maximum(-jnp.expm1(epsilon + jnp.log1p(-q)), 0.0)
  return {"remove": remove, "add": add, "max": jnp.maximum(remove, add)}[direction]


@functools.partial(jax.jit, static_argnames="direction")
def _delta_impl(epsilon, q, sigma, direction):
  regular = jnp.isfinite(epsilon) & (q > 0) & (sigma > 0)
  eps_s = jnp.where(regular, epsilon, 1.0)
  q_s = jnp.where(regular, q, 0.5)
  sigma_s = jnp.where(regular, sigma, 1.0)
  out = jnp.exp(_log_delta_kernel(eps_s, q_s, sigma_s, direction))
  eps_n = jnp.where(jnp.isfinite(epsilon), epsilon, 0.0)
  out = jnp.where(sigma > 0, out, _delta_no_noise(eps_n, q, direction))
  out = jnp.where((q > 0) & jnp.isfinite(epsilon), out, 0.0)
  invalid = (
    jnp.isnan(epsilon)
    | jnp.isnan(q)
    | jnp.isnan(sigma)
    | (epsilon < 0)
    | (q < 0)
    | (q > 1)
    | (sigma < 0)
  )
  return jnp.where(invalid, jnp.nan, out)


@functools.partial(jax.jit, static_argnames="direction")
def _sigma_impl(epsilon, delta, q, direction):
  epsilon, delta, q = jnp.broadcast_arrays(epsilon, delta, q)
  invalid = (
    jnp.isnan(epsilon)
    | jnp.isnan(delta)
    | jnp.isnan(q)
    | (epsilon < 0)
    | (delta <= 0)
    | (delta >= 1)
    | (q < 0)
    | (q > 1)
  )
  # sigma = 0 already meets delta when delta >= q (remove, max) or
  # delta >= (1 - e^eps (1 - q))_+ (add).
  eps_n = jnp.where(jnp.isfinite(epsilon), epsilon, 0.0)
  needs_noise = ~invalid & jnp.isfinite(epsilon) & (delta < _delta_no_noise(eps_n, q, direction))
  eps_s = jnp.where(needs_noise, epsilon, 1.0)
  delta_s = jnp.where(needs_noise, delta, 0.25)
  q_s = jnp.where(needs_noise, q, 0.5)
  hi = _analytic_gaussian._sigma_upper_bracket(eps_s, delta_s / q_s)
  lo = hi * jnp.exp(-_analytic_gaussian._BRACKET_LOG_RATIO)
  target = jnp.log(delta_s) - _hockey_stick.LOG_SAFETY_MARGIN
  sigma = _rootfind.smallest_feasible(
    lambda s: _log_delta_kernel(eps_s, q_s, s, direction), target, lo, hi
  )
  sigma = jnp.where(needs_noise, sigma, 0.0)
  return jnp.where(invalid, jnp.nan, sigma)


def _check_direction(direction):
  if direction not in _DIRECTIONS:
    raise ValueError(f"direction must be one of {list(_DIRECTIONS)}; got {direction!r}")


def sgm_single_step_delta(
  epsilon: ArrayLike, q: ArrayLike, sigma: ArrayLike, direction: str = "max"
) -> jax.Array:
  r"""Exact delta(epsilon) of one step of the Sampled Gaussian Mechanism.

  ``direction="remove"`` is Kalinin 2024 eq. (1), ``H_{e^eps}(mu || mu0)``:

  .. math::
      \delta = q\,\Phi\left(-\sigma\log\tfrac{h}{q} + \tfrac{1}{2\sigma}\right)
             - h\,\Phi\left(-\sigma\log\tfrac{h}{q} - \tfrac{1}{2\sigma}\right),
      \qquad h = e^\epsilon - 1 + q.

  ``direction="add"`` is ``H_{e^eps}(mu0 || mu)``: with ``c = q - (1 - e^{-eps})``,
  it is 0 if ``c <= 0`` and otherwise

  .. math::
      \delta = e^\epsilon\left[c\,\Phi\left(\sigma\log\tfrac{c}{q} + \tfrac{1}{2\sigma}\right)
             - q\,\Phi\left(\sigma\log\tfrac{c}{q} - \tfrac{1}{2\sigma}\right)\right].

  ``direction="max"`` (default) is the maximum of the two: the add/remove
  guarantee of one step. All are computed in log space (``log_ndtr``) with a
  clamped log-difference, so the result is never negative or NaN. Limits:
  ``q = 0`` or ``epsilon = inf`` give 0; ``q = 1`` gives the Gaussian
  mechanism (:func:`jaxrdp.mechanisms.analytic_gaussian_delta`); ``sigma = 0`` gives
  ``q`` (remove) and ``(1 - e^eps (1 - q))_+`` (add).

  Args:
    epsilon: epsilon, ``>= 0`` (``inf`` allowed).
    q: sampling rate, in ``[0, 1]``.
    sigma: noise multiplier, ``>= 0``.
    direction: ``"remove"``, ``"add"`` or ``"max"`` (static).

  Returns:
    float64 array of the broadcast shape. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete ``epsilon < 0``, ``q`` outside ``[0, 1]``,
      ``sigma < 0``, NaN, or an unknown ``direction``.

  References:
    N. P. Kalinin, Notes on Sampled Gaussian Mechanism (2024), eq. (1);
    the add direction is derived in this module's docstring.

  Examples:
    >>> import jaxrdp
    >>> d = jaxrdp.mechanisms.sgm_single_step_delta(1.0, 1.0, 3.730632)  # q = 1: Gaussian
    >>> round(float(d), 10)
    1e-05
  """
  _check_direction(direction)
  check_range("epsilon", epsilon, lower=0.0, allow_inf=True)
  check_range("q", q, lower=0.0, upper=1.0)
  check_range("sigma", sigma, lower=0.0)
  with _precision.Float64Scope() as scope:
    out = _delta_impl(*(_precision.as_float64(x) for x in (epsilon, q, sigma)), direction)
  return scope.finalize(out)


def sgm_single_step_sigma(
  epsilon: ArrayLike, delta: ArrayLike, q: ArrayLike, direction: str = "max"
) -> jax.Array:
  r"""Smallest sigma for which one SGM step with rate ``q`` is ``(epsilon, delta)``-DP.

  Solves :func:`sgm_single_step_delta` ``(epsilon, q, sigma) = delta`` for
  sigma. delta is strictly decreasing in sigma (Kalinin 2024, Lemma 1, for the
  remove direction; for both directions the data-processing inequality gives
  at least non-increasing, since adding noise to both distributions is a
  post-processing, and the tests check strictness numerically), so this is a
  1-D root find: a fixed-step vectorized
  geometric bisection on log delta. The upper end of the bracket is the
  tail-bound Gaussian calibration (Pei 2019 (6.81)) at ``delta / q``, valid
  because one SGM step's delta is at most ``q`` times the Gaussian
  mechanism's (joint convexity of the hockey-stick divergence). The result is
  conservative: it aims at ``delta (1 - 1e-13)`` so that
  ``sgm_single_step_delta`` at the returned sigma is ``<= delta`` despite
  rounding, and it exceeds the exact root by at most about 1e-13 relative.
  Where no noise is needed (``delta >= q`` for remove and max,
  ``delta >= (1 - e^eps (1 - q))_+`` for add, ``q = 0``, ``epsilon = inf``)
  the result is 0.

  Args:
    epsilon: target epsilon, ``>= 0`` (``inf`` allowed).
    delta: target delta, in ``(0, 1)``.
    q: sampling rate, in ``[0, 1]``.
    direction: ``"remove"``, ``"add"`` or ``"max"`` (static).

  Returns:
    float64 array of the broadcast shape. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete out-of-range or NaN inputs, or an unknown ``direction``.

  References:
    N. P. Kalinin, Notes on Sampled Gaussian Mechanism (2024), eq. (1),
    Lemma 1 and the closing remark (delta = 1e-6, q = eps = 3.82e-6 gives
    sigma ~ 0.8478).

  Examples:
    >>> import jaxrdp
    >>> s = jaxrdp.mechanisms.sgm_single_step_sigma(3.82e-6, 1e-6, 3.82e-6, direction="remove")
    >>> round(float(s), 6)  # Kalinin 2024: "sigma ~ 0.8478"
    0.847856
  """
  _check_direction(direction)
  check_range("epsilon", epsilon, lower=0.0, allow_inf=True)
  check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  check_range("q", q, lower=0.0, upper=1.0)
  with _precision.Float64Scope() as scope:
    out = _sigma_impl(*(_precision.as_float64(x) for x in (epsilon, delta, q)), direction)
  return scope.finalize(out)
