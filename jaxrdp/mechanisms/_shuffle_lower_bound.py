"""A lower bound on the privacy of DP-SGD with shuffled batches (Chua et al. 2024).

Shuffled batches have no tight accountant; jaxrdp's upper bound for them is the
bound without amplification (:class:`jaxrdp.events.ShuffledEpochs`). This module
gives the other side: an epsilon that the true guarantee of shuffled DP-SGD
*cannot* beat, from the neighbouring datasets of Chua, Ghazi, Kamath, Kumar,
Manurangsi, Sinha, Zhang 2024 ("How Private are DP-SGD Implementations?", ICML,
arXiv:2403.17673). ``jaxrdp.dpsgd_epsilon(..., sampling="shuffle")`` reports both
(``epsilon`` and ``epsilon_lower``), through
:func:`jaxrdp.events.event_epsilon_lower_bound`.

The datasets. n = b t examples, shuffled and cut into t batches of b; each step
releases the batch sum of one-dimensional contributions plus N(0, sigma^2)
(clip norm 1). In D every example contributes -1 except the target, which
contributes +1; in D' the target contributes 0 (the "zero-out" neighbour: one
example's contribution replaced by nothing, the sensitivity-1 relation of the
noise multiplier sigma). The batch holding the target has sum -b + 2 under D
and -b + 1 under D', every other batch -b. Shifted by b, the outputs of one
epoch are the mixtures over the target's uniformly random batch J

    P = (1/t) sum_j N(2 e_j, sigma^2 I_t),   Q = (1/t) sum_j N(e_j, sigma^2 I_t).

Unlike Poisson sampling, the other examples reveal which batch is special
under *both* hypotheses, and what is left is nearly a Gaussian mechanism:
the "substantial gap" of the paper.

Under replace-one (``relation="replace_one"``) the target may instead be
replaced by an example like the others (contribution -1): every batch of D'
sums to -b, the permutation no longer matters, and Q = N(0, sigma^2 I_t)
(the target's batch mean 0 instead of 1). Every event below is then at least
as unlikely under Q as with the zero-out pair (N(e_j) lies above N(0)), so this
pair's bound is never the smaller; it is the one returned for replace-one.
(The zero-out pair is a replace-one pair as well: a contribution 0 is a
clipped gradient.)

The bound. For any event S, delta(epsilon) >= P(S) - e^epsilon Q(S), i.e.
epsilon(delta) >= log((P(S) - delta) / Q(S)). With the "cube" events
S_C = {max_j x_j > C} (and their complements for the pair taken the other
way round, Q against P), whose probabilities are closed-form,

    P(max_j x_j <= C) = Phi((C - 2) / sigma) Phi(C / sigma)^(t - 1),
    Q(max_j x_j <= C) = Phi((C - m) / sigma) Phi(C / sigma)^(t - 1),

(m = 1 for zero-out, 0 for replace-one),

the bound is maximized over C (a grid, then two finer grids around its best
point; any C gives a valid bound, the search only sets how tight: within
1e-10 relative of the maximum in the tests).

Several epochs.

* Persistent shuffling (one permutation for all epochs): the E outputs of the
  target's batch average to one Gaussian, so E epochs are one epoch at
  sigma / sqrt(E), exactly.
* Dynamic shuffling (a new permutation every epoch; what
  :class:`jaxrdp.train.ShuffleSampler` does): the epochs are independent, and
  the count N of epochs whose maximum exceeds C is Binomial(E, p_C) under D
  and Binomial(E, q_C) under D'. The events {N >= j} (and {N <= j} the other
  way round) give the bound, maximized over C and j; so does any single epoch
  (the others discarded), and the larger of the two is returned. Chua et al.
  2024 (arXiv:2411.04205) compose the law of the maximum over epochs
  numerically, which is tighter; the count statistic keeps the bound in closed
  form and exact.

Rounding: every probability is lowered (P side) or raised (Q side) by 1e-12
relative before the bound is formed, so the returned values stay lower bounds
despite float64 rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.numerics import argmin_last
from .._core.numerics import log_ndtr as _log_ndtr
from .._core.validation import check_range, concrete_or_none

__all__ = ["shuffle_delta_lower_bound", "shuffle_epsilon_lower_bound"]

_N_GRID = 384
_N_FINE = 384
_REL = 1e-12  # rounding allowance on every probability
_MAX_EPOCHS = 4096  # dynamic shuffling: the count statistic's support is 0..E
# The mean of the target's batch under D' (shifted by b): zero-out, or an example like the others.
_Q_MEAN = {"add_remove": 1.0, "replace_one": 0.0}


def _log_in_cube(c, mean, sigma, t):
  """log P(max_j x_j <= C) for the mixture with the target's mean ``mean``."""
  return _log_ndtr((c - mean) / sigma) + (t - 1.0) * _log_ndtr(c / sigma)


