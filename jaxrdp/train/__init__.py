"""DP-SGD training with privacy accounting inside the jitted step.

:func:`make_dpsgd_step` builds a jittable step (Poisson sampling, per-example
clipping, Gaussian noise, an optax update, and the accountant composed with the
step's mechanism, refusing steps that would exceed a budget); :func:`dpsgd_init`
builds its state. :func:`save_checkpoint` and :func:`load_checkpoint` store that
state atomically and refuse a damaged or mismatched file. The parts are public
too: :func:`poisson_sample_mask`, :func:`dp_gradient`, :func:`per_example_grads`,
:func:`clip_per_example`, :func:`privacy_guard`; and the dataset arithmetic
:func:`sampling_rate` and :func:`epochs_to_steps`.

For large datasets the step takes a batch sampler instead of ``q``
(``make_dpsgd_step(..., sampler=)``: :class:`PoissonSampler` with a capacity,
:class:`FixedSizeSampler`, :class:`ShuffleSampler`), works on the gathered batch
(:func:`next_batch`, :func:`gather_batch`) at O(batch) cost, and composes that
sampler's mechanism; the sampler's seed travels in the state and its checkpoints
(:func:`sampler_from_state`), and :func:`epsilon_with_truncation` reports a
truncated Poisson run's epsilon with the truncation term.
"""

from ._checkpoint import CheckpointError as CheckpointError
from ._checkpoint import load_checkpoint as load_checkpoint
from ._checkpoint import save_checkpoint as save_checkpoint
from ._dataset import epochs_to_steps as epochs_to_steps
from ._dataset import sampling_rate as sampling_rate
from ._dp_gradient import clip_per_example as clip_per_example
from ._dp_gradient import dp_gradient as dp_gradient
from ._dp_gradient import per_example_grads as per_example_grads
from ._poisson import poisson_sample_mask as poisson_sample_mask
from ._step import DPSGDState as DPSGDState
from ._step import PrivacyGuard as PrivacyGuard
from ._step import SGMCache as SGMCache
from ._step import StepInfo as StepInfo
from ._step import dpsgd_init as dpsgd_init
from ._step import make_dpsgd_step as make_dpsgd_step
from ._step import privacy_guard as privacy_guard
from ._tight import tight_epsilon as tight_epsilon

__all__ = [
  "CheckpointError",
  "DPSGDState",
  "PrivacyGuard",
  "SGMCache",
  "StepInfo",
  "clip_per_example",
  "dp_gradient",
  "dpsgd_init",
  "epochs_to_steps",
  "load_checkpoint",
  "make_dpsgd_step",
  "per_example_grads",
  "poisson_sample_mask",
  "privacy_guard",
  "sampling_rate",
  "save_checkpoint",
  "tight_epsilon",
]

# Batch samplers with static shapes and the gathered gradient (O(batch) per step).
from ._dp_gradient import gather_batch as gather_batch
from ._dp_gradient import gathered_dp_gradient as gathered_dp_gradient
from ._samplers import FixedSizeSampler as FixedSizeSampler
from ._samplers import PoissonSampler as PoissonSampler
from ._samplers import ShuffleSampler as ShuffleSampler
from ._samplers import binomial_log_sf as binomial_log_sf
from ._samplers import default_capacity as default_capacity
from ._samplers import truncated_poisson_delta as truncated_poisson_delta
from ._samplers import truncation_delta as truncation_delta

__all__ += [
  "FixedSizeSampler",
  "PoissonSampler",
  "ShuffleSampler",
  "binomial_log_sf",
  "default_capacity",
  "gather_batch",
  "gathered_dp_gradient",
  "truncated_poisson_delta",
  "truncation_delta",
]

# One step for every sampler: the sampler's state in the train state and checkpoint.
from ._sampled_step import SamplerState as SamplerState
from ._sampled_step import epsilon_with_truncation as epsilon_with_truncation
from ._sampled_step import next_batch as next_batch
from ._sampled_step import sampler_from_state as sampler_from_state
from ._sampled_step import sampler_state as sampler_state

__all__ += [
  "SamplerState",
  "epsilon_with_truncation",
  "next_batch",
  "sampler_from_state",
  "sampler_state",
]
