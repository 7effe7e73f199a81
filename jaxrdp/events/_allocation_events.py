"""The event of random allocation ("balls in bins", random k-out-of-t allocation).

:class:`RandomAllocation` describes ``steps`` DP-SGD steps run in epochs of
t = ``selected / q`` steps, in each of which every example is used in k =
``selected`` of the t steps, a uniformly random k-subset drawn independently of
the other examples (:class:`jaxrdp.train.RandomAllocationSampler`). Its RDP rule
(``jaxrdp.rdp._random_allocation``) composes ``ceil(steps / t)`` epochs of
:func:`jaxrdp.mechanisms.random_allocation_rdp`; a started epoch counts whole
(the steps of an epoch that are not run are a post-processing of the whole
epoch's output).

dp_accounting's ``RandomAllocationDpEvent(event, num_selected, num_steps)``
(in versions that define it; 0.6 does not) is one epoch of it:
``RandomAllocation(num_selected / num_steps, event, num_steps, num_selected)``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jax.typing import ArrayLike

from .._core.pytrees import register_dataclass_pytree
from .._core.validation import concrete_or_none
from ._events import Event

__all__ = ["RandomAllocation", "steps_per_epoch"]

# q = k / t must give an integer t = k / q up to this relative rounding (float64 input);
# a narrower input dtype allows a few of its own ulps.
_INTEGER_TOLERANCE = 1e-9


def integer_tolerance(dtype) -> float:
  """The relative tolerance of the integrality test of ``k / q`` for a ``q`` of ``dtype``."""
  eps = float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else 0.0
  return max(_INTEGER_TOLERANCE, 8.0 * eps)


def steps_per_epoch(q, selected: int, tolerance: float = _INTEGER_TOLERANCE):
  """``(t, integral)``: the integer t with ``k / q = t`` up to ``tolerance`` (relative), and
  whether there is one (numpy or jnp).

  Where several integers are that close to ``k / q`` (a ``q`` rounded to float32 at large
  t), t is the smallest: fewer steps per epoch amplify less, so the accounting stays an
  upper bound. q = 0 gives t = inf (no example is ever used) and ``integral`` True.
  """
  import jax.numpy as jnp

  xp = np if isinstance(q, (float, int, np.ndarray, np.generic)) else jnp
  q = xp.asarray(q, dtype=xp.float64)
  positive = q > 0
  ratio = selected / xp.where(positive, q, 1.0)
  t = xp.maximum(xp.ceil(ratio * (1.0 - tolerance)), 1.0)
  integral = t <= ratio * (1.0 + tolerance)
  return xp.where(positive, t, xp.inf), xp.where(positive, integral, True)


@dataclasses.dataclass(frozen=True, eq=False)
class RandomAllocation(Event):
  """``steps`` steps of random k-out-of-t allocation of ``inner``, epoch after epoch.

  In every epoch of t = ``selected / q`` steps each example is used in k =
  ``selected`` of the t steps, a uniformly random k-subset independent of the
  other examples (:class:`jaxrdp.train.RandomAllocationSampler`; Feldman and
  Shenfeld 2025, arXiv:2502.08202; Chua et al. 2024, arXiv:2412.16802), and
  each step applies ``inner`` (a :class:`~jaxrdp.events.Gaussian` with the
  DP-SGD noise multiplier, or Gaussians composed on the batch) to its batch,
  under add/remove. ``q = k / t`` is the probability that an example is in a
  given step, as for Poisson sampling, and the privacy is close to Poisson's at
  that rate.

  RDP: ``ceil(steps / t)`` epochs (a started epoch counts whole) of
  :func:`jaxrdp.mechanisms.random_allocation_rdp`. Tight (``accountant="pld"``): the
  same epochs, each (or each block of ``floor(t / k)`` or ``ceil(t / k)`` steps) a
  dominating and a dominated discrete pair computed in exp space, composed by the
  generic discrete-PLD path (concrete inputs; ``jaxrdp.pld._allocation_pld``). The
  lower bound is read from pairs one dataset pair realizes over the steps actually
  run: for ``k = 1`` the epoch pair itself; for ``k > 1`` each epoch's summed outputs
  (a Gaussian pair: close to the truth at the noise of DP-SGD, a few per cent low at
  ``sigma`` below 1 with few steps an epoch).

  Attributes:
    q: k / t in [0, 1]; t = k / q must be an integer (q = 0: nothing is ever used).
    inner: the mechanism of a step.
    steps: the total number of steps T >= 0.
    selected: k, a Python int >= 1 (static pytree metadata, not traced).

  Examples:
    >>> import jaxrdp
    >>> from jaxrdp.events import Gaussian, RandomAllocation
    >>> ev = RandomAllocation(1 / 234, Gaussian(1.1), 60 * 234)
    >>> eps = float(jaxrdp.epsilon_from_event(ev, 1e-5).epsilon)
    >>> 2.30 < eps < 2.7  # tight value: between 2.301 and 2.383 (pld-accounting)
    True
  """

  q: ArrayLike
  inner: Event
  steps: ArrayLike
  selected: int = 1

  def __post_init__(self):
    from ..mechanisms._random_allocation import check_selected

    object.__setattr__(self, "selected", check_selected(self.selected))

  def _check(self, prefix):
    q = concrete_or_none(self.q)
    if q is not None:
      t, integral = steps_per_epoch(np.asarray(q, np.float64), self.selected)
      if not np.all(integral):
        bad = float(np.asarray(q)[~integral].flat[0])
        raise ValueError(
          f"{prefix}.q must be selected / t for an integer number t of steps per epoch "
          f"(selected = {self.selected}), got {bad!r}"
        )
      if np.any(t < self.selected):
        raise ValueError(f"{prefix}.q must be at most 1, got {float(np.max(q))!r}")


RandomAllocation._ranges = {
  "q": {"lower": 0.0, "upper": 1.0},
  "steps": {"lower": 0.0},
}
RandomAllocation._children = ("inner",)
register_dataclass_pytree(
  RandomAllocation, data_fields=["q", "inner", "steps"], meta_fields=["selected"]
)