def _log_out(log_in):
  """log(1 - e^log_in), for log_in <= 0 (-inf at log_in = 0)."""
  return jnp.log(-jnp.expm1(jnp.minimum(log_in, 0.0)))


def _grid(sigma, t, n):
  """Thresholds C from below the null mass to beyond the target's: [..., n]."""
  spread = jnp.sqrt(2.0 * jnp.log(jnp.maximum(t, 2.0)))
  lo = -6.0 * sigma
  hi = 2.0 + sigma * (spread + 10.0)
  u = jnp.linspace(0.0, 1.0, n)
  return lo[..., None] + (hi - lo)[..., None] * u


def _tails(c, sigma, t, q_mean):
  """``(log p_out, log q_out, log p_in, log q_in)`` at thresholds ``c`` (P: mean 2, Q: ``q_mean``)."""
  s, tt = sigma[..., None], t[..., None]
  lp_in = _log_in_cube(c, 2.0, s, tt)
  lq_in = _log_in_cube(c, q_mean, s, tt)
  return _log_out(lp_in), _log_out(lq_in), lp_in, lq_in


def _log_binomial_upper(log_p, log_1mp, epochs, j):
  """log P(Binomial(E, p) >= j): [..., n, j] for p of shape [..., n], E of shape [...]."""
  e = epochs[..., None, None]
  lp, l1 = log_p[..., None], log_1mp[..., None]
  # p = 0 or 1 give 0 * -inf: those terms are zero (or the point mass), handled by where.
  term_p = jnp.where(j == 0, 0.0, j * lp)
  term_q = jnp.where(e - j == 0, 0.0, (e - j) * l1)
  log_pmf = (
    gammaln(e + 1.0) - gammaln(j + 1.0) - gammaln(jnp.maximum(e - j, 0.0) + 1.0) + term_p + term_q
  )
  log_pmf = jnp.where(j <= e, log_pmf, -jnp.inf)
  return jax.lax.cumlogsumexp(log_pmf, axis=log_pmf.ndim - 1, reverse=True)


def _event_logs(c, sigma, t, epochs, many, q_mean):
  """``(log P(S), log Q(S))`` of the candidate events at each threshold: [..., n, k] pairs.

  The first element of each pair is the hypothesis that must be likelier (the
  pair is (D, D') or (D', D)). With ``many``, the count events of dynamic shuffling.
  """
  lp_out, lq_out, lp_in, lq_in = _tails(c, sigma, t, q_mean)
  if not many:
    return [(lp_out[..., None], lq_out[..., None]), (lq_in[..., None], lp_in[..., None])]
  j = jnp.arange(_MAX_EPOCHS + 1, dtype=jnp.float64)[: int(many) + 1]
  up_p = _log_binomial_upper(lp_out, lp_in, epochs, j)  # P(#out >= j)
  up_q = _log_binomial_upper(lq_out, lq_in, epochs, j)
  in_q = _log_binomial_upper(lq_in, lq_out, epochs, j)  # Q(#in >= j)
  in_p = _log_binomial_upper(lp_in, lp_out, epochs, j)
  return [(up_p, up_q), (in_q, in_p)]


def _max_last(v):
  """The maximum over the last axis, as the element at the first maximum's index.

  Its derivative is that element's. (jnp.max's derivative finds the maximum by
  comparing v with it; compiled, XLA may compute v twice with different rounding,
  and where no element matches the derivative is 0/0: NaN, seen at
  --xla_backend_optimization_level=0.)
  """
  k = argmin_last(-v)
  return jnp.take_along_axis(v, k[..., None], axis=-1)[..., 0]


