"""epsilon of the same DP-SGD run under each batching scheme (the README's table).

The digits example's run (n = 1,437 training examples, batch 129 = q n with
q = 0.09, sigma = 1.5, 330 steps = 30 epochs, delta = 1e-5) and an MNIST-sized
one (n = 60,000, batch 256, sigma = 1.1, 14,063 steps = 60 epochs), accounted as

* Poisson with a capacity (``PoissonSampler``): the SGM, add/remove, plus the
  truncation term at ``default_capacity``;
* fixed-size batches without replacement (``FixedSizeSampler``): WBK19 Thm 27,
  replace-one (sensitivity 2C, multiplier sigma / 2);
* shuffled epochs (``ShuffleSampler``): no amplification, one Gaussian mechanism
  per example and epoch, add/remove (and replace-one);
* and, for contrast, the Poisson number quoted for shuffled batches (wrong).

Run: python examples/sampling_schemes.py   (output committed in
docs/sampling_schemes.txt)
"""

from __future__ import annotations

import jaxrdp
from jaxrdp.train import default_capacity

RUNS = {
  "digits": dict(n=1437, batch=129, sigma=1.5, steps=330, delta=1e-5),
  "mnist": dict(n=60000, batch=256, sigma=1.1, steps=14063, delta=1e-5),
}


def rows(n, batch, sigma, steps, delta):
  q = batch / n
  cap = default_capacity(n, q, steps, delta)
  eps = lambda **kw: float(jaxrdp.dpsgd_epsilon(q, sigma, steps, delta, **kw).epsilon)
  return [
    (
      f"poisson, capacity {cap} (+ truncation term)",
      "add_remove",
      eps(capacity=cap, dataset_size=n),
    ),
    ("fixed-size, without replacement", "replace_one", eps(sampling="fixed")),
    ("shuffled epochs, no amplification", "add_remove", eps(sampling="shuffle")),
    (
      "shuffled epochs, no amplification",
      "replace_one",
      eps(sampling="shuffle", relation="replace_one"),
    ),
    ("(wrong) Poisson epsilon quoted for shuffling", "add_remove", eps()),
  ]


def main() -> None:
  for name, cfg in RUNS.items():
    print(
      f"{name}: n={cfg['n']} batch={cfg['batch']} sigma={cfg['sigma']} "
      f"steps={cfg['steps']} delta={cfg['delta']:g}"
    )
    for scheme, relation, e in rows(**cfg):
      print(f"  {scheme:46s} {relation:12s} epsilon={e:.3f}")


if __name__ == "__main__":
  main()
