"""Privacy curves of single mechanisms, as vectorized JAX kernels.

* The Sampled Gaussian Mechanism (SGM, Poisson sampling with rate ``q`` and
  noise multiplier ``sigma``): its exact Renyi DP (:func:`sgm_rdp`,
  :func:`sgm_log_a`, :func:`sgm_log_a_minus_1`; Mironov, Talwar, Zhang 2019,
  arXiv:1908.10530), its closed-form upper bound (:func:`sgm_rdp_closed_form`),
  and the exact (epsilon, delta) of one step (:func:`sgm_single_step_delta`,
  :func:`sgm_single_step_sigma`; Kalinin 2024).
* Other mechanisms' Renyi DP: :func:`gaussian_rdp`, :func:`laplace_rdp`,
  :func:`randomized_response_rdp` (Mironov 2017, arXiv:1702.07476, Table II).
* The exact Gaussian mechanism: :func:`analytic_gaussian_delta`,
  :func:`analytic_gaussian_sigma` (Balle and Wang 2018, arXiv:1805.06530).
* Random allocation (balls in bins, k-out-of-t) of the Gaussian:
  :func:`random_allocation_rdp` (Feldman and Shenfeld 2025, arXiv:2502.08202).
* Shuffled batches, a lower bound on the true epsilon:
  :func:`shuffle_epsilon_lower_bound`, :func:`shuffle_delta_lower_bound` (Chua et
  al. 2024, arXiv:2403.17673).

All take array arguments that broadcast like NumPy, compute in float64 inside
a local x64 scope, and work under ``jit``, ``vmap`` and ``grad``.
"""

from typing import TYPE_CHECKING

from .._core.lazy import exports as _exports

# Each public name -> the module that defines it, imported on first use
# (jaxrdp._core.lazy).
_NAMES = {
  "analytic_gaussian_delta": "._analytic_gaussian",
  "analytic_gaussian_sigma": "._analytic_gaussian",
  "gaussian_rdp": "._rdp_curves",
  "laplace_rdp": "._rdp_curves",
  "randomized_response_rdp": "._rdp_curves",
  "MAX_ORDER": "._sgm",
  "sgm_log_a": "._sgm",
  "sgm_log_a_minus_1": "._sgm",
  "sgm_rdp": "._sgm",
  "sgm_rdp_closed_form": "._sgm_closed_form",
  "sgm_single_step_delta": "._sgm_single_step",
  "sgm_single_step_sigma": "._sgm_single_step",
}


# Sampling without replacement (fixed-size batches) and neighbouring relations.
_NAMES.update(
  {
    "RELATIONS": "._sampled_without_replacement",
    "WOR_MAX_ORDER": "._sampled_without_replacement",
    "effective_noise_multiplier": "._sampled_without_replacement",
    "sampled_without_replacement_gaussian_log_a": "._sampled_without_replacement",
    "sampled_without_replacement_gaussian_rdp": "._sampled_without_replacement",
  }
)


# Random allocation (balls in bins, random k-out-of-t allocation) of the Gaussian.
_NAMES.update(
  {
    "ALLOCATION_MAX_INTEGER_ORDER": "._random_allocation",
    "random_allocation_rdp": "._random_allocation",
  }
)


# Shuffled batches: a lower bound on the true epsilon (Chua et al. 2024).
_NAMES.update(
  {
    "shuffle_delta_lower_bound": "._shuffle_lower_bound",
    "shuffle_epsilon_lower_bound": "._shuffle_lower_bound",
  }
)


# Truncated Poisson batches: the truncation term and the capacity.
_NAMES.update(
  {
    "binomial_log_sf": "._truncated_poisson",
    "default_capacity": "._truncated_poisson",
    "truncated_poisson_delta": "._truncated_poisson",
    "truncation_delta": "._truncated_poisson",
  }
)

# The public names: the keys of _NAMES (and the submodules), listed once.


# The public names: the keys of _NAMES (and the submodules), listed once.
__all__ = sorted(_NAMES)

__getattr__, __dir__ = _exports(__name__, _NAMES)

# The same names for static analysers (pyright, IDEs): never run (the imports above
# are lazy); tests/test_public_surface.py checks that the two lists agree.
if TYPE_CHECKING:
  from ._analytic_gaussian import analytic_gaussian_delta as analytic_gaussian_delta
  from ._analytic_gaussian import analytic_gaussian_sigma as analytic_gaussian_sigma
  from ._random_allocation import ALLOCATION_MAX_INTEGER_ORDER as ALLOCATION_MAX_INTEGER_ORDER
  from ._random_allocation import random_allocation_rdp as random_allocation_rdp
  from ._rdp_curves import gaussian_rdp as gaussian_rdp
  from ._rdp_curves import laplace_rdp as laplace_rdp
  from ._rdp_curves import randomized_response_rdp as randomized_response_rdp
  from ._sampled_without_replacement import RELATIONS as RELATIONS
  from ._sampled_without_replacement import WOR_MAX_ORDER as WOR_MAX_ORDER
  from ._sampled_without_replacement import effective_noise_multiplier as effective_noise_multiplier
  from ._sampled_without_replacement import (
    sampled_without_replacement_gaussian_log_a as sampled_without_replacement_gaussian_log_a,
  )
  from ._sampled_without_replacement import (
    sampled_without_replacement_gaussian_rdp as sampled_without_replacement_gaussian_rdp,
  )
  from ._sgm import MAX_ORDER as MAX_ORDER
  from ._sgm import sgm_log_a as sgm_log_a
  from ._sgm import sgm_log_a_minus_1 as sgm_log_a_minus_1
  from ._sgm import sgm_rdp as sgm_rdp
  from ._sgm_closed_form import sgm_rdp_closed_form as sgm_rdp_closed_form
  from ._sgm_single_step import sgm_single_step_delta as sgm_single_step_delta
  from ._sgm_single_step import sgm_single_step_sigma as sgm_single_step_sigma
  from ._shuffle_lower_bound import shuffle_delta_lower_bound as shuffle_delta_lower_bound
  from ._shuffle_lower_bound import shuffle_epsilon_lower_bound as shuffle_epsilon_lower_bound
  from ._truncated_poisson import binomial_log_sf as binomial_log_sf
  from ._truncated_poisson import default_capacity as default_capacity
  from ._truncated_poisson import truncated_poisson_delta as truncated_poisson_delta
  from ._truncated_poisson import truncation_delta as truncation_delta
