"""Test configuration: float64 and strict dtype promotion for the tests only.

The library itself never touches these flags; test_precision.py checks the
x64-disabled behaviour in a subprocess.
"""

import os
import sys

import jax

jax.config.update("jax_enable_x64", True)

# The mpmath oracle lives beside the tests.
sys.path.insert(0, os.path.dirname(__file__))

# Heaviest files first (by single-worker time, pytest --durations on the 2-core
# machine, 2026-11-22; mostly XLA compilation). pytest-xdist's --dist loadfile hands whole files to
# the two workers in collection order, so starting with the long ones keeps one
# worker from finishing minutes after the other.
_HEAVY_FIRST = (
  "test_calibration.py",
  "test_grad_x64_off.py",
  "test_dpsgd.py",
  "test_cli.py",
  "test_notebook_quickstart.py",
  "test_bench_scripts.py",
  "test_notebooks_reproductions.py",
  "test_notebook_dpsgd.py",
  "test_sgm.py",
  "test_precision.py",
  "test_training.py",
)


def pytest_collection_modifyitems(config, items):
  del config
  rank = {name: i for i, name in enumerate(_HEAVY_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept
