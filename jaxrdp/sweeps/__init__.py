"""Grid sweeps: epsilon over a (q, sigma, steps, delta) grid in chunks, with tables and plots."""

from ._plot import plot_sweep as plot_sweep
from ._sweep import SweepResult as SweepResult
from ._sweep import sweep as sweep

__all__ = ["SweepResult", "plot_sweep", "sweep"]
