"""Grid sweeps: epsilon over a (q, sigma, steps, delta) grid in chunks, with tables and plots."""

from .._core.lazy import exports as _exports

# Each public name -> the module that defines it, imported on first use
# (jaxrdp._core.lazy).
_NAMES = {
  "plot_sweep": "._plot",
  "SweepResult": "._sweep",
  "sweep": "._sweep",
}

__all__ = ["SweepResult", "plot_sweep", "sweep"]

__getattr__, __dir__ = _exports(__name__, _NAMES)
