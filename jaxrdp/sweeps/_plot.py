"""Heatmap of a sweep: epsilon over sampling rate x noise multiplier (matplotlib, optional).

matplotlib is imported only when a plot is drawn, and only through its object API
(`matplotlib.figure.Figure` with the Agg canvas), so the user's pyplot state and
backend are never touched.
"""

from __future__ import annotations

import math

import numpy as np

from ..sweeps._table import format_number
from ._result import SweepResult

__all__ = ["plot_sweep"]

MATPLOTLIB_HINT = "matplotlib is needed for plots: pip install 'jaxrdp[plot]'"


def _edges(centers: np.ndarray, log: bool) -> np.ndarray:
  # Cell edges halfway between centers (geometrically on a log axis).
  c = np.log(centers) if log else np.asarray(centers, dtype=np.float64)
  if c.size == 1:
    e = np.array([c[0] - 0.5, c[0] + 0.5])
  else:
    mid = 0.5 * (c[1:] + c[:-1])
    e = np.concatenate([[2 * c[0] - mid[0]], mid, [2 * c[-1] - mid[-1]]])
  return np.exp(e) if log else e


def _panel_values(values: np.ndarray, max_panels: int) -> list[float]:
  # Durations to draw: the ends and (for a wide range) a geometric middle.
  values = np.asarray(values, dtype=np.float64)
  if values.size <= max_panels:
    return values.tolist()
  positive = values[values > 0]
  if positive.size >= 2 and positive.max() / positive.min() >= 10:
    targets = np.geomspace(positive.min(), positive.max(), max_panels)
  else:
    targets = np.linspace(values.min(), values.max(), max_panels)
  picks = sorted({int(np.argmin(np.abs(values - t))) for t in targets})
  return values[picks].tolist()


def _nice_levels(lo: float, hi: float, most: int = 8) -> list[float]:
  # Round contour levels: the 1-2-5 series, or 1-3-10, or decades, whichever fits.
  for mantissas in ((1, 2, 5), (1, 3), (1,)):
    out = []
    for e in range(int(math.floor(math.log10(lo))), int(math.ceil(math.log10(hi))) + 1):
      out += [m * 10.0**e for m in mantissas if lo < m * 10.0**e < hi]
    if len(out) <= most:
      return out
  return out[:: -(-len(out) // most)]


def plot_sweep(
  result: SweepResult, path: str | None = None, *, max_panels: int = 3, dpi: int = 120
):
  """Heatmap of epsilon over sampling rate x sigma, one panel per duration.

  The vertical axis is the sampling rate q (log scale), or the expected batch size
  when the sweep was given batch sizes; the horizontal axis is the noise multiplier.
  Colours are log-scaled epsilon with a colorbar; labelled contours mark round
  epsilons (1-2-5 series). A steps or epochs axis of several values gives up to
  `max_panels` panels (its ends and a geometric middle). Other axes of several values
  (delta, dataset_size) are fixed at their first value, as the title says.

  Args:
    result: a `SweepResult` with at least 2 sigmas and 2 sampling rates.
    path: PNG (or any matplotlib format) to write; None only returns the figure.
    max_panels: most duration panels.
    dpi: resolution of the saved image.

  Returns:
    The `matplotlib.figure.Figure`.

  Raises:
    ImportError: matplotlib is not installed.
    ValueError: the sweep has fewer than 2 sigmas or 2 sampling rates.
  """
  try:
    import matplotlib  # noqa: F401  (first, so that a missing package always shows)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure
  except ImportError as e:
    raise ImportError(MATPLOTLIB_HINT) from e

  axes = result.axes
  samp = "batch_size" if "batch_size" in axes else "q"
  if len(axes["sigma"]) < 2 or len(axes[samp]) < 2:
    raise ValueError(
      f"a heatmap needs at least 2 values of sigma and of {samp}, got "
      f"{len(axes['sigma'])} and {len(axes[samp])}"
    )
  dur = "epochs" if "epochs" in axes else "steps"
  fixed = {}
  for name in ("dataset_size", "delta"):
    if name in axes:
      fixed[name] = float(axes[name][0])
  base = result.select(**fixed) if fixed else result
  panels = _panel_values(axes[dur], max_panels)

  sigma = axes["sigma"]
  y = axes[samp]
  finite = result.epsilon[np.isfinite(result.epsilon) & (result.epsilon > 0)]
  base_eps = base.epsilon[np.isfinite(base.epsilon) & (base.epsilon > 0)]
  if base_eps.size == 0:
    base_eps = finite if finite.size else np.array([1e-3, 1.0])
  vmin, vmax = float(base_eps.min()), float(base_eps.max())
  if vmax <= vmin:
    vmax = vmin * 10
  norm = LogNorm(vmin=vmin, vmax=vmax)
  levels = _nice_levels(vmin, vmax)

  fig = Figure(figsize=(4.6 * len(panels) + 1.2, 4.4), layout="constrained")
  FigureCanvasAgg(fig)
  subplots = fig.subplots(1, len(panels), squeeze=False)[0]
  mesh = None
  for ax, value in zip(subplots, panels):
    eps = base.select(**{dur: value}).epsilon.squeeze()
    eps = eps.reshape(len(y), len(sigma))
    masked = np.ma.masked_invalid(np.where(eps > 0, eps, np.nan))
    mesh = ax.pcolormesh(
      _edges(sigma, log=False),
      _edges(y, log=True),
      masked,
      norm=norm,
      cmap="viridis",
      shading="flat",
    )
    if levels and min(masked.shape) >= 2:
      cs = ax.contour(sigma, y, masked, levels=levels, colors="white", linewidths=0.9)
      ax.clabel(cs, fmt=lambda v: f"ε={v:g}", fontsize=8)
    ax.set_yscale("log", base=2 if samp == "batch_size" else 10)
    ax.set_xlabel("noise multiplier σ (noise std / clipping norm)")
    unit = "epoch" if dur == "epochs" else "step"
    ax.set_title(f"{format_number(value)} {unit}{'' if value == 1 else 's'}")
    if samp == "batch_size":
      ax.set_yticks(y)
      ax.set_yticklabels([format_number(v) for v in y])
  if samp == "batch_size":
    n = format_number(fixed.get("dataset_size", axes["dataset_size"][0]))
    subplots[0].set_ylabel(f"expected batch size B (examples; q = B / {int(float(n)):,})")
  else:
    subplots[0].set_ylabel("sampling rate q (fraction of examples per step)")
  delta = float(axes["delta"][0])
  cbar = fig.colorbar(mesh, ax=list(subplots), shrink=0.95, pad=0.015, fraction=0.03)
  cbar.set_label(f"ε at δ = {delta:g} ({result.accountant})")
  title = f"DP-SGD privacy loss ε ({result.label})"
  if "dataset_size" in fixed:
    title += f", N = {int(fixed['dataset_size']):,}"
  fig.suptitle(title)
  if path is not None:
    fig.savefig(path, dpi=dpi)
  return fig
