"""RDP curves of events: one rule per event type, composed additively.

RDP composes additively over adaptive composition (Mironov 2017,
arXiv:1702.07476, Prop. 1): ``SelfComposed(e, k)`` has ``k`` times the curve of
``e``, and ``Composed(e1, e2, ...)`` the sum of theirs. The rules return float64
arrays of shape ``batch + [n_orders]`` (the event's broadcast shape, then the
orders), traceable in their numeric leaves; invalid traced values give NaN.

A new event type registers its rule with :func:`register_rdp_rule`; what the
accountant supports is read from the same registry (:func:`rdp_unsupported`), so
its refusals are generated from the rules that exist. This module holds the registry
and the rules of the core events; the accountant reads the whole set from
``jaxrdp.rdp._rules``, which imports every module of rules.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

from .._core import precision as _precision
from .._core.validation import StaticArray
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
from ..mechanisms._sampled_without_replacement import effective_noise_multiplier
from ..mechanisms._sgm import _rdp_f64
from ._poisson_upper_bound import integer_orders_needed, poisson_upper_bound_f64

__all__ = [
  "register_rdp_rule",
  "register_rdp_refusal",
  "register_rdp_check",
  "rdp_unsupported",
  "rdp_curve_f64",
  "check_rdp_event",
  "rdp_values_unsupported",
  "as_sgm",
  "gaussian_terms",
  "effective_sigma_f64",
]

# rule(event, orders, orders_static) -> float64 [batch..., n]
_RULES: dict[type, Callable] = {}
# structural conditions of a rule: event -> None, or why it does not apply
_CONDITIONS: dict[type, Callable] = {}
# event types refused with a reason
_REFUSED: dict[type, str] = {}


def register_rdp_rule(event_type: type, *, condition: Callable | None = None):
  """Decorator: ``rule(event, orders, orders_static)`` is the RDP curve of ``event_type``.

  ``orders`` is a float64 array [n]; ``orders_static`` the same orders as a
  hashable ``StaticArray`` (known at trace time). A rule recurses into child
  events through ``rdp_curve_f64``. ``condition(event)`` returns ``None`` if
  the rule applies to this event's structure (its children's types, its static
  fields), else a phrase saying which events it does not cover.
  """

  def wrap(rule):
    _RULES[event_type] = rule
    if condition is not None:
      _CONDITIONS[event_type] = condition
    return rule

  return wrap


def register_rdp_refusal(event_type: type, why: str) -> None:
  """``event_type`` has no RDP curve, for the reason ``why`` (shown in the refusal)."""
  _REFUSED[event_type] = why


def rdp_unsupported(event: Event) -> str | None:
  """``None`` if the RDP accountant has a rule for every part of ``event``, else what it lacks.

  Structural (types and static fields, never the numbers), so it decides before
  anything is computed; concrete values are checked later (:func:`check_rdp_event`).
  """
  kind = type(event)
  if kind in _REFUSED:
    return f"{kind.__name__} events ({_REFUSED[kind]})"
  if kind not in _RULES:
    return f"{kind.__name__} events"
  condition = _CONDITIONS.get(kind)
  why = condition(event) if condition is not None else None
  if why is not None:
    return why
  for field in event._children:
    value = getattr(event, field)
    for child in value if isinstance(value, (tuple, list)) else (value,):
      why = rdp_unsupported(child)
      if why is not None:
        return why
  return None


# check(event, name) -> None, or the phrase naming concrete values that have no RDP curve.
_CHECKS: dict[type, Callable] = {}


def register_rdp_check(event_type: type):
  """Decorator: ``check(event, name)`` returns ``None``, or a phrase (read after "cannot
  account") naming concrete values of ``event_type`` that have no RDP curve and why;
  ``name`` is the event's path in the tree (``"SelfComposed > EpsilonDelta"``)."""

  def wrap(check):
    _CHECKS[event_type] = check
    return check

  return wrap


def rdp_values_unsupported(event: Event, path: str = "") -> str | None:
  """``None``, or what the registered checks refuse in ``event``'s concrete values (a phrase).

  Traced values are not checked (their rules give the true worst case, or NaN).
  """
  name = f"{path}{type(event).__name__}"
  check = _CHECKS.get(type(event))
  if check is not None:
    why = check(event, name)
    if why is not None:
      return why
  for field in event._children:
    value = getattr(event, field)
    for child in value if isinstance(value, (tuple, list)) else (value,):
      why = rdp_values_unsupported(child, f"{name} > ")
      if why is not None:
        return why
  return None


def check_rdp_event(event: Event) -> None:
  """Raises NotImplementedError if concrete values of ``event`` have no RDP curve."""
  why = rdp_values_unsupported(event)
  if why is not None:
    raise NotImplementedError(f"the Renyi-DP accountant cannot account {why}")


def rdp_curve_f64(event: Event, orders, orders_static):
  """The RDP curve of ``event`` at ``orders``: float64 [event shape..., n] (traceable)."""
  why = rdp_unsupported(event)
  if why is not None:
    raise NotImplementedError(f"the Renyi-DP accountant cannot account {why}")
  return _RULES[type(event)](event, orders, orders_static)


def _leaf(x):
  return _precision.as_float64(x)[..., None]  # the orders axis


@register_rdp_rule(Gaussian)
def _gaussian(event, orders, orders_static):
  # alpha = inf is routed around the kernel: its value there is inf (0 for sigma = inf,
  # where alpha / (2 sigma^2) would be inf / inf), and its derivative stays finite.
  sigma = _leaf(event.sigma)
  finite = jnp.isfinite(orders)
  out = _gaussian_impl(sigma, jnp.where(finite, orders, 2.0))
  at_inf = jnp.where(
    jnp.isnan(sigma) | (sigma < 0), jnp.nan, jnp.where(sigma == jnp.inf, 0.0, jnp.inf)
  )
  return jnp.where(finite, out, at_inf)


@register_rdp_rule(Laplace)
def _laplace(event, orders, orders_static):
  return _laplace_impl(_leaf(event.scale), orders)


@register_rdp_rule(RandomizedResponse)
def _randomized_response(event, orders, orders_static):
  return _randomized_response_impl(_leaf(event.p), orders)


def gaussian_terms(event: Event, count=1.0):
  """``[(count, sigma), ...]`` if ``event`` is Gaussians under Composed/SelfComposed, else None.

  The counts multiply down nested ``SelfComposed`` events; ``NoOp`` adds no term.
  """
  if isinstance(event, Gaussian):
    return [(count, event.sigma)]
  if isinstance(event, NoOp):
    return []
  if isinstance(event, SelfComposed):
    inner_count = event.count if isinstance(count, float) and count == 1.0 else count * event.count
    return gaussian_terms(event.event, inner_count)
  if isinstance(event, Composed):
    terms = []
    for e in event.events:
      sub = gaussian_terms(e, count)
      if sub is None:
        return None
      terms += sub
    return terms
  return None


def effective_sigma_f64(terms):
  """``(sum_i c_i / sigma_i^2)^(-1/2)`` of ``terms = [(c_i, sigma_i)]``, float64, traceable.

  Scaled by the largest ``1 / sigma_i`` (with ``c_i > 0``) so that neither the
  squares nor their sum overflow or underflow: ``sigma_i = 0`` with ``c_i > 0`` gives
  0 (no noise), no term or only ``sigma_i = inf`` gives ``inf`` (nothing released).
  A negative or NaN count or sigma gives NaN.
  """
  cs = [_precision.as_float64(c) for c, _ in terms]
  rs = [1.0 / _precision.as_float64(s) for _, s in terms]  # 1/sigma, inf at sigma = 0
  bad = jnp.zeros((), bool)
  top = jnp.zeros(())
  for c, r in zip(cs, rs):
    bad = bad | jnp.isnan(c) | (c < 0) | jnp.isnan(r) | (r < 0)
    top = jnp.maximum(top, jnp.where(c > 0, r, 0.0))
  ordinary = (top > 0) & jnp.isfinite(top)
  scale = jnp.where(ordinary, top, 1.0)
  total = jnp.zeros(())
  for c, r in zip(cs, rs):
    u = jnp.where(ordinary, r / scale, 0.0)  # in [0, 1]
    total = total + jnp.where(c > 0, c * u * u, 0.0)
  sigma = 1.0 / (scale * jnp.sqrt(jnp.where(ordinary, total, 1.0)))
  sigma = jnp.where(ordinary, sigma, jnp.where(top == 0, jnp.inf, 0.0))
  return jnp.where(bad, jnp.nan, sigma)


# Inner events with an add/remove RDP curve that bounds both directions of their pair:
# Poisson sampling of them has the general bound of ``_poisson_upper_bound``. (Randomized
# response and its k-ary form describe a replaced input; the sampled and selection events
# and the mixture of Gaussians are left out.)
def _generic_inner_types():
  from ..events import _mechanism_events as M

  return (
    Gaussian,
    Laplace,
    M.DiscreteGaussian,
    M.DiscreteLaplace,
    M.ZCDp,
    M.EpsilonDelta,
    M.ExponentialMechanism,
    M.PermuteAndFlip,
    M.NonPrivate,
  )


def _generic_inner_unsupported(event) -> str | None:
  if isinstance(event, (Composed, SelfComposed, NoOp)):
    children = (
      event.events
      if isinstance(event, Composed)
      else (() if isinstance(event, NoOp) else (event.event,))
    )
    for child in children:
      why = _generic_inner_unsupported(child)
      if why is not None:
        return why
    return None
  return None if isinstance(event, _generic_inner_types()) else type(event).__name__


def _poisson_condition(event):
  if isinstance(event.inner, Gaussian) or gaussian_terms(event.inner) is not None:
    return None
  if event.relation != "add_remove":
    return (
      f"PoissonSampled({type(event.inner).__name__}, relation='replace_one') events "
      "(under replace-one only Gaussian inner mechanisms have a Renyi-DP rule)"
    )
  part = _generic_inner_unsupported(event.inner)
  if part is None:
    return None
  return (
    f"PoissonSampled({type(event.inner).__name__}) events (the general bound on Poisson "
    f"sampling needs an inner mechanism with an add/remove Renyi-DP curve; {part} has none "
    "usable here)"
  )


@register_rdp_rule(PoissonSampled, condition=_poisson_condition)
def _poisson_sampled(event, orders, orders_static):
  # Exact RDP of the Sampled Gaussian Mechanism (Mironov, Talwar, Zhang 2019,
  # arXiv:1908.10530); static orders let integer orders take the exact series.
  # Gaussian mechanisms composed on the same sample are one Gaussian mechanism:
  # queries f_i of L2 sensitivity 1 with noise N(0, s_i^2 I), stacked and each scaled
  # by 1 / s_i, are one query of sensitivity sqrt(sum_i 1 / s_i^2) with N(0, I) noise,
  # i.e. noise multiplier sigma_eff = (sum_i 1 / s_i^2)^(-1/2) (SelfComposed counts
  # multiply their term). The sampled pair is then the Sampled Gaussian Mechanism's at
  # sigma_eff (the reduction dp_accounting makes, after McMahan et al. 2018,
  # arXiv:1812.06210, Sec. 3). Under replace-one, the SGM at sigma / 2.
  # Other inner mechanisms: the general upper bound of _poisson_upper_bound.
  if isinstance(event.inner, Gaussian):
    sigma = _leaf(event.inner.sigma)
  else:
    terms = gaussian_terms(event.inner)
    if terms is None:
      return _poisson_general(event, orders, orders_static)
    sigma = effective_sigma_f64([(_leaf(c), _leaf(s)) for c, s in terms])
  sigma = effective_noise_multiplier(sigma, event.relation)
  return _rdp_f64(_leaf(event.q), sigma, orders, orders_static)


def _poisson_general(event, orders, orders_static):
  ints = integer_orders_needed(orders_static.array)
  ints_static = StaticArray(ints)
  inner_at = rdp_curve_f64(event.inner, orders, orders_static)
  if ints.size:
    inner_int = rdp_curve_f64(event.inner, jnp.asarray(ints), ints_static)
  else:
    inner_int = jnp.zeros(inner_at.shape[:-1] + (0,))
  q = _leaf(event.q)
  out = poisson_upper_bound_f64(q, inner_int, inner_at, orders_static.array)
  # An inner curve that is infinite (an (epsilon, delta)-DP part with delta > 0, traced)
  # makes the bound inf - inf = NaN: the sampled curve is inf there (sound), and 0 at
  # q = 0 (nothing sampled); NaN only where an input is NaN or invalid.
  invalid = jnp.isnan(inner_at) | jnp.isnan(q) | (q < 0) | (q > 1)  # q has the orders axis
  if ints.size:
    invalid = invalid | jnp.any(jnp.isnan(inner_int), axis=-1, keepdims=True)
  fixed = jnp.where(q == 0, 0.0, jnp.inf)
  return jnp.where(jnp.isnan(out) & ~invalid, fixed, out)


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
  orders handles without evaluating every order; ``sigma`` is the mechanism's
  multiplier (``sigma / 2`` under replace-one).
  """
  steps = 1.0
  while isinstance(event, SelfComposed):
    steps = event.count if isinstance(steps, float) and steps == 1.0 else steps * event.count
    event = event.event
  if isinstance(event, PoissonSampled) and isinstance(event.inner, Gaussian):
    return event.q, effective_noise_multiplier(event.inner.sigma, event.relation), steps
  return None
