"""The minimum of epsilon over a grid of orders without evaluating every order.

epsilon(alpha) = conv(T * f(alpha) / (alpha - 1), alpha) with f = log A_alpha is
increasing in f, and f is convex in alpha with f(0) = f(1) = 0 (log E[X^alpha]
is convex by Hoelder's inequality). So exact values of f at a set of *known*
orders bound f at every other order:

    upper: the chord between the neighbouring known points, and
           f(alpha) <= alpha (alpha - 1) / (2 sigma^2) (the SGM is never worse
           than the Gaussian mechanism it subsamples);
    lower: the secants of the neighbouring known intervals, extended (a convex
           function lies above them outside their interval), and 0.

The known set starts as a coarse set of integer orders (cheap and exact: the
positive finite series). An order can only be optimal while the epsilon of its
lower bound is below the best exact epsilon found so far. The search then adds
one order per round and configuration, the one estimated to be the smallest (by
the cubic through the nearest known points, clipped to the bounds), evaluates it
exactly (quadrature) and tightens the bounds around it, until no order is left in
contention. On realistic grids that takes 0 to 6 exact evaluations per
configuration (1.9 on average on the standard benchmark grid), instead of one
per order. The estimate only decides the order in which orders are evaluated,
never which are ruled out.

A caller that searched the same configuration before at more noise (or a smaller
q) can pass what that search learnt as floors (``f_floor``, from
``SearchResult.table``): log A_alpha is non-increasing in sigma and non-decreasing
in q at every order (more noise is post-processing; a smaller q mixes the output
with the no-data distribution, and A_alpha is convex in its first argument), so
those bounds hold here too, and from a nearby sigma they are nearly exact. They
raise the lower bounds, and the order picked next is then the one with the
smallest lower bound, which is nearly always the optimum: about one evaluation
per configuration. The calibrations use this.

Each round evaluates at most ``_rows_per_round`` configurations that are still
in contention, so finished configurations cost nothing and shapes stay static.
They are taken by priority (a top-k selection): most orders in contention first, so
that the configurations needing many rounds start early and the last rounds are
not left nearly empty; and last, together, those whose next order is above 65,
which usually needs the full quadrature layout (run in chunks of the round's
configurations that need it). A configuration's own sequence of orders does
not depend on when it is evaluated. The search always runs to the end: every
round gives each selected configuration an order it has not
evaluated, so the loop bound below (enough rounds to evaluate every order of
every configuration) is never what stops it. Even on grids where many orders
stay in contention it costs less than evaluating every order of the whole
batch (benchmarks/README.md), which is why there is no exhaustive fallback. The result is the minimum
over the orders evaluated exactly, so it is always a sound epsilon (every one
of them is a valid bound), and the exact grid minimum where ``exact`` is True:
everywhere but the configurations ``live`` excludes.

Derivatives: the minimum over a finite set is differentiated at its minimiser
(the selected order), so the search itself runs without gradients and the
derivative of epsilon at the selected order is attached with ``custom_jvp``; it
costs one quadrature only when a derivative is actually taken.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core.numerics import argmin_last, floor_rate, positive_subnormal, raise_subnormal
from .._core.static_index import put_last, take_last
from .._core.validation import DELTA, StaticArray
from ..mechanisms._sgm import _log_a_f64
from ..rdp._conversions import _epsilon_per_order, tv_threshold

__all__ = ["SearchResult", "min_epsilon_over_orders", "table_size", "with_derivative_at_order"]

_COARSE = np.array([2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 24, 32, 48, 64], dtype=np.float64)
# Configurations evaluated per round: the whole batch when it is small, else a
# quarter of it (at least _MIN_ROWS), so that the work tracks the number of
# configurations still in contention.
_MIN_ROWS = 64


class SearchResult(NamedTuple):
  epsilon: jax.Array
  order: jax.Array
  exact: jax.Array  # True where the result equals the exact grid minimum
  evaluations: jax.Array  # orders evaluated by quadrature, per configuration (int32)
  # Lower bounds on log A_alpha at the search's points (its own sorted layout: batch
  # shape + (P,)): exact where evaluated, the convexity bound elsewhere.
  # ``f_floor`` of a later search of the same configuration at more noise or a
  # smaller sampling rate takes it (see min_epsilon_over_orders).
  table: jax.Array


def _rows_per_round(n: int) -> int:
  return n if n <= _MIN_ROWS else max(_MIN_ROWS, -(-n // 4))


def _top_rows(priority, k, max_priority):
  """``lax.top_k(priority, k)`` for int32 priorities in [0, max_priority] (ties to
  the lower index), as one sort of a combined key (priority, then reversed
  index): XLA's CPU backend sorts one int32 operand much faster than top_k's
  (value, index) pairs (benchmarks/README.md). Where the key would not fit in
  int32, top_k itself."""
  n = priority.shape[0]
  bits = max(n - 1, 1).bit_length()
  if (max_priority + 1) << bits > np.iinfo(np.int32).max:
    return jax.lax.top_k(priority, k)
  low = (1 << bits) - 1
  key = (priority << bits) | (low - jnp.arange(n, dtype=jnp.int32))
  best = -jnp.sort(-key)[:k]  # the k largest keys, largest first
  return best >> bits, low - (best & low)


def _eps_of(f, alpha, steps, delta, method, a_min=None, tv_rows=None):
  """epsilon at each order from f = log A (orders along the last axis).

  The total-variation rule (epsilon 0 where delta >= sqrt(1 - exp(-r))) applies at
  order ``a_min`` in the rows where ``tv_rows`` (one bool per row) is True, and
  nowhere without them. Not at every order: a lower bound of 0 on f would then give
  a lower bound of 0 on epsilon and keep every order in contention. The smallest
  order suffices (the RDP is non-decreasing in alpha, so that order decides), and
  only the rows where the rule may hold need it (see ``_tv_rows``).
  """
  rdp = jnp.where(steps[..., None] == 0, 0.0, steps[..., None] * f / (alpha - 1.0))
  tv = False if tv_rows is None else (alpha == a_min) & tv_rows[..., None]
  return _epsilon_per_order(rdp, alpha, delta, method, tv=tv)


def _tv_rows(layout, tf, df, f_coarse):
  """Rows where the total-variation rule may hold at the smallest order: the RDP at
  the smallest coarse order is within a factor 1e6 of the rule's threshold. This
  only decides where the search looks (the rule itself is checked exactly at the
  smallest order); it keeps the rule from costing an evaluation in the rows far
  from it."""
  c0 = float(layout.coarse[0])
  r = tf * f_coarse[:, 0] / (c0 - 1.0)
  return (r <= 1e6 * tv_threshold(df)) & (tf > 0)


def _neighbours(known):
  """Indices of the two nearest known points on each side (n where there is none)."""
  n = known.shape[-1]
  idx = jnp.arange(n, dtype=jnp.int32)
  none_left = jnp.full(known.shape[:-1] + (1,), -1, jnp.int32)
  none_right = jnp.full(known.shape[:-1] + (1,), n, jnp.int32)
  # Running max / min of the known indices. As log-depth scans: XLA's CPU backend
  # lowers lax.cummax / cummin to a reduce-window over the whole prefix, O(n^2)
  # per row (a measurable share of the standard grid: benchmarks/README.md).
  axis = known.ndim - 1
  left = jax.lax.associative_scan(jnp.maximum, jnp.where(known, idx, jnp.int32(-1)), axis=axis)
  prev1 = jnp.concatenate([none_left, left[..., :-1]], axis=-1)
  prev2 = jnp.take_along_axis(prev1, jnp.maximum(prev1, 0), axis=-1)
  right = jax.lax.associative_scan(
    jnp.minimum, jnp.where(known, idx, jnp.int32(n)), axis=axis, reverse=True
  )
  next1 = jnp.concatenate([right[..., 1:], none_right], axis=-1)
  next2 = jnp.take_along_axis(jnp.concatenate([next1, none_right], axis=-1), next1, axis=-1)
  return prev1, prev2, next1, next2


def _add_known(near, j):
  """The four nearest known points (as ``_neighbours`` returns them) after the
  point ``j`` (one per row, not known before) joins the known points. With
  a < j < b its nearest known neighbours before, d < a and b < c the next ones:
  j becomes the nearest on the left of (j, b] and the second nearest of (b, c];
  the nearest on the right of [a, j) and the second nearest of [d, a)."""
  prev1, prev2, next1, next2 = near
  idx = jnp.arange(prev1.shape[-1], dtype=jnp.int32)
  j = j[..., None]
  at_j = lambda v: jnp.take_along_axis(v, j, axis=-1)
  a, d, b, c = at_j(prev1), at_j(prev2), at_j(next1), at_j(next2)
  right_of_j = (idx > j) & (idx <= b)
  left_of_j = (idx >= a) & (idx < j)
  return (
    jnp.where(right_of_j, j, prev1),
    jnp.where(right_of_j, a, jnp.where((idx > b) & (idx <= c), j, prev2)),
    jnp.where(left_of_j, j, next1),
    jnp.where(left_of_j, b, jnp.where((idx >= d) & (idx < a), j, next2)),
  )


def _static_neighbours(known):
  """_neighbours for one concrete 1-D mask (numpy), shared by every row."""
  n = known.size
  idx = np.arange(n)
  left = np.maximum.accumulate(np.where(known, idx, -1))
  prev1 = np.concatenate([[-1], left[:-1]])
  prev2 = np.where(prev1 >= 0, prev1[np.maximum(prev1, 0)], -1)
  right = np.minimum.accumulate(np.where(known, idx, n)[::-1])[::-1]
  next1 = np.concatenate([right[1:], [n]])
  next2 = np.concatenate([next1, [n]])[next1]
  return prev1, prev2, next1, next2


def _bounds(xs, fv, known, sigma, estimate=False, nearest=None):
  """Lower and upper bounds on f at every point from the known points (convexity).

  ``known``: [rows, points] booleans, or one concrete 1-D numpy mask shared by
  every row (then the neighbours are found at trace time and read by slicing).
  ``nearest``: ``_neighbours(known)``, where the caller keeps it up to date.
  With ``estimate``, also an estimate of f between them: the cubic through the two
  nearest known points on each side, clipped to the bounds (the midpoint of the
  bounds where there are not two on each side). It only orders the search.
  """
  n = xs.size
  x = jnp.asarray(xs)
  if isinstance(known, np.ndarray):
    p1, p2, n1, n2 = _static_neighbours(known)
    has_n1, has_n2 = n1 < n, n2 < n
    p1, p2, n1, n2 = (np.clip(i, 0, n - 1) for i in (p1, p2, n1, n2))
    take = lambda i: take_last(fv, i)
    xp1, xp2, xn1, xn2 = xs[p1], xs[p2], xs[n1], xs[n2]
  else:
    p1, p2, n1, n2 = _neighbours(known) if nearest is None else nearest
    has_n1, has_n2 = n1 < n, n2 < n
    p1, p2, n1, n2 = (jnp.clip(i, 0, n - 1) for i in (p1, p2, n1, n2))
    take = lambda i: jnp.take_along_axis(fv, i, axis=-1)
    xp1, xp2, xn1, xn2 = x[p1], x[p2], x[n1], x[n2]
  fp1, fp2, fn1, fn2 = take(p1), take(p2), take(n1), take(n2)
  # Guarded denominators: the branches that would divide by 0 are masked below.
  slope = lambda fa, fb, xa, xb: (fb - fa) / jnp.where(xb > xa, xb - xa, 1.0)
  chord = fp1 + (x - xp1) * slope(fp1, fn1, xp1, xn1)
  s = sigma[..., None]
  gauss = jnp.where(s > 0, x * (x - 1.0) / (2.0 * jnp.where(s > 0, s * s, 1.0)), jnp.inf)
  upper = jnp.where(has_n1, jnp.minimum(chord, gauss), gauss)
  left = fp1 + (x - xp1) * slope(fp2, fp1, xp2, xp1)
  right = fn1 - (xn1 - x) * slope(fn1, fn2, xn1, xn2)
  lower = jnp.maximum(jnp.maximum(left, jnp.where(has_n2, right, -jnp.inf)), 0.0)
  lower = jnp.minimum(lower, upper)  # the min guards rounding where the bounds meet
  if not estimate:
    return lower, upper
  # Lagrange form on the four points xp2 < xp1 < x < xn1 < xn2 (guarded where they
  # are not distinct: there the midpoint is used).
  nodes = ((xp2, fp2), (xp1, fp1), (xn1, fn1), (xn2, fn2))
  cubic = 0.0
  for a, (xa, fa) in enumerate(nodes):
    num, den = 1.0, 1.0  # one division per node
    for b, (xb, _) in enumerate(nodes):
      if b != a:
        num = num * (x - xb)
        den = den * jnp.where(xa != xb, xa - xb, 1.0)
    cubic = cubic + fa * num / den
  four = has_n2 & (xp2 < xp1)
  mid = 0.5 * (lower + upper)
  est = jnp.where(four & ~jnp.isnan(cubic), jnp.clip(cubic, lower, upper), mid)
  return lower, upper, est


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def with_derivative_at_order(value_at_order, method, q, sigma, steps, x, order, value):
  """``value``, a minimum over orders computed without derivatives, differentiated
  as ``value_at_order(method, a, q, sigma, steps, x)`` at its minimiser a = ``order``
  (envelope theorem). The derivative is 0 where ``order`` is not finite or
  ``value`` is not positive and finite (a constant there: 0, 1 for delta, NaN)."""
  del value_at_order, method, q, sigma, steps, x, order
  return value


@with_derivative_at_order.defjvp
def _with_derivative_at_order_jvp(value_at_order, method, primals, tangents):
  q, sigma, steps, x, order, value = primals
  dq, dsigma, dsteps, dx, _, _ = tangents
  regular = jnp.isfinite(order) & jnp.isfinite(value) & (value > 0)
  a = jnp.where(regular, order, 2.0)
  _, dv = jax.jvp(
    lambda *args: value_at_order(method, a, *args), (q, sigma, steps, x), (dq, dsigma, dsteps, dx)
  )
  return value, jnp.where(regular, dv, 0.0)


def _point_sets(orders):
  """(coarse, others): the integer orders evaluated first by the series, and the
  finite orders left to the search (orders: concrete numpy float64)."""
  finite = orders[np.isfinite(orders)]
  is_int = finite == np.round(finite)
  coarse = np.unique(np.concatenate([_COARSE, finite[is_int & (finite <= 65)]]))
  return coarse, np.setdiff1d(finite, coarse)


def _loop_points(fixed):
  """Sorted indices of the points not known from the start (``fixed`` False) and of
  the two nearest known points on each side of each."""
  known_idx = np.flatnonzero(fixed)
  keep = ~fixed
  for i in np.flatnonzero(~fixed):
    k = np.searchsorted(known_idx, i)
    keep[known_idx[max(k - 2, 0) : k + 2]] = True
  return np.flatnonzero(keep)


def table_size(orders) -> int:
  """Length of the last axis of ``SearchResult.table`` for these (concrete) orders."""
  coarse, others = _point_sets(np.asarray(orders, dtype=np.float64))
  return 2 + coarse.size + others.size


def _epsilon_at_order(method, a, q, sigma, steps, delta):
  f = _log_a_f64(q, sigma, a)
  return _eps_of(f[..., None], a[..., None], steps, delta, method)[..., 0]


class _Layout(NamedTuple):
  """Where the search's points lie: concrete numpy, fixed when the search is traced."""

  xs: np.ndarray  # every point, sorted: 0 and 1 (f = 0), the coarse set, the other orders
  perm: np.ndarray  # xs = concatenate([[0, 1], coarse, others])[perm]
  coarse: np.ndarray  # the integer orders evaluated first, by the series
  n_others: int  # how many orders are left to the loop
  fixed: np.ndarray  # known from the start: 0, 1 and the coarse set
  eligible: np.ndarray  # in the caller's grid (0, 1 and coarse points outside it are not)
  alpha: np.ndarray  # the order of the conversion at each point (2, unused, at 0 and 1)
  loop: np.ndarray  # the points the loop works on (see _loop_points)
  has_inf: bool  # the grid holds alpha = inf


