"""The event of a DP-SGD run: one place where the batching scheme and relation are read.

``sampling`` and ``relation`` arrive as strings at the public boundary
(``jaxrdp.dpsgd_epsilon``, the calibrations, ``sweep``, the command line);
:func:`resolve_scheme` checks them once and :func:`dpsgd_event` turns them, with
``(q, sigma, steps)``, into the event that every accountant is asked about. Below
this point nothing tests the strings: each accountant decides from the event's
type what it can account (``supports``).

=============  ==============  ==================================================
sampling       relation        event of T steps (sigma: DP-SGD noise multiplier)
=============  ==============  ==================================================
``poisson``    ``add_remove``  ``SelfComposed(PoissonSampled(q, Gaussian(sigma)), T)``
``poisson``    ``replace_one`` the same with ``PoissonSampled(..., relation="replace_one")``
``fixed``      ``replace_one`` ``SelfComposed(FixedSizeSampled(q, Gaussian(sigma)), T)``
``shuffle``    either          ``ShuffledEpochs(T q, Gaussian(sigma), relation, 1 / q)``:
                               ceil(T q) epochs in the upper bounds; epochs of
                               ceil(1 / q) steps in the lower bound
``allocation`` ``add_remove``  ``RandomAllocation(q, Gaussian(sigma), T)``: epochs of
                               t = 1 / q steps, each example in one of them
=============  ==============  ==================================================

``fixed`` under add/remove is refused (no published bound implemented; see
:data:`~jaxrdp.events.FIXED_ADD_REMOVE_ERROR`).
"""

from __future__ import annotations

import numpy as np
from jax.typing import ArrayLike

from ._allocation_events import RandomAllocation
from ._events import RELATIONS, Event, Gaussian, PoissonSampled, SelfComposed, check_relation
from ._sampling_events import FIXED_ADD_REMOVE_ERROR, FixedSizeSampled, ShuffledEpochs

__all__ = ["SAMPLINGS", "RELATIONS", "resolve_scheme", "epochs_of", "dpsgd_event"]

#: The batching schemes.
SAMPLINGS = ("poisson", "fixed", "shuffle", "allocation")


def resolve_scheme(sampling: str, relation: str | None) -> tuple[str, str]:
  """Validated ``(sampling, relation)``; ``relation=None`` picks the scheme's default.

  Defaults: ``"add_remove"`` for ``"poisson"`` and ``"shuffle"``, ``"replace_one"``
  for ``"fixed"`` (the only relation its theorem covers).

  Raises:
    ValueError: naming ``sampling`` or ``relation`` (allowed values listed), or
      for ``sampling="fixed"`` with ``relation="add_remove"``.

  Examples:
    >>> from jaxrdp.events import resolve_scheme
    >>> resolve_scheme("fixed", None)
    ('fixed', 'replace_one')
  """
  if not isinstance(sampling, str) or sampling not in SAMPLINGS:
    raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
  if relation is None:
    relation = "replace_one" if sampling == "fixed" else "add_remove"
  check_relation(relation)
  if sampling == "fixed" and relation == "add_remove":
    raise ValueError(FIXED_ADD_REMOVE_ERROR)
  if sampling == "allocation" and relation != "add_remove":
    raise ValueError(
      "relation must be 'add_remove' for sampling='allocation' (its bounds are stated "
      f"under add/remove), got {relation!r}"
    )
  return sampling, relation


def epochs_of(q: ArrayLike, steps: ArrayLike) -> np.ndarray:
  """Started epochs of T shuffled steps at ``q = B / n``: ``ceil(T q)``, at least 1 if T, q > 0.

  A started epoch counts whole; when B does not divide n an epoch has ``ceil(n / B)``
  steps, so ``T q`` over-counts, which is conservative.
  """
  q, steps = np.asarray(q, np.float64), np.asarray(steps, np.float64)
  with np.errstate(invalid="ignore", over="ignore"):
    epochs = np.maximum(np.ceil(steps * q), 1.0)
  return np.where((steps == 0) | (q == 0), 0.0, epochs)


def _shuffled_run(q, steps):
  """``(epochs, batches_per_epoch)`` of T shuffled steps at ``q = B / n``: ``(T q, 1 / q)``.

  The upper bounds count ``ceil(T q)`` epochs (:func:`epochs_of`); a run with
  T, q > 0 has at least one, even where T q underflows (it is then the smallest
  positive float). ``q = 0`` (nothing is released) has one batch per epoch.
  """
  q, steps = np.asarray(q, np.float64), np.asarray(steps, np.float64)
  with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
    epochs = np.where((steps > 0) & (q > 0), np.maximum(steps * q, np.nextafter(0.0, 1.0)), 0.0)
    epochs = np.where(np.isnan(steps) | np.isnan(q), np.nan, epochs)
    batches = np.where(q > 0, 1.0 / q, 1.0)
  return epochs, np.where(np.isnan(q), np.nan, batches)


def dpsgd_event(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  *,
  sampling: str = "poisson",
  relation: str | None = None,
) -> Event:
  """The event of ``steps`` DP-SGD steps of a batching scheme (see the module's table).

  Args:
    q: sampling rate (Poisson) or batch size over dataset size (fixed, shuffle).
    sigma: the DP-SGD noise multiplier (noise std over the clipping norm); the
      accountants apply the relation's sensitivity (2C under replace-one).
    steps: number of steps.
    sampling: ``"poisson"``, ``"fixed"``, ``"shuffle"`` or ``"allocation"`` (random
      allocation: q = 1 / t for epochs of t steps, each example in one step of each).
    relation: ``"add_remove"``, ``"replace_one"`` or ``None`` (the scheme's default).

  Examples:
    >>> from jaxrdp.events import dpsgd_event
    >>> type(dpsgd_event(0.01, 1.0, 100, sampling="shuffle")).__name__
    'ShuffledEpochs'
  """
  sampling, relation = resolve_scheme(sampling, relation)
  if sampling == "poisson":
    return SelfComposed(PoissonSampled(q, Gaussian(sigma), relation), steps)
  if sampling == "fixed":
    return SelfComposed(FixedSizeSampled(q, Gaussian(sigma), relation), steps)
  if sampling == "allocation":
    return RandomAllocation(q, Gaussian(sigma), steps)
  epochs, batches = _shuffled_run(q, steps)
  return ShuffledEpochs(epochs, Gaussian(sigma), relation, batches)
