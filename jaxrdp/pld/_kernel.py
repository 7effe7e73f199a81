"""One configuration end to end: plan, discretize both directions, compose, read."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from . import _compose, _discretize, _grid, _read

__all__ = ["config_epsilon", "config_delta", "batch_plan_points", "run_batch"]

# Multiples of the tilt at which the discrete MGF is evaluated for the tail bounds.
_NU = np.array([0.0, 0.6, 1.0, 1.2, 1.6])
_I_ONE = 2
# Multiples of the exponent that sized the window's top (see _grid.plan).
_NU_HI = np.array([1.0])
# Hoeffding failure probability, relative to delta (lower bound only).
_ETA = 1e-3


def _curves(q, sigma, steps, target, mode, n, n1):
  pl = _grid.plan(q, sigma, steps, target, mode)
  pl = jax.tree_util.tree_map(jax.lax.stop_gradient, pl)
  d = jax.lax.stop_gradient(_grid.spacing(pl, n, n1))
  lam = pl.lam
  e = pl.a[..., None] + d * jnp.arange(n1, dtype=q.dtype)  # (2, P, n1)
  log_delta = jnp.stack(
    [
      _discretize.log_delta_curve(e[0], q[:, None], sigma[:, None], "remove"),
      _discretize.log_delta_curve(e[1], q[:, None], sigma[:, None], "add"),
    ]
  )
  p, p_inf = _discretize.connect_the_dots(log_delta, d)
  pos_p = p > 0
  lp = jnp.where(pos_p, jnp.log(jnp.where(pos_p, p, 1.0)), -jnp.inf)  # safe for jax.grad
  nu = jnp.concatenate([lam * jnp.asarray(_NU), pl.nu_hi * jnp.asarray(_NU_HI)])
  log_m = jax.nn.logsumexp(lp[..., None, :] + nu[:, None] * e[..., None, :], axis=-1)  # (2,P,F)
  kk = jnp.sum(steps[:, None] * log_m, axis=-2)  # (2, F)
  x = jnp.exp(lp + lam * e - log_m[..., _I_ONE][..., None])
  y, err_l2 = _compose.compose(x, steps, n)  # (2, n), (2,)
  origin = jnp.sum(steps * pl.a, axis=-1)  # (2,)
  k0 = jnp.floor((pl.lo - origin) / d)
  lo = origin + k0 * d
  idx = jnp.mod(k0[:, None] + jnp.arange(n, dtype=q.dtype), n).astype(jnp.int32)
  w = jnp.take_along_axis(y, idx, axis=-1)
  # Read up to hi; (1 + lam) (hi - lo) <= 650 keeps the scaled sums finite.
  hi = jnp.minimum(lo + (n - 1) * d, lo + 650.0 / (1.0 + lam))
  s_all = lo[:, None] + d * jnp.arange(n, dtype=q.dtype)
  w = jnp.where(s_all <= hi[:, None], w, 0.0)
  pos = nu > 0
  log_tail = jnp.min(jnp.where(pos, kk - nu * hi[:, None], jnp.inf), axis=-1)
  inf_mass = -jnp.expm1(jnp.sum(steps * jnp.log1p(-jnp.minimum(p_inf, 1.0)), axis=-1))
  tail = jnp.exp(log_tail) + inf_mass
  k1 = kk[:, _I_ONE]
  low_nu = nu < lam
  high_nu = nu > lam
  tau = jnp.exp(
    jnp.min(jnp.where(low_nu, kk - k1[:, None] + (lam - nu) * lo[:, None], jnp.inf), axis=-1)
  ) + jnp.exp(
    jnp.min(jnp.where(high_nu, kk - k1[:, None] - (nu - lam) * hi[:, None], jnp.inf), axis=-1)
  )
  curves = jax.vmap(_read.curve, in_axes=(0, 0, None, None, 0, 0, 0, 0, 0))(
    w, lo, d, lam, k1, err_l2, tail, tau, hi
  )
  t_total = jnp.sum(steps)
  # Hoeffding shift of the coupling between the exact and the connect-the-dots losses.
  return curves, d, t_total


def _shift(d, t_total, eta):
  mean = t_total * d * d / 8.0 * (1.0 + d)
  return mean + d * jnp.sqrt(t_total * jnp.log(1.0 / eta) / 2.0)


def config_epsilon(q, sigma, steps, delta, *, n, n1):
  """``(epsilon, epsilon_lower, ok)`` of one configuration (``P`` phases)."""
  curves, d, t_total = _curves(q, sigma, steps, delta, "epsilon", n, n1)
  up, ok = jax.vmap(_read.epsilon_upper, in_axes=(0, None))(curves, delta)
  eta = _ETA * delta
  # failure events: Hoeffding (eta) and the support cuts (<= 2e-12 delta).
  low = jax.vmap(_read.epsilon_lower, in_axes=(0, None))(curves, delta + eta * (1.0 + 1e-8))
  low = low - _shift(d, t_total, eta)
  eps = jnp.maximum(jnp.max(up), 0.0)
  eps_low = jnp.clip(jnp.max(low), 0.0, eps)
  return eps, eps_low, jnp.all(ok | (up <= 0))


def config_delta(q, sigma, steps, epsilon, *, n, n1):
  """``(delta, delta_lower, ok)`` of one configuration (``P`` phases)."""
  curves, d, t_total = _curves(q, sigma, steps, epsilon, "delta", n, n1)
  up = jax.vmap(_read.delta_upper, in_axes=(0, None))(curves, epsilon)
  delta = jnp.max(up)
  eta = _ETA * jnp.maximum(delta, 1e-300)
  shifted = epsilon + _shift(d, t_total, eta)
  low = jax.vmap(_read.delta_lower, in_axes=(0, None))(curves, shifted) - eta * (1.0 + 1e-8)
  ok = jnp.all(epsilon >= curves["s"][:, 0])
  return delta, jnp.clip(jnp.max(low), 0.0, delta), ok


def _plan_points(q, sigma, steps, target, mode, rtol):
  pl = _grid.plan(q, sigma, steps, target, mode)
  return _grid.required_points(pl, steps, rtol)


@functools.partial(jax.jit, static_argnames=("mode",))
def batch_plan_points(q, sigma, steps, target, rtol, mode):
  """Grid points needed per configuration (``q, sigma, steps``: ``(B, P)``)."""
  return jax.vmap(_plan_points, in_axes=(0, 0, 0, 0, None, None))(
    q, sigma, steps, target, mode, rtol
  )


@functools.partial(jax.jit, static_argnames=("mode", "n", "chunk"))
def run_batch(q, sigma, steps, target, mode, n, chunk):
  """All configurations of a batch (``(B, P)`` phases, ``(B,)`` targets), ``chunk`` at a time."""
  fn = config_epsilon if mode == "epsilon" else config_delta
  one = functools.partial(fn, n=n, n1=n // 2)
  return jax.lax.map(lambda a: one(*a), (q, sigma, steps, target), batch_size=chunk)
