"""Closed-form upper bound on the RDP of the Sampled Gaussian Mechanism.

Mironov, Talwar and Zhang (2019), "Renyi Differential Privacy of the Sampled
Gaussian Mechanism", arXiv:1908.10530, Theorem 11.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.validation import check_range

__all__ = ["sgm_rdp_closed_form"]


@jax.jit
def _closed_form_impl(q, sigma, alpha):
  # L = log(1 + 1/(q (alpha - 1))) (Thm 11). Sanitize the inputs of the q = 0
  # and alpha = inf branches so that neither the value nor the gradient is NaN.
  edge = (q <= 0) | jnp.isinf(alpha) | (sigma <= 0)
  q_s = jnp.where(edge, 0.1, q)
  a_s = jnp.where(edge, 2.0, alpha)
  s_s = jnp.where(edge, 5.0, sigma)
  log_sigma = jnp.log(s_s)
  big_l = jnp.log1p(1.0 / (q_s * (a_s - 1.0)))
  # Condition (4): 1 < alpha <= sigma^2 L / 2 - 2 log sigma.
  cond4 = a_s <= 0.5 * s_s**2 * big_l - 2.0 * log_sigma
  # Condition (5): alpha <= (sigma^2 L^2 / 2 - log 5 - 2 log sigma)
  #                          / (L + log(q alpha) + 1/(2 sigma^2)).
  # The denominator equals log(alpha (1 + q (alpha-1)) / (alpha-1)) + 1/(2 sigma^2) > 0,
  # so the inequality can be multiplied out without flipping it.
  denom = big_l + jnp.log(q_s * a_s) + 0.5 / s_s**2
  numer = 0.5 * s_s**2 * big_l**2 - jnp.log(5.0) - 2.0 * log_sigma
  cond5 = a_s * denom <= numer
  holds = (q_s <= 0.2) & (s_s >= 4.0) & cond4 & cond5
  bound = jnp.where(holds, 2.0 * q_s**2 * a_s / s_s**2, jnp.inf)
  # q = 0: the mechanism releases nothing about the individual; RDP is 0.
  bound = jnp.where(q <= 0, 0.0, bound)
  # alpha = inf (q > 0) or sigma = 0 (q > 0): outside Thm 11, and the exact RDP is inf.
  bound = jnp.where((q > 0) & (jnp.isinf(alpha) | (sigma <= 0)), jnp.inf, bound)
  invalid = (
    jnp.isnan(q)
    | jnp.isnan(sigma)
    | jnp.isnan(alpha)
    | (q < 0)
    | (q > 1)
    | (sigma < 0)
    | (alpha <= 1)
  )
  return jnp.where(invalid, jnp.nan, bound)


def sgm_rdp_closed_form(q: ArrayLike, sigma: ArrayLike, alpha: ArrayLike) -> jax.Array:
  r"""Closed-form RDP bound of the SGM (Mironov-Talwar-Zhang 2019, Thm 11).

  With ``L = log(1 + 1/(q (alpha - 1)))``, if

  * ``q <= 1/5`` and ``sigma >= 4``,
  * ``1 < alpha <= sigma^2 L / 2 - 2 log(sigma)``, and
  * ``alpha <= (sigma^2 L^2 / 2 - log 5 - 2 log sigma) / (L + log(q alpha) + 1/(2 sigma^2))``,

  then the Sampled Gaussian Mechanism with sampling rate ``q`` and noise
  multiplier ``sigma`` (sensitivity 1) satisfies
  ``(alpha, 2 q^2 alpha / sigma^2)``-RDP.

  Where the conditions do not hold the theorem says nothing, and this function
  returns ``+inf`` (a trivially valid bound), so the result is always an upper
  bound on the exact RDP (:func:`jaxrdp.mechanisms.sgm_rdp`). Exceptions to the
  conditions: ``q = 0`` gives ``0`` (the exact value), ``alpha = inf`` or
  ``sigma = 0`` (with ``q > 0``) give ``inf``. Fractional orders are allowed.

  Args:
      q: sampling rate in ``[0, 1]``.
      sigma: noise multiplier, ``>= 0``.
      alpha: Renyi order, ``> 1`` (``inf`` allowed).

  Returns:
      float64 array of the broadcast shape: the bound, or ``inf`` outside the
      theorem's conditions. Traced invalid inputs give NaN.

  Raises:
      ValueError: for concrete ``q`` outside ``[0, 1]``, ``sigma < 0``,
          ``alpha <= 1`` or NaN.

  References:
      I. Mironov, K. Talwar, L. Zhang. Renyi Differential Privacy of the Sampled
      Gaussian Mechanism. arXiv:1908.10530, Theorem 11.

  Examples:
      >>> import jaxrdp
      >>> float(jaxrdp.mechanisms.sgm_rdp_closed_form(0.01, 5.0, 8.0))  # 2 * 0.01**2 * 8 / 25
      6.4e-05
      >>> float(jaxrdp.mechanisms.sgm_rdp_closed_form(0.5, 5.0, 8.0))  # q > 1/5: no bound
      inf
  """
  check_range("q", q, lower=0.0, upper=1.0)
  check_range("sigma", sigma, lower=0.0)
  check_range("alpha", alpha, lower=1.0, lower_open=True, allow_inf=True)
  with _precision.Float64Scope() as scope:
    out = _closed_form_impl(*(_precision.as_float64(x) for x in (q, sigma, alpha)))
  return scope.finalize(out)
