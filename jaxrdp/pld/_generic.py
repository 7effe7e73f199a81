"""The tight accountant for any mechanism with a discretized privacy-loss distribution.

Events the Gaussian engine (``_driver``) composes go there; an event tree with any
other mechanism (Laplace, randomized response, (eps, delta)-DP, the discrete
Laplace, mixtures of Gaussians, the truncated subsampled Gaussian, ...) is
composed here, its Gaussian parts included. Per adjacency direction (remove:
``(M(D), M(D'))``; add: the reverse), each step's privacy-loss distribution is
discretized on the grid ``k h`` from above and from below (``_single_plds``);
``T`` repetitions are composed by squaring and the steps by linear convolution
(an FFT long enough that nothing wraps around). Reading ``delta(eps) = p_inf +
sum_{s > eps} p_s (1 - e^{eps - s})`` (Sommer, Meiser, Mohammadi 2019,
arXiv:1807.10173) from the upper (lower) PMF gives an upper (lower) bound of the
true delta, after adding (subtracting) the bounds below; the reported value is the
maximum over the two directions (composition within each direction, never a
per-step maximum: Lebeda, Regehr, Kamath, Steinke 2024, arXiv:2405.20769). Above the
array's top loss the delta is the ``+inf`` mass alone (the composed support lies
below it), so a bounded loss keeps a finite epsilon below the round-off floor.

Tilting: the arrays composed are ``p_s e^{lam s}`` normalized, with the log of the
normalizer carried (``lam >= 0``, one per direction: the saddle point of the
cumulant of the discretized steps where the saddle-point approximation of the delta
at ``eps = K'(lam)`` is the target delta, or the Chernoff point of ``K(lam) - lam
eps`` for a delta query), so the masses where the delta is read are of order one
however small the delta. An L1 bound ``r`` on the tilted arrays' error bounds the
delta's at ``eps`` by ``r exp(logc - lam eps)`` (every loss read is above ``eps``):
round-off is then relative to the delta, not an absolute mass amplified by the
``T`` copies composed after it. ``lam = 0`` (no tilt) where a part's round-off has
no known location (``BracketedAtoms``) or the target lies beyond every saddle point
(the answer at the top of a lattice support). The ``+inf`` mass and the coupling's
moved mass stay in true units.

Tails, per product of ``n`` of the direction's ``N`` steps (budgets scaled by ``n /
N``, since mass trimmed early reappears in the ``N / n`` copies composed after it):
the upper PMF's top tail goes to ``+inf`` (true mass at most ``1e-7 delta n / N``
for an epsilon, ``min(1e-15, 1e-9 C) n / N`` for a delta, ``C`` the Chernoff bound
at ``eps``), its bottom tail is dropped and its tilted mass added to the round-off
bound (``(1 - e^{eps - s})_+ <= e^{lam (s - eps)}``, so its share of any later
delta is at most that mass times the same factor); the lower PMF's bottom tail is
dropped and its top tail moved to its last point. The tilted budgets (about ``1e-7``
of the delta read, through that factor, for an epsilon; ``1e-15`` absolute for a
delta) and the true one make trimming cost about ``1e-7 log2(T)`` of delta.

Event types beyond these register a rule (:func:`register_generic_rule`) that gives
their single-step pairs, in modules that ``_rules`` imports (callers read the path from
there, so that every rule is loaded); random allocation (``_allocation_rule``) does, with parts
known through a dominating and a dominated discrete pair (``BracketedAtoms``), for
which the coupling lower bound below is not used (their upper PMF is not the
connect-the-dots image of the true loss).

Round-off: a linear convolution through the FFT is within ``16 u log2(N)
sqrt(N) (|a|_1 |b|_2 + |a|_2 |b|_1)`` of exact in L1 (stage-wise error of the
transform, Higham 2002, Sec. 24.1), and convolving with a (tilted) probability
vector does not grow an L1 error; a single-step mass, a difference of two tail
probabilities, carries ``4 u`` times the larger, bounded per point and tilted with
the weight of the highest point its mass can reach, and the tilting itself ``4
u`` of each tilted mass. The reading weights are in ``[0, 1]``, so the scaled L1
bound is a bound on delta. Not in the certificate: the rounding inside the
connect-the-dots split of a cell (relative ``u / h`` of its mass, moved between
two neighbouring points), and that of the final sums of a read.

Accuracy: connect-the-dots errs by about ``T h^2 / 8`` in epsilon after ``T``
steps; the certificate's own terms, about ``1e-7`` of delta, add a few ``1e-7`` of
epsilon (the fixed-size MNIST run, 14,063 steps: 7e-7 above the Laplace-inversion
oracle, and the bound falls as ``h`` shrinks). The lower bound is the larger of
the optimistic PMF's (cells at their lower ends: up to ``T h`` below) and the
upper PMF's shifted by a Hoeffding bound on the connect-the-dots moves (about ``h
sqrt(T log(1 / eta) / 2)`` below, with ``eta = 1e-3 delta``), less its scaled
round-off bound and the mass moved to ``+inf``. The step ``h`` is at most ``1e-4`` (``rtol``-driven for
many steps), widened so the composed window fits ``max_grid_size`` points, and
refined once (up to 20 times finer) where the bracket is wider than ``1e-4``
relative: in the direction of the answer, and in another only where its upper bound
is above the lower bound so far (it cannot raise it otherwise); for steps known
through bracketing pairs (random allocation) the refinement recomposes the lower
PMFs, and the upper PMF of the answer's direction on a grid only four times finer
(its error is second order in ``h``).
"""

from __future__ import annotations

import math

import numpy as np

from jaxrdp._core.numerics import UNIT_ROUNDOFF

from ..events import _mechanism_events as M
from ..events._events import (
  Composed,
  Gaussian,
  Laplace,
  NoOp,
  PoissonSampled,
  RandomizedResponse,
  SelfComposed,
)
from ._single_plds import Atoms, LocationMixture, discretize

__all__ = [
  "generic_unsupported",
  "generic_epsilon",
  "generic_delta",
  "event_steps",
  "register_generic_rule",
]

