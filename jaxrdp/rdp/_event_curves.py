"""RDP curves of events: one rule per event type, composed additively.

RDP composes additively over adaptive composition (Mironov 2017,
arXiv:1702.07476, Prop. 1): ``SelfComposed(e, k)`` has ``k`` times the curve of
``e``, and ``Composed(e1, e2, ...)`` the sum of theirs. The rules return float64
arrays of shape ``batch + [n_orders]`` (the event's broadcast shape, then the
orders), traceable in their numeric leaves; invalid traced values give NaN.

A new event type registers its rule with :func:`register_rdp_rule`.
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp

from .._core import precision as _precision
from ..events._events import (
  Composed,
  Event,
  Gaussian,
  Laplace,
  NoOp,
  PoissonSampled,
  RandomizedResponse,
  SelfComposed,
)
from ..mechanisms._rdp_curves import _gaussian_impl, _laplace_impl, _randomized_response_impl
from ..mechanisms._sgm import _rdp_f64

__all__ = ["register_rdp_rule", "rdp_curve_f64", "as_sgm"]

# rule(event, orders, orders_static) -> float64 [batch..., n]
_RULES: dict[type, Callable] = {}


def register_rdp_rule(event_type: type):
  """Decorator: ``rule(event, orders, orders_static)`` is the RDP curve of ``event_type``.

  ``orders`` is a float64 array [n]; ``orders_static`` the same orders as a
  hashable ``StaticArray`` (known at trace time). A rule recurses into child
  events through :func:`rdp_curve_f64`.
  """

  def wrap(rule):
    _RULES[event_type] = rule
    return rule

  return wrap


def rdp_curve_f64(event: Event, orders, orders_static):
  """The RDP curve of ``event`` at ``orders``: float64 [event shape..., n] (traceable)."""
  rule = _RULES.get(type(event))
  if rule is None:
    raise NotImplementedError(f"the RDP accountant has no rule for {type(event).__name__} events")
  return rule(event, orders, orders_static)


def _leaf(x):
  return _precision.as_float64(x)[..., None]  # the orders axis


@register_rdp_rule(Gaussian)
def _gaussian(event, orders, orders_static):
  return _gaussian_impl(_leaf(event.sigma), orders)


@register_rdp_rule(Laplace)
def _laplace(event, orders, orders_static):
  return _laplace_impl(_leaf(event.scale), orders)


@register_rdp_rule(RandomizedResponse)
def _randomized_response(event, orders, orders_static):
  return _randomized_response_impl(_leaf(event.p), orders)


@register_rdp_rule(PoissonSampled)
def _poisson_sampled(event, orders, orders_static):
  if not isinstance(event.inner, Gaussian):
    raise NotImplementedError(
      "the RDP accountant composes PoissonSampled only with a Gaussian inner event, "
      f"got {type(event.inner).__name__}"
    )
  # Exact RDP of the Sampled Gaussian Mechanism (Mironov, Talwar, Zhang 2019,
  # arXiv:1908.10530); static orders let integer orders take the exact series.
  return _rdp_f64(_leaf(event.q), _leaf(event.inner.sigma), orders, orders_static)


@register_rdp_rule(SelfComposed)
def _self_composed(event, orders, orders_static):
  inner = rdp_curve_f64(event.event, orders, orders_static)
  count = _leaf(event.count)
  # 0 repetitions spend nothing, even where one would be infinite.
  out = jnp.where(count == 0, 0.0, count * inner)
  return jnp.where(jnp.isnan(count) | (count < 0), jnp.nan, out)


@register_rdp_rule(Composed)
def _composed(event, orders, orders_static):
  total = jnp.zeros_like(orders)
  for e in event.events:
    total = total + rdp_curve_f64(e, orders, orders_static)
  return total


@register_rdp_rule(NoOp)
def _no_op(event, orders, orders_static):
  return jnp.zeros_like(orders)


def as_sgm(event: Event):
  """``(q, sigma, steps)`` if ``event`` is repeated Poisson-sampled Gaussian steps, else None.

  Recognises ``PoissonSampled(q, Gaussian(sigma))`` nested in any number of
  ``SelfComposed`` (counts multiply), the shape that DP-SGD's search over
  orders (``jaxrdp.dpsgd_epsilon``) handles without evaluating every order.
  """
  steps = 1.0
  while isinstance(event, SelfComposed):
    steps = event.count if isinstance(steps, float) and steps == 1.0 else steps * event.count
    event = event.event
  if isinstance(event, PoissonSampled) and isinstance(event.inner, Gaussian):
    return event.q, event.inner.sigma, steps
  return None


# The RDP rules of the fixed-size and shuffled-batch events live with the schemes.
from . import _sampling as _sampling  # noqa: E402,F401  (registers their rules)
