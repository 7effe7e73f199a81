"""High-precision mpmath oracle for the Sampled Gaussian Mechanism (SGM).

This module is test infrastructure, not library code. It computes

    A_alpha = E_{z ~ N(0, sigma^2)}[(1 - q + q exp((2z - 1) / (2 sigma^2)))^alpha]

(Mironov, Talwar, Zhang 2019, "Renyi Differential Privacy of the Sampled Gaussian
Mechanism", arXiv:1908.10530, Sec. 3) in two ways that share no code with any
series implementation:

* ``log_a_minus_1_quad``: tanh-sinh quadrature (``mpmath.quad``) of the excess

      A_alpha - 1 = integral phi_sigma(z) h(z) dz,
      u = q expm1((2z - 1) / (2 sigma^2)),   h = (1 + u)^alpha - 1 - alpha u.

  E[u] = 0 under N(0, sigma^2), so subtracting ``1 + alpha u`` leaves the integral
  unchanged, and h >= 0 by convexity of t -> t^alpha (alpha > 1). Nothing cancels
  between nodes, so the relative accuracy of A - 1 is that of the quadrature even
  when the RDP is tiny.
* ``log_a_binomial``: the exact finite sum for integer alpha,

      A_alpha - 1 = sum_{k=2..alpha} C(alpha,k) (1-q)^(alpha-k) q^k expm1((k^2-k)/(2 sigma^2)),

  whose terms are all non-negative.

How the quadrature avoids missing mass (see ``_breakpoints``):

1. A float64 model of log(integrand) is scanned on a grid of step sigma/4 over
   [-40 sigma, max(alpha, 2) + 40 sigma] (extended while the ends are not negligible).
   Every run of grid points where the integrand exceeds exp(-130) ~ 3e-57 times its
   maximum is kept. The integrand is a mixture of Gaussian bumps of width sigma
   (centred at integers k left of z0 and at alpha - i right of it), so a sigma/4 grid
   sees every bump.
2. Breakpoints cover each such run (padded by 2 sigma) with step <= 4 sigma, plus
   multiples of that step around 0, 1/2, 1, 2, alpha and the largest left/right
   mixture bumps (argmax over k of log C(alpha,k) + k log q + (alpha-k) log(1-q) +
   (k^2-k)/(2 sigma^2)), plus steps of 1.5 sigma^2 (then geometric ones) around
   z0 = sigma^2 log(1/q - 1) + 1/2 when that is the finer scale: the complex
   singularities of (1 - q + q e^x)^alpha sit at distance pi sigma^2 from z0. The
   intervals reaching to -inf and +inf are integrated as well.
3. The integrand at the outermost finite breakpoints must be < 1e-40 times the
   largest value found, else ``OracleError``.
4. The integral is normalised by its float estimate (mpmath's convergence test is
   absolute, so the normalised integral must be O(1)), then computed twice: at
   ``dps`` digits on these breakpoints (pass A), and at ``dps + 20`` digits on the
   dual partition, the midpoints of consecutive breakpoints (pass B). The two must
   agree to 10^-(dps - 15) relative (1e-45 at the default dps = 60), else
   ``OracleError``. Pass B is returned. A bump that one partition under-resolves
   shows up as a disagreement.

The integrand is evaluated without cancellation: h by its power series
sum_{k>=2} C(alpha,k) u^k when |u| max(alpha, 1) <= 1e-8 (term ratio <= 1e-8),
otherwise directly with guard bits (about -log2(C(alpha,2) u^2) plus
-log2(alpha - 1)), checked after the fact and raised if the subtraction lost more.
Exponents as large as z^2 / (2 sigma^2) ~ 5e9 (sigma = 0.1, alpha = 1e4) get
log2 of their size in extra bits. Negligible tails (below 10^-(dps+30) by a float64
upper bound) return 0 without mpmath work.
"""

from __future__ import annotations

import functools
import math

import mpmath
import numpy as np

