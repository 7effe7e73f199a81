"""One step of fixed-size batches under replace-one: the envelope pair as an engine producer.

A fixed-size (without replacement) Sampled Gaussian step under replace-one is
``C_gamma(G_{2 / sigma})``-DP (Dong, Roth, Su 2019, arXiv:1905.02383, Thm 4.2), whose
privacy profile is, at every real ``eps``, the larger of the remove and add profiles of
the Poisson pair at rate ``gamma`` and noise multiplier ``s = sigma / 2``
(``_fixed_size_pairs`` derives it). That profile is one symmetric pair: both adjacency
directions have it, so the engine composes one direction (``symmetric``).

So the producer is the Gaussian's, taken at its maximum: the curve is the larger of the
Gaussian producer's two curves, the loss support the union of its two supports, and
the planning estimate of the moment-generating function the larger of the two
directions' (a symmetric pair's satisfies ``M(nu) = M(-1 - nu)``; only the plan uses
it). The closed form of one step is the Sampled Gaussian's larger direction.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import _discretize

__all__ = ["log_delta_curve", "log_mgf", "support"]


def log_delta_curve(eps, q, s, direction):
  """``log delta(eps)`` of the envelope, either direction (they are the same)."""
  del direction
  remove = _discretize.log_delta_curve(eps, q, s, "remove")
  add = _discretize.log_delta_curve(eps, q, s, "add")
  return jnp.maximum(remove, add)


def log_mgf(q, s, lam, points):
  """Planning estimate of ``log E_P[e^{lam L}]`` of the envelope (see the module docstring)."""
  return jnp.maximum(
    _discretize.log_mgf(q, s, lam, points), _discretize.log_mgf(q, s, -1.0 - lam, points)
  )


def support(q, s, z, direction):
  """A loss interval holding all but ``2 Phi(-z)`` of either direction's mass."""
  del direction
  a_r, b_r = _discretize.support(q, s, z, "remove")
  a_a, b_a = _discretize.support(q, s, z, "add")
  return jnp.minimum(a_r, a_a), jnp.maximum(b_r, b_a)
