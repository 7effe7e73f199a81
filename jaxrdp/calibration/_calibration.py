"""Calibrating DP-SGD to a privacy budget: noise, steps or sampling rate, on grids.

Each calibration is one call of the generic core (``jaxrdp.calibration._core``) on a
family of evaluations of the RDP accountant of the Sampled Gaussian Mechanism (SGM;
Mironov, Talwar, Zhang 2019, arXiv:1908.10530), parameterised by one scalar per cell:
sigma (epsilon and delta non-increasing in it), q or the number of steps T
(non-decreasing). The budget bounds epsilon at a given delta or delta at a given epsilon
(``Budget``): the three public functions take either pair as keywords. This module
builds the families (``Evaluator``), answers the degenerate cells in closed form, and
checks and broadcasts the arguments; the core searches.

The RDP accountant gives the core its two accelerators (they change the work, never
the answer):

1. A cheap proxy, the accountant over the grid's integer orders up to 64 only (a
   shared finite series per cell, no quadrature). Its minimum runs over a subset of
   the orders, so its threshold is at or beyond the exact one (usually within a few
   percent: the fractional orders between the integers lower epsilon slightly). The
   searches start from the zCDP guess rho = T q^2 / sigma^2 with epsilon = rho +
   2 sqrt(rho log(1/delta)) (Bun and Steinke 2016, arXiv:1605.02065, Prop. 1.3). A
   cell whose optimum is an integer order then finishes in two exact evaluations; the
   others take 5 to 8 on the standard grid.
2. Floors for the order search (epsilon budgets). Each exact evaluation is an order
   search (``jaxrdp.rdp._order_search``), and every point the search tries beyond its
   best acceptable point so far has less noise (or a larger q) there, so log A at
   each order is at least what the search at that point found: its exact values, and
   its convexity bounds elsewhere. The search takes them as floors, which prune the
   orders that cannot be optimal before any are evaluated. Near the answer the floors
   are nearly exact and a search evaluates about one order per cell instead of three
   (400 cells at sigma 1e-4 below a known point: 433 quadratures instead of 1,306); on
   the standard grid the calibration takes 62 search rounds instead of 103. Each cell
   keeps its table (one float64 per search point, 176 with the default orders, 1.4 KB;
   the peak memory of a 20,000-cell calibration is about 1% above that without the
   floors).

Steps: the per-step RDP is computed once per cell (T only scales it, Mironov 2017,
arXiv:1702.07476, Prop. 1), so each evaluation in the integer search is a conversion.

Infeasible requests give NaN with ``feasible == False``:

* ``calibrate_noise``: the target is at or below the floor that infinite noise
  reaches with these orders and the given value (the conversion at RDP = 0; about
  5e-4 for delta = 1e-5 with the default orders), or needs sigma > 1e6;
* ``calibrate_steps``: not even one step fits;
* ``calibrate_sampling_rate``: no q >= 1e-10 fits (or sigma = 0).

Degenerate cells are answered in closed form: q = 0 or steps = 0 needs sigma = 0;
steps = 0 admits q = 1; q = 0 or sigma = inf admits steps = inf.

Batching schemes other than Poisson sampling under add/remove (``sampling=``,
``relation=``; ``jaxrdp.rdp._sampling``) take the same path with their own jitted
calibrations (``jaxrdp.calibration._schemes``), on the same core.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.validation import StaticArray, is_concrete
from ..accountants._dpsgd import accountant_and_orders
from ..accountants._protocol import Accountant, require_support
from ..events._dpsgd import dpsgd_event, resolve_scheme
from ..rdp import _sampling
from ..rdp._accountant import RdpAccountant
from ..rdp._dpsgd import (
  _orders_or_default,
)
from . import _schemes, _sgm_calibration
from ._core import Budget
from ._families import FIXED_RANGE, NoiseCalibration, SamplingRateCalibration, StepsCalibration
from ._with_accountant import calibrate_with_accountant

__all__ = [
  "NoiseCalibration",
  "StepsCalibration",
  "SamplingRateCalibration",
  "calibrate_noise",
  "calibrate_steps",
  "calibrate_sampling_rate",
]


# --------------------------------------------------------------------------------------
# Public boundary: the budget, validation of concrete input, broadcasting, float64.


def orders_array(orders) -> np.ndarray:
  """Validated float64 numpy orders (default ``DEFAULT_ORDERS``)."""
  orders = _orders_or_default(orders)
  if isinstance(orders, jax.core.Tracer):
    raise ValueError("orders must be concrete (a numpy array or list), not traced")
  arr = np.asarray(orders, dtype=np.float64)
  if arr.size == 0:
    raise ValueError("orders must not be empty")
  return arr


def _budget(fn, target_epsilon, delta, target_delta, epsilon):
  """(Budget, target, given) from the two keyword pairs, exactly one of them given."""
  by_epsilon = target_epsilon is not None or delta is not None
  by_delta = target_delta is not None or epsilon is not None
  if by_epsilon == by_delta:
    raise TypeError(
      f"{fn}() takes either target_epsilon and delta (an epsilon budget) "
      "or target_delta and epsilon (a delta budget)"
    )
  budget = Budget.DELTA if by_delta else Budget.EPSILON
  target, given = (target_delta, epsilon) if by_delta else (target_epsilon, delta)
  for name, x in ((budget.target_name, target), (budget.given_name, given)):
    if x is None:
      raise TypeError(f"{fn}() missing argument {name!r} (a {budget.value} budget)")
  return budget, target, given


def _check_host_accountant(acct, values, on_host=None):
  """An accountant other than Renyi DP (or a scheme without a jitted search) refines on
  the host: concrete arguments only."""
  if on_host is None:
    on_host = not isinstance(acct, RdpAccountant)
  if on_host and not all(is_concrete(x) for x in values):
    raise ValueError(
      f"calibration with {acct!r} needs concrete arguments (it runs on the host); use "
      "accountant='rdp' and a scheme other than sampling='allocation' under jit"
    )


def _public(fn, kind, budget_args, fixed, orders, accountant, sampling, relation):
  """The body of the three public calibrations: checks, then one jitted calibration.

  ``fn``: the public name (for messages); ``budget_args``: its (target_epsilon,
  delta, target_delta, epsilon); ``fixed``: the two given DP-SGD parameters by name,
  in the jitted function's argument order.
  """
  budget, target, given = _budget(fn, *budget_args)
  for name, x in fixed.items():
    if x is None:
      raise TypeError(f"{fn}() missing argument {name!r}")
  budget.check(target, given)
  for name, x in fixed.items():
    FIXED_RANGE[name].check(name, x)
  acct, orders = accountant_and_orders(accountant, orders)
  sampling, relation = resolve_scheme(sampling, relation)
  event = dpsgd_event(0.5, 1.0, 1.0, sampling=sampling, relation=relation)
  jitted, on_host = _scheme_jitted(kind, event, acct, orders)
  scheme = dict(sampling=sampling, relation=relation)
  return _solve(kind, jitted, acct, budget, target, given, fixed, orders, scheme, on_host)


def _scheme_jitted(kind, event, acct: Accountant, orders):
  """The jitted calibration of ``kind`` for the batching scheme of ``event`` (one DP-SGD
  run's, :func:`~jaxrdp.events.dpsgd_event`), and whether its answer is searched on the
  host.

  The SGM's (Poisson under add/remove) for the default scheme; else the scheme's
  (``jaxrdp.calibration._schemes``) with the scheme bound, after the checks that need no
  compilation: whether the accountant can account the event (its ``supports``), and the
  orders. An event with no Renyi-DP scheme of its own (random allocation) has no jitted
  search: the Poisson answer at the same rate starts the host search (``_solve``), which
  asks the accountant about the event itself.
  """
  require_support(acct, event)
  scheme = _sampling.dpsgd_scheme(event)
  if scheme is None:
    if kind == "rate":
      raise NotImplementedError(
        "calibrate_sampling_rate does not take sampling='allocation': its rate is k / t "
        "for a whole number t of steps per epoch; calibrate the noise or the steps"
      )
    return _sgm_calibration.JITS[kind], True
  if scheme.plain_sgm:
    return _sgm_calibration.JITS[kind], False
  scheme.check_orders(orders_array(orders))
  return functools.partial(_schemes.JITS[kind], scheme=scheme), False


def _solve(kind, jitted, acct, budget, target, given, fixed, orders, scheme=None, on_host=False):
  """One jitted Renyi-DP calibration, refined on the host for another accountant.

  ``fixed`` maps the two given DP-SGD parameters, in the jitted function's argument
  order, to their values; ``scheme``: the ``sampling`` and ``relation`` keywords of
  the refinement's ``dpsgd_epsilon`` calls (``None``: Poisson, add/remove);
  ``on_host``: the scheme has no jitted Renyi-DP search (random allocation), so its
  answer is searched on the host, from the Poisson one, with any accountant.
  """
  on_host = on_host or not isinstance(acct, RdpAccountant)
  _check_host_accountant(acct, (target, given, *fixed.values()), on_host)
  out = _call(jitted, budget, target, given, *fixed.values(), orders)
  if not on_host:
    return out
  return _refine(kind, acct, out, budget, target, given, fixed, scheme)


def _refine(kind, accountant, out, budget, target, given, fixed, scheme=None):
  """The Renyi-DP answer ``out`` refined on the host by another accountant."""
  name = {"noise": "sigma", "rate": "q", "steps": "steps"}[kind]
  solved = np.asarray(getattr(out, name), dtype=np.float64)
  shape = solved.shape
  cols = {
    k: np.broadcast_to(np.asarray(v, dtype=np.float64), shape).ravel() for k, v in fixed.items()
  }
  cols.setdefault("q", None)
  cols.setdefault("sigma", None)
  cols.setdefault("steps", None)
  tgt = np.broadcast_to(np.asarray(target, dtype=np.float64), shape).ravel()
  giv = np.broadcast_to(np.asarray(given, dtype=np.float64), shape).ravel()
  start = solved.ravel()
  feasible = np.asarray(out.feasible).ravel()
  # Cells with a closed-form answer (no privacy loss: sigma = 0 for q = 0 or no
  # steps, q = 1 or unlimited steps) keep it; the others are searched.
  trivial = {"noise": start == 0, "rate": start == 1, "steps": ~np.isfinite(start)}[kind]
  searched = feasible & ~trivial
  with _precision.x64_context():
    param, value, ok = calibrate_with_accountant(
      kind, accountant, budget, tgt, giv, cols, start, searched, scheme=scheme
    )
  value = np.where(searched, value, np.asarray(getattr(out, budget.value)).ravel())
  ok = np.where(searched, ok, feasible)
  param = np.where(ok, param, np.nan)
  value = np.where(ok, value, np.nan)
  eps, dlt = budget.pair(value, giv)
  fields = {
    name: param,
    "epsilon": eps,
    "delta": dlt,
    "order": np.full(param.shape, np.nan),
    "feasible": ok,
  }
  return type(out)(**{k: np.reshape(v, shape) for k, v in fields.items()})


def _finalize(out, outer_x64: bool):
  """Float32 results for a caller tracing with x64 off, rounded the safe way.

  As in ``jaxrdp._core.precision.Float64Scope``: a float64 tracer would be rounded to
  nearest at the caller's next operation, so it is cast here instead, and in the
  direction that keeps the guarantee: sigma, epsilon and delta up, the number of
  steps and the sampling rate down (more steps or a larger q would spend more than
  the budget). Eager calls and x64 callers get float64.
  """
  first_down = isinstance(out, (StepsCalibration, SamplingRateCalibration))
  return _precision.finalize(out, outer_x64, type(out)(first_down, *(False,) * (len(out) - 1)))


def _call(jitted, budget, target, given, a, b, orders):
  all_orders = orders_array(orders)
  outer_x64 = bool(jax.config.jax_enable_x64)
  with _precision.x64_context():
    args = [_precision.as_float64(x) for x in (target, given, a, b)]
    shape = jnp.broadcast_shapes(*(x.shape for x in args))
    args = [jnp.broadcast_to(x, shape) for x in args]
    out = jitted(
      *args, jnp.asarray(all_orders), orders_static=StaticArray(all_orders), budget=budget
    )
  return _finalize(out, outer_x64)


def calibrate_noise(
  target_epsilon: ArrayLike | None = None,
  delta: ArrayLike | None = None,
  q: ArrayLike | None = None,
  steps: ArrayLike | None = None,
  orders: ArrayLike | None = None,
  *,
  target_delta: ArrayLike | None = None,
  epsilon: ArrayLike | None = None,
  accountant: str | Accountant = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> NoiseCalibration:
  """Smallest noise multiplier sigma whose guarantee meets the budget.

  The budget is either ``target_epsilon`` at a given ``delta`` (positionally, as in
  ``calibrate_noise(target_epsilon, delta, q, steps)``), solving min {sigma :
  dpsgd_epsilon(q, sigma, steps, delta).epsilon <= target_epsilon}, or, as keywords,
  ``target_delta`` at a given ``epsilon``, solving min {sigma : dpsgd_delta(q, sigma,
  steps, epsilon).delta <= target_delta}. All arguments broadcast together; a whole
  grid is one jitted call of the calibration core (``jaxrdp.calibration._core``).

  Guarantees, for every feasible cell: the budgeted quantity recomputed at sigma
  (``dpsgd_epsilon``, or ``dpsgd_delta``, with the same orders) is at most its target
  (1 - 1e-12), and sigma (1 - 1e-6) exceeds the target (the bracket is 4e-8 wide in
  log sigma).

  Args:
    target_epsilon: epsilon budget, >= 0 (with ``delta``).
    delta: delta of the guarantee, in (0, 1).
    q: Poisson sampling rate, in [0, 1].
    steps: number of DP-SGD steps, >= 0 (need not be an integer).
    orders: Renyi orders (1-D, concrete); default :data:`jaxrdp.DEFAULT_ORDERS`.
    target_delta: delta budget, in (0, 1) (keyword; with ``epsilon`` instead of
      ``target_epsilon`` and ``delta``).
    epsilon: epsilon of the guarantee, >= 0 (keyword).
    accountant: a name or an accountant object: ``"rdp"`` (default: Renyi DP, one
      jitted search) or ``"pld"`` (tight,
      certified accounting: the search starts from the Renyi-DP answer and runs on
      the host, one vectorized tight evaluation per round, until the bracket is
      1e-5 wide in log sigma or log q, or one step; needs concrete arguments and
      the default orders; ``order`` is then NaN).
    sampling: ``"poisson"`` (default), ``"allocation"``, ``"fixed"`` or ``"shuffle"``,
      and
    relation: ``"add_remove"`` or ``"replace_one"`` (default per scheme): the batching
      scheme and neighbouring relation, as in :func:`jaxrdp.dpsgd_epsilon` (q is
      B / n for ``"fixed"`` and ``"shuffle"``, k / t for ``"allocation"``; sigma is
      the DP-SGD noise multiplier). The accountant says whether it can account the
      scheme. Random allocation has no jitted search: with either accountant it is
      searched on the host from the Poisson answer, as the tight accountant is
      (concrete arguments; the bracket 1e-5 wide in log sigma).

  Returns:
    ``NoiseCalibration(sigma, epsilon, delta, order, feasible)``, float64 arrays of
    the broadcast shape; the budgeted one of ``epsilon`` and ``delta`` is the value
    achieved at ``sigma``, the other the given one. Infeasible cells (a target at or
    below the infinite-noise floor, or needing sigma > 1e6) have NaN and ``feasible ==
    False``. q = 0 or steps = 0 gives sigma = 0. Concrete invalid input raises
    ValueError; traced invalid input gives NaN.

  Raises:
    TypeError: if neither or both budgets are given, or q or steps is missing.

  Examples:
    >>> import jaxrdp
    >>> res = jaxrdp.calibrate_noise(2.0, 1e-5, 256 / 60000, 14063)
    >>> round(float(res.sigma), 4), bool(res.feasible)
    (1.2953, True)
    >>> res = jaxrdp.calibrate_noise(q=256 / 60000, steps=14063, target_delta=1e-5,
    ...                              epsilon=2.0)
    >>> round(float(res.sigma), 4)
    1.2953
  """
  budget_args = (target_epsilon, delta, target_delta, epsilon)
  fixed = dict(q=q, steps=steps)
  return _public(
    "calibrate_noise", "noise", budget_args, fixed, orders, accountant, sampling, relation
  )


def calibrate_steps(
  target_epsilon: ArrayLike | None = None,
  delta: ArrayLike | None = None,
  q: ArrayLike | None = None,
  sigma: ArrayLike | None = None,
  orders: ArrayLike | None = None,
  *,
  target_delta: ArrayLike | None = None,
  epsilon: ArrayLike | None = None,
  accountant: str | Accountant = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> StepsCalibration:
  """Largest integer number of steps T whose guarantee meets the budget.

  The budget is ``target_epsilon`` at a given ``delta`` (positionally) or, as
  keywords, ``target_delta`` at a given ``epsilon``, as in :func:`calibrate_noise`.
  The per-step RDP is computed once per cell; T is found by exponential search and
  integer bisection, so that T steps meet the budget and T + 1 do not.

  Tightness: epsilon(T) always meets the budget. That T + 1 does not holds up to
  T ~ 1e10; beyond (about 1e11 to 1e13 steps and more) one step changes epsilon by
  less than its own 1e-12 relative accuracy, so T is the largest count to within
  that accuracy of epsilon, and T + 1, T + 2, ... may still meet the budget.

  Args:
    target_epsilon: epsilon budget, >= 0 (with ``delta``).
    delta: delta in (0, 1).
    q: sampling rate in [0, 1].
    sigma: noise multiplier >= 0 (inf allowed).
    orders: Renyi orders; default :data:`jaxrdp.DEFAULT_ORDERS`.
    target_delta: delta budget in (0, 1) (keyword; with ``epsilon``).
    epsilon: epsilon of the guarantee, >= 0 (keyword).
    accountant, sampling, relation: the accountant, batching scheme and relation, as
      in :func:`calibrate_noise`.

  Returns:
    ``StepsCalibration(steps, epsilon, delta, order, feasible)``. ``steps`` is a
    float64 integer: inf where the RDP is zero (q = 0 or sigma = inf), at most
    2**52, and NaN with ``feasible == False`` where not even one step fits.

  Raises:
    TypeError: if neither or both budgets are given, or q or sigma is missing.

  Examples:
    >>> import jaxrdp
    >>> int(jaxrdp.calibrate_steps(2.597, 1e-5, 256 / 60000, 1.1).steps)
    14066
    >>> int(jaxrdp.calibrate_steps(q=256 / 60000, sigma=1.1, target_delta=1e-5,
    ...                            epsilon=2.597).steps)
    14066
  """
  budget_args = (target_epsilon, delta, target_delta, epsilon)
  fixed = dict(q=q, sigma=sigma)
  return _public(
    "calibrate_steps", "steps", budget_args, fixed, orders, accountant, sampling, relation
  )


def calibrate_sampling_rate(
  target_epsilon: ArrayLike | None = None,
  delta: ArrayLike | None = None,
  sigma: ArrayLike | None = None,
  steps: ArrayLike | None = None,
  orders: ArrayLike | None = None,
  *,
  target_delta: ArrayLike | None = None,
  epsilon: ArrayLike | None = None,
  accountant: str | Accountant = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> SamplingRateCalibration:
  """Largest sampling rate q in (0, 1] whose guarantee meets the budget.

  The budget is ``target_epsilon`` at a given ``delta`` (positionally) or, as
  keywords, ``target_delta`` at a given ``epsilon``, as in :func:`calibrate_noise`.
  Searched in log q; q (1 + 1e-6) exceeds the target unless q = 1. For a dataset of
  N examples the largest expected batch size is floor(q N), within budget because
  epsilon and delta are non-decreasing in q.

  Args:
    target_epsilon: epsilon budget, >= 0 (with ``delta``).
    delta: delta in (0, 1).
    sigma: noise multiplier >= 0 (inf allowed).
    steps: number of steps >= 0.
    orders: Renyi orders; default :data:`jaxrdp.DEFAULT_ORDERS`.
    target_delta: delta budget in (0, 1) (keyword; with ``epsilon``).
    epsilon: epsilon of the guarantee, >= 0 (keyword).
    accountant, sampling, relation: the accountant, batching scheme and relation, as
      in :func:`calibrate_noise`.

  Returns:
    ``SamplingRateCalibration(q, epsilon, delta, order, feasible)``; NaN and
    ``feasible == False`` where no q >= 1e-10 fits (sigma = 0, or a target at or
    below the infinite-noise floor). steps = 0 gives q = 1.

  Raises:
    TypeError: if neither or both budgets are given, or sigma or steps is missing.

  Examples:
    >>> import jaxrdp
    >>> res = jaxrdp.calibrate_sampling_rate(2.597, 1e-5, 1.1, 14063)
    >>> round(float(res.q) * 60000)
    256
  """
  budget_args = (target_epsilon, delta, target_delta, epsilon)
  fixed = dict(sigma=sigma, steps=steps)
  return _public(
    "calibrate_sampling_rate", "rate", budget_args, fixed, orders, accountant, sampling, relation
  )
