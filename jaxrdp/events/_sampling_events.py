"""Events of the batching schemes other than Poisson: fixed-size and shuffled batches.

Both carry the neighbouring relation explicitly, as static pytree metadata (a
string, never traced), and their inner :class:`~jaxrdp.events.Gaussian` holds the
**DP-SGD noise multiplier** sigma (noise std sigma * C for a sum of per-example
terms clipped to norm C); the RDP rule applies the relation's sensitivity itself
(C under add/remove, 2C under replace-one:
:func:`jaxrdp.mechanisms.effective_noise_multiplier`).

* :class:`FixedSizeSampled`: one step on a batch of B distinct examples drawn
  uniformly without replacement, gamma = B / n. Replace-one only (Wang, Balle,
  Kasiviswanathan 2019, arXiv:1808.00087, Thm 27, for Renyi DP; the tight
  accountant composes the pair of Dong, Roth, Su 2019, arXiv:1905.02383, Thm
  4.2); no add/remove bound for fixed-size batches is implemented, and asking
  for one raises ValueError.
* :class:`ShuffledEpochs`: ``epochs`` passes of shuffled batches (each example in
  exactly one batch per pass). No amplification by sampling: each started epoch
  is one Gaussian mechanism per example, RDP ``ceil(epochs) * alpha / (2 s^2)``
  with s the effective multiplier (the statement TensorFlow Privacy's
  ``compute_dp_sgd_privacy_statement`` prints for shuffling).
"""

from __future__ import annotations

import dataclasses

from jax.typing import ArrayLike

from .._core.pytrees import register_dataclass_pytree
from .._core.validation import check_range
from ._events import Event, Gaussian, check_relation, dataclass_transform

__all__ = ["FixedSizeSampled", "ShuffledEpochs", "check_relation", "FIXED_ADD_REMOVE_ERROR"]

#: Why ``relation="add_remove"`` is refused for fixed-size batches.
FIXED_ADD_REMOVE_ERROR = (
  "relation='add_remove' is not supported for fixed-size batches (sampling='fixed'): "
  "the bound for sampling without replacement (Wang, Balle, Kasiviswanathan 2019, "
  "arXiv:1808.00087, Thm 27) holds under replace-one, and no published add/remove "
  "bound for fixed-size batches is implemented; use relation='replace_one', or Poisson "
  "sampling for an add/remove guarantee"
)


@dataclass_transform(frozen_default=True, eq_default=False)
def _event_with_relation(*, ranges, children):
  """Like ``event_type``, plus a static ``relation`` field (pytree metadata)."""

  def wrap(cls):
    cls = dataclasses.dataclass(frozen=True, eq=False)(cls)
    cls._ranges = dict(ranges)
    cls._children = tuple(children)
    names = [f.name for f in dataclasses.fields(cls) if f.name != "relation"]
    return register_dataclass_pytree(cls, data_fields=names, meta_fields=["relation"])

  return wrap


def _check_inner(name, inner):
  if not isinstance(inner, Gaussian):
    raise TypeError(f"{name}.inner must be a Gaussian event, got {type(inner).__name__}")


