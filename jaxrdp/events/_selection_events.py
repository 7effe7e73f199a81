"""Hyperparameter tuning: run a mechanism a random number of times and release the best run."""

from __future__ import annotations

from jax.typing import ArrayLike

from ._events import Event, event_type

__all__ = ["RepeatAndSelect"]


@event_type(
  ranges={"mean": dict(lower=1.0), "shape": dict(lower=0.0, allow_inf=True)}, children=("event",)
)
class RepeatAndSelect(Event):
  """``event`` run K times, K random, and only the best run (by any criterion) released.

  Papernot and Steinke 2022, "Hyperparameter Tuning with Renyi Differential
  Privacy", arXiv:2110.03620. The number of runs K follows a distribution of mean
  ``mean`` and of the family given by ``shape`` (dp_accounting's
  ``RepeatAndSelectDpEvent``):

  * ``shape = inf``: Poisson; K = 0 (nothing run) is possible.
  * ``shape = 0``: logarithmic; ``shape = 1``: geometric; ``0 < shape < inf``:
    truncated negative binomial, ``P(K = k) ~ C(k + shape - 1, k) (1 - gamma)^k``
    for ``k >= 1``, with gamma set by the mean (found by bisection, rounded down,
    which is the safe side).

  RDP (an upper bound, at each of the accountant's orders ``lambda``, from the
  curve ``eps(.)`` of one run at all of them):

  * truncated negative binomial (Thm 2): ``eps(lambda) + log(mean) / (lambda - 1)
    + (1 + shape) min_mu [(1 - 1/mu) eps(mu) + log(1/gamma) / mu]``;
  * Poisson (Thm 6): ``eps(lambda) + mean delta_hat + log(mean) / (lambda - 1)``,
    ``delta_hat`` the delta of one run at ``epsilon = log(lambda / (lambda - 1))``
    (from its RDP curve);
  * then, at each order, the smallest value over the orders above it (RDP grows
    with the order). A truncated negative binomial of mean 1 is a single run: its
    curve is the run's.

  The run may be any event with an RDP curve, a whole training run included.

  Attributes:
    event: one run.
    mean: the mean number of runs, ``>= 1``.
    shape: the distribution's shape, ``>= 0`` (``inf``: Poisson).

  Examples:
    >>> import jaxrdp
    >>> from jaxrdp.events import Gaussian, RepeatAndSelect
    >>> round(float(jaxrdp.epsilon_from_event(Gaussian(4.0), 1e-5).epsilon), 3)
    1.013
    >>> tuned = RepeatAndSelect(Gaussian(4.0), mean=20, shape=float("inf"))
    >>> round(float(jaxrdp.epsilon_from_event(tuned, 1e-5).epsilon), 3)
    3.534
  """

  event: Event
  mean: ArrayLike
  shape: ArrayLike