__all__ = [
  "OracleError",
  "quad_diagnostics",
  "log_a_minus_1_quad",
  "log_a_quad",
  "rdp_quad",
  "log_a_minus_1_binomial",
  "log_a_binomial",
  "rdp_binomial",
]

_LN10 = math.log(10.0)
# The float scan keeps every region whose integrand exceeds exp(-_SCAN_DROP) times
# the maximum (exp(-130) ~ 3.5e-57), far below the 1e-45 accuracy asked for.
_SCAN_DROP = 130.0
# Outermost finite breakpoints must carry less than this fraction of the maximum.
_EDGE_RATIO = 1e-40
# |u| * max(alpha, 1) below this: power series for h (term ratio <= 1e-8).
_SERIES_CUT = 1e-8
_MAX_BREAKPOINTS = 6000
# Pass A (dps digits) and pass B (dps + 20 digits, dual partition) must agree to
# 10^-(dps - _AGREE_SLACK) relative: 1e-45 at dps = 60.
_AGREE_SLACK = 15


class OracleError(RuntimeError):
  """The oracle could not certify its own result."""


def _check_args(q, sigma, alpha):
  if not (0.0 <= q <= 1.0):
    raise ValueError(f"q must be in [0, 1], got {q}")
  if not (sigma > 0.0 and math.isfinite(sigma)):
    raise ValueError(f"sigma must be positive and finite, got {sigma}")
  if not (alpha > 1.0 and math.isfinite(alpha)):
    raise ValueError(f"alpha must be finite and > 1, got {alpha}")


# ---------------------------------------------------------------------------
# float64 model of log(integrand), used only to locate the mass and to scale.
# ---------------------------------------------------------------------------


def _log_integrand_f64(z, q, sigma, alpha):
  """Approximate log(phi_sigma(z) h(z)) in float64 (vectorised, a few digits)."""
  z = np.asarray(z, dtype=np.float64)
  s2 = sigma * sigma
  x = (2.0 * z - 1.0) / (2.0 * s2)
  log_phi = -(z * z) / (2.0 * s2) - math.log(sigma * math.sqrt(2.0 * math.pi))
  with np.errstate(all="ignore"):
    u = q * np.expm1(x)
    am = max(alpha, 1.0)
    # Leading series terms are accurate to ~1e-6 relative here; beyond, the
    # log-space difference below keeps ~6 digits even for alpha - 1 = 1e-6.
    small = np.abs(u) * am <= 1e-3
    # Series leading terms: C(alpha,2) u^2 (1 + (alpha-2) u / 3).
    log_small = (
      math.log(alpha * (alpha - 1.0) / 2.0)
      + 2.0 * np.log(np.abs(u))
      + np.log1p((alpha - 2.0) * u / 3.0)
    )
    log_1mq = math.log1p(-q) if q < 1.0 else -np.inf
    log_w = np.logaddexp(log_1mq, math.log(q) + x)
    a_lw = alpha * log_w
    au = np.where(np.isfinite(u), alpha * u, 0.0)
    # Where 1 + alpha u > 0: h = w^alpha (1 - exp(d)), d = log(1 + alpha u) - alpha log w
    # <= 0 (convexity); for huge x, log(1 + alpha u) ~ log(alpha q) + x.
    one_au = np.where(
      np.isfinite(u), np.log1p(np.maximum(au, -1.0 + 1e-300)), math.log(alpha * q) + x
    )
    d = np.minimum(one_au - a_lw, 0.0)
    frac = np.maximum(-np.expm1(d), 1e-300)
    log_pos = a_lw + np.log(frac)
    # Where 1 + alpha u <= 0 (u near -q with alpha q > 1): h = w^alpha + |1 + alpha u|,
    # a sum of non-negative terms.
    log_neg = np.logaddexp(a_lw, np.log(-(1.0 + au)))
    log_big = np.where(np.isfinite(u) & (1.0 + au <= 0.0), log_neg, log_pos)
    log_h = np.where(small, log_small, log_big)
  out = log_phi + log_h
  if np.any(np.isnan(out)):
    bad = np.asarray(z)[np.isnan(out)][:3]
    raise OracleError(
      f"float model of the integrand is NaN at z={bad} (q={q}, sigma={sigma}, alpha={alpha})"
    )
  return out


