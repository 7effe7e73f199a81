"""What private hyperparameter tuning costs (the user guide's tuning section).

One training run is DP-SGD on MNIST-sized data (batch 256 of 60,000, noise multiplier
1.1, 60 epochs = 14,063 steps, delta = 1e-5). Tuning tries about 20 hyperparameter
settings and releases only the best run. This prints, as a Markdown table, the
epsilon (Renyi DP accountant, jaxrdp's default orders) of

* one run;
* 20 runs all released (composition: what tuning costs when every run is published,
  which also bounds releasing the best of exactly 20 runs);
* the best of a random number K of runs, mean 20, for each law of K that
  dp_accounting's RepeatAndSelectDpEvent supports (Papernot and Steinke 2022,
  arXiv:2110.03620).

Run: python examples/hyperparameter_tuning.py   (output committed in
docs/hyperparameter_tuning.txt; under a minute on a CPU, mostly compilation)
"""

from __future__ import annotations

import math

import jaxrdp
from jaxrdp.events import Gaussian, PoissonSampled, RepeatAndSelect, SelfComposed

Q, SIGMA, STEPS, DELTA, TRIALS = 256 / 60000, 1.1, 14063, 1e-5, 20

LAWS = [
  ("Poisson", math.inf),
  ("truncated negative binomial, shape 2", 2.0),
  ("geometric", 1.0),
  ("truncated negative binomial, shape 0.5", 0.5),
  ("logarithmic", 0.0),
]


def tuning_costs() -> list[tuple[str, float]]:
  """(what is released, epsilon) for one run, 20 composed runs and each law of K."""
  run = SelfComposed(PoissonSampled(Q, Gaussian(SIGMA)), STEPS)

  def eps(event):
    return float(jaxrdp.epsilon_from_event(event, DELTA).epsilon)

  rows = [
    ("one run", eps(run)),
    (f"{TRIALS} runs, all released (composition)", eps(SelfComposed(run, TRIALS))),
  ]
  for name, shape in LAWS:
    rows.append(
      (f"best of K runs, K {name}, mean {TRIALS}", eps(RepeatAndSelect(run, TRIALS, shape)))
    )
  return rows


def main():
  rows = tuning_costs()
  one = rows[0][1]
  print(f"| released | epsilon at delta = {DELTA:g} | times one run |")
  print("| --- | --- | --- |")
  for name, e in rows:
    print(f"| {name} | {e:.2f} | {e / one:.2f} |")


if __name__ == "__main__":
  main()
