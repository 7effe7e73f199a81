"""One adjacency direction of one configuration end to end: plan, discretize, compose, read.

A *job* is one configuration (``P`` phases) in one direction (remove or add),
on an FFT of static length ``n``. The direction is a traced flag, so one
compiled program serves both; the public functions take the maximum over the
two directions (``_accountant``).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core.stored_programs import stored_jit
from . import _compose, _discretize, _grid, _producers, _read, _tradeoff_read

__all__ = [
  "job_epsilon",
  "job_delta",
  "job_delta_partials",
  "job_tradeoff",
  "batch_plan_tradeoff",
  "run_tradeoff_job",
  "run_tradeoff_jobs",
  "batch_plan_points",
  "batch_required_points",
  "pack_jobs",
  "run_job",
  "run_jobs",
  "n_eval",
]

# Multiples of the tilt at which the discrete MGF is evaluated for the tail and
# wrap-around bounds, besides the plan's own exponents (nu_hi, nu_up, nu_lo).
_NU = np.array([0.0, 0.5, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0])
_I_ONE = 2
# The tilts (multiples of lam, in _NU) at which the lower bounds' coupling shift is tried.
_I_SHIFT = np.array([0, 1, 2])
# Hoeffding failure probability, relative to delta (lower bound only).
_ETA = 1e-3
# Most points at which one step's delta curve is evaluated (see
# _discretize.support_points), up to FFT lengths of 2^19: the thinned support
# of the configurations measured needs 1,300 to 17,000 at the default accuracy;
# where more would be needed the thinning coarsens (its share of the error
# grows from 5% to 20%, more if even the dense part does not fit). Longer FFTs
# (rtol below the default, or hard cells) get n / 64 points: with 8,192, an
# answer at rtol 1e-7 came out 1e-4 looser than at 1e-6 (q = 1.6e-3, sigma =
# 1.5, T = 40, delta = 2.5e-10); with n / 64 the sequence 1e-5, 1e-6, 1e-7
# decreases. (n / 16 from 2^17 up also tightened 115 cells of the standard grid,
# by at most 3.3e-7, but cost 35% of its time.)
_N_EVAL_MAX = 8192


def n_eval(n: int, lean: bool = False) -> int:
  """Evaluation points of one step's curve for an FFT of length ``n``.

  At least twice the number of segments of the support (``_discretize``), so
  that the coarsest thinning always fits; ``_N_EVAL_MAX`` or ``n / 64`` at
  most (``lean``: see ``_LEAN_MAX_SIZE``).
  """
  if lean and n <= _LEAN_MAX_SIZE:
    return 2048 if 2 * _discretize.segments(n, lean)[0] + 2 <= 2048 else 4096
  return min(max(_N_EVAL_MAX, n // 64), max(2048, n // 2, 2 * _discretize.segments(n)[0] + 2))


# Trade-off jobs on FFTs up to this length evaluate one step's curve at 2,048
# points (4,096 from 2^14) on a support of half as many segments (``lean``):
# there the fixed cost of a job (one step's curve, its support, the
# moment-generating functions) is most of its time. A job whose leaner support
# does not meet its design accuracy within those points (few steps, where one
# step's whole support matters: q = 1, sigma = 1, T = 4 was off by 2e-5) is
# run again without it (``_tradeoff``). On the 400-configuration
# TPR grid (T = 1e4, FPR 1%, atol 1e-4; 2026-12-06, 2 cores, alternating runs)
# it took the grid from 1.34 s to 1.15-1.24 s; at the default accuracy the
# upper bounds moved by at most 8e-10 and the lower bounds down by at most
# 1.2e-4. Up to 2^17 it saved nothing more and cost the lower bounds 2.5e-3.
_LEAN_MAX_SIZE = 2**15


def _curves(
  q,
  sigma,
  steps,
  target,
  is_add,
  mode,
  n,
  families,
  pl=None,
  double_word=False,
  lean=False,
  with_level=False,
):
  if pl is None:
    pl = _grid.plan(q, sigma, steps, target, mode, is_add, families)
  pl = jax.tree_util.tree_map(jax.lax.stop_gradient, pl)
  d = jax.lax.stop_gradient(_grid.spacing(pl, n, is_add))
  lam = pl.lam
  a = jnp.where(is_add, pl.a[1], pl.a[0])  # (P,)
  b = jnp.where(is_add, pl.b[1], pl.b[0])
  lean = lean and n <= _LEAN_MAX_SIZE
  # How much a single-step loss s matters where delta is read: about
  # delta_rest(eps - s), the hockey-stick curve of the other steps, which is
  # ~ e^{lam (s - s_cap)} up to s_cap and ~1 beyond, with lam the slope of
  # -log delta at the answer and s_cap = eps - K_rest(lam) / lam, where
  # K_rest ~ (1 - 1/T) (lam eps + log delta) (one step: s_cap = eps).
  t_total = jnp.sum(steps)
  s_cap = pl.eps_est / t_total - (1.0 - 1.0 / t_total) * pl.log_delta_c / pl.lam_read

  def one_phase(producer, a, b, q, sigma):
    """Support points of one phase and its producer's curve there."""

    def curve(e):
      return producer.log_delta_curve(e, q, sigma, is_add)

    idx, count, designed = _discretize.support_points(
      a, b, d, pl.lam_read, s_cap, curve, n=n, n_eval=n_eval(n, lean), lean=lean, with_level=True
    )
    idx, count = jax.lax.stop_gradient(idx), jax.lax.stop_gradient(count)
    e = a + d * idx  # (N,) support points
    return idx, count, designed, e, curve(e)

  idx, count, designed, e, log_delta = _producers.map_phases(
    families, one_phase, a, b, q, sigma
  )  # (P, N) each but count and designed (P,)
  p, p_inf = _discretize.connect_the_dots_general(jnp.exp(log_delta), jnp.diff(e, axis=-1), count)
  pos_p = p > 0
  lp = jnp.where(pos_p, jnp.log(jnp.where(pos_p, p, 1.0)), -jnp.inf)  # safe for jax.grad
  nu = jnp.concatenate(
    [
      lam * jnp.asarray(_NU),
      jnp.stack([pl.nu_hi, pl.nu_up, pl.nu_lo, 0.5 * pl.nu_lo]),
    ]
  )
  log_m = jax.nn.logsumexp(lp[..., None, :] + nu[:, None] * e[..., None, :], axis=-1)  # (P, F)
  kk = jnp.sum(steps[:, None] * log_m, axis=0)  # (F,)
  x = jnp.exp(lp + lam * e - log_m[:, _I_ONE][:, None])
  # Fold the support modulo n onto the FFT's circle.
  phases = jnp.arange(q.shape[0])[:, None]
  slot = jnp.mod(idx, float(n)).astype(jnp.int32)
  x = jnp.zeros((q.shape[0], n), x.dtype).at[phases, slot].add(x)
  compose = _compose.compose_double_word if double_word else _compose.compose
  y, err_l2 = compose(x, steps, n)  # (n,), ()
  origin = jnp.sum(steps * a)
  k0 = jnp.floor((pl.lo - origin) / d)
  lo = origin + k0 * d
  shift = jnp.mod(k0, float(n)).astype(jnp.int32)
  w = jax.lax.dynamic_slice(jnp.concatenate([y, y]), (shift,), (n,))
  # Read up to hi; (1 + lam) (hi - lo) <= 650 keeps the scaled sums finite.
  hi = jnp.minimum(lo + (n - 1) * d, lo + 650.0 / (1.0 + lam))
  s_all = lo + d * jnp.arange(n, dtype=q.dtype)
  w = jnp.where(s_all <= hi, w, 0.0)
  pos = nu > 0
  log_tail = jnp.min(jnp.where(pos, kk - nu * hi, jnp.inf))
  inf_mass = -jnp.expm1(jnp.sum(steps * jnp.log1p(-jnp.minimum(p_inf, 1.0))))
  tail = jnp.exp(log_tail) + inf_mass
  k1 = kk[_I_ONE]
  c = _read.curve(w, lo, d, lam, k1, err_l2, tail, (nu, kk, n * d), hi)
  # The support for the coupling shift of the lower bounds: the points' classes
  # of cell widths, log masses and log moment-generating functions at the tilts tried.
  right, left, widths = _width_classes(idx, count, n)
  cells = _Cells(
    right, left, widths, e, lp, log_m[:, _I_SHIFT], lam * jnp.asarray(_NU[_I_SHIFT]), steps
  )
  if with_level:
    return c, d, cells, jnp.all(designed)
  return c, d, cells


