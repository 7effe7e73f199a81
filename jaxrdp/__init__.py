"""jaxrdp: exact, vectorized Renyi-DP accounting for the Sampled Gaussian Mechanism."""

from ._sgm import sgm_log_a as sgm_log_a
from ._sgm import sgm_log_a_minus_1 as sgm_log_a_minus_1
from ._sgm import sgm_rdp as sgm_rdp

__version__ = "0.1.0"

__all__ = [
    "sgm_log_a",
    "sgm_log_a_minus_1",
    "sgm_rdp",
]
