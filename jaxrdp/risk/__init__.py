"""Privacy as attack risk: what the best membership-inference attack on DP-SGD can achieve.

For ``steps`` Poisson-sampled Gaussian steps, the most powerful test between
the outputs with and without one example (Neyman-Pearson) sets the attacker's
*trade-off curve*, its true-positive rate (TPR) at each false-positive rate
(FPR) (Dong, Roth, Su 2019, arXiv:1905.02383, f-DP; Kulynych et al. 2024,
arXiv:2407.02191, attack-aware calibration):

* :func:`~jaxrdp.dpsgd_tpr`: the TPR at a given FPR; :func:`~jaxrdp.dpsgd_advantage`: the
  largest ``TPR - FPR``; :func:`~jaxrdp.tradeoff_curve`: the curve on a grid of FPRs;
  :func:`gdp_mu`: an estimate of the Gaussian-DP ``mu`` that describes it;
* :func:`calibrate_noise_to_tpr`, :func:`calibrate_noise_to_advantage`: the
  least noise that keeps the attack risk under a target;
* :func:`plot_tradeoff`: the curve with its Gaussian-DP counterpart (matplotlib).

``accountant="pld"`` (default, or a ``PldAccountant`` object) reads the risk from
the composed privacy-loss distribution with certified upper and lower bounds
(``jaxrdp.pld``); ``accountant="rdp"`` (or an ``RdpAccountant``) bounds it from the
Renyi curve (looser; for large grids). ``jaxrdp.sweep(tpr_at_fpr=..., advantage=True)``
adds the risk to a sweep, and ``jaxrdp risk`` prints it from the command line.
"""

from typing import TYPE_CHECKING

from .._core.lazy import exports as _exports

_NAMES = {
  "AdvantageResult": "._api",
  "GdpMu": "._api",
  "TprResult": "._api",
  "TradeoffCurve": "._api",
  "dpsgd_advantage": "._api",
  "dpsgd_tpr": "._api",
  "gdp_mu": "._api",
  "tradeoff_curve": "._api",
  "RiskCalibration": "._calibration",
  "calibrate_noise_to_advantage": "._calibration",
  "calibrate_noise_to_tpr": "._calibration",
  "plot_tradeoff": "._plot",
}

# The public names: the keys of _NAMES, listed once.
__all__ = sorted(_NAMES)

__getattr__, __dir__ = _exports(__name__, _NAMES)

# The same names for static analysers (pyright, IDEs): never run (the imports above
# are lazy); tests/test_public_surface.py checks that the two lists agree.
if TYPE_CHECKING:
  from ._api import AdvantageResult as AdvantageResult
  from ._api import GdpMu as GdpMu
  from ._api import TprResult as TprResult
  from ._api import TradeoffCurve as TradeoffCurve
  from ._api import dpsgd_advantage as dpsgd_advantage
  from ._api import dpsgd_tpr as dpsgd_tpr
  from ._api import gdp_mu as gdp_mu
  from ._api import tradeoff_curve as tradeoff_curve
  from ._calibration import RiskCalibration as RiskCalibration
  from ._calibration import calibrate_noise_to_advantage as calibrate_noise_to_advantage
  from ._calibration import calibrate_noise_to_tpr as calibrate_noise_to_tpr
  from ._plot import plot_tradeoff as plot_tradeoff
