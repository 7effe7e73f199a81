"""One step of the Poisson-subsampled Laplace mechanism: its delta curve, MGF and support.

The mechanism adds Laplace noise of scale ``b`` (per unit of L1 sensitivity) to a
query of a Poisson sample at rate ``q``; ``q = 1`` is the plain Laplace mechanism.
Under add/remove the remove direction's pair is ``P = (1 - q) mu0 + q mu1`` against
``Q = mu0``, ``mu_c = Lap(c, b)``; the add direction's is ``(Q, P)``. With ``r =
1 / b`` the two densities' log ratio is ``l(x) = (|x| - |x - 1|) r``: ``-r`` below 0,
``(2 x - 1) r`` on ``[0, 1]`` and ``r`` above 1, so the privacy loss ``L =
log(1 - q + q e^l)`` is bounded, with atoms at both ends.

The hockey-stick curve has a closed form in each direction (derived below from the
two Laplace survival functions; the same curve as dp_accounting's
``LaplacePrivacyLoss``, Zhu, Dong and Wang 2022, arXiv:2106.08567, Sec. 4). Remove,
with ``h = e^eps - 1 + q`` and ``t = log(h / q)``: the region ``q mu1 > h mu0`` is
``x > x* = (1 + b t) / 2``, where ``q P_1(X > x*) - h P_0(X > x*) = q (1 - e^{-(1 -
x*) r})`` because ``h e^{-x* r} = q e^{(x* - 1) r}``. So, for ``h > 0``,

    delta = q (1 - e^{min(t, (t - r) / 2)})   for t < r, and 0 beyond,

(``t < -r``: the region is everything, ``q - h``), and ``1 - e^eps`` for ``h <= 0``.
Add, with ``c = e^-eps - (1 - q)`` and ``t = log(c / q)``: ``delta = e^eps c (1 -
e^{min(-t, -(t + r) / 2)})`` for ``t > -r`` and ``c > 0``, else 0. No two rounded
terms are subtracted. At ``q = 1`` both are ``1 - e^{(eps - r) / 2}`` on ``[-r, r]``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .._core.numerics import log1p_rate_expm1
from ..mechanisms import _sgm_single_step

__all__ = ["log_delta_curve", "log_mgf", "support"]


def _log_one_minus_exp(x):
  """``log(1 - e^x)`` for ``x <= 0`` (``-inf`` at 0), with a finite derivative at 0."""
  neg = x < 0.0
  return jnp.where(neg, jnp.log(-jnp.expm1(jnp.where(neg, x, -1.0))), -jnp.inf)


def log_delta_curve(eps, q, scale, direction):
  """``log delta(eps)`` of one step for any real ``eps`` (``q`` in (0, 1], ``scale > 0``).

  ``direction``: ``"remove"``, ``"add"``, or a boolean array (True: add) that
  broadcasts with ``eps``.
  """
  if isinstance(direction, str):
    if direction not in ("remove", "add"):
      raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}")
    direction = direction == "add"
  is_add = jnp.asarray(direction)
  r = 1.0 / scale
  full, t_r = _sgm_single_step.log_remove_ratio(eps, q)  # h <= 0, log(h / q)
  remove = jnp.log(q) + _log_one_minus_exp(jnp.minimum(jnp.minimum(t_r, 0.5 * (t_r - r)), 0.0))
  remove = jnp.where(full, _log_one_minus_exp(jnp.minimum(eps, 0.0)), remove)
  positive, log_c, t_a = _sgm_single_step.log_add_weight(eps, q)  # log c, log(c / q)
  x_a = jnp.minimum(jnp.minimum(-t_a, -0.5 * (t_a + r)), 0.0)
  add = jnp.where(positive, eps + log_c + _log_one_minus_exp(x_a), -jnp.inf)
  return jnp.where(is_add, add, remove)


def support(q, scale, z, direction):
  """Loss interval ``[a, b]`` of one step: all of its mass (the loss is bounded).

  ``z`` (the Gaussian producer's tail cut) is not used.
  """
  del z
  r = 1.0 / scale
  low, high = log1p_rate_expm1(q, -r), log1p_rate_expm1(q, r)
  if direction == "remove":
    return low, high
  return -high, -low


def _log_mean_exp_cell(delta):
  """``log((e^delta - 1) / delta)``: the integral of ``e^{f0 + delta u}`` over ``u`` in
  ``[0, 1]``, relative to ``e^f0``, for any real ``delta``."""
  small = jnp.abs(delta) < 1e-6
  d = jnp.where(small, 1.0, delta)
  big = jnp.where(
    d > 0,
    d + jax.nn.log1mexp(jnp.abs(d)) - jnp.log(jnp.abs(d)),
    jax.nn.log1mexp(jnp.abs(d)) - jnp.log(jnp.abs(d)),
  )
  return jnp.where(small, 0.5 * delta, big)


def log_mgf(q, scale, lam, points):
  """Estimate of ``log E_P[e^{lam L}]`` of the remove direction, any real ``lam``.

  ``E_{x ~ mu0}[(1 - q + q e^{l(x)})^{1 + lam}]``: the two atoms of ``l`` (``x <= 0``,
  mass 1/2, and ``x >= 1``, mass ``e^{-r} / 2``) exactly, and the part on ``[0, 1]``
  by ``points`` cells on each of which the log-integrand is interpolated linearly and
  its exponential integrated exactly (the integrand is close to an exponential there,
  however steep). Only plans the grid, as the Gaussian producer's estimate does.
  """
  alpha = 1.0 + lam
  r = 1.0 / scale
  u = jnp.linspace(0.0, 1.0, points)
  x = u  # (..., points) on [0, 1]
  z = (2.0 * x - 1.0) * r[..., None]
  f = -x * r[..., None] + alpha[..., None] * log1p_rate_expm1(q[..., None], z)
  h = 1.0 / (points - 1)
  cells = f[..., :-1] + _log_mean_exp_cell(f[..., 1:] - f[..., :-1])
  middle = jax.nn.logsumexp(cells, axis=-1) + math.log(h) + jnp.log(0.5 * r)
  low = math.log(0.5) + alpha * log1p_rate_expm1(q, -r)
  high = math.log(0.5) - r + alpha * log1p_rate_expm1(q, r)
  out = jax.nn.logsumexp(jnp.stack([low, middle, high]), axis=0)
  # Holder: E_Q[(P/Q)^alpha] >= 1 outside (0, 1) and <= 1 inside.
  return jnp.where((alpha > 0) & (alpha < 1), jnp.minimum(out, 0.0), jnp.maximum(out, 0.0))