def _width_classes(idx, count, n):
  """Width classes of the cells right and left of each support point, ``(P, N)`` int32
  each, and the classes' widths in lattice spacings ``(W,)``.

  Class 0 is no cell (either end of the support, and padding); class ``k >= 1`` a
  cell at most ``2^(k - 1)`` lattice spacings wide. The thinned support's cells
  are powers of two wide except possibly the last one, which is rounded up (a
  wider cell only enlarges the shift). Lattice indices are below ``8 n``
  (``_discretize.segments``), so ``(8 n).bit_length() + 1`` classes cover every cell.
  """
  n_widths = (8 * n).bit_length() + 1
  di = jnp.diff(idx, axis=-1)  # (P, N - 1) integers
  cell = jnp.arange(di.shape[-1], dtype=idx.dtype) < count[:, None] - 1.0
  mant, expo = jnp.frexp(jnp.maximum(di, 1.0))  # di = mant 2^expo, mant in [0.5, 1)
  cls = expo + jnp.where(mant == 0.5, 0, 1)  # 1 + ceil(log2(di))
  cls = jnp.where(cell & (di > 0), jnp.clip(cls, 1, n_widths - 1), 0).astype(jnp.int32)
  zero = jnp.zeros(cls.shape[:-1] + (1,), jnp.int32)
  widths = jnp.asarray(np.concatenate([[0.0], 2.0 ** np.arange(n_widths - 1)]), idx.dtype)
  return jnp.concatenate([cls, zero], axis=-1), jnp.concatenate([zero, cls], axis=-1), widths


