"""Batch samplers with static shapes: index arrays and validity masks.

Each sampler returns, for a step t, ``(indices, mask)``: ``int32[capacity]``
indices into a dataset of n examples and a ``bool[capacity]`` mask of the
entries that are in the batch (padding entries hold index 0 and are masked).
The shapes never change, so a jitted step that gathers ``data[indices]``
compiles once, and its cost is set by the capacity, not by n.

* :class:`PoissonSampler`: Poisson subsampling (each example independently
  with probability q, the batch size Binomial(n, q)), truncated at a capacity
  B_max. The accounting is that of the Sampled Gaussian Mechanism plus
  :func:`truncation_delta` (below).
* :class:`FixedSizeSampler`: exactly B distinct examples, uniformly without
  replacement (Wang, Balle, Kasiviswanathan 2019, arXiv:1808.00087; accounted
  by :func:`jaxrdp.mechanisms.sampled_without_replacement_gaussian_rdp` under
  replace-one).
* :class:`ShuffleSampler`: a fresh permutation per epoch cut into batches of B;
  every example exactly once per epoch (no amplification by sampling; each
  epoch is one Gaussian mechanism per example).
* :class:`RandomAllocationSampler`: random allocation ("balls in bins"): in
  every epoch of t steps each example is placed in k of the t steps, chosen
  uniformly and independently of the other examples; batch sizes are
  Binomial(n, k / t), padded or truncated to a capacity as for Poisson
  (Feldman and Shenfeld 2025, arXiv:2502.08202; Chua et al. 2024,
  arXiv:2412.16802; accounted by :class:`jaxrdp.events.RandomAllocation`).

Reproducibility and checkpoints. The samplers are counter-based: the batch of
step t is a pure function of ``(seed, t)`` (numpy's ``default_rng`` seeded by
the tuple ``(seed, t, stream)``, and for shuffling ``(seed, epoch, stream)``).
They hold no mutable state, so the only thing a checkpoint needs is the step
counter the training state already has, plus the sampler's constructor
arguments (:meth:`config`). A resumed run that calls ``sample(t)`` for the
remaining steps draws exactly the batches an uninterrupted run would.

Host, not device. The samplers run on the host with numpy: drawing a uniform
subset of k distinct indices out of n at O(k) cost needs a hash set (Floyd's
algorithm, which numpy's ``Generator.choice(replace=False)`` uses when k is
small against n); the exact device methods (``jax.random.choice`` without
replacement, a permutation, a top-k of n keys) cost O(n) per step, which is
what this module avoids. The indices (a few KB) are passed to the jitted step
as an argument; the dataset itself may live on the host (gather there, see
:func:`jaxrdp.train.gather_batch`) or on the device (gather inside jit).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._core.validation import check_int as _check_int
from ..events._allocation_events import RandomAllocation
from ..events._events import Gaussian, PoissonSampled, check_relation
from ..events._sampling_events import FixedSizeSampled, ShuffledEpochs
from ..mechanisms._truncated_poisson import (
  _check_q,
  binomial_log_sf,
  default_capacity,
  truncated_poisson_delta,
  truncation_delta,
)

__all__ = [
  "PoissonSampler",
  "FixedSizeSampler",
  "ShuffleSampler",
  "RandomAllocationSampler",
  "default_capacity",
  "truncation_delta",
  "truncated_poisson_delta",
  "binomial_log_sf",
]

_STREAM_POISSON = 0x5053  # distinct streams, so samplers sharing a seed differ
_STREAM_FIXED = 0x4658
_STREAM_SHUFFLE = 0x5348
_STREAM_ALLOCATION = 0x5241


#: The largest seed: the train state and its checkpoints store it as an int64.
MAX_SEED = 2**63 - 1


def _check_seed(seed):
  if isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_)):
    if not 0 <= int(seed) <= MAX_SEED:
      raise ValueError(
        f"seed must be in [0, 2**63 - 1] (it is stored as an int64 in the train state "
        f"and its checkpoints), got {int(seed)}"
      )
  return _check_int("seed", seed, 0, MAX_SEED)


def _distinct_uniform(rng, n, k):
  """k distinct indices, a uniformly random k-subset of range(n), sorted; O(k) for k << n."""
  if k == 0:
    return np.zeros(0, dtype=np.int64)
  # numpy's choice without replacement: Floyd's algorithm with a hash set
  # when k is small against n, a partial shuffle otherwise; uniform either way.
  return np.sort(rng.choice(n, size=k, replace=False, shuffle=False))


def _pad(idx, capacity):
  indices = np.zeros(capacity, dtype=np.int32)
  mask = np.zeros(capacity, dtype=bool)
  indices[: idx.size] = idx
  mask[: idx.size] = True
  return indices, mask


@dataclasses.dataclass(frozen=True)
class PoissonSampler:
  """Poisson subsampling of ``n`` examples at rate ``q``, padded or truncated to ``capacity``.

  Step t: draw K ~ Binomial(n, q); keep K' = min(K, capacity); draw a
  uniformly random K'-subset of range(n). Conditional on its size, a Poisson
  sample is a uniformly random subset of that size (each subset S has
  probability ``q^|S| (1 - q)^(n - |S|)``, which depends only on ``|S|``), so on the
  event K <= capacity the batch has exactly the Poisson distribution, and in
  all cases it is the Poisson batch with min(K, capacity) of its members
  kept at random. The difference is paid for by :func:`truncation_delta`
  and :func:`truncated_poisson_delta`.
  Cost O(capacity) per step (numpy's exact binomial sampler and Floyd's
  algorithm); nothing is O(n).

  Attributes:
    n: dataset size (int >= 1).
    q: sampling rate in (0, 1].
    capacity: B_max (int >= 1); :func:`default_capacity` chooses one.
    seed: an int in [0, 2**63 - 1] (stored as an int64 in the train state).

  The batch of step t is a function of (seed, t) only; see the module
  docstring for checkpointing. Normalize the summed gradient by the expected
  batch size ``q * n`` (:attr:`expected_batch_size`), never by the realized
  one.

  Examples:
    >>> from jaxrdp.train import PoissonSampler
    >>> s = PoissonSampler(n=1000, q=0.05, capacity=80, seed=0)
    >>> idx, mask = s.sample(0)
    >>> idx.shape, mask.shape, idx.dtype
    ((80,), (80,), dtype('int32'))
  """

  n: int
  q: float
  capacity: int
  seed: int = 0

  def __post_init__(self):
    object.__setattr__(self, "n", _check_int("n", self.n, 1, 2**31 - 1))
    object.__setattr__(self, "q", _check_q(self.q))
    object.__setattr__(self, "capacity", _check_int("capacity", self.capacity, 1, self.n))
    object.__setattr__(self, "seed", _check_seed(self.seed))

  @property
  def expected_batch_size(self) -> float:
    """``q * n``, the divisor of the summed clipped gradients."""
    return self.q * self.n

  def config(self) -> dict:
    """Constructor arguments (store them with the step counter in a checkpoint)."""
    return dataclasses.asdict(self)

  #: The ``sampling=`` name of the scheme, its default relation, and its checkpoint tag.
  sampling = "poisson"
  default_relation = "add_remove"
  kind = 0
  #: Steps per composed event (one event per step).
  steps_per_event = 1

  def event(self, sigma, relation: str = "add_remove"):
    """The event of one step with DP-SGD noise multiplier ``sigma``: the Sampled Gaussian.

    Truncation at the capacity is not in it (see :meth:`truncation_delta`).
    """
    return PoissonSampled(self.q, Gaussian(sigma), relation)

  def batch_size(self, step: int) -> int:
    """The untruncated Poisson batch size K of step t (for diagnostics)."""
    rng = np.random.default_rng((self.seed, _check_int("step", step, 0), _STREAM_POISSON))
    return int(rng.binomial(self.n, self.q))

  def sample(self, step: int) -> tuple[np.ndarray, np.ndarray]:
    """``(int32[capacity] indices, bool[capacity] mask)`` of step ``step``."""
    rng = np.random.default_rng((self.seed, _check_int("step", step, 0), _STREAM_POISSON))
    k = int(rng.binomial(self.n, self.q))
    idx = _distinct_uniform(rng, self.n, min(k, self.capacity))
    return _pad(idx, self.capacity)

  def truncation_delta(self, steps: int) -> float:
    """:func:`truncation_delta` for this sampler over ``steps`` steps, at n + 1.

    Neighbouring datasets under add/remove have n and n + 1 examples; the
    larger n gives the larger tail, so n + 1 covers both.
    """
    return truncation_delta(self.n + 1, self.q, self.capacity, steps)


class _BatchOfSizeB:
  """What the samplers with batches of exactly ``batch_size`` examples share (a mixin
  of frozen dataclasses with fields ``n``, ``batch_size`` and ``seed``): validation,
  the capacity (B, no padding beyond it) and the normalizer (B, a constant)."""

  def __post_init__(self):
    object.__setattr__(self, "n", _check_int("n", self.n, 1, 2**31 - 1))
    object.__setattr__(self, "batch_size", _check_int("batch_size", self.batch_size, 1, self.n))
    object.__setattr__(self, "seed", _check_seed(self.seed))

  @property
  def capacity(self) -> int:
    return self.batch_size

  @property
  def expected_batch_size(self) -> float:
    return float(self.batch_size)


@dataclasses.dataclass(frozen=True)
class FixedSizeSampler(_BatchOfSizeB):
  """Exactly ``batch_size`` distinct examples per step, uniformly without replacement.

  Every batch is a uniformly random subset of size B, independent across
  steps. Accounting: :func:`jaxrdp.mechanisms.sampled_without_replacement_gaussian_rdp`
  at gamma = B / n under replace-one (with the DP-SGD multiplier halved,
  :func:`jaxrdp.mechanisms.effective_noise_multiplier`). Normalize by B.

  Examples:
    >>> from jaxrdp.train import FixedSizeSampler
    >>> idx, mask = FixedSizeSampler(n=100, batch_size=10, seed=1).sample(3)
    >>> len(set(idx.tolist())), bool(mask.all())
    (10, True)
  """

  n: int
  batch_size: int
  seed: int = 0

  sampling = "fixed"
  default_relation = "replace_one"
  kind = 1
  steps_per_event = 1

  @property
  def sampling_ratio(self) -> float:
    """gamma = B / n, the ``gamma`` of the without-replacement bound."""
    return self.batch_size / self.n

  def event(self, sigma, relation: str = "replace_one"):
    """The event of one step: ``FixedSizeSampled(B / n, Gaussian(sigma), relation)``."""
    return FixedSizeSampled(self.sampling_ratio, Gaussian(sigma), relation)

  def config(self) -> dict:
    return dataclasses.asdict(self)

  def sample(self, step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng((self.seed, _check_int("step", step, 0), _STREAM_FIXED))
    return _pad(_distinct_uniform(rng, self.n, self.batch_size), self.batch_size)


@dataclasses.dataclass(frozen=True)
class ShuffleSampler(_BatchOfSizeB):
  """Shuffled epochs: a permutation per epoch, cut into batches of ``batch_size``.

  Epoch e uses the permutation drawn from (seed, e). An epoch has
  ceil(n / B) steps; when B does not divide n, the last batch of each epoch
  holds the n mod B remaining examples and is padded with masked entries
  (nothing is dropped), so every example is used exactly once per epoch.
  Step t is batch t mod ceil(n / B) of epoch t // ceil(n / B). Normalize by B
  (a constant; the short last batch is then simply smaller, which is
  post-processing).

  Accounting: no amplification. An example is in exactly one batch per
  epoch, so an epoch is one Gaussian mechanism per example with the
  sensitivity of the relation (RDP ceil(epochs) * alpha / (2 s^2), s the
  mechanism's multiplier), the bound TensorFlow Privacy's
  ``compute_dp_sgd_privacy_statement`` prints for shuffling. Quoting the
  Poisson epsilon for shuffled batches under-reports (Chua et al. 2024,
  arXiv:2403.17673; arXiv:2411.04205).

  The permutation costs O(n) once per epoch, i.e. O(B) per step amortized;
  the current epoch's permutation is cached.

  Examples:
    >>> from jaxrdp.train import ShuffleSampler
    >>> s = ShuffleSampler(n=10, batch_size=4, seed=0)
    >>> s.steps_per_epoch
    3
    >>> sorted(i for t in range(3) for i, m in zip(*s.sample(t)) if m) == list(range(10))
    True
  """

  n: int
  batch_size: int
  seed: int = 0
  _cache: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

  sampling = "shuffle"
  default_relation = "add_remove"
  kind = 2

  @property
  def steps_per_epoch(self) -> int:
    return -(-self.n // self.batch_size)

  @property
  def steps_per_event(self) -> int:
    """One event per epoch, composed at its first step."""
    return self.steps_per_epoch

  def event(self, sigma, relation: str = "add_remove"):
    """The event of one epoch: ``ShuffledEpochs(1, Gaussian(sigma), relation)``."""
    return ShuffledEpochs(1.0, Gaussian(sigma), relation)

  def config(self) -> dict:
    return {"n": self.n, "batch_size": self.batch_size, "seed": self.seed}

  def _permutation(self, epoch):
    perm = self._cache.get(epoch)
    if perm is None:
      rng = np.random.default_rng((self.seed, epoch, _STREAM_SHUFFLE))
      perm = rng.permutation(self.n).astype(np.int32)
      self._cache.clear()
      self._cache[epoch] = perm
    return perm

  def sample(self, step: int) -> tuple[np.ndarray, np.ndarray]:
    step = _check_int("step", step, 0)
    epoch, b = divmod(step, self.steps_per_epoch)
    perm = self._permutation(epoch)
    return _pad(perm[b * self.batch_size : (b + 1) * self.batch_size], self.batch_size)


def _allocate(rng, n, t, k):
  """One epoch of random allocation: ``(members, ends)``.

  Every example gets k distinct steps of ``range(t)``, a uniformly random
  k-subset drawn independently of the other examples (Floyd's algorithm,
  vectorized over the examples: for j = t - k .. t - 1 draw r uniform in
  [0, j] and take r, or j if r is already taken; each k-subset has probability
  1 / C(t, k)). The (example, step) pairs are grouped by step with a stable
  sort on the step after a random permutation of the examples, so the members
  of a step come in a uniformly random order: any prefix of a step's members
  is a uniformly random subset of them (what truncation keeps). Step s holds
  ``members[ends[s - 1]:ends[s]]`` (``ends[-1]`` read as 0). O(n k log(n k)).
  """
  order = rng.permutation(n)
  if k == 1:
    steps = rng.integers(0, t, size=n)
    examples = order
  else:
    chosen = np.empty((n, k), dtype=np.int64)
    for c, j in enumerate(range(t - k, t)):
      r = rng.integers(0, j + 1, size=n)
      taken = np.any(chosen[:, :c] == r[:, None], axis=1) if c else np.zeros(n, bool)
      chosen[:, c] = np.where(taken, j, r)
    steps = chosen.reshape(-1)
    examples = np.repeat(order, k)
  by_step = np.argsort(steps, kind="stable")
  members = examples[by_step].astype(np.int32)
  ends = np.cumsum(np.bincount(steps, minlength=t))
  return members, ends


@dataclasses.dataclass(frozen=True)
class RandomAllocationSampler:
  """Random allocation: each example in ``selected`` of every epoch's ``steps_per_epoch`` steps.

  In epoch e (steps ``e t .. e t + t - 1``, t = ``steps_per_epoch``) every
  example is placed in k = ``selected`` distinct steps, a uniformly random
  k-subset of the t steps, independently of the other examples ("balls in
  bins" for k = 1: Chua et al. 2024, arXiv:2412.16802; "random k-out-of-t
  allocation": Feldman and Shenfeld 2025, arXiv:2502.08202). Like shuffling,
  every example is used k times per epoch; unlike shuffling, the batch sizes
  vary: each example is in a given step with probability q = k / t,
  independently of the others, so a batch has Binomial(n, q) examples (the
  sizes of one epoch sum to n k), and the privacy is close to Poisson
  sampling at rate q (:class:`jaxrdp.events.RandomAllocation`).

  Capacity and truncation. The step takes ``capacity`` entries and a mask,
  as :class:`PoissonSampler`. A batch larger than the capacity keeps a
  uniformly random subset of ``capacity`` of its members and drops the
  others. Truncation is accounted, not avoided (no capacity below n can
  rule it out: all n examples may land in the same step).
  Couple the truncating sampler with the untruncated one (same allocation):
  their released outputs differ only if some released step's batch exceeds
  the capacity. Every example is in a given step with probability q = k / t,
  independently of the other examples (their k-subsets are independent), so
  marginally each batch is Binomial(n, q) exactly as a Poisson batch (the
  sizes within an epoch are dependent, which a union bound does not need):
  over T steps the two runs differ with probability at most
  ``eta = T P[Binomial(n + 1, q) > capacity]`` (n + 1 for add/remove
  neighbours, the larger tail), and an (epsilon, delta)-DP guarantee of the
  untruncated run gives (epsilon, delta + (1 + e^epsilon) eta) for the
  truncated one: :meth:`truncation_delta` and :func:`truncated_poisson_delta`,
  the same terms as for Poisson; :func:`default_capacity` at rate q chooses
  a capacity whose term is at most 1e-3 delta. The training step
  (``make_dpsgd_step(..., sampler=)``) pays this term in the epsilon it
  reports, for every step of each started epoch.

  Cost. Epoch e is drawn from ``(seed, e)``: the k-subsets of all n examples
  grouped by step, O(n k log(n k)) once per epoch and cached (the current
  epoch only), i.e. O(k log(n k)) per example, O(capacity) per step
  amortized when the capacity is near the mean batch n k / t. A step itself
  copies its (at most capacity) members. As for :class:`ShuffleSampler`, the
  batch of step t is a function of ``(seed, t)`` only, so a resumed run draws
  the batches an uninterrupted one would; the checkpoint needs
  :meth:`config` and the step counter.

  Normalize the summed gradient by the expected batch size ``n k / t``
  (:attr:`expected_batch_size`), never by the realized one.

  Attributes:
    n: dataset size (int >= 1).
    steps_per_epoch: t, the steps of an epoch (int >= 1).
    capacity: the batch capacity B_max (int in [1, n]).
    selected: k, the steps each example is in per epoch (int in [1, t]).
    seed: an int in [0, 2**63 - 1].

  Examples:
    >>> from jaxrdp.train import RandomAllocationSampler
    >>> s = RandomAllocationSampler(n=1000, steps_per_epoch=10, capacity=140, seed=0)
    >>> idx, mask = s.sample(0)
    >>> idx.shape, s.q, s.expected_batch_size
    ((140,), 0.1, 100.0)
    >>> epoch = [i for t in range(10) for i, m in zip(*s.sample(t)) if m]
    >>> sorted(epoch) == list(range(1000))  # each example once (no batch was truncated)
    True
  """

  n: int
  steps_per_epoch: int
  capacity: int
  selected: int = 1
  seed: int = 0
  _cache: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

  def __post_init__(self):
    object.__setattr__(self, "n", _check_int("n", self.n, 1, 2**31 - 1))
    t = _check_int("steps_per_epoch", self.steps_per_epoch, 1, 2**31 - 1)
    object.__setattr__(self, "steps_per_epoch", t)
    object.__setattr__(self, "capacity", _check_int("capacity", self.capacity, 1, self.n))
    object.__setattr__(self, "selected", _check_int("selected", self.selected, 1, t))
    object.__setattr__(self, "seed", _check_seed(self.seed))

  sampling = "allocation"
  default_relation = "add_remove"
  kind = 3

  @property
  def q(self) -> float:
    """The probability k / t that an example is in a given step (the event's ``q``)."""
    return self.selected / self.steps_per_epoch

  @property
  def steps_per_event(self) -> int:
    """One event per epoch, composed at its first step."""
    return self.steps_per_epoch

  def event(self, sigma, relation: str = "add_remove"):
    """The event of one epoch: ``RandomAllocation(k / t, Gaussian(sigma), t, k)``.

    The training step composes it at the first step of every epoch; truncation
    at the capacity is not in it (see :meth:`truncation_delta`). A run of T
    steps is ``RandomAllocation(k / t, Gaussian(sigma), T, k)`` (``ceil(T / t)``
    epochs), for k = 1 ``jaxrdp.dpsgd_epsilon(q, sigma, T, delta,
    sampling="allocation", capacity=, dataset_size=)``.
    """
    check_relation(relation, allowed=("add_remove",))
    return RandomAllocation(self.q, Gaussian(sigma), self.steps_per_epoch, self.selected)

  @property
  def expected_batch_size(self) -> float:
    """The mean batch size n k / t (normalize the summed gradient by it)."""
    return self.n * self.selected / self.steps_per_epoch

  def config(self) -> dict:
    """Constructor arguments (store them with the step counter in a checkpoint)."""
    return {
      "n": self.n,
      "steps_per_epoch": self.steps_per_epoch,
      "capacity": self.capacity,
      "selected": self.selected,
      "seed": self.seed,
    }

  def _epoch(self, epoch):
    got = self._cache.get(epoch)
    if got is None:
      rng = np.random.default_rng((self.seed, epoch, _STREAM_ALLOCATION))
      got = _allocate(rng, self.n, self.steps_per_epoch, self.selected)
      self._cache.clear()
      self._cache[epoch] = got
    return got

  def _members(self, step):
    epoch, s = divmod(_check_int("step", step, 0), self.steps_per_epoch)
    members, ends = self._epoch(epoch)
    return members[(ends[s - 1] if s else 0) : ends[s]]

  def batch_size(self, step: int) -> int:
    """The untruncated batch size of step ``step`` (for diagnostics)."""
    return int(self._members(step).size)

  def sample(self, step: int) -> tuple[np.ndarray, np.ndarray]:
    """``(int32[capacity] indices, bool[capacity] mask)`` of step ``step``."""
    members = self._members(step)
    # The members come in a uniformly random order (see _allocate): the first
    # `capacity` of them are a uniformly random subset.
    return _pad(np.sort(members[: self.capacity]), self.capacity)

  def truncation_delta(self, steps: int) -> float:
    """:func:`truncation_delta` at q = k / t over ``steps`` steps, at n + 1 (add/remove)."""
    return truncation_delta(self.n + 1, self.q, self.capacity, steps)
