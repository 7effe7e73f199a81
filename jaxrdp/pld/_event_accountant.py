"""The PLD accountant behind the accountant protocol (``accountant="pld"``).

It turns an event into the engine's phases (:class:`Phase`: ``(q, scale, steps)`` of one
producer, ``_producers``): a Gaussian is a phase with ``q = 1``; a Poisson-subsampled
Gaussian a phase of its own; a Laplace mechanism, plain or Poisson-subsampled under
add/remove, a Laplace phase; fixed-size batches of a Gaussian under replace-one a
phase of the envelope pair at ``sigma / 2`` (its lower bound is then the realized
Poisson directions', see ``_run_phases``); ``SelfComposed`` multiplies the steps of what it repeats
(composition is commutative, so ``k`` repetitions of a composition are each part ``k``
times); ``Composed`` concatenates; shuffled epochs (``ShuffledEpochs``: each example in
one batch per epoch, no amplification) are the Gaussian mechanism at the relation's
effective noise multiplier composed ``ceil(epochs)`` times, a phase with ``q = 1``.
These are composed by the engine (``_accountant.answer_phases``), traced or not. An
event with any other mechanism (randomized response, (eps, delta)-DP, the discrete
Laplace, mixtures of Gaussians, the truncated subsampled Gaussian, random allocation, a
Laplace scale or a fixed-size sigma of 0 or inf, ...) is kept as an
event and the whole composition, its engine phases included, is accounted by the
generic discrete-PLD path (``_generic``, whose leaf types beyond the built-in ones are
registered rules, ``register_generic_rule``): concrete inputs only, one composition per
configuration of the broadcast leaves. Others raise ``NotImplementedError`` naming the
event type.

The state is the tuple of phases composed so far (a pytree of arrays). It is
meant to be read outside a jitted training step: the tight epsilon of a whole
run is one call over its phases, while the step keeps the Renyi-DP guard.

The lower bound. The engine's ``epsilon_lower`` bounds the epsilon of the phases
it composes, which for shuffled epochs is the Gaussian mechanism's: above the
true epsilon of shuffling, so not a lower bound of it. A state holding shuffled
epochs therefore reports instead the event's own certified lower bound
(:func:`jaxrdp.events.event_epsilon_lower_bound`: Chua et al. 2024,
arXiv:2403.17673), the largest over such events composed (each is a
post-processing of the whole), 0 where none is known.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.numerics import raise_subnormal
from .._core.validation import check_range, is_concrete
from ..events._allocation_events import RandomAllocation, steps_per_epoch
from ..events._events import (
  Composed,
  Gaussian,
  Laplace,
  NoOp,
  PoissonSampled,
  SelfComposed,
  validate_event,
)
from ..events._lower_bounds import event_delta_lower_bound, event_epsilon_lower_bound
from ..events._sampling_events import FixedSizeSampled, ShuffledEpochs
from ..mechanisms._sampled_without_replacement import effective_noise_multiplier
from ..rdp._event_curves import effective_sigma_f64, gaussian_terms
from . import _producers, _rules
from ._accountant import DEFAULT_RTOL, MAX_GRID_SIZE, PldDelta, PldEpsilon, answer_phases

__all__ = ["PldAccountant", "PldState", "Phase", "event_phases", "pld_unsupported"]


def _zeros(like):
  """Upper and lower bound 0 (nothing released), float64 as every answer, of ``like``'s shape."""
  with _precision.Float64Scope() as scope:
    zero = jnp.zeros(jnp.shape(like), jnp.float64)
  return scope.finalize((zero, zero), (False, True))


@functools.partial(
  jax.tree_util.register_dataclass, data_fields=["q", "scale", "steps"], meta_fields=["family"]
)
@dataclasses.dataclass(frozen=True)
class Phase:
  """``steps`` steps of one Poisson-subsampled mechanism of the engine (``_producers``).

  Attributes:
    q: sampling rate (1: every step sees the whole dataset).
    scale: the noise multiplier (Gaussian), the Laplace scale per unit of sensitivity, or
      the fixed-size envelope's effective multiplier ``sigma / 2``.
    steps: number of steps.
    family: the producer's name (static).
  """

  q: Any
  scale: Any
  steps: Any
  family: str = _producers.GAUSSIAN


class PldState(NamedTuple):
  """Everything composed so far.

  Attributes:
    phases: the engine's phases (``Phase``: rate, scale, steps, family), a pytree of arrays.
    events: the events with other mechanisms (accounted by the generic path).
    shuffled: the composed events holding shuffled epochs, whose own lower bound
      replaces the engine's (see the module docstring).
  """

  phases: tuple = ()
  events: tuple = ()
  shuffled: tuple = ()