class _Cells(NamedTuple):
  """What :func:`_shift` needs of a job's discretization."""

  right_class: jax.Array  # (P, N) width class of the cell after each point (see _width_classes)
  left_class: jax.Array  # (P, N) width class of the cell before it
  widths: jax.Array  # (W,) the classes' widths, in lattice spacings
  points: jax.Array  # (P, N) support points
  log_p: jax.Array  # (P, N) log masses of the points (-inf on padding)
  log_m: jax.Array  # (P, A) log M_j(a) at the tilts a tried
  tilts: jax.Array  # (A,) the tilts tried
  steps: jax.Array  # (P,)


# Exponents of the Chernoff bound on the coupling shift, relative to the one that
# is optimal on a uniform support of the lattice spacing. Every exponent gives a
# valid shift and the smallest is taken; a quarter-octave grid costs little now
# that the terms are summed per width class, and against whole octaves it raised
# lower bounds by up to 3% (q = 2e-4, sigma = 0.6, T = 5e4: 0.9011 to 0.9303).
_THETA = 2.0 ** np.arange(-16.0, 3.0, 0.25)


def _shift(cells, d, log_budget, extra_rate):
  """Shift ``t >= 0`` with ``delta_disc(eps + t) <= delta_true(eps) + eta`` under the coupling.

  Connect-the-dots splits every atom ``s`` of the exact one-step loss ``L``
  between the ends of the support cell ``[e_t, e_t + g_t]`` holding it, keeping
  its P-mass and ``E[e^{-L}]``; so ``X = L' - L`` lies in an interval of length
  ``g_t`` with mean at most ``m_t = g_t^2 (1 + g_t) / 8`` (Jensen), and by
  Hoeffding's lemma ``E[e^{mu X} | s] <= 1 + c_t(mu)``, ``c_t(mu) = expm1(mu m_t +
  mu^2 g_t^2 / 8)``. With ``S, S'`` the composed exact and discrete losses, on
  ``S' - S <= t`` the discrete hockey-stick integrand at ``eps + t`` is at most
  the exact one at ``eps``, so for ``lam, theta >= 0``

      delta_disc(eps + t) <= delta_true(eps) + E[1{S' > eps + t} 1{S' - S > t}]
                          <= delta_true(eps) + e^{-lam (eps + t) - theta t} E[e^{lam S' + theta (S' - S)}].

  Per step, ``e^{lam L' + theta X} = e^{lam L} e^{mu X}`` with ``mu = lam + theta``,
  so ``E[e^{lam L' + theta X}] <= E[e^{lam L}] + E[e^{lam L} c(mu)]``. Since
  ``E[e^{lam X} | L] >= 1``, ``E[e^{lam L}] <= M(lam)``, the discrete PLD's
  moment-generating function; and a cell's tilted mass reaches the discrete
  PMF through its two ends, so ``E[e^{lam L} c(mu)] <= M(lam) r(theta)`` with
  ``r = sum_t x_t max(e^{lam g_t} c_t, c_{t-1})``, ``x_t = p_t e^{lam e_t} / M(lam)``
  the tilted masses (each point's mass came from its two cells; no cell is
  counted twice). The excess is then at most ``exp(K(theta) - lam (eps + t) -
  theta t)``, ``K(theta) = sum_j T_j (log M_j(lam) + log1p(r_j(theta)))``, which is
  at most ``eta`` for

      t = max(0, min_theta (K(theta) - log_budget) / (theta + extra_rate)),

  with ``log_budget = log eta + lam eps``, ``extra_rate = lam`` when ``eps`` is
  given (delta mode), and ``log_budget = log eta + lam (eps + t)``, ``extra_rate
  = 0`` when the shifted point ``eps + t`` is the one read (epsilon mode). Coarse
  cells of the thinned support cost in proportion to their *tilted* mass, near
  where the answer is read; on a uniform support of spacing ``d`` this is about
  Hoeffding's ``T d^2 / 8 + d sqrt(T log(1 / eta') / 2)``, ``eta'`` the excess
  relative to the tilted scale ``M^T e^{-lam eps}`` (about delta). Mass cut off
  the support is a failure event counted separately.

  ``max(e^{lam g_t} c_t, c_{t-1})`` depends on a point only through the widths of
  its two cells, and the widths are a few powers of two of the lattice spacing
  (:func:`_width_classes`). So ``r`` is computed as the tilted masses summed per
  class of (right, left) widths, once per tilt, times the classes' terms: ``O(N)``
  work per tilt and ``O(W^2)`` per exponent ``theta``, where evaluating every
  point at every ``theta`` made the lower bound cost three times the upper.
  """
  lam = cells.tilts  # (A,)
  k0 = jnp.sum(cells.steps[:, None] * cells.log_m, axis=0)  # (A,) sum_j T_j log M_j
  budget = log_budget(cells.tilts)  # (A,)
  rel = jnp.maximum(k0 - budget, 1.0)
  t_total = jnp.sum(cells.steps)
  theta = jnp.sqrt(8.0 * rel / (t_total * d * d))[:, None] * jnp.asarray(_THETA)  # (A, C)
  # Tilted masses x_t, summed per class of the point's (right, left) cell widths:
  # r is then a sum over W^2 classes, not over the (A, C, P, N) support.
  log_x = cells.log_p + lam[:, None, None] * cells.points - cells.log_m.T[:, :, None]  # (A, P, N)
  x = jnp.where(cells.log_p > -jnp.inf, jnp.exp(log_x), 0.0)
  n_widths = cells.widths.shape[0]
  pair = cells.right_class * n_widths + cells.left_class  # (P, N)
  w = jax.vmap(lambda v, k: jax.ops.segment_sum(v, k, n_widths * n_widths))(
    jnp.moveaxis(x, 0, -1), pair
  )  # (P, W^2, A)
  w = jnp.moveaxis(w, -1, 0)[:, None]  # (A, 1, P, W^2)
  # The class widths, a hair wider than d 2^k for the rounding of the points e.
  g = d * (1.0 + 1e-9) * cells.widths  # (W,)
  mu = (lam[:, None] + theta)[..., None]  # (A, C, 1)
  arg = mu * g * g * (1.0 + g) / 8.0 + (mu * g) ** 2 / 8.0  # (A, C, W): log1p(c)
  arg_right = arg + lam[:, None, None] * g  # >= log(c e^{lam g}), the cell after the point
  # Overflowing terms are infinite; computed from 0 so that no derivative is NaN.
  over_left, over_right = arg > 600.0, arg_right > 600.0
  left = jnp.expm1(jnp.where(over_left, 0.0, arg))
  right = jnp.expm1(jnp.where(over_right, 0.0, arg)) * jnp.exp(
    jnp.where(over_right, 0.0, lam[:, None, None] * g)
  )
  pp = jnp.maximum(right[..., :, None], left[..., None, :]).reshape(arg.shape[:2] + (1, -1))
  over = (over_right[..., :, None] | over_left[..., None, :]).reshape(pp.shape)  # (A, C, 1, W^2)
  used = w > 0
  r = jnp.sum(jnp.where(used & ~over, w * jnp.where(over, 0.0, pp), 0.0), axis=-1)  # (A, C, P)
  r = jnp.where(jnp.any(used & over, axis=-1), jnp.inf, r)
  k = k0[:, None] + jnp.sum(cells.steps * jnp.log1p(r), axis=-1)  # (A, C)
  rate = cells.tilts if extra_rate else jnp.zeros_like(cells.tilts)
  finite = jnp.isfinite(k)
  k_safe = jnp.where(finite, k, 0.0)
  bound = jnp.where(finite, (k_safe - budget[:, None]) / (theta + rate[:, None]), jnp.inf)
  best = jnp.min(jnp.where(jnp.isfinite(bound), bound, jnp.inf))
  return jnp.maximum(best, 0.0)


