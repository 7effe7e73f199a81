"""RDP accounting of DP-SGD for each batching scheme and neighbouring relation.

``jaxrdp.dpsgd_epsilon``, ``dpsgd_delta``, ``sweep``, the ``calibrate_*`` functions
and the CLI take ``sampling`` and ``relation``; the default (Poisson,
add/remove) stays on their own fast path, and every other combination comes here.

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

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._core import precision as _precision
from .._core.numerics import TINY, raise_subnormal
from .._core.validation import concrete_or_none, static_or_none
from ..events._events import Gaussian, PoissonSampled, SelfComposed
from ..events._sampling_events import (
  FIXED_ADD_REMOVE_ERROR,
  FixedSizeSampled,
  ShuffledEpochs,
  check_relation,
)
from ..mechanisms._sampled_without_replacement import (
  WOR_MAX_ORDER,
  _TRACED_MAX_ORDER,
  _rdp_f64 as _wor_rdp_f64,
  _tables as _wor_tables,
)
from ..mechanisms._sgm import _over_sigma_squared, _rdp_f64 as _sgm_rdp_f64
from ._conversions import DeltaResult, EpsilonResult, delta_from_rdp_f64, epsilon_from_rdp_f64
from ._event_curves import register_rdp_rule

__all__ = [
  "SAMPLINGS",
  "resolve_scheme",
  "is_default_scheme",
  "effective_sigma",
  "dpsgd_event",
  "epochs_of",
  "scheme_rdp_f64",
  "scheme_dpsgd",
  "truncated_poisson_epsilon",
]

#: The batching schemes.
SAMPLINGS = ("poisson", "fixed", "shuffle")


def resolve_scheme(sampling, relation) -> tuple[str, str]:
  """Validated ``(sampling, relation)``; ``relation=None`` picks the scheme's default.

  Defaults: ``"add_remove"`` for ``"poisson"`` and ``"shuffle"``, ``"replace_one"``
  for ``"fixed"`` (the only relation its theorem covers).

  Raises:
    ValueError: naming ``sampling`` or ``relation`` (allowed values listed), or
      for ``sampling="fixed"`` with ``relation="add_remove"``.

  Examples:
    >>> resolve_scheme("fixed", None)
    ('fixed', 'replace_one')
  """
  if not isinstance(sampling, str) or sampling not in SAMPLINGS:
    raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
  if relation is None:
    relation = "replace_one" if sampling == "fixed" else "add_remove"
  check_relation(relation)
  if sampling == "fixed" and relation == "add_remove":
    raise ValueError(FIXED_ADD_REMOVE_ERROR)
  return sampling, relation


def is_default_scheme(sampling: str, relation: str) -> bool:
  """True for Poisson under add/remove: the accounting functions' own fast path."""
  return sampling == "poisson" and relation == "add_remove"


def effective_sigma(sigma, relation):
  """The mechanism's noise multiplier: sigma, or sigma / 2 under replace-one (exact)."""
  return sigma / 2.0 if relation == "replace_one" else sigma


_effective = effective_sigma


