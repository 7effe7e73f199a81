"""Precomputes the Laplace-inversion references of tests/test_fixed_size_pld.py.

``tests/fixed_size_oracle.py`` (no jaxrdp code) gives the tight epsilon, or delta, of
``steps`` fixed-size Sampled Gaussian steps under replace-one by Laplace inversion of
the moment-generating function of the one-step loss. For each configuration the JSON
stores the answer at two resolutions of the inversion (``refine`` 1 and 2; the test
requires them to agree to 1e-9). The epsilon's contour is centred at a fixed guess
(``guess``, near the answer, which does not depend on it), not at any jaxrdp output.

Run: python tests/make_fixed_size_reference.py  (about 20 s; writes
tests/data/fixed_size_reference.json)
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import fixed_size_oracle as oracle

# (q, sigma, steps, delta, guess): test_many_steps_against_the_laplace_oracle and
# test_upper_bound_does_not_rise_when_the_grid_is_refined (0.05, 2.0, 300), and
# test_mnist_bracket_against_the_laplace_oracle (the last).
EPSILON = [
  (0.05, 2.0, 300, 1e-5, 6.71),
  (0.01, 1.0, 1000, 1e-5, 14.8),
  (0.01, 0.8, 300, 1e-5, 18.0),
  (0.1, 1.5, 300, 1e-5, 25.9),
  (0.05, 1.1, 3000, 1e-5, 120.19),
  (256 / 60000, 1.1, 14063, 1e-5, 18.45),
]
# (q, sigma, steps, epsilon): test_many_steps_delta_against_the_laplace_oracle.
DELTA = [(0.05, 2.0, 300, 6.7)]


def main():
  rows = []
  for q, sigma, steps, delta, guess in EPSILON:
    t = time.time()
    row = dict(query="epsilon", q=q, sigma=sigma, steps=steps, delta=delta, guess=guess)
    row["refine"] = {
      str(r): oracle.epsilon(q, sigma, steps, delta, guess, refine=r) for r in (1, 2)
    }
    rows.append(row)
    print(row, f"{time.time() - t:.1f} s", flush=True)
  for q, sigma, steps, eps in DELTA:
    t = time.time()
    row = dict(query="delta", q=q, sigma=sigma, steps=steps, epsilon=eps)
    row["refine"] = {str(r): oracle.delta(q, sigma, steps, eps, refine=r) for r in (1, 2)}
    rows.append(row)
    print(row, f"{time.time() - t:.1f} s", flush=True)
  out = Path(__file__).parent / "data" / "fixed_size_reference.json"
  out.write_text(
    json.dumps({"source": "tests/fixed_size_oracle.py", "rows": rows}, indent=1) + "\n"
  )


if __name__ == "__main__":
  main()
