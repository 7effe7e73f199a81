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
:class:`FixedSizeSampler`, :class:`ShuffleSampler`, :class:`RandomAllocationSampler`),
works on the gathered batch (:func:`next_batch`, :func:`gather_batch`) at O(batch)
cost, and composes that sampler's mechanism (random allocation: one epoch's at the
epoch's first step, its truncation term in the epsilon); the sampler's seed travels in the state and its checkpoints
(:func:`sampler_from_state`), and :func:`epsilon_with_truncation` reports a
truncated Poisson (or random-allocation) run's epsilon with the truncation term.
"""

from typing import TYPE_CHECKING

from .._core.lazy import exports as _exports

# Each public name -> the module that defines it, imported on first use
# (jaxrdp._core.lazy).
_NAMES = {
  "CheckpointError": "._checkpoint",
  "load_checkpoint": "._checkpoint",
  "save_checkpoint": "._checkpoint",
  "epochs_to_steps": "..events._dataset",
  "sampling_rate": "..events._dataset",
  "clip_per_example": "._dp_gradient",
  "dp_gradient": "._dp_gradient",
  "per_example_grads": "._dp_gradient",
  "poisson_sample_mask": "._poisson",
  "DPSGDState": "._step",
  "PrivacyGuard": "._step",
  "SGMCache": "._step",
  "StepInfo": "._step",
  "dpsgd_init": "._step",
  "make_dpsgd_step": "._step",
  "privacy_guard": "._step",
  "tight_epsilon": "._tight",
}


# Batch samplers with static shapes and the gathered gradient (O(batch) per step).
_NAMES.update(
  {
    "gather_batch": "._dp_gradient",
    "gathered_dp_gradient": "._dp_gradient",
    "FixedSizeSampler": "._samplers",
    "PoissonSampler": "._samplers",
    "RandomAllocationSampler": "._samplers",
    "ShuffleSampler": "._samplers",
    "binomial_log_sf": "..mechanisms._truncated_poisson",
    "default_capacity": "..mechanisms._truncated_poisson",
    "truncated_poisson_delta": "..mechanisms._truncated_poisson",
    "truncation_delta": "..mechanisms._truncated_poisson",
  }
)


# One step for every sampler: the sampler's state in the train state and checkpoint.
_NAMES.update(
  {
    "AllocationSamplerState": "._sampled_step",
    "SamplerState": "._sampled_step",
    "epsilon_with_truncation": "._sampled_step",
    "next_batch": "._sampled_step",
    "sampler_from_state": "._sampled_step",
    "sampler_state": "._sampled_step",
  }
)


# The public names: the keys of _NAMES (and the submodules), listed once.


# The public names: the keys of _NAMES (and the submodules), listed once.
__all__ = sorted(_NAMES)

__getattr__, __dir__ = _exports(__name__, _NAMES)

# The same names for static analysers (pyright, IDEs): never run (the imports above
# are lazy); tests/test_public_surface.py checks that the two lists agree.
if TYPE_CHECKING:
  from ..events._dataset import epochs_to_steps as epochs_to_steps
  from ..events._dataset import sampling_rate as sampling_rate
  from ..mechanisms._truncated_poisson import binomial_log_sf as binomial_log_sf
  from ..mechanisms._truncated_poisson import default_capacity as default_capacity
  from ..mechanisms._truncated_poisson import truncated_poisson_delta as truncated_poisson_delta
  from ..mechanisms._truncated_poisson import truncation_delta as truncation_delta
  from ._checkpoint import CheckpointError as CheckpointError
  from ._checkpoint import load_checkpoint as load_checkpoint
  from ._checkpoint import save_checkpoint as save_checkpoint
  from ._dp_gradient import clip_per_example as clip_per_example
  from ._dp_gradient import dp_gradient as dp_gradient
  from ._dp_gradient import gather_batch as gather_batch
  from ._dp_gradient import gathered_dp_gradient as gathered_dp_gradient
  from ._dp_gradient import per_example_grads as per_example_grads
  from ._poisson import poisson_sample_mask as poisson_sample_mask
  from ._sampled_step import AllocationSamplerState as AllocationSamplerState
  from ._sampled_step import SamplerState as SamplerState
  from ._sampled_step import epsilon_with_truncation as epsilon_with_truncation
  from ._sampled_step import next_batch as next_batch
  from ._sampled_step import sampler_from_state as sampler_from_state
  from ._sampled_step import sampler_state as sampler_state
  from ._samplers import FixedSizeSampler as FixedSizeSampler
  from ._samplers import PoissonSampler as PoissonSampler
  from ._samplers import RandomAllocationSampler as RandomAllocationSampler
  from ._samplers import ShuffleSampler as ShuffleSampler
  from ._step import DPSGDState as DPSGDState
  from ._step import PrivacyGuard as PrivacyGuard
  from ._step import SGMCache as SGMCache
  from ._step import StepInfo as StepInfo
  from ._step import dpsgd_init as dpsgd_init
  from ._step import make_dpsgd_step as make_dpsgd_step
  from ._step import privacy_guard as privacy_guard
  from ._tight import tight_epsilon as tight_epsilon
