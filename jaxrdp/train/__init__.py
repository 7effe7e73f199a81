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

from .._core.lazy import exports as _exports

# Each public name -> the module that defines it, imported on first use
# (jaxrdp._core.lazy).
_NAMES = {
  "CheckpointError": "._checkpoint",
  "load_checkpoint": "._checkpoint",
  "save_checkpoint": "._checkpoint",
  "epochs_to_steps": "._dataset",
  "sampling_rate": "._dataset",
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
_NAMES.update(
  {
    "gather_batch": "._dp_gradient",
    "gathered_dp_gradient": "._dp_gradient",
    "FixedSizeSampler": "._samplers",
    "PoissonSampler": "._samplers",
    "RandomAllocationSampler": "._samplers",
    "ShuffleSampler": "._samplers",
    "binomial_log_sf": "._samplers",
    "default_capacity": "._samplers",
    "truncated_poisson_delta": "._samplers",
    "truncation_delta": "._samplers",
  }
)

__all__ += [
  "FixedSizeSampler",
  "PoissonSampler",
  "RandomAllocationSampler",
  "ShuffleSampler",
  "binomial_log_sf",
  "default_capacity",
  "gather_batch",
  "gathered_dp_gradient",
  "truncated_poisson_delta",
  "truncation_delta",
]

# One step for every sampler: the sampler's state in the train state and checkpoint.
_NAMES.update(
  {
    "SamplerState": "._sampled_step",
    "epsilon_with_truncation": "._sampled_step",
    "next_batch": "._sampled_step",
    "sampler_from_state": "._sampled_step",
    "sampler_state": "._sampled_step",
  }
)

__all__ += [
  "SamplerState",
  "epsilon_with_truncation",
  "next_batch",
  "sampler_from_state",
  "sampler_state",
]

__getattr__, __dir__ = _exports(__name__, _NAMES)