def _layout(orders) -> _Layout:
  """The search's points for the concrete 1-D float64 ``orders``."""
  finite = orders[np.isfinite(orders)]
  coarse, others = _point_sets(orders)
  xs = np.concatenate([[0.0, 1.0], coarse, others])
  perm = np.argsort(xs, kind="stable")
  xs = xs[perm]
  fixed = (np.arange(xs.size) < 2 + coarse.size)[perm]
  return _Layout(
    xs=xs,
    perm=perm,
    coarse=coarse,
    n_others=others.size,
    fixed=fixed,
    eligible=np.isin(xs, finite),
    alpha=np.where(xs > 1.0, xs, 2.0),
    loop=_loop_points(fixed),
    has_inf=bool(np.isinf(orders).any()),
  )


class _LoopSpec(NamedTuple):
  """What the loop's functions know at trace time (the loop's points only)."""

  a_min: float  # the smallest order of the grid (where the total-variation rule is checked)
  xs: np.ndarray  # the loop's points (_Layout.xs[_Layout.loop])
  fixed: np.ndarray  # known from the start, on the loop's points
  eligible: np.ndarray
  alpha: np.ndarray
  method: str
  has_floor: bool  # the caller passed f_floor
  small_sigma: bool  # some sigma may lie below the quadrature's domain (see _log_a_f64)
  batch: int  # configurations evaluated per round
  max_rounds: int