@_event_with_relation(ranges={"gamma": dict(lower=0.0, upper=1.0)}, children=("inner",))
class FixedSizeSampled(Event):
  """``inner`` on a fixed-size batch drawn uniformly without replacement.

  One DP-SGD step on B of the n examples (``gamma = B / n``); ``inner.sigma`` is
  the DP-SGD noise multiplier. RDP: Wang, Balle, Kasiviswanathan 2019
  (arXiv:1808.00087), Thm 27
  (:func:`jaxrdp.mechanisms.sampled_without_replacement_gaussian_rdp`) at the
  relation's effective multiplier, sigma / 2 under replace-one. Tight
  (``accountant="pld"``, certified ``epsilon`` and ``epsilon_lower``): the step is
  ``C_gamma(G_{2 / sigma})``-DP (Dong, Roth, Su 2019, arXiv:1905.02383, Thm 4.2),
  whose profile is the maximum of the remove and add profiles of the Poisson pair
  at sigma / 2; that one symmetric pair is composed (``jaxrdp.pld._fixed_size_step`` on
  the tight engine, under ``jit`` and ``vmap`` too; ``jaxrdp.pld._fixed_size_pairs`` where
  the generic path composes it with other events).

  Attributes:
    gamma: sampling ratio B / n in [0, 1].
    inner: a :class:`~jaxrdp.events.Gaussian` with the DP-SGD noise multiplier.
    relation: ``"replace_one"`` (the default and the only relation accepted;
      ``"add_remove"`` raises ValueError: the bound holds under replace-one).

  Examples:
    >>> import jaxrdp
    >>> from jaxrdp.events import FixedSizeSampled, Gaussian, SelfComposed
    >>> ev = SelfComposed(FixedSizeSampled(256 / 60000, Gaussian(1.1)), 14063)
    >>> round(float(jaxrdp.epsilon_from_event(ev, 1e-5).epsilon), 1)
    24.1
  """

  gamma: ArrayLike
  inner: Event
  relation: str = "replace_one"

  def __post_init__(self):
    check_relation(self.relation)
    if self.relation == "add_remove":
      raise ValueError(FIXED_ADD_REMOVE_ERROR)
    _check_inner("FixedSizeSampled", self.inner)


@_event_with_relation(ranges={"epochs": dict(lower=0.0)}, children=("inner",))
class ShuffledEpochs(Event):
  """``epochs`` passes of shuffled batches, each example used once per pass.

  No amplification: every started epoch is one Gaussian mechanism per example,
  so the RDP is ``ceil(epochs) * alpha / (2 s^2)``, s the relation's effective
  multiplier of ``inner.sigma`` (the DP-SGD noise multiplier), and the tight
  accountant's epsilon is that of the Gaussian mechanism composed ``ceil(epochs)``
  times. Both are upper bounds.

  With ``batches_per_epoch`` (n / B: the dataset size over the batch size) the
  event describes the run exactly (``epochs * batches_per_epoch`` steps, epochs
  of ``ceil(n / B)`` batches as :class:`jaxrdp.train.ShuffleSampler` draws them,
  a fresh permutation each), and the accountants' answers also carry a
  certified *lower* bound on its true epsilon (``epsilon_lower``): the bound of
  Chua et al. 2024 (arXiv:2403.17673) over the run's complete epochs
  (:func:`jaxrdp.events.event_epsilon_lower_bound`).

  "add_remove" here is the relation of sensitivity C that both bounds use: the
  target's clipped gradient against none at all in its batch (the "zero-out"
  neighbour; with batches of a fixed size B, literally removing an example would
  also move the others).

  Attributes:
    epochs: number of epochs >= 0; a partial epoch counts as a whole one in the
      upper bounds, and not at all in the lower bound.
    inner: a :class:`~jaxrdp.events.Gaussian` with the DP-SGD noise multiplier.
    relation: ``"add_remove"`` (default) or ``"replace_one"``.
    batches_per_epoch: ``None`` (default: unknown, no lower bound) or n / B >= 1
      (need not be an integer: an epoch then has ``ceil(n / B)`` batches, the
      last one short).

  Examples:
    >>> import jaxrdp
    >>> from jaxrdp.events import Gaussian, ShuffledEpochs
    >>> round(float(jaxrdp.epsilon_from_event(ShuffledEpochs(60, Gaussian(1.1)), 1e-5).epsilon), 1)
    57.0
  """

  epochs: ArrayLike
  inner: Event
  relation: str = "add_remove"
  batches_per_epoch: ArrayLike | None = None

  def __post_init__(self):
    check_relation(self.relation)
    _check_inner("ShuffledEpochs", self.inner)

  def _check(self, prefix):
    if self.batches_per_epoch is not None:
      check_range(f"{prefix}.batches_per_epoch", self.batches_per_epoch, lower=1.0, allow_inf=True)
