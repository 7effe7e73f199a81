"""From an RDP curve over a set of orders to (epsilon, delta)-DP.

Two bounds, both minimised over the given orders:

* ``"improved"`` (default): Canonne, Kamath, Steinke 2020, "The Discrete
  Gaussian for Differential Privacy", arXiv:2004.00010, Prop. 12; equal to
  Balle et al. 2020, "Hypothesis Testing Interpretations and Renyi Differential
  Privacy", arXiv:1905.09982, Thm 21:

      eps(alpha) = r(alpha) + log1p(-1/alpha) - (log delta + log alpha) / (alpha - 1)
      log delta(alpha) = (alpha - 1) (r(alpha) - eps + log1p(-1/alpha)) - log alpha

* ``"classic"``: Mironov 2017, "Renyi Differential Privacy", arXiv:1702.07476,
  Prop. 3: eps(alpha) = r(alpha) + log(1/delta) / (alpha - 1).

epsilon is clamped at 0 (a negative value is a valid but vacuous bound), and is 0
at every order where delta >= sqrt(1 - exp(-r(alpha))), the bound below. delta
is additionally bounded by sqrt(1 - exp(-r(alpha))) for every alpha, because
r(alpha) >= KL and TV <= sqrt(1 - exp(-KL)) (Bretagnolle-Huber), and by 1.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.numerics import argmin_last, log_subnormal_safe, positive_subnormal
from .._core.validation import DELTA, FINITE_EPSILON, ORDER, RDP

__all__ = ["EpsilonResult", "DeltaResult", "rdp_to_epsilon", "rdp_to_delta"]

_METHODS = ("improved", "classic")


class EpsilonResult(NamedTuple):
  """epsilon and the Renyi order that attains it (both arrays of one shape)."""

  epsilon: jax.Array
  order: jax.Array


class DeltaResult(NamedTuple):
  """delta and the Renyi order that attains it (both arrays of one shape)."""

  delta: jax.Array
  order: jax.Array


def _check_method(method):
  if method not in _METHODS:
    raise ValueError(f"method must be one of {_METHODS}, got {method!r}")


def _check_curve(rdp, orders):
  RDP.check("rdp", rdp)
  ORDER.check("orders", orders)
  if np.ndim(orders) != 1:
    raise ValueError(f"orders must be a 1-D array, got shape {np.shape(orders)}")
  if np.shape(orders)[0] == 0:
    raise ValueError("orders must hold at least one order in (1, inf], got an empty array")
  if np.ndim(rdp) < 1 or np.shape(rdp)[-1] != np.shape(orders)[0]:
    raise ValueError(
      f"rdp must have the orders on its last axis: rdp shape {np.shape(rdp)}, "
      f"orders shape {np.shape(orders)}"
    )


def _epsilon_per_order(rdp, orders, delta, method, tv=True):
  """eps(alpha) for every order; rdp [..., n], orders [n], delta [...].

  ``tv``: apply the total-variation rule (0 where delta >= sqrt(1 - exp(-r))):
  everywhere (True), nowhere (False), or where a boolean mask broadcastable to
  ``rdp`` is True (the order search applies it at the smallest order only)."""
  log_delta = log_subnormal_safe(delta)[..., None]  # XLA would read a subnormal delta as 0
  finite_order = jnp.isfinite(orders)
  a = jnp.where(finite_order, orders, 2.0)
  if method == "classic":
    eps = rdp - log_delta / (a - 1.0)
  else:
    eps = rdp + jnp.log1p(-1.0 / a) - (log_delta + jnp.log(a)) / (a - 1.0)
  # alpha = inf: both bounds tend to r(inf).
  eps = jnp.where(finite_order, eps, rdp)
  if tv is False:
    return eps
  # (0, delta)-DP where delta >= sqrt(1 - exp(-r)) >= TV (Bretagnolle-Huber with
  # KL <= r(alpha)), the bound the delta conversion applies: that is
  # r <= -log(1 - delta^2), one threshold per delta (1e-14 below it for rounding;
  # delta < 1.5e-154, whose square underflows, gets threshold 0).
  applies = rdp <= tv_threshold(delta)[..., None]
  if tv is not True:
    applies = applies & tv
  return jnp.where(applies, 0.0, eps)


def tv_threshold(delta):
  """The largest RDP r with sqrt(1 - exp(-r)) <= delta, -log(1 - delta^2), rounded down."""
  return -jnp.log1p(-delta * delta) * (1.0 - 1e-14)


def _log_delta_per_order(rdp, orders, epsilon, method):
  eps = epsilon[..., None]
  finite_order = jnp.isfinite(orders)
  a = jnp.where(finite_order, orders, 2.0)
  if method == "classic":
    log_delta = (a - 1.0) * (rdp - eps)
  else:
    log_delta = (a - 1.0) * (rdp - eps + jnp.log1p(-1.0 / a)) - jnp.log(a)
  # alpha = inf gives delta = 0 if r(inf) < eps and no bound otherwise.
  log_delta = jnp.where(finite_order, log_delta, jnp.where(rdp < eps, -jnp.inf, 0.0))
  # delta <= sqrt(1 - exp(-r)) = TV bound from KL <= r(alpha).
  r_safe = jnp.where(rdp > 0, rdp, 1.0)
  log_tv = jnp.where(rdp > 0, 0.5 * jnp.log(-jnp.expm1(-r_safe)), -jnp.inf)
  return jnp.minimum(jnp.minimum(log_delta, log_tv), 0.0)


def _broadcast_curve(rdp, orders, value):
  """float64 ``(rdp, orders, value)``, ``rdp`` [..., n] and ``value`` [...] broadcast
  to one batch shape."""
  rdp, orders, value = (_precision.as_float64(x) for x in (rdp, orders, value))
  batch = jnp.broadcast_shapes(rdp.shape[:-1], value.shape)
  return jnp.broadcast_to(rdp, batch + rdp.shape[-1:]), orders, jnp.broadcast_to(value, batch)


def epsilon_from_rdp_f64(rdp, orders, delta, method="improved"):
  """Traceable core of :func:`rdp_to_epsilon` (float64 inputs, no validation)."""
  rdp, orders, delta = _broadcast_curve(rdp, orders, delta)
  eps_all = _epsilon_per_order(rdp, orders, delta, method)
  idx = argmin_last(eps_all)
  eps = jnp.maximum(jnp.min(eps_all, axis=-1), 0.0)
  # Zero RDP at every order means identical output distributions: (0, 0)-DP,
  # which no finite order's conversion reports exactly.
  eps = jnp.where(jnp.all(rdp == 0, axis=-1), 0.0, eps)
  # A subnormal delta is a valid delta (XLA reads it as 0 in the comparison).
  eps = jnp.where(~(DELTA.holds(delta) | positive_subnormal(delta)), jnp.nan, eps)
  return EpsilonResult(eps, orders[idx])


def delta_from_rdp_f64(rdp, orders, epsilon, method="improved"):
  """Traceable core of :func:`rdp_to_delta` (float64 inputs, no validation)."""
  rdp, orders, epsilon = _broadcast_curve(rdp, orders, epsilon)
  log_delta_all = _log_delta_per_order(rdp, orders, epsilon, method)
  idx = argmin_last(log_delta_all)
  delta = jnp.exp(jnp.min(log_delta_all, axis=-1))
  delta = jnp.where(jnp.isnan(epsilon) | (epsilon < 0), jnp.nan, delta)
  return DeltaResult(delta, orders[idx])


_epsilon_jit = jax.jit(epsilon_from_rdp_f64, static_argnames=("method",))
_delta_jit = jax.jit(delta_from_rdp_f64, static_argnames=("method",))


def _convert(jitted, rdp, orders, value, name, interval, method):
  """A public conversion: validates, then runs ``jitted`` in float64 for the caller."""
  _check_method(method)
  _check_curve(rdp, orders)
  interval.check(name, value)
  with _precision.Float64Scope() as scope:
    out = jitted(rdp, orders, value, method=method)
  return scope.finalize(out)


def rdp_to_epsilon(
  rdp: ArrayLike, orders: ArrayLike, delta: ArrayLike, *, method: str = "improved"
) -> EpsilonResult:
  """Converts an RDP curve to (epsilon, delta)-DP: the smallest epsilon over orders.

  Args:
    rdp: RDP values, shape [..., n]; the last axis matches ``orders``.
    orders: Renyi orders, shape [n], each in (1, inf].
    delta: target delta in (0, 1); broadcasts against ``rdp[..., 0]``.
    method: ``"improved"`` (default; Canonne-Kamath-Steinke 2020 Prop. 12,
      arXiv:2004.00010) or ``"classic"`` (Mironov 2017 Prop. 3, arXiv:1702.07476).

  Returns:
    EpsilonResult(epsilon, order), arrays of the broadcast batch shape.
    epsilon is >= 0. Traced invalid delta gives NaN.

  Examples:
    >>> import jaxrdp
    >>> res = jaxrdp.rdp_to_epsilon([0.5, 1.0], [2.0, 4.0], 1e-5, method="classic")
    >>> round(float(res.epsilon), 6), float(res.order)
    (4.837642, 4.0)
  """
  return _convert(_epsilon_jit, rdp, orders, delta, "delta", DELTA, method)


def rdp_to_delta(
  rdp: ArrayLike, orders: ArrayLike, epsilon: ArrayLike, *, method: str = "improved"
) -> DeltaResult:
  """Converts an RDP curve to the smallest delta at the given epsilon.

  Args:
    rdp: RDP values, shape [..., n]; the last axis matches ``orders``.
    orders: Renyi orders, shape [n], each in (1, inf].
    epsilon: target epsilon in [0, inf); broadcasts against ``rdp[..., 0]``.
    method: ``"improved"`` (default) or ``"classic"``; see :func:`rdp_to_epsilon`.

  Returns:
    DeltaResult(delta, order), delta in [0, 1]. Traced invalid epsilon gives NaN.

  Examples:
    >>> import jaxrdp
    >>> res = jaxrdp.rdp_to_delta([0.5, 1.0], [2.0, 4.0], 4.837642, method="classic")
    >>> round(float(res.delta), 8)
    1e-05
  """
  return _convert(_delta_jit, rdp, orders, epsilon, "epsilon", FINITE_EPSILON, method)
