"""The RDP rule of :class:`jaxrdp.events.RandomAllocation` (random k-out-of-t allocation).

``ceil(T / t)`` epochs of :func:`jaxrdp.mechanisms.random_allocation_rdp` at the
event's effective noise multiplier (Gaussians composed on the batch are one
Gaussian at ``(sum_i 1 / sigma_i^2)^(-1/2)``, as for Poisson sampling), with
t = ``selected / q`` (an integer up to the rounding of q's dtype: float32 under
JAX's default x64-off; the smallest such integer where several are that close). q = 0,
zero steps or sigma = inf spend nothing; a q whose t is not an integer (traced) gives
NaN.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._core import precision as _precision
from ..events._allocation_events import RandomAllocation, integer_tolerance, steps_per_epoch
from ..events._events import Gaussian
from ..mechanisms._random_allocation import epoch_rdp_f64
from ._event_curves import effective_sigma_f64, gaussian_terms, register_rdp_rule

__all__ = []


def _sigma(event):
  if isinstance(event.inner, Gaussian):
    return _precision.as_float64(event.inner.sigma)
  terms = gaussian_terms(event.inner)
  if terms is None:
    raise NotImplementedError(
      "the RDP accountant has no rule for RandomAllocation("
      f"{type(event.inner).__name__}) events: it accounts random allocation of Gaussian "
      "mechanisms (a Gaussian, or Gaussians under Composed/SelfComposed) only"
    )
  return effective_sigma_f64(terms)


@register_rdp_rule(RandomAllocation)
def _random_allocation(event, orders, orders_static):
  # The integrality test of t = k / q allows the rounding of q's own dtype (a float32 q
  # under JAX's default x64-off, traced or not).
  tolerance = integer_tolerance(getattr(event.q, "dtype", None) or jnp.result_type(event.q))
  q = _precision.as_float64(event.q)
  steps = _precision.as_float64(event.steps)
  sigma = _sigma(event)
  k = event.selected
  t, integral = steps_per_epoch(q, k, tolerance)
  q, steps, sigma, t, integral = jnp.broadcast_arrays(q, steps, sigma, t, integral)
  spends = (q > 0) & (steps > 0)
  t_safe = jnp.where(spends & jnp.isfinite(t), t, float(k))
  curve = epoch_rdp_f64(sigma, t_safe, orders, selected=k)
  epochs = jnp.ceil(jnp.where(spends, steps, 0.0) / t_safe)[..., None]
  out = jnp.where(spends[..., None], epochs * curve, 0.0)
  bad = jnp.isnan(q) | jnp.isnan(steps) | (steps < 0) | (q < 0) | (q > 1) | ~integral
  return jnp.where(bad[..., None], jnp.nan, out)
