"""The mechanisms the tight engine composes, each a producer of one step's privacy loss.

A phase of a composition is ``(q, scale, steps)`` of one *family*: the Poisson-subsampled
Gaussian (``"gaussian"``, scale = the noise multiplier; ``q = 1`` is the Gaussian
mechanism) or the Poisson-subsampled Laplace mechanism (``"laplace"``, scale = the
Laplace scale per unit of sensitivity; ``q = 1`` is the Laplace mechanism). A family is
a :class:`Producer`: three functions of one step, which are all the engine needs.

* ``log_delta_curve(eps, q, scale, is_add)``: the exact hockey-stick curve of either
  adjacency direction, which connect-the-dots turns into a dominating PMF
  (``_kernel``);
* ``log_mgf(q, scale, lam, points)``: an estimate of the remove direction's
  moment-generating function ``log E_P[e^{lam L}]``, any real ``lam``, which plans
  the grid (``_grid``; the add direction's is the remove direction's at ``-1 - lam``);
* ``support(q, scale, z, direction)``: a loss interval holding all but ``2 Phi(-z)``
  of a step's mass (all of it for a bounded loss).

``step_event(q, scale)``, the event of one step (for the Renyi-DP fallbacks and the
generic path), and whether the pair is ``symmetric`` (its two directions the same pair at every
``q``: the driver then composes one). Every producer's directions must agree at ``q =
1``; the driver composes one direction there too.

The third family is fixed-size batches under replace-one (``"fixed_size"``, scale =
the Gaussian's effective multiplier ``sigma / 2``), whose step is one symmetric pair,
the envelope of the Poisson pair's two directions (``_fixed_size_step``).

The families of a call's phases are static (a tuple of names, one per phase), so each
is one compiled program; the values are traced. A new mechanism is a module with
these three functions and an entry in ``PRODUCERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..events._events import Gaussian, Laplace, PoissonSampled
from ..events._sampling_events import FixedSizeSampled
from . import _discretize, _fixed_size_step, _laplace_step

__all__ = [
  "Producer",
  "PRODUCERS",
  "GAUSSIAN",
  "LAPLACE",
  "FIXED_SIZE",
  "gaussian_families",
  "map_phases",
  "symmetric",
]


class Producer(NamedTuple):
  """One family of single-step mechanisms (see the module docstring)."""

  name: str
  log_delta_curve: Callable
  log_mgf: Callable
  support: Callable
  step_event: Callable
  symmetric: bool = False


GAUSSIAN = "gaussian"
LAPLACE = "laplace"
FIXED_SIZE = "fixed_size"
PRODUCERS = {
  p.name: p
  for p in (
    Producer(
      GAUSSIAN,
      _discretize.log_delta_curve,
      _discretize.log_mgf,
      _discretize.support,
      lambda q, scale: PoissonSampled(q, Gaussian(scale)),
    ),
    Producer(
      LAPLACE,
      _laplace_step.log_delta_curve,
      _laplace_step.log_mgf,
      _laplace_step.support,
      lambda q, scale: PoissonSampled(q, Laplace(scale)),
    ),
    Producer(
      FIXED_SIZE,
      _fixed_size_step.log_delta_curve,
      _fixed_size_step.log_mgf,
      _fixed_size_step.support,
      # (the scale is the effective multiplier sigma / 2; doubling it is exact)
      lambda q, scale: FixedSizeSampled(q, Gaussian(2.0 * scale), "replace_one"),
      symmetric=True,
    ),
  )
}


def symmetric(families) -> bool:
  """Whether every phase's pair is symmetric: one direction is the answer at every ``q``."""
  return all(PRODUCERS[f].symmetric for f in families)


def gaussian_families(phases: int) -> tuple[str, ...]:
  """The families of ``phases`` Poisson-subsampled Gaussian phases."""
  return (GAUSSIAN,) * phases


def map_phases(families, fn, *arrays):
  """``fn(producer, *row)`` for each phase, stacked along a leading phase axis.

  ``arrays`` have a leading axis of one entry per phase (``len(families)``). Where every phase is of one family, ``fn`` is vmapped
  over the phases (one traced body, as for a single family); otherwise each phase is
  traced with its own producer and the outputs are stacked.
  """
  families = tuple(families)
  if len(set(families)) == 1:
    producer = PRODUCERS[families[0]]
    return jax.vmap(lambda *row: fn(producer, *row))(*arrays)
  outs = [fn(PRODUCERS[f], *(a[j] for a in arrays)) for j, f in enumerate(families)]
  return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *outs)
