"""From a calibrated sampling rate to an integer batch size over a dataset.

A sampling-rate calibration gives the largest q that meets a budget. A training
run over N examples needs an expected batch size B = q N that is an integer, so
it uses the largest integer at or below q N: epsilon (and delta) is
non-decreasing in q (Mironov, Talwar, Zhang 2019, arXiv:1908.10530: a smaller q
mixes the output with the no-data distribution), so the floored batch stays
within the budget. Its guarantee is recomputed at the q it actually has, B / N,
which is tighter than the calibration's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from jax.typing import ArrayLike

from ..accountants._dpsgd import dpsgd_delta, dpsgd_epsilon
from ..accountants._protocol import Accountant
from ..calibration._calibration import SamplingRateCalibration
from ._core import Budget

__all__ = ["BatchSizeCalibration", "floor_to_batch_size"]


class BatchSizeCalibration(NamedTuple):
  """Result of :func:`floor_to_batch_size` (numpy arrays of the broadcast shape).

  Attributes:
    batch_size: the largest integer B <= q N (a float64 holding an integer); NaN
      where infeasible.
    q: the sampling rate B / N of that batch size; NaN where infeasible.
    epsilon: epsilon of the guarantee at B / N (recomputed, or given).
    delta: delta of the guarantee at B / N (given, or recomputed).
    order: Renyi order attaining the bound at B / N; NaN where infeasible.
    feasible: False where the calibration was infeasible or B would be below 1.
  """

  batch_size: np.ndarray
  q: np.ndarray
  epsilon: np.ndarray
  delta: np.ndarray
  order: np.ndarray
  feasible: np.ndarray


def floor_to_batch_size(
  calibration: SamplingRateCalibration,
  dataset_size: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  *,
  budget: Budget = Budget.EPSILON,
  accountant: str | Accountant = "rdp",
  sampling: str = "poisson",
  relation: str | None = None,
) -> BatchSizeCalibration:
  """The largest integer batch size within a sampling-rate calibration's budget.

  Args:
    calibration: the result of ``calibrate_sampling_rate``, concrete.
    dataset_size: the number of examples N (broadcasts with the calibration).
    sigma, steps: the noise multiplier and number of steps it was calibrated for.
    budget: what the calibration bounded: ``Budget.EPSILON`` (epsilon at a given
      delta, the default) or ``Budget.DELTA``. The budgeted quantity is recomputed
      at q = B / N; the given one is passed through.
    accountant: the accountant the calibration used (a name or an object), which
      recomputes the budgeted quantity at B / N.
    sampling, relation: the batching scheme and relation the calibration used (as
      in ``jaxrdp.dpsgd_epsilon``); every scheme's epsilon and delta are
      non-decreasing in q as well, so the floored batch stays within the budget.

  Returns:
    BatchSizeCalibration with the broadcast shape.

  Examples:
    >>> import jaxrdp
    >>> cal = jaxrdp.calibrate_sampling_rate(2.597, 1e-5, 1.1, 14063)
    >>> res = floor_to_batch_size(cal, 60000, 1.1, 14063)
    >>> int(res.batch_size), float(res.q) == 256 / 60000
    (256, True)
    >>> bool(res.epsilon <= 2.597), round(float(res.epsilon), 3)
    (True, 2.597)
  """
  n = np.asarray(dataset_size, dtype=np.float64)
  batch = np.floor(np.nan_to_num(np.asarray(calibration.q, dtype=np.float64)) * n)
  ok = batch >= 1
  q = np.where(ok, batch / n, np.nan)
  epsilon = np.asarray(calibration.epsilon, dtype=np.float64)
  delta = np.asarray(calibration.delta, dtype=np.float64)
  # Infeasible cells (where the calibration's given value is NaN too) are
  # evaluated at q = 0 with valid placeholders, then masked.
  q_eval = np.where(ok, q, 0.0)
  sigma_eval = np.where(ok, sigma, 1.0)
  steps_eval = np.where(ok, steps, 1.0)
  scheme = {"sampling": sampling, "relation": relation}
  if budget is Budget.DELTA:
    res = dpsgd_delta(
      q_eval, sigma_eval, steps_eval, np.where(ok, epsilon, 0.5), accountant=accountant, **scheme
    )
    delta = np.where(ok, np.asarray(res.delta), np.nan)
  else:
    res = dpsgd_epsilon(
      q_eval, sigma_eval, steps_eval, np.where(ok, delta, 0.5), accountant=accountant, **scheme
    )
    epsilon = np.where(ok, np.asarray(res.epsilon), np.nan)
  order = np.asarray(getattr(res, "order", np.full(np.shape(q_eval), np.nan)))
  feasible = np.asarray(calibration.feasible) & ok
  return BatchSizeCalibration(
    np.where(ok, batch, np.nan), q, epsilon, delta, np.where(ok, order, np.nan), feasible
  )
