"""Calibrating DP-SGD's noise to an attack-risk target: TPR at a given FPR, or the advantage.

The least noise multiplier ``sigma`` whose certified risk (the upper bound of
:func:`jaxrdp.dpsgd_tpr` or :func:`jaxrdp.dpsgd_advantage`) is at most the
target, per cell of a grid. Both quantities fall as ``sigma`` grows, so the
search is the host search of the tight accountant's calibrations
(``jaxrdp.calibration._with_accountant``): every round is one vectorized call
over the cells still searching, and it stops when the bracket is ``1e-5`` wide
in ``log sigma``. The answer is the end of the bracket that meets the target,
so the value recomputed at it meets the target (each cell's grid depends only
on the cell), and ``sigma (1 - 1e-5)`` does not.

The search starts from the Gaussian-DP central-limit estimate: the ``mu`` that
gives the target (``mu = Phi^-1(target) - Phi^-1(fpr)``, or ``2 Phi^-1((1 +
target) / 2)`` for the advantage), and ``mu = q sqrt(T (e^{1/sigma^2} - 1))``
(Bu et al. 2019, arXiv:1911.11607, Thm 5; Dong, Roth, Su 2019,
arXiv:1905.02383, Cor. 5.4) solved for ``sigma``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.scipy.special
import numpy as np
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.validation import check_range
from ..accountants._protocol import Accountant
from ..calibration._with_accountant import calibrate_with_accountant
from . import _api

__all__ = ["RiskCalibration", "calibrate_noise_to_tpr", "calibrate_noise_to_advantage"]


class RiskCalibration(NamedTuple):
  """Result of a risk calibration (arrays of the broadcast shape).

  Attributes:
    sigma: the least noise multiplier meeting the target (to 1e-5 relative);
      NaN where infeasible.
    risk: the certified risk at ``sigma`` (TPR at the FPR, or the advantage).
    feasible: False where no ``sigma`` up to 1e6 meets the target.
  """

  sigma: jax.Array
  risk: jax.Array
  feasible: jax.Array


def _ndtri(p):
  """``Phi^-1(p)`` in float64 on the host."""
  with _precision.x64_context():
    return np.asarray(jax.scipy.special.ndtri(np.asarray(p, np.float64)))


def _start_sigma(mu, q, steps):
  """``sigma`` with ``q sqrt(T (e^{1/sigma^2} - 1)) = mu`` (Gaussian-DP CLT)."""
  with np.errstate(divide="ignore", invalid="ignore"):
    inv = np.log1p((mu / q) ** 2 / steps)
    return np.where(inv > 0, 1.0 / np.sqrt(inv), 1e3)


def _check_atol(route, atol):
  """atol before the search starts: its range, or that the Renyi-DP route has none."""
  if route.name != "pld":
    _api._check_rdp_options(atol)
  elif atol is not None:
    from ..pld._tradeoff import _check_atol as check

    check(atol)


def _calibrate(target, given, q, steps, mu, evaluate, valid):
  shape = np.broadcast_shapes(*(np.shape(x) for x in (target, given, q, steps)))
  t, g, qq, tt, mu = (
    np.broadcast_to(np.asarray(x, np.float64), shape).ravel() for x in (target, given, q, steps, mu)
  )
  ok = np.broadcast_to(valid, shape).ravel()
  start = np.clip(_start_sigma(mu, qq, tt), 1e-3, 1e6)
  fixed = {"q": qq, "steps": tt, "sigma": None}
  with _precision.x64_context():
    sigma, value, feasible = calibrate_with_accountant(
      "noise", None, None, t, g, fixed, np.where(ok, start, 1.0), ok, evaluate=evaluate
    )
  sigma = np.where(feasible, sigma, np.nan)
  value = np.where(feasible, value, np.nan)
  return RiskCalibration(
    *(np.reshape(x, shape) for x in (sigma, value)), np.reshape(feasible, shape)
  )


def calibrate_noise_to_tpr(
  target_tpr: ArrayLike,
  fpr: ArrayLike,
  q: ArrayLike,
  steps: ArrayLike,
  *,
  accountant: str | Accountant = "pld",
  sampling: str = "poisson",
  atol: float | None = None,
) -> RiskCalibration:
  """The least noise multiplier keeping the best attack's TPR at ``fpr`` at most ``target_tpr``.

  Args:
    target_tpr: the largest TPR allowed, in (fpr, 1).
    fpr: the attack's false-positive rate, in (0, 1).
    q: Poisson sampling rate in (0, 1].
    steps: number of steps (a whole number >= 1). All four broadcast.
    accountant: a name or an accountant object: ``"pld"`` (tight; default) or
      ``"rdp"`` (looser bound, so more noise), as in :func:`jaxrdp.dpsgd_tpr`.
    sampling: ``"poisson"`` only.
    atol: the tight accountant's target absolute error, as in
      :func:`jaxrdp.dpsgd_tpr` (the certificate holds at any setting: the risk
      recomputed with the same ``atol`` at the returned sigma meets the target).

  Returns:
    :class:`RiskCalibration`; ``jaxrdp.dpsgd_tpr(q, sigma, steps, fpr).tpr`` at
    the returned sigma is at most ``target_tpr``.

  Examples:
    >>> import jaxrdp.risk
    >>> r = jaxrdp.risk.calibrate_noise_to_tpr(0.05, 0.01, 256 / 60000, 14063)
    >>> round(float(r.sigma), 3), bool(r.risk <= 0.05)
    (0.988, True)
  """
  route = _api.resolve_risk_accountant(accountant, sampling)
  _check_atol(route, atol)
  check_range("fpr", fpr, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  check_range("target_tpr", target_tpr, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  check_range("q", q, lower=0.0, upper=1.0, lower_open=True)
  check_range("steps", steps, lower=1.0)
  a = np.asarray(fpr, np.float64)
  t = np.asarray(target_tpr, np.float64)
  valid = t > a  # no noise makes TPR < FPR
  mu = _ndtri(np.clip(t, 1e-300, 1 - 1e-16)) - _ndtri(a)

  def evaluate(sigma, fixed, given):
    return _api.dpsgd_tpr(
      fixed["q"], sigma, fixed["steps"], given, accountant=accountant, atol=atol
    ).tpr

  return _calibrate(t, a, q, steps, np.maximum(mu, 1e-6), evaluate, valid)


def calibrate_noise_to_advantage(
  target_advantage: ArrayLike,
  q: ArrayLike,
  steps: ArrayLike,
  *,
  accountant: str | Accountant = "pld",
  sampling: str = "poisson",
  atol: float | None = None,
) -> RiskCalibration:
  """The least noise multiplier keeping the membership advantage at most ``target_advantage``.

  Args:
    target_advantage: the largest advantage allowed, in (0, 1).
    q, steps, accountant, sampling, atol: as in :func:`calibrate_noise_to_tpr`.

  Returns:
    :class:`RiskCalibration`; ``jaxrdp.dpsgd_advantage(q, sigma, steps).advantage``
    at the returned sigma is at most ``target_advantage``.

  Examples:
    >>> import jaxrdp.risk
    >>> r = jaxrdp.risk.calibrate_noise_to_advantage(0.1, 256 / 60000, 14063)
    >>> round(float(r.sigma), 3), bool(r.risk <= 0.1)
    (2.128, True)
  """
  route = _api.resolve_risk_accountant(accountant, sampling)
  _check_atol(route, atol)
  check_range(
    "target_advantage", target_advantage, lower=0.0, upper=1.0, lower_open=True, upper_open=True
  )
  check_range("q", q, lower=0.0, upper=1.0, lower_open=True)
  check_range("steps", steps, lower=1.0)
  t = np.asarray(target_advantage, np.float64)
  mu = 2.0 * _ndtri(0.5 * (1.0 + t))

  def evaluate(sigma, fixed, given):
    del given
    return _api.dpsgd_advantage(
      fixed["q"], sigma, fixed["steps"], accountant=accountant, atol=atol
    ).advantage

  return _calibrate(t, np.zeros_like(t), q, steps, mu, evaluate, np.ones(np.shape(t), bool))
