"""Classical (epsilon, delta)-DP theorems, vectorized.

Composition (:func:`basic_composition`, :func:`advanced_composition`,
:func:`advanced_composition_capped_kl`), amplification by subsampling
(:func:`amplify_by_subsampling`), Gaussian calibrations from tail bounds
(:func:`classical_gaussian_sigma`, :func:`gaussian_tail_delta`,
:func:`gaussian_tail_sigma`), the Laplace scale (:func:`laplace_scale`) and the
zCDP conversion (:func:`zcdp_to_epsilon`). They are looser than the Renyi-DP
and tight accountants at the top level of :mod:`jaxrdp`, and are here to
compare against and to teach.
"""

from ..mechanisms._rdp_curves import zcdp_to_epsilon as zcdp_to_epsilon
from ._epsilon_delta import EpsilonDelta as EpsilonDelta
from ._epsilon_delta import advanced_composition as advanced_composition
from ._epsilon_delta import advanced_composition_capped_kl as advanced_composition_capped_kl
from ._epsilon_delta import amplify_by_subsampling as amplify_by_subsampling
from ._epsilon_delta import basic_composition as basic_composition
from ._epsilon_delta import classical_gaussian_sigma as classical_gaussian_sigma
from ._epsilon_delta import gaussian_tail_delta as gaussian_tail_delta
from ._epsilon_delta import gaussian_tail_sigma as gaussian_tail_sigma
from ._epsilon_delta import laplace_scale as laplace_scale

__all__ = [
  "EpsilonDelta",
  "advanced_composition",
  "advanced_composition_capped_kl",
  "amplify_by_subsampling",
  "basic_composition",
  "classical_gaussian_sigma",
  "gaussian_tail_delta",
  "gaussian_tail_sigma",
  "laplace_scale",
  "zcdp_to_epsilon",
]