_TINY = 1e-280  # tilted masses below this are zeroed (subnormal arithmetic is slow)
_MAX_COUNT = 1e7
# Tail mass moved off the window per product, for a delta read (absolute), and per unit
# of the target delta for an epsilon read.
_TAIL_DELTA = 1e-15
_TAIL_PER_DELTA = 1e-7
# Relative width of the bracket below which no finer grid is tried.
_BRACKET = 1e-4
_UPPER_REFINE = 0.25

_NO_LOSS = ((1.0, Atoms([0.0], [1.0])),)
_INF_LOSS = ((1.0, Atoms([np.inf], [1.0])),)


# event type -> (steps(event) -> [(parts by direction, count multiplier)], condition)
_RULES: dict = {}


def register_generic_rule(event_type: type, *, condition=None):
  """Decorator: ``steps(event)`` gives the single-step pairs of a concrete ``event_type``.

  ``steps(event)`` returns ``[(parts by direction, count), ...]``: ``event`` is the
  composition of each ``parts`` (``{"remove": ((weight, part), ...), "add": ...}``) run
  ``count`` times. ``condition(event)`` returns ``None`` if the rule applies to this
  event's structure (its children's types), else a phrase naming what it does not
  cover; :func:`generic_unsupported` reads both, so the accountant's refusals follow the
  rules that exist.

  A pair that dominates the mechanism at every step but that no dataset pair need
  realize over many steps (an envelope) adds ``"realized": {"remove": parts, "add":
  parts}`` to its parts: pairs that a dataset pair does realize at every step, from
  which the lower bound is read, so that it bounds the true epsilon of the run rather
  than the envelope's. A side may have no part in an entry: parts whose two directions
  are ``_NO_LOSS`` (the object itself) are dropped, so an entry with ``_NO_LOSS`` parts
  and realized pairs adds to the lower bound only, and one whose realized pairs are
  ``_NO_LOSS`` to the upper bound only (the realized run then need not have the
  envelope's entries).
  """

  def wrap(steps):
    _RULES[event_type] = (steps, condition)
    return steps

  return wrap


def _binom_sf(k, n, p):
  """``P(Binomial(n, p) > k)`` in float64 (log-space terms, summed from the smaller tail)."""
  if k < 0:
    return 1.0
  if k >= n:
    return 0.0
  j = np.arange(0, n + 1, dtype=np.float64)
  lg = math.lgamma(n + 1) - np.array([math.lgamma(v + 1) + math.lgamma(n - v + 1) for v in j])
  with np.errstate(divide="ignore"):
    logt = lg + j * math.log(p) + (n - j) * np.log1p(-p)
  t = np.exp(logt)
  return float(min(1.0, t[int(k) + 1 :].sum()))


def _symmetric(parts):
  return {"remove": parts, "add": parts}


def _gauss_pairs(sigma, q, sens=1.0):
  """Both directions of a Poisson-subsampled Gaussian (``q = 1``: the Gaussian)."""
  if q <= 0 or sens == 0 or sigma == np.inf:
    return _symmetric(_NO_LOSS)
  if sigma == 0:
    return _symmetric(_INF_LOSS)
  if q >= 1:
    return _symmetric(((1.0, LocationMixture("gauss", sigma, [(1.0, sens)], [(1.0, 0.0)])),))
  remove = LocationMixture("gauss", sigma, [(1 - q, 0.0), (q, sens)], [(1.0, 0.0)])
  add = LocationMixture("gauss", sigma, [(1.0, 0.0)], [(1 - q, 0.0), (q, -sens)])
  return {"remove": ((1.0, remove),), "add": ((1.0, add),)}


def _laplace_pairs(scale, q):
  if q <= 0 or scale == np.inf:
    return _symmetric(_NO_LOSS)
  if scale == 0:
    return _symmetric(_INF_LOSS)
  if q >= 1:
    return _symmetric(((1.0, LocationMixture("laplace", scale, [(1.0, 1.0)], [(1.0, 0.0)])),))
  remove = LocationMixture("laplace", scale, [(1 - q, 0.0), (q, 1.0)], [(1.0, 0.0)])
  add = LocationMixture("laplace", scale, [(1.0, 0.0)], [(1 - q, 0.0), (q, -1.0)])
  return {"remove": ((1.0, remove),), "add": ((1.0, add),)}


def _pure_dp(eps, delta=0.0):
  """The dominating pair of every ``(eps, delta)``-DP mechanism (Kairouz, Oh, Viswanath 2015)."""
  if eps == np.inf:
    return _symmetric(_INF_LOSS)
  a = (1.0 - delta) / (1.0 + math.exp(-eps))
  b = (1.0 - delta) / (1.0 + math.exp(eps))
  return _symmetric(((1.0, Atoms([np.inf, eps, -eps], [delta, a, b])),))


def _kary_rr(noise, k, relation):
  k = int(round(k))
  if k <= 1:
    return _symmetric(_NO_LOSS)
  if noise <= 0:
    return _symmetric(_INF_LOSS)
  top, rest = 1.0 - noise + noise / k, noise / k
  if relation == "replace_one":
    ell = math.log(top) - math.log(rest)
    return _symmetric(((1.0, Atoms([ell, -ell, 0.0], [top, rest, (k - 2) * rest])),))
  # replace-special: the true bucket's law against the uniform law, both ways.
  a, b = math.log(top * k), math.log(noise)
  fwd = Atoms([a, b], [top, (k - 1) * rest])
  back = Atoms([-a, -b], [1.0 / k, (k - 1) / k])
  return {"remove": ((1.0, fwd),), "add": ((1.0, back),)}


def _binary_rr(p):
  p = max(p, 1.0 - p)  # answering the flip with probability p is the same release
  if p >= 1:
    return _symmetric(_INF_LOSS)
  ell = math.log(p) - math.log1p(-p)
  return _symmetric(((1.0, Atoms([ell, -ell], [p, 1.0 - p])),))


