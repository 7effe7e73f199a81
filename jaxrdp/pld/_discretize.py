"""One step of the Sampled Gaussian Mechanism as a dominating PMF on a grid.

Connect-the-dots (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022,
"Connect the Dots: Tighter Discrete Approximations of Privacy Loss
Distributions", arXiv:2207.04380, Sec. 3): on the support
``e_i = a + i d`` (``i = 0..n-1``) the PMF whose hockey-stick curve
``delta(e^eps)`` is the linear interpolation (in ``e^eps``) of the exact convex
curve at the grid points. It dominates the exact privacy-loss distribution
(Thm 3.2 there), so every delta or epsilon read from it, or from its
compositions, is an upper bound. With ``delta_i = delta(e_i)``:

* ``p_0 = 1 - delta_0 + (delta_1 - delta_0) / (e^d - 1)``,
* ``p_i = [(delta_{i+1} - delta_i) - e^d (delta_i - delta_{i-1})] / (e^d - 1)``,
* ``p_{n-1} = (delta_{n-1} - delta_{n-2}) / (e^{-d} - 1)``,
* the mass at ``+inf`` is ``delta_{n-1}``.

Equivalently, every atom ``s`` of the exact PLD in ``[e_i, e_{i+1}]`` is split
onto the two neighbours so that its P-mass and its Q-mass ``E_P[e^{-L}]`` are
kept; mass below ``e_0`` is moved up to ``e_0`` and mass above ``e_{n-1}``
partly to ``+inf``. Rounding can make a computed ``p_i`` slightly negative
(second differences); such values are raised to 0, which only adds mass and
therefore only increases every delta.

The delta curve comes from the closed-form single-step profile
(``jaxrdp.mechanisms._sgm_single_step``, Kalinin 2024, in log space with ``log_ndtr``-type
kernels), both directions: remove ``(P, Q) = (mu, mu0)``, add
``(P, Q) = (mu0, mu)`` with ``mu0 = N(0, sigma^2)``,
``mu = (1 - q) N(0, sigma^2) + q N(1, sigma^2)``.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.special import log_ndtr

__all__ = ["log_delta_curve", "connect_the_dots", "loss_remove", "support"]


def loss_remove(x, q, sigma):
  """Privacy loss of the remove direction at output ``x``: ``log(mu(x) / mu0(x))``."""
  z = (2.0 * x - 1.0) / (2.0 * sigma * sigma)
  # q = 1: the Gaussian's linear loss (log1p(expm1(z)) would round to -inf for z < -37).
  return jnp.where(q >= 1.0, z, jnp.log1p(q * jnp.expm1(z)))


def support(q, sigma, z, direction):
  """Loss interval ``[a, b]`` holding all but ``2 Phi(-z)`` of the P-mass of one step.

  The loss is monotone in the output ``x``: increasing (remove, ``x ~ mu``) or
  decreasing (add, ``L = -loss_remove``, ``x ~ mu0``). ``P(x < -z sigma)`` and
  ``P(x > 1 + z sigma)`` are each at most ``Phi(-z)`` under both ``mu`` and
  ``mu0``, so cutting there loses at most that much mass on each side.
  """
  lo_x = -z * sigma
  hi_x = 1.0 + z * sigma
  if direction == "remove":
    return loss_remove(lo_x, q, sigma), loss_remove(hi_x, q, sigma)
  return -loss_remove(hi_x, q, sigma), -loss_remove(lo_x, q, sigma)


def _log_difference(log_w1, x, log_ratio, h):
  """``log(w1 Phi(x) - w2 Phi(x - h))`` with ``log(w2 / w1) = log_ratio``.

  Written as ``log w1 + log Phi(x) + log(1 - e^{-gap})`` with
  ``gap = log Phi(x) - log Phi(x - h) - log_ratio >= 0``: no subtraction of
  the two (possibly tiny) terms, so the relative error is about
  ``u (|log Phi(x)| + |log_ratio|) / gap``.
  """
  lx = log_ndtr(x)
  gap = lx - log_ndtr(x - h) - log_ratio
  pos = gap > 0
  return jnp.where(pos, log_w1 + lx + jnp.log(-jnp.expm1(-jnp.where(pos, gap, 1.0))), -jnp.inf)


def log_delta_curve(eps, q, sigma, direction):
  """``log delta(eps)`` of one step for any real ``eps`` (``q`` in (0, 1], ``sigma > 0``).

  Remove (Kalinin 2024, eq. (1)): with ``h = e^eps - 1 + q`` and
  ``x = -sigma log(h/q) + 1/(2 sigma)``,
  ``delta = q Phi(x) - h Phi(x - 1/sigma)``; ``delta = 1 - e^eps`` when
  ``h <= 0`` (the region ``mu > e^eps mu0`` is everything). Add: with
  ``c = q - (1 - e^-eps)`` and ``x = sigma log(c/q) + 1/(2 sigma)``,
  ``delta = e^eps [c Phi(x) - q Phi(x - 1/sigma)]``, and 0 when ``c <= 0``.
  Both are ``w1 Phi(x) - w2 Phi(x - h)`` with ``w2 phi(x - h) = w1 phi(x)``
  (the densities cross at the boundary), evaluated by ``_log_difference``.
  """
  inv = 1.0 / sigma
  log_q = jnp.log(q)
  if direction == "remove":
    em1 = jnp.expm1(eps)
    h = em1 + q
    full = h <= 0
    ell = jnp.log1p(jnp.where(full, 0.0, em1 / q))  # log(h / q)
    x = -sigma * ell + 0.5 * inv
    regular = _log_difference(log_q, x, ell, inv)
    return jnp.where(full, jnp.log(-jnp.expm1(jnp.minimum(eps, -1e-300))), regular)
  c = jnp.where(q >= 0.5, jnp.exp(-eps) - (1.0 - q), q + jnp.expm1(-eps))
  positive = c > 0
  c_s = jnp.where(positive, c, q)
  ell = jnp.where(c_s < 0.5 * q, jnp.log(c_s) - log_q, jnp.log1p((c_s - q) / q))  # log(c / q)
  x = sigma * ell + 0.5 * inv
  out = _log_difference(eps + jnp.log(c_s), x, -ell, inv)
  return jnp.where(positive, out, -jnp.inf)


def connect_the_dots(log_delta, d):
  """Connect-the-dots masses from ``log delta`` on an equispaced grid (last axis).

  Args:
    log_delta: ``(..., n)`` log of the exact delta curve at ``e_i = a + i d``.
    d: grid spacing, broadcastable to ``(...)``.

  Returns:
    ``(p, p_inf)``: finite masses ``(..., n)`` (non-negative) and the mass at
    ``+inf`` ``(...)``.
  """
  delta = jnp.exp(log_delta)
  d = jnp.asarray(d)[..., None]
  em1 = jnp.expm1(d)  # e^d - 1
  step = jnp.diff(delta, axis=-1)  # delta_{i+1} - delta_i, (..., n-1), <= 0
  first = 1.0 - delta[..., :1] + step[..., :1] / em1
  middle = (step[..., 1:] - (1.0 + em1) * step[..., :-1]) / em1
  last = step[..., -1:] / jnp.expm1(-d)
  p = jnp.concatenate([first, middle, last], axis=-1)
  return jnp.maximum(p, 0.0), delta[..., -1]