def pld_unsupported(event: Any) -> str | None:
  """``None`` if the tight accountant can account ``event``, else the part it cannot (a phrase).

  Structural: the engine's events (see :func:`engine_unsupported`), and
  compositions of Gaussian, Laplace, randomized response (binary, k-ary
  replace-one and replace-special), (eps, delta)-DP, exponential-mechanism and
  permute-and-flip (as pure eps-DP), discrete Laplace, mixture-of-Gaussians,
  truncated subsampled Gaussian and non-private events, Poisson-subsampled
  Gaussian or Laplace mechanisms under add/remove, and the event types with a
  registered rule of the generic path (``_generic.register_generic_rule``, all of them
  loaded by ``_rules``: random allocation of Gaussian mechanisms, fixed-size batches
  under replace-one).
  """
  if engine_unsupported(event) is None:
    return None
  return _rules.generic_unsupported(event)


def _positive_scale(scale) -> bool:
  """A noise scale the engine composes (a Laplace scale, a fixed-size sigma): positive
  (concrete) or traced (invalid values give NaN). A concrete scale of 0 (no noise) or inf
  (no release) stays with the generic path."""
  if not is_concrete(scale):
    return True
  arr = np.asarray(scale, np.float64)
  return bool(np.all((arr > 0) & np.isfinite(arr)))


def engine_unsupported(event: Any) -> str | None:
  """``None`` if the engine composes ``event`` (``_producers``), else the part it cannot.

  Structural: Gaussian and Poisson-subsampled Gaussian mechanisms (a Gaussian, or
  Gaussians composed on the sample) under add/remove, shuffled epochs (under either
  relation: Gaussians at its effective multiplier), Laplace and Poisson-subsampled
  Laplace mechanisms under add/remove (a positive scale), fixed-size batches of a
  Gaussian under replace-one (a positive sigma), and their compositions.
  """
  if isinstance(event, (NoOp, Gaussian, ShuffledEpochs)):
    return None
  if isinstance(event, Laplace):
    return None if _positive_scale(event.scale) else "Laplace events with scale 0 or inf"
  if isinstance(event, FixedSizeSampled):
    if event.relation != "replace_one" or not isinstance(event.inner, Gaussian):
      return "FixedSizeSampled events other than of a Gaussian under replace-one"
    if not _positive_scale(event.inner.sigma):
      return "FixedSizeSampled events with sigma 0 or inf"
    return None
  if isinstance(event, SelfComposed):
    return engine_unsupported(event.event)
  if isinstance(event, Composed):
    for e in event.events:
      why = engine_unsupported(e)
      if why is not None:
        return why
    return None
  if isinstance(event, PoissonSampled):
    if isinstance(event.inner, Laplace) and event.relation == "add_remove":
      return engine_unsupported(event.inner)
    if gaussian_terms(event.inner) is None:
      return (
        f"PoissonSampled({type(event.inner).__name__}) events (no privacy-loss distribution "
        "of other subsampled mechanisms is implemented)"
      )
    if event.relation != "add_remove":
      return (
        f"PoissonSampled events under relation={event.relation!r} (its pair is the Sampled "
        "Gaussian's under add/remove only)"
      )
    return None
  return f"{type(event).__name__} events"


def event_phases(event: Any, count: ArrayLike | None = None) -> list[Phase]:
  """The engine's phases that ``event`` is.

  Gaussians composed on one Poisson sample are one Gaussian at ``sigma_eff = (sum_i
  1 / s_i^2)^(-1/2)`` (its dominating pair is the composed one's; see
  :class:`jaxrdp.events.PoissonSampled`).

  Raises:
    NotImplementedError: for a mechanism the engine does not compose.
  """
  why = engine_unsupported(event)
  if why is not None:
    raise NotImplementedError(f"{PldAccountant.description} cannot account {why}")
  return _phases(event, count)


