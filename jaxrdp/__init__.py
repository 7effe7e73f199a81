"""jaxrdp: exact, vectorized Renyi-DP accounting for the Sampled Gaussian Mechanism.

Kernels: :func:`sgm_log_a`, :func:`sgm_rdp`. Conversions: :func:`rdp_to_epsilon`,
:func:`rdp_to_delta`. One call for DP-SGD: :func:`dpsgd_epsilon`. A functional,
jittable accountant (``accountant_*``) and an eager :class:`RdpAccountant`.
"""

from ._accountant import AccountantState as AccountantState
from ._accountant import RdpAccountant as RdpAccountant
from ._accountant import accountant_compose_rdp as accountant_compose_rdp
from ._accountant import accountant_compose_sgm as accountant_compose_sgm
from ._accountant import accountant_delta as accountant_delta
from ._accountant import accountant_epsilon as accountant_epsilon
from ._accountant import accountant_from_dict as accountant_from_dict
from ._accountant import accountant_init as accountant_init
from ._accountant import accountant_to_dict as accountant_to_dict
from ._conversions import DeltaResult as DeltaResult
from ._conversions import EpsilonResult as EpsilonResult
from ._conversions import rdp_to_delta as rdp_to_delta
from ._conversions import rdp_to_epsilon as rdp_to_epsilon
from ._dpsgd import DEFAULT_ORDERS as DEFAULT_ORDERS
from ._dpsgd import DP_ACCOUNTING_ORDERS as DP_ACCOUNTING_ORDERS
from ._dpsgd import dpsgd_delta as dpsgd_delta
from ._dpsgd import dpsgd_epsilon as dpsgd_epsilon
from ._sgm import sgm_log_a as sgm_log_a
from ._sgm import sgm_log_a_minus_1 as sgm_log_a_minus_1
from ._sgm import sgm_rdp as sgm_rdp
from ._sgm import MAX_ORDER as MAX_ORDER

__version__ = "0.1.0"

__all__ = [
    "AccountantState",
    "DEFAULT_ORDERS",
    "DP_ACCOUNTING_ORDERS",
    "DeltaResult",
    "EpsilonResult",
    "RdpAccountant",
    "accountant_compose_rdp",
    "accountant_compose_sgm",
    "accountant_delta",
    "accountant_epsilon",
    "accountant_from_dict",
    "accountant_init",
    "accountant_to_dict",
    "dpsgd_delta",
    "dpsgd_epsilon",
    "rdp_to_delta",
    "rdp_to_epsilon",
    "sgm_log_a",
    "sgm_log_a_minus_1",
    "sgm_rdp",
]

# --- issue 5: seed toolkit ---
from ._analytic_gaussian import analytic_gaussian_delta as analytic_gaussian_delta
from ._analytic_gaussian import analytic_gaussian_sigma as analytic_gaussian_sigma
from ._classical import EpsilonDelta as EpsilonDelta
from ._classical import advanced_composition as advanced_composition
from ._classical import advanced_composition_seed004 as advanced_composition_seed004
from ._classical import amplify_by_subsampling as amplify_by_subsampling
from ._classical import basic_composition as basic_composition
from ._classical import classical_gaussian_sigma as classical_gaussian_sigma
from ._classical import gaussian_tail_delta as gaussian_tail_delta
from ._classical import gaussian_tail_sigma as gaussian_tail_sigma
from ._classical import laplace_scale as laplace_scale
from ._closed_form import sgm_rdp_closed_form as sgm_rdp_closed_form
from ._mechanisms import gaussian_rdp as gaussian_rdp
from ._mechanisms import laplace_rdp as laplace_rdp
from ._mechanisms import randomized_response_rdp as randomized_response_rdp
from ._mechanisms import zcdp_to_epsilon as zcdp_to_epsilon
from ._single_step import sgm_single_step_delta as sgm_single_step_delta
from ._single_step import sgm_single_step_sigma as sgm_single_step_sigma

__all__ += [
    "EpsilonDelta",
    "advanced_composition",
    "advanced_composition_seed004",
    "amplify_by_subsampling",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "basic_composition",
    "classical_gaussian_sigma",
    "gaussian_rdp",
    "gaussian_tail_delta",
    "gaussian_tail_sigma",
    "laplace_rdp",
    "laplace_scale",
    "randomized_response_rdp",
    "sgm_rdp_closed_form",
    "sgm_single_step_delta",
    "sgm_single_step_sigma",
    "zcdp_to_epsilon",
]
# --- end issue 5 ---

# --- issue 4: DP-SGD training integration ---
from ._checkpoint import CheckpointError as CheckpointError
from ._checkpoint import load_checkpoint as load_checkpoint
from ._checkpoint import save_checkpoint as save_checkpoint
from ._dp_gradient import clip_per_example as clip_per_example
from ._dp_gradient import dp_gradient as dp_gradient
from ._dp_gradient import per_example_grads as per_example_grads
from ._poisson import poisson_sample_mask as poisson_sample_mask
from ._training import DPSGDState as DPSGDState
from ._training import PrivacyGuard as PrivacyGuard
from ._training import SGMCache as SGMCache
from ._training import StepInfo as StepInfo
from ._training import dpsgd_init as dpsgd_init
from ._training import make_dpsgd_step as make_dpsgd_step
from ._training import privacy_guard as privacy_guard
from ._training import tree_select as tree_select

__all__ += [
    "CheckpointError",
    "DPSGDState",
    "PrivacyGuard",
    "SGMCache",
    "StepInfo",
    "clip_per_example",
    "dp_gradient",
    "dpsgd_init",
    "load_checkpoint",
    "make_dpsgd_step",
    "per_example_grads",
    "poisson_sample_mask",
    "privacy_guard",
    "save_checkpoint",
    "tree_select",
]
# --- end issue 4 ---

# --- issue 3: calibration, sweeps, command line ---
from ._calibration import NoiseCalibration as NoiseCalibration
from ._calibration import SamplingRateCalibration as SamplingRateCalibration
from ._calibration import StepsCalibration as StepsCalibration
from ._calibration import calibrate_noise as calibrate_noise
from ._calibration import calibrate_noise_for_delta as calibrate_noise_for_delta
from ._calibration import calibrate_sampling_rate as calibrate_sampling_rate
from ._calibration import calibrate_sampling_rate_for_delta as calibrate_sampling_rate_for_delta
from ._calibration import calibrate_steps as calibrate_steps
from ._calibration import calibrate_steps_for_delta as calibrate_steps_for_delta
from ._dataset import epochs_to_steps as epochs_to_steps
from ._dataset import sampling_rate as sampling_rate
from ._plot import plot_sweep as plot_sweep
from ._sweep import SweepResult as SweepResult
from ._sweep import sweep as sweep

__all__ += [
    "NoiseCalibration",
    "SamplingRateCalibration",
    "StepsCalibration",
    "SweepResult",
    "calibrate_noise",
    "calibrate_noise_for_delta",
    "calibrate_sampling_rate",
    "calibrate_sampling_rate_for_delta",
    "calibrate_steps",
    "calibrate_steps_for_delta",
    "epochs_to_steps",
    "plot_sweep",
    "sampling_rate",
    "sweep",
]
# --- end issue 3 ---
