"""One adjacency direction of one configuration end to end: plan, discretize, compose, read.

A *job* is one configuration (``P`` phases) in one direction (remove or add),
on an FFT of static length ``n``. The direction is a traced flag, so one
compiled program serves both; the public functions take the maximum over the
two directions (``_accountant``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import _compose, _discretize, _grid, _read, _tradeoff_read

__all__ = [
  "job_epsilon",
  "job_delta",
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


def n_eval(n: int) -> int:
  """Evaluation points of one step's curve for an FFT of length ``n``.

  At least twice the number of segments of the support (``_discretize``), so
  that the coarsest thinning always fits; ``_N_EVAL_MAX`` or ``n / 64`` at
  most.
  """
  return min(max(_N_EVAL_MAX, n // 64), max(2048, n // 2, 2 * _discretize.segments(n)[0] + 2))


def _curves(q, sigma, steps, target, is_add, mode, n, pl=None, double_word=False):
  if pl is None:
    pl = _grid.plan(q, sigma, steps, target, mode, is_add)
  pl = jax.tree_util.tree_map(jax.lax.stop_gradient, pl)
  d = jax.lax.stop_gradient(_grid.spacing(pl, n, is_add))
  lam = pl.lam
  a = jnp.where(is_add, pl.a[1], pl.a[0])  # (P,)
  b = jnp.where(is_add, pl.b[1], pl.b[0])
  points = functools.partial(_discretize.support_points, n=n, n_eval=n_eval(n))
  # How much a single-step loss s matters where delta is read: about
  # delta_rest(eps - s), the hockey-stick curve of the other steps, which is
  # ~ e^{lam (s - s_cap)} up to s_cap and ~1 beyond, with lam the slope of
  # -log delta at the answer and s_cap = eps - K_rest(lam) / lam, where
  # K_rest ~ (1 - 1/T) (lam eps + log delta) (one step: s_cap = eps).
  t_total = jnp.sum(steps)
  s_cap = pl.eps_est / t_total - (1.0 - 1.0 / t_total) * pl.log_delta_c / pl.lam_read
  idx, count = jax.vmap(points, in_axes=(0, 0, None, None, None, 0, 0, None))(
    a, b, d, pl.lam_read, s_cap, q, sigma, is_add
  )
  idx, count = jax.lax.stop_gradient(idx), jax.lax.stop_gradient(count)
  e = a[:, None] + d * idx  # (P, N) support points
  log_delta = _discretize.log_delta_curve(e, q[:, None], sigma[:, None], is_add)
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
  return c, d, jnp.sum(steps)


def _shift(d, t_total, eta):
  """Hoeffding shift of the coupling between the exact and the connect-the-dots losses."""
  mean = t_total * d * d / 8.0 * (1.0 + d)
  return mean + d * jnp.sqrt(t_total * jnp.log(1.0 / eta) / 2.0)


def job_epsilon(q, sigma, steps, delta, is_add, *, n, pl=None, double_word=False):
  """``(epsilon, epsilon_lower, ok, slope, fft)`` of one direction of one configuration.

  ``fft``: the round-off term of delta at the answer, relative to ``delta``.
  """
  c, d, t_total = _curves(q, sigma, steps, delta, is_add, "epsilon", n, pl, double_word)
  up, ok, slope, fft = _read.epsilon_upper(c, delta)
  eta = _ETA * delta
  # failure events: Hoeffding (eta) and the support cuts (<= 2e-12 delta).
  low = _read.epsilon_lower(c, delta + eta * (1.0 + 1e-8)) - _shift(d, t_total, eta)
  return up, low, ok | (up <= 0), slope, fft / delta


def job_delta(q, sigma, steps, epsilon, is_add, *, n, pl=None, double_word=False):
  """``(delta, delta_lower, ok, 0, fft)`` of one direction of one configuration.

  ``fft``: the round-off term of delta, relative to the upper bound.
  """
  c, d, t_total = _curves(q, sigma, steps, epsilon, is_add, "delta", n, pl, double_word)
  up, fft = _read.delta_upper(c, epsilon)
  eta = _ETA * jnp.maximum(up, 1e-300)
  shifted = epsilon + _shift(d, t_total, eta)
  low = _read.delta_lower(c, shifted) - eta * (1.0 + 1e-8)
  share = jnp.where(up > 0, fft / jnp.where(up > 0, up, 1.0), 0.0)
  return up, jnp.clip(low, 0.0, up), epsilon >= c["lo"], jnp.zeros_like(up), share


# Hoeffding failure probability (absolute) of the trade-off lower bounds.
_ETA_TRADEOFF = 1e-10


def job_tradeoff(q, sigma, steps, alphas, is_add, *, n, atol, pl=None):
  """``(tpr, tpr_lower, threshold)`` of one direction at FPRs ``alphas`` (``(G,)`` each).

  One composition read at every FPR (``_tradeoff_read``): ``tpr`` is a
  certified upper bound of this direction's true-positive rate, ``tpr_lower``
  a certified lower bound (at least ``alpha``, by the coupling:
  ``TPR_true(alpha) >= TPR_ctd(alpha e^{-s}) - eta``), ``threshold`` the
  Neyman-Pearson threshold read. Without ``pl`` the plan is made here
  (:func:`_grid.plan_tradeoff`, accuracy ``atol``).
  """
  if pl is None:
    pl, _ = _grid.plan_tradeoff(q, sigma, steps, alphas, atol, is_add)
  # The plan only places the grid: no derivative flows through it (a zero
  # cotangent times an infinite local derivative there would be NaN).
  pl = jax.tree_util.tree_map(jax.lax.stop_gradient, pl)
  c, d, t_total = _curves(q, sigma, steps, 0.0, is_add, "delta", n, pl)
  tab = _tradeoff_read.block_table(c)
  shift = _shift(d, t_total, _ETA_TRADEOFF)
  up, t_read, low = _tradeoff_read.tpr_bounds(c, tab, alphas, alphas * jnp.exp(-shift))
  # Failure events of the coupling: Hoeffding (eta) and the single-step support
  # cuts (each side of each step's support drops at most 1e-12 delta_c / T).
  cut = 2e-12 * jnp.exp(pl.log_delta_c)
  low = low - (_ETA_TRADEOFF + cut) * (1.0 + 1e-8)
  up = jnp.clip(up, alphas, 1.0)
  low = jnp.clip(jnp.maximum(low, alphas), 0.0, up)
  return up, low, t_read


def _plan_tradeoff(q, sigma, steps, alphas, atol, at_zero):
  out = []
  for is_add in (False, True):
    pl, slope = _grid.plan_tradeoff(q, sigma, steps, alphas, atol, is_add, at_zero)
    out.append((pl, _grid.required_points_tradeoff(pl, steps, slope, atol)))
  return tuple(out)


@functools.partial(jax.jit, static_argnames=("at_zero",))
def batch_plan_tradeoff(q, sigma, steps, alphas, atol, at_zero=False):
  """Plans and grid points needed, ``((remove, need), (add, need))``, per configuration.

  ``q, sigma, steps``: ``(B, P)``; ``alphas``: ``(B, G)``; ``at_zero``: plans for
  delta at 0 (the advantage) instead.
  """
  return jax.vmap(_plan_tradeoff, in_axes=(0, 0, 0, 0, None, None))(
    q, sigma, steps, alphas, atol, at_zero
  )


@functools.partial(jax.jit, static_argnames=("n", "phases"))
def run_tradeoff_job(row, alphas, is_add, atol, n, phases):
  """One trade-off job from its row of :func:`pack_jobs`: ``(3, G)`` (tpr, tpr_lower, threshold)."""
  q, sigma, steps, _, pl = _unpack(row, phases)
  return jnp.stack(job_tradeoff(q, sigma, steps, alphas, is_add, n=n, atol=atol, pl=pl))


@functools.partial(jax.jit, static_argnames=("n", "chunk"))
def run_tradeoff_jobs(q, sigma, steps, alphas, is_add, atol, n, chunk):
  """All trade-off jobs of a traced batch (plans made inside), ``chunk`` at a time."""
  one = functools.partial(job_tradeoff, n=n, atol=atol)
  return jax.lax.map(
    lambda a: jnp.stack(one(*a)), (q, sigma, steps, alphas, is_add), batch_size=chunk
  )


def _plan_points(q, sigma, steps, target, mode, rtol):
  plans = _grid.plan_both(q, sigma, steps, target, mode)
  return plans, tuple(_grid.required_points(pl, steps, rtol) for pl in plans)


@functools.partial(jax.jit, static_argnames=("mode",))
def batch_plan_points(q, sigma, steps, target, rtol, mode):
  """Plans and grid points needed, ``((remove, add), (remove, add))``, per configuration.

  ``q, sigma, steps``: ``(B, P)``; ``target``: ``(B,)``. Both directions share
  one evaluation of the moment-generating function.
  """
  return jax.vmap(_plan_points, in_axes=(0, 0, 0, 0, None, None))(
    q, sigma, steps, target, mode, rtol
  )


@jax.jit
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


@functools.partial(jax.jit, static_argnames=("mode", "n", "phases", "double_word"))
def run_job(row, is_add, mode, n, phases, double_word=False):
  """One job (``P = phases`` phases, one direction) from its row of :func:`pack_jobs`.

  Returns ``(5,)``: upper and lower bounds, ok, slope, and the round-off share
  (see :func:`job_epsilon`, :func:`job_delta`); ``double_word`` composes in
  double-word arithmetic (``n`` a power of two).
  """
  q, sigma, steps, target, pl = _unpack(row, phases)
  fn = job_epsilon if mode == "epsilon" else job_delta
  return jnp.stack(fn(q, sigma, steps, target, is_add, n=n, pl=pl, double_word=double_word))


@functools.partial(jax.jit, static_argnames=("mode", "n", "chunk"))
def run_jobs(q, sigma, steps, target, is_add, mode, n, chunk):
  """All jobs of a batch (``(B, P)`` phases, ``(B,)`` targets and directions), ``chunk`` at a time."""
  fn = job_epsilon if mode == "epsilon" else job_delta
  one = functools.partial(fn, n=n)
  return jax.lax.map(lambda a: one(*a), (q, sigma, steps, target, is_add), batch_size=chunk)