def _discrete_laplace(a, sens):
  sens = int(round(sens))
  if sens == 0 or a == 0:
    return _symmetric(_NO_LOSS)
  if a == np.inf:
    return _symmetric(_INF_LOSS)
  # P = DLap(a) shifted by sens against DLap(a): the loss a(|x| - |x - sens|).
  x = np.arange(1, sens, dtype=np.float64)
  norm = -math.expm1(-a) / (1.0 + math.exp(-a))
  losses = np.concatenate([[a * sens, -a * sens], a * (2.0 * x - sens)])
  # P-masses of x >= sens (loss a sens), x <= 0 (loss -a sens), 0 < x < sens.
  masses = np.concatenate(
    [
      [1.0 / (1.0 + math.exp(-a)), math.exp(-a * sens) / (1.0 + math.exp(-a))],
      norm * np.exp(-a * np.abs(x - sens)),
    ]
  )
  return _symmetric(((1.0, Atoms(losses, masses)),))


def _mixture_of_gaussians(sigma, sens, probs):
  pairs = [(float(p), float(c)) for p, c in zip(probs, sens) if float(p) > 0]
  if all(c == 0 for _, c in pairs) or sigma == np.inf:
    return _symmetric(_NO_LOSS)
  if sigma == 0:
    return _symmetric(_INF_LOSS)
  remove = LocationMixture("gauss", sigma, pairs, [(1.0, 0.0)])
  add = LocationMixture("gauss", sigma, [(1.0, 0.0)], [(p, -c) for p, c in pairs])
  return {"remove": ((1.0, remove),), "add": ((1.0, add),)}


def _truncated_subsampled_gaussian(n, q, batch, sigma):
  """dp_accounting's construction (Ganesh et al. 2025, arXiv:2508.15089, Sec. 4.3)."""
  n, batch = int(round(n)), int(round(batch))
  if q <= 0 or batch == 0 or n == 0:
    return _symmetric(_NO_LOSS)
  base = _gauss_pairs(sigma, q)
  t = _binom_sf(batch - 1, n - 1, q)  # truncation, given that the record is sampled
  if t <= 0:
    return base
  q2 = min(1.0, _binom_sf(batch, n, q) * batch / t / n)
  if sigma == 0:
    return _symmetric(_INF_LOSS)
  replace = LocationMixture(
    "gauss", sigma / 2, [(1 - q2, 0.0), (q2, 1.0)], [(1 - q2, 0.0), (q2, -1.0)]
  )
  return {d: ((1.0 - t, base[d][0][1]), (t, replace)) for d in ("remove", "add")}


def _leaf_steps(event):
  """Both directions' parts of a single (non-composed) concrete event."""
  f = lambda v: float(np.asarray(v))  # noqa: E731
  if isinstance(event, Gaussian):
    return _gauss_pairs(f(event.sigma), 1.0)
  if isinstance(event, Laplace):
    return _laplace_pairs(f(event.scale), 1.0)
  if isinstance(event, RandomizedResponse):
    return _binary_rr(f(event.p))
  if isinstance(event, M.KaryRandomizedResponse):
    return _kary_rr(f(event.noise), f(event.buckets), event.relation)
  if isinstance(event, M.EpsilonDelta):
    return _pure_dp(f(event.epsilon), f(event.delta))
  if isinstance(event, (M.ExponentialMechanism, M.PermuteAndFlip)):
    return _pure_dp(f(event.epsilon))
  if isinstance(event, M.DiscreteLaplace):
    return _discrete_laplace(f(event.noise_parameter), f(event.sensitivity))
  if isinstance(event, M.NonPrivate):
    return _symmetric(_INF_LOSS)
  if isinstance(event, M.MixtureOfGaussians):
    return _mixture_of_gaussians(
      f(event.sigma), [f(c) for c in event.sensitivities], [f(p) for p in event.probs]
    )
  if isinstance(event, M.TruncatedSubsampledGaussian):
    return _truncated_subsampled_gaussian(
      f(event.dataset_size), f(event.q), f(event.batch_size), f(event.sigma)
    )
  if isinstance(event, PoissonSampled):
    q, inner = f(event.q), event.inner
    if isinstance(inner, Gaussian):
      return _gauss_pairs(f(inner.sigma), q)
    if isinstance(inner, Laplace):
      return _laplace_pairs(f(inner.scale), q)
    # Gaussians composed on one sample: one Gaussian at (sum 1 / s_i^2)^(-1/2).
    prec = sum(_gauss_precision(e) for e in _flatten(inner))
    return _gauss_pairs(np.inf if prec == 0 else 1.0 / math.sqrt(prec), q)
  raise NotImplementedError(type(event).__name__)


def _gauss_precision(ev_count):
  ev, count = ev_count
  if isinstance(ev, NoOp):
    return 0.0
  s = float(np.asarray(ev.sigma))
  return np.inf if s == 0 else count / s**2


def _flatten(event, count=1.0):
  """``[(leaf event, count)]`` of a composition tree."""
  if isinstance(event, SelfComposed):
    return _flatten(event.event, count * float(np.asarray(event.count)))
  if isinstance(event, Composed):
    return [x for e in event.events for x in _flatten(e, count)]
  return [(event, count)]


_LEAVES = (
  Gaussian,
  Laplace,
  RandomizedResponse,
  NoOp,
  M.KaryRandomizedResponse,
  M.EpsilonDelta,
  M.ExponentialMechanism,
  M.PermuteAndFlip,
  M.DiscreteLaplace,
  M.NonPrivate,
  M.MixtureOfGaussians,
  M.TruncatedSubsampledGaussian,
)


def generic_unsupported(event) -> str | None:
  """``None`` if this path accounts ``event``, else the part it cannot (a phrase)."""
  for leaf, _ in _flatten_types(event):
    rule = _RULES.get(type(leaf))
    if rule is not None:
      why = rule[1](leaf) if rule[1] is not None else None
      if why is not None:
        return why
      continue
    if isinstance(leaf, PoissonSampled):
      if leaf.relation != "add_remove":
        return (
          f"PoissonSampled events under relation={leaf.relation!r} (their pairs are built "
          "under add/remove only)"
        )
      inner = leaf.inner
      if isinstance(inner, (Gaussian, Laplace)):
        continue
      if all(isinstance(e, (Gaussian, NoOp)) for e, _ in _flatten_types(inner)):
        continue
      return (
        f"PoissonSampled({type(inner).__name__}) events (privacy-loss distributions are "
        "implemented for subsampled Gaussian and Laplace mechanisms only)"
      )
    if not isinstance(leaf, _LEAVES):
      return f"{type(leaf).__name__} events"
  return None


