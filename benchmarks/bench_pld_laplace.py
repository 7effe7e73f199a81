"""Benchmark: Laplace grids on the tight engine against the generic path, in one process.

The Poisson-subsampled Laplace mechanism composes on the tight engine (one call per
grid, one compiled program per FFT length) since 2026-12-08; before, the generic path
composed it cell by cell on the host. Both remain callable, so this script times both
in the same process: the engine's first call (compilation included) and a warm call
at new values, and the generic path over the same cells. It first checks correctness:
every cell of the engine within the default rtol of dp_accounting's PLD at a fine
interval (its pessimistic estimate, an upper bound of the truth), and never below its
optimistic estimate.

Run: python benchmarks/bench_pld_laplace.py [--small] [--json results/bench_pld_laplace.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import time

import jax
import numpy as np

import jaxrdp
from jaxrdp.events import Laplace, PoissonSampled, SelfComposed
from jaxrdp.pld import _generic

DELTA = 1e-5


def _event(q, scale, steps):
  return SelfComposed(PoissonSampled(q, Laplace(scale)), steps)


def _dp_accounting(q, scale, steps):
  from dp_accounting.pld import privacy_loss_distribution as pld

  out = []
  for pessimistic in (False, True):
    dist = pld.from_laplace_mechanism(
      scale,
      sampling_prob=q,
      value_discretization_interval=1e-5,
      pessimistic_estimate=pessimistic,
      use_connect_dots=pessimistic,  # (its optimistic estimate is privacy buckets)
    )
    out.append(dist.self_compose(int(steps)).get_epsilon_for_delta(DELTA))
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--small", action="store_true", help="a 2-cell grid (the test's)")
  parser.add_argument("--json", type=pathlib.Path, help="write the results here")
  args = parser.parse_args()
  jax.config.update("jax_enable_x64", True)
  if args.small:
    grid = [np.array([0.1]), np.array([1.0]), np.array([100.0, 300.0])]
  else:
    grid = [np.array([0.01, 0.1]), np.array([0.5, 1.0, 4.0]), np.array([100.0, 1000.0])]
  q, scale, steps = np.meshgrid(*grid, indexing="ij")
  acct = jaxrdp.accountants.PldAccountant()

  start = time.perf_counter()
  engine = np.asarray(acct.epsilon(_event(q, scale, steps), DELTA).epsilon)
  first = time.perf_counter() - start
  # Correctness first: each cell against dp_accounting's bracket.
  for i in np.ndindex(q.shape):
    optimistic, pessimistic = _dp_accounting(q[i], scale[i], steps[i])
    assert optimistic <= engine[i] <= pessimistic * (1 + acct.rtol), (i, engine[i], pessimistic)
  start = time.perf_counter()
  np.asarray(acct.epsilon(_event(q, scale * (1 + 1e-9), steps), DELTA).epsilon)
  warm = time.perf_counter() - start
  start = time.perf_counter()
  generic = np.array(
    [
      _generic.generic_epsilon(
        _event(float(q[i]), float(scale[i]), float(steps[i])), DELTA, acct.rtol, acct.max_grid_size
      )[0]
      for i in np.ndindex(q.shape)
    ]
  ).reshape(q.shape)
  host = time.perf_counter() - start
  result = {
    "cells": int(q.size),
    "engine_first_s": first,
    "engine_warm_s": warm,
    "generic_s": host,
    "speedup_warm": host / warm,
    "max_relative_difference": float(np.max(np.abs(engine - generic) / generic)),
    "machine": f"{platform.machine()}, {jax.devices()[0].platform}",
    "date": time.strftime("%Y-%m-%d"),
  }
  print(json.dumps(result, indent=1))
  if args.json:
    args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
  main()