def _epsilon_bound(log_a, log_b, delta):
  """max over the last axis of log((A - delta) / B), A lowered and B raised by _REL."""
  log_a = log_a + jnp.log1p(-_REL)
  log_b = log_b + jnp.log1p(_REL)
  log_d = jnp.log(delta)[..., None, None]
  ok = (log_a > log_d) & (log_b > -jnp.inf)
  safe_a = jnp.where(ok, log_a, 0.0)
  gap = safe_a + jnp.log(-jnp.expm1(jnp.where(ok, log_d - safe_a, -1.0)))
  val = jnp.where(ok, gap - jnp.where(ok, log_b, 0.0), -jnp.inf)
  return _max_last(val)


def _delta_bound(log_a, log_b, epsilon):
  """max over the last axis of A - e^epsilon B, A lowered and B raised by _REL."""
  a = jnp.exp(log_a) * (1.0 - _REL)
  b = jnp.exp(jnp.minimum(log_b + epsilon[..., None, None], 700.0)) * (1.0 + _REL)
  return _max_last(a - b)


def _best_threshold(score_fn, sigma, t):
  """A grid of thresholds, then two finer grids around the best point so far (each
  spanning two cells of the previous one); returns the best score seen."""
  c = _grid(sigma, t, _N_GRID)
  vals = score_fn(c)  # [..., n]
  best = _max_last(vals)
  step = c[..., 1] - c[..., 0]
  u = jnp.linspace(-1.0, 1.0, _N_FINE)
  for _ in range(2):
    k = argmin_last(-vals)  # the first maximum (jnp.argmax breaks in a float32 jit)
    centre = jnp.take_along_axis(c, k[..., None], axis=-1)[..., 0]
    c = centre[..., None] + step[..., None] * u
    vals = score_fn(c)
    best = jnp.maximum(best, _max_last(vals))
    step = c[..., 1] - c[..., 0]
  return best


def _bound_f64(sigma, t, epochs, given, *, kind, reshuffle, e_max, relation):
  sigma, t, epochs, given = jnp.broadcast_arrays(
    *(_precision.as_float64(x) for x in (sigma, t, epochs, given))
  )
  combine = _epsilon_bound if kind == "epsilon" else _delta_bound
  q_mean = _Q_MEAN[relation]

  def score(c, s, many):
    parts = [combine(a, b, given) for a, b in _event_logs(c, s, t, epochs, many, q_mean)]
    return _max_last(jnp.stack(parts, axis=-1))  # [..., n]

  # One epoch; persistent shuffling is one epoch at sigma / sqrt(E) (exact); with
  # dynamic shuffling a single epoch is a post-processing of all of them.
  s1 = sigma if reshuffle else sigma / jnp.sqrt(epochs)
  best = _best_threshold(lambda c: score(c, s1, 0), s1, t)
  if reshuffle and e_max > 1:
    best = jnp.maximum(best, _best_threshold(lambda c: score(c, sigma, e_max), sigma, t))
  out = jnp.maximum(best, 0.0) if kind == "epsilon" else jnp.clip(best, 0.0, 1.0)
  bad = jnp.isnan(sigma) | jnp.isnan(given) | ~(sigma > 0) | ~(t >= 1) | ~(epochs >= 1)
  return jnp.where(bad, jnp.nan, out)


_bound_jit = jax.jit(_bound_f64, static_argnames=("kind", "reshuffle", "e_max", "relation"))


def _bucket(top: int) -> int:
  """The power of two at or above ``top`` complete epochs: the count statistic's
  support 0..bucket is computed for every cell of a compiled call (fewer compilations
  than one per count)."""
  return max(1, 1 << (int(top) - 1).bit_length())


def _e_max(epochs, reshuffle) -> int:
  """The bucket of a call evaluated in one piece: that of its largest epoch count
  (every cell pays for it), or the cap where the counts are traced."""
  if not reshuffle:
    return 1
  arr = concrete_or_none(epochs)
  if arr is None:
    return _MAX_EPOCHS
  top = int(np.max(arr)) if np.size(arr) else 1
  return _bucket(top)


# What a compilation of the kernel costs, in the work of one cell for one epoch of the
# count statistic (a cell padded to bucket E costs about E): 2.5 to 6 s against 1.7 to
# 3 ms (2-core CPU, XLA's default optimization level and level 0).
_COMPILE_COST = 1024


