"""The Poisson calibrations as traced programs: the Sampled Gaussian's families and the core.

Each calibration is one call of the generic core (``jaxrdp.calibration._core``) on a
family of evaluations of the Renyi-DP accountant of the Sampled Gaussian Mechanism,
with the integer-order proxy and the order search's floors as accelerators (see
``jaxrdp.calibration._calibration``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._core.validation import StaticArray
from ..mechanisms._sgm import _rdp_f64
from ..rdp._dpsgd import _dpsgd_delta_f64, _dpsgd_rdp_f64, _search_f64
from ..rdp._order_search import table_size as search_table_size
from ._core import Budget, Evaluator, calibrate
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

__all__ = ["JITS", "noise_impl", "rate_impl", "steps_impl"]


def _proxy_orders(all_orders: np.ndarray) -> np.ndarray:
  """The orders of the grid whose RDP the cheap integer series gives (2 to 64)."""
  ints = all_orders[(all_orders == np.round(all_orders)) & (all_orders >= 2) & (all_orders <= 64)]
  return np.unique(ints)


def _sgm_evaluator(
  budget, q_of, sigma_of, steps, given, all_orders, orders_static, increasing, domain, start
) -> Evaluator:
  """The SGM accountant as a family in one parameter p: q_of(p), sigma_of(p) per cell.

  Epsilon uses the order search (the exact minimum over the orders, which evaluates the
  SGM kernel at far fewer orders than all of them), with the floors of the module
  docstring as its memo; delta evaluates every order. Both get the integer-order proxy.
  """

  def value(p, live, hint=None):
    q, sigma = q_of(p), sigma_of(p)
    if budget is Budget.DELTA:
      res = _dpsgd_delta_f64(q, sigma, steps, given, all_orders, orders_static, "improved")
      return res.delta, res.order
    # Beyond the best acceptable point, log A at every order is at least what that
    # point's search computed (module docstring, item 2); elsewhere no floor.
    floor = jnp.where(hint.beyond[..., None], hint.memo, 0.0)
    res = _search_f64(q, sigma, steps, given, orders_static, "improved", live, floor)
    return res.epsilon, res.order, res.table

  sub = _proxy_orders(orders_static.array)

  def proxy(p):
    # Never below the accountant over all orders (a minimum over a subset), and one
    # shared finite series per cell, no quadrature.
    rdp = _dpsgd_rdp_f64(q_of(p), sigma_of(p), steps, jnp.asarray(sub), StaticArray(sub))
    return rdp_value(budget, rdp, jnp.asarray(sub), given)[0]

  memo_like = None
  if budget is Budget.EPSILON:
    memo_like = jax.ShapeDtypeStruct(
      jnp.shape(steps) + (search_table_size(orders_static.array),), jnp.float64
    )
  return Evaluator(value, increasing, domain, start, proxy if sub.size else None, memo_like)


def noise_impl(target, given, q, steps, all_orders, orders_static, budget):
  cells = prepare_cells(budget, target, given, dict(q=q, steps=steps), all_orders)
  q_s, t_s = cells.fixed
  sigma0 = jnp.clip(q_s * jnp.sqrt(t_s / guess_rho(budget, target, given)), 0.3, 1e5)
  ev = _sgm_evaluator(
    budget,
    lambda s: q_s,
    lambda s: s,
    t_s,
    cells.given,
    all_orders,
    orders_static,
    False,
    SIGMA_DOMAIN,
    sigma0,
  )
  known = cells.known(cells.degenerate, 0.0)
  return NoiseCalibration(*calibrate(ev, budget, target, given, cells.active, known))


def rate_impl(target, given, sigma, steps, all_orders, orders_static, budget):
  cells = prepare_cells(budget, target, given, dict(sigma=sigma, steps=steps), all_orders)
  s_s, t_s = cells.fixed
  q0 = jnp.clip(s_s * jnp.sqrt(guess_rho(budget, target, given) / t_s), 1e-8, 1.0)
  ev = _sgm_evaluator(
    budget,
    lambda q: q,
    lambda q: s_s,
    t_s,
    cells.given,
    all_orders,
    orders_static,
    True,
    Q_DOMAIN,
    q0,
  )
  known = cells.known(cells.degenerate, 1.0)
  return SamplingRateCalibration(*calibrate(ev, budget, target, given, cells.active, known))


def steps_impl(target, given, q, sigma, all_orders, orders_static, budget):
  cells = prepare_cells(budget, target, given, dict(q=q, sigma=sigma), all_orders)
  q_s, s_s = cells.fixed
  # T steps compose to T times the per-step RDP (Mironov 2017, Prop. 1): one kernel
  # evaluation per cell, then a search over T with the cheap conversion only.
  rdp1 = _rdp_f64(q_s[..., None], s_s[..., None], all_orders, orders_static)

  def value(t, live):
    del live
    total = jnp.where(t[..., None] == 0, 0.0, t[..., None] * rdp1)
    return rdp_value(budget, total, all_orders, cells.given)

  ev = Evaluator(value, True, STEPS_DOMAIN)
  # Zero RDP (q = 0 or sigma = inf): any number of steps fits.
  unlimited = cells.degenerate | (cells.active & jnp.all(rdp1 == 0, axis=-1))
  known = cells.known(unlimited, jnp.inf)
  return StepsCalibration(*calibrate(ev, budget, target, given, cells.active, known))


_STATIC = ("orders_static", "budget")
_noise_jit = jax.jit(noise_impl, static_argnames=_STATIC)
_rate_jit = jax.jit(rate_impl, static_argnames=_STATIC)
_steps_jit = jax.jit(steps_impl, static_argnames=_STATIC)
JITS = {"noise": _noise_jit, "rate": _rate_jit, "steps": _steps_jit}
