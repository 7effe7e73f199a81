"""dp_accounting's PLD accountant on the Poisson-sampled Gaussian mechanism, as the
benchmark scripts run it (one definition for all of them)."""

from __future__ import annotations


def pld_epsilon(q, sigma, steps, delta, interval=1e-4):
  """dp_accounting's tight epsilon of ``steps`` Poisson-sampled Gaussian steps.

  Add/remove adjacency; ``interval`` is its ``value_discretization_interval``
  (1e-4, its default, unless given). dp_accounting is imported on the first call.
  """
  import dp_accounting
  from dp_accounting import dp_event
  from dp_accounting.pld import pld_privacy_accountant

  acc = pld_privacy_accountant.PLDAccountant(
    dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=interval
  )
  acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), int(steps))
  return float(acc.get_epsilon(delta))
