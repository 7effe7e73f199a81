"""RDP curves of the Gaussian, Laplace and randomized-response mechanisms, and zCDP.

The curves are those of the table "Examples of Renyi-DP" in Yu-Xiang Wang's
lecture 6 (Wang, lecture notes 6), originally Mironov (2017), "Renyi Differential Privacy",
arXiv:1702.07476, Table II. RDP of different mechanisms adds, so each curve can
be composed with SGM steps in the accountant (the events ``Gaussian``,
``Laplace`` and ``RandomizedResponse`` of ``jaxrdp.events`` use them)::

    acct = jaxrdp.RdpAccountant()
    state = acct.compose(acct.init(), SelfComposed(PoissonSampled(0.01, Gaussian(1.0)), 1000))
    state = acct.compose(state, Laplace(2.0))
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core import numerics as _numerics
from .._core import precision as _precision
from .._core.validation import (
  DELTA,
  FINITE_NOISE_MULTIPLIER,
  NOISE_MULTIPLIER,
  ORDER,
  PROBABILITY,
  Interval,
  check_all,
)

__all__ = ["gaussian_rdp", "laplace_rdp", "randomized_response_rdp", "zcdp_to_epsilon"]

# Above this the exp(x) in the small-loss forms below could overflow; the
# logaddexp forms are used instead (they are accurate there because the result
# is then not small).
_LARGE = 30.0


# zCDP's rho: finite, >= 0.
_RHO = Interval(0.0)


def _curve(impl, *args):
  """The jitted kernel ``impl`` on float64 arguments, finalized for the caller.

  ``args``: ``(name, value, Interval)`` triples; concrete values outside their
  interval raise ValueError first. (The kernels map traced invalid values to NaN
  themselves: the events of ``jaxrdp.events`` call them directly, with their own
  ranges.)
  """
  check_all(args)
  with _precision.Float64Scope() as scope:
    out = impl(*(_precision.as_float64(x) for _, x, _ in args))
  return scope.finalize(out)


def _expm1_minus_x(x):
  # g(x) = e^x - 1 - x >= 0 to a few ulp (relative) for every real x, via the
  # log-space helper (no cancellation near 0, no overflow for large x). Its log
  # is -inf at x = 0, so x = 0 is routed around it (g(0) = g'(0) = 0) to keep
  # the gradient finite.
  zero = x == 0
  return jnp.where(zero, 0.0, jnp.exp(_numerics.log_expm1_minus_x(jnp.where(zero, 1.0, x))))


def gaussian_rdp(sigma: ArrayLike, alpha: ArrayLike) -> jax.Array:
  r"""RDP of the Gaussian mechanism: ``alpha / (2 sigma^2)``.

  The Gaussian mechanism adds ``N(0, sigma^2)`` to a query of L2 sensitivity 1;
  it is ``1/(2 sigma^2)``-zCDP. ``sigma = 0`` gives ``inf``; ``alpha = inf``
  gives ``inf`` (for finite ``sigma``).

  Args:
    sigma: noise multiplier, ``>= 0``.
    alpha: Renyi order, ``> 1`` (``inf`` allowed).

  Returns:
    float64 array of the broadcast shape. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete ``sigma < 0``, ``alpha <= 1`` or NaN.

  References:
    Yu-Xiang Wang, lecture notes 6, table "Examples of Renyi-DP";
    I. Mironov, Renyi Differential Privacy, arXiv:1702.07476, Table II.

  Examples:
    >>> import jaxrdp
    >>> float(jaxrdp.mechanisms.gaussian_rdp(2.0, 4.0))
    0.5
  """
  return _curve(_gaussian_impl, ("sigma", sigma, FINITE_NOISE_MULTIPLIER), ("alpha", alpha, ORDER))


@jax.jit
def _gaussian_impl(sigma, alpha):
  out = alpha / (2.0 * sigma**2)
  invalid = jnp.isnan(sigma) | jnp.isnan(alpha) | (sigma < 0) | (alpha <= 1)
  return jnp.where(invalid, jnp.nan, out)


@jax.jit
def _laplace_impl(scale, alpha):
  u = 1.0 / scale  # the pure-DP epsilon of the Laplace mechanism
  t = alpha - 1.0
  finite = jnp.isfinite(alpha) & (u < jnp.inf)
  u_s = jnp.where(finite, u, 1.0)
  t_s = jnp.where(finite, t, 1.0)
  a_s = t_s + 1.0
  # Wang, lecture notes 6: D = log(a/(2a-1) e^{t u} + t/(2a-1) e^{-a u}) / t with t = a - 1.
  # Since a/(2a-1) + t/(2a-1) = 1, the argument of the log is
  # 1 + [a g(t u) + t g(-a u)] / (2a - 1), with g(x) = e^x - 1 - x >= 0: the
  # linear terms cancel exactly, leaving a sum of non-negative terms. This keeps
  # full relative precision for large scales (RDP ~ a u^2 / 2) and as a -> 1.
  excess = (
    a_s * _expm1_minus_x(jnp.minimum(t_s * u_s, _LARGE)) + t_s * _expm1_minus_x(-a_s * u_s)
  ) / (2.0 * a_s - 1.0)
  small_form = jnp.log1p(excess) / t_s
  # Large t u: the same quantity as a logaddexp of the two log terms.
  log_2a1 = jnp.log(2.0 * a_s - 1.0)
  big_form = (
    jnp.logaddexp(jnp.log(a_s) - log_2a1 + t_s * u_s, jnp.log(t_s) - log_2a1 - a_s * u_s) / t_s
  )
  out = jnp.where(t_s * u_s < _LARGE, small_form, big_form)
  # alpha -> inf: D_inf = 1/scale, the pure-DP epsilon. scale = 0: no noise.
  out = jnp.where(jnp.isinf(alpha), u, out)
  out = jnp.where(jnp.isinf(u), jnp.inf, out)
  invalid = jnp.isnan(scale) | jnp.isnan(alpha) | (scale < 0) | (alpha <= 1)
  return jnp.where(invalid, jnp.nan, out)


def laplace_rdp(scale: ArrayLike, alpha: ArrayLike) -> jax.Array:
  r"""RDP of the Laplace mechanism with scale ``lambda`` (sensitivity 1).

  .. math::
      D_\alpha = \frac{1}{\alpha-1} \log\left(\frac{\alpha}{2\alpha-1}
      e^{(\alpha-1)/\lambda} + \frac{\alpha-1}{2\alpha-1} e^{-\alpha/\lambda}\right)

  Computed as ``log1p(excess) / (alpha - 1)`` where ``excess`` is a sum of
  non-negative terms (see the code), or as a ``logaddexp`` when
  ``(alpha-1)/lambda`` is large, so the value keeps full relative precision
  for large scales and for ``alpha -> 1``. Limits: ``alpha -> 1`` gives the
  KL divergence ``1/lambda + exp(-1/lambda) - 1``; ``alpha = inf`` gives the
  pure-DP epsilon ``1/lambda``; ``scale = 0`` gives ``inf``.

  Args:
    scale: Laplace scale ``lambda``, ``>= 0``.
    alpha: Renyi order, ``> 1`` (``inf`` allowed).

  Returns:
    float64 array of the broadcast shape. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete ``scale < 0``, ``alpha <= 1`` or NaN.

  References:
    Yu-Xiang Wang, lecture notes 6, table "Examples of Renyi-DP";
    I. Mironov, Renyi Differential Privacy, arXiv:1702.07476, Table II.

  Examples:
    >>> import jaxrdp
    >>> round(float(jaxrdp.mechanisms.laplace_rdp(1.0, float("inf"))), 12)
    1.0
  """
  return _curve(_laplace_impl, ("scale", scale, NOISE_MULTIPLIER), ("alpha", alpha, ORDER))


@jax.jit
def _randomized_response_impl(p, alpha):
  # The curve is symmetric under p <-> 1 - p. Work with small = min(p, 1 - p),
  # which is exact (1 - p is exact for p >= 1/2, Sterbenz), and big = 1 - small.
  small = jnp.minimum(p, 1.0 - p)
  interior = small > 0.0
  small = jnp.where(interior, small, 0.25)
  big = 1.0 - small
  gap = 1.0 - 2.0 * small  # big - small, >= 0
  # ell = log(big / small) = log1p(gap / small): accurate near p = 1/2.
  ell = jnp.log1p(gap / small)
  finite = jnp.isfinite(alpha)
  t = jnp.where(finite, alpha - 1.0, 1.0)
  s = t * ell
  # Wang, lecture notes 6: D = log(p^a (1-p)^(1-a) + (1-p)^a p^(1-a)) / (a - 1)
  #             = log(p e^s + (1-p) e^-s) / t,  s = (a-1) ell.
  # With p = big and g(x) = e^x - 1 - x,
  # big e^s + small e^-s = 1 + (big - small) s + big g(s) + small g(-s),
  # all terms >= 0, so log1p keeps full precision near p = 1/2 and alpha -> 1.
  excess = gap * s + big * _expm1_minus_x(jnp.minimum(s, _LARGE)) + small * _expm1_minus_x(-s)
  small_form = jnp.log1p(excess) / t
  big_form = jnp.logaddexp(jnp.log1p(-small) + s, jnp.log(small) - s) / t
  out = jnp.where(s < _LARGE, small_form, big_form)
  # alpha -> inf: D_inf = |log(p / (1 - p))|, the pure-DP epsilon.
  out = jnp.where(finite, out, ell)
  # p in {0, 1}: the answer is deterministic, no privacy.
  out = jnp.where(interior, out, jnp.inf)
  invalid = jnp.isnan(p) | jnp.isnan(alpha) | (p < 0) | (p > 1) | (alpha <= 1)
  return jnp.where(invalid, jnp.nan, out)


def randomized_response_rdp(p: ArrayLike, alpha: ArrayLike) -> jax.Array:
  r"""RDP of binary randomized response that answers truthfully with probability ``p``.

  .. math::
      D_\alpha = \frac{1}{\alpha-1} \log\left(p^\alpha (1-p)^{1-\alpha}
      + (1-p)^\alpha p^{1-\alpha}\right)

  Computed in stable form (``log1p`` of a sum of non-negative terms, or a
  ``logaddexp`` when ``(alpha-1) log(p/(1-p))`` is large). Limits:
  ``alpha -> 1`` gives ``(2p-1) log(p/(1-p))`` (the KL divergence);
  ``alpha = inf`` gives ``|log(p/(1-p))|`` (the pure-DP epsilon);
  ``p = 1/2`` gives ``0``; ``p`` in ``{0, 1}`` gives ``inf``. Symmetric under
  ``p -> 1 - p``.

  Args:
    p: probability of answering truthfully, in ``[0, 1]``.
    alpha: Renyi order, ``> 1`` (``inf`` allowed).

  Returns:
    float64 array of the broadcast shape. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete ``p`` outside ``[0, 1]``, ``alpha <= 1`` or NaN.

  References:
    Yu-Xiang Wang, lecture notes 6, table "Examples of Renyi-DP";
    I. Mironov, Renyi Differential Privacy, arXiv:1702.07476, Table II.

  Examples:
    >>> import jaxrdp
    >>> float(jaxrdp.mechanisms.randomized_response_rdp(0.5, 2.0))
    0.0
  """
  return _curve(_randomized_response_impl, ("p", p, PROBABILITY), ("alpha", alpha, ORDER))


def zcdp_to_epsilon(rho: ArrayLike, delta: ArrayLike) -> jax.Array:
  r"""``(epsilon, delta)``-DP implied by ``rho``-zCDP: ``rho + 2 sqrt(rho log(1/delta))``.

  A mechanism whose RDP curve is at most ``rho * alpha`` for every
  ``alpha > 1`` (e.g. the Gaussian mechanism, ``rho = 1/(2 sigma^2)``) is
  ``(rho + 2 sqrt(rho log(1/delta)), delta)``-DP.

  Args:
    rho: zCDP parameter, ``>= 0``.
    delta: target delta, in ``(0, 1)``.

  Returns:
    float64 array of the broadcast shape. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete ``rho < 0``, ``delta`` outside ``(0, 1)`` or NaN.

  References:
    Yu-Xiang Wang, lecture notes 6, "Properties of Renyi DP / CDP";
    M. Bun, T. Steinke, Concentrated Differential Privacy, arXiv:1605.02065,
    Proposition 1.3.

  Examples:
    >>> import jaxrdp
    >>> round(float(jaxrdp.classical.zcdp_to_epsilon(0.01, 1e-5)), 6)
    0.688614
  """
  return _curve(_zcdp_impl, ("rho", rho, _RHO), ("delta", delta, DELTA))


@jax.jit
def _zcdp_impl(rho, delta):
  out = rho + 2.0 * jnp.sqrt(rho * -jnp.log(delta))
  invalid = jnp.isnan(rho) | jnp.isnan(delta) | (rho < 0) | (delta <= 0) | (delta >= 1)
  return jnp.where(invalid, jnp.nan, out)
