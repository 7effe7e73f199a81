"""RDP of repeat-and-select (private hyperparameter tuning), from the RDP curve of one run.

Papernot and Steinke 2022, "Hyperparameter Tuning with Renyi Differential
Privacy", arXiv:2110.03620. A mechanism with RDP curve ``eps(.)`` is run K times, K
random, and the best run is released. At order ``lambda``:

* K truncated negative binomial (shape ``eta >= 0``, parameter ``gamma`` in (0, 1];
  eta = 0 logarithmic, eta = 1 geometric), Thm 2, for every ``mu >= 1``::

      eps(lambda) + (1 + eta) [(1 - 1/mu) eps(mu) + log(1/gamma) / mu] + log(E K) / (lambda - 1)

  minimised over ``mu`` among the orders;
* K Poisson of mean ``m`` (``eta = inf``), Thm 6::

      eps(lambda) + m delta_hat(lambda) + log(m) / (lambda - 1),

  ``delta_hat`` the delta of one run at ``epsilon = log(lambda / (lambda - 1))``.

``gamma`` follows from the mean, ``E K = eta (1/gamma - 1) / (1 - gamma^eta)``
(``(1/gamma - 1) / log(1/gamma)`` at eta = 0), decreasing in gamma: it is found by
bisection on ``log gamma`` and the lower end is kept (a smaller gamma gives a larger
bound: the safe side). A bound at an order is a bound at every smaller order (RDP
grows with the order), so each order finally takes the smallest value over the
orders at or above it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["repeat_and_select_impl", "tnb_log_gamma", "tnb_mean"]

_BISECTIONS = 80  # from a bracket of width 700: below float64 resolution of log gamma
_LOG_GAMMA_MIN = -700.0


def tnb_mean(log_gamma, shape):
  """Mean of the truncated negative binomial law at ``log gamma <= 0`` (finite shape >= 0)."""
  t = jnp.minimum(log_gamma, 0.0)
  tiny_t = t > -1e-300  # gamma = 1: the law is a point mass at 1
  ts = jnp.where(tiny_t, -1.0, t)
  num = jnp.expm1(-ts)  # 1/gamma - 1
  et = shape * ts
  # (1 - gamma^eta) / eta, with its eta -> 0 limit -t (series where eta t is tiny).
  den = jnp.where(
    jnp.abs(et) < 1e-8,
    -ts * (1.0 + 0.5 * et),
    -jnp.expm1(et) / jnp.where(shape > 0, shape, 1.0),
  )
  return jnp.where(tiny_t, 1.0, num / den)


def tnb_log_gamma(mean, shape):
  """log gamma of the truncated negative binomial law of mean ``mean``, rounded down.

  Bisection on ``log gamma`` in [-700, 0]; returns the lower end of the final
  bracket (its mean is >= ``mean``), minus 1e-12 relative for the rounding of the
  mean's evaluation. ``mean = 1`` gives 0; a mean beyond the bracket gives ``-inf``.
  """
  mean, shape = jnp.broadcast_arrays(mean, shape)
  lo = jnp.full(mean.shape, _LOG_GAMMA_MIN)
  hi = jnp.zeros(mean.shape)

  def step(_, bracket):
    lo, hi = bracket
    mid = 0.5 * (lo + hi)
    above = tnb_mean(mid, shape) >= mean  # mid's gamma is at or below the target's
    return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

  lo, _ = jax.lax.fori_loop(0, _BISECTIONS, step, (lo, hi))
  lo = jax.lax.stop_gradient(lo)
  bracketed = tnb_mean(lo, shape) >= mean
  # Derivatives by the implicit function theorem: t(m, eta) solves tnb_mean(t, eta) = m,
  # so dt = -(d_m F dm + d_eta F d_eta) / d_t F with F = tnb_mean - m. The correction's
  # value is exactly 0 (F - stop_gradient(F)); only its derivative is used.
  ok = bracketed & (mean > 1.0)
  t_safe = jnp.where(ok, lo, -1.0)
  dmean_dt = jax.jvp(lambda t: tnb_mean(t, shape), (t_safe,), (jnp.ones_like(t_safe),))[1]
  residual = tnb_mean(t_safe, shape) - mean
  slope = jax.lax.stop_gradient(jnp.where(ok & (dmean_dt != 0), dmean_dt, -1.0))
  correction = -(residual - jax.lax.stop_gradient(residual)) / slope
  t = lo * (1.0 + 1e-12) + jnp.where(ok, correction, 0.0)
  # A mean beyond the bracket (about 1e300 runs) gets gamma = 0: an infinite bound.
  t = jnp.where(bracketed, t, -jnp.inf)
  return jnp.where(mean <= 1.0, 0.0, t)


def repeat_and_select_impl(curve, orders, mean, shape, delta_hat):
  """The bound of the module doc.

  Args:
    curve: RDP of one run, float64 ``[..., n]`` at ``orders`` ``[n]`` (in (1, inf]).
    mean, shape: float64 ``[...]``; ``shape = inf`` is the Poisson law.
    delta_hat: float64 ``[..., n]``, one run's delta at ``log(lambda / (lambda - 1))``
      for each order (used by the Poisson law only).

  Returns:
    float64 ``[..., n]``; NaN where ``mean < 1``, ``shape < 0`` or either is NaN.
  """
  m = mean[..., None]
  eta = shape[..., None]
  finite_order = jnp.isfinite(orders)
  a = jnp.where(finite_order, orders, 2.0)
  log_mean_term = jnp.where(finite_order, jnp.log(m) / (a - 1.0), 0.0)
  poisson = jnp.isinf(eta)
  eta_s = jnp.where(poisson, 1.0, eta)
  # Truncated negative binomial (Thm 2).
  log_gamma = tnb_log_gamma(mean, jnp.where(jnp.isinf(shape), 1.0, shape))[..., None]
  inner = jnp.where(finite_order, (1.0 - 1.0 / a) * curve - log_gamma / a, curve)
  inner = jnp.where(curve == jnp.inf, jnp.inf, inner)
  c = (1.0 + eta_s) * jnp.min(inner, axis=-1, keepdims=True)
  tnb = curve + log_mean_term + c
  tnb = jnp.where(m == 1.0, curve, tnb)  # one run exactly
  # Poisson (Thm 6).
  pois = curve + m * delta_hat + log_mean_term
  out = jnp.where(poisson, pois, tnb)
  # Monotonicity in the order: each order takes the least bound at orders >= it.
  above = orders[None, :] >= orders[:, None]  # [i, j]: order j >= order i
  out = jnp.min(jnp.where(above, out[..., None, :], jnp.inf), axis=-1)
  invalid = jnp.isnan(m) | jnp.isnan(eta) | (m < 1.0) | (eta < 0.0)
  return jnp.where(invalid, jnp.nan, out)
