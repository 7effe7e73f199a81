"""epsilon of the same DP-SGD run under each batching scheme (docs/guide/guarantees.md).

The digits example's run (n = 1,437 training examples, batch 129 = q n with
q = 0.09, sigma = 1.5, 330 steps = 30 epochs, delta = 1e-5) and an MNIST-sized
one (n = 60,000, batch 256, sigma = 1.1, 14,063 steps = 60 epochs), accounted as

* Poisson with a capacity (``PoissonSampler``): the SGM, add/remove, plus the
  truncation term at ``default_capacity``;
* random allocation, one of the ``t = round(1 / q)`` steps of each epoch per example
  (``RandomAllocationSampler``, k = 1): add/remove, for the same number of epochs;
* fixed-size batches without replacement (``FixedSizeSampler``): replace-one
  (sensitivity 2C, multiplier sigma / 2);
* shuffled epochs (``ShuffleSampler``): add/remove, no amplification by sampling in
  the upper bounds, and the certified lower bound of Chua et al. 2024
  (arXiv:2403.17673) on the true epsilon of shuffled DP-SGD;
* and, for contrast, the Poisson number quoted for shuffled batches (wrong: below the
  shuffled run's certified lower bound).

Each row gives the Renyi-DP epsilon (``accountant="rdp"``), the tight epsilon
(``accountant="pld"``, an upper bound) and a certified lower bound of the true
epsilon of that scheme: the true value lies in [lower, tight].

Run: python examples/sampling_schemes.py   (output committed in
docs/sampling_schemes.txt)
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

import jaxrdp
from jaxrdp.train import default_capacity

RUNS = {
  "digits": dict(n=1437, batch=129, sigma=1.5, steps=330, delta=1e-5),
  "mnist": dict(n=60000, batch=256, sigma=1.1, steps=14063, delta=1e-5),
}


def schemes(n, batch, sigma, steps, delta):
  """``[(scheme, relation, keywords of dpsgd_epsilon)]`` for one run."""
  q = batch / n
  cap = default_capacity(n, q, steps, delta)
  t = round(n / batch)  # steps per epoch of random allocation
  epochs = round(steps * q)
  return [
    (
      f"Poisson, capacity {cap} (+ truncation term)",
      "add/remove",
      dict(q=q, steps=steps, capacity=cap, dataset_size=n),
    ),
    (
      f"random allocation, {t} steps per epoch",
      "add/remove",
      dict(q=1 / t, steps=t * epochs, sampling="allocation"),
    ),
    ("fixed-size, without replacement", "replace-one", dict(q=q, steps=steps, sampling="fixed")),
    ("shuffled epochs", "add/remove", dict(q=q, steps=steps, sampling="shuffle")),
  ]


def rows(n, batch, sigma, steps, delta):
  """``[(scheme, relation, rdp, tight, lower)]`` for one run, and the Poisson row quoted
  for shuffling."""
  out = []
  for scheme, relation, kw in schemes(n, batch, sigma, steps, delta):
    rdp = jaxrdp.dpsgd_epsilon(sigma=sigma, delta=delta, **kw)
    pld = jaxrdp.dpsgd_epsilon(sigma=sigma, delta=delta, accountant="pld", **kw)
    out.append((scheme, relation, float(rdp.epsilon), float(pld.epsilon), float(pld.epsilon_lower)))
  poisson = out[0]
  out.append(("(wrong) Poisson epsilon quoted for shuffling", "add/remove", *poisson[2:4], None))
  return out


def _printed(x, rounding) -> str:
  """``x`` to 3 decimals, rounded exactly in ``rounding``'s direction (an upper bound is
  printed rounded up, a lower bound down, so that neither claims more than it holds)."""
  return f"{Decimal(x).quantize(Decimal('0.001'), rounding=rounding):>8}"


def main() -> None:
  for name, cfg in RUNS.items():
    print(
      f"{name}: n={cfg['n']} batch={cfg['batch']} sigma={cfg['sigma']} "
      f"steps={cfg['steps']} delta={cfg['delta']:g}"
    )
    print(f"  {'scheme':46s} {'relation':11s} {'RDP':>8s} {'tight':>8s} {'lower':>8s}")
    for scheme, relation, rdp, tight, lower in rows(**cfg):
      low = "" if lower is None else _printed(lower, ROUND_FLOOR)
      up = f"{_printed(rdp, ROUND_CEILING)} {_printed(tight, ROUND_CEILING)}"
      print(f"  {scheme:46s} {relation:11s} {up} {low}")


if __name__ == "__main__":
  main()
