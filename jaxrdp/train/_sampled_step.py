"""The DP-SGD step on sampler batches: O(capacity) per step, one accountant per scheme.

:func:`jaxrdp.train.make_dpsgd_step` with ``sampler=`` builds this step. The
sampler (:class:`~jaxrdp.train.PoissonSampler`, :class:`~jaxrdp.train.FixedSizeSampler`,
:class:`~jaxrdp.train.ShuffleSampler` or :class:`~jaxrdp.train.RandomAllocationSampler`)
runs on the host; the step receives the gathered batch of its ``capacity`` examples and the validity mask::

    step = jax.jit(make_dpsgd_step(loss, opt, sampler=s, clip_norm=1.0, sigma=1.0,
                                   delta=1e-5))
    state = dpsgd_init(params, opt, key, sampler=s)
    while ...:
        batch, mask = next_batch(s, data, state)    # host: numpy gather of B_max rows
        state, info = step(state, batch, mask)

A dataset kept on the device works the same way with the gather inside jit::

    step_dev = jax.jit(lambda st, idx, m: step(st, gather_batch(data_dev, idx), m))
    idx, mask = s.sample(int(state.step)); state, info = step_dev(state, idx, mask)

What the accountant composes (sigma is the DP-SGD noise multiplier, the relation's
sensitivity is applied here, as in ``jaxrdp.dpsgd_epsilon(sampling=, relation=)``):

* Poisson: the Sampled Gaussian Mechanism at rate q every step (add/remove by
  default). Truncation at the capacity is *not* in the in-jit epsilon: the run's
  guarantee adds ``truncated_poisson_delta(sampler.truncation_delta(T), eps)`` to
  delta, or, equivalently, report ``jaxrdp.dpsgd_epsilon(q, sigma, T, delta,
  capacity=, dataset_size=)``. With :func:`~jaxrdp.train.default_capacity` the term
  is at most 1e-3 delta.
* Fixed-size: WBK19 Thm 27 at gamma = B / n, replace-one (sigma / 2), every step.
* Shuffled: one Gaussian mechanism per example per epoch, composed at the first
  step of each epoch (t mod steps_per_epoch == 0), so after T steps the
  accountant holds ceil(T / steps_per_epoch) epochs.
* Random allocation (k of every epoch's t steps per example; Feldman and
  Shenfeld 2025, arXiv:2502.08202): its privacy is that of a whole epoch
  (``RandomAllocation(k / t, Gaussian(sigma), t, k)``, the sampler's
  ``event``), not a per-step share of it, so the epoch's RDP is composed at
  the epoch's first step, before any of its steps is released: after T steps
  the accountant holds ceil(T / t) epochs, exactly the RDP of the one-shot
  event ``RandomAllocation(k / t, Gaussian(sigma), T, k)`` (a started epoch
  counts whole). The epsilon reported mid-epoch is therefore valid for what
  was released so far: the steps released are a post-processing of the whole
  epoch's release. Truncation at the capacity *is* in the in-jit epsilon
  here: with p = P[Binomial(n + 1, k / t) > capacity] (rounded up,
  ``sampler.truncation_delta(1)``), a started epoch also pays its t steps'
  term, eta = t p ceil(T / t) (a union bound over the steps, the batches being
  Binomial(n, k / t) marginally), and epsilon is read at a delta' with
  delta' + (1 + e^epsilon) eta <= delta (:mod:`jaxrdp.train._truncated_epsilon`).
  At every epoch boundary the step's epsilon equals ``jaxrdp.dpsgd_epsilon(k /
  t, sigma, T, delta, sampling="allocation", capacity=, dataset_size=n)`` (k =
  1); mid-epoch it is that value at the epoch's end, never below the one-shot
  value for the T steps taken. The budget guard therefore decides once per
  epoch, at its first step: an epoch that would exceed ``target_epsilon`` is
  refused before it starts, and the steps of an allowed epoch are never refused
  by the budget.

Checkpoints: the samplers are counter-based (the batch of step t is a function
of their seed and t), so the state carries the sampler's configuration and seed
(:class:`SamplerState`, ``state.sampler``) and the counter is ``state.step``;
:func:`sampler_from_state` rebuilds the sampler from a loaded checkpoint, and a
resumed run draws the batches the uninterrupted one would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._core.precision import x64_context
from .._core.validation import StaticArray, check_range, concrete_or_none
from ..accountants._truncation import truncated_poisson_epsilon
from ..events._dpsgd import resolve_scheme
from ..events._events import validate_event
from ..rdp._accountant import RdpAccountant
from ..rdp._rules import check_rdp_event, rdp_curve_f64
from ._dp_gradient import gather_batch
from ._samplers import (
  FixedSizeSampler,
  PoissonSampler,
  RandomAllocationSampler,
  ShuffleSampler,
  default_capacity,
)
from ._update import check_state_orders, noisy_update

__all__ = [
  "SamplerState",
  "AllocationSamplerState",
  "sampler_state",
  "sampler_from_state",
  "next_batch",
  "make_sampled_step",
  "scheme_of",
]

# The samplers by their checkpoint tag.
_BY_KIND = {
  cls.kind: cls
  for cls in (PoissonSampler, FixedSizeSampler, ShuffleSampler, RandomAllocationSampler)
}


class SamplerState(NamedTuple):
  """A sampler's configuration and seed, as arrays (saved in checkpoints).

  Attributes:
    kind: int32, 0 Poisson, 1 fixed-size, 2 shuffled.
    n: int32 dataset size.
    size: int32 capacity (Poisson) or batch size.
    q: float64 Poisson rate (B / n for the others).
    seed: int64 seed.
  """

  kind: jax.Array
  n: jax.Array
  size: jax.Array
  q: jax.Array
  seed: jax.Array


class AllocationSamplerState(NamedTuple):
  """A :class:`~jaxrdp.train.RandomAllocationSampler`'s configuration and seed, as arrays.

  (A type of its own, so that the checkpoints of the other samplers keep their
  structure.)

  Attributes:
    kind: int32, 3 (random allocation).
    n: int32 dataset size.
    size: int32 capacity.
    steps_per_epoch: int32 t.
    selected: int32 k, the steps each example is in per epoch.
    seed: int64 seed.
  """

  kind: jax.Array
  n: jax.Array
  size: jax.Array
  steps_per_epoch: jax.Array
  selected: jax.Array
  seed: jax.Array


def scheme_of(sampler) -> str:
  """``"poisson"``, ``"fixed"``, ``"shuffle"`` or ``"allocation"`` (its ``sampling=``
  name) for a sampler."""
  _check_sampler(sampler)
  return sampler.sampling


def _check_sampler(sampler):
  if _BY_KIND.get(getattr(sampler, "kind", None)) is not type(sampler):
    raise ValueError(
      "sampler must be a PoissonSampler, FixedSizeSampler, ShuffleSampler or "
      f"RandomAllocationSampler, got {type(sampler).__name__}"
    )


def _rate(sampler) -> float:
  if isinstance(sampler, (PoissonSampler, RandomAllocationSampler)):
    return sampler.q
  return sampler.batch_size / sampler.n


def sampler_state(sampler) -> SamplerState | AllocationSamplerState:
  """The :class:`SamplerState` of ``sampler`` (an :class:`AllocationSamplerState` for
  a ``RandomAllocationSampler``)."""
  _check_sampler(sampler)
  if isinstance(sampler, RandomAllocationSampler):
    with x64_context():
      return AllocationSamplerState(
        kind=jnp.asarray(sampler.kind, jnp.int32),
        n=jnp.asarray(sampler.n, jnp.int32),
        size=jnp.asarray(sampler.capacity, jnp.int32),
        steps_per_epoch=jnp.asarray(sampler.steps_per_epoch, jnp.int32),
        selected=jnp.asarray(sampler.selected, jnp.int32),
        seed=jnp.asarray(sampler.seed, jnp.int64),
      )
  with x64_context():
    return SamplerState(
      kind=jnp.asarray(sampler.kind, jnp.int32),
      n=jnp.asarray(sampler.n, jnp.int32),
      size=jnp.asarray(sampler.capacity, jnp.int32),
      q=jnp.asarray(_rate(sampler), jnp.float64),
      seed=jnp.asarray(sampler.seed, jnp.int64),
    )


def sampler_from_state(state: SamplerState | AllocationSamplerState):
  """The sampler described by ``state`` (e.g. ``loaded.sampler`` after a checkpoint).

  Examples:
    >>> from jaxrdp.train import PoissonSampler
    >>> s = PoissonSampler(n=1000, q=0.05, capacity=80, seed=3)
    >>> sampler_from_state(sampler_state(s)) == s
    True
  """
  kind, n, size, seed = (int(np.asarray(x)) for x in (state.kind, state.n, state.size, state.seed))
  cls = _BY_KIND.get(kind)
  if cls is None or (cls is RandomAllocationSampler) != isinstance(state, AllocationSamplerState):
    raise ValueError(f"unknown sampler kind {kind} for a {type(state).__name__}")
  if cls is RandomAllocationSampler:
    t, k = int(np.asarray(state.steps_per_epoch)), int(np.asarray(state.selected))
    return RandomAllocationSampler(n=n, steps_per_epoch=t, capacity=size, selected=k, seed=seed)
  if cls is PoissonSampler:
    return PoissonSampler(n=n, q=float(np.asarray(state.q)), capacity=size, seed=seed)
  return cls(n=n, batch_size=size, seed=seed)


def next_batch(sampler, data, state) -> tuple[Any, np.ndarray]:
  """``(batch, mask)`` of the step ``state.step`` (host): the gathered examples and mask."""
  idx, mask = sampler.sample(int(np.asarray(state.step)))
  return gather_batch(data, idx), mask


@functools.partial(jax.jit, static_argnames=("orders_static",))
def _curve_jit(event, orders, *, orders_static):
  # Jitted: eagerly, the SGM kernel would dispatch op by op (seconds).
  with x64_context():
    return rdp_curve_f64(event, orders, orders_static)


def _step_curve(event, orders_a) -> jax.Array:
  """The RDP curve of the sampler's event (one step, or one epoch for shuffling),
  computed once, in float64.

  As ``jaxrdp.train._step._sgm_curve``: the call is made with float64 enabled,
  whatever the caller's x64 setting (a jitted call with x64 off would take its
  arguments and give its result in float32, rounded to nearest), and the curve
  stays a float64 array."""
  with x64_context():
    event = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), event)
    return _curve_jit(
      event,
      jnp.asarray(orders_a, jnp.float64),
      orders_static=StaticArray(np.asarray(orders_a, np.float64)),
    )


def _check_allocation_capacity(sampler, eta_per_epoch, delta) -> None:
  """Raises ValueError if one epoch's truncation term alone uses up ``delta``.

  The truncated run's delta is at least delta' + 2 eta (epsilon >= 0), so with
  2 eta >= delta no epsilon holds; a smaller capacity term is paid in the epsilon.
  """
  delta = concrete_or_none(delta)
  if delta is None or 2.0 * eta_per_epoch < float(delta):  # (a traced delta: the epsilon is inf)
    return
  suggested = default_capacity(sampler.n, sampler.q, sampler.steps_per_epoch, float(delta))
  raise ValueError(
    f"capacity {sampler.capacity} is too small for this RandomAllocationSampler: one "
    f"epoch's batches exceed it with probability up to {eta_per_epoch:.3g}, which uses up "
    f"delta = {float(delta):g}; raise the capacity (jaxrdp.train.default_capacity(n, q, "
    f"steps, delta) for the run's steps; {suggested} for one epoch)"
  )


def make_sampled_step(
  loss_fn,
  optimizer,
  *,
  sampler,
  relation,
  clip_norm,
  sigma,
  delta,
  target_epsilon,
  orders,
  guard,
  step_info,
) -> Callable:
  """The step of :func:`jaxrdp.train.make_dpsgd_step` with ``sampler=`` (module doc)."""
  _check_sampler(sampler)
  _, relation = resolve_scheme(sampler.sampling, relation)
  if callable(sigma):
    raise ValueError(
      "sigma must be a constant with a sampler (schedules need q and "
      "sigma per step; use the full-mask step for those)"
    )
  check_range("sigma", sigma, lower=0.0)
  q = _rate(sampler)
  spe = sampler.steps_per_event
  # Random allocation pays its truncation term in the epsilon, per started epoch
  # (a relative 1e-12 more for the rounding of the products in the step).
  eta_per_event = None
  if isinstance(sampler, RandomAllocationSampler):
    eta_per_event = spe * sampler.truncation_delta(1) * (1.0 + 1e-12)
    _check_allocation_capacity(sampler, eta_per_event, delta)
  orders_t = RdpAccountant(orders).orders
  orders_a = np.asarray(orders_t, dtype=np.float64)
  event = sampler.event(sigma, relation)
  validate_event(event)
  check_rdp_event(event)
  curve = _step_curve(event, orders_a)
  capacity = sampler.capacity
  norm = sampler.expected_batch_size
  with x64_context():
    q64 = jnp.asarray(q, jnp.float64)
    s64 = jnp.asarray(sigma, jnp.float64)

  def step(state, batch, mask):
    check_state_orders(state, orders_t)
    lead = jax.tree.leaves(batch)[0].shape[0]
    if lead != capacity or jnp.shape(mask) != (capacity,):
      raise ValueError(
        f"batch and mask must have the sampler's capacity {capacity} "
        f"as leading axis, got {lead} and {jnp.shape(mask)}"
      )
    # Shuffling and random allocation charge a whole epoch at the epoch's start.
    count = 1 if spe == 1 else jnp.where(state.step % spe == 0, 1, 0)
    truncation = None
    if eta_per_event is not None:
      with x64_context():
        # Started epochs: ceil(step / t) so far (in integers: no rounding, no
        # overflow), plus the one this step may start.
        started = (state.step // spe + (state.step % spe != 0)).astype(jnp.float64)
        truncation = (started * eta_per_event, (started + count) * eta_per_event)
    g = guard(state.accountant, curve, q64, s64, delta, target_epsilon, True, count, truncation)

    def apply(s):
      key, k_noise = jax.random.split(s.key)
      return noisy_update(
        loss_fn,
        optimizer,
        s,
        batch,
        mask,
        k_noise,
        key,
        clip_norm=clip_norm,
        sigma=sigma,
        expected_batch_size=norm,
      )

    new_state = lax.cond(g.allowed, apply, lambda s: s, state)
    new_state = new_state._replace(accountant=g.accountant)
    return new_state, step_info(g.allowed, g.epsilon, g.order, q64, s64)

  return step


def epsilon_with_truncation(accountant, sampler, steps, delta):
  """epsilon of a run with a truncating sampler, from its accountant, truncation included.

  For a :class:`~jaxrdp.train.PoissonSampler` the accountant
  (``state.accountant``) holds the untruncated Poisson RDP of the ``steps``
  applied steps; this returns the epsilon at which the truncated run is
  (epsilon, ``delta``)-DP *including* the truncation term
  (``jaxrdp.dpsgd_epsilon(..., capacity=, dataset_size=)``, here read from the
  accountant instead of recomputing the SGM curve).

  For a :class:`~jaxrdp.train.RandomAllocationSampler` the accountant holds
  ceil(steps / t) epochs, and the truncation term is paid for all the steps of
  those epochs (ceil(steps / t) t steps), as the training step does: this is
  the epsilon the step reported after ``steps`` steps (to rounding).

  Returns:
    ``EpsilonResult``.

  Raises:
    ValueError: if ``sampler`` is not one of these two, or the truncation term
      alone uses up ``delta``.
  """
  if isinstance(sampler, RandomAllocationSampler):
    t = sampler.steps_per_epoch
    steps = -(-int(steps) // t) * t
  elif not isinstance(sampler, PoissonSampler):
    raise ValueError(
      f"sampler must be a PoissonSampler or RandomAllocationSampler, got {type(sampler).__name__}"
    )
  acct = RdpAccountant(np.asarray(accountant.orders, np.float64))
  return truncated_poisson_epsilon(
    lambda d: acct.get_epsilon(accountant, d),
    sampler.q,
    int(steps),
    delta,
    capacity=sampler.capacity,
    dataset_size=sampler.n,
  )
