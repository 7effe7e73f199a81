"""Typed use of the public API: pyright must accept this file (tests/test_typing.py)."""

from typing import TYPE_CHECKING, Literal

import jaxrdp
from jaxrdp.accountants import EpsilonBracket
from jaxrdp.events import Gaussian, PoissonSampled, SelfComposed
from jaxrdp.pld import PldDelta, PldEpsilon
from jaxrdp.rdp import DeltaResult, EpsilonResult

if TYPE_CHECKING:  # checked, never run (typing_extensions: the stubs pyright bundles)
  from typing_extensions import assert_type, reveal_type

event = SelfComposed(PoissonSampled(0.01, Gaussian(sigma=1.0)), 1000)
g = Gaussian(sigma=2.0)
sigma = g.sigma

res = jaxrdp.dpsgd_epsilon(0.01, 1.0, 1000, 1e-5)
reveal_type(res)
assert_type(res, EpsilonResult)
eps, order = res.epsilon, res.order

shuffled = jaxrdp.dpsgd_epsilon(0.01, 1.0, 1000, 1e-5, sampling="shuffle")
assert_type(shuffled, EpsilonBracket)
low = shuffled.epsilon_lower

tight = jaxrdp.dpsgd_epsilon(0.01, 1.0, 1000, 1e-5, accountant="pld")
assert_type(tight, PldEpsilon)
tight_low = tight.epsilon_lower

assert_type(jaxrdp.dpsgd_delta(0.01, 1.0, 1000, 1.0), DeltaResult)
assert_type(jaxrdp.dpsgd_delta(0.01, 1.0, 1000, 1.0, accountant="pld"), PldDelta)


def scheme(name: Literal["fixed", "allocation"]) -> EpsilonResult:
  return jaxrdp.dpsgd_epsilon(0.01, 1.0, 1000, 1e-5, sampling=name)
