"""Events for the other mechanisms dp_accounting describes, as jaxrdp pytrees.

Each mirrors a dp_accounting ``DpEvent`` (the name in brackets) and converts to
and from it (:func:`jaxrdp.events.from_dp_accounting`). Their numeric fields
broadcast like those of the other events. How the RDP accountant treats each:

======================================  ==========================================================
event                                   RDP curve
======================================  ==========================================================
:class:`ZCDp` (``ZCDpEvent``)           ``xi + rho alpha``: exact (the definition)
:class:`NonPrivate`                     ``inf`` at every order (no privacy; epsilon is inf)
:class:`DiscreteGaussian`               ``alpha Delta^2 / (2 sigma^2)``: bound, exact at integer
                                        orders (Canonne, Kamath, Steinke 2020)
:class:`DiscreteLaplace`                the pure-DP bound at ``epsilon = a Delta``
:class:`KaryRandomizedResponse`         exact, replace-one or replace-special
:class:`ExponentialMechanism`           bound: min of the bounded-range zCDP bound and pure DP
:class:`PermuteAndFlip`                 the pure-DP bound (see the class)
:class:`EpsilonDelta`                   delta = 0: the pure-DP bound (tight); delta > 0: refused
:class:`SingleEpochTreeAggregation`     ``alpha depth / (2 sigma^2)`` (Kairouz et al. 2021)
:class:`MixtureOfGaussians`             refused (no sound RDP bound implemented)
:class:`TruncatedSubsampledGaussian`    refused (its truncation costs a delta, not RDP)
======================================  ==========================================================

The pure-DP bound is the RDP of binary randomized response that answers truthfully
with probability ``e^eps / (1 + e^eps)``: every eps-DP mechanism is a
post-processing of it (Kairouz, Oh, Viswanath 2015, arXiv:1311.0776), so
its Renyi divergences bound the mechanism's at every order, and it is attained
(by randomized response itself).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jax.typing import ArrayLike

from .._core.pytrees import register_dataclass_pytree
from .._core.validation import check_range, concrete_or_none
from ._events import Event, dataclass_transform, event_type

__all__ = [
  "RR_RELATIONS",
  "DiscreteGaussian",
  "DiscreteLaplace",
  "EpsilonDelta",
  "ExponentialMechanism",
  "KaryRandomizedResponse",
  "MixtureOfGaussians",
  "NonPrivate",
  "PermuteAndFlip",
  "SingleEpochTreeAggregation",
  "TruncatedSubsampledGaussian",
  "ZCDp",
]

#: Neighbouring relations of :class:`KaryRandomizedResponse`.
RR_RELATIONS = ("replace_one", "replace_special")


@event_type(ranges={"rho": dict(lower=0.0), "xi": dict(lower=0.0)})
class ZCDp(Event):
  """A mechanism that satisfies ``(xi, rho)``-zCDP: RDP ``xi + rho alpha`` at every order.

  Bun and Steinke 2016, arXiv:1605.02065, Def. 1.1 (``xi = 0``: rho-zCDP). The
  Gaussian mechanism with noise multiplier sigma is ``1 / (2 sigma^2)``-zCDP.

  Attributes:
    rho: the slope, ``>= 0``.
    xi: the offset, ``>= 0`` (default 0).

  Examples:
    >>> import jaxrdp
    >>> from jaxrdp.events import ZCDp
    >>> round(float(jaxrdp.epsilon_from_event(ZCDp(0.125), 1e-5).epsilon), 4)
    2.1657
  """

  rho: ArrayLike
  xi: ArrayLike = 0.0


@event_type()
class NonPrivate(Event):
  """An operation with no privacy guarantee: infinite RDP at every order.

  dp_accounting's ``NonPrivateDpEvent``. Composed with anything, epsilon is ``inf``
  (at every delta < 1) and delta is 1.

  Examples:
    >>> import jaxrdp
    >>> from jaxrdp.events import Composed, Gaussian, NonPrivate
    >>> float(jaxrdp.epsilon_from_event(Composed((Gaussian(2.0), NonPrivate())), 1e-5).epsilon)
    inf
  """


@event_type(ranges={"sigma": dict(lower=0.0, allow_inf=True), "sensitivity": dict(lower=0.0)})
class DiscreteGaussian(Event):
  """The discrete Gaussian mechanism on an integer-valued query.

  Noise with probability ``exp(-x^2 / (2 sigma^2))`` (normalised) at each integer
  x, added to each coordinate of a query in ``Z^d`` whose L2 sensitivity is at
  most ``sensitivity``.

  RDP: ``alpha sensitivity^2 / (2 sigma^2)``, the Gaussian mechanism's. One
  coordinate shifted by an integer ``v`` has Renyi divergence at most
  ``alpha v^2 / (2 sigma^2)``, with equality at integer orders (Canonne, Kamath,
  Steinke 2020, arXiv:2004.00010, Prop. 5 and its proof); coordinates are
  independent, so the divergences of a shift ``v in Z^d`` add up to at most
  ``alpha ||v||^2 / (2 sigma^2)`` in any dimension. At fractional orders the true
  value is slightly smaller.

  Attributes:
    sigma: the noise parameter, ``>= 0``.
    sensitivity: the query's L2 sensitivity, ``>= 0`` (default 1).
  """

  sigma: ArrayLike
  sensitivity: ArrayLike = 1.0


@event_type(
  ranges={"noise_parameter": dict(lower=0.0, allow_inf=True), "sensitivity": dict(lower=0.0)}
)
class DiscreteLaplace(Event):
  """The discrete Laplace mechanism: noise ``P(x) ~ exp(-a |x|)`` on integers.

  dp_accounting's ``DiscreteLaplaceDpEvent``: an integer-valued query of L1
  sensitivity ``sensitivity``, noise parameter ``a``. It is ``a sensitivity``-DP,
  and the RDP accountant uses the pure-DP bound at that epsilon (a certified upper
  bound, not the exact curve of the discrete Laplace).

  Attributes:
    noise_parameter: ``a >= 0``; ``a = 0`` is noise of infinite spread (nothing
      released, zero loss) and ``a = inf`` no noise (infinite loss).
    sensitivity: the L1 sensitivity, ``>= 0`` (default 1).
  """

  noise_parameter: ArrayLike
  sensitivity: ArrayLike = 1


@dataclass_transform(frozen_default=True, eq_default=False)
def _meta_event(*, ranges, children=(), meta=("relation",)):
  """Like ``event_type``, with static (non-numeric) fields ``meta``."""

  def wrap(cls):
    cls = dataclasses.dataclass(frozen=True, eq=False)(cls)
    cls._ranges = dict(ranges)
    cls._children = tuple(children)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in meta]
    return register_dataclass_pytree(cls, data_fields=names, meta_fields=list(meta))

  return wrap


@_meta_event(ranges={"noise": dict(lower=0.0, upper=1.0), "buckets": dict(lower=1.0)})
class KaryRandomizedResponse(Event):
  """Randomized response over ``k`` buckets (dp_accounting's parametrisation).

  With probability ``1 - noise`` the true bucket, otherwise a bucket drawn
  uniformly from all ``k``. Two relations between neighbouring inputs:

  * ``"replace_one"``: the input bucket changes. The output laws are
    ``P = (1 - p + p/k, p/k, ..., p/k)`` and ``Q`` with the first two entries
    swapped, and the RDP is ``D_alpha(P || Q)``, computed exactly.
  * ``"replace_special"``: the record is replaced by a special one whose output
    is uniform; the RDP is ``max(D_alpha(P || U), D_alpha(U || P))`` with ``U``
    uniform, computed exactly. ``U`` is the average of the laws of the ``k``
    buckets, so by joint convexity it is never above the replace-one curve.

  With two buckets and replace-one this is :class:`~jaxrdp.events.RandomizedResponse`
  with ``p = 1 - noise / 2``.

  Attributes:
    noise: the probability ``p`` of answering a uniform bucket, in ``[0, 1]``.
    buckets: the number of buckets ``k >= 1`` (an integer; one bucket releases nothing).
    relation: ``"replace_one"`` (default) or ``"replace_special"``: static.

  Examples:
    >>> import jaxrdp
    >>> from jaxrdp.events import KaryRandomizedResponse
    >>> acct = jaxrdp.RdpAccountant([5.0])
    >>> round(float(acct.compose(acct.init(), KaryRandomizedResponse(0.3, 10)).rdp[0]), 6)
    3.11317
  """

  noise: ArrayLike
  buckets: ArrayLike
  relation: str = "replace_one"

  def __post_init__(self):
    if not isinstance(self.relation, str) or self.relation not in RR_RELATIONS:
      raise ValueError(
        f"KaryRandomizedResponse.relation must be one of {RR_RELATIONS}, got {self.relation!r}"
      )

  def _check(self, prefix):
    k = concrete_or_none(self.buckets)
    if k is not None and np.any(k != np.round(k)):
      bad = float(k[k != np.round(k)].flat[0])
      raise ValueError(f"{prefix}.buckets must be an integer, got {bad!r}")


@event_type(ranges={"epsilon": dict(lower=0.0, allow_inf=True)})
class ExponentialMechanism(Event):
  """The exponential mechanism at privacy parameter ``epsilon`` (an eps-bounded-range mechanism).

  Selecting ``r`` with probability proportional to ``exp(epsilon u(r) / (2 Delta))``
  for a utility of sensitivity ``Delta`` makes the privacy loss of every output
  lie in an interval of length ``epsilon`` (Durfee and Rogers 2019, arXiv:1905.04273).

  RDP: a certified upper bound, the smaller of

  * ``KL(eps) + eps^2 (alpha - 1) / 8`` with ``KL(eps) = g(-log((e^eps - 1) / eps))``,
    ``g(x) = e^x - 1 - x``: the largest KL divergence of an eps-bounded-range pair
    plus the zCDP slope ``eps^2 / 8`` (Cesar and Rogers 2020, arXiv:2004.07223,
    Sec. 3; dp_accounting's bound, which it caps at ``eps``), and
  * the pure-DP bound at ``eps`` (the mechanism is eps-DP), which is below ``eps``.

  Attributes:
    epsilon: the mechanism's epsilon, ``>= 0``.
  """

  epsilon: ArrayLike


@event_type(ranges={"epsilon": dict(lower=0.0, allow_inf=True)})
class PermuteAndFlip(Event):
  """The permute-and-flip mechanism at privacy parameter ``epsilon``.

  It is eps-DP (McKenna and Sheldon 2020, arXiv:2010.12603), and the RDP accountant
  uses the pure-DP bound at ``epsilon``. dp_accounting uses the Laplace mechanism's
  RDP at scale ``1 / epsilon`` instead, which is smaller; jaxrdp does not adopt it
  without a published proof that permute-and-flip is dominated by that Laplace pair
  (a random search over score vectors with 2 to 4 candidates found no violation).

  Attributes:
    epsilon: the mechanism's epsilon, ``>= 0``.
  """

  epsilon: ArrayLike


@event_type(
  ranges={"epsilon": dict(lower=0.0, allow_inf=True), "delta": dict(lower=0.0, upper=1.0)}
)
class EpsilonDelta(Event):
  """A mechanism known only to be ``(epsilon, delta)``-DP.

  With ``delta = 0`` the RDP accountant uses the pure-DP bound at ``epsilon``, the
  exact worst case over eps-DP mechanisms. With ``delta > 0`` the worst case has
  infinite Renyi divergence at every order (an event of probability delta may
  reveal the record), so no RDP curve holds it. Where it is composed
  (``Composed``, ``SelfComposed``), the RDP accountant pays it beside the curve:
  the step is a pure ``epsilon``-DP step except with probability ``delta``, so a
  run is (eps', delta_mix + (1 - delta_mix) delta_pure(eps'))-DP, with
  ``delta_mix = 1 - prod_i (1 - delta_i)`` and ``delta_pure`` the delta of the run
  with the pure parts (a sound bound, looser than the tight accountant's). Under
  sampling or selection a concrete ``delta > 0`` is refused with
  NotImplementedError, and a traced one gives ``inf``. The tight
  accountant (``accountant="pld"``) answers any ``delta``: it composes the exact
  worst case, the privacy-loss distribution with mass ``delta`` at ``+inf`` and
  ``(1 - delta) / (1 + e^{-+eps})`` at ``+-eps`` (Kairouz, Oh, Viswanath 2015).

  Attributes:
    epsilon: ``>= 0``.
    delta: in ``[0, 1]``.
  """

  epsilon: ArrayLike
  delta: ArrayLike = 0.0


@event_type(ranges={"sigma": dict(lower=0.0, allow_inf=True), "steps": dict(lower=0.0)})
class SingleEpochTreeAggregation(Event):
  """One epoch of DP-FTRL's tree aggregation with Gaussian noise on every node.

  Kairouz, McMahan, Song, Thakkar, Thakurta, Xu 2021 ("Practical and Private
  (Deep) Learning without Sampling or Shuffling", arXiv:2103.00039, App. D).
  Assumptions, those of dp_accounting's ``SingleEpochTreeAggregationDpEvent``:

  * the prefix sums of a stream of ``steps`` per-step sums of clipped
    contributions (norm <= C) are released through a binary tree whose every node
    gets independent Gaussian noise of std ``sigma C``;
  * each record contributes to at most one step of the epoch (in one tree, if the
    tree is restarted); records in several epochs compose as several events;
  * neighbours differ by replacing one record with a special record that
    contributes zero (dp_accounting's REPLACE_SPECIAL), so a node's sum changes by
    at most C. For replace-one (one record for another, 2C) use ``sigma / 2``.

  A record's step lies in at most ``depth = ceil(log2(steps + 1))`` released nodes
  (the bit length of ``steps``), so the release is a Gaussian mechanism of
  sensitivity ``sqrt(depth) C``: RDP ``alpha depth / (2 sigma^2)``. Several trees in
  one epoch, each record in only one of them, are covered by the largest tree's
  ``steps`` (dp_accounting's list of step counts becomes its maximum).

  Attributes:
    sigma: noise multiplier of every node, ``>= 0``.
    steps: the number of steps of the (largest) tree, ``>= 0``; a fractional value
      is rounded up.

  Examples:
    >>> import jaxrdp
    >>> from jaxrdp.events import SingleEpochTreeAggregation
    >>> acct = jaxrdp.RdpAccountant([2.0])
    >>> round(float(acct.compose(acct.init(), SingleEpochTreeAggregation(1.0, 1600)).rdp[0]), 9)
    11.0
  """

  sigma: ArrayLike
  steps: ArrayLike


@dataclasses.dataclass(frozen=True, eq=False)
class MixtureOfGaussians(Event):
  """A Gaussian whose mean on the neighbouring dataset is a random sensitivity.

  dp_accounting's ``MixtureOfGaussiansDpEvent`` (Ganesh 2024, arXiv:2310.15526):
  on one dataset the output is ``N(0, sigma^2)``, on its neighbour
  ``sum_i p_i N(c_i, sigma^2)``. The components are tuples (one leaf each), so
  every numeric leaf still broadcasts over a grid.

  The RDP accountant gives an upper bound on both directions (not exact: the divergence
  ``D_alpha(N(0) || mixture)`` has no closed form). The components with ``c_i = 0``
  have weight ``1 - g``, so the pair is ``N(0, s^2)`` against ``(1 - g) N(0, s^2) + g Q'``:
  Poisson sampling at rate ``g`` of the pair ``(N(0, s^2), Q')``, whose RDP (both
  directions) is at most ``log(sum_{c_i > 0} (p_i / g) exp(alpha (alpha - 1) c_i^2 /
  (2 s^2))) / (alpha - 1)`` by joint convexity of ``exp((alpha - 1) D_alpha)``; the
  general Poisson bound of :class:`~jaxrdp.events.PoissonSampled` then amplifies it,
  capped by joint convexity over the whole mixture. One component is the Gaussian
  exactly; sensitivities ``(0, c)`` are the Sampled Gaussian Mechanism, bounded within
  about 20% of its exact RDP at small ``g``; spread-out sensitivities can be several
  times loose. The tight
  accountant (``accountant="pld"``) answers it too, as dp_accounting's PLD accountant does.

  Attributes:
    sigma: the noise standard deviation, ``>= 0``.
    sensitivities: tuple of the ``c_i >= 0``.
    probs: tuple of the ``p_i`` in ``[0, 1]``, summing to 1.
  """

  sigma: ArrayLike
  sensitivities: tuple
  probs: tuple

  _ranges = {"sigma": dict(lower=0.0, allow_inf=True)}
  _children = ()

  def __post_init__(self):
    for name in ("sensitivities", "probs"):
      value = getattr(self, name)
      if not isinstance(value, (tuple, list)):
        raise TypeError(f"MixtureOfGaussians.{name} must be a tuple, got {type(value).__name__}")
      object.__setattr__(self, name, tuple(value))
    if len(self.sensitivities) != len(self.probs) or not self.sensitivities:
      raise ValueError(
        "MixtureOfGaussians needs as many sensitivities as probs (at least one), got "
        f"{len(self.sensitivities)} and {len(self.probs)}"
      )

  def _check(self, prefix):
    for i, c in enumerate(self.sensitivities):
      check_range(f"{prefix}.sensitivities[{i}]", c, lower=0.0)
    probs = []
    for i, p in enumerate(self.probs):
      check_range(f"{prefix}.probs[{i}]", p, lower=0.0, upper=1.0)
      probs.append(concrete_or_none(p))
    if all(p is not None for p in probs):
      total = np.sum(np.broadcast_arrays(*probs), axis=0)
      if np.any(np.abs(total - 1.0) > 1e-9):
        raise ValueError(f"{prefix}.probs must sum to 1, got {float(np.ravel(total)[0])!r}")


register_dataclass_pytree(MixtureOfGaussians, data_fields=["sigma", "sensitivities", "probs"])


@event_type(
  ranges={
    "dataset_size": dict(lower=0.0),
    "q": dict(lower=0.0, upper=1.0),
    "batch_size": dict(lower=0.0),
    "sigma": dict(lower=0.0, allow_inf=True),
  }
)
class TruncatedSubsampledGaussian(Event):
  """A Gaussian step on a Poisson sample truncated to at most ``batch_size`` records.

  dp_accounting's ``TruncatedSubsampledGaussianDpEvent`` (Ganesh et al. 2025,
  arXiv:2508.15089): each of ``dataset_size`` records is sampled with probability
  ``q``; a sample larger than ``batch_size`` is cut to a random subset of that size;
  then the Gaussian mechanism with noise multiplier ``sigma``.

  The RDP accountant composes it as the untruncated ``PoissonSampled(q,
  Gaussian(sigma))`` and pays truncation beside the curve: the two samplers give
  the same batch except with probability ``eta = P[Binomial(n + 1, q) >
  batch_size]`` per step, so a run is (eps, delta_rdp(eps) + (1 + e^eps) sum eta)-DP
  (:func:`jaxrdp.train.truncation_delta`). ``dataset_size``, ``q`` and
  ``batch_size`` must then be concrete (``sigma`` may be traced); under sampling
  or selection it is refused. The tight accountant (``accountant="pld"``) answers it with dp_accounting's
  construction (with the truncation probability, a replace-one subsampled Gaussian
  at ``sigma / 2``; else the subsampled Gaussian); and
  ``jaxrdp.dpsgd_epsilon(q, sigma, steps, delta, capacity=..., dataset_size=...)``
  gives the RDP accountant's bound for a run of such steps.

  Attributes:
    dataset_size: ``n >= 0``.
    q: sampling probability in ``[0, 1]``.
    batch_size: the truncation size ``>= 0``.
    sigma: the noise multiplier, ``>= 0``.
  """

  dataset_size: ArrayLike
  q: ArrayLike
  batch_size: ArrayLike
  sigma: ArrayLike
