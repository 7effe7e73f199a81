"""RDP rules of the mechanisms of ``jaxrdp.events._mechanism_events`` and of RepeatAndSelect.

Each rule returns float64 ``[event shape..., n]`` at the accountant's orders (see
``_event_curves``); the kernels map invalid traced values to NaN. Events without a
sound RDP curve get a rule that refuses them with NotImplementedError naming the
event and what can account it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._core import precision as _precision
from .._core.validation import concrete_or_none
from ..events._mechanism_events import (
  DiscreteGaussian,
  DiscreteLaplace,
  EpsilonDelta,
  ExponentialMechanism,
  KaryRandomizedResponse,
  MixtureOfGaussians,
  NonPrivate,
  PermuteAndFlip,
  SingleEpochTreeAggregation,
  TruncatedSubsampledGaussian,
  ZCDp,
)
from ..events._selection_events import RepeatAndSelect
from ..mechanisms._kary_randomized_response import replace_one_impl, replace_special_impl
from ..mechanisms._pure_dp import bounded_range_rdp_impl, pure_dp_rdp_impl
from ..mechanisms._repeat_and_select import repeat_and_select_impl
from . import _sampling
from ._conversions import delta_from_rdp_f64
from ._event_curves import (
  rdp_curve_f64,
  register_rdp_check,
  register_rdp_refusal,
  register_rdp_rule,
)
from ._poisson_upper_bound import integer_orders_needed, poisson_upper_bound_f64

__all__ = ["tree_depth"]


def _leaf(x):
  return _precision.as_float64(x)[..., None]  # the orders axis


def _gaussian_curve(s, orders):
  """alpha / (2 s^2) (rounded up, float64 edges as ``_sampling._gaussian_rdp_f64``), with
  finite derivatives at ``alpha = inf`` too (where the value is inf, or 0 for s = inf)."""
  finite = jnp.isfinite(orders)
  out = _sampling._gaussian_rdp_f64(s, jnp.where(finite, orders, 2.0))
  at_inf = jnp.where(jnp.isnan(s) | (s < 0), jnp.nan, jnp.where(s == jnp.inf, 0.0, jnp.inf))
  return jnp.where(finite, out, at_inf)


@register_rdp_rule(ZCDp)
def _zcdp(event, orders, orders_static):
  rho, xi = _leaf(event.rho), _leaf(event.xi)
  finite = jnp.isfinite(orders)
  out = xi + rho * jnp.where(finite, orders, 1.0)
  out = jnp.where(finite, out, jnp.where(rho > 0, jnp.inf, xi))
  invalid = jnp.isnan(rho) | jnp.isnan(xi) | (rho < 0) | (xi < 0) | jnp.isinf(rho) | jnp.isinf(xi)
  return jnp.where(invalid, jnp.nan, out)


@register_rdp_rule(NonPrivate)
def _non_private(event, orders, orders_static):
  return jnp.full_like(orders, jnp.inf)


@register_rdp_rule(DiscreteGaussian)
def _discrete_gaussian(event, orders, orders_static):
  # alpha Delta^2 / (2 sigma^2) = the Gaussian curve at sigma / Delta (Delta = 0: nothing).
  sigma, sens = _leaf(event.sigma), _leaf(event.sensitivity)
  ratio = sigma / jnp.where(sens > 0, sens, 1.0)
  out = jnp.where(sens == 0, 0.0, _gaussian_curve(ratio, orders))
  invalid = jnp.isnan(sigma) | jnp.isnan(sens) | (sens < 0) | jnp.isinf(sens)
  return jnp.where(invalid, jnp.nan, out)


@register_rdp_rule(DiscreteLaplace)
def _discrete_laplace(event, orders, orders_static):
  # a Delta-DP: the pure-DP bound at epsilon = a Delta (Delta = 0 or a = 0: nothing).
  a, sens = _leaf(event.noise_parameter), _leaf(event.sensitivity)
  eps = jnp.where((sens == 0) | (a == 0), 0.0, a * sens)
  out = pure_dp_rdp_impl(eps, orders)
  invalid = jnp.isnan(a) | jnp.isnan(sens) | (a < 0) | (sens < 0) | jnp.isinf(sens)
  return jnp.where(invalid, jnp.nan, out)


@register_rdp_rule(KaryRandomizedResponse)
def _kary_randomized_response(event, orders, orders_static):
  impl = replace_one_impl if event.relation == "replace_one" else replace_special_impl
  return impl(_leaf(event.noise), _leaf(event.buckets), orders)


@register_rdp_rule(ExponentialMechanism)
def _exponential_mechanism(event, orders, orders_static):
  return bounded_range_rdp_impl(_leaf(event.epsilon), orders)


@register_rdp_rule(PermuteAndFlip)
def _permute_and_flip(event, orders, orders_static):
  return pure_dp_rdp_impl(_leaf(event.epsilon), orders)


@register_rdp_check(EpsilonDelta)
def _epsilon_delta_check(event, name):
  delta = concrete_or_none(event.delta)
  if delta is None or not (delta > 0).any():
    return None
  where = f" (in {name})" if " > " in name else ""
  return (
    f"EpsilonDelta events with delta > 0{where}, got delta = "
    f"{float(delta[delta > 0].flat[0])!r}: an (epsilon, delta)-DP mechanism can have infinite "
    "Renyi divergence at every order; its delta is paid beside the curve only where it is "
    "composed (Composed, SelfComposed), not under sampling or selection"
  )


@register_rdp_rule(EpsilonDelta)
def _epsilon_delta(event, orders, orders_static):
  # delta = 0: the pure-DP bound (tight over eps-DP mechanisms). Under compositions the
  # accountant pays delta > 0 beside the curve (``_additive_delta``) and gives this rule
  # delta 0; elsewhere a traced delta > 0 (a concrete one is refused before tracing) has
  # no finite RDP: inf, the true worst case.
  delta = _leaf(event.delta)
  out = pure_dp_rdp_impl(_leaf(event.epsilon), orders)
  out = jnp.where(delta > 0, jnp.inf, out)
  invalid = jnp.isnan(delta) | (delta < 0) | (delta > 1)
  return jnp.where(invalid, jnp.nan, out)


def tree_depth(steps):
  """ceil(log2(steps + 1)) for ``steps >= 0`` (rounded up to an integer first), exactly.

  The bit length of ``ceil(steps)``: ``frexp`` writes a positive integer n as
  ``m 2^e`` with ``m`` in [1/2, 1), and then ``e`` is its bit length; 0 has depth 0.
  """
  n = jnp.ceil(steps)
  _, e = jnp.frexp(jnp.where(n > 0, n, 1.0))
  return jnp.where(n > 0, e.astype(jnp.float64), 0.0)


@register_rdp_rule(SingleEpochTreeAggregation)
def _tree_aggregation(event, orders, orders_static):
  # alpha depth / (2 sigma^2): the Gaussian curve at sigma / sqrt(depth) (Kairouz et al.
  # 2021, arXiv:2103.00039, App. D); a tree of no steps releases nothing about anyone.
  sigma, steps = _leaf(event.sigma), _leaf(event.steps)
  depth = tree_depth(jnp.where(jnp.isfinite(steps) & (steps >= 0), steps, 1.0))
  scaled = sigma / jnp.sqrt(jnp.where(depth > 0, depth, 1.0))
  out = jnp.where(depth == 0, 0.0, _gaussian_curve(scaled, orders))
  invalid = jnp.isnan(sigma) | jnp.isnan(steps) | (steps < 0) | jnp.isinf(steps)
  return jnp.where(invalid, jnp.nan, out)


@register_rdp_rule(RepeatAndSelect)
def _repeat_and_select(event, orders, orders_static):
  curve = rdp_curve_f64(event.event, orders, orders_static)
  mean, shape = (_precision.as_float64(x) for x in (event.mean, event.shape))
  batch = jnp.broadcast_shapes(curve.shape[:-1], mean.shape, shape.shape)
  curve = jnp.broadcast_to(curve, batch + orders.shape)
  mean, shape = jnp.broadcast_to(mean, batch), jnp.broadcast_to(shape, batch)
  # delta of one run at epsilon_hat = log(lambda / (lambda - 1)), for every order lambda
  # (Thm 6, the Poisson law), from its whole curve.
  finite = jnp.isfinite(orders)
  eps_hat = jnp.where(finite, jnp.log1p(1.0 / jnp.where(finite, orders - 1.0, 1.0)), 0.0)
  delta_hat = delta_from_rdp_f64(curve[..., None, :], orders, eps_hat).delta
  return repeat_and_select_impl(curve, orders, mean, shape, delta_hat)


def _mixture_components(event):
  """(s, c, w): sigma [batch..., 1, 1], sensitivities and normalised probs [batch..., 1, m]."""
  sigma = _precision.as_float64(event.sigma)
  cs = [_precision.as_float64(c) for c in event.sensitivities]
  ps = [_precision.as_float64(p) for p in event.probs]
  sigma, *rest = jnp.broadcast_arrays(sigma, *cs, *ps)
  m = len(cs)
  c = jnp.stack(rest[:m], axis=-1)[..., None, :]
  p = jnp.stack(rest[m:], axis=-1)[..., None, :]
  total = jnp.sum(p, axis=-1, keepdims=True)
  w = p / jnp.where(total > 0, total, 1.0)
  bad = jnp.isnan(sigma) | (sigma < 0)
  bad = bad | jnp.any(jnp.isnan(c) | (c < 0) | jnp.isnan(p) | (p < 0) | (p > 1), axis=-1)[..., 0]
  bad = bad | ~(total[..., 0, 0] > 0)
  return sigma[..., None, None], c, w, bad


def _shifted_mixture_curve(sigma, c, w, g, orders):
  """Joint-convexity bound on the RDP, both directions, between N(0, s^2) and the mixture of
  the components with ``c_i > 0`` (weights ``w_i / g``): ``log sum_i (w_i / g) exp(alpha
  (alpha - 1) c_i^2 / (2 s^2)) / (alpha - 1)``; [batch..., n] at the orders (inf at inf)."""
  live = (c > 0) & (w > 0)
  ratio = jnp.where(live, c / sigma, 0.0)  # c / s: inf for s = 0, 0 for s = inf
  finite = jnp.isfinite(orders)
  a = jnp.where(finite, orders, 2.0)[:, None]
  log_w = jnp.log(jnp.where(live, w, 1.0)) - jnp.log(jnp.where(g > 0, g, 1.0))
  terms = jnp.where(live, log_w + a * (a - 1.0) * 0.5 * ratio * ratio, -jnp.inf)
  out = jax.nn.logsumexp(terms, axis=-1) / (a[:, 0] - 1.0)
  any_live = jnp.any(live & (ratio > 0), axis=-1)
  out = jnp.where(any_live, out, 0.0)
  return jnp.where(finite, out, jnp.where(any_live, jnp.inf, 0.0))


@register_rdp_rule(MixtureOfGaussians)
def _mixture_of_gaussians(event, orders, orders_static):
  # N(0, s^2) against sum_i p_i N(c_i, s^2) = (1 - g) N(0, s^2) + g Q', g the weight of the
  # components with c_i > 0: a Poisson-sampled pair at rate g whose inner pair is N(0, s^2)
  # and Q'. Q' has the joint-convexity curve (both directions; exact for one component),
  # and the general Poisson bound (_poisson_upper_bound) amplifies it (capped there by
  # joint convexity over the whole mixture, log1p(g expm1((alpha - 1) eps'(alpha))) /
  # (alpha - 1)).
  sigma, c, w, bad = _mixture_components(event)
  g = jnp.sum(jnp.where(c > 0, w, 0.0), axis=-1)  # [batch..., 1]
  g = jnp.minimum(g, 1.0)
  ints = integer_orders_needed(orders_static.array)
  inner_at = _shifted_mixture_curve(sigma, c, w, g[..., None], orders)
  inner_int = _shifted_mixture_curve(sigma, c, w, g[..., None], jnp.asarray(ints))
  out = poisson_upper_bound_f64(g, inner_int, inner_at, orders_static.array)
  out = jnp.where(g == 0, 0.0, out)
  return jnp.where(bad[..., None], jnp.nan, out)


_refuse = register_rdp_refusal
_refuse(
  TruncatedSubsampledGaussian,
  "under sampling or selection: truncating the batch costs an additive delta (the overflow "
  "probability), which the accountant pays beside the curve only where the event is "
  "composed (Composed, SelfComposed)",
)
