"""RDP accounting of DP-SGD for each batching scheme and neighbouring relation.

``jaxrdp.dpsgd_epsilon``, ``dpsgd_delta``, ``sweep``, the ``calibrate_*`` functions
and the CLI take ``sampling`` and ``relation``, which ``jaxrdp.events.dpsgd_event``
turns into the run's event; :func:`dpsgd_scheme` reads from that event how its RDP is
composed (a :class:`DpsgdScheme`: the per-step or per-epoch curve and how many of them),
so no code here tests the strings. The default (Poisson, add/remove) stays on the
callers' own fast path, and every other combination comes here.

=============  ==============  =========================================================
sampling       relation        T-step RDP at order alpha (s: effective multiplier)
=============  ==============  =========================================================
``poisson``    ``add_remove``  T * sgm_rdp(q, sigma, alpha)  (the default fast path)
``poisson``    ``replace_one`` T * sgm_rdp(q, sigma / 2, alpha)  (the fast path at sigma / 2)
``fixed``      ``replace_one`` T * wor_rdp(q, sigma / 2, alpha)  (WBK19 Thm 27; the
                               default relation for ``fixed``)
``fixed``      ``add_remove``  refused (ValueError): no published bound implemented
``shuffle``    either          ceil(T q) * alpha / (2 s^2)  (no amplification)
=============  ==============  =========================================================

``sigma`` is always the DP-SGD noise multiplier: noise std sigma * C on a sum of
per-example gradients clipped to norm C. The relation sets the sum's sensitivity,
C (add/remove) or 2C (replace-one), hence the effective multiplier s = sigma or
sigma / 2 (:func:`jaxrdp.mechanisms.effective_noise_multiplier`).

* ``fixed``: q is the batch size over the dataset size, B / n; every step draws B
  distinct examples uniformly (Wang, Balle, Kasiviswanathan 2019,
  arXiv:1808.00087, Thm 27, the bound dp_accounting's
  ``SampledWithoutReplacementDpEvent`` computes under REPLACE_ONE). The theorem is
  stated for replace-one, so that is the default relation here; add/remove raises
  ValueError rather than quoting an unsupported number.
* ``shuffle``: q = B / n, one epoch is 1 / q steps, and T steps touch ceil(T q)
  epochs (rounded up: a started epoch counts whole; when B does not divide n an
  epoch has ceil(n / B) steps, so T q over-counts, which is conservative). Each
  epoch uses each example once: one Gaussian mechanism per example and epoch, no
  amplification by sampling. This is what TensorFlow Privacy's
  ``compute_dp_sgd_privacy_statement`` prints for shuffled batches; quoting the
  Poisson epsilon for them under-reports (Chua et al. 2024, arXiv:2403.17673).
* ``poisson`` under replace-one: the Sampled Gaussian Mechanism at sigma / 2
  (sensitivity 2C). A replaced example is sampled or not with the same coin, so
  the pair of outputs is ((1-q) N(0) + q N(u), (1-q) N(0) + q N(v)) with
  |u - v| <= 2C; this is checked numerically to be dominated by the SGM pair at
  sensitivity 2C (tests/test_sampling_schemes.py), not taken from a published
  theorem; dp_accounting's RDP accountant refuses Poisson sampling under
  REPLACE_ONE. Prefer add/remove with Poisson sampling.

Monotonicity (what calibration relies on): every curve here is non-decreasing in
q and T and non-increasing in sigma at every order. The WOR bound is a sum of
gamma^j times non-negative terms, each a minimum of quantities that decrease in
s (chi moments of a Gaussian shift, which fall as noise is added, by
post-processing, and exponentials of 1 / s^2); the shuffle curve is ceil(T q)
times alpha / (2 s^2).

The edges of float64 are treated as the Sampled Gaussian Mechanism's kernels treat
them (``jaxrdp.mechanisms._sgm``): a positive subnormal q, step count or number of
epochs (which XLA reads as 0) is rounded up to the smallest normal float; the
Gaussian curve is alpha / (2 s^2) computed without squaring s and rounded up; and a
positive per-step RDP that underflows (sigma beyond about 1e154) is reported as the
smallest normal float, never as 0. The conversions to (epsilon, delta) are those of
``jaxrdp.rdp._conversions``, total-variation rule included.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp
import numpy as np

from .._core import precision as _precision
from .._core.numerics import TINY, raise_subnormal
from .._core.validation import concrete_or_none
from ..events._dpsgd import epochs_of
from ..events._events import Event, Gaussian, PoissonSampled, SelfComposed
from ..events._sampling_events import FIXED_ADD_REMOVE_ERROR, FixedSizeSampled, ShuffledEpochs
from ..mechanisms._sampled_without_replacement import (
  _TRACED_MAX_ORDER,
  WOR_MAX_ORDER,
  effective_noise_multiplier,
)
from ..mechanisms._sampled_without_replacement import _rdp_f64 as _wor_rdp_f64
from ..mechanisms._sampled_without_replacement import _tables as _wor_tables
from ..mechanisms._sgm import _over_sigma_squared
from ..mechanisms._sgm import _rdp_f64 as _sgm_rdp_f64
from ._event_curves import register_rdp_rule

__all__ = [
  "DpsgdScheme",
  "PoissonSteps",
  "FixedSizeSteps",
  "ShuffledEpochScheme",
  "dpsgd_scheme",
  "check_wor_orders",
]


def _wor_j_max(orders_static) -> int:
  if orders_static is None:
    return _TRACED_MAX_ORDER
  a = np.asarray(orders_static.array, dtype=np.float64)
  finite = a[np.isfinite(a)]
  top = int(np.ceil(finite.max())) if finite.size else 2
  return max(64, -(-top // 64) * 64)


def check_wor_orders(orders) -> None:
  """Raises ValueError if concrete ``orders`` exceed what the fixed-size bound evaluates."""
  a = concrete_or_none(orders)
  if a is not None:  # traced orders above 256 give NaN instead
    finite = a[np.isfinite(a)]
    if finite.size and finite.max() > WOR_MAX_ORDER:
      raise ValueError(
        f"orders must be <= {WOR_MAX_ORDER} (or inf) for sampling='fixed', got {finite.max()!r}"
      )


def _gaussian_rdp_f64(s, orders):
  """alpha / (2 s^2), the Gaussian mechanism's RDP, never below the true value.

  Computed as (alpha / 2 / s) / s (s^2 underflows below 1.5e-154), rounded up by
  1e-15 relative, and floored at the smallest normal float where the true value is
  positive (s^2 overflows beyond 1.3e154); s = 0 gives inf, s = inf gives 0.
  """
  s = _precision.as_float64(s)
  a = _precision.as_float64(orders)
  s, a = jnp.broadcast_arrays(s, a)
  invalid = jnp.isnan(s) | jnp.isnan(a) | (s < 0) | (a <= 1)
  # A subnormal s is read as 0 by XLA: no noise, infinite RDP (a sound answer).
  ordinary = (s > 0) & jnp.isfinite(s) & ~invalid
  ss = jnp.where(ordinary, s, 1.0)
  aa = jnp.where(ordinary, a, 2.0)
  out = jnp.maximum(_over_sigma_squared(0.5 * aa, ss) * (1.0 + 1e-15), TINY)
  out = jnp.where(ordinary, out, jnp.where(jnp.isinf(s), 0.0, jnp.inf))
  return jnp.where(invalid, jnp.nan, out)


def _floored(rdp, q, s):
  """``rdp`` with a positive value that underflowed reported as the smallest normal float.

  q > 0 and a finite s > 0 make the mechanism's RDP positive at every order, so a
  value below TINY (a kernel's underflow) is raised to TINY, a sound bound."""
  positive = (q > 0) & (s > 0) & jnp.isfinite(s)
  return jnp.where(positive & (rdp < TINY), TINY, rdp)


def _rate_and_multiplier(q, sigma, relation):
  # A subnormal rate is read as 0 by XLA; every curve is non-decreasing in q.
  q = raise_subnormal(_precision.as_float64(q))[..., None]
  s = effective_noise_multiplier(_precision.as_float64(sigma), relation)[..., None]
  return q, s


@dataclasses.dataclass(frozen=True)
class DpsgdScheme:
  """How the RDP of a DP-SGD run is composed, read from its event (:func:`dpsgd_scheme`).

  One curve per step (or per epoch), :meth:`per_step_rdp_f64`, composed
  :meth:`count_f64` times. Immutable and hashable: a static argument of jitted code.

  Attributes:
    relation: the event's neighbouring relation (it sets the effective multiplier).
    noise_scale: the effective multiplier of ``sigma = 1`` (1, or 1/2 under replace-one).
  """

  relation: str

  #: Whether the curve is the Sampled Gaussian Mechanism's (Poisson sampling).
  sgm: ClassVar[bool] = False
  #: Whether sampling amplifies each step's privacy (about q^2 of the Gaussian's zCDP).
  amplified: ClassVar[bool] = True
  #: Whether the RDP is a staircase in q (a whole number of epochs) rather than smooth.
  staircase_in_q: ClassVar[bool] = False

  @property
  def noise_scale(self) -> float:
    return float(effective_noise_multiplier(1.0, self.relation))

  @property
  def plain_sgm(self) -> bool:
    """Poisson sampling under add/remove: the Sampled Gaussian Mechanism at sigma itself."""
    return self.sgm and self.noise_scale == 1.0

  def check_orders(self, orders) -> None:
    """Raises ValueError if concrete ``orders`` exceed what this scheme evaluates."""

  def per_step_rdp_f64(self, q, sigma, orders, orders_static):
    """RDP of one step (one epoch for shuffled batches): float64 [..., n]."""
    raise NotImplementedError

  def count_f64(self, q, steps):
    """How many times the per-step (per-epoch) curve is composed: T (subnormal T rounded
    up to the smallest normal float first; XLA reads it as 0)."""
    return raise_subnormal(_precision.as_float64(steps))

  def count_host(self, q, steps):
    """:meth:`count_f64` on the host (numpy), for the sweeps."""
    return steps

  def rdp_f64(self, q, sigma, steps, orders, orders_static=None):
    """Total RDP of T DP-SGD steps: float64 [..., n]."""
    q, sigma, steps = _precision.broadcast_float64(q, sigma, steps)
    rdp1 = self.per_step_rdp_f64(q, sigma, orders, orders_static)
    count = self.count_f64(q, steps)[..., None]
    # Zero steps (or zero epochs) spend nothing, even where one would be infinite.
    return jnp.where(count == 0, 0.0, count * rdp1)


@dataclasses.dataclass(frozen=True)
class PoissonSteps(DpsgdScheme):
  """Poisson-sampled steps: the Sampled Gaussian Mechanism at the effective multiplier."""

  sgm: ClassVar[bool] = True

  def per_step_rdp_f64(self, q, sigma, orders, orders_static):
    q, s = _rate_and_multiplier(q, sigma, self.relation)
    return _sgm_rdp_f64(q, s, _precision.as_float64(orders), orders_static)


@dataclasses.dataclass(frozen=True)
class FixedSizeSteps(DpsgdScheme):
  """Fixed-size batches drawn without replacement (WBK19 Thm 27, replace-one)."""

  def check_orders(self, orders) -> None:
    check_wor_orders(orders)

  def per_step_rdp_f64(self, q, sigma, orders, orders_static):
    q, s = _rate_and_multiplier(q, sigma, self.relation)
    orders = _precision.as_float64(orders)
    rdp = _wor_rdp_f64(q, s, orders, _wor_tables(), _wor_j_max(orders_static))
    return _floored(rdp, q, s)


@dataclasses.dataclass(frozen=True)
class ShuffledEpochScheme(DpsgdScheme):
  """Shuffled batches: one Gaussian mechanism per example and epoch, ceil(T q) epochs."""

  amplified: ClassVar[bool] = False
  staircase_in_q: ClassVar[bool] = True

  def per_step_rdp_f64(self, q, sigma, orders, orders_static):
    q, s = _rate_and_multiplier(q, sigma, self.relation)
    orders = _precision.as_float64(orders)
    return jnp.broadcast_to(
      _gaussian_rdp_f64(s, orders), jnp.broadcast_shapes(q.shape, s.shape, orders.shape)
    )

  def count_f64(self, q, steps):
    """Started epochs, ceil(T q): a run with T > 0 steps on batches of q > 0 starts at
    least one, even where T q underflows (subnormal T and q rounded up first)."""
    steps = raise_subnormal(_precision.as_float64(steps))
    q = raise_subnormal(_precision.as_float64(q))
    epochs = jnp.maximum(jnp.ceil(steps * q), 1.0)
    return jnp.where((steps == 0) | (q == 0), 0.0, epochs)

  def count_host(self, q, steps):
    return epochs_of(q, steps)


def dpsgd_scheme(event: Event) -> DpsgdScheme | None:
  """The scheme of a DP-SGD event (:func:`jaxrdp.events.dpsgd_event`), or None.

  ``SelfComposed(PoissonSampled(q, Gaussian))``, ``SelfComposed(FixedSizeSampled(q,
  Gaussian))`` and ``ShuffledEpochs``: their scheme, with the event's relation. Any
  other event (random allocation, whose curve depends on the steps per epoch) has no
  scheme here: it is accounted as an event.
  """
  if isinstance(event, ShuffledEpochs) and isinstance(event.inner, Gaussian):
    return ShuffledEpochScheme(event.relation)
  if isinstance(event, SelfComposed):
    step = event.event
    if isinstance(step, PoissonSampled) and isinstance(step.inner, Gaussian):
      return PoissonSteps(step.relation)
    if isinstance(step, FixedSizeSampled) and isinstance(step.inner, Gaussian):
      return FixedSizeSteps(step.relation)
  return None


# ------------------------------------------------------------------------------------
# RDP rules of the new events.


def _leaf(x):
  return _precision.as_float64(x)[..., None]


@register_rdp_rule(FixedSizeSampled)
def _fixed_size_sampled(event, orders, orders_static):
  if event.relation != "replace_one":
    raise ValueError(FIXED_ADD_REMOVE_ERROR)
  if orders_static is not None:  # the bound's loop runs up to the largest order
    check_wor_orders(orders_static.array)
  gamma = raise_subnormal(_leaf(event.gamma))
  s = effective_noise_multiplier(_leaf(event.inner.sigma), event.relation)
  rdp = _wor_rdp_f64(gamma, s, orders, _wor_tables(), _wor_j_max(orders_static))
  return _floored(rdp, gamma, s)


@register_rdp_rule(ShuffledEpochs)
def _shuffled_epochs(event, orders, orders_static):
  s = effective_noise_multiplier(_leaf(event.inner.sigma), event.relation)
  epochs = jnp.ceil(raise_subnormal(_leaf(event.epochs)))
  out = jnp.where(epochs == 0, 0.0, epochs * _gaussian_rdp_f64(s, orders))
  return jnp.where(jnp.isnan(epochs) | (epochs < 0), jnp.nan, out)