def _merge_buckets(buckets, counts):
  """The runs of consecutive buckets to evaluate together, as ``[(top bucket, buckets)]``.

  ``buckets`` ascending, ``counts`` their cells. A run is one compiled call padded to
  its top bucket, so its cost is ``_COMPILE_COST`` plus (cells) x (top bucket); the
  partition of least total cost (dynamic programming over at most 13 buckets; on a
  tie, fewer calls). A bucket with enough cells, or far enough below the next, is a
  run of its own.
  """
  k = len(buckets)
  best = [0.0] + [np.inf] * k  # best[j]: the least cost of the first j buckets
  cut = [0] * (k + 1)
  for j in range(1, k + 1):
    for i in range(j - 1, -1, -1):  # the longest run first: fewer calls on a tie
      cost = best[i] + _COMPILE_COST + float(np.sum(counts[i:j])) * float(buckets[j - 1])
      if cost < best[j]:
        best[j], cut[j] = cost, i
  runs, j = [], k
  while j > 0:
    runs.append((int(buckets[j - 1]), [int(b) for b in buckets[cut[j] : j]]))
    j = cut[j]
  return runs[::-1]


def _epoch_groups(args, reshuffle):
  """The cells of a call grouped by the bucket of their epoch counts.

  ``args``: the call's four arguments (sigma, t, epochs, delta or epsilon), checked.
  Each cell's bucket is the power of two at or above its own count (that of the cell
  evaluated alone); the buckets are merged into runs by :func:`_merge_buckets`, a
  run padded to its top bucket where another compilation would cost more than the
  padding. Returns ``(shape, [(bucket, flat indices), ...])``, buckets ascending, the
  indices into the broadcast shape ``shape`` raveled (C order); or ``None`` where the
  call is evaluated in one piece: persistent shuffling (no count statistic), a single
  run (the call as it is: its shape, no gather), or a traced argument (under jit,
  vmap or grad the values, and so the groups, are unknown: one call padded to the
  largest count, or to the cap for traced epochs, as :func:`_e_max` says).
  """
  if not reshuffle:
    return None
  arrs = [concrete_or_none(a) for a in args]
  if any(a is None for a in arrs):
    return None
  shape = np.broadcast_shapes(*(np.shape(a) for a in arrs))
  epochs = np.broadcast_to(arrs[2], shape).ravel()
  values, inverse = np.unique(epochs, return_inverse=True)
  if values.size == 0:
    return None
  cell_buckets = np.array([_bucket(v) for v in values])[inverse.ravel()]
  buckets, counts = np.unique(cell_buckets, return_counts=True)
  runs = _merge_buckets(buckets, counts)
  if len(runs) == 1:
    return None
  return shape, [(top, np.flatnonzero(np.isin(cell_buckets, run))) for top, run in runs]


def _lower_bound(kind, args, reshuffle, relation):
  """The bound of ``kind`` at every cell of the call ``args`` (sigma, t, epochs, given).

  A concrete call with dynamic shuffling is evaluated in groups of cells by bucket
  of complete epochs (:func:`_epoch_groups`), each a compiled call of its group's
  top bucket and size, and the results put back in the broadcast shape: a cell of a
  few epochs does not pay for the count statistic of a cell of hundreds in the same
  call. A group of one bucket gives each cell the value of the cell evaluated alone.
  """

  def call(cells, e_max):
    return _precision.elementwise_float64(
      lambda s, t, e, g: _bound_jit(
        s, t, e, g, kind=kind, reshuffle=reshuffle, e_max=e_max, relation=relation
      ),
      cells,
      down=True,
    )

  groups = _epoch_groups(args, reshuffle)
  if groups is None:
    return call(args, _e_max(args[2], reshuffle))
  shape, parts = groups
  flat = [np.broadcast_to(np.asarray(a, np.float64), shape).ravel() for a in args]
  out = np.empty(flat[0].size, np.float64)
  for bucket, idx in parts:
    out[idx] = np.asarray(call(tuple(a[idx] for a in flat), bucket), np.float64)
  # Concrete results are float64 whatever jax_enable_x64 says (as the one-piece call's).
  with _precision.Float64Scope():
    return jnp.asarray(out.reshape(shape), jnp.float64)


