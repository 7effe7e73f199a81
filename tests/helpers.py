"""Shared test helpers."""

import json
import os
import subprocess
import sys

import jax
import numpy as np

DATA = os.path.join(os.path.dirname(__file__), "data")


def load_reference(name):
  """(q, sigma, alpha, log_a, log_a_minus_1, tags) arrays from a reference JSON."""
  with open(os.path.join(DATA, name)) as f:
    d = json.load(f)
  pts = d["points"]
  q = np.array([p["q"] for p in pts])
  s = np.array([p["sigma"] for p in pts])
  a = np.array([p["alpha"] for p in pts])
  la = np.array([float(p["log_a"]) for p in pts])
  lam1 = np.array([float(p["log_a_minus_1"]) for p in pts])
  tags = [p.get("tag", "") for p in pts]
  return q, s, a, la, lam1, tags


def variants(fn, n_args):
  """fn itself, under jax.jit, and under jax.vmap over a leading batch of 1.

  Each variant takes the same arguments and returns the same structure.
  """

  def vmapped(*args):
    batched = jax.vmap(fn)(*(np.asarray(a)[None] for a in args[:n_args]), *args[n_args:])
    return jax.tree_util.tree_map(lambda x: x[0], batched)

  return {"plain": fn, "jit": jax.jit(fn), "vmap": vmapped}


def run_fresh_python(script, env=None, timeout=600):
  """Runs ``script`` in a fresh interpreter that imports this checkout; returns stdout.

  The test session enables x64 (conftest), so checks of JAX's default
  configuration (x64 off) or of XLA flags need their own process. ``env``
  adds variables; JAX_ENABLE_X64 is removed.
  """
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  full = dict(os.environ, **(env or {}))
  full["PYTHONPATH"] = root + os.pathsep + full.get("PYTHONPATH", "")
  full.pop("JAX_ENABLE_X64", None)
  proc = subprocess.run(
    [sys.executable, "-c", script], env=full, capture_output=True, text=True, timeout=timeout
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout


def central_difference(f, x, h):
  """``(f(x + h) - f(x - h)) / (2 h)``: a derivative from function values only."""
  return (f(x + h) - f(x - h)) / (2 * h)
