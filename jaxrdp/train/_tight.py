"""The tight epsilon of a training run, read from its state outside the jitted step.

Inside the step, the Renyi-DP accountant guards the budget (it is cheap and
differentiable). The number to publish is the tight one: the steps taken so far,
``state.step``, with the schedule's (q, sigma) at each step, composed by the PLD
accountant (:class:`jaxrdp.accountants.PldAccountant`) in one call. Consecutive steps
with the same (q, sigma) form one phase, so a constant or piecewise-constant
schedule costs one FFT composition whatever the number of steps.

The caller's ``q`` and ``sigma`` are checked against the state itself: the step
composed each applied step's RDP curve into ``state.accountant``, and the phases they
describe must add up to that curve (``check_phases``), or the call raises.

A run with a batch sampler (``dpsgd_init(..., sampler=)``) carries it in its state:
with a capacity-truncated ``PoissonSampler`` the epsilon returned includes the
truncation term (as ``jaxrdp.dpsgd_epsilon(..., capacity=, dataset_size=)``). A
``RandomAllocationSampler`` run is charged as its step charges it, a started epoch
whole: ``RandomAllocation(k / t, Gaussian(sigma), ceil(T / t) t, k)``, by the tight
accountant's certified bracket, with the truncation term of every step of the started
epochs. A fixed-size or shuffled run has no tight construction here and is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.precision import x64_context
from ..accountants._protocol import get_accountant
from ..accountants._truncation import truncated_poisson_epsilon
from ..events._allocation_events import RandomAllocation
from ..events._events import Composed, Gaussian, PoissonSampled, SelfComposed
from ..rdp._accountant import RdpState
from ._sampled_step import _step_curve, sampler_from_state, scheme_of
from ._samplers import PoissonSampler, RandomAllocationSampler

__all__ = ["tight_epsilon"]


def _values(schedule, steps: int) -> np.ndarray:
  # As the step evaluates them (jaxrdp.train._step._evaluate): with float64 enabled,
  # so that a schedule returning a Python float gives the value the step used.

  if not callable(schedule):
    return np.full(steps, float(schedule))
  with x64_context():
    return np.array([float(schedule(np.int32(t))) for t in range(steps)], dtype=np.float64)


def schedule_phases(q: float | Callable, sigma: float | Callable, steps: int) -> list[tuple]:
  """``[(q, sigma, count), ...]``: runs of equal (q, sigma) over steps 0 .. steps - 1."""
  qs, ss = _values(q, steps), _values(sigma, steps)
  phases = []
  start = 0
  for t in range(1, steps + 1):
    if t == steps or qs[t] != qs[start] or ss[t] != ss[start]:
      phases.append((float(qs[start]), float(ss[start]), t - start))
      start = t
  return phases


def tight_epsilon(
  state: Any, *, q: float | Callable, sigma: float | Callable, delta: float, accountant: Any = "pld"
):
  """Tight epsilon of the private steps a DP-SGD run has taken, from its state.

  Args:
    state: a :class:`jaxrdp.train.DPSGDState` (its ``step`` counts the applied steps).
    q, sigma: the sampling rate and noise multiplier the step was built with
      (constants, or the same callables of the step count).
    delta: the delta of the guarantee, in (0, 1).
    accountant: ``"pld"`` (default) or another accountant, by name or object.

  Returns:
    The accountant's epsilon result (``PldEpsilon(epsilon, epsilon_lower)`` for
    ``"pld"``); epsilon 0 before the first step. For a run with a
    ``PoissonSampler`` or a ``RandomAllocationSampler`` (``state.sampler``), the
    epsilon at which the truncated run is (epsilon, ``delta``)-DP, truncation term
    included; for random allocation, of every started epoch (as the step charges
    it: ``jaxrdp.dpsgd_epsilon(k / t, sigma, ceil(T / t) t, delta,
    sampling="allocation", accountant=, capacity=, dataset_size=)`` for k = 1).

  Raises:
    ValueError: for a run whose ``state.sampler`` is a ``FixedSizeSampler`` or
      ``ShuffleSampler`` (the Poisson epsilon would under-report them; use
      ``jaxrdp.dpsgd_epsilon(..., sampling=)``), a ``q`` other than its
      ``PoissonSampler``'s or ``RandomAllocationSampler``'s rate, a ``sigma``
      schedule with a ``RandomAllocationSampler``, or a ``q`` and ``sigma`` that are not what the
      state's own (Renyi-DP) accountant composed: ``state.accountant`` must hold
      the RDP curve of ``state.step`` steps of Poisson sampling at ``q`` with
      noise ``sigma`` under add/remove (``check_phases``), so a wrong argument
      cannot silently under-report the run.

  Examples:
    >>> import jax.numpy as jnp, jaxrdp
    >>> from jaxrdp.train._tight import schedule_phases
    >>> schedule_phases(0.01, lambda t: jnp.where(t < 3, 2.0, 1.0), 5)
    [(0.01, 2.0, 3), (0.01, 1.0, 2)]
  """
  steps = int(np.asarray(state.step))
  run_sampler = _sampler_of(state)
  if isinstance(run_sampler, RandomAllocationSampler):
    return _allocation_epsilon(state, run_sampler, q, sigma, steps, delta, accountant)
  sampler = _poisson_sampler_of(run_sampler, q)
  phases = schedule_phases(q, sigma, steps)
  check_phases(state, phases, sampler is not None)
  acct = get_accountant(accountant)
  events = tuple(SelfComposed(PoissonSampled(qv, Gaussian(sv)), n) for qv, sv, n in phases)
  composed = acct.compose(acct.init(), Composed(events))
  if sampler is None:
    return acct.get_epsilon(composed, delta)
  return truncated_poisson_epsilon(
    lambda d: acct.get_epsilon(composed, d),
    sampler.q,
    steps,
    delta,
    capacity=sampler.capacity,
    dataset_size=sampler.n,
  )


def _sampler_of(state: Any):
  """The run's sampler, rebuilt from its state (None without one)."""
  if getattr(state, "sampler", None) is None:
    return None
  return sampler_from_state(state.sampler)