def job_epsilon(q, sigma, steps, delta, is_add, *, n, families, pl=None, double_word=False):
  """``(epsilon, epsilon_lower, ok, slope, fft)`` of one direction of one configuration.

  ``fft``: the round-off term of delta at the answer, relative to ``delta``.
  """
  c, d, cells = _curves(q, sigma, steps, delta, is_add, "epsilon", n, families, pl, double_word)
  up, ok, slope, fft = _read.epsilon_upper(c, delta)
  eta = _ETA * delta
  # failure events: the coupling (eta) and the support cuts (<= 2e-12 delta).
  read = _read.epsilon_lower(c, delta + eta * (1.0 + 1e-8))
  low = read - _shift(cells, d, lambda a: jnp.log(eta) + a * read, False)
  return up, low, ok | (up <= 0), slope, fft / delta


def job_delta(q, sigma, steps, epsilon, is_add, *, n, families, pl=None, double_word=False):
  """``(delta, delta_lower, ok, 0, fft)`` of one direction of one configuration.

  ``fft``: the round-off term of delta, relative to the upper bound.
  """
  c, d, cells = _curves(q, sigma, steps, epsilon, is_add, "delta", n, families, pl, double_word)
  up, fft = _read.delta_upper(c, epsilon)
  eta = _ETA * jnp.maximum(up, 1e-300)
  shifted = epsilon + _shift(cells, d, lambda a: jnp.log(eta) + a * epsilon, True)
  low = _read.delta_lower(c, shifted) - eta * (1.0 + 1e-8)
  share = jnp.where(up > 0, fft / jnp.where(up > 0, up, 1.0), 0.0)
  return up, jnp.clip(low, 0.0, up), epsilon >= c["lo"], jnp.zeros_like(up), share


