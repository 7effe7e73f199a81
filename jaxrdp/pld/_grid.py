"""Choice of tilt, window and spacing per configuration, from the moment-generating function.

The Renyi divergence is the moment-generating function of the privacy loss
(estimated here by a cheap quadrature, :func:`log_mgf`):
``E_P[e^{nu L}] = exp(nu D_{nu+1}(P || Q))`` (Mironov 2017, arXiv:1702.07476),
for every real ``nu`` (negative ``nu`` bound the lower tail); each direction is
planned on its own (the add direction's function is the remove direction's at
``-1 - nu``). With ``K(nu) = sum_j T_j nu RDP_j(nu + 1)`` for the composition:

* ``lam_read`` minimises the Chernoff bound ``(K(nu) + log(1/delta)) / nu``
  (epsilon target) or ``K(nu) - nu eps`` (epsilon given); its value ``eps_c``
  is an upper bound of the tight epsilon, and ``lam_read`` is the slope of
  ``-log delta`` there (it sets the discretization error, see
  :func:`required_points`);
* the window's top ``hi`` is where the Chernoff bound of the upper tail falls to
  ``1e-8 delta`` (that mass is added to delta);
* the FFT is circular with period ``W`` (the window's width), and the composed
  PMF is tilted by ``lam`` (``p_s e^{lam s}``) so that the float64 noise floor
  is relative to delta. Folding then weighs a P-mass ``p`` below the window
  ``p e^{-lam W}`` where it is read, and a mass above ``s + W`` lands on ``s``
  with weight ``p e^{lam W}``. The window must make both harmless (at most
  ``1e-6 delta``) at the reading point ``s_r = 0.8 eps_est`` (``eps_est`` the
  saddle-point estimate of the answer; given epsilon: itself): by Chernoff, mass
  above: ``K(nu) - nu (s_r + W) + lam W <= log(1e-6 delta)`` for some
  ``nu > lam``; mass below: ``lam W >= log(1e6 / delta)``, or the window
  reaches down to where the lower tail (``nu < 0``) is below ``1e-6 delta``. A
  large tilt shrinks the first term and grows the second: for heavy-tailed
  losses (small sigma) the tilted composition spreads far to the right, so
  ``lam`` is the largest candidate ``lam_read x {1, 0.85, ..., 0.05}`` whose
  window is within 10% of the narrowest;
* the window also reaches down to ``eps_est / 2`` (the answer lies near
  ``eps_est`` and below ``eps_c``);
* the single-step support holds all but ``1e-12 delta / T`` of each step's mass
  on each side (Gaussian tails of the output, or Chernoff on one step,
  whichever is shorter).

None of these choices affects soundness: the readers bound every neglected mass
from the discrete PMF itself. They only decide accuracy and cost.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.special
import numpy as np

from . import _producers

__all__ = ["Plan", "plan", "plan_both", "required_points", "LAMBDAS"]

# Exponents (Renyi orders minus one) searched for the Chernoff bounds: positive
# ones for the upper tail and the tilt, negative ones for the lower tail.
LAMBDAS = np.geomspace(1e-3, 1e3, 48)
NEGATIVE = -np.geomspace(1e-2, 1e3, 20)
# Candidate tilts, as multiples of lam_read (the narrowest window wins).
_TILTS = np.array([1.0, 0.85, 0.7, 0.55, 0.4, 0.3, 0.2, 0.1, 0.05])
_MGF_POINTS = 1536
# Orders 1 + lam with |1 + lam| and |lam| at most _SMALL_ORDER integrate over
# at most _SMALL_ORDER + 24 sigma with _SMALL_POINTS points (a spacing of sigma
# / 3 or finer for sigma >= 0.3), those up to _MID_ORDER with _MID_POINTS, the
# others with _MGF_POINTS. The trapezoid rule on these Gaussian-like integrands
# converges geometrically. Against the exact Renyi divergence (the tests) both
# shorter rules are within 1e-9 relative or 1e-12 absolute for sigma from 0.3
# to 50; against a 20,000-point rule (sigma 0.3 to 10, q 1e-4 to 0.5,
# 2026-12-06) the small orders differ no more at 128 points than at 384 and
# the middle ones by at most 4e-7 relative at 768 (at sigma 0.3). The points
# saved were a third of the planning time of the TPR grid.
_SMALL_ORDER = 5.0
_SMALL_POINTS = 128
_MID_ORDER = 64.0
_MID_POINTS = 768
_LOG_TAIL = math.log(1e8)  # top of the window: tail <= 1e-8 delta
_LOG_ALIAS = math.log(1e6)  # folded mass weighs <= 1e-6 delta where read
_LOG_SUPPORT = math.log(1e12)  # single step: lost mass <= 1e-12 delta / T
_READ = 0.8  # reading point s_r = 0.8 eps_est (epsilon mode)
# Empirical constant of the connect-the-dots error model (see required_points).
ERROR_MODEL = 1.0
# dp_accounting's default value_discretization_interval, and how close to its
# error jaxrdp's grid stays (required_points).
_PEER_INTERVAL = 1e-4
_PEER_SHARE = 0.8
_PEER_SLACK = 1e-6


class Plan(NamedTuple):
  """Per-configuration grid (all float64 scalars except ``a``: ``(2, P)``)."""

  lam: jnp.ndarray  # tilt
  lam_read: jnp.ndarray  # slope of -log delta at the answer (error model)
  nu_hi: jnp.ndarray  # Chernoff exponent that sized the window's top
  nu_up: jnp.ndarray  # exponent that bounds the mass folded down (> lam)
  nu_lo: jnp.ndarray  # exponent that bounds the lower tail (< 0)
  eps_c: jnp.ndarray  # RDP (Chernoff) epsilon: upper end of the answer
  eps_est: jnp.ndarray  # saddle-point estimate of the answer (epsilon given: itself)
  log_delta_c: jnp.ndarray  # log of the delta the window is sized for
  lo: jnp.ndarray  # requested window bottom
  hi: jnp.ndarray  # requested window top
  a: jnp.ndarray  # (2, P) single-step support bottoms (remove, add)
  b: jnp.ndarray  # (2, P) single-step support tops


def _argmin(values, at):
  """``(min, at[argmin])`` without an integer argmin (x64-off safe)."""
  low = jnp.min(values)
  return low, jnp.min(jnp.where(values == low, at, jnp.inf))


def _saddle_point_epsilon(lam, k, log_delta):
  """Saddle-point estimate of the tight epsilon from ``K`` on the grid ``lam``.

  With ``K'(nu) = eps`` the tilted loss is centred on ``eps`` and about normal
  with variance ``K''(nu)``, so ``delta(eps) ~ exp(K(nu) - nu eps) /
  (nu (1 + nu) sqrt(2 pi K''(nu)))``. Derivatives by finite differences on the
  grid; the estimate is interpolated where the approximate ``log delta`` crosses
  the target. It only places the window and sets the accuracy target.
  """
  dk = (k[1:] - k[:-1]) / (lam[1:] - lam[:-1])  # K' at midpoints
  mid = 0.5 * (lam[1:] + lam[:-1])
  eps = dk[1:] * 0.5 + dk[:-1] * 0.5  # K' at lam[1:-1]
  var = (dk[1:] - dk[:-1]) / (mid[1:] - mid[:-1])  # K''
  nu = lam[1:-1]
  ok = jnp.isfinite(eps) & (var > 0) & (eps > 0)
  log_d = (
    k[1:-1]
    - nu * eps
    - jnp.log(nu * (1.0 + nu))
    - 0.5 * jnp.log(2 * math.pi * jnp.where(ok, var, 1.0))
  )
  log_d = jnp.where(ok, log_d, jnp.inf)
  # First grid point where the estimate is below the target; interpolate from the one before.
  below = log_d <= log_delta
  i = jnp.min(jnp.where(below, jnp.arange(nu.shape[0], dtype=lam.dtype), float(nu.shape[0])))
  i = jnp.clip(i, 1.0, nu.shape[0] - 1.0).astype(jnp.int32)
  l0, l1 = log_d[i - 1], log_d[i]
  e0, e1 = eps[i - 1], eps[i]
  frac = jnp.clip(
    jnp.where(jnp.isfinite(l0) & (l0 > l1), (l0 - log_delta) / (l0 - l1), 1.0), 0.0, 1.0
  )
  out = e0 + frac * (e1 - e0)
  return jnp.where(jnp.any(below), out, jnp.inf)


def _one_step_mgf(q, sigma, families):
  """The producers' ``log_mgf`` of one step of each phase at every exponent either
  direction needs (``sigma``: each phase's scale).

  Columns: ``LAMBDAS``, ``-1 - LAMBDAS``, ``NEGATIVE``, ``-1 - NEGATIVE`` (the
  add direction's function at ``nu`` is the remove direction's at ``-1 - nu``).
  """
  args = np.concatenate([LAMBDAS, -1.0 - LAMBDAS, NEGATIVE, -1.0 - NEGATIVE])
  size = np.maximum(np.abs(args), np.abs(1.0 + args))
  small = size <= _SMALL_ORDER
  mid = ~small & (size <= _MID_ORDER)
  large = ~small & ~mid
  classes = ((small, _SMALL_POINTS), (mid, _MID_POINTS), (large, _MGF_POINTS))
  order = np.argsort(np.concatenate([np.nonzero(sel)[0] for sel, _ in classes]))

  def one_phase(producer, q, sigma):
    parts = [producer.log_mgf(q, sigma, jnp.asarray(args[sel]), points) for sel, points in classes]
    return jnp.concatenate(parts, axis=-1)[order]

  return _producers.map_phases(families, one_phase, q, sigma)  # (P, 2 L + 2 N)


def plan(q, sigma, steps, target, mode: str, is_add, families) -> Plan:
  """Plans one direction of one configuration of ``P`` phases (``q, sigma, steps``: ``(P,)``).

  The add direction's loss is minus the remove direction's, taken under ``Q``:
  its moment-generating function at ``nu`` is the remove direction's at
  ``-1 - nu``, so both directions are planned from :func:`log_mgf`.
  """
  m = _one_step_mgf(q, sigma, families)
  return _plan_direction(q, sigma, steps, target, mode, jnp.asarray(is_add), m, families)


def plan_both(q, sigma, steps, target, mode: str, families) -> tuple[Plan, Plan]:
  """``(remove, add)`` plans of one configuration, from one evaluation of the MGF."""
  m = _one_step_mgf(q, sigma, families)
  return tuple(
    _plan_direction(q, sigma, steps, target, mode, jnp.asarray(is_add), m, families)
    for is_add in (False, True)
  )


def _plan_direction(
  q, sigma, steps, target, mode, is_add, m, families, log_scale=None, max_tilt=None
) -> Plan:
  """One direction's plan from the one-step MGF table ``m`` (:func:`_one_step_mgf`).

  ``log_scale`` (delta mode, optional) caps the log of the delta the window is
  sized for (neglected masses are then below ``1e-6 e^log_scale`` absolute
  however large delta is); ``max_tilt`` (optional) caps the tilt.
  """
  lam = jnp.asarray(LAMBDAS)
  neg = jnp.asarray(NEGATIVE)
  n_l, n_n = lam.shape[0], neg.shape[0]
  k1 = m[:, :n_l]  # (P, L) remove direction, one step
  m_lam = jnp.where(is_add, m[:, n_l : 2 * n_l], k1)
  m_neg = jnp.where(is_add, m[:, 2 * n_l + n_n :], m[:, 2 * n_l : 2 * n_l + n_n])

  def cumulant(m1):  # K of this direction, summed over phases
    out = jnp.sum(steps[:, None] * m1, axis=0)
    return jnp.where(jnp.isfinite(out), out, jnp.inf)

  k = cumulant(m_lam)  # (L,)
  k_neg = cumulant(m_neg)
  if mode == "epsilon":
    log_delta_c = jnp.log(target)
    eps_c, lam_read = _argmin((k - log_delta_c) / lam, lam)
    eps_est = jnp.clip(_saddle_point_epsilon(lam, k, log_delta_c), 0.0, eps_c)
    eps_est = jnp.where(jnp.isfinite(eps_est), eps_est, eps_c)
    s_read = _READ * eps_est
  else:
    vmin, lam_read = _argmin(k - lam * target, lam)
    eps_c = target
    eps_est = target
    log_delta_c = jnp.minimum(vmin, 0.0)
    if log_scale is not None:
      log_delta_c = jnp.minimum(log_delta_c, log_scale)
    s_read = target
  log_eta = log_delta_c - _LOG_ALIAS  # log(1e-6 delta)
  hi, nu_hi = _argmin((k - log_delta_c + _LOG_TAIL) / lam, lam)
  hi = jnp.maximum(hi, eps_c)
  # Lower tail: P(L < x) <= exp(K(nu) - nu x), nu < 0.
  lo_cov, nu_lo = _argmin(-(k_neg - log_eta) / neg, neg)
  lo_cov = -lo_cov
  # Width needed by each candidate tilt; the narrowest wins (ties: the larger tilt).
  tilt = lam_read * jnp.asarray(_TILTS)  # (C,)
  if max_tilt is not None:
    tilt = jnp.minimum(tilt, max_tilt)
  above = lam[None, :] > tilt[:, None]  # (C, L)
  gap = jnp.where(above, lam[None, :] - tilt[:, None], 1.0)
  need_up = jnp.where(above, (k[None, :] - lam[None, :] * s_read - log_eta) / gap, jnp.inf)
  w_up = jnp.min(need_up, axis=-1)
  w_low = jnp.minimum(hi - lo_cov, -log_eta / tilt)
  width = jnp.maximum(jnp.maximum(w_up, w_low), hi - 0.5 * eps_est)
  width = jnp.minimum(width, 600.0 / (1.0 + tilt))  # the reader's exponents stay finite
  # The largest tilt whose window is within 10% of the narrowest (a larger tilt
  # keeps the certified round-off small).
  best = jnp.min(width)
  lam_i = jnp.max(jnp.where(width <= 1.1 * best, tilt, 0.0))
  sel = tilt == lam_i
  best = jnp.min(jnp.where(sel, width, jnp.inf))
  nu_up = jnp.min(jnp.where(sel[:, None] & (need_up == w_up[:, None]), lam[None, :], jnp.inf))
  nu_up = jnp.where(jnp.isfinite(nu_up), nu_up, 2.0 * lam_i)
  lo = hi - best
  t_total = jnp.sum(steps)
  z = jnp.sqrt(2.0 * (jnp.log(t_total) + _LOG_SUPPORT - log_delta_c))
  ar, br, aa, ba = _producers.map_phases(
    families,
    lambda producer, q, sigma: (
      *producer.support(q, sigma, z, "remove"),
      *producer.support(q, sigma, z, "add"),
    ),
    q,
    sigma,
  )
  # Chernoff on one step: P_remove(L > b) <= exp(K1(lam) - lam b) and
  # P_add(L < a) <= E_mu0[(mu/mu0)^(1+lam)] e^{(1+lam) a} = exp(K1(lam) + (1+lam) a).
  log_cut = jnp.log(t_total) + _LOG_SUPPORT - log_delta_c
  br = jnp.minimum(br, jnp.min((k1 + log_cut) / lam, axis=-1))
  aa = jnp.maximum(aa, -jnp.min((k1 + log_cut) / (1.0 + lam), axis=-1))
  return Plan(
    lam_i,
    lam_read,
    nu_hi,
    nu_up,
    nu_lo,
    eps_c,
    eps_est,
    log_delta_c,
    lo,
    hi,
    jnp.stack([ar, aa]),
    jnp.stack([br, ba]),
  )


# The single-step support holds at most this many lattice points per FFT bin
# (it is folded modulo n before the transform).
SUPPORT_FOLDS = 8


def spacing(p: Plan, n: int, is_add):
  """Grid spacing: the window ``[lo, hi]`` in ``n`` points, the support in ``8 n``.

  ``is_add`` (a traced bool) picks the direction whose support counts.
  """
  d_window = (p.hi - p.lo) / (n - 1)
  widths = p.b - p.a  # (2, P)
  width = jnp.max(jnp.where(is_add, widths[1], widths[0]))
  return jnp.maximum(d_window, width / (SUPPORT_FOLDS * n - 1))


def required_points(p: Plan, steps, rtol):
  """Grid points needed for a relative epsilon error of about ``rtol``.

  Error model of connect-the-dots after composition: each step shifts the loss
  by at most ``d^2 / 8`` in mean (a mean-preserving spread in ``e^{-L}``) and
  adds variance ``<= d^2 / 4``; under the tilt that moves epsilon by about
  ``T d^2 (1 + lam) / 8``. Measured on the MNIST configuration against a
  converged reference, this model is within a factor ``ERROR_MODEL`` of the
  observed error.

  The spacing also stays below what gives dp_accounting's PLD accountant at
  its default interval (``1e-4``, connect-the-dots on a uniform grid, so the
  same error model) its error, plus ``1e-6`` of epsilon: where ``rtol`` alone
  would allow a coarser grid (large epsilon), jaxrdp is never looser than it.
  """
  t_total = jnp.sum(steps)
  scale = jnp.maximum(p.eps_est, 1e-8)
  per_d2 = ERROR_MODEL * t_total * (1.0 + p.lam_read) / 8.0  # error / d^2
  # Never coarser than dp_accounting's default grid (1e-4, with the same
  # construction and the same error) beyond 1e-6 relative of epsilon.
  d_peer = jnp.sqrt(_PEER_SHARE * _PEER_INTERVAL**2 + _PEER_SLACK * scale / per_d2)
  d_req = jnp.minimum(jnp.sqrt(rtol * scale / per_d2), d_peer)
  window = (p.hi - p.lo) / d_req
  support = jnp.max(p.b - p.a) / (SUPPORT_FOLDS * d_req)
  return jnp.maximum(window, support)


# Trade-off plans (readers of the Neyman-Pearson test; ``_tradeoff_read``).
# Loss kept below the lowest Neyman-Pearson threshold read.
_TRADEOFF_MARGIN = 0.5
# Below the planned threshold the reader's round-off bound grows like
# e^{lam (t_plan - t)}: over a curve, the tilt keeps lam (t_max - t_min) <= this.
_TRADEOFF_TILT_SPAN = 10.0


def _cumulant(m, steps, is_add):
  """``K(lam)`` on ``LAMBDAS`` of one direction, summed over phases (``m``: ``_one_step_mgf``)."""
  n_l = LAMBDAS.shape[0]
  m_lam = jnp.where(is_add, m[:, n_l : 2 * n_l], m[:, :n_l])
  out = jnp.sum(steps[:, None] * m_lam, axis=0)
  return jnp.where(jnp.isfinite(out), out, jnp.inf)


def _gdp_mu(k):
  """``mu`` of the Gaussian-DP pair with the same KL divergence ``K'(0) ~ K(lam_0) / lam_0``."""
  kl = jnp.maximum(k[0] / LAMBDAS[0], 1e-300)
  return jnp.sqrt(2.0 * kl)


def threshold_estimate(k, alpha):
  """Estimate of the Neyman-Pearson threshold ``t`` with ``Q(L > t) = alpha``.

  From the direction's cumulant ``k = K(lam)`` on ``LAMBDAS``: the ``mu``-GDP
  threshold ``mu z_{1-alpha} - mu^2 / 2`` with ``mu^2 = 2 K'(0)`` (twice the KL
  divergence), capped by the Chernoff root ``min_lam (K(lam) - log alpha) / (1 +
  lam)`` (``E_Q[e^{(1 + lam) L}] = E_P[e^{lam L}]``), which is above the
  threshold. Only plans the grid (soundness never depends on it).
  """
  mu = _gdp_mu(k)
  alpha = jnp.asarray(alpha)
  t_gdp = -mu * jax.scipy.special.ndtri(alpha) - 0.5 * mu * mu
  lam = jnp.asarray(LAMBDAS)
  t_cher = jnp.min((k[None, :] - jnp.log(alpha)[..., None]) / (1.0 + lam), axis=-1)
  return jnp.minimum(t_gdp, t_cher)


def plan_tradeoff(q, sigma, steps, alphas, atol, is_add, families, at_zero=False):
  """Plan of one direction for reading the trade-off curve at FPRs ``alphas`` (``(G,)``).

  The window is planned as for delta at the largest estimated threshold
  (:func:`threshold_estimate`), with every neglected mass sized for an absolute
  error below ``1e-6 atol``, reaching ``_TRADEOFF_MARGIN`` below the smallest
  threshold, with the tilt capped so that the round-off bound stays small over
  the whole range. ``at_zero``: the plan reads delta at 0 (the advantage)
  instead. Returns ``(plan, density)``: ``density`` estimates the largest
  density of the loss under ``P`` at the thresholds, which sets the error
  (:func:`required_points_tradeoff`): that of the Gaussian-DP pair with the same
  KL divergence, ``phi((t - mu^2/2) / mu) / mu``, and at least ``(1 + lam) e^t
  alpha`` (the epsilon-shift model of :func:`required_points`).
  """
  m = _one_step_mgf(q, sigma, families)
  k = _cumulant(m, steps, jnp.asarray(is_add))
  mu = _gdp_mu(k)
  if at_zero:
    t = jnp.zeros(1)
    slope = jax.scipy.special.ndtr(-0.5 * mu)  # Q(L > 0) of that pair
  else:
    t = threshold_estimate(k, alphas)
    slope = jnp.exp(jnp.minimum(t, 700.0)) * alphas
  gauss = jnp.exp(-0.5 * ((t - 0.5 * mu * mu) / mu) ** 2) / (mu * math.sqrt(2.0 * math.pi))
  t_hi, t_lo = jnp.max(t), jnp.min(t)
  max_tilt = _TRADEOFF_TILT_SPAN / jnp.maximum(t_hi - t_lo, 1.0)
  pl = _plan_direction(
    q, sigma, steps, t_hi, "delta", jnp.asarray(is_add), m, families, jnp.log(atol), max_tilt
  )
  density = jnp.max(jnp.maximum(gauss, (1.0 + pl.lam_read) * slope))
  return pl._replace(lo=jnp.minimum(pl.lo, t_lo - _TRADEOFF_MARGIN)), density


def required_points_tradeoff(p: Plan, steps, density, atol):
  """Grid points for an absolute error of about ``atol`` in the TPR (or the advantage).

  Each step's connect-the-dots image of the loss is shifted by ``Z`` with mean
  about ``d^2 / 8`` and variance up to ``d^2 / 4`` (:func:`required_points`);
  at the Neyman-Pearson threshold ``t`` the TPR ``min_eps [delta(eps) + e^eps
  alpha]`` moves like ``delta(t)`` (the minimum is stationary in epsilon), by
  about ``T (m |delta'| + v delta'' / 2) ~ T d^2 / 8 (|delta'| + delta'')``, and
  ``|delta'(t)| + delta''(t) = e^t f_Q(t) = f_P(t)``, the density of the
  composed loss under ``P`` at ``t``.
  """
  t_total = jnp.sum(steps)
  per_d2 = ERROR_MODEL * t_total / 8.0 * jnp.maximum(density, 1e-300)
  d_req = jnp.sqrt(atol / per_d2)
  window = (p.hi - p.lo) / d_req
  support = jnp.max(p.b - p.a) / (SUPPORT_FOLDS * d_req)
  return jnp.maximum(window, support)