def _flatten_types(event):
  if isinstance(event, SelfComposed):
    return _flatten_types(event.event)
  if isinstance(event, Composed):
    return [x for e in event.events for x in _flatten_types(e)]
  return [(event, 1)]


def event_steps(event):
  """``[(parts by direction, count)]`` of a concrete event tree (counts of 0 dropped)."""
  out = []
  for leaf, count in _flatten(event):
    if count != round(count) or count > _MAX_COUNT:
      raise ValueError(
        f"SelfComposed counts must be whole numbers in [0, {_MAX_COUNT:g}] for the tight "
        f"accountant, got {count!r}"
      )
    if isinstance(leaf, NoOp) or count == 0:
      continue
    rule = _RULES.get(type(leaf))
    if rule is None:
      out.append((_leaf_steps(leaf), count))
      continue
    for parts, mult in rule[0](leaf):
      total = count * mult
      if total > _MAX_COUNT:
        raise ValueError(
          f"{type(leaf).__name__} events compose at most {_MAX_COUNT:g} steps in the tight "
          f"accountant, got {total:g}"
        )
      if total > 0:
        out.append((parts, total))
  return out


def _coupled(steps):
  """Whether every part's upper PMF is the connect-the-dots image of its true loss."""
  return all(
    getattr(part, "coupled", True)
    for parts, _ in steps
    for d in ("remove", "add")
    for _, part in parts[d]
  )


# ---------------------------------------------------------------- composition


class _Pmf:
  """Tilted masses ``p_j`` at losses ``s_j = (k0 + j) h``: the true mass at ``s_j`` is
  ``p_j exp(logc - lam s_j)`` (``lam >= 0``). ``inf``: the true mass at ``+inf``;
  ``err``: a bound on the L1 round-off of the tilted masses; ``moved``: a bound on the
  true probability that some step's loss was moved to ``+inf`` (or by a single step's
  discretization beyond its cell; for the coupling lower bound); ``n``: the number of
  single steps composed."""

  __slots__ = ("k0", "p", "logc", "lam", "h", "inf", "err", "moved", "n")

  def __init__(self, k0, p, logc, lam, h, inf, err, moved, n):
    self.k0, self.p, self.logc, self.lam, self.h = k0, p, logc, lam, h
    self.inf, self.err, self.moved, self.n = inf, err, moved, n

  def losses(self):
    return self.h * (self.k0 + np.arange(self.p.size))

  def scale(self, eps):
    """``exp(logc - lam eps)``: the true mass per unit of tilted mass at ``eps``, which
    bounds it at every loss above ``eps`` (``inf`` where it overflows)."""
    a = self.logc - self.lam * eps
    return math.inf if a > 700.0 else math.exp(a)

  def true(self, sel):
    """True masses at the selected points (from the logarithms: no overflow)."""
    s = self.losses()[sel]
    with np.errstate(divide="ignore"):
      return np.exp(np.log(self.p[sel]) + (self.logc - self.lam * s))


def _tilted(k0, masses, inf, mass_err, moved, lam, h, upper):
  """One step's PMF (true masses) tilted by ``e^{lam s}`` and normalized.

  A mass whose tilted value underflows is moved to ``+inf`` (upper) or dropped
  (lower); the per-point round-off bounds are tilted with their points' weights.
  """
  s = h * (k0 + np.arange(masses.size))
  with np.errstate(divide="ignore"):
    lw = np.log(masses) + lam * s
  top = float(lw.max()) if masses.size else -math.inf
  if not math.isfinite(top):
    with np.errstate(over="ignore"):
      err = float(np.sum(mass_err * np.exp(lam * s)))
    return _Pmf(k0, np.zeros_like(masses), 0.0, lam, h, inf, err, moved, 1)
  logz = top + math.log(float(np.sum(np.exp(lw - top))))
  p = np.exp(lw - logz)
  p[p < _TINY] = 0.0
  lost = (p == 0.0) & (masses > 0.0)
  if lost.any():
    gone = float(masses[lost].sum())
    if upper:
      inf, moved = inf + gone, moved + gone
  with np.errstate(over="ignore"):
    err = float(np.sum(mass_err * np.exp(lam * s - logz)))
  # exp of an argument with an absolute error of a few u times its terms' sizes.
  fin = p > 0
  size = np.abs(lw[fin] - lam * s[fin]) + np.abs(lam * s[fin]) + abs(logz) + 2.0
  err += 2.0 * UNIT_ROUNDOFF * float(np.sum(p[fin] * size))
  return _Pmf(k0, p, logz, lam, h, inf, err, moved, 1)


def _conv(a: _Pmf, b: _Pmf) -> _Pmf:
  n = a.p.size + b.p.size - 1
  if min(a.p.size, b.p.size) <= 64:
    p = np.convolve(a.p, b.p)
    rnd = 2.0 * min(a.p.size, b.p.size) * UNIT_ROUNDOFF * a.p.sum() * b.p.sum()
  else:
    size = 1 << (n - 1).bit_length()
    p = np.fft.irfft(np.fft.rfft(a.p, size) * np.fft.rfft(b.p, size), size)[:n]
    n1a, n1b = np.abs(a.p).sum(), np.abs(b.p).sum()
    n2a, n2b = np.linalg.norm(a.p), np.linalg.norm(b.p)
    rnd = 16.0 * UNIT_ROUNDOFF * math.log2(size) * math.sqrt(size) * (n1a * n2b + n2a * n1b)
  # Clipping at 0 never moves a mass away from the (>= 0) truth; masses below _TINY
  # (tilted arrays reach subnormals, slow to compute with) are dropped, within err.
  p[p < _TINY] = 0.0
  inf = 1.0 - (1.0 - a.inf) * (1.0 - b.inf)
  sa, sb = a.p.sum(), b.p.sum()
  err = a.err * (sb + b.err) + b.err * (sa + a.err) + rnd + _TINY * n
  return _Pmf(a.k0 + b.k0, p, a.logc + b.logc, a.lam, a.h, inf, err, a.moved + b.moved, a.n + b.n)


