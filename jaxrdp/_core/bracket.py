"""Vectorized threshold search: bracket expansion, then ITP steps, one element at a time.

Each element of the arrays runs its own search for the smallest v in [v_min, v_max]
at which a monotone predicate ("the budget holds") becomes true. The search is a
small state machine that never evaluates the predicate itself: ``propose`` gives
the next point of every element, the caller evaluates all of them in one batched
call, and ``update`` takes the results. That lets the caller run many searches (and
other work) inside one ``lax.while_loop`` with a single call site of an expensive
kernel, which keeps compilation time down.

Per element:

1. Expansion from v0: the unacceptable end moves up, or the acceptable end moves
   down, by 0.5, 1, 2, 4, ... until the threshold is bracketed or a range end is hit.
2. ITP (Oliveira and Takahashi 2020, "An Enhancement of the Bisection Method
   Average Performance Preserving Minmax Optimality", ACM TOMS 47(1),
   doi:10.1145/3423597, Algorithm 1, with k1 = 0.2 / (b - a), k2 = 2, n0 = 1):
   regula falsi on a proxy f (positive where the predicate fails), truncated
   towards the midpoint and projected into the minmax interval, so it never takes
   more than one iteration over bisection's count and is superlinear on smooth f.
   Two safeguards: the Illinois rule (Dowell and Jarratt 1971, BIT 11) halves the
   proxy kept at an end that survives twice in a row, and Brent's minimum step keeps
   every point at least ``tol`` inside the bracket, so progress never stalls when f
   rounds to 0 near the root.
3. Done when the bracket is at most 2 tol wide: b (acceptable) is the answer and
   a (unacceptable) is at most 2 tol below it.

With a good start (for example the answer of a cheaper, conservative proxy of the
same predicate) and a per-element slope, the first expansion step is a Newton
step, so that a start already within tol of the threshold costs two evaluations.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
  "Bracket",
  "Threshold",
  "bracket_init",
  "bracket_propose",
  "bracket_update",
  "bracket_result",
  "solve_threshold",
  "INIT",
  "EXPAND",
  "ITP",
  "DONE",
]

INIT, EXPAND, ITP, DONE = 0, 1, 2, 3

_EXPAND_START = 0.5
_MIN_FIRST_STEP = 1e-4
_MAX_EXPAND = 12  # 0.5 (2^12 - 1) = 2047.5 nats: more than any range used here
_K1 = 0.2
_N0 = 1
_MAX_ITP = 64


class Bracket(NamedTuple):
  """Search state, one entry per element (all arrays of one shape)."""

  phase: jax.Array  # INIT, EXPAND, ITP or DONE
  start: jax.Array  # first point to evaluate
  a: jax.Array  # unacceptable end (once bracketed)
  b: jax.Array  # acceptable end (once bracketed)
  fa: jax.Array
  fb: jax.Array
  oka: jax.Array
  okb: jax.Array
  step: jax.Array  # next expansion step
  count: jax.Array  # expansion steps taken
  k1: jax.Array  # ITP truncation constant
  n_max: jax.Array  # ITP iteration bound
  j: jax.Array  # ITP iterations taken
  last: jax.Array  # which end moved last: -1 a, +1 b, 0 none (Illinois rule)


def bracket_init(start: jax.Array, active: jax.Array) -> Bracket:
  """A fresh search from ``start``; inactive elements are DONE at once."""
  z = jnp.zeros_like(start)
  no = jnp.zeros(start.shape, bool)
  iz = jnp.zeros(start.shape, jnp.int32)
  phase = jnp.where(active, INIT, DONE).astype(jnp.int32)
  return Bracket(phase, start, start, start, z, z, no, no, z + _EXPAND_START, iz, z, z, z, iz)


def bracket_propose(s: Bracket, v_min: float, v_max: float, tol: float) -> jax.Array:
  """The next point to evaluate for every element (DONE elements repeat b)."""
  is_exp = s.phase == EXPAND
  up = is_exp & ~s.okb & (s.b < v_max)
  down = is_exp & s.oka & (s.a > v_min) & ~up
  x_exp = jnp.where(up, jnp.minimum(s.b + s.step, v_max), jnp.maximum(s.a - s.step, v_min))
  # ITP step with f > 0 at a and f <= 0 at b.
  width = s.b - s.a
  x_half = 0.5 * (s.a + s.b)
  r = jnp.maximum(tol * jnp.exp2(s.n_max - s.j) - 0.5 * width, 0.0)
  trunc = s.k1 * width * width
  usable = jnp.isfinite(s.fa) & jnp.isfinite(s.fb) & (s.fa > 0) & (s.fb <= 0)
  x_f = jnp.where(usable, (s.fa * s.b - s.fb * s.a) / jnp.where(usable, s.fa - s.fb, 1.0), x_half)
  sgn = jnp.sign(x_half - x_f)
  x_t = jnp.where(trunc <= jnp.abs(x_half - x_f), x_f + sgn * trunc, x_half)
  x_itp = jnp.where(jnp.abs(x_t - x_half) <= r, x_t, x_half - sgn * r)
  x_itp = jnp.clip(x_itp, s.a + tol, s.b - tol)  # Brent's minimum step
  x = jnp.where(s.phase == INIT, s.start, s.b)
  x = jnp.where(up | down, x_exp, x)
  return jnp.clip(jnp.where(s.phase == ITP, x_itp, x), v_min, v_max)


def bracket_update(
  s: Bracket,
  x: jax.Array,
  okx: jax.Array,
  fx: jax.Array,
  v_min: float,
  v_max: float,
  tol: float,
  slope=None,
  first_min=_MIN_FIRST_STEP,
  overshoot=1.0,
  k1: float = _K1,
) -> Bracket:
  """Takes the predicate (okx) and proxy (fx) at the proposed points x.

  ``slope``: an estimate of |df/dv| (a scalar or one per element). With it, the
  first expansion step is the Newton-like distance overshoot |f(start)| / slope
  (between ``first_min`` and 0.5) instead of 0.5, so a good start gives a narrow
  first bracket and fewer ITP iterations.
  """
  is_init, is_exp, is_itp = s.phase == INIT, s.phase == EXPAND, s.phase == ITP
  up = is_exp & ~s.okb & (s.b < v_max)
  down = is_exp & s.oka & (s.a > v_min) & ~up
  # Initial point: a = b = start.
  a = jnp.where(is_init, x, s.a)
  b = jnp.where(is_init, x, s.b)
  fa = jnp.where(is_init, fx, s.fa)
  fb = jnp.where(is_init, fx, s.fb)
  oka = jnp.where(is_init, okx, s.oka)
  okb = jnp.where(is_init, okx, s.okb)
  # Expansion: the old end becomes the other end of the bracket.
  a2 = jnp.where(up, b, jnp.where(down, x, a))
  b2 = jnp.where(up, x, jnp.where(down, a, b))
  fa2 = jnp.where(up, fb, jnp.where(down, fx, fa))
  fb2 = jnp.where(up, fx, jnp.where(down, fa, fb))
  oka2 = jnp.where(up, okb, jnp.where(down, okx, oka))
  okb2 = jnp.where(up, okx, jnp.where(down, oka, okb))
  step = jnp.where(up | down, 2.0 * s.step, s.step)
  if slope is not None:
    # Later expansion steps: a secant step through the last two points (same
    # overshoot), at most the doubled step.
    # An infinite f at either point (a value of 0, as the total-variation rule
    # gives, has f = -inf) carries no slope: the step then doubles. (An infinite
    # secant would give a zero Newton step, and the expansion would crawl at
    # first_min until it ran out of steps short of the threshold.)
    prev_x = jnp.where(up, s.b, s.a)
    prev_f = jnp.where(up, s.fb, s.fa)
    secant = jnp.abs(fx - prev_f) / jnp.where(x != prev_x, jnp.abs(x - prev_x), 1.0)
    newton = jnp.clip(overshoot * jnp.abs(fx) / secant, first_min, step)
    informative = jnp.isfinite(fx) & jnp.isfinite(prev_f) & (secant > 0)
    step = jnp.where((up | down) & informative & jnp.isfinite(newton), newton, step)
    first = jnp.clip(overshoot * jnp.abs(fx) / slope, first_min, _EXPAND_START)
    step = jnp.where(is_init, jnp.where(jnp.isfinite(first), first, _EXPAND_START), step)
  count = s.count + (up | down).astype(jnp.int32)
  # ITP: replace the end on x's side; Illinois rule on the end that stays.
  move_a = is_itp & ~okx
  move_b = is_itp & okx
  fa2 = jnp.where(move_b & (s.last == 1), 0.5 * fa2, fa2)
  fb2 = jnp.where(move_a & (s.last == -1), 0.5 * fb2, fb2)
  last = jnp.where(move_b, 1, jnp.where(move_a, -1, s.last)).astype(jnp.int32)
  a2, fa2 = jnp.where(move_a, x, a2), jnp.where(move_a, fx, fa2)
  b2, fb2 = jnp.where(move_b, x, b2), jnp.where(move_b, fx, fb2)
  j = jnp.where(is_itp, s.j + 1, s.j)
  # Phase changes.
  bracketed = ~oka2 & okb2
  searching = is_init | is_exp
  stuck = (oka2 & (a2 <= v_min)) | (~okb2 & (b2 >= v_max)) | (count >= _MAX_EXPAND)
  start_itp = searching & bracketed
  w0 = jnp.where(start_itp, b2 - a2, 1.0)
  k1 = jnp.where(start_itp, k1 / w0, s.k1)
  n_max = jnp.where(start_itp, jnp.ceil(jnp.log2(jnp.maximum(w0 / (2 * tol), 1.0))) + _N0, s.n_max)
  j = jnp.where(start_itp, 0.0, j)
  # A bracket that is narrow enough when it first forms needs no ITP step.
  converged = (is_itp | start_itp) & ((b2 - a2 <= 2 * tol) | (j >= _MAX_ITP))
  phase = jnp.where(is_init, EXPAND, s.phase)
  phase = jnp.where(start_itp, ITP, phase)
  phase = jnp.where(searching & ~bracketed & stuck, DONE, phase)
  phase = jnp.where(converged, DONE, phase).astype(jnp.int32)
  return Bracket(phase, s.start, a2, b2, fa2, fb2, oka2, okb2, step, count, k1, n_max, j, last)


def bracket_result(s: Bracket, v_min: float):
  """(v, infeasible) of finished searches.

  v is the acceptable end b (v_min where v_min itself is acceptable); infeasible
  marks elements whose upper end never became acceptable (or that were inactive).
  """
  at_min = s.oka & (s.a <= v_min)
  v = jnp.where(at_min, v_min, s.b)
  return v, ~s.okb


class Threshold(NamedTuple):
  """Result of :func:`solve_threshold` (arrays of the elements' shape)."""

  v: jax.Array  # smallest acceptable point found (see bracket_result)
  infeasible: jax.Array  # True where no acceptable point exists (or inactive)
  a: jax.Array  # the unacceptable end of the final bracket
  aux: object  # score's aux output at v (a pytree)
  iterations: jax.Array  # evaluations of score (loop iterations)


def solve_threshold(
  score,
  v0,
  v_min: float,
  v_max: float,
  active,
  tol: float,
  slope=None,
  first_min=_MIN_FIRST_STEP,
  overshoot=1.0,
  k1: float = _K1,
  aux_like=None,
  score_sees_best: bool = False,
) -> Threshold:
  """Runs the search for every element to completion in one ``lax.while_loop``.

  Args:
    score: (v, live) -> (ok, f, aux) for an array of points of v0's shape: ok is
      the predicate (False below the threshold, True above; NaN must give False),
      f a proxy for interpolation (> 0 where not ok), and aux any pytree of arrays
      whose shapes start with v0's that the caller wants back at the answer (so it
      need not evaluate again there). ``live`` marks the elements still searching; the
      others' results are ignored, so score may skip their work. It is traced
      once, in the loop, when ``aux_like`` is given; otherwise a second time
      first, by ``jax.eval_shape``, for the shapes of aux.
    v0: starting points; v_min, v_max: the search range; active: elements to solve.
    tol: half-width of the final bracket.
    slope, first_min, overshoot: the first expansion step (see
      :func:`bracket_update`).
    k1: ITP truncation, as a fraction of the first bracket's width. The paper's
      0.2 guards regula falsi against stagnation (kinked f); a smooth f near a
      good start converges in fewer steps with less truncation.
    aux_like: optional pytree of arrays or ``jax.ShapeDtypeStruct`` with the
      shapes and dtypes of score's aux (tracing a large score twice costs
      seconds of a first call).
    score_sees_best: if True, score is called as score(v, live, v_ok, aux_ok),
      with the smallest acceptable point evaluated so far per element (inf before
      there is one) and the aux it returned there (zeros before), so that it can
      reuse what it learnt there.
  """
  if aux_like is None:
    if score_sees_best:
      raise ValueError("score_sees_best needs aux_like")
    aux_like = jax.eval_shape(score, v0, active)[2]
  aux0 = jax.tree_util.tree_map(lambda t: jnp.zeros(t.shape, t.dtype), aux_like)
  inf = jnp.full(v0.shape, jnp.inf, v0.dtype)

  def cond(c):
    s, it, _, _ = c
    return jnp.any(s.phase != DONE) & (it < 1 + _MAX_EXPAND + _MAX_ITP)

  def body(c):
    s, it, v_ok, aux = c
    live = s.phase != DONE
    x = bracket_propose(s, v_min, v_max, tol)
    okx, fx, aux_x = score(x, live, v_ok, aux) if score_sees_best else score(x, live)
    # Keep aux at the smallest acceptable point, which is where the search ends.
    better = live & okx & (x < v_ok)
    v_ok = jnp.where(better, x, v_ok)
    aux = jax.tree_util.tree_map(
      lambda new, old: jnp.where(
        better.reshape(better.shape + (1,) * (new.ndim - better.ndim)), new, old
      ),
      aux_x,
      aux,
    )
    s = bracket_update(s, x, okx, fx, v_min, v_max, tol, slope, first_min, overshoot, k1)
    return s, it + 1, v_ok, aux

  s, it, _, aux = jax.lax.while_loop(cond, body, (bracket_init(v0, active), 0, inf, aux0))
  v, infeasible = bracket_result(s, v_min)
  return Threshold(v, infeasible | ~active, s.a, aux, it)