def _allocation_epsilon(state, sampler, q, sigma, steps, delta, accountant):
  """The tight epsilon of a ``RandomAllocationSampler`` run after ``steps`` steps."""
  if callable(q) or float(q) != sampler.q:
    raise ValueError(
      f"q must be the run's RandomAllocationSampler rate k / t = {sampler.q!r}, got {q!r}"
    )
  if callable(sigma):
    raise ValueError("sigma must be a constant for a RandomAllocationSampler run, got a schedule")
  t = sampler.steps_per_epoch
  epochs = -(-steps // t)
  epoch = sampler.event(float(sigma))
  held = getattr(state, "accountant", None)
  if isinstance(held, RdpState):
    orders = np.asarray(held.orders, dtype=np.float64)
    with x64_context():
      curve = np.asarray(_step_curve(epoch, orders))
    with np.errstate(invalid="ignore"):
      total = np.where(epochs > 0, epochs * curve, 0.0)
    _require_held_curve(
      held,
      total,
      epochs * t,
      f"sigma is not what this run's steps used: {epochs} epochs of random allocation "
      f"(k = {sampler.selected} of t = {t} steps) at sigma={float(sigma)!r}",
    )
  acct = get_accountant(accountant)
  if epochs == 0:
    return acct.get_epsilon(acct.compose(acct.init(), Composed(())), delta)
  # The steps run: the upper bound charges the started epoch whole, the lower bound only
  # the steps that were run (a lower bound of more steps is none of these).
  event = RandomAllocation(sampler.q, Gaussian(float(sigma)), steps, sampler.selected)
  composed = acct.compose(acct.init(), event)
  return truncated_poisson_epsilon(
    lambda d: acct.get_epsilon(composed, d),
    sampler.q,
    epochs * t,
    delta,
    capacity=sampler.capacity,
    dataset_size=sampler.n,
  )


def _poisson_sampler_of(sampler, q):
  """The run's ``sampler`` if it is a ``PoissonSampler`` (None without one); refuses the
  other samplers."""
  if sampler is None:
    return None
  if not isinstance(sampler, PoissonSampler):
    raise ValueError(
      f"this run used a {type(sampler).__name__}, which is not Poisson sampling: its "
      "tight Poisson epsilon would under-report it; report "
      f"jaxrdp.dpsgd_epsilon(q, sigma, steps, delta, sampling={scheme_of(sampler)!r}) "
      "(Renyi DP)"
    )
  if callable(q) or float(q) != sampler.q:
    raise ValueError(f"q must be the run's PoissonSampler rate {sampler.q!r}, got {q!r}")
  return sampler


def check_phases(state: Any, phases: list[tuple], sampler_run: bool = False) -> None:
  """Raises ValueError unless ``state.accountant`` holds the RDP of ``phases``.

  The step composes, at every applied step, the RDP curve of the Sampled Gaussian
  Mechanism at that step's (q, sigma) into ``state.accountant`` (Mironov 2017,
  arXiv:1702.07476, Prop. 1: RDP adds up). The phases ``[(q, sigma, count), ...]``
  the caller describes must add up to the same curve at the accountant's orders, to
  the rounding of T additions (relative 1e-9 + 4 T eps). A state without a Renyi-DP
  accountant is not checked.
  """
  held = getattr(state, "accountant", None)
  if not isinstance(held, RdpState):
    return
  orders = np.asarray(held.orders, dtype=np.float64)
  rdp = np.asarray(held.rdp, dtype=np.float64)
  total = np.zeros_like(rdp)
  if phases:
    qs = np.array([p[0] for p in phases])  # the curves: [phases, orders]
    ss = np.array([p[1] for p in phases])
    counts = np.array([[p[2]] for p in phases], dtype=np.float64)
    with x64_context():
      event = PoissonSampled(qs, Gaussian(ss))
      curves = np.asarray(_step_curve(event, orders))
    with np.errstate(invalid="ignore"):
      total = np.sum(np.where(counts > 0, counts * curves, 0.0), axis=0)
  steps = sum(p[2] for p in phases)
  q_desc = "q (the PoissonSampler's rate) is right, so sigma" if sampler_run else "q or sigma"
  qv, sv, _ = phases[0] if phases else (np.nan, np.nan, 0)
  more = len(phases) > 1
  _require_held_curve(
    held,
    total,
    steps,
    f"{q_desc} is not what this run's steps used: {steps} steps of Poisson sampling at "
    f"q={qv!r}, sigma={sv!r}{' (and the later phases)' if more else ''}",
    " (and a run under relation='replace_one' has no tight epsilon here)" if sampler_run else "",
  )


def _require_held_curve(held: RdpState, total, steps: int, what: str, after: str = "") -> None:
  """Raises ValueError (``what`` give ..., ``after``) unless ``held.rdp`` equals
  ``total`` at every order, to the rounding of ``steps`` additions (relative 1e-9 +
  4 T eps), infinities in the same places."""
  orders = np.asarray(held.orders, dtype=np.float64)
  rdp = np.asarray(held.rdp, dtype=np.float64)
  total = np.asarray(total, dtype=np.float64)
  rtol = 1e-9 + 4.0 * steps * np.finfo(np.float64).eps
  same_inf = np.isinf(rdp) == np.isinf(total)
  finite = np.isfinite(rdp) & np.isfinite(total)
  close = np.abs(rdp - total) <= rtol * np.maximum(np.abs(rdp), np.abs(total))
  if np.all(same_inf) and np.all(close[finite]):
    return
  k = int(np.argmax(~same_inf | (finite & ~close)))
  raise ValueError(
    f"{what} give RDP {total[k]:.6g} at order {orders[k]:g}, while the state's accountant "
    f"composed {rdp[k]:.6g}; pass the q and sigma (or schedules) the step was built with" + after
  )