def _scan(q, sigma, alpha):
  """Grid scan: returns (grid, log f on grid, max log f, log of integral estimate)."""
  step = sigma / 4.0
  lo = -40.0 * sigma
  hi = max(alpha, 2.0) + 40.0 * sigma
  for _ in range(60):
    n = int(math.ceil((hi - lo) / step)) + 1
    if n > 4_000_000:
      raise OracleError(f"scan grid too large ({n}) for q={q}, sigma={sigma}, alpha={alpha}")
    grid = lo + step * np.arange(n)
    lf = _log_integrand_f64(grid, q, sigma, alpha)
    m = np.max(lf)
    if not np.isfinite(m):
      raise OracleError(f"float scan found no mass for q={q}, sigma={sigma}, alpha={alpha}")
    grow_lo = lf[0] > m - _SCAN_DROP
    grow_hi = lf[-1] > m - _SCAN_DROP
    if not (grow_lo or grow_hi):
      break
    if grow_lo:
      lo -= 40.0 * sigma
    if grow_hi:
      hi += 40.0 * sigma
  else:
    raise OracleError("scan range did not converge")
  finite = lf[np.isfinite(lf)]
  log_int = float(np.max(finite) + np.log(np.sum(np.exp(finite - np.max(finite)))) + math.log(step))
  return grid, lf, float(m), log_int


def _mixture_peaks(q, sigma, alpha, z0):
  """Centres of the largest mixture bumps, left (k <= min(alpha, z0)) and right (alpha - i > z0)."""
  from math import lgamma

  peaks = []
  if not (0.0 < q < 1.0):
    return peaks
  lq, l1q = math.log(q), math.log1p(-q)
  two_s2 = 2.0 * sigma * sigma

  def log_abs_binom(a, k):
    # log|C(a, k)| via lgamma; only used for k <= a here, so it is positive.
    return lgamma(a + 1.0) - lgamma(k + 1.0) - lgamma(a - k + 1.0)

  kmax = min(math.floor(alpha), math.floor(z0)) if math.isfinite(z0) else math.floor(alpha)
  if kmax >= 2:
    ks = np.arange(2, min(kmax, 2_000_000) + 1, dtype=np.float64)
    lw = (
      np.array([log_abs_binom(alpha, k) for k in ks])
      + ks * lq
      + (alpha - ks) * l1q
      + (ks * ks - ks) / two_s2
    )
    peaks.append(float(ks[int(np.argmax(lw))]))
  imax = math.floor(alpha - z0) if math.isfinite(z0) else math.floor(alpha)
  imax = min(imax, math.floor(alpha), 2_000_000)
  if imax >= 0:
    iis = np.arange(0, imax + 1, dtype=np.float64)
    js = alpha - iis
    lw = (
      np.array([log_abs_binom(alpha, i) for i in iis])
      + js * lq
      + iis * l1q
      + (js * js - js) / two_s2
    )
    peaks.append(float(js[int(np.argmax(lw))]))
  return peaks


def _thin(pts, z0, sigma, spacing):
  """Sorted unique points with gaps >= 0.4 * local feature width."""
  s2 = sigma * sigma
  pts = np.unique(np.asarray(pts, dtype=np.float64))
  pts = pts[np.isfinite(pts)]
  keep = [pts[0]]
  for p in pts[1:]:
    near_z0 = math.isfinite(z0) and min(abs(p - z0), abs(keep[-1] - z0)) <= 12.0 * s2
    tol = 0.4 * (min(spacing, 1.5 * s2) if near_z0 else spacing)
    if p - keep[-1] > tol:
      keep.append(p)
  return np.asarray(keep)


