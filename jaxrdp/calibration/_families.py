"""The Renyi-DP accountant as families of evaluations in one parameter, and the cell prologue.

What every calibration shares (``jaxrdp.calibration._calibration`` for Poisson
sampling, ``jaxrdp.calibration._schemes`` for the other batching schemes): the value
of the accountant over the orders (:func:`rdp_value`), its floor at zero RDP, the
zCDP first guess, and :func:`prepare_cells` (ranges, floor, degenerate cells, stand-ins).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._core.numerics import raise_subnormal
from .._core.validation import COUNT, NOISE_MULTIPLIER, PROBABILITY
from ..rdp._conversions import delta_from_rdp_f64, epsilon_from_rdp_f64
from ._core import SAFETY, Budget, Domain, Known

__all__ = [
  "SIGMA_DOMAIN",
  "Q_DOMAIN",
  "STEPS_DOMAIN",
  "NoiseCalibration",
  "StepsCalibration",
  "SamplingRateCalibration",
  "rdp_value",
  "floor_value",
  "zcdp_rho",
  "guess_rho",
  "Cells",
  "FIXED_RANGE",
  "STAND_IN",
  "prepare_cells",
]

# --------------------------------------------------------------------------------------
# The RDP accountant as families of evaluations (traced).


def rdp_value(budget, rdp_total, orders, given):
  """(value, order) of the accountant over ``orders``, as dpsgd_epsilon/delta do."""
  if budget is Budget.DELTA:
    res = delta_from_rdp_f64(rdp_total, orders, given, "improved")
    return res.delta, res.order
  res = epsilon_from_rdp_f64(rdp_total, orders, given, "improved")
  return res.epsilon, res.order


def floor_value(budget, given, all_orders):
  """The accountant at zero RDP: what infinite noise (or q = 0, or no step) achieves."""
  zeros = jnp.zeros(given.shape + all_orders.shape)
  return rdp_value(budget, zeros, all_orders, given)


def zcdp_rho(epsilon, delta):
  # Invert epsilon = rho + 2 sqrt(rho L), L = log(1/delta): sqrt(rho) =
  # sqrt(L + epsilon) - sqrt(L), written without cancellation. A first guess only.
  log_inv_delta = -jnp.log(delta)
  return (epsilon / (jnp.sqrt(log_inv_delta + epsilon) + jnp.sqrt(log_inv_delta))) ** 2


def guess_rho(budget, target, given):
  eps, dlt = budget.pair(target, given)
  eps = jnp.where(jnp.isfinite(eps) & (eps > 0), eps, 1.0)
  dlt = jnp.where((dlt > 0) & (dlt < 1), dlt, 1e-5)
  return zcdp_rho(eps, dlt)


# --------------------------------------------------------------------------------------
# The cells of a calibration: degenerate cells in closed form, the rest for the core.


class Cells(NamedTuple):
  """The cells of a calibration before its search (arrays of the cells' shape).

  Attributes:
    valid: every argument in range.
    reachable: the budget is above the floor that no privacy loss at all reaches.
    active: the cells to search: valid, reachable, not degenerate, and not hopeless
      (sigma = 0).
    degenerate: the cells that lose no privacy whatever the searched parameter
      (q = 0 or T = 0); the valid and reachable ones are answered in closed form.
    fixed: the two fixed parameters, in argument order, subnormal q and T rounded
      up to the smallest normal float (XLA would read them as 0), and a harmless
      stand-in where the cell is not searched.
    given: the given half of the (epsilon, delta) pair, with the same stand-in.
    floor, floor_order: the accountant at zero RDP (:func:`floor_value`).
  """

  valid: jax.Array
  reachable: jax.Array
  active: jax.Array
  degenerate: jax.Array
  fixed: tuple
  given: jax.Array
  floor: jax.Array
  floor_order: jax.Array

  def known(self, degenerate, param) -> Known:
    """The closed-form answer ``param`` at the valid, reachable ``degenerate`` cells."""
    mask = degenerate & self.valid & self.reachable
    return Known(mask, jnp.full(mask.shape, param), self.floor, self.floor_order)


# The fixed parameters of the calibrations: their valid range, stated once (the eager
# check of the public functions and the traced mask of ``prepare_cells``), and the stand-in
# value where a cell is not searched.
FIXED_RANGE = {"q": PROBABILITY, "steps": COUNT, "sigma": NOISE_MULTIPLIER}
STAND_IN = {"q": 0.5, "steps": 1.0, "sigma": 1.0}


def prepare_cells(budget, target, given, fixed: dict, all_orders) -> Cells:
  """The prologue every calibration shares, the SGM's and the other schemes' alike.

  ``fixed`` maps the two fixed parameters' names (``q``, ``steps``, ``sigma``), in
  argument order, to their values. q = 0 or T = 0 spend nothing (degenerate); sigma =
  0 with q > 0 and T > 0 reveals the data (infinite RDP at every order: never
  searched, so infeasible).
  """
  fixed = {k: raise_subnormal(v) if k != "sigma" else v for k, v in fixed.items()}
  valid = budget.valid(target, given)
  for name, x in fixed.items():
    valid &= FIXED_RANGE[name].holds(x)
  floor, floor_order = floor_value(budget, given, all_orders)
  reachable = floor <= target * (1.0 - SAFETY)
  degenerate = jnp.zeros(valid.shape, bool)
  for name in ("q", "steps"):
    if name in fixed:
      degenerate |= fixed[name] == 0
  active = valid & reachable & ~degenerate
  if "sigma" in fixed:
    active &= fixed["sigma"] > 0
  sanitized = tuple(jnp.where(active, x, STAND_IN[k]) for k, x in fixed.items())
  return Cells(
    valid,
    reachable,
    active,
    degenerate,
    sanitized,
    jnp.where(active, given, 0.5),
    floor,
    floor_order,
  )


# Search domains: sigma in [1e-3, 1e6]; q in [1e-10, 1]; steps in [1, 2**52] (integers
# are exact in float64 up to 2**52).
SIGMA_DOMAIN = Domain(1e-3, 1e6, "log")
Q_DOMAIN = Domain(1e-10, 1.0, "log")
STEPS_DOMAIN = Domain(1.0, float(2**52), "integer")


class NoiseCalibration(NamedTuple):
  """Result of :func:`calibrate_noise` (a pytree).

  Attributes:
    sigma: smallest noise multiplier meeting the budget; NaN where infeasible.
    epsilon: epsilon of the guarantee at ``sigma`` (achieved under an epsilon
      budget, given under a delta budget).
    delta: delta of the guarantee at ``sigma`` (given, respectively achieved).
    order: Renyi order attaining the bound at ``sigma``.
    feasible: boolean mask, False where no sigma meets the budget.
  """

  sigma: jax.Array
  epsilon: jax.Array
  delta: jax.Array
  order: jax.Array
  feasible: jax.Array


class StepsCalibration(NamedTuple):
  """Result of :func:`calibrate_steps` (a pytree).

  Attributes:
    steps: largest integer number of steps meeting the budget (a float64 holding
      an integer); inf where any number fits; NaN where not even one step does.
    epsilon: epsilon of the guarantee after ``steps`` steps.
    delta: delta of the guarantee after ``steps`` steps.
    order: Renyi order attaining the bound.
    feasible: boolean mask, False where not even one step meets the budget.
  """

  steps: jax.Array
  epsilon: jax.Array
  delta: jax.Array
  order: jax.Array
  feasible: jax.Array


class SamplingRateCalibration(NamedTuple):
  """Result of :func:`calibrate_sampling_rate` (a pytree).

  Attributes:
    q: largest sampling rate in (0, 1] meeting the budget; NaN where infeasible.
    epsilon: epsilon of the guarantee at ``q``.
    delta: delta of the guarantee at ``q``.
    order: Renyi order attaining the bound at ``q``.
    feasible: boolean mask, False where no q > 0 meets the budget.
  """

  q: jax.Array
  epsilon: jax.Array
  delta: jax.Array
  order: jax.Array
  feasible: jax.Array
