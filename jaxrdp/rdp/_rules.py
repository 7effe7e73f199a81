"""Every Renyi-DP rule of the accountant, read from one module.

The accountant (``_accountant``) and the training step (``jaxrdp.train``) take the
RDP curves of events from here. The registry and the rules of the core events
(Gaussian, Laplace, randomized response, Poisson sampling, compositions) are in
``_event_curves``; the modules imported below add the rules of the other event types,
each registering its own when it is loaded:

* ``_mechanism_rules``: the mechanisms dp_accounting describes (discrete Gaussian and
  Laplace, zCDP, (epsilon, delta), k-ary randomized response, selection, trees,
  mixtures of Gaussians) and RepeatAndSelect;
* ``_sampling``: fixed-size sampled and shuffled DP-SGD batches;
* ``_random_allocation``: random k-out-of-t allocation.

No module of rules imports this one, so the rules load in one direction only.
"""

from __future__ import annotations

from . import _mechanism_rules, _random_allocation, _sampling
from ._event_curves import (
  as_sgm,
  check_rdp_event,
  rdp_curve_f64,
  rdp_unsupported,
  rdp_values_unsupported,
  register_rdp_check,
  register_rdp_refusal,
  register_rdp_rule,
)

__all__ = [
  "RULE_MODULES",
  "as_sgm",
  "check_rdp_event",
  "rdp_curve_f64",
  "rdp_unsupported",
  "rdp_values_unsupported",
  "register_rdp_check",
  "register_rdp_refusal",
  "register_rdp_rule",
]

#: The modules whose rules are registered once this module is loaded.
RULE_MODULES = (_mechanism_rules, _random_allocation, _sampling)