def job_delta_partials(q, sigma, steps, epsilon, is_add, *, n, families, pl=None):
  """``(delta, d/dq, d/dsigma, d/depsilon)``: one direction's upper bound of delta at
  ``epsilon`` and its derivatives (``(P,)`` for the phases' rates and noises).

  The grid (plan, spacing, support points) is held fixed, so these are the
  derivatives of the discretized curve, which approach the true ones as the grid
  refines. ``_derivative`` turns them into the derivative of epsilon (the implicit
  function at the read point). One reverse pass through one delta job: no search, no
  lower bound.
  """

  def upper(q, sigma, eps):
    c, _, _ = _curves(q, sigma, steps, eps, is_add, "delta", n, families, pl)
    return _read.delta_upper(c, eps)[0]

  value, (dq, ds, de) = jax.value_and_grad(upper, argnums=(0, 1, 2))(q, sigma, epsilon)
  return value, dq, ds, de


# Failure probability (absolute) of the coupling in the trade-off lower bounds.
_ETA_TRADEOFF = 1e-10


def job_tradeoff(q, sigma, steps, alphas, is_add, *, n, atol, families, pl=None, lean=False):
  """``(tpr, tpr_lower, threshold, designed)`` of one direction at FPRs ``alphas`` (``(G,)`` each).

  One composition read at every FPR (``_tradeoff_read``): ``tpr`` is a
  certified upper bound of this direction's true-positive rate, ``tpr_lower``
  a certified lower bound (at least ``alpha``), ``threshold`` the
  Neyman-Pearson threshold read, ``designed`` (1 or 0 at every FPR) whether
  one step's thinned support met its design accuracy. Without ``pl`` the plan
  is made here (:func:`_grid.plan_tradeoff`, accuracy ``atol``). ``lean``:
  the leaner support of ``_LEAN_MAX_SIZE`` (where ``designed`` is 0, rerun
  without it).

  The lower bound uses the coupling of :func:`_shift` at tilt 0, where its
  bound ``P(S' - S > s) <= eta`` holds for every epsilon at once, so
  ``delta_true(eps) >= delta_ctd(eps + s) - eta`` everywhere and

      TPR_true(alpha) = min_eps [delta_true(eps) + e^eps alpha]
                      >= min_eps [delta_ctd(eps + s) + e^eps alpha] - eta
                       = TPR_ctd(alpha e^{-s}) - eta.

  (The tilted shifts are smaller but hold at one given epsilon, and the true
  minimizer, the exact Neyman-Pearson threshold, is not known.)
  """
  if pl is None:
    pl, _ = _grid.plan_tradeoff(q, sigma, steps, alphas, atol, is_add, families)
  c, d, cells, designed = _curves(
    q, sigma, steps, 0.0, is_add, "delta", n, families, pl, lean=lean, with_level=True
  )
  tab = _tradeoff_read.block_table(c)
  # Tilt 0 only (the first of _I_SHIFT, _NU = 0): a shift valid at every epsilon.
  untilted = cells._replace(log_m=cells.log_m[:, :1], tilts=jnp.zeros((1,), cells.tilts.dtype))
  # (no derivative through the shift: where a cell's Chernoff term overflows, the
  # zero cotangent of the discarded candidate times its infinite local derivative
  # would be NaN)
  untilted = jax.lax.stop_gradient(untilted)
  shift = _shift(untilted, d, lambda a: jnp.log(_ETA_TRADEOFF) + 0.0 * a, False)
  up, t_read, low = _tradeoff_read.tpr_bounds(c, tab, alphas, alphas * jnp.exp(-shift))
  # Failure events of the coupling: its tail (eta) and the single-step support
  # cuts (each side of each step's support drops at most 1e-12 delta_c / T).
  cut = 2e-12 * jnp.exp(jax.lax.stop_gradient(pl.log_delta_c))
  low = low - (_ETA_TRADEOFF + cut) * (1.0 + 1e-8)
  up = jnp.clip(up, alphas, 1.0)
  low = jnp.clip(jnp.maximum(low, alphas), 0.0, up)
  return up, low, t_read, jnp.where(designed, 1.0, 0.0) + 0.0 * alphas