def _trim(x: _Pmf, upper: bool, budget) -> _Pmf:
  """Move tails off the array.

  ``budget(n) = (true, tilted)``: the most true mass moved to ``+inf``, and tilted
  mass dropped or moved inside the window, at a product of ``n`` steps. Upper: the
  top tail goes to ``+inf`` (its true mass counted), the bottom tail is dropped and
  its tilted mass added to ``err`` (by ``(1 - e^{eps - s})_+ <= e^{lam (s - eps)}``
  its share of any later delta at ``eps`` is at most that mass times
  ``exp(logc - lam eps)``, the factor the round-off is read with). Lower: the bottom
  tail is dropped, the top tail moved to the highest kept point (by at most its true
  mass, or its tilted mass scaled as above, what that takes off a later delta).
  """
  p, lh = x.p, x.lam * x.h
  tail_true, tail_t = budget(x.n)
  c = np.cumsum(p)
  lo = int(np.searchsorted(c, tail_t, side="right"))
  hi, above = _true_top(x, tail_true)
  if not upper:  # either budget bounds what moving the top tail down takes off a delta
    hi = min(hi, p.size - int(np.searchsorted(np.cumsum(p[::-1]), tail_t, side="right")))
  lo = min(lo, max(hi - 1, 0))
  if lo == 0 and hi >= p.size:
    return x
  hi = max(hi, lo + 1)
  body = p[lo:hi].copy()
  inf, moved, err = x.inf, x.moved, x.err
  if upper:
    err += float(c[lo - 1]) if lo > 0 else 0.0
    if hi < p.size:
      inf, moved = inf + above, moved + above
  else:
    body[-1] += float(np.sum(p[hi:] * np.exp(-lh * np.arange(1, p.size - hi + 1))))
  return _Pmf(x.k0 + lo, body, x.logc, x.lam, x.h, inf, err, moved, x.n)


def _true_top(x: _Pmf, tail):
  """``(i, m)``: the lowest index ``i`` with true mass ``m <= tail`` at and above it
  (true masses computed from the top, in blocks, as far as needed)."""
  n, lh = x.p.size, x.lam * x.h
  m = min(n, 1024)
  while True:
    j = np.arange(n - m, n)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
      t = np.exp(np.log(x.p[n - m :]) + (x.logc - lh * (x.k0 + j)))
      r = np.cumsum(t[::-1])
    k = int(np.searchsorted(r, tail, side="right"))
    if k < m or m == n:
      return n - k, float(r[k - 1]) if k > 0 else 0.0
    m = min(n, 8 * m)


def _power(x: _Pmf, t: int, upper: bool, budget) -> _Pmf:
  result = None
  base = x
  while t > 0:
    if t & 1:
      result = base if result is None else _trim(_conv(result, base), upper, budget)
    t >>= 1
    if t:
      base = _trim(_conv(base, base), upper, budget)
  return result


def _singles(steps, direction, h, sides=(True, False)):
  return [(discretize(parts[direction], h, sides), int(round(count))) for parts, count in steps]


def _log_masses(singles, h):
  """``[(losses, log masses, count)]`` of the upper PMFs' nonzero masses."""
  out = []
  for (k0, up, *_), count in singles:
    nz = np.nonzero(up)[0]
    out.append((h * (k0 + nz), np.log(up[nz]), count))
  return out


def _cumulant(logs, lam):
  """``(K, K', K'')`` at ``lam`` of the composed upper PMFs' finite parts (their
  log-MGF; ``logs`` from :func:`_log_masses`)."""
  k = dk = d2k = 0.0
  for s, logm, count in logs:
    if s.size == 0:
      continue
    lw = logm + lam * s
    top = float(lw.max())
    if not math.isfinite(top):
      continue
    w = np.exp(lw - top)
    z = float(w.sum())
    mean = float(np.sum(w * s)) / z
    k += count * (top + math.log(z))
    dk += count * mean
    d2k += count * float(np.sum(w * (s - mean) ** 2)) / z
  return k, dk, d2k


def _tilt(singles, h, query, x):
  """``(lam, log_c)``: the tilt of one direction's composition, and ``log_c = K(lam) -
  lam eps`` (``eps`` the query's or the estimated answer), the log of the true mass
  per unit of tilted mass at the read.

  For a delta at ``eps = x``: the minimizer over ``lam >= 0`` of ``K(lam) - lam x``
  (Chernoff); for an epsilon at ``delta = x``: the saddle point ``lam`` whose
  saddle-point approximation ``e^{K - lam K'} / (lam (1 + lam) sqrt(2 pi K''))`` of
  the delta at ``eps = K'(lam)`` equals ``x``. Capped so that no single step's tilted
  masses span more than ``e^600``; where no such point exists below the cap (the
  answer near the top of the support) untilted. Any ``lam >= 0`` gives certified
  bounds; this one makes the round-off and the trimmed tails relative to the delta
  read.
  """
  span = 0.0
  for (_, up, *_), _ in singles:
    nz = np.nonzero(up)[0]
    if nz.size:
      span = max(span, h * float(nz[-1] - nz[0]))
  lam_max = min(600.0 / span, 1e3) if span > 0 else 0.0
  logs = _log_masses(singles, h)
  untilted = 0.0, _cumulant(logs, 0.0)[0]
  if lam_max <= 0:
    return untilted

  if query == "delta":

    def f(lam):  # increasing in lam
      return _cumulant(logs, lam)[1] - x

    if f(0.0) >= 0:
      return untilted
  else:
    log_d = math.log(x)

    def f(lam):  # increasing in lam (about)
      k, dk, d2k = _cumulant(logs, lam)
      return log_d - (
        k - lam * dk - math.log(lam * (1.0 + lam) * math.sqrt(2 * math.pi * max(d2k, 1e-300)))
      )

  if f(lam_max) <= 0:
    return untilted
  a, b = 0.0, lam_max
  for _ in range(60):
    m = 0.5 * (a + b) if a > 0 or b < 1e-3 else math.sqrt(b * 1e-6)
    if f(m) < 0:
      a = m
    else:
      b = m
    if b - a <= 1e-3 * b:
      break
  k, dk, _ = _cumulant(logs, b)
  return b, k - b * (x if query == "delta" else dk)