class _Rows(NamedTuple):
  """The configurations, flattened to one row each (traced, constant in the loop)."""

  q: jax.Array
  sigma: jax.Array
  steps: jax.Array
  delta: jax.Array
  searching: jax.Array  # bool: the loop may evaluate orders of this row
  tv: jax.Array  # bool: the total-variation rule may hold (see _tv_rows)
  floor: jax.Array  # [rows, loop points]: the caller's floors on log A (0 without)


class _SearchState(NamedTuple):
  """The loop's state: one row per configuration, the loop's points on the last axis."""

  f: jax.Array  # log A, exact where ``known``
  known: jax.Array  # bool
  near: tuple  # _neighbours(known), kept up to date by _add_known
  best: jax.Array  # the smallest exact epsilon so far (over all points, not only the loop's)
  left: jax.Array  # int32: orders still in contention (0: finished)
  pick: jax.Array  # int32: the next order to evaluate (index into the loop's points)
  rounds: jax.Array  # int32 scalar


def _analyse(spec: _LoopSpec, rows: _Rows, f, known, best, nearest=None):
  """How many orders each row still has in contention (0: finished), and each
  row's next order (f, known, nearest: the loop's points of these rows; known may
  be one concrete mask shared by every row, see _bounds)."""
  lower, upper, est = _bounds(spec.xs, f, known, rows.sigma, estimate=True, nearest=nearest)
  if spec.has_floor:
    lower = jnp.minimum(jnp.maximum(lower, rows.floor), upper)
  eps_lo = _eps_of(lower, spec.alpha, rows.steps, rows.delta, spec.method, spec.a_min, rows.tv)
  contending = (~known) & spec.eligible & (eps_lo < best[:, None]) & rows.searching[:, None]
  # The next order: the one estimated to be the smallest. A floor from a nearby
  # configuration is nearly the exact value, so where there is one its lower
  # bound says best; else the cubic through the nearest known points (log A_alpha
  # is smooth in alpha), which finds the optimum in fewer evaluations than the
  # midpoint of the bounds (benchmarks/README.md).
  key = _eps_of(est, spec.alpha, rows.steps, rows.delta, spec.method, spec.a_min, rows.tv)
  if spec.has_floor:
    key = jnp.where(rows.floor > 0, eps_lo, key)
  # Every order in contention gets a finite key (an infinite or NaN estimate the
  # largest float), so that the count and the pick below both see exactly them.
  key = jnp.where(contending, jnp.where(key < jnp.inf, key, np.finfo(np.float64).max), jnp.inf)
  return jnp.sum(key < jnp.inf, axis=-1, dtype=jnp.int32), argmin_last(key)