def _plan_tradeoff(q, sigma, steps, alphas, atol, at_zero, families):
  out = []
  for is_add in (False, True):
    pl, slope = _grid.plan_tradeoff(q, sigma, steps, alphas, atol, is_add, families, at_zero)
    out.append((pl, _grid.required_points_tradeoff(pl, steps, slope, atol)))
  return tuple(out)


@stored_jit(static_argnames=("at_zero", "families"))
def batch_plan_tradeoff(q, sigma, steps, alphas, atol, at_zero, families):
  """Plans and grid points needed, ``((remove, need), (add, need))``, per configuration.

  ``q, sigma, steps``: ``(B, P)``; ``alphas``: ``(B, G)``; ``at_zero``: plans for
  delta at 0 (the advantage) instead; ``families``: the phases' producers.
  """
  return jax.vmap(_plan_tradeoff, in_axes=(0, 0, 0, 0, None, None, None))(
    q, sigma, steps, alphas, atol, at_zero, families
  )


@stored_jit(static_argnames=("n", "families", "lean"))
def run_tradeoff_job(row, alphas, is_add, atol, n, families, lean=False):
  """One trade-off job from its row of :func:`pack_jobs`: ``(4, G)`` (see :func:`job_tradeoff`)."""
  q, sigma, steps, _, pl = _unpack(row, len(families))
  out = job_tradeoff(
    q, sigma, steps, alphas, is_add, n=n, atol=atol, families=families, pl=pl, lean=lean
  )
  return jnp.stack(out)