def _wor_j_max(orders_static) -> int:
  if orders_static is None:
    return _TRACED_MAX_ORDER
  a = np.asarray(orders_static.array, dtype=np.float64)
  finite = a[np.isfinite(a)]
  top = int(np.ceil(finite.max())) if finite.size else 2
  return max(64, -(-top // 64) * 64)


def check_orders_for(sampling: str, orders) -> None:
  """Raises ValueError if concrete ``orders`` exceed what ``sampling`` evaluates."""
  a = concrete_or_none(orders)
  if sampling == "fixed" and a is not None:  # traced orders above 256 give NaN instead
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


def per_step_rdp_f64(sampling, relation, q, sigma, orders, orders_static):
  """RDP of one step (``"poisson"``, ``"fixed"``) or one epoch (``"shuffle"``): [..., n]."""
  # A subnormal rate is read as 0 by XLA; every curve is non-decreasing in q.
  q = raise_subnormal(_precision.as_float64(q))[..., None]
  s = _effective(_precision.as_float64(sigma), relation)[..., None]
  orders = _precision.as_float64(orders)
  if sampling == "poisson":
    return _sgm_rdp_f64(q, s, orders, orders_static)
  if sampling == "fixed":
    rdp = _wor_rdp_f64(q, s, orders, _wor_tables(), _wor_j_max(orders_static))
    return _floored(rdp, q, s)
  return jnp.broadcast_to(
    _gaussian_rdp_f64(s, orders), jnp.broadcast_shapes(q.shape, s.shape, orders.shape)
  )


def count_f64(sampling, q, steps):
  """How many times the per-step (per-epoch) curve is composed: T, or ceil(T q) epochs.

  Subnormal T (and q) are rounded up to the smallest normal float first (XLA reads
  them as 0). A shuffled run with T > 0 steps on batches of q > 0 starts at least
  one epoch, even where T q underflows.
  """
  steps = raise_subnormal(_precision.as_float64(steps))
  if sampling != "shuffle":
    return steps
  q = raise_subnormal(_precision.as_float64(q))
  epochs = jnp.maximum(jnp.ceil(steps * q), 1.0)
  return jnp.where((steps == 0) | (q == 0), 0.0, epochs)


def epochs_of(q, steps) -> np.ndarray:
  """The number of started epochs of T shuffled steps at q = B / n, on the host:
  ceil(T q), at least 1 where T > 0 and q > 0 (numpy twin of ``count_f64``)."""
  q, steps = np.asarray(q, np.float64), np.asarray(steps, np.float64)
  with np.errstate(invalid="ignore", over="ignore"):
    epochs = np.maximum(np.ceil(steps * q), 1.0)
  return np.where((steps == 0) | (q == 0), 0.0, epochs)


def scheme_rdp_f64(sampling, relation, q, sigma, steps, orders, orders_static=None):
  """Total RDP of T DP-SGD steps of ``sampling`` under ``relation``: float64 [..., n]."""
  q, sigma, steps = _precision.broadcast_float64(q, sigma, steps)
  rdp1 = per_step_rdp_f64(sampling, relation, q, sigma, orders, orders_static)
  count = count_f64(sampling, q, steps)[..., None]
  # Zero steps (or zero epochs) spend nothing, even where one would be infinite.
  return jnp.where(count == 0, 0.0, count * rdp1)


def dpsgd_event(q, sigma, steps, *, sampling: str = "poisson", relation: str | None = None):
  """The event of T DP-SGD steps of a scheme (sigma: the DP-SGD noise multiplier).

  Examples:
    >>> type(dpsgd_event(0.01, 1.0, 100, sampling="shuffle")).__name__
    'ShuffledEpochs'
  """
  sampling, relation = resolve_scheme(sampling, relation)
  if sampling == "poisson":
    return SelfComposed(PoissonSampled(q, Gaussian(_effective(sigma, relation))), steps)
  if sampling == "fixed":
    return SelfComposed(FixedSizeSampled(q, Gaussian(sigma), relation), steps)
  return ShuffledEpochs(epochs_of(q, steps), Gaussian(sigma), relation)


# ------------------------------------------------------------------------------------
# RDP rules of the new events.


def _leaf(x):
  return _precision.as_float64(x)[..., None]


@register_rdp_rule(FixedSizeSampled)
def _fixed_size_sampled(event, orders, orders_static):
  if event.relation != "replace_one":
    raise ValueError(FIXED_ADD_REMOVE_ERROR)
  if orders_static is not None:  # the bound's loop runs up to the largest order
    check_orders_for("fixed", orders_static.array)
  gamma = raise_subnormal(_leaf(event.gamma))
  s = _effective(_leaf(event.inner.sigma), event.relation)
  rdp = _wor_rdp_f64(gamma, s, orders, _wor_tables(), _wor_j_max(orders_static))
  return _floored(rdp, gamma, s)


@register_rdp_rule(ShuffledEpochs)
def _shuffled_epochs(event, orders, orders_static):
  s = _effective(_leaf(event.inner.sigma), event.relation)
  epochs = jnp.ceil(raise_subnormal(_leaf(event.epochs)))
  out = jnp.where(epochs == 0, 0.0, epochs * _gaussian_rdp_f64(s, orders))
  return jnp.where(jnp.isnan(epochs) | (epochs < 0), jnp.nan, out)


# ------------------------------------------------------------------------------------
# epsilon and delta of the schemes (every order evaluated; the curves are cheap next
# to the SGM quadrature, except the WOR bound, which is O(alpha) per order). Poisson
# sampling under replace-one does not come here: it is the SGM at sigma / 2, on the
# order search of ``dpsgd_epsilon`` itself.


def _dpsgd_f64(q, sigma, steps, given, orders, orders_static, method, sampling, relation, kind):
  """epsilon at a given delta (``kind="epsilon"``) or delta at a given epsilon."""
  q, sigma, steps, given = _precision.broadcast_float64(q, sigma, steps, given)
  rdp = scheme_rdp_f64(sampling, relation, q, sigma, steps, orders, orders_static)
  convert = epsilon_from_rdp_f64 if kind == "epsilon" else delta_from_rdp_f64
  return convert(rdp, _precision.as_float64(orders), given, method)


_dpsgd_jit = jax.jit(
  _dpsgd_f64, static_argnames=("kind", "orders_static", "method", "sampling", "relation")
)


def scheme_dpsgd(
  kind, q, sigma, steps, given, orders, *, method, sampling, relation
) -> EpsilonResult | DeltaResult:
  """``dpsgd_epsilon`` (``kind="epsilon"``, ``given`` the delta) or ``dpsgd_delta``
  (``kind="delta"``, ``given`` the epsilon) for a resolved non-default scheme
  (arguments validated there)."""
  check_orders_for(sampling, orders)
  static = dict(
    kind=kind,
    orders_static=static_or_none(orders),
    method=method,
    sampling=sampling,
    relation=relation,
  )
  return _precision.elementwise_float64(
    lambda q, sigma, steps, given, orders: _dpsgd_jit(q, sigma, steps, given, orders, **static),
    (q, sigma, steps, given),
    (orders,),
  )


# ------------------------------------------------------------------------------------
# Truncated Poisson: the epsilon of a run whose batches are capped at a capacity.


class TruncationError(ValueError):
  """Raised when the truncation term of capped Poisson batches alone uses up delta.

  Attributes:
    eta: the truncation term T P[Binomial(n + 1, q) > capacity].
    capacity: the capacity that truncates too often.
  """

  def __init__(self, message: str, *, eta: float, capacity: int):
    super().__init__(message)
    self.eta = eta
    self.capacity = capacity


def truncated_poisson_epsilon(
  epsilon_at, q, steps, delta, *, capacity, dataset_size, max_iterations: int = 8
) -> EpsilonResult:
  """epsilon of Poisson DP-SGD truncated at ``capacity``, at total delta ``delta``.

  With eta = T P[Binomial(n + 1, q) > B_max] (:func:`jaxrdp.train.truncation_delta`),
  an untruncated guarantee (eps, delta') gives the truncated run
  (eps, delta' + (1 + e^eps) eta) (:func:`jaxrdp.train.truncated_poisson_delta`).
  This returns eps = epsilon_at(delta') for a delta' with
  delta' + (1 + e^eps) eta <= delta, found by the fixed-point iteration
  delta'_{k+1} = delta - (1 + e^{eps_k}) eta from delta'_0 = delta, stopped at the
  first iterate that satisfies the inequality (checked with the rounded-up
  :func:`~jaxrdp.train.truncated_poisson_delta`); eta is far below delta for any
  sensible capacity, so it stops after one or two steps.

  Args:
    epsilon_at: ``delta' -> EpsilonResult`` of the untruncated run.
    q, steps, delta: scalars (concrete): rate, number of steps (integer), delta.
    capacity: B_max (int >= 1).
    dataset_size: n (int >= 1).

  Raises:
    ValueError: naming ``capacity``/``dataset_size``/``steps`` when invalid, or
      (:class:`TruncationError`) if the truncation term alone uses up delta.
  """
  from ..train._samplers import truncated_poisson_delta, truncation_delta

  for name, x in (("q", q), ("steps", steps), ("delta", delta)):
    if np.ndim(x) != 0:
      raise ValueError(f"{name} must be a scalar when capacity is given, got shape {np.shape(x)}")
  steps_f = float(steps)
  if steps_f != math.floor(steps_f):
    raise ValueError(f"steps must be an integer when capacity is given, got {steps!r}")
  eta = truncation_delta(int(dataset_size) + 1, float(q), int(capacity), int(steps_f))
  delta = float(delta)
  d = delta
  for _ in range(max_iterations):
    if not d > 0:
      break
    res = epsilon_at(d)
    eps = float(res.epsilon)
    if not math.isfinite(eps):
      return res
    if truncated_poisson_delta(eta, eps, d) <= delta:
      return res
    # Twice the term: the next epsilon (at a smaller delta') is larger, and the
    # margin lets it grow by up to log 2 and still pass the check.
    d = (delta - 2.0 * (1.0 + math.exp(eps)) * eta) * (1.0 - 1e-15)  # below delta, even for eta ~ 0
  raise TruncationError(
    f"the truncation term (eta = {eta:.3g}) uses up delta = {delta:g} at capacity "
    f"{capacity}: raise capacity (jaxrdp.train.default_capacity)",
    eta=eta,
    capacity=int(capacity),
  )


def dpsgd_epsilon_truncated(
  dpsgd_epsilon, q, sigma, steps, delta, orders, *, capacity, dataset_size, **options
) -> EpsilonResult:
  """``dpsgd_epsilon(..., capacity=, dataset_size=)``: validates, then
  :func:`truncated_poisson_epsilon` on ``dpsgd_epsilon`` itself (with ``options``:
  method, sampling, relation, accountant)."""
  from ..train._samplers import _check_int

  if capacity is None or dataset_size is None:
    raise ValueError("capacity and dataset_size go together (truncated Poisson batches)")
  sampling = options.get("sampling", "poisson")
  if sampling != "poisson":
    raise ValueError(f"capacity applies to sampling='poisson' only, got sampling={sampling!r}")
  dataset_size = _check_int("dataset_size", dataset_size, 1)
  capacity = _check_int("capacity", capacity, 1, dataset_size)
  return truncated_poisson_epsilon(
    lambda d: dpsgd_epsilon(q, sigma, steps, d, orders, **options),
    q,
    steps,
    delta,
    capacity=capacity,
    dataset_size=dataset_size,
  )
