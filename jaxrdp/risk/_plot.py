"""Plot of a trade-off curve with its Gaussian-DP counterpart (matplotlib, optional).

matplotlib is imported only when a plot is drawn, through its object API (a
``Figure`` with the Agg canvas), so the user's pyplot state and backend are
never touched.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from ._api import TradeoffCurve

__all__ = ["plot_tradeoff"]

MATPLOTLIB_HINT = "matplotlib is needed for plots: pip install 'jaxrdp[plot]'"


def _gdp_tpr(fpr, mu):
  nd = NormalDist()
  return np.array([nd.cdf(nd.inv_cdf(a) + mu) if 0 < a < 1 else a for a in fpr])


def _mu_at(curve_fpr, tpr, at=0.01):
  """``Phi^-1(TPR) - Phi^-1(FPR)`` at the grid point nearest ``at`` (an estimate)."""
  inside = (curve_fpr > 0) & (curve_fpr < 1) & (tpr > 0) & (tpr < 1)
  if not np.any(inside):
    return None
  i = np.flatnonzero(inside)[np.argmin(np.abs(np.log(curve_fpr[inside]) - math.log(at)))]
  nd = NormalDist()
  return nd.inv_cdf(float(tpr[i])) - nd.inv_cdf(float(curve_fpr[i]))


def plot_tradeoff(
  curve: TradeoffCurve,
  path: str | None = None,
  *,
  mu: float | None = None,
  log: bool = True,
  label: str | None = None,
  dpi: int = 120,
):
  """The attacker's ROC curve (TPR against FPR) with the Gaussian-DP curve beside it.

  Draws the certified upper bound of the TPR (the band down to the lower bound
  shaded), the Gaussian-DP curve ``Phi(Phi^-1(FPR) + mu)`` for comparison, and
  the diagonal (a random guess). ``mu`` defaults to an estimate: the value that
  matches the curve at the grid point nearest FPR 1% (:func:`jaxrdp.risk.gdp_mu`
  explains why this is a summary, not a guarantee).

  Args:
    curve: a :class:`jaxrdp.risk.TradeoffCurve` of one configuration (``tpr`` of
      shape ``(G,)``).
    path: file to write (PNG or any matplotlib format); None only returns the figure.
    mu: the Gaussian-DP parameter of the comparison curve (None: estimated).
    log: log-log axes (the low-FPR regime that membership-inference audits
      report), else linear.
    label: legend label of the curve.
    dpi: resolution of the saved image.

  Returns:
    The ``matplotlib.figure.Figure``.

  Raises:
    ImportError: matplotlib is not installed.
    ValueError: the curve holds more than one configuration.
  """
  try:
    import matplotlib  # noqa: F401  (first, so that a missing package always shows)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
  except ImportError as e:
    raise ImportError(MATPLOTLIB_HINT) from e
  fpr = np.asarray(curve.fpr, np.float64)
  tpr = np.asarray(curve.tpr, np.float64)
  low = np.asarray(curve.tpr_lower, np.float64)
  if tpr.ndim != 1:
    raise ValueError(f"plot_tradeoff draws one configuration: tpr has shape {tpr.shape}")
  if mu is None:
    mu = _mu_at(fpr, tpr)
  fig = Figure(figsize=(5.2, 4.6), layout="constrained")
  FigureCanvasAgg(fig)
  ax = fig.subplots()
  keep = fpr > 0 if log else np.ones(fpr.shape, bool)
  ax.fill_between(fpr[keep], low[keep], tpr[keep], color="C0", alpha=0.25, linewidth=0)
  ax.plot(fpr[keep], tpr[keep], color="C0", label=label or "best attack (certified upper bound)")
  if mu is not None:
    dense = np.geomspace(max(fpr[keep].min(), 1e-12), 1.0, 200) if log else np.linspace(0, 1, 200)
    ax.plot(dense, _gdp_tpr(dense, mu), "--", color="C1", label=f"Gaussian DP, μ = {mu:.3g}")
  diag = np.geomspace(max(fpr[keep].min(), 1e-12), 1.0, 50) if log else np.linspace(0, 1, 50)
  ax.plot(diag, diag, ":", color="grey", label="random guess")
  if log:
    ax.set_xscale("log")
    ax.set_yscale("log")
  ax.set_xlabel("false-positive rate (FPR)")
  ax.set_ylabel("true-positive rate (TPR)")
  ax.set_title("Membership inference: the best attack's ROC")
  ax.legend(loc="lower right", fontsize=8)
  if path is not None:
    fig.savefig(path, dpi=dpi)
  return fig