def _compose(singles, lam, h, budget, sides=(True, False)):
  """The composed upper and lower PMFs of one direction, tilted by ``lam`` (``None`` for
  a side not in ``sides``: ``True`` the upper, ``False`` the lower)."""
  out = []
  for upper in (True, False):
    if upper not in sides:
      out.append(None)
      continue
    total = None
    for (k0, up, low, infs, mass_err, moved), count in singles:
      one = _tilted(
        k0, up if upper else low, infs[0 if upper else 1], mass_err, moved, lam, h, upper
      )
      one = _power(_trim(one, upper, budget), count, upper, budget)
      total = one if total is None else _trim(_conv(total, one), upper, budget)
    out.append(total)
  return tuple(out)


def _plan_h(steps, rtol, max_grid_size):
  """The grid step: ``rtol``-driven, widened until the composed window fits the grid."""
  mean = var = width = 0.0
  total = 0.0
  for parts, count in steps:
    for direction in ("remove", "add"):
      m1 = m2 = 0.0
      lo, hi = math.inf, -math.inf
      for w, part in parts[direction]:
        a, b = part.moments()
        m1, m2 = m1 + w * a, m2 + w * b
        r = part.range()
        lo, hi = min(lo, r[0]), max(hi, r[1])
      if direction == "remove":
        mean += count * m1
        var += count * max(m2 - m1 * m1, 0.0)
        width += count * (hi - lo)
        total += count
  span = min(width, 2.0 * (4.0 + 12.0 * math.sqrt(var)))
  floor = max(1.5 * span / max_grid_size, 1e-7)
  h = min(1e-4, math.sqrt(8.0 * rtol / max(total, 1.0)))
  return max(h, floor), floor


def _read_delta(x: _Pmf, eps, h, cache=None):
  """``inf + sum_{s > eps} p_s (1 - e^{eps - s})`` in true masses (``cache``: the
  losses and true masses of ``x``, from :func:`_true_masses`)."""
  s, t = cache if cache is not None else _true_masses(x)
  i = int(np.searchsorted(s, eps, side="right"))
  return x.inf + float(np.sum(t[i:] * -np.expm1(eps - s[i:])))


def _true_masses(x: _Pmf):
  """The losses of ``x`` and its true masses (``inf`` where they overflow, far below
  any loss read)."""
  with np.errstate(over="ignore"):
    return x.losses(), x.true(slice(None))


def _top(x: _Pmf, h):
  """The highest loss of the array: the composed support lies below it, so the delta
  there is the ``+inf`` mass alone, whatever the round-off in the array."""
  return h * (x.k0 + x.p.size - 1)


def _inf_mass(x: _Pmf):
  """``x.inf`` rounded up (it is a product of a few float64 terms)."""
  return x.inf * (1.0 + 1e-12)


def _read_epsilon(x: _Pmf, delta, h, c0, c1, upper):
  """Smallest ``eps >= 0`` with ``read(eps) + extra(eps) <= delta`` (``inf`` if none).

  ``extra(eps) = c0 + c1 exp(logc - lam eps)`` (tilted bounds scaled to true mass
  above ``eps``), both ``>= 0`` for an upper bound (then ``extra`` decreases) or both
  ``<= 0`` for a lower bound (then it increases). Between grid points the answer is
  solved with ``extra`` at the interval's left end, its value furthest from 0 there
  (the conservative one for both). For an upper bound the answer is at most the
  array's top when the ``+inf`` mass alone is within ``delta`` (the round-off has
  nothing to act on above the support).
  """

  def extra(e):
    return c0 + (c1 * x.scale(e) if c1 != 0 else 0.0)

  top = _top(x, h)
  if x.inf + extra(max(top, 0.0)) > delta:
    if upper and _inf_mass(x) <= delta:
      return max(top, 0.0)
    return math.inf
  cache = _true_masses(x)
  s = cache[0]
  # Where the bound read + extra is not monotone (a lower bound: extra rises to c0)
  # any grid point k after one with read + extra > delta is valid, so the search
  # starts where |extra| is within 1e-3 delta of c0 (or at 0 if the read there is
  # not above delta).
  e0 = 0.0
  if not upper and c1 != 0 and x.lam > 0:
    e0 = max(0.0, (x.logc - math.log(1e-3 * delta / -c1)) / x.lam)
    if e0 >= top or _read_delta(x, e0, h, cache) + extra(e0) <= delta:
      e0 = 0.0
  if _read_delta(x, e0, h, cache) + extra(e0) <= delta:
    return e0
  lo_i = int(np.searchsorted(s, e0, side="right"))  # first grid point above e0
  hi_i = x.p.size - 1
  # find the first k >= lo_i with read(s_k) + extra(s_k) <= delta (true at the top).
  a, b = lo_i, hi_i
  while a < b:
    mid = (a + b) // 2
    if _read_delta(x, s[mid], h, cache) + extra(s[mid]) <= delta:
      b = mid
    else:
      a = mid + 1
  k = a
  left = s[k - 1] if k - 1 >= lo_i else e0
  # On (left, s_k]: read = inf + A - e^eps B over atoms j >= k.
  pa = cache[1][k:]
  big_a = float(pa.sum())
  big_b = float(np.sum(pa * np.exp(s[k] - s[k:])))  # B e^{s_k}
  num = x.inf + extra(left) + big_a - delta
  if not math.isfinite(num) or num <= 0 or big_b <= 0:
    return float(s[k])
  eps = float(min(max(s[k] + math.log(num / big_b), left), s[k]))
  if upper and _inf_mass(x) <= delta:
    eps = min(eps, max(top, 0.0))
  return eps


def _directions(steps):
  asym = any(parts["remove"] is not parts["add"] for parts, _ in steps)
  return ("remove", "add") if asym else ("remove",)


