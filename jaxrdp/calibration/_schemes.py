"""Calibration for the batching schemes other than Poisson under add/remove.

``calibrate_noise``, ``calibrate_steps`` and ``calibrate_sampling_rate`` with
``sampling="fixed"`` or ``"shuffle"``, or ``relation="replace_one"``, come here
through the same entry point as the default scheme (``_calibration._solve``) and
the same calibration core (``jaxrdp.calibration._core``):

* Poisson sampling under replace-one is the Sampled Gaussian Mechanism at sigma / 2
  (``jaxrdp.rdp._sampling``), so it runs the SGM's own calibrations (order search,
  proxy and floors included) at sigma / 2, and a calibrated sigma is doubled (both
  exact in floating point);
* fixed-size and shuffled batches run the core on an evaluator that computes the
  scheme's RDP at every order (``jaxrdp.rdp._sampling``) and converts it as
  ``dpsgd_epsilon``/``dpsgd_delta`` do for that scheme.

The scheme is read from the run's event (``jaxrdp.rdp._sampling.dpsgd_scheme``), never
from the ``sampling`` and ``relation`` strings, which the public functions resolve.

The core needs the value monotone in the parameter; every scheme's RDP is
non-increasing in sigma and non-decreasing in q and T at each order
(``jaxrdp.rdp._sampling``, its Monotonicity paragraph), and the conversions are
increasing in the RDP. The shuffle curve is a staircase in q and T (ceil(T q)
epochs); the core's answers stay conservative on staircases (it answers with the end
of its bracket that meets the budget). Every calibration starts with the SGM's own
prologue (``_families.prepare_cells``: ranges, floor, degenerate cells, stand-ins).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..mechanisms._sampled_without_replacement import effective_noise_multiplier
from ._core import Evaluator, calibrate
from ._families import (
  Q_DOMAIN,
  SIGMA_DOMAIN,
  STEPS_DOMAIN,
  NoiseCalibration,
  SamplingRateCalibration,
  StepsCalibration,
  guess_rho,
  prepare_cells,
  rdp_value,
)
from ._sgm_calibration import noise_impl, rate_impl, steps_impl

__all__ = ["JITS"]


def _scheme_evaluator(budget, rdp_of, given, all_orders, increasing, domain, start=None):
  """The scheme's accountant as a family in one parameter p: the RDP at every order."""

  def value(p, live):
    del live
    return rdp_value(budget, rdp_of(p), all_orders, given)

  return Evaluator(value, increasing, domain, start)


def _rho_per_unit(scheme, q):
  """zCDP of one composed curve per unit of 1 / s^2 at q, roughly: a first guess only.

  Poisson and fixed-size batches: about q^2 (amplification by sampling); shuffling
  composes plain Gaussians (rho = 1 / (2 s^2)). The relation scales s (halves it under
  replace-one)."""
  base = q * q if scheme.amplified else 0.5
  return base / (scheme.noise_scale * scheme.noise_scale)


def _noise_impl(target, given, q, steps, all_orders, orders_static, budget, scheme):
  if scheme.sgm:  # replace-one: the SGM at sigma / 2
    out = noise_impl(target, given, q, steps, all_orders, orders_static, budget)
    return out._replace(sigma=out.sigma / scheme.noise_scale)
  cells = prepare_cells(budget, target, given, dict(q=q, steps=steps), all_orders)
  q_s, t_s = cells.fixed
  count = scheme.count_f64(q_s, t_s)
  rho = guess_rho(budget, target, given)
  sigma0 = jnp.clip(jnp.sqrt(count * _rho_per_unit(scheme, q_s) / rho), 0.3, 1e5)
  ev = _scheme_evaluator(
    budget,
    lambda s: scheme.rdp_f64(q_s, s, t_s, all_orders, orders_static),
    cells.given,
    all_orders,
    False,
    SIGMA_DOMAIN,
    sigma0,
  )
  known = cells.known(cells.degenerate, 0.0)
  return NoiseCalibration(*calibrate(ev, budget, target, given, cells.active, known))


def _rate_impl(target, given, sigma, steps, all_orders, orders_static, budget, scheme):
  if scheme.sgm:  # replace-one: the SGM at sigma / 2
    half = effective_noise_multiplier(sigma, scheme.relation)
    return rate_impl(target, given, half, steps, all_orders, orders_static, budget)
  cells = prepare_cells(budget, target, given, dict(sigma=sigma, steps=steps), all_orders)
  s_s, t_s = cells.fixed
  q0 = None
  if not scheme.staircase_in_q:  # a staircase in q (shuffling): the default start
    s_eff = effective_noise_multiplier(s_s, scheme.relation)
    q0 = jnp.clip(s_eff * jnp.sqrt(guess_rho(budget, target, given) / t_s), 1e-8, 1.0)
  ev = _scheme_evaluator(
    budget,
    lambda q: scheme.rdp_f64(q, s_s, t_s, all_orders, orders_static),
    cells.given,
    all_orders,
    True,
    Q_DOMAIN,
    q0,
  )
  known = cells.known(cells.degenerate, 1.0)
  return SamplingRateCalibration(*calibrate(ev, budget, target, given, cells.active, known))


def _steps_impl(target, given, q, sigma, all_orders, orders_static, budget, scheme):
  if scheme.sgm:  # replace-one: the SGM at sigma / 2
    half = effective_noise_multiplier(sigma, scheme.relation)
    return steps_impl(target, given, q, half, all_orders, orders_static, budget)
  cells = prepare_cells(budget, target, given, dict(q=q, sigma=sigma), all_orders)
  q_s, s_s = cells.fixed
  # One curve per cell (per step, or per epoch for shuffling), composed count(T) times.
  rdp1 = scheme.per_step_rdp_f64(q_s, s_s, all_orders, orders_static)

  def value(t, live):
    del live
    n = scheme.count_f64(q_s, t)[..., None]
    total = jnp.where(n == 0, 0.0, n * rdp1)
    return rdp_value(budget, total, all_orders, cells.given)

  ev = Evaluator(value, True, STEPS_DOMAIN)
  # Zero RDP (q = 0 or sigma = inf): any number of steps fits.
  unlimited = cells.degenerate | (cells.active & jnp.all(rdp1 == 0, axis=-1))
  known = cells.known(unlimited, jnp.inf)
  return StepsCalibration(*calibrate(ev, budget, target, given, cells.active, known))


_STATIC = ("orders_static", "budget", "scheme")

#: The jitted calibrations by kind, called as ``_calibration._call`` calls the SGM's,
#: plus the keyword ``scheme`` (a ``jaxrdp.rdp._sampling.DpsgdScheme`` read from the
#: run's event, not the default one).
JITS = {
  "noise": jax.jit(_noise_impl, static_argnames=_STATIC),
  "rate": jax.jit(_rate_impl, static_argnames=_STATIC),
  "steps": jax.jit(_steps_impl, static_argnames=_STATIC),
}
