"""Calibration for the batching schemes other than Poisson under add/remove.

``calibrate_noise``, ``calibrate_steps`` and ``calibrate_sampling_rate`` with
``sampling="fixed"`` or ``"shuffle"``, or ``relation="replace_one"``, come here:
the same calibration core (``jaxrdp.calibration._core``) on an evaluator that
computes the scheme's RDP at every order (``jaxrdp.rdp._sampling``) and converts
it as ``dpsgd_epsilon``/``dpsgd_delta`` do for that scheme. The core needs the
value monotone in the parameter; every scheme's RDP is non-increasing in sigma
and non-decreasing in q and T at each order (``jaxrdp.rdp._sampling``, last
paragraph), and the conversions are increasing in the RDP. The shuffle curve is
a staircase in q and T (ceil(T q) epochs); the core's answers stay conservative
on staircases (it answers with the end of its bracket that meets the budget).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..rdp._sampling import count_f64, per_step_rdp_f64, scheme_rdp_f64
from ._core import SAFETY, Evaluator, Known, calibrate

__all__ = ["noise_jit", "rate_jit", "steps_jit"]


def _parts():
  # Imported late: _calibration imports this module.
  from . import _calibration as c
  return c


def _evaluator(budget, rdp_of, given, all_orders, increasing, domain, start=None):
  c = _parts()

  def value(p, live):
    del live
    return c._rdp_value(budget, rdp_of(p), all_orders, given)

  return Evaluator(value, increasing, domain, start)


def _noise_impl(target, given, q, steps, all_orders, *, orders_static, budget, sampling,
                relation):
  c = _parts()
  valid = budget.valid(target, given) & (q >= 0) & (q <= 1) & (steps >= 0)
  floor, floor_order = c._floor_value(budget, given, all_orders)
  reachable = floor <= target * (1.0 - SAFETY)
  trivial = valid & (count_f64(sampling, q, steps) * q == 0)
  active = valid & ~trivial & reachable
  q_s = jnp.where(active, q, 0.5)
  t_s = jnp.where(active, steps, 1.0)
  g_s = jnp.where(active, given, 0.5)
  sigma0 = jnp.clip(jnp.sqrt(t_s / c._guess_rho(budget, target, given)), 0.3, 1e5)
  ev = _evaluator(
      budget, lambda s: scheme_rdp_f64(sampling, relation, q_s, s, t_s, all_orders, orders_static),
      g_s, all_orders, False, c._SIGMA_DOMAIN, sigma0)
  known = Known(trivial & reachable, jnp.zeros_like(q), floor, floor_order)
  return c.NoiseCalibration(*calibrate(ev, budget, target, given, active, known))


def _rate_impl(target, given, sigma, steps, all_orders, *, orders_static, budget, sampling,
               relation):
  c = _parts()
  valid = budget.valid(target, given) & (sigma >= 0) & (steps >= 0)
  floor, floor_order = c._floor_value(budget, given, all_orders)
  reachable = floor <= target * (1.0 - SAFETY)
  no_steps = valid & (steps == 0)
  active = valid & ~no_steps & reachable & (sigma > 0)
  s_s = jnp.where(active, sigma, 1.0)
  t_s = jnp.where(active, steps, 1.0)
  g_s = jnp.where(active, given, 0.5)
  ev = _evaluator(
      budget, lambda q: scheme_rdp_f64(sampling, relation, q, s_s, t_s, all_orders, orders_static),
      g_s, all_orders, True, c._Q_DOMAIN)
  known = Known(no_steps & reachable, jnp.ones_like(sigma), floor, floor_order)
  return c.SamplingRateCalibration(*calibrate(ev, budget, target, given, active, known))


def _steps_impl(target, given, q, sigma, all_orders, *, orders_static, budget, sampling,
                relation):
  c = _parts()
  valid = budget.valid(target, given) & (q >= 0) & (q <= 1) & (sigma >= 0)
  q_s = jnp.where(valid, q, 0.5)
  s_s = jnp.where(valid, sigma, 1.0)
  g_s = jnp.where(valid, given, 0.5)
  # One curve per cell (per step, or per epoch for shuffling), composed count(T) times.
  rdp1 = per_step_rdp_f64(sampling, relation, q_s, s_s, all_orders, orders_static)
  floor, floor_order = c._floor_value(budget, g_s, all_orders)
  reachable = floor <= target * (1.0 - SAFETY)
  unlimited = valid & reachable & (jnp.all(rdp1 == 0, axis=-1) | (q_s == 0))

  def value(t, live):
    del live
    n = count_f64(sampling, q_s, t)[..., None]
    total = jnp.where(n == 0, 0.0, n * rdp1)
    return c._rdp_value(budget, total, all_orders, g_s)

  ev = Evaluator(value, True, c._STEPS_DOMAIN)
  known = Known(unlimited, jnp.full_like(q, jnp.inf), floor, floor_order)
  return c.StepsCalibration(*calibrate(ev, budget, target, given, valid & reachable, known))


_STATIC = ("orders_static", "budget", "sampling", "relation")
noise_jit = jax.jit(_noise_impl, static_argnames=_STATIC)
rate_jit = jax.jit(_rate_impl, static_argnames=_STATIC)
steps_jit = jax.jit(_steps_impl, static_argnames=_STATIC)