def _breakpoints(q, sigma, alpha, spacing_factor=4.0):
  """Sorted finite breakpoints, plus the float estimate of log(integral).

  Every run of the float scan where the integrand exceeds exp(-130) times its
  maximum is covered with breakpoints ``spacing_factor * sigma`` apart (at most 400
  intervals per run); the analytic centres (0, 1/2, 1, 2, alpha, the largest
  mixture bumps) get points at multiples of that step, and z0 gets points at
  multiples of sigma^2 (then geometrically spaced ones) when sigma^2 is the finer
  scale. Outside the runs the integrand is below exp(-130) times its maximum, and
  the first and last intervals reach to -inf and +inf.
  """
  grid, lf, m, log_int = _scan(q, sigma, alpha)
  s2 = sigma * sigma
  spacing = spacing_factor * sigma
  z0 = (
    s2 * math.log(1.0 / q - 1.0) + 0.5 if 0.0 < q < 1.0 else (-math.inf if q == 1.0 else math.inf)
  )
  sig = lf > m - _SCAN_DROP
  idx = np.flatnonzero(sig)
  breaks = np.flatnonzero(np.diff(idx) > 1)
  starts = np.concatenate([[idx[0]], idx[breaks + 1]])
  ends = np.concatenate([idx[breaks], [idx[-1]]])
  runs = [(grid[max(a - 8, 0)], grid[min(b + 8, grid.size - 1)]) for a, b in zip(starts, ends)]

  def inside(p):
    return any(lo <= p <= hi for lo, hi in runs)

  pts = []
  for lo, hi in runs:
    n = min(max(int(math.ceil((hi - lo) / spacing)), 1), 400)
    pts.extend(np.linspace(lo, hi, n + 1))
  js = np.arange(-16, 17, dtype=np.float64) * spacing
  centres = [0.0, 0.5, 1.0, 2.0, alpha] + _mixture_peaks(q, sigma, alpha, z0)
  for c in centres:
    pts.extend(p for p in c + js if inside(p))
  if math.isfinite(z0) and 1.5 * s2 < spacing and inside(z0):
    near = list(z0 + np.arange(-8, 9) * (1.5 * s2))
    geo = 1.5 * s2 * 2.0 ** np.arange(4, 200)
    geo = geo[geo <= 16.0 * spacing]
    near += list(z0 + geo) + list(z0 - geo)
    pts.extend(p for p in near if inside(p))
  pts = _thin(pts, z0, sigma, spacing)
  if pts.size > _MAX_BREAKPOINTS:
    raise OracleError(f"too many breakpoints ({pts.size})")
  # Mass check: the outermost finite breakpoints must be negligible.
  edge = _log_integrand_f64(np.array([pts[0], pts[-1]]), q, sigma, alpha)
  if np.max(edge) > m + math.log(_EDGE_RATIO):
    raise OracleError(
      f"integrand not negligible at outer breakpoints ({edge} vs max {m}) for q={q}, sigma={sigma}, alpha={alpha}"
    )
  return pts, log_int


# ---------------------------------------------------------------------------
# mpmath integrand
# ---------------------------------------------------------------------------


def _h_series(u, a, c2, prec):
  """sum_{k>=2} C(alpha,k) u^k, for |u| max(alpha, 1) <= _SERIES_CUT.

  The term ratio |u (alpha - k) / (k + 1)| is <= 1e-8, so nothing cancels.
  """
  term = c2 * u * u
  total = term
  eps = mpmath.mpf(2) ** (-prec - 10)
  k = 2
  while abs(term) > eps * abs(total):
    term = term * u * (a - k) / (k + 1)
    total += term
    k += 1
    if k > 10_000:
      raise OracleError("h series did not converge")
  return total


def _exp_expm1(x):
  """(exp(x), expm1(x)) at the current precision (exp(x) - 1 loses -log2|x| bits)."""
  ctx = mpmath.mp
  with mpmath.workprec(ctx.prec + max(0, -int(ctx.mag(x))) + 10):
    ex = mpmath.exp(x)
    em = ex - 1
  return +ex, +em


