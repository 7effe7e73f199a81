"""Grid sweeps: epsilon (and attack risk) over a (q, sigma, steps, delta) grid in chunks, with tables and plots."""

from typing import TYPE_CHECKING

from .._core.lazy import exports as _exports

# Each public name -> the module that defines it, imported on first use
# (jaxrdp._core.lazy).
_NAMES = {
  "plot_sweep": "._plot",
  "SweepResult": "._result",
  "sweep": "._sweep",
}


# The public names: the keys of _NAMES (and the submodules), listed once.
__all__ = sorted(_NAMES)

__getattr__, __dir__ = _exports(__name__, _NAMES)

# The same names for static analysers (pyright, IDEs): never run (the imports above
# are lazy); tests/test_public_surface.py checks that the two lists agree.
if TYPE_CHECKING:
  from ._plot import plot_sweep as plot_sweep
  from ._result import SweepResult as SweepResult
  from ._sweep import sweep as sweep
