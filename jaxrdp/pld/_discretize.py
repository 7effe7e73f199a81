"""One step of the Sampled Gaussian Mechanism as a dominating PMF on a grid.

Connect-the-dots (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022,
"Connect the Dots: Tighter Discrete Approximations of Privacy Loss
Distributions", arXiv:2207.04380, Sec. 3): on the support
``e_i = a + i d`` (``i = 0..n-1``) the PMF whose hockey-stick curve
``delta(e^eps)`` is the linear interpolation (in ``e^eps``) of the exact convex
curve at the grid points. It dominates the exact privacy-loss distribution
(Thm 3.2 there), so every delta or epsilon read from it, or from its
compositions, is an upper bound. With ``delta_i = delta(e_i)``:

* ``p_0 = 1 - delta_0 + (delta_1 - delta_0) / (e^d - 1)``,
* ``p_i = [(delta_{i+1} - delta_i) - e^d (delta_i - delta_{i-1})] / (e^d - 1)``,
* ``p_{n-1} = (delta_{n-1} - delta_{n-2}) / (e^{-d} - 1)``,
* the mass at ``+inf`` is ``delta_{n-1}``.

These are the uniform special case of :func:`connect_the_dots_general`, which
takes any finite support (the accountant uses a thinned lattice,
:func:`support_points`).

Equivalently, every atom ``s`` of the exact PLD in ``[e_i, e_{i+1}]`` is split
onto the two neighbours so that its P-mass and its Q-mass ``E_P[e^{-L}]`` are
kept; mass below ``e_0`` is moved up to ``e_0`` and mass above ``e_{n-1}``
partly to ``+inf``. Rounding can make a computed ``p_i`` slightly negative
(second differences); such values are raised to 0, which only adds mass and
therefore only increases every delta.

The delta curve comes from the closed-form single-step profile
(``jaxrdp.mechanisms._sgm_single_step``, Kalinin 2024, in log space with ``log_ndtr``-type
kernels), both directions: remove ``(P, Q) = (mu, mu0)``, add
``(P, Q) = (mu0, mu)`` with ``mu0 = N(0, sigma^2)``,
``mu = (1 - q) N(0, sigma^2) + q N(1, sigma^2)``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._core.numerics import log1p_rate_expm1
from .._core.numerics import log_ndtr as _log_ndtr
from ..mechanisms import _sgm_single_step

__all__ = [
  "log_delta_curve",
  "log_mgf",
  "connect_the_dots_general",
  "loss_remove",
  "support",
  "segments",
  "support_points",
]


def loss_remove(x, q, sigma):
  """Privacy loss of the remove direction at output ``x``: ``log(mu(x) / mu0(x))``.

  ``log(1 - q + q e^z)`` with ``z = (2x - 1) / (2 sigma^2)``, formed without
  ``e^z`` where it would overflow (:func:`jaxrdp._core.numerics.log1p_rate_expm1`).
  """
  z = (2.0 * x - 1.0) / (2.0 * sigma * sigma)
  return log1p_rate_expm1(q, z)


def support(q, sigma, z, direction):
  """Loss interval ``[a, b]`` holding all but ``2 Phi(-z)`` of the P-mass of one step.

  The loss is monotone in the output ``x``: increasing (remove, ``x ~ mu``) or
  decreasing (add, ``L = -loss_remove``, ``x ~ mu0``). ``P(x < -z sigma)`` and
  ``P(x > 1 + z sigma)`` are each at most ``Phi(-z)`` under both ``mu`` and
  ``mu0``, so cutting there loses at most that much mass on each side.
  """
  lo_x = -z * sigma
  hi_x = 1.0 + z * sigma
  if direction == "remove":
    return loss_remove(lo_x, q, sigma), loss_remove(hi_x, q, sigma)
  return -loss_remove(hi_x, q, sigma), -loss_remove(lo_x, q, sigma)


def log_mgf(q, sigma, lam, points: int):
  """Estimate of ``log E_P[e^{lam L}] = lam D_{1+lam}(mu || mu0)`` of one step, any real ``lam``.

  ``E_{x ~ mu0}[(mu(x)/mu0(x))^{1+lam}]`` by the trapezoid rule in log space on
  ``[min(0, 1+lam) - 12 sigma, max(0, 1 + lam) + 12 sigma]`` (the integrand's
  peak lies between 0 and ``1 + lam``). Only used to *plan* the grid (its
  accuracy, ~1e-4 relative, affects cost and tightness, never soundness);
  jaxrdp's exact ``sgm_rdp`` is the reference.
  """
  alpha = 1.0 + lam
  u = jnp.linspace(0.0, 1.0, points)
  lo = jnp.minimum(alpha, 0.0) - 12.0 * sigma
  hi = jnp.maximum(alpha, 0.0) + 12.0 * sigma
  x = lo[..., None] + (hi - lo)[..., None] * u
  z = (2.0 * x - 1.0) / (2.0 * sigma[..., None] ** 2)
  ratio = jnp.logaddexp(jnp.log1p(-q[..., None]), jnp.log(q[..., None]) + z)  # log(mu/mu0)
  f = -0.5 * (x / sigma[..., None]) ** 2 + alpha[..., None] * ratio
  h = (hi - lo) / (points - 1)
  out = jax.nn.logsumexp(f, axis=-1) + jnp.log(h) - jnp.log(sigma) - 0.5 * math.log(2 * math.pi)
  # Holder: E_Q[(P/Q)^alpha] >= 1 outside (0, 1) and <= 1 inside.
  return jnp.where((alpha > 0) & (alpha < 1), jnp.minimum(out, 0.0), jnp.maximum(out, 0.0))


def _log_difference(log_w1, x, log_ratio, h):
  """``log(w1 Phi(x) - w2 Phi(x - h))`` with ``log(w2 / w1) = log_ratio``.

  Written as ``log w1 + log Phi(x) + log(1 - e^{-gap})`` with
  ``gap = log Phi(x) - log Phi(x - h) - log_ratio >= 0``: no subtraction of
  the two (possibly tiny) terms, so the relative error is about
  ``u (|log Phi(x)| + |log_ratio|) / gap``.
  """
  lx = _log_ndtr(x)
  gap = lx - _log_ndtr(x - h) - log_ratio
  pos = gap > 0
  return jnp.where(pos, log_w1 + lx + jnp.log(-jnp.expm1(-jnp.where(pos, gap, 1.0))), -jnp.inf)


def log_delta_curve(eps, q, sigma, direction):
  """``log delta(eps)`` of one step for any real ``eps`` (``q`` in (0, 1], ``sigma > 0``).

  Remove (Kalinin 2024, eq. (1)): with ``h = e^eps - 1 + q`` and
  ``x = -sigma log(h/q) + 1/(2 sigma)``,
  ``delta = q Phi(x) - h Phi(x - 1/sigma)``; ``delta = 1 - e^eps`` when
  ``h <= 0`` (the region ``mu > e^eps mu0`` is everything). Add: with
  ``c = q - (1 - e^-eps)`` and ``x = sigma log(c/q) + 1/(2 sigma)``,
  ``delta = e^eps [c Phi(x) - q Phi(x - 1/sigma)]``, and 0 when ``c <= 0``.
  Both are ``w1 Phi(x) - w2 Phi(x - h)`` with ``w2 phi(x - h) = w1 phi(x)``
  (the densities cross at the boundary), evaluated by ``_log_difference``.

  ``direction`` is ``"remove"``, ``"add"``, or a boolean array (True: add) that
  broadcasts with ``eps``; the two directions share one pair of ``_log_ndtr``
  evaluations, so a traced direction costs no more than a static one.
  """
  if isinstance(direction, str):
    if direction not in ("remove", "add"):
      raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}")
    is_add = direction == "add"
  else:
    is_add = jnp.asarray(direction)
  inv = 1.0 / sigma
  log_q = jnp.log(q)
  # Remove direction (the ratio is formed in log space: the loss of a step with
  # little noise reaches far beyond e^709).
  full, ell_r = _sgm_single_step.log_remove_ratio(eps, q)  # h <= 0, log(h / q)
  special_r = jnp.log(-jnp.expm1(jnp.minimum(eps, -1e-300)))
  # Add direction.
  positive, log_c, ell_a = _sgm_single_step.log_add_weight(eps, q)  # log c, log(c / q)
  log_c = jnp.where(positive, log_c, log_q)
  ell_a = jnp.where(positive, ell_a, 0.0)
  if isinstance(is_add, bool):
    if not is_add:
      x = -sigma * ell_r + 0.5 * inv
      return jnp.where(full, special_r, _log_difference(log_q, x, ell_r, inv))
    x = sigma * ell_a + 0.5 * inv
    return jnp.where(positive, _log_difference(eps + log_c, x, -ell_a, inv), -jnp.inf)
  x = jnp.where(is_add, sigma * ell_a, -sigma * ell_r) + 0.5 * inv
  log_w1 = jnp.where(is_add, eps + log_c, log_q)
  log_ratio = jnp.where(is_add, -ell_a, ell_r)
  out = _log_difference(log_w1, x, log_ratio, inv)
  return jnp.where(is_add, jnp.where(positive, out, -jnp.inf), jnp.where(full, special_r, out))


def connect_the_dots_general(delta, gaps, count):
  """Connect-the-dots masses on a non-uniform support (last axis), with padding.

  For support points ``e_0 < ... < e_{K-1}`` (the first ``count = K`` entries;
  the rest is padding) with gaps ``g_t = e_{t+1} - e_t`` and exact curve values
  ``delta_t``, the dominating PLD whose ``delta(e^eps)`` curve is the linear
  interpolation in ``e^eps`` of the exact one (Doroshenko et al. 2022, Sec. 3,
  for any finite support) has, with slopes ``R_t = (delta_{t+1} - delta_t) /
  (e^{g_t} - 1)`` and ``L_t = (delta_t - delta_{t-1}) / (1 - e^{-g_{t-1}})``:

  * ``p_0 = 1 - delta_0 + R_0``,
  * ``p_t = R_t - L_t`` for ``0 < t < K - 1``,
  * ``p_{K-1} = -L_{K-1}``, and the mass at ``+inf`` is ``delta_{K-1}``.

  On a uniform support these are the formulas of the module docstring.
  Negative rounding residues are raised to 0 (that only adds mass, so every delta read later only
  grows).

  Args:
    delta: ``(..., N)`` exact curve values (padding entries are ignored).
    gaps: ``(..., N - 1)`` gaps between consecutive points (padding ignored).
    count: ``(...)`` number of valid points ``K >= 2`` (float or int).

  Returns:
    ``(p, p_inf)``: masses ``(..., N)`` (0 on padding) and the mass at ``+inf``.
  """
  big_n = delta.shape[-1]
  t = jnp.arange(big_n, dtype=delta.dtype)
  count = jnp.asarray(count, delta.dtype)[..., None]
  last = count - 1.0
  step = jnp.diff(delta, axis=-1)  # (..., N-1), <= 0 up to rounding
  g_ok = t[:-1] < last  # the gap to the next point is real
  g = jnp.where(g_ok, gaps, 1.0)
  right = jnp.where(g_ok, step / jnp.expm1(g), 0.0)  # R_t, 0 at the last point
  left = jnp.where(g_ok, -step / jnp.expm1(-g), 0.0)  # L_{t+1}
  zero = jnp.zeros(delta.shape[:-1] + (1,), delta.dtype)
  right = jnp.concatenate([right, zero], axis=-1)
  left = jnp.concatenate([delta[..., :1] - 1.0, left], axis=-1)
  p = jnp.where(t <= last, jnp.maximum(right - left, 0.0), 0.0)
  k = jnp.clip(last, 0, big_n - 1).astype(jnp.int32)
  p_inf = jnp.take_along_axis(delta, k, axis=-1)[..., 0]
  return p, p_inf


def segments(n: int, lean: bool = False):
  """Static segmentation of the single-step lattice: ``(J, L, m_max)``.

  The support holds at most ``m_max = 8 n`` lattice points (folded modulo
  ``n`` for the FFT), cut into ``J`` segments of ``L`` points each
  (``lean``: half as many segments, twice as long).
  """
  j = min(2048, n // 8) // (2 if lean else 1)
  m_max = 8 * n
  return j, m_max // j, m_max


# Share of the connect-the-dots error model that the coarser segments may add
# (each coarsened segment's tilted mass times its squared gap is at most
# ``_ETA / J`` of the uniform grid's).
_ETA = 0.05


def support_points(
  a, b, d, lam, s_cap, curve, *, n: int, n_eval: int, lean=False, with_level=False
):
  """Lattice points at which one step's delta curve ``curve`` (``eps -> log delta``) is evaluated.

  Connect-the-dots works on any finite support; its error (after composition,
  read at the answer) is about ``sum_c m_c g_c^2 / 8`` per step, where ``m_c``
  is the probability of cell ``c`` weighted by how much a loss there moves the
  answer, ``e^{lam min(s, s_cap)}`` (see ``_kernel``), and ``g_c`` its width.
  A uniform grid
  spends most points in tails of negligible tilted mass, so the support is the
  lattice ``a + i d`` (``i < m``), thinned by a power of two per segment of
  ``L`` points: full resolution where the tilted mass is large, gaps up to ``L d``
  where ``m_c 4^k <= tau`` (``tau = _ETA / J`` unless ``n_eval`` points do not
  suffice, then four times larger, and so on). The tilted segment masses come
  from a coarse connect-the-dots pass on the segment boundaries (``lean``: on
  half as many segments, :func:`segments`). None of this affects soundness
  (any support dominates); it sets accuracy and cost.

  Returns:
    ``(idx, count)``: ``(n_eval,)`` float lattice indices, increasing on the
    first ``count`` entries (the last one is ``m - 1``); padding repeats
    ``m - 1``. ``with_level``: and whether the thinning met its design
    share (``tau = _ETA / J``) within ``n_eval`` points.
  """
  dt = d.dtype
  n_seg, seg, m_max = segments(n, lean)
  k_max = seg.bit_length() - 1
  m = jnp.clip(jnp.ceil((b - a) / d) + 1.0, 2.0, float(m_max))  # the last point is >= b
  # Coarse pass on the segment boundaries.
  j = jnp.arange(n_seg + 1, dtype=dt)
  cidx = jnp.minimum(j * seg, m - 1.0)
  n_coarse = jnp.ceil((m - 1.0) / seg) + 1.0
  e_c = a + cidx * d
  ld_c = curve(e_c)
  p_c, _ = connect_the_dots_general(jnp.exp(ld_c), jnp.diff(e_c), n_coarse)
  pos = p_c > 0
  lw = jnp.where(pos, jnp.log(jnp.where(pos, p_c, 1.0)) + lam * jnp.minimum(e_c, s_cap), -jnp.inf)
  w = jnp.exp(lw - jnp.max(lw))
  w = w / jnp.sum(w)
  mass = w[:-1] + w[1:]  # (J,) tilted mass of each segment, over-estimated
  length = jnp.clip(m - j[:-1] * seg, 0.0, float(seg))  # lattice points per segment
  # Thinning exponents for tau = tau0 4^c, c = 0..k_max; the first that fits.
  # floor(0.5 log2(tau0 4^c / mass)) = floor(0.5 log2(tau0 / mass)) + c exactly,
  # so one log2 per segment serves every c, and 2^k is a table lookup.
  c = jnp.arange(k_max + 1, dtype=dt)[:, None]
  pow2 = jnp.asarray(2.0 ** np.arange(k_max + 1), dt)
  safe = jnp.where(mass > 0, mass, 1.0)
  k_base = jnp.floor(0.5 * jnp.log2((_ETA / n_seg) / safe))
  k = jnp.where(mass > 0, k_base + c, float(k_max))
  k = jnp.clip(k, 0.0, float(k_max))
  counts = jnp.ceil(length / jnp.take(pow2, k.astype(jnp.int32)))  # (C, J)
  total = jnp.sum(counts, axis=-1) + 1.0  # room for the end point m - 1
  fits = total <= n_eval
  pick = jnp.min(jnp.where(fits, c[:, 0], jnp.inf))
  sel = c[:, 0] == pick
  k_tau = jnp.sum(jnp.where(sel[:, None], k, 0.0), axis=0)
  # None fits (the dense part alone is too long): the coarsest thinning, with
  # every segment at least k_min coarser, k_min as small as fits (at k_max,
  # one point per segment: J + 1 <= n_eval).
  k_min = jnp.arange(k_max + 1, dtype=dt)[:, None]
  k_low = jnp.maximum(k[-1][None, :], k_min)  # (C, J)
  fits_low = (
    jnp.sum(jnp.ceil(length / jnp.take(pow2, k_low.astype(jnp.int32))), axis=-1) + 1.0 <= n_eval
  )
  pick_low = jnp.min(jnp.where(fits_low, k_min[:, 0], float(k_max)))
  k = jnp.where(jnp.any(fits), k_tau, jnp.maximum(k[-1], pick_low))
  step = jnp.take(pow2, k.astype(jnp.int32))
  counts = jnp.ceil(length / step)
  ends = jnp.cumsum(counts)  # exclusive end of each segment's slots
  n_pts = ends[-1]
  slot = jnp.arange(n_eval, dtype=dt)
  # Segment of each slot, searchsorted(ends, slot, side="right"): the number
  # of ends at or below the slot, by marking the ends and a cumulative sum.
  marks = jnp.zeros(n_eval + 1, dt).at[jnp.minimum(ends, float(n_eval)).astype(jnp.int32)].add(1.0)
  jj = jnp.cumsum(marks[:-1])
  jj_c = jnp.minimum(jj, n_seg - 1).astype(jnp.int32)
  start = jnp.take(ends - counts, jj_c)
  idx = jj_c * seg + (slot - start) * jnp.take(step, jj_c)
  # The last point of the thinned lattice, and whether m - 1 must be appended.
  last_idx = jnp.max(jnp.where(slot < n_pts, idx, 0.0))
  need_end = last_idx < m - 1.0
  count = n_pts + jnp.where(need_end, 1.0, 0.0)
  idx = jnp.where(slot < n_pts, idx, m - 1.0)
  if with_level:
    return idx, count, jnp.any(fits) & (pick == 0)
  return idx, count