def _phases(event, count):
  steps = 1 if count is None else count
  if isinstance(event, NoOp):
    return []
  if isinstance(event, SelfComposed):
    return _phases(event.event, event.count if count is None else jnp.multiply(count, event.count))
  if isinstance(event, Composed):
    return [p for e in event.events for p in _phases(e, count)]
  if isinstance(event, Gaussian):
    return [Phase(1.0, event.sigma, steps)]
  if isinstance(event, Laplace):
    return [Phase(1.0, event.scale, steps, _producers.LAPLACE)]
  if isinstance(event, ShuffledEpochs):
    # Each started epoch is one Gaussian mechanism per example (no amplification).
    with _precision.x64_context():
      epochs = jnp.ceil(raise_subnormal(_precision.as_float64(event.epochs)))
      sigma = effective_noise_multiplier(_precision.as_float64(event.inner.sigma), event.relation)
    return [Phase(1.0, sigma, epochs if count is None else jnp.multiply(count, epochs))]
  if isinstance(event, FixedSizeSampled):
    with _precision.x64_context():
      s = effective_noise_multiplier(_precision.as_float64(event.inner.sigma), event.relation)
    return [Phase(event.gamma, s, steps, _producers.FIXED_SIZE)]
  if isinstance(event.inner, Gaussian):
    return [Phase(event.q, event.inner.sigma, steps)]
  if isinstance(event.inner, Laplace):
    return [Phase(event.q, event.inner.scale, steps, _producers.LAPLACE)]
  terms = gaussian_terms(event.inner)
  with _precision.x64_context():
    sigma = effective_sigma_f64([(c, s) for c, s in terms])
  return [Phase(event.q, sigma, steps)]


def _holds_shuffled(event) -> bool:
  """Whether ``event`` is, or composes, shuffled epochs."""
  if isinstance(event, ShuffledEpochs):
    return True
  if isinstance(event, SelfComposed):
    return _holds_shuffled(event.event)
  if isinstance(event, Composed):
    return any(_holds_shuffled(e) for e in event.events)
  return False


def _with_shuffled_lower(state, given, result, kind):
  """``result`` with its lower bound replaced by the shuffled events' own (module docstring).

  The engine's lower bound is that of the Gaussian mechanism the shuffled epochs are
  accounted as, not of shuffling; the events' bound (0 where none is known) is.
  """
  if not state.shuffled:
    return result
  bound = event_epsilon_lower_bound if kind == "epsilon" else event_delta_lower_bound
  upper = np.asarray(result[0])
  lower = np.zeros(upper.shape)
  for event in state.shuffled:
    part = bound(event, given)
    if part is not None:
      lower = np.maximum(lower, part)
  lower = np.broadcast_to(lower, upper.shape)
  with _precision.Float64Scope() as scope:
    pair = (jnp.asarray(upper, jnp.float64), jnp.asarray(lower, jnp.float64))
  return type(result)(*scope.finalize(pair, (False, True)))


# A generic-path bracket wider than this (relative), or an infinite upper end, is
# also bounded by the Renyi-DP accountant where it supports the event, and by the
# bound without amplification where the event has random allocation.
_LOOSE = 1e-3


def _rdp_upper(event, x: float, answer) -> float:
  """The Renyi-DP accountant's epsilon (or delta) of ``event`` at ``x``; inf where it
  does not support the event. Another sound upper bound: the smaller of two is one."""
  from ..rdp._accountant import RdpAccountant

  acct = RdpAccountant()
  if not acct.supports(event):
    return np.inf
  with _precision.Float64Scope():
    if answer is _rules.generic_epsilon:
      value = acct.epsilon(event, x).epsilon
    else:
      value = acct.delta(event, x).delta
  value = float(np.asarray(value, np.float64))
  return value if value >= 0 else np.inf  # a NaN is no bound


def _unamplified(event):
  """``event`` with each random allocation replaced by its steps without amplification:
  ``k`` Gaussian mechanisms an epoch, ``ceil(T / t)`` epochs (each example's ``k``
  steps of an epoch release it through its ``k`` Gaussians, so this dominates the
  epoch); ``None`` where ``event`` has no random allocation."""
  if isinstance(event, RandomAllocation):
    t, _ = steps_per_epoch(float(np.asarray(event.q)), event.selected)
    if not np.isfinite(t):
      return NoOp()
    epochs = math.ceil(float(np.asarray(event.steps)) / t - 1e-12)
    return SelfComposed(event.inner, epochs * event.selected)
  if isinstance(event, SelfComposed):
    inner = _unamplified(event.event)
    return None if inner is None else SelfComposed(inner, event.count)
  if isinstance(event, Composed):
    parts = [_unamplified(e) for e in event.events]
    if all(p is None for p in parts):
      return None
    return Composed(tuple(e if p is None else p for e, p in zip(event.events, parts)))
  return None


def _looser_bounds(event, x, answer, rtol, max_grid_size) -> float:
  """The smallest of the other sound upper bounds of ``event`` at ``x``: the Renyi-DP
  accountant's, and the tight one without amplification by random allocation."""
  up = _rdp_upper(event, x, answer)
  plain = _unamplified(event)
  if plain is not None:
    up = min(up, answer(plain, x, rtol, max_grid_size)[0])
  return up


