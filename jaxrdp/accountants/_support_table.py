"""Which accountant accounts which event: a table generated from the accountants' own answers.

Each event type of :mod:`jaxrdp.events` has a representative instance here (several
for the types whose support depends on their structure: what they wrap, their
relation), and every registered accountant is asked ``unsupported(event)``. The user
guide's table (``docs/guide/event_support.md``) is this module's output, and
``tests/test_event_support_table.py`` regenerates it and compares, so it cannot drift
from the code. ``python -m jaxrdp.accountants._support_table PATH`` rewrites the page.
"""

from __future__ import annotations

import sys

from .. import events as E
from ._protocol import get_accountant, registered_accountants

__all__ = ["EXAMPLES", "support_rows", "support_table", "support_page"]

_G = E.Gaussian(1.0)

#: (label, representative event) per event type and structural variant.
EXAMPLES = [
  ("Gaussian", _G),
  ("Laplace", E.Laplace(1.0)),
  ("RandomizedResponse (binary)", E.RandomizedResponse(0.7)),
  ("KaryRandomizedResponse", E.KaryRandomizedResponse(0.3, 10.0)),
  ("PoissonSampled(Gaussian), add/remove", E.PoissonSampled(0.01, _G)),
  (
    "PoissonSampled(Gaussians composed on the sample)",
    E.PoissonSampled(0.01, E.Composed((_G, _G))),
  ),
  ("PoissonSampled(Gaussian), replace-one", E.PoissonSampled(0.01, _G, "replace_one")),
  ("PoissonSampled(Laplace), add/remove", E.PoissonSampled(0.01, E.Laplace(1.0))),
  ("PoissonSampled(ZCDp), add/remove", E.PoissonSampled(0.01, E.ZCDp(0.1))),
  (
    "PoissonSampled(KaryRandomizedResponse)",
    E.PoissonSampled(0.01, E.KaryRandomizedResponse(0.3, 10.0)),
  ),
  ("FixedSizeSampled(Gaussian), replace-one", E.FixedSizeSampled(0.01, _G)),
  ("ShuffledEpochs(Gaussian)", E.ShuffledEpochs(1.0, _G)),
  ("RandomAllocation(Gaussian)", E.RandomAllocation(0.1, _G, 10.0)),
  ("SelfComposed", E.SelfComposed(_G, 3.0)),
  ("Composed", E.Composed((_G, E.PoissonSampled(0.01, _G)))),
  ("NoOp", E.NoOp()),
  ("NonPrivate", E.NonPrivate()),
  ("ZCDp", E.ZCDp(0.1)),
  ("DiscreteGaussian", E.DiscreteGaussian(1.0)),
  ("DiscreteLaplace", E.DiscreteLaplace(1.0)),
  ("ExponentialMechanism", E.ExponentialMechanism(1.0)),
  ("PermuteAndFlip", E.PermuteAndFlip(1.0)),
  ("EpsilonDelta (delta = 0)", E.EpsilonDelta(1.0)),
  ("EpsilonDelta (delta > 0)", E.EpsilonDelta(1.0, 1e-6)),
  (
    "PoissonSampled(EpsilonDelta (delta > 0))",
    E.PoissonSampled(0.01, E.EpsilonDelta(1.0, 1e-6)),
  ),
  ("SingleEpochTreeAggregation", E.SingleEpochTreeAggregation(1.0, 100.0)),
  ("RepeatAndSelect", E.RepeatAndSelect(_G, 10.0, 1.0)),
  ("MixtureOfGaussians", E.MixtureOfGaussians(1.0, (0.0, 1.0), (0.5, 0.5))),
  ("TruncatedSubsampledGaussian", E.TruncatedSubsampledGaussian(1000, 0.1, 200, 1.0)),
  (
    "PoissonSampled(TruncatedSubsampledGaussian)",
    E.PoissonSampled(0.01, E.TruncatedSubsampledGaussian(1000, 0.1, 200, 1.0)),
  ),
]


def support_rows() -> list[tuple[str, dict[str, str | None]]]:
  """``[(label, {accountant name: None if supported else why not})]`` for :data:`EXAMPLES`."""
  names = registered_accountants()
  return [(label, {n: get_accountant(n).unsupported(ev) for n in names}) for label, ev in EXAMPLES]


def support_table() -> str:
  """The markdown table of :func:`support_rows` (yes, or what is missing)."""
  names = registered_accountants()
  lines = [
    "| event | " + " | ".join(f"`accountant={n!r}`" for n in names) + " |",
    "| --- | " + " | ".join("---" for _ in names) + " |",
  ]
  for label, answers in support_rows():
    cells = ["yes" if answers[n] is None else "no" for n in names]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


_HEADER = """# Which accountant accounts which event

Generated from the accountants' own answers (`supports`) by
`python -m jaxrdp.accountants._support_table docs/guide/event_support.md`; a test
regenerates it, so it matches the code. "yes": the accountant answers the event (exactly or with a certified bound, as
each event's documentation states); "no": it refuses it, with a message naming the
accountants that can. Compositions (`SelfComposed`, `Composed`) are supported when
every part is.

The Renyi-DP accountant pays two events beside its curve, where they are composed
(not under sampling or selection): an `EpsilonDelta` with delta > 0, through its
decomposition into a pure-DP part and a revealing branch of probability delta
(Kairouz, Oh and Viswanath 2015, arXiv:1311.0776), and a `TruncatedSubsampledGaussian`,
as the Poisson-sampled Gaussian it truncates plus the probability that a batch
overflows (a total-variation term, `jaxrdp.train.truncation_delta`). Both are sound
bounds; the tight accountant is tighter on both. The accountant's state carries the
two terms (`RdpState.log_survival`, `RdpState.eta`) once such an event is composed;
to compose them inside `jax.lax.scan`, whose carry keeps its structure, start from
`RdpAccountant().init(additive=True)`.

"""


def support_page() -> str:
  """The user guide's page: a short header and :func:`support_table`."""
  return _HEADER + support_table()


def main() -> None:
  if len(sys.argv) != 2:
    sys.exit("usage: python -m jaxrdp.accountants._support_table PATH")
  with open(sys.argv[1], "w", encoding="utf-8") as f:
    f.write(support_page())


if __name__ == "__main__":
  main()