def _search_init(spec: _LoopSpec, rows: _Rows, f, best) -> _SearchState:
  """The state before the first round: the points known from the start."""
  # The first analysis knows the same points in every row: its neighbours are static.
  left, pick = _analyse(spec, rows, f, spec.fixed, best)
  near = tuple(
    jnp.broadcast_to(jnp.asarray(v, jnp.int32), f.shape) for v in _static_neighbours(spec.fixed)
  )
  # (known is a broadcast constant, built as such rather than gathered, so that
  # XLA does not fold a [rows, points] constant.)
  known = jnp.broadcast_to(jnp.asarray(spec.fixed), f.shape)
  return _SearchState(f, known, near, best, left, pick, jnp.int32(0))


def _search_continues(spec: _LoopSpec, s: _SearchState):
  """The loop's condition: a row has orders in contention (the bound on the rounds
  is never what stops it, see the module docstring)."""
  return jnp.any(s.left > 0) & (s.rounds < spec.max_rounds)


def _search_step(spec: _LoopSpec, rows: _Rows, x, s: _SearchState) -> _SearchState:
  """One round: the next order of at most ``spec.batch`` rows, evaluated exactly.

  ``x``: ``spec.xs`` as an array made outside the loop (a loop operand, as the
  rows are, rather than a constant of the loop body).
  """
  n = s.left.shape[0]
  # The rows with the most orders left in contention go first: they tend to need
  # the most rounds, so starting them early keeps the last rounds from running
  # nearly empty. Rows whose next order is above 65 go last, together: such an
  # order usually needs the full quadrature layout, which runs in chunks of the
  # rows needing it. Rows with none left are padding (index n), dropped by the
  # scatters.
  priority = jnp.where(s.left > 0, jnp.where(x[s.pick] > 65.0, 1, s.left + 1), 0)
  top, sel = _top_rows(priority, spec.batch, spec.xs.size + 1)
  sel = jnp.where(top > 0, sel, n).astype(jnp.int32)
  r = jnp.minimum(sel, n - 1)
  mine = _Rows(*(v[r] for v in rows))
  j = s.pick[r]
  a = x[j]
  f_new = _log_a_f64(mine.q, mine.sigma, a, small_sigma=spec.small_sigma)  # quadrature
  e_new = _eps_of(
    f_new[:, None], a[:, None], mine.steps, mine.delta, spec.method, spec.a_min, mine.tv
  )[:, 0]
  f = s.f.at[sel, j].set(f_new, mode="drop")
  known = s.known.at[sel, j].set(True, mode="drop")
  best = s.best.at[sel].min(e_new, mode="drop")
  # The nearest known points are kept up to date elementwise (the scans of
  # _neighbours are ~60 small XLA ops a round) and read back from the state, so
  # that XLA does not fuse the update into each of their uses below.
  near = tuple(
    v.at[sel].set(w, mode="drop")
    for v, w in zip(s.near, _add_known(tuple(v[r] for v in s.near), j))
  )
  # Only the rows just updated can change state.
  left_r, pick_r = _analyse(spec, mine, f[r], known[r], best[r], tuple(v[r] for v in near))
  left = s.left.at[sel].set(left_r, mode="drop")
  pick = s.pick.at[sel].set(pick_r, mode="drop")
  return _SearchState(f, known, near, best, left, pick, s.rounds + 1)