def _h_direct(x, qm, pm, a, c2, am1_bits, u_est):
  """h = w^alpha - 1 - alpha u, w = (1 - q) + q e^x, u = q expm1(x), with guard bits.

  Digits lost to the subtraction are about log(1/h): h ~ C(alpha,2) u^2 for small u
  and ~ (alpha - 1) for alpha close to 1. Guard bits are given up front, everything
  (e^x, u, w) is recomputed at that precision so that w = 1 + u holds to it, and the
  loss is checked after the fact.
  """
  ctx = mpmath.mp
  guard_bits = max(0, -int(ctx.mag(c2 * u_est * u_est))) + am1_bits + 40
  for _ in range(6):
    with mpmath.workprec(ctx.prec + guard_bits):
      ex, em = _exp_expm1(x)
      u = qm * em
      # 1 + u as (1 - q) + q e^x: non-negative terms, exact even near u = -1.
      w = pm + qm * ex
      t = mpmath.exp(a * mpmath.log(w))
      au = a * u
      hv = t - 1 - au
      if hv > 0:
        scale = max(t, 1 + abs(au))
        lost_bits = int(ctx.mag(scale)) - int(ctx.mag(hv)) + 2
        if lost_bits < guard_bits - 16:
          return +hv
        guard_bits = lost_bits + 80
      else:
        guard_bits *= 2
  raise OracleError(f"could not evaluate h without cancellation (x={x})")


def _make_integrand(q, sigma, alpha, log_scale, target_dps):
  """z -> phi_sigma(z) h(z) exp(-log_scale), with a float64 cut for negligible tails.

  u = q expm1(x), x = (2z - 1) / (2 sigma^2), and 1 + u is formed as
  (1 - q) + q e^x (non-negative terms, exact even where u is close to -1).
  """
  s2 = sigma * sigma
  log_norm_f = -math.log(sigma * math.sqrt(2.0 * math.pi)) - log_scale
  cut = -(target_dps + 30) * _LN10 - 10.0
  am1_bits = int(3.33 * max(0, math.ceil(-math.log10(alpha - 1.0))))
  bound_const = math.log(2.0 + alpha) + log_norm_f
  series_cut = _SERIES_CUT / max(alpha, 1.0)
  ctx = mpmath.mp

  # Constants at generous precision: the exponents below can be ~1e10 in size, so
  # they need more than prec bits to keep their absolute error below 2^-prec.
  with mpmath.workprec(ctx.prec + 120):
    a = mpmath.mpf(alpha)
    c2 = a * (a - 1) / 2
    qm = mpmath.mpf(q)
    pm = 1 - qm  # exact: q is a double
    inv_two_s2 = 1 / (2 * mpmath.mpf(sigma) ** 2)
    log_norm = -mpmath.log(mpmath.mpf(sigma) * mpmath.sqrt(2 * mpmath.pi)) - mpmath.mpf(log_scale)
  zero = mpmath.mpf(0)

  def f(z):
    zf = float(z)
    if not math.isfinite(zf) or abs(zf) > 1e150:
      return zero
    xf = (2.0 * zf - 1.0) / (2.0 * s2)
    # Upper bound on log f: w^alpha <= e^(alpha max(0,x)), |u| <= e^max(0,x).
    if -(zf * zf) / (2.0 * s2) + alpha * max(0.0, xf) + bound_const < cut:
      return zero
    # Extra bits so that exponents of size `big` keep absolute error < 2^-prec.
    big = max(1.0, zf * zf / (2.0 * s2), alpha * abs(xf), abs(log_scale))
    prec = ctx.prec
    with mpmath.workprec(prec + int(math.log2(big)) + 8):
      x = (2 * z - 1) * inv_two_s2
      if x == 0:
        return zero
      ex, em = _exp_expm1(x)
      u = qm * em
      if abs(u) <= series_cut:
        hv = _h_series(u, a, c2, ctx.prec)
      else:
        hv = _h_direct(x, qm, pm, a, c2, am1_bits, u)
      out = mpmath.exp(log_norm - z * z * inv_two_s2) * hv
    return +out

  return f


