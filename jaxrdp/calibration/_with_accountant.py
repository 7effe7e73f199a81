"""Calibration through an accountant that is evaluated outside ``jit`` (``accountant="pld"``).

The Renyi-DP calibrations run as one jitted search (``_core.calibrate``). The
tight accountant chooses its FFT grid from the concrete arguments of each call,
so its calibration is a search on the host in which every round is one
vectorized call over the cells still searching:

1. Start from the Renyi-DP answer. Tight accounting is never looser than RDP in
   practice, so that point usually meets the budget already; where it does not, the
   parameter moves towards more privacy (sigma x 1.25, q / 1.25, steps / 1.25) until
   it does.
2. Step the other way (sigma / 1.1, q x 1.1, steps x 1.1, the factor squared at
   each round) until the budget is violated, or the domain's end is reached (an
   answer there).
3. Bracketing in v = log sigma (or log q, or the integer steps) with the
   Illinois variant of false position, until the bracket is ``_LOG_TOL`` wide (one
   step for steps). The answer is the end that meets the budget.

Guarantees, for every feasible cell: the value at the answer was computed by the
accountant (a certified upper bound for ``"pld"``) and is at most the target, and
the parameter one bracket width less private violates it: sigma (1 - 1e-5)
or q (1 + 1e-5) or steps + 1. The budget check allows no margin: each cell's
value is recomputed identically by a later call with the same arguments (the
tight accountant's grid depends only on the cell).
"""

from __future__ import annotations

import numpy as np

from ..accountants._dpsgd import dpsgd_delta, dpsgd_epsilon
from ._core import Budget

__all__ = ["calibrate_with_accountant"]

_LOG_TOL = 1e-5  # bracket width in log sigma or log q
_MAX_ROUNDS = 200
_WIDEN = 1.1  # first step towards less privacy
_NARROW = 1.25  # step towards more privacy when the start violates


def _evaluate(kind, accountant, budget, param, fixed, target_given, scheme=None):
  """The budgeted value (epsilon or delta) at ``param`` for the cells given (1-D arrays),
  of the batching scheme ``scheme`` (``sampling`` and ``relation`` keywords)."""
  scheme = scheme or {}
  q, sigma, steps = fixed["q"], fixed["sigma"], fixed["steps"]
  if kind == "noise":
    sigma = param
  elif kind == "rate":
    q = param
  else:
    steps = param
  if budget is Budget.EPSILON:
    return np.array(
      dpsgd_epsilon(q, sigma, steps, target_given, accountant=accountant, **scheme).epsilon
    )
  return np.array(dpsgd_delta(q, sigma, steps, target_given, accountant=accountant, **scheme).delta)