class _Final(NamedTuple):
  """What the search knows at the end, on all points (one row per configuration)."""

  f: jax.Array  # log A: exact where ``known``
  known: jax.Array
  eps: jax.Array  # epsilon at the known points of the grid, inf elsewhere
  exact: jax.Array  # the row's minimum is the exact grid minimum
  evaluations: jax.Array  # int32: orders evaluated by quadrature


def _search_finish(
  layout: _Layout, method, args, flat: _Rows, f_coarse, end: _Final
) -> SearchResult:
  """The result: the minimum and its order, with its derivative rule, and the table,
  in the batch shape of ``args`` (q, sigma, steps, delta as the caller gave them;
  ``flat``: the same as rows, with the floors on all points)."""
  q, sigma, steps, delta = args
  shape = q.shape
  f, known, eps_all = end.f, end.known, end.eps
  exact, evaluations = end.exact, end.evaluations
  qf, sf, tf = flat.q, flat.sigma, flat.steps
  # The table: exact values where known, else the best lower bound there is (the
  # convexity bound, or the caller's floor); NaN (invalid input) gives 0.
  lower_final = jnp.maximum(_bounds(layout.xs, f, known, sf)[0], flat.floor)
  table = jnp.where(known, f, jnp.where(jnp.isnan(lower_final), 0.0, lower_final))
  table = jnp.reshape(table, shape + (layout.xs.size,))
  cand_alpha = jnp.broadcast_to(jnp.asarray(layout.xs), eps_all.shape)

  if layout.has_inf:
    # alpha = inf: RDP is inf for q > 0 and 0 for q = 0; the bound is the RDP.
    inf_eps = jnp.where((qf == 0) | (tf == 0), 0.0, jnp.inf)[:, None]
    eps_all = jnp.concatenate([eps_all, inf_eps], axis=-1)
    cand_alpha = jnp.concatenate([cand_alpha, jnp.full(inf_eps.shape, jnp.inf)], axis=-1)

  j = argmin_last(eps_all)
  eps = jnp.take_along_axis(eps_all, j[:, None], axis=-1)[:, 0]
  order = jnp.take_along_axis(cand_alpha, j[:, None], axis=-1)[:, 0]
  eps = jnp.where(jnp.any(jnp.isnan(f_coarse), axis=-1), jnp.nan, eps)  # invalid traced input
  eps, order, exact, evaluations = (jnp.reshape(v, shape) for v in (eps, order, exact, evaluations))
  eps = with_derivative_at_order(_epsilon_at_order, method, q, sigma, steps, delta, order, eps)
  eps = jnp.maximum(eps, 0.0)
  # No privacy loss at all (q = 0, no steps, or infinite noise): (0, 0)-DP.
  eps = jnp.where((q == 0) | (steps == 0) | jnp.isinf(sigma), 0.0, eps)
  # A subnormal delta is a valid delta (XLA reads it as 0 in the comparison).
  eps = jnp.where(~(DELTA.holds(delta) | positive_subnormal(delta)), jnp.nan, eps)
  return SearchResult(eps, order, exact, evaluations, table)