def _generic_answer(state, x, answer, rtol, max_grid_size):
  """``(upper, lower)`` arrays of ``answer(event, x)`` over the broadcast of the leaves and ``x``.

  The engine's phases join the other events as Poisson-subsampled mechanisms; every
  configuration is one concrete composition (``_generic``).
  """
  phase_events = tuple(
    SelfComposed(_producers.PRODUCERS[p.family].step_event(p.q, p.scale), p.steps)
    for p in state.phases
  )
  event = Composed(phase_events + tuple(state.events))
  leaves, treedef = jax.tree_util.tree_flatten(event)
  if any(isinstance(v, jax.core.Tracer) for v in leaves + [x]):
    raise TypeError(
      f"{PldAccountant.description} needs concrete (untraced) inputs for events other than "
      "Gaussian and Laplace ones, Poisson-subsampled or not"
    )
  arrays = [np.asarray(v, np.float64) for v in leaves]
  xa = np.asarray(x, np.float64)
  shape = np.broadcast_shapes(*[a.shape for a in arrays], xa.shape)
  arrays = [np.broadcast_to(a, shape) for a in arrays]
  xa = np.broadcast_to(xa, shape)
  up = np.empty(shape)
  low = np.empty(shape)
  for idx in np.ndindex(shape):
    one = jax.tree_util.tree_unflatten(treedef, [a[idx] for a in arrays])
    up[idx], low[idx] = answer(one, float(xa[idx]), rtol, max_grid_size)
    if not up[idx] <= low[idx] * (1.0 + _LOOSE):
      up[idx] = min(up[idx], _looser_bounds(one, float(xa[idx]), answer, rtol, max_grid_size))
  with _precision.Float64Scope() as scope:
    result = (jnp.asarray(up, jnp.float64), jnp.asarray(low, jnp.float64))
  return scope.finalize(result, (False, True))


def _run_phases(phases, target, mode, options):
  """``(up, low)`` of the engine's ``phases`` at ``target`` (``_accountant.answer_phases``)."""
  triples = [(p.q, p.scale, p.steps) for p in phases]
  families = tuple(p.family for p in phases)

  def answer(families):
    return answer_phases(
      triples,
      target,
      mode,
      options["rtol"],
      None,
      options["max_grid_size"],
      options["memory_limit"],
      families,
    )

  up, low = answer(families)
  if _producers.FIXED_SIZE in families:
    # The envelope's own lower bound is not one of the run's; each direction of the
    # Poisson pair at the same (rate, multiplier) is realized by a dataset pair at every
    # step, so the run's epsilon is at least theirs (``_fixed_size_pairs``).
    realized = tuple(_producers.GAUSSIAN if f == _producers.FIXED_SIZE else f for f in families)
    low = jnp.minimum(answer(realized)[1], up)
  return up, low


