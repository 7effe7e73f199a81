"""Precomputes dp_accounting PLD references for tests/test_pld_accuracy.py.

dp_accounting's connect-the-dots PLD accountant approaches the true epsilon from
above as its value_discretization_interval d shrinks (error ~ d^2). For each
configuration it is run at d = 2e-5 and d = 1e-5; the JSON stores both, so the
test can use the finer one as an upper reference and the extrapolation
``e(1e-5) - (e(2e-5) - e(1e-5)) / 3`` as an estimate of the truth.

None of these configurations was used to tune jaxrdp.pld (held out), except
the MNIST one, which is the documented calibration point.

Run: python tests/make_pld_reference.py  (a few minutes; writes tests/data/pld_reference.json)
"""

import json
import time
from pathlib import Path

import dp_accounting
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

CONFIGS = [
  # (q, sigma, steps, delta, held_out)
  (256 / 60000, 1.1, 14063, 1e-5, False),
  (0.01, 0.8, 1000, 1e-6, True),
  (0.05, 2.0, 3000, 1e-5, True),
  (0.2, 1.0, 100, 1e-3, True),
  (0.001, 3.0, 20000, 1e-9, True),
  (0.5, 4.0, 50, 1e-7, True),
  # the heavy-tailed corner of the standard grid (small q, small sigma)
  (0.001, 0.6, 10000, 1e-5, True),
]
INTERVALS = [2e-5, 1e-5]


def epsilon(q, sigma, steps, delta, d):
  acc = pld_privacy_accountant.PLDAccountant(
    dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=d
  )
  acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), int(steps))
  return acc.get_epsilon(delta)


def main():
  rows = []
  for q, sigma, steps, delta, held_out in CONFIGS:
    row = dict(q=q, sigma=sigma, steps=steps, delta=delta, held_out=held_out, epsilon={})
    for d in INTERVALS:
      t = time.time()
      row["epsilon"][repr(d)] = epsilon(q, sigma, steps, delta, d)
      print(
        q, sigma, steps, delta, d, row["epsilon"][repr(d)], f"{time.time() - t:.1f}s", flush=True
      )
    rows.append(row)
  out = Path(__file__).parent / "data" / "pld_reference.json"
  out.write_text(
    json.dumps(
      dict(
        source="dp_accounting " + dp_accounting.__version__
        if hasattr(dp_accounting, "__version__")
        else "dp_accounting",
        intervals=INTERVALS,
        configs=rows,
      ),
      indent=1,
    )
  )


if __name__ == "__main__":
  main()