def _composed(steps, h, query, x, directions=None, sides=(True, False), tilt=True):
  """Per direction (of ``directions``, default all), the composed ``(upper, lower)`` PMFs
  (of ``sides``; ``None`` for the others), tilted for ``query`` at ``x``.

  Trim budgets, per product of ``n`` of the direction's ``N`` steps (so that mass
  trimmed early, and amplified by the ``N / n`` copies composed after it, stays
  within the budget): ``n / N`` of ``1e-7 delta`` (an epsilon) or of ``min(1e-15,
  1e-9 C)`` (a delta; ``C`` the Chernoff bound at ``eps``) in true mass to ``+inf``,
  and in tilted mass ``1e-7 delta / C`` or ``min(1e-7, 1e-15 / C)``, which moves
  at most that fraction of ``delta`` (an epsilon) or ``1e-15`` (a delta) at the
  read (``C`` is the true mass per unit of tilted mass there). ``tilt=False``
  composes untilted.
  """
  out = []
  total = sum(int(round(count)) for _, count in steps)
  coupled = _coupled(steps)
  for d in directions or _directions(steps):
    if coupled and tilt:
      singles = _singles(steps, d, h)
      lam, log_c = _tilt(singles, h, query, x)
    else:
      # Round-off bounds of unknown location (BracketedAtoms): untilted, with the true
      # mass per unit of (normalized) mass taken as 1 for the budgets below (the total
      # finite mass, about 1; trimmed mass is charged to the bounds whatever the budget).
      singles = _singles(steps, d, h, sides)
      lam, log_c = 0.0, 0.0
    c = math.exp(min(log_c, 700.0))
    if query == "epsilon":
      tail_true = max(_TAIL_PER_DELTA * x, 1e-300)
      tail_t = max(min(_TAIL_PER_DELTA * x / c, _TAIL_PER_DELTA), 1e-300)
    else:
      tail_true = max(min(_TAIL_DELTA, 1e-9 * c), 1e-300)
      tail_t = max(min(_TAIL_DELTA / c, _TAIL_PER_DELTA), 1e-300)

    def budget(n, tail_true=tail_true, tail_t=tail_t):
      f = n / max(total, 1)
      return tail_true * f, tail_t * f

    out.append(_compose(singles, lam, h, budget, sides))
  return out


def _coupling_shift(h, total_steps, eta):
  """``t`` with ``P(sum_i Z_i > t) <= eta`` for the connect-the-dots moves ``Z_i``.

  Each step's upper image ``L' = L + Z`` has ``Z`` in a cell of width ``h`` given
  ``L`` and ``E[Z | L] <= h^2 (1 + h) / 8`` (the spread keeps ``E[e^{-L'}] =
  e^{-L}``); by Hoeffding's lemma per step and Chernoff, ``sum Z <= T h^2 (1 + h)
  / 8 + h sqrt(T log(1 / eta) / 2)`` except with probability ``eta``.
  """
  return total_steps * h * h * (1.0 + h) / 8.0 + h * math.sqrt(
    total_steps * math.log(1.0 / eta) / 2.0
  )


def _answers(steps, h, query, x, total):
  """``(upper, lower, width, uppers)`` of ``query`` (``"epsilon"`` at delta ``x``,
  ``"delta"`` at epsilon ``x``); ``width``: the widest composed window, in loss;
  ``uppers``: the upper bound per direction. The coupling lower bound is used only
  where every part is coupled (:func:`_coupled`)."""
  directions = _directions(steps)
  if _coupled(steps):
    comps = _composed(steps, h, query, x)
    ups = dict(zip(directions, (_read_upper(u, h, query, x) for u, _ in comps)))
    low = max(_read_lower(u, lo, h, query, x, total) for u, lo in comps)
    width = h * max(max(u.p.size, lo.p.size) for u, lo in comps)
    if _tilt_missed(comps, ups, low, query, x):
      # The saddle-point tilt can miss: aimed near the top of a lattice support (few
      # atoms above the answer: composed randomized response) or at one step read far
      # in its tail (one fixed-size step at delta 1e-10), the round-off bound, scaled by
      # e^{lam (s - eps)}, dwarfs the delta at the answer. Untilted, it is absolute
      # (small against a delta that is not tiny). Both are certified: keep the better.
      plain = _composed(steps, h, query, x, tilt=False)
      for d, (u, _) in zip(directions, plain):
        ups[d] = min(ups[d], _read_upper(u, h, query, x))
      low = max([low] + [_read_lower(u, lo, h, query, x, total) for u, lo in plain])
  else:
    uppers = [u for u, _ in _composed(steps, h, query, x, sides=(True,))]
    ups = dict(zip(directions, (_read_upper(u, h, query, x) for u in uppers)))
    low, sizes = _lowers(steps, h, query, x, total, ups, 0.0)
    width = h * max([u.p.size for u in uppers] + sizes)
  up = max(ups.values())
  return up, min(max(low, 0.0), up), width, ups


def _tilt_missed(comps, ups, low, query, x):
  """Whether a tilted composition's scaled round-off bound is over 0.1% of the delta read at
  the answer (upper or lower) of some direction."""
  for (u, lo), up in zip(comps, ups.values()):
    if u.lam <= 0 or not 0 < up < math.inf:
      continue
    if query == "epsilon":
      points = ((u, up, x), (lo, max(low, 0.0), x))
    else:
      points = ((u, x, up), (lo, x, up))
    for pmf, eps, delta in points:
      with np.errstate(over="ignore"):
        if not pmf.err * pmf.scale(eps) <= 1e-3 * delta:
          return True
  return False


def _lowers(steps, h, query, x, total, ups, low):
  """``(lower, sizes)``: the largest of ``low`` and the lower bounds of the directions (of
  uncoupled steps) that can raise it, and the sizes of their composed PMFs.

  Every direction's lower bound is one; a direction whose upper bound (``ups``) is at
  most the best lower bound so far cannot raise it, and its lower pairs are never
  built (the answer's direction, the largest upper bound, comes first).
  """
  sizes = []
  for d in sorted(ups, key=ups.get, reverse=True):
    if ups[d] <= low:
      break
    ((_, lo),) = _composed(steps, h, query, x, directions=(d,), sides=(False,))
    low = max(low, _read_lower(None, lo, h, query, x, total))
    sizes.append(lo.p.size)
  return low, sizes