def _quad_once(q, sigma, alpha, pts, log_scale, dps):
  with mpmath.workdps(dps):
    f = _make_integrand(q, sigma, alpha, log_scale, dps)
    points = [mpmath.ninf] + [mpmath.mpf(float(p)) for p in pts] + [mpmath.inf]
    val, err = mpmath.quad(f, points, method="tanh-sinh", error=True)
    return val, err


def _dual(pts):
  """The dual partition: midpoints of consecutive breakpoints plus both ends."""
  mids = 0.5 * (pts[:-1] + pts[1:])
  return np.concatenate([[pts[0]], mids, [pts[-1]]])


@functools.cache
def quad_diagnostics(q, sigma, alpha, dps=60):
  """Quadrature of log(A - 1) with no shortcut for q = 1, plus its self-check.

  Returns:
      dict with ``log_a_minus_1`` (mpf), ``rel_ab`` (relative difference of the two
      passes, float), ``n_breakpoints`` and ``log_scale`` (float normalisation).
  """
  q, sigma, alpha, dps = float(q), float(sigma), float(alpha), int(dps)
  _check_args(q, sigma, alpha)
  if q == 0.0:
    return {
      "log_a_minus_1": mpmath.mpf("-inf"),
      "rel_ab": 0.0,
      "n_breakpoints": 0,
      "log_scale": -math.inf,
    }
  pts, log_scale = _breakpoints(q, sigma, alpha)
  # Pass A; re-normalise if the float estimate of the scale was off (mpmath's
  # convergence test is absolute, so the integral must be O(1)).
  for _ in range(4):
    val_a, _err = _quad_once(q, sigma, alpha, pts, log_scale, dps)
    if not val_a > 0:
      raise OracleError(f"non-positive quadrature {val_a} for q={q}, sigma={sigma}, alpha={alpha}")
    corr = float(mpmath.log(val_a))
    if abs(corr) < 5.0:
      break
    log_scale += corr
  else:
    raise OracleError("normalisation did not settle")
  # Pass B: 20 more digits on the dual partition (breakpoints moved to midpoints).
  val_b, _err = _quad_once(q, sigma, alpha, _dual(pts), log_scale, dps + 20)
  with mpmath.workdps(dps + 20):
    rel = abs(val_a - val_b) / val_b
    tol = mpmath.mpf(10) ** (-(dps - _AGREE_SLACK))
    if not rel <= tol:
      raise OracleError(
        f"quadrature passes disagree (rel {mpmath.nstr(rel, 3)}) for q={q}, sigma={sigma}, alpha={alpha}"
      )
    out = mpmath.log(val_b) + log_scale
  with mpmath.workdps(dps):
    out = +out
  return {
    "log_a_minus_1": out,
    "rel_ab": float(rel),
    "n_breakpoints": int(pts.size),
    "log_scale": log_scale,
  }


# ---------------------------------------------------------------------------
# Public API (arguments are converted to Python floats, results are mpf).
# ---------------------------------------------------------------------------


@functools.cache
def _log_a_minus_1_quad(q, sigma, alpha, dps):
  _check_args(q, sigma, alpha)
  if q == 0.0:
    return mpmath.mpf("-inf")
  if q == 1.0:
    # A = exp(alpha (alpha - 1) / (2 sigma^2)) exactly (Gaussian mechanism).
    with mpmath.workdps(dps + 10):
      a = mpmath.mpf(alpha)
      s = mpmath.mpf(sigma)
      out = mpmath.log(mpmath.expm1(a * (a - 1) / (2 * s * s)))
    with mpmath.workdps(dps):
      return +out
  return quad_diagnostics(q, sigma, alpha, dps)["log_a_minus_1"]


def log_a_minus_1_quad(q, sigma, alpha, dps=60):
  """log(A_alpha - 1) of the SGM by tanh-sinh quadrature, as an mpmath mpf.

  Args:
      q: sampling rate in [0, 1].
      sigma: noise multiplier > 0.
      alpha: Renyi order > 1 (any real).
      dps: target decimal digits (the two passes agree to 10^-(dps - 15)).

  Returns:
      mpf; ``-inf`` for q = 0.

  Raises:
      OracleError: if the two quadrature passes disagree or mass may be missed.
  """
  return _log_a_minus_1_quad(float(q), float(sigma), float(alpha), int(dps))