def min_epsilon_over_orders(
  q, sigma, steps, delta, orders, method, live=None, f_floor=None, small_sigma=True
):
  """epsilon = min over ``orders`` (concrete 1-D) of the DP-SGD bound.

  q, sigma, steps, delta: float64 arrays broadcast to one batch shape.
  live: optional boolean mask of that shape; where False, no order is
  evaluated by quadrature (the result is the minimum over the coarse orders:
  sound, not exact, and ``exact`` says so).
  f_floor: optional lower bounds on log A at the search's points, in the layout
  of ``SearchResult.table`` (0 where nothing is known). The caller must
  guarantee them: the ``table`` of a search of the same (q, steps, delta) at a
  sigma at least this one's, or of the same (sigma, steps, delta) at a q at most
  this one's, is one, because log A_alpha is non-increasing in sigma and
  non-decreasing in q at every order (see jaxrdp.calibration._calibration). They only prune
  orders, so the result stays the exact minimum over the orders; tight floors
  (from a nearby sigma) leave fewer orders in contention.
  small_sigma (static): False only when no sigma lies below the quadrature's
  verified domain (``jaxrdp.mechanisms._sgm.may_have_small_sigma``); the program
  then leaves out the bound used there.
  """
  layout = _layout(np.asarray(orders, dtype=np.float64))
  # XLA reads subnormals as 0; epsilon is non-decreasing in q and steps, so
  # rounding them up to the smallest normal float is sound.
  q, steps = floor_rate(q), raise_subnormal(steps)
  shape = q.shape
  rows = math.prod(shape)
  qf, sf, tf, df = (
    jnp.reshape(jax.lax.stop_gradient(x), (rows,)) for x in (q, sigma, steps, delta)
  )
  coarse = layout.coarse
  f_coarse = _log_a_f64(qf[:, None], sf[:, None], coarse, StaticArray(coarse))  # [rows, C] (series)
  fv = take_last(
    jnp.concatenate([jnp.zeros((rows, 2)), f_coarse, jnp.zeros((rows, layout.n_others))], axis=-1),
    layout.perm,
  )
  known = jnp.broadcast_to(jnp.asarray(layout.fixed), fv.shape)
  finite = layout.xs[layout.eligible]
  a_min = float(finite.min()) if finite.size else np.inf
  tv_rows = _tv_rows(layout, tf, df, f_coarse)
  eps_known = jnp.where(
    layout.eligible & known, _eps_of(fv, layout.alpha, tf, df, method, a_min, tv_rows), jnp.inf
  )
  best = jnp.min(eps_known, axis=-1)
  # Configurations with nothing to search: no privacy loss, no finite bound
  # (sigma = 0: f is inf), or invalid traced input (NaN).
  searching = ~((qf == 0) | (tf == 0) | jnp.isinf(sf)) & jnp.all(jnp.isfinite(f_coarse), axis=-1)
  skipped = jnp.zeros((rows,), dtype=bool)
  if live is not None:
    skipped = searching & ~jnp.reshape(jnp.broadcast_to(live, shape), (rows,))
    searching = searching & ~skipped

  if f_floor is None:
    floor = jnp.zeros(fv.shape)
  else:
    # 1e-12 below the caller's values: they were computed at another sigma (or q),
    # with their own rounding.
    floor = jnp.reshape(jax.lax.stop_gradient(f_floor), fv.shape) * (1.0 - 1e-12)
  flat = _Rows(qf, sf, tf, df, searching, tv_rows, floor)

  if layout.n_others and rows:
    # The loop works on the points it may evaluate and the two nearest points known
    # from the start on each side of each: the bounds of a point use no others, so
    # the points further away (most integers up to 64) would add work, not
    # information. Their values count in ``best`` from the start and in the result.
    loop = layout.loop
    batch = _rows_per_round(rows)
    # Enough rounds to finish: while at least `batch` rows are in contention a
    # round makes `batch` of the at most rows * n_others evaluations; after
    # that every row left is in each round, and needs at most n_others more.
    spec = _LoopSpec(
      a_min=a_min,
      xs=layout.xs[loop],
      fixed=layout.fixed[loop],
      eligible=layout.eligible[loop],
      alpha=layout.alpha[loop],
      method=method,
      has_floor=f_floor is not None,
      small_sigma=small_sigma,
      batch=batch,
      max_rounds=layout.n_others * (-(-rows // batch) + 1),
    )
    # (The default floor is a broadcast constant, not gathered: see _search_init.)
    floor_l = jnp.zeros((rows, loop.size)) if f_floor is None else take_last(floor, loop)
    loop_rows = flat._replace(floor=floor_l)
    state = jax.lax.while_loop(
      functools.partial(_search_continues, spec),
      functools.partial(_search_step, spec, loop_rows, jnp.asarray(spec.xs)),
      _search_init(spec, loop_rows, take_last(fv, loop), best),
    )
    fv, known = put_last(fv, loop, state.f), put_last(known, loop, state.known)
    # A finished row's minimum is over its exact values: every order never
    # evaluated has a lower bound at or above it. An unfinished row (exact =
    # False) reports the best exact value it found, a valid (sound) epsilon.
    end = _Final(
      fv,
      known,
      jnp.where(
        layout.eligible & known, _eps_of(fv, layout.alpha, tf, df, method, a_min, tv_rows), jnp.inf
      ),
      (state.left == 0) & ~skipped,
      jnp.sum(known & ~layout.fixed, axis=-1, dtype=jnp.int32),
    )
  else:
    end = _Final(
      fv, known, eps_known, jnp.ones((rows,), dtype=bool), jnp.zeros((rows,), dtype=jnp.int32)
    )
  return _search_finish(layout, method, (q, sigma, steps, delta), flat, f_coarse, end)
