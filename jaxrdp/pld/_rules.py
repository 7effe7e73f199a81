"""Every rule of the generic discrete-PLD path, read from one module.

The PLD accountant (``_event_accountant``) asks the generic path about events through
this module. The path (``_generic``) holds the registry and the pairs of the built-in
leaf types; the modules imported below register the rules of the others:

* ``_fixed_size_pairs``: fixed-size sampled Gaussian batches under replace-one;
* ``_allocation_rule``: random allocation of Gaussian mechanisms.

No module of rules imports this one, so the rules load in one direction only.
"""

from __future__ import annotations

from . import _allocation_rule, _fixed_size_pairs
from ._generic import (
  event_steps,
  generic_delta,
  generic_epsilon,
  generic_unsupported,
  register_generic_rule,
)

__all__ = [
  "RULE_MODULES",
  "event_steps",
  "generic_delta",
  "generic_epsilon",
  "generic_unsupported",
  "register_generic_rule",
]

#: The modules whose rules are registered once this module is loaded.
RULE_MODULES = (_allocation_rule, _fixed_size_pairs)
