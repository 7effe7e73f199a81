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