@functools.partial(jax.jit, static_argnames=("n", "chunk", "families"))
def run_tradeoff_jobs(q, sigma, steps, alphas, is_add, atol, n, chunk, families):
  """All trade-off jobs of a traced batch (plans made inside), ``chunk`` at a time."""
  one = functools.partial(job_tradeoff, n=n, atol=atol, families=families)
  return jax.lax.map(
    lambda a: jnp.stack(one(*a)[:3]), (q, sigma, steps, alphas, is_add), batch_size=chunk
  )


def _plan_points(q, sigma, steps, target, mode, rtol, families):
  plans = _grid.plan_both(q, sigma, steps, target, mode, families)
  return plans, tuple(_grid.required_points(pl, steps, rtol) for pl in plans)


@stored_jit(static_argnames=("mode", "families"))
def batch_plan_points(q, sigma, steps, target, rtol, mode, families):
  """Plans and grid points needed, ``((remove, add), (remove, add))``, per configuration.

  ``q, sigma, steps``: ``(B, P)``; ``target``: ``(B,)``. Both directions share
  one evaluation of the moment-generating function.
  """
  return jax.vmap(_plan_points, in_axes=(0, 0, 0, 0, None, None, None))(
    q, sigma, steps, target, mode, rtol, families
  )


@stored_jit
def batch_required_points(plans, steps, rtol):
  """Grid points needed per job for given plans (``steps``: ``(B, P)``)."""
  return jax.vmap(_grid.required_points, in_axes=(0, 0, None))(plans, steps, rtol)


def pack_jobs(q, sigma, steps, target, plans):
  """Host array ``(jobs, F)``: one row per job, everything :func:`run_job` reads.

  ``q, sigma, steps``: ``(jobs, P)``; ``target``: ``(jobs,)``; ``plans``: a
  :class:`_grid.Plan` of host arrays with a leading jobs axis. One row is one
  transfer to the device per job, not sixteen.
  """
  cols = [q, sigma, steps, np.asarray(target)[:, None]]
  cols += [np.asarray(x).reshape(len(target), -1) for x in plans]
  return np.concatenate([np.asarray(c, np.float64) for c in cols], axis=1)


def _unpack(row, phases):
  """Inverse of :func:`pack_jobs` for one row: ``(q, sigma, steps, target, plan)``.

  The plan's fields are scalars except the last two (``a``, ``b``: ``(2, P)``).
  """
  p = phases
  q, sigma, steps, target = row[:p], row[p : 2 * p], row[2 * p : 3 * p], row[3 * p]
  k = 3 * p + 1 + len(_grid.Plan._fields) - 2  # end of the scalar fields
  a = row[k : k + 2 * p].reshape(2, p)
  b = row[k + 2 * p : k + 4 * p].reshape(2, p)
  return q, sigma, steps, target, _grid.Plan(*row[3 * p + 1 : k], a, b)


@stored_jit(static_argnames=("mode", "n", "families", "double_word"))
def run_job(row, is_add, mode, n, families, double_word=False):
  """One job (``P = len(families)`` phases of those families, one direction) from its row
  of :func:`pack_jobs`.

  Returns ``(5,)``: upper and lower bounds, ok, slope, and the round-off share
  (see :func:`job_epsilon`, :func:`job_delta`); ``double_word`` composes in
  double-word arithmetic (``n`` a power of two). Mode ``"partials"`` returns
  ``(2 P + 2,)``: :func:`job_delta_partials` flattened.
  """
  q, sigma, steps, target, pl = _unpack(row, len(families))
  if mode == "partials":
    out = job_delta_partials(q, sigma, steps, target, is_add, n=n, families=families, pl=pl)
    return jnp.concatenate([jnp.atleast_1d(x) for x in out])
  fn = job_epsilon if mode == "epsilon" else job_delta
  out = fn(q, sigma, steps, target, is_add, n=n, families=families, pl=pl, double_word=double_word)
  return jnp.stack(out)


@functools.partial(jax.jit, static_argnames=("mode", "n", "chunk", "families"))
def run_jobs(q, sigma, steps, target, is_add, mode, n, chunk, families):
  """All jobs of a batch (``(B, P)`` phases, ``(B,)`` targets and directions), ``chunk`` at a time."""
  fn = {"epsilon": job_epsilon, "delta": job_delta, "partials": job_delta_partials}[mode]
  one = functools.partial(fn, n=n, families=families)
  return jax.lax.map(lambda a: one(*a), (q, sigma, steps, target, is_add), batch_size=chunk)