def log_a_quad(q, sigma, alpha, dps=60):
  """log A_alpha = log1p(A_alpha - 1) by quadrature (mpf)."""
  lm1 = log_a_minus_1_quad(q, sigma, alpha, dps)
  with mpmath.workdps(dps + 10):
    out = mpmath.log1p(mpmath.exp(lm1)) if lm1 < 50 else lm1 + mpmath.log1p(mpmath.exp(-lm1))
  with mpmath.workdps(dps):
    return +out


def rdp_quad(q, sigma, alpha, dps=60):
  """Per-step RDP = log A_alpha / (alpha - 1) by quadrature (mpf)."""
  la = log_a_quad(q, sigma, alpha, dps)
  with mpmath.workdps(dps + 10):
    out = la / (mpmath.mpf(float(alpha)) - 1)
  with mpmath.workdps(dps):
    return +out


@functools.cache
def _log_a_minus_1_binomial(q, sigma, n, dps):
  if not (0.0 <= q <= 1.0):
    raise ValueError(f"q must be in [0, 1], got {q}")
  if not (sigma > 0.0 and math.isfinite(sigma)):
    raise ValueError(f"sigma must be positive and finite, got {sigma}")
  if n < 2:
    raise ValueError(f"alpha_int must be an integer >= 2, got {n}")
  if q == 0.0:
    return mpmath.mpf("-inf")
  # The weights are built by a recurrence (n multiplications), so add guard digits
  # for the accumulated rounding (about log10(3 n) digits).
  with mpmath.workdps(dps + 20 + int(math.log10(3 * n))):
    qm = mpmath.mpf(q)
    pm = 1 - qm  # exact: q is a double
    two_s2 = 2 * mpmath.mpf(sigma) ** 2
    if pm == 0:
      # q = 1: only k = n survives.
      total = mpmath.expm1((n * n - n) / two_s2)
    else:
      ratio = qm / pm
      # weight_k = C(n,k) q^k (1-q)^(n-k), weight_{k+1} = weight_k (n-k)/(k+1) q/(1-q).
      weight = n * (n - 1) // 2 * qm * qm * pm ** (n - 2)
      total = mpmath.mpf(0)
      for k in range(2, n + 1):
        # All terms are >= 0: no cancellation.
        total += weight * mpmath.expm1((k * k - k) / two_s2)
        weight = weight * (n - k) / (k + 1) * ratio
    out = mpmath.log(total)
  with mpmath.workdps(dps):
    return +out


def log_a_minus_1_binomial(q, sigma, alpha_int, dps=60):
  """log(A_alpha - 1) for integer alpha >= 2 by the exact non-negative binomial sum (mpf)."""
  if float(alpha_int) != int(alpha_int):
    raise ValueError(f"alpha_int must be an integer, got {alpha_int}")
  return _log_a_minus_1_binomial(float(q), float(sigma), int(alpha_int), int(dps))


def log_a_binomial(q, sigma, alpha_int, dps=60):
  """log A_alpha for integer alpha by the exact binomial sum (mpf)."""
  lm1 = log_a_minus_1_binomial(q, sigma, alpha_int, dps)
  with mpmath.workdps(dps + 10):
    out = mpmath.log1p(mpmath.exp(lm1)) if lm1 < 50 else lm1 + mpmath.log1p(mpmath.exp(-lm1))
  with mpmath.workdps(dps):
    return +out


def rdp_binomial(q, sigma, alpha_int, dps=60):
  """Per-step RDP for integer alpha by the exact binomial sum (mpf)."""
  la = log_a_binomial(q, sigma, alpha_int, dps)
  with mpmath.workdps(dps + 10):
    out = la / (int(alpha_int) - 1)
  with mpmath.workdps(dps):
    return +out