def calibrate_with_accountant(
  kind, accountant, budget, target, given, fixed, start, start_ok, evaluate=None, scheme=None
):
  """Refines a calibration with another accountant, on the host.

  Args:
    kind: ``"noise"`` (solve for sigma), ``"rate"`` (q) or ``"steps"``.
    accountant: the accountant (name or object) passed to ``dpsgd_epsilon``.
    budget: :class:`Budget`.
    target, given: 1-D float64 arrays, the budget and the other half of the pair.
    fixed: dict of 1-D arrays ``q``, ``sigma``, ``steps`` (the solved one unused).
    start: 1-D array, the Renyi-DP answer per cell.
    start_ok: 1-D bool array, the cells to refine (feasible, non-trivial).
    evaluate: optional ``(param, fixed, given) -> values`` (1-D arrays of the cells
      searched) in place of ``dpsgd_epsilon`` / ``dpsgd_delta``: any quantity
      that is monotone in the parameter like them (``accountant`` and ``budget``
      are then unused), such as an attack's true-positive rate.
    scheme: the ``sampling`` and ``relation`` keywords of the ``dpsgd_epsilon`` /
      ``dpsgd_delta`` calls (``None``: Poisson sampling, add/remove).

  Returns:
    (param, value, feasible): 1-D arrays; cells not refined keep ``start``.
  """
  param = np.array(start, dtype=np.float64)
  value = np.full(param.shape, np.nan)
  feasible = np.array(start_ok, dtype=bool)
  idx = np.flatnonzero(start_ok)
  if idx.size == 0:
    return param, value, feasible
  increasing = kind != "noise"  # privacy loss grows with q and steps, falls with sigma
  integer = kind == "steps"
  upper = {"noise": 1e6, "rate": 1.0, "steps": 1e7}[kind]

  def to_v(x):
    return x if integer else np.log(x)

  def from_v(v):
    return v if integer else np.exp(v)

  def less_private(x, factor):  # a parameter value with more privacy loss
    if not increasing:
      return x / factor
    if integer:  # at least one more step
      return np.minimum(np.maximum(np.floor(x * factor), x + 1.0), upper)
    return np.minimum(x * factor, upper)

  def more_private(x, factor):
    if not increasing:
      return x * factor
    if integer:  # at least one step fewer; below one step the cell is infeasible (NaN)
      y = np.minimum(np.ceil(x / factor), x - 1.0)
      return np.where(y >= 1.0, y, np.nan)
    return x / factor

  def values(cells, x):
    sub = {k: (None if v is None else v[cells]) for k, v in fixed.items()}
    if evaluate is not None:
      return np.array(evaluate(x, sub, given[cells]), dtype=np.float64)
    return _evaluate(kind, accountant, budget, x, sub, given[cells], scheme)

  # 1. A point that meets the budget.
  ok_x = param[idx].copy()
  ok_val = values(idx, ok_x)
  for _ in range(_MAX_ROUNDS):
    bad = ~(ok_val <= target[idx]) & ~np.isnan(ok_x)
    if not bad.any():
      break
    ok_x[bad] = more_private(ok_x[bad], _NARROW)
    ok_val[bad] = values(idx[bad], ok_x[bad])
  lost = ~(ok_val <= target[idx])  # never met (NaN or out of the domain)

  # 2. A point that violates it, or the end of the domain.
  bad_x = np.where(lost, np.nan, less_private(ok_x, _WIDEN))
  bad_val = np.full(idx.shape, np.nan)
  pending = ~lost
  at_edge = np.zeros(idx.shape, bool)
  factor = _WIDEN
  for _ in range(_MAX_ROUNDS):
    if not pending.any():
      break
    cells = np.flatnonzero(pending)
    bad_val[cells] = values(idx[cells], bad_x[cells])
    meets = bad_val[cells] <= target[idx[cells]]
    moved = cells[meets]
    ok_x[moved], ok_val[moved] = bad_x[moved], bad_val[moved]
    edge = moved[ok_x[moved] >= upper] if increasing else moved[ok_x[moved] <= 0]
    at_edge[edge] = True
    pending[cells[~meets]] = False
    pending[edge] = False
    step = moved[~np.isin(moved, edge)]
    factor = factor * factor  # the step grows geometrically: few rounds whatever the scale
    bad_x[step] = less_private(ok_x[step], factor)

  # 3. Illinois false position on g(v) = log(value) - log(target).
  active = ~lost & ~at_edge
  g_ok = np.log(ok_val) - np.log(target[idx])
  g_bad = np.log(bad_val) - np.log(target[idx])
  v_ok, v_bad = to_v(ok_x), to_v(np.where(active, bad_x, ok_x))
  side = np.zeros(idx.shape, int)
  tol = 1.0 if integer else _LOG_TOL
  for _ in range(_MAX_ROUNDS):
    active &= np.abs(v_bad - v_ok) > tol
    if not active.any():
      break
    cells = np.flatnonzero(active)
    a, b, ga, gb = v_ok[cells], v_bad[cells], g_ok[cells], g_bad[cells]
    with np.errstate(invalid="ignore", divide="ignore"):
      v = b - gb * (b - a) / (gb - ga)
    mid = 0.5 * (a + b)
    # Stay strictly inside the bracket (and at least a tenth of it from each end).
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    margin = 0.1 * (hi - lo)
    v = np.where(np.isfinite(v), np.clip(v, lo + margin, hi - margin), mid)
    if integer:
      v = np.clip(np.round(v), lo + 1, hi - 1)
    x = from_v(v)
    val = values(idx[cells], x)
    g = np.log(val) - np.log(target[idx[cells]])
    meets = val <= target[idx[cells]]
    c_ok, c_bad = cells[meets], cells[~meets]
    # Illinois: halve the retained end's g when the same end is kept twice.
    g_bad[c_ok] = np.where(side[c_ok] == 1, 0.5 * g_bad[c_ok], g_bad[c_ok])
    g_ok[c_bad] = np.where(side[c_bad] == -1, 0.5 * g_ok[c_bad], g_ok[c_bad])
    side[c_ok], side[c_bad] = 1, -1
    v_ok[c_ok], g_ok[c_ok], ok_val[c_ok] = v[meets], g[meets], val[meets]
    v_bad[c_bad], g_bad[c_bad] = v[~meets], g[~meets]

  param[idx] = np.where(lost, np.nan, from_v(v_ok))
  value[idx] = np.where(lost, np.nan, ok_val)
  feasible[idx] = ~lost
  if integer:
    param[idx] = np.where(lost, np.nan, np.round(param[idx]))
  return param, value, feasible