@dataclasses.dataclass(frozen=True)
class PldAccountant:
  """Tight (epsilon, delta) accounting by privacy-loss distributions, certified.

  Implements the accountant protocol (:mod:`jaxrdp.accountants`) with
  :func:`jaxrdp.pld.pld_epsilon_phases`: the reported epsilon is never below
  the true add/remove epsilon of the composed mechanism, and at the default
  ``rtol`` within about 1e-5 relative of it; results also carry a certified
  lower bound (``epsilon_lower``, ``delta_lower``).

  Gaussian and Laplace mechanisms, plain or Poisson-subsampled, and fixed-size batches
  under replace-one are composed by the engine of :func:`jaxrdp.pld.pld_epsilon_phases`
  (traced or not). Events with other
  mechanisms (see ``unsupported``) are composed by the generic discrete-PLD path: per adjacency direction, each step's privacy-loss
  distribution discretized by connect-the-dots (an upper bound: Doroshenko et
  al. 2022, arXiv:2207.04380) and from below, composed by FFT without
  wrap-around, ``delta(eps) = p_inf + sum_{s > eps} p_s (1 - e^{eps - s})`` read
  from each, the maximum over the two directions reported. Its bracket is
  within about 1e-4 relative for up to a few hundred steps (wider for more:
  about ``h sqrt(T)`` in epsilon); it needs concrete inputs and runs on the host.
  Where its bracket is wider than 1e-3 relative, or its upper end is infinite (a
  discretization too coarse for the event, e.g. random allocation with 2 or 3
  steps per epoch at sigma 0.7 or below), the upper end reported is the smaller
  of it and the Renyi-DP accountant's bound where that accountant supports the
  event: both are sound upper bounds, and the lower bound is unchanged.

  Args:
    rtol: relative accuracy target of epsilon, which sets the grid.
    max_grid_size: cap of the automatic FFT length.
    memory_limit: working-memory budget in bytes (the batch runs in chunks).

  Examples:
    >>> import jaxrdp
    >>> from jaxrdp.events import Gaussian, PoissonSampled, SelfComposed
    >>> acct = jaxrdp.accountants.PldAccountant()
    >>> res = acct.epsilon(SelfComposed(PoissonSampled(256 / 60000, Gaussian(1.1)), 14063), 1e-5)
    >>> round(float(res.epsilon), 4)
    2.3817
    >>> from jaxrdp.events import Composed, Laplace
    >>> res = acct.epsilon(Composed((Gaussian(2.0), Laplace(4.0))), 1e-5)
    >>> round(float(res.epsilon), 3), bool(res.epsilon_lower <= res.epsilon)
    (2.166, True)
  """

  rtol: float = DEFAULT_RTOL
  max_grid_size: int = MAX_GRID_SIZE
  memory_limit: int = 2**30

  #: How refusals and results name this accountant.
  description = "the tight accountant (accountant='pld')"

  def unsupported(self, event: Any) -> str | None:
    """``None`` if this accountant can account ``event``, else the part it cannot (a phrase)."""
    return pld_unsupported(event)

  def supports(self, event: Any) -> bool:
    """Whether this accountant can account ``event`` (see :meth:`unsupported`)."""
    return pld_unsupported(event) is None

  def _options(self):
    return dict(rtol=self.rtol, max_grid_size=self.max_grid_size, memory_limit=self.memory_limit)

  def init(self) -> PldState:
    """A fresh state: nothing composed."""
    return PldState(())

  def compose(self, state: PldState, event: Any) -> PldState:
    """``state`` after ``event``: its phases appended."""
    if not isinstance(state, PldState):
      raise TypeError(f"state must be a PldState, got {type(state).__name__}")
    validate_event(event)
    shuffled = state.shuffled + ((event,) if _holds_shuffled(event) else ())
    if engine_unsupported(event) is None:
      return PldState(state.phases + tuple(event_phases(event)), state.events, shuffled)
    why = _rules.generic_unsupported(event)
    if why is not None:
      raise NotImplementedError(f"{PldAccountant.description} cannot account {why}")
    return PldState(state.phases, state.events + (event,), shuffled)

  def get_epsilon(self, state: PldState, delta: ArrayLike) -> PldEpsilon:
    """Tight epsilon at ``delta`` of everything composed into ``state``."""
    return _with_shuffled_lower(state, delta, self._get_epsilon(state, delta), "epsilon")

  def get_delta(self, state: PldState, epsilon: ArrayLike) -> PldDelta:
    """Tight delta at ``epsilon`` of everything composed into ``state``."""
    return _with_shuffled_lower(state, epsilon, self._get_delta(state, epsilon), "delta")

  def _get_epsilon(self, state: PldState, delta: ArrayLike) -> PldEpsilon:
    if state.events:
      check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
      return PldEpsilon(
        *_generic_answer(state, delta, _rules.generic_epsilon, self.rtol, self.max_grid_size)
      )
    if not state.phases:
      check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
      return PldEpsilon(*_zeros(delta))
    return PldEpsilon(*_run_phases(state.phases, delta, "epsilon", self._options()))

  def _get_delta(self, state: PldState, epsilon: ArrayLike) -> PldDelta:
    if state.events:
      check_range("epsilon", epsilon, lower=0.0)
      return PldDelta(
        *_generic_answer(state, epsilon, _rules.generic_delta, self.rtol, self.max_grid_size)
      )
    if not state.phases:
      check_range("epsilon", epsilon, lower=0.0)
      return PldDelta(*_zeros(epsilon))
    return PldDelta(*_run_phases(state.phases, epsilon, "delta", self._options()))

  def epsilon(self, event: Any, delta: ArrayLike) -> PldEpsilon:
    """Tight epsilon of ``event`` at ``delta``, of the broadcast shape of its leaves."""
    return self.get_epsilon(self.compose(self.init(), event), delta)

  def delta(self, event: Any, epsilon: ArrayLike) -> PldDelta:
    """Tight delta of ``event`` at ``epsilon``, of the broadcast shape of its leaves."""
    return self.get_delta(self.compose(self.init(), event), epsilon)
