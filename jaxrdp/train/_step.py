"""Privacy accounting inside a jitted DP-SGD training step.

The accountant state (:class:`jaxrdp.accountants.RdpState`: a float64 array of
RDP values, with the orders as static pytree metadata) lives in the train
state. Each jitted step composes that step's Sampled Gaussian Mechanism into
it, reads epsilon(delta) from it, and can refuse the step before a target
epsilon would be exceeded. RDP composes additively
(Mironov 2017, arXiv:1702.07476, Prop. 1), so a step with sampling rate q_t and
noise multiplier sigma_t adds sgm_rdp(q_t, sigma_t, alpha) at every order alpha,
whatever schedule produced q_t and sigma_t.

The decision to refuse depends only on (q_t, sigma_t, delta, target) and the
accountant, which are public, never on the data; a refused step releases
nothing, so it spends no privacy.

optax is not imported here: ``optimizer`` is any object with optax's
``GradientTransformation`` interface (``init(params)``,
``update(updates, state, params)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._core.precision import x64_context
from .._core.validation import check_range
from ..mechanisms._sgm import sgm_rdp
from ..rdp._accountant import RdpAccountant, RdpState, add_rdp_curve
from ..train._poisson import poisson_sample_mask
from . import _sampled_step as _sampled
from ._truncated_epsilon import epsilon_paying_truncation
from ._update import check_state_orders, noisy_update

__all__ = [
  "SGMCache",
  "PrivacyGuard",
  "privacy_guard",
  "tree_select",
  "DPSGDState",
  "StepInfo",
  "dpsgd_init",
  "make_dpsgd_step",
]

PyTree = Any
Schedule = ArrayLike | Callable[[jax.Array], ArrayLike]


class PrivacyGuard(NamedTuple):
  """Outcome of :func:`privacy_guard` (a pytree).

  Attributes:
    allowed: bool scalar, True when the prospective step keeps
      epsilon(delta) <= target_epsilon (False for a NaN epsilon).
    epsilon: epsilon(delta) of ``accountant`` (after the step if allowed,
      the current value if refused).
    order: the RDP order attaining ``epsilon``.
    proposed_epsilon: epsilon(delta) the step would reach if applied.
    accountant: the composed state if allowed, else the unchanged input.
  """

  allowed: jax.Array
  epsilon: jax.Array
  order: jax.Array
  proposed_epsilon: jax.Array
  accountant: RdpState


def tree_select(pred: ArrayLike, on_true: PyTree, on_false: PyTree) -> PyTree:
  """Leafwise ``jnp.where(pred, on_true, on_false)`` for two like pytrees.

  Use it to keep the old train state when a step is refused, without Python
  control flow on a traced flag. Leaves keep their dtype (float64 accountant
  leaves included, so the select runs with float64 enabled).
  """
  pred = jnp.asarray(pred, dtype=bool)
  with x64_context():
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


@jax.jit
def _sgm_curve_jit(q: jax.Array, sigma: jax.Array, orders: jax.Array) -> jax.Array:
  with x64_context():
    return sgm_rdp(q, sigma, orders)


def _sgm_curve(q: ArrayLike, sigma: ArrayLike, orders: ArrayLike) -> jax.Array:
  """Per-step RDP curve in float64, whatever the caller's x64 setting.

  Jitted so that eager callers compile the quadrature once per process and
  shape instead of dispatching it op by op; inside another trace it inlines. The
  call is made with float64 enabled: with x64 off, a jitted call would take its
  arguments and give its result in float32, rounded to nearest (an RDP up to
  ~1e-7 relative too low).
  """
  with x64_context():
    return _sgm_curve_jit(*(jnp.asarray(x, jnp.float64) for x in (q, sigma, orders)))


def _guard(
  accountant, step_rdp, q, sigma, delta, target, valid, count=1, truncation=None
) -> PrivacyGuard:
  """Guard on a precomputed per-step RDP curve ``step_rdp`` of SGM(q, sigma).

  ``truncation``: None, or ``(eta_now, eta_after)``, the truncation terms of
  the run so far and after the prospective step; the epsilons are then read
  at total delta ``delta`` with the term paid
  (:func:`jaxrdp.train._truncated_epsilon.epsilon_paying_truncation`).

  Everything runs with float64 enabled: jaxrdp's functions hand float32
  results back to a float32 trace, and the accountant must stay float64.
  """
  acct = RdpAccountant(accountant.orders)
  with x64_context():
    proposed = add_rdp_curve(accountant, step_rdp, count)
    if truncation is None:
      after = acct.get_epsilon(proposed, delta)
      now = acct.get_epsilon(accountant, delta)
    else:
      eta_now, eta_after = truncation
      after = epsilon_paying_truncation(acct, proposed, delta, eta_after)
      now = epsilon_paying_truncation(acct, accountant, delta, eta_now)
    target = jnp.asarray(jnp.inf if target is None else target, jnp.float64)
    # Explicit range checks as well, so that an invalid step is refused
    # even where a particular RDP value would happen to be finite.
    q64 = jnp.asarray(q, jnp.float64)
    s64 = jnp.asarray(sigma, jnp.float64)
    valid = jnp.asarray(valid, dtype=bool) & (q64 >= 0) & (q64 <= 1) & (s64 >= 0)
    # A NaN epsilon (invalid traced q or sigma) compares False: refused.
    allowed = (after.epsilon <= target) & valid
    allowed = allowed & ~jnp.any(jnp.isnan(proposed.rdp))
    chosen = tree_select(allowed, proposed, accountant)
    epsilon = jnp.where(allowed, after.epsilon, now.epsilon)
    order = jnp.where(allowed, after.order, now.order)
  return PrivacyGuard(allowed, epsilon, order, after.epsilon, chosen)


def privacy_guard(
  accountant: RdpState,
  q: ArrayLike,
  sigma: ArrayLike,
  *,
  delta: ArrayLike,
  target_epsilon: ArrayLike | None = None,
  count: ArrayLike = 1,
) -> PrivacyGuard:
  """Composes ``count`` SGM steps only if epsilon stays within the target.

  The check is made on the epsilon *after* the prospective steps:

      allowed = eps_delta(rdp + count * sgm_rdp(q, sigma)) <= target_epsilon

  (RDP composition, arXiv:1702.07476 Prop. 1; SGM RDP, arXiv:1908.10530.)
  It is selected with ``jnp.where``, so it works on traced values inside jit
  and vmap. Use ``guard.allowed`` to keep the old parameters
  (``jnp.where`` over the parameters, or ``lax.cond``) and as the stop signal.

  Args:
    accountant: current :class:`jaxrdp.accountants.RdpState`.
    q: sampling rate of the prospective step, in [0, 1].
    sigma: noise multiplier of the prospective step, >= 0.
    delta: target delta in (0, 1).
    target_epsilon: budget; ``None`` means no budget (always allowed unless
      the epsilon is NaN).
    count: number of identical steps to compose at once.

  Returns:
    :class:`PrivacyGuard`.

  Raises:
    ValueError: for concrete out-of-range ``delta`` or ``target_epsilon``
      (and, through the accountant, ``q`` or ``sigma``).

  Traced invalid q or sigma give a NaN proposed epsilon; such a step is
  refused (``allowed`` False) and the accountant is left unchanged.

  Cost: one evaluation of ``sgm_rdp`` at all the accountant's orders per call
  (tens of milliseconds on a CPU for the default orders). A training step that runs
  every few milliseconds should use :func:`make_dpsgd_step`, which computes
  the per-step RDP curve once per distinct (q, sigma).

  Examples:
    >>> import jaxrdp
    >>> acc = jaxrdp.RdpAccountant().init()
    >>> g = jaxrdp.train.privacy_guard(acc, 0.01, 1.0, delta=1e-5, target_epsilon=1.0)
    >>> bool(g.allowed)
    True
  """
  check_range("q", q, lower=0.0, upper=1.0)
  check_range("sigma", sigma, lower=0.0, allow_inf=True)
  check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  if target_epsilon is not None:
    check_range("target_epsilon", target_epsilon, lower=0.0, allow_inf=True)
  with x64_context():
    q64, s64 = jnp.asarray(q, jnp.float64), jnp.asarray(sigma, jnp.float64)
    step_rdp = _sgm_curve(q64, s64, accountant.orders)
  return _guard(accountant, step_rdp, q, sigma, delta, target_epsilon, True, count)


class SGMCache(NamedTuple):
  """Per-step RDP curve of the last (q, sigma) a schedule produced (a pytree).

  ``rdp`` is ``sgm_rdp(q, sigma, orders)`` at the accountant's orders (static
  metadata of the accountant state, so they need no run-time comparison);
  ``q = NaN`` marks an empty cache (NaN equals nothing, so the first lookup
  always computes).
  """

  q: jax.Array
  sigma: jax.Array
  rdp: jax.Array


class DPSGDState(NamedTuple):
  """Train state of :func:`make_dpsgd_step` (a pytree).

  Attributes:
    params: model parameters.
    opt_state: optax optimizer state.
    accountant: privacy spent so far (:class:`jaxrdp.accountants.RdpState`).
    key: PRNG key for sampling and noise (advances only on applied steps).
    step: int32 number of applied private steps.
    sgm_cache: :class:`SGMCache` used when q or sigma is a schedule
      (derived data: saving and restoring it is harmless, and a stale entry
      is never used because its q and sigma are compared first).
    sampler: the batch sampler's configuration and seed
      (:class:`jaxrdp.train.SamplerState`, or
      :class:`jaxrdp.train.AllocationSamplerState` for random allocation) when
      the run uses one (``dpsgd_init(..., sampler=)``), else None; with ``step``
      it is the sampler's whole state, so a checkpoint resumes its batches exactly.
  """

  params: PyTree
  opt_state: PyTree
  accountant: RdpState
  key: jax.Array
  step: jax.Array
  sgm_cache: SGMCache
  sampler: Any = None


class StepInfo(NamedTuple):
  """What one call of the step function did (a pytree of scalars).

  Attributes:
    applied: bool, False when the step was refused (budget, invalid q/sigma).
    epsilon: epsilon(delta) spent after this call.
    order: RDP order attaining ``epsilon``.
    q: the sampling rate of this step (from the schedule).
    sigma: the noise multiplier of this step (from the schedule).
  """

  applied: jax.Array
  epsilon: jax.Array
  order: jax.Array
  q: jax.Array
  sigma: jax.Array


def dpsgd_init(
  params: PyTree,
  optimizer: Any,
  key: jax.Array,
  *,
  orders: ArrayLike | None = None,
  sampler: Any = None,
) -> DPSGDState:
  """Initial :class:`DPSGDState`: zero privacy spent, step 0.

  Args:
    params: initial model parameters.
    optimizer: optax ``GradientTransformation``.
    key: PRNG key (raw ``uint32[2]`` keys checkpoint most simply).
    orders: RDP orders of the accountant (default ``jaxrdp.DEFAULT_ORDERS``).
    sampler: the run's batch sampler, if any (``PoissonSampler``,
      ``FixedSizeSampler``, ``ShuffleSampler``, ``RandomAllocationSampler``); stored
      as ``state.sampler``.
  """
  accountant = RdpAccountant(orders).init()
  with x64_context():
    cache = SGMCache(
      q=jnp.asarray(jnp.nan, jnp.float64),
      sigma=jnp.asarray(jnp.nan, jnp.float64),
      rdp=jnp.zeros_like(accountant.rdp),
    )
  return DPSGDState(
    params=params,
    opt_state=optimizer.init(params),
    accountant=accountant,
    key=key,
    step=jnp.zeros((), dtype=jnp.int32),
    sgm_cache=cache,
    sampler=None if sampler is None else _sampled.sampler_state(sampler),
  )


def _evaluate(schedule: Schedule, step: jax.Array) -> jax.Array:
  # Evaluated with float64 enabled, so a Python float (constant or returned
  # by a schedule) is used exactly, by the accountant and the mechanism alike.
  with x64_context():
    value = schedule(step) if callable(schedule) else schedule
    return jnp.asarray(value, jnp.float64)


def _cached_curve(cache: SGMCache, q, sigma, orders) -> tuple[jax.Array, SGMCache]:
  """sgm_rdp(q, sigma, orders), recomputed only when (q, sigma) changed.

  ``lax.cond`` runs one branch (a select under vmap, which computes both), so
  a piecewise-constant schedule pays for one curve per phase, not per step.
  """
  with x64_context():
    q64 = jnp.asarray(q, jnp.float64)
    s64 = jnp.asarray(sigma, jnp.float64)
    hit = (cache.q == q64) & (cache.sigma == s64)
    rdp = lax.cond(hit, lambda: cache.rdp, lambda: _sgm_curve(q64, s64, orders))
    return rdp, SGMCache(q64, s64, rdp)


def make_dpsgd_step(
  loss_fn: Callable[[PyTree, PyTree], jax.Array],
  optimizer: Any,
  *,
  clip_norm: ArrayLike,
  q: Schedule = None,
  sigma: Schedule,
  delta: ArrayLike,
  target_epsilon: ArrayLike | None = None,
  orders: ArrayLike | None = None,
  sampler: Any = None,
  relation: str | None = None,
) -> Callable[[DPSGDState, PyTree], tuple[DPSGDState, StepInfo]]:
  """Builds a pure DP-SGD step ``step(state, data) -> (state, info)``; jit it.

  One call, with t = ``state.step``, q_t = ``q(t)`` and sigma_t = ``sigma(t)``
  (constants or callables of the int32 step, i.e. schedules):

  1. guard: the accountant is composed with SGM(q_t, sigma_t) and
     epsilon(delta) is read; if it would exceed ``target_epsilon`` (or is
     NaN, or q_t <= 0), the step is refused: the state is returned unchanged
     and ``info.applied`` is False (the stop signal).
  2. otherwise: a Poisson mask of rate q_t over all n examples of ``data``
     (:func:`jaxrdp.train.poisson_sample_mask`), the DP gradient with clip C and
     noise std sigma_t * C normalized by q_t * n (:func:`jaxrdp.train.dp_gradient`),
     one optimizer update, and the composed accountant.

  The branch is a ``lax.cond`` on the traced flag (a select under vmap), so
  nothing recompiles and no Python control flow touches traced values.

  Cost of the accounting: the per-step RDP curve sgm_rdp(q_t, sigma_t, orders)
  is the expensive part (tens of milliseconds for the default orders on a CPU). With
  constant ``q`` and ``sigma`` it is computed once, here, outside the step;
  inside the step remain one vector add and two epsilon conversions. With a
  schedule it is computed inside the step, only when (q_t, sigma_t) differs
  from the previous step's (``state.sgm_cache``), so a piecewise-constant
  schedule costs one curve per phase; a schedule that changes every step pays
  for a curve every step.

  Args:
    loss_fn: scalar loss of one example, ``loss_fn(params, example)``.
    optimizer: optax ``GradientTransformation``.
    clip_norm: per-example L2 clip C > 0.
    q: sampling rate in (0, 1], or a callable of the step count.
    sigma: noise multiplier >= 0, or a callable of the step count.
    delta: delta in (0, 1) at which epsilon is read.
    target_epsilon: optional budget; steps that would exceed it are refused.
    orders: the accountant's RDP orders (default ``jaxrdp.DEFAULT_ORDERS``);
      must equal those given to :func:`dpsgd_init` (they are static metadata
      of the state: a state with other orders raises ValueError when the
      step is traced, and its checkpoint is refused when loaded).
    sampler: a batch sampler of :mod:`jaxrdp.train` (``PoissonSampler`` with a
      capacity, ``FixedSizeSampler``, ``ShuffleSampler``,
      ``RandomAllocationSampler``) instead of ``q``: the step is then
      ``step(state, batch, mask)`` on the sampler's gathered batch of
      ``capacity`` examples, its cost independent of the dataset size, and the
      accountant composes that sampler's mechanism (constant sigma; see
      ``jaxrdp.train._sampled_step``). Random allocation is composed one epoch
      at a time, at the epoch's first step (its privacy is per epoch), with its
      truncation term paid in the epsilon; the budget guard then refuses a whole
      epoch before it starts.
    relation: with ``sampler``, the neighbouring relation (default
      ``"add_remove"``, ``"replace_one"`` for ``FixedSizeSampler``), as in
      :func:`jaxrdp.dpsgd_epsilon`.

  Returns:
    ``step(state: DPSGDState, data: PyTree) -> (DPSGDState, StepInfo)``,
    where every leaf of ``data`` has the same leading axis n (the whole
    training set, or any fixed-size pool Poisson sampling draws from); with
    ``sampler``, ``step(state, batch, mask) -> (DPSGDState, StepInfo)``.

  Raises:
    ValueError: for concrete out-of-range arguments.
  """
  check_range("clip_norm", clip_norm, lower=0.0, lower_open=True)
  if sampler is not None or relation is not None:
    if sampler is None:
      raise ValueError(
        "relation= goes with sampler= (the full-mask step is Poisson sampling under add/remove)"
      )
    if q is not None:
      raise ValueError("give q or sampler, not both (the sampler sets the rate)")
  elif q is None:
    raise ValueError("q (the Poisson rate, or a schedule) or sampler is required")
  check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  if target_epsilon is not None:
    check_range("target_epsilon", target_epsilon, lower=0.0, allow_inf=True)
  if sampler is not None:
    return _sampled.make_sampled_step(
      loss_fn,
      optimizer,
      sampler=sampler,
      relation=relation,
      clip_norm=clip_norm,
      sigma=sigma,
      delta=delta,
      target_epsilon=target_epsilon,
      orders=orders,
      guard=_guard,
      step_info=StepInfo,
    )
  if not callable(q):
    check_range("q", q, lower=0.0, upper=1.0, lower_open=True)
  if not callable(sigma):
    check_range("sigma", sigma, lower=0.0)
  constant = not callable(q) and not callable(sigma)
  orders_t = RdpAccountant(orders).orders
  orders_a = np.asarray(orders_t, dtype=np.float64)
  if constant:
    # Computed once, eagerly: the step itself then only adds this curve.
    curve_c = _sgm_curve(q, sigma, orders_a)

  def step(state: DPSGDState, data: PyTree) -> tuple[DPSGDState, StepInfo]:
    n = jax.tree.leaves(data)[0].shape[0]
    q_t = _evaluate(q, state.step)
    sigma_t = _evaluate(sigma, state.step)
    check_state_orders(state, orders_t)
    if constant:
      step_rdp = curve_c
      cache = state.sgm_cache
    else:
      step_rdp, cache = _cached_curve(state.sgm_cache, q_t, sigma_t, orders_a)
    # q_t = 0 is a valid accounting input but not a training step (the
    # normalization q n would be 0), so it is refused like a NaN epsilon.
    with x64_context():
      positive = q_t > 0
      expected_batch_size = q_t * n
    guard = _guard(state.accountant, step_rdp, q_t, sigma_t, delta, target_epsilon, positive)

    def apply(s: DPSGDState) -> DPSGDState:
      key, k_sample, k_noise = jax.random.split(s.key, 3)
      mask = poisson_sample_mask(k_sample, n, q_t)
      return noisy_update(
        loss_fn,
        optimizer,
        s,
        data,
        mask,
        k_noise,
        key,
        clip_norm=clip_norm,
        sigma=sigma_t,
        expected_batch_size=expected_batch_size,
      )

    new_state = lax.cond(guard.allowed, apply, lambda s: s, state)
    new_state = new_state._replace(accountant=guard.accountant, sgm_cache=cache)
    info = StepInfo(guard.allowed, guard.epsilon, guard.order, q_t, sigma_t)
    return new_state, info

  return step
