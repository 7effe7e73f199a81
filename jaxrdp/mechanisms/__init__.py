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

All take array arguments that broadcast like NumPy, compute in float64 inside
a local x64 scope, and work under ``jit``, ``vmap`` and ``grad``.
"""

from ._analytic_gaussian import analytic_gaussian_delta as analytic_gaussian_delta
from ._analytic_gaussian import analytic_gaussian_sigma as analytic_gaussian_sigma
from ._rdp_curves import gaussian_rdp as gaussian_rdp
from ._rdp_curves import laplace_rdp as laplace_rdp
from ._rdp_curves import randomized_response_rdp as randomized_response_rdp
from ._sgm import MAX_ORDER as MAX_ORDER
from ._sgm import sgm_log_a as sgm_log_a
from ._sgm import sgm_log_a_minus_1 as sgm_log_a_minus_1
from ._sgm import sgm_rdp as sgm_rdp
from ._sgm_closed_form import sgm_rdp_closed_form as sgm_rdp_closed_form
from ._sgm_single_step import sgm_single_step_delta as sgm_single_step_delta
from ._sgm_single_step import sgm_single_step_sigma as sgm_single_step_sigma

__all__ = [
  "MAX_ORDER",
  "analytic_gaussian_delta",
  "analytic_gaussian_sigma",
  "gaussian_rdp",
  "laplace_rdp",
  "randomized_response_rdp",
  "sgm_log_a",
  "sgm_log_a_minus_1",
  "sgm_rdp",
  "sgm_rdp_closed_form",
  "sgm_single_step_delta",
  "sgm_single_step_sigma",
]

# Sampling without replacement (fixed-size batches) and neighbouring relations.
from ._sampled_without_replacement import RELATIONS as RELATIONS
from ._sampled_without_replacement import WOR_MAX_ORDER as WOR_MAX_ORDER
from ._sampled_without_replacement import effective_noise_multiplier as effective_noise_multiplier
from ._sampled_without_replacement import (
  sampled_without_replacement_gaussian_log_a as sampled_without_replacement_gaussian_log_a,
)
from ._sampled_without_replacement import (
  sampled_without_replacement_gaussian_rdp as sampled_without_replacement_gaussian_rdp,
)

__all__ += [
  "RELATIONS",
  "WOR_MAX_ORDER",
  "effective_noise_multiplier",
  "sampled_without_replacement_gaussian_log_a",
  "sampled_without_replacement_gaussian_rdp",
]