def _validate(sigma, steps_per_epoch, epochs, reshuffle, relation):
  check_range("sigma", sigma, lower=0.0, lower_open=True)
  check_range("steps_per_epoch", steps_per_epoch, lower=1.0)
  check_range("epochs", epochs, lower=1.0, upper=float(_MAX_EPOCHS))
  for name, v in (("steps_per_epoch", steps_per_epoch), ("epochs", epochs)):
    arr = concrete_or_none(v)
    if arr is not None and np.any(arr != np.floor(arr)):
      raise ValueError(f"{name} must be an integer, got {v!r}")
  if not isinstance(reshuffle, bool):
    raise TypeError(f"reshuffle must be a bool, got {reshuffle!r}")
  if relation not in _Q_MEAN:
    raise ValueError(f"relation must be one of {tuple(_Q_MEAN)}, got {relation!r}")


def shuffle_epsilon_lower_bound(
  sigma: ArrayLike,
  steps_per_epoch: ArrayLike,
  delta: ArrayLike,
  epochs: ArrayLike = 1,
  *,
  reshuffle: bool = True,
  relation: str = "add_remove",
) -> jax.Array:
  """An epsilon below which shuffled DP-SGD is *not* (epsilon, delta)-DP.

  For shuffled batches (``steps_per_epoch`` = t batches per epoch, noise
  multiplier ``sigma``, ``epochs`` epochs), the neighbouring datasets of Chua et
  al. 2024 (arXiv:2403.17673; module docstring) give

      epsilon(delta) >= max_C log((P(max_j x_j > C) - delta) / Q(max_j x_j > C))

  with P, Q the mixtures of N(2 e_j, sigma^2 I) and N(e_j, sigma^2 I) over the
  target's batch j (and the same with the complements and the pair swapped);
  several epochs as the module docstring says (``reshuffle=False``: one
  permutation for all epochs, exactly one epoch at sigma / sqrt(E)).

  Use it against an upper bound: a reported epsilon for shuffled training that
  lies below this value under-reports. The true epsilon of shuffled DP-SGD lies
  between this and the epsilon without amplification
  (:class:`jaxrdp.events.ShuffledEpochs`).

  Args:
    sigma: the DP-SGD noise multiplier (> 0).
    steps_per_epoch: t, batches per epoch (an integer >= 1).
    delta: in (0, 1).
    epochs: E, an integer in [1, 4096].
    reshuffle: a fresh permutation every epoch (default, as
      :class:`jaxrdp.train.ShuffleSampler`), or one for all epochs.
    relation: ``"add_remove"`` (default: the zero-out pair, the relation of
      sensitivity 1 that the noise multiplier sigma refers to) or
      ``"replace_one"`` (the target replaced by an example like the others; the
      same sigma, the DP-SGD noise multiplier; see the module docstring).

  Returns:
    float64 array of the broadcast shape; 0 where no event beats delta.

  Examples:
    >>> from jaxrdp.mechanisms import shuffle_epsilon_lower_bound
    >>> lb = float(shuffle_epsilon_lower_bound(0.5, 1000, 1e-6))
    >>> lb > 5.0   # Poisson sampling at q = 1/1000 would claim about 1.2
    True
  """
  _validate(sigma, steps_per_epoch, epochs, reshuffle, relation)
  check_range("delta", delta, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  return _lower_bound("epsilon", (sigma, steps_per_epoch, epochs, delta), reshuffle, relation)


def shuffle_delta_lower_bound(
  sigma: ArrayLike,
  steps_per_epoch: ArrayLike,
  epsilon: ArrayLike,
  epochs: ArrayLike = 1,
  *,
  reshuffle: bool = True,
  relation: str = "add_remove",
) -> jax.Array:
  """A delta below which shuffled DP-SGD is *not* (epsilon, delta)-DP.

  ``max_C [P(max_j x_j > C) - e^epsilon Q(max_j x_j > C)]`` and the other event
  families of :func:`shuffle_epsilon_lower_bound`, whose arguments it shares
  (``epsilon`` >= 0 instead of delta), ``relation`` included.

  Examples:
    >>> from jaxrdp.mechanisms import shuffle_delta_lower_bound
    >>> float(shuffle_delta_lower_bound(0.5, 1000, 2.0)) > 1e-3
    True
  """
  _validate(sigma, steps_per_epoch, epochs, reshuffle, relation)
  check_range("epsilon", epsilon, lower=0.0)
  return _lower_bound("delta", (sigma, steps_per_epoch, epochs, epsilon), reshuffle, relation)
