"""The derivative of the tight epsilon: its cost in forward calls, and its accuracy.

``jax.grad`` of ``dpsgd_epsilon(..., accountant="pld").epsilon`` in sigma, called as a
user calls it (eagerly, after one warming call), against the forward call it
differentiates, in the same process: the two alternate (forward, then grad,
``--repeats`` rounds) and the medians are compared. The ratio is the cost of a
derivative in forward calls. Also timed: the first call of each (compile or load of
the programs) and ``jax.jit(jax.grad(...))``, compile and warm.

Correctness first: the derivative must agree with a central difference (step 1e-4
in sigma) of the tight epsilon computed at ``rtol=1e-7`` within 1e-3 relative.

Configuration: MNIST (q = 256/60000, sigma = 1.1, 14063 steps, delta = 1e-5).
Writes benchmarks/results/bench_pld_grad.json.
Usage: python benchmarks/bench_pld_grad.py [--repeats 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import numpy as np
from _provenance import stamp

import jaxrdp

Q, SIGMA, STEPS, DELTA = 256 / 60000, 1.1, 14063, 1e-5


def epsilon(sigma, rtol=1e-5):
  accountant = "pld" if rtol == 1e-5 else jaxrdp.accountants.PldAccountant(rtol=rtol)
  return jaxrdp.dpsgd_epsilon(Q, sigma, STEPS, DELTA, accountant=accountant).epsilon


def timed(fn):
  start = time.perf_counter()
  out = jax.block_until_ready(fn())
  return time.perf_counter() - start, out


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument(
    "--json", default=str(Path(__file__).parent / "results" / "bench_pld_grad.json")
  )
  args = parser.parse_args()

  grad = jax.grad(epsilon)
  first_forward, value = timed(lambda: epsilon(SIGMA))
  first_grad, g = timed(lambda: grad(SIGMA))
  h = 1e-4
  fd = (float(epsilon(SIGMA + h, rtol=1e-7)) - float(epsilon(SIGMA - h, rtol=1e-7))) / (2 * h)
  rel = abs(float(g) - fd) / abs(fd)
  print(
    f"epsilon {float(value):.6f}  d/dsigma {float(g):.6f}  central difference {fd:.6f}  rel {rel:.1e}"
  )
  if not rel <= 1e-3:
    raise SystemExit(f"the derivative is off by {rel:.2e} relative: not timed")

  forward, backward = [], []
  for _ in range(args.repeats):
    forward.append(timed(lambda: epsilon(SIGMA))[0])
    backward.append(timed(lambda: grad(SIGMA))[0])
  jit_grad = jax.jit(grad)
  jit_compile, g_jit = timed(lambda: jit_grad(SIGMA))
  jit_warm = statistics.median(timed(lambda: jit_grad(SIGMA))[0] for _ in range(args.repeats))
  fwd, bwd = statistics.median(forward), statistics.median(backward)
  results = {
    "configuration": {"q": Q, "sigma": SIGMA, "steps": STEPS, "delta": DELTA},
    "epsilon": float(value),
    "derivative": float(g),
    "central_difference": fd,
    "relative_error": rel,
    "jit_derivative": float(g_jit),
    "first_forward_s": first_forward,
    "first_grad_s": first_grad,
    "forward_s": fwd,
    "grad_s": bwd,
    "grad_in_forward_calls": bwd / fwd,
    "forward_runs_s": forward,
    "grad_runs_s": backward,
    "jit_grad_compile_s": jit_compile,
    "jit_grad_s": jit_warm,
    "repeats": args.repeats,
  }
  print(
    f"forward {fwd:.3f} s, grad {bwd:.3f} s: {bwd / fwd:.2f} forward calls; "
    f"jit(grad) compile {jit_compile:.1f} s, warm {jit_warm:.3f} s"
  )
  assert np.isfinite(float(g_jit))
  Path(args.json).write_text(json.dumps(stamp(results, __file__), indent=1) + "\n")


if __name__ == "__main__":
  main()