def _read_upper(u, h, query, x):
  """The upper bound of ``query`` at ``x`` from one direction's upper PMF ``u``."""
  if query == "epsilon":
    return _read_epsilon(u, x, h, 0.0, u.err, True)
  if x >= _top(u, h):
    return min(1.0, _inf_mass(u))
  return min(1.0, _read_delta(u, x, h) + u.err * u.scale(x))


def _read_lower(u, lo, h, query, x, total):
  """The lower bound of ``query`` at ``x`` from one direction's lower PMF ``lo`` and, where
  ``u`` (the upper PMF of coupled steps) is given, the coupling shift of ``u``."""
  if query == "epsilon":
    low = _read_epsilon(lo, x, h, 0.0, -lo.err, False)
    if u is not None:
      eta = max(1e-3 * x, 1e-300)
      t = _coupling_shift(h, total, eta)
      low = max(low, _read_epsilon(u, x, h, -(eta + u.moved), -u.err, False) - t)
    return low
  low = _read_delta(lo, x, h) - (lo.err * lo.scale(x) if lo.err > 0 else 0.0)
  if u is not None:
    eta = max(1e-3 * _read_delta(u, x, h), 1e-300)
    xs = x + _coupling_shift(h, total, eta)
    shifted = _read_delta(u, xs, h)
    low = max(low, shifted - (u.err * u.scale(xs) if u.err > 0 else 0.0) - eta - u.moved)
  return low


def _realized(steps):
  """``steps`` with each envelope's parts replaced by its realized pairs (``None`` where
  there is none)."""
  if not any("realized" in parts for parts, _ in steps):
    return None
  return [(parts.get("realized", parts), count) for parts, count in steps]


def _lossy(steps):
  """``steps`` without the parts that release nothing in both directions (``_NO_LOSS``)."""
  return [
    (parts, count)
    for parts, count in steps
    if not (parts["remove"] is _NO_LOSS and parts["add"] is _NO_LOSS)
  ]


def _answer(event, x, rtol, max_grid_size, query):
  steps = event_steps(event)
  realized = _realized(steps)
  steps = _lossy(steps)
  if realized is None:
    return _bracket(steps, x, rtol, max_grid_size, query) if steps else (0.0, 0.0)
  # The upper bound from the envelopes, the lower bound from pairs a dataset pair
  # realizes (a lower bound of the run's true value). A rule may give a side no part
  # (``_NO_LOSS`` both ways): the realized pairs then need not match the envelopes
  # entry by entry.
  up = _bracket(steps, x, rtol, max_grid_size, query)[0] if steps else 0.0
  realized = _lossy(realized)
  low = _bracket(realized, x, rtol, max_grid_size, query)[1] if realized else 0.0
  return up, min(low, up)


def _bracket(steps, x, rtol, max_grid_size, query):
  total = sum(count for _, count in steps)
  h, floor = _plan_h(steps, rtol, max_grid_size)
  up, low, width, ups = _answers(steps, h, query, x, total)
  # One refinement where the bracket is wider than the target (its width is about
  # linear in h): a finer grid, as far as the grid size allows (the products are
  # up to twice the composed window).
  floor = max(floor, 2.0 * width / max_grid_size)
  gap = up - low
  if math.isfinite(up) and up > 0 and gap > _BRACKET * up and h > 1.01 * floor:
    h2 = max(h * max(0.5 * _BRACKET * up / gap, 0.05), floor)
    up, low = _refined(steps, h2, query, x, total, ups, low, max(h2, _UPPER_REFINE * h))
  return up, min(low, up)


def _refined(steps, h, query, x, total, ups, low, h_upper):
  """``(upper, lower)`` after recomposing on the finer grid ``h`` (every direction's
  bounds are bounds: each is kept where it is the better one).

  Coupled steps: the direction with the largest upper bound (``ups``), and then any
  other whose upper bound exceeds the lower bound so far, both PMFs (the coupling
  lower bound reads the upper one). Otherwise the lower PMFs (of the directions
  :func:`_lowers` picks) on ``h``, and the upper PMF of the answer's direction only
  on ``h_upper``: the upper PMF's connect-the-dots error is second order in the
  grid step, the lower PMF's first order (over the random-allocation benchmark grid
  the upper bound on a grid four times finer is within 5e-7 relative of the one on
  the lower's grid, 20 times finer).
  """
  order = sorted(ups, key=ups.get, reverse=True)
  ups = dict(ups)
  if _coupled(steps):
    for i, d in enumerate(order):
      if i and ups[d] <= low:
        break
      ((u, lo),) = _composed(steps, h, query, x, directions=(d,))
      ups[d] = min(ups[d], _read_upper(u, h, query, x))
      low = max(low, _read_lower(u, lo, h, query, x, total))
    return max(ups.values()), low
  low, _ = _lowers(steps, h, query, x, total, ups, low)
  if h_upper > h:
    d = order[0]
    ((u, _),) = _composed(steps, h_upper, query, x, directions=(d,), sides=(True,))
    ups[d] = min(ups[d], _read_upper(u, h_upper, query, x))
  return max(ups.values()), low


def generic_epsilon(event, delta, rtol, max_grid_size):
  """``(upper, lower)`` epsilon of a concrete scalar event tree at a float ``delta``.

  The lower bound is the larger of two: the optimistic PMF's crossing, and the
  upper PMF's crossing shifted by the coupling (``delta_true(eps) >=
  delta_upper(eps + t) - eta - moved``, :func:`_coupling_shift`, ``eta = 1e-3
  delta``).
  """
  return _answer(event, delta, rtol, max_grid_size, "epsilon")


def generic_delta(event, epsilon, rtol, max_grid_size):
  """``(upper, lower)`` delta of a concrete scalar event tree at a float ``epsilon``."""
  return _answer(event, epsilon, rtol, max_grid_size, "delta")
