"""One step of fixed-size batches under replace-one: the envelope pair as an engine producer.

A fixed-size (without replacement) Sampled Gaussian step under replace-one is
``C_gamma(G_{2 / sigma})``-DP (Dong, Roth, Su 2019, arXiv:1905.02383, Thm 4.2), whose
privacy profile is, at every real ``eps``, the larger of the remove and add profiles of
the Poisson pair at rate ``gamma`` and noise multiplier ``s = sigma / 2``
(``_fixed_size_pairs`` derives it). That profile is one symmetric pair: both adjacency
directions have it, so the engine composes one direction (``symmetric``).

So the producer is the Gaussian's, taken at its maximum: the curve is the larger of the
Gaussian producer's two curves and the loss support the union of its two supports. The
planning estimate of the moment-generating function is the envelope's own
(:func:`log_mgf`), not either direction's. The closed form of one step is the Sampled
Gaussian's larger direction.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import _discretize

__all__ = ["log_delta_curve", "log_mgf", "support"]


def log_delta_curve(eps, q, s, direction):
  """``log delta(eps)`` of the envelope, either direction (they are the same)."""
  del direction
  remove = _discretize.log_delta_curve(eps, q, s, "remove")
  add = _discretize.log_delta_curve(eps, q, s, "add")
  return jnp.maximum(remove, add)


# The planning estimate of the moment-generating function: the envelope's curve on this
# many points of its support, made a PMF by connect-the-dots, whose MGF is summed.
_MGF_GRID = 4096
# The support's tail cut for it (as the Gaussian's quadrature: 12 noise scales).
_MGF_Z = 12.0


def log_mgf(q, s, lam, points):
  """Planning estimate of ``log E_P[e^{lam L}]`` of the envelope, any real ``lam``.

  The envelope's law is the remove direction's above 0 and the add direction's below,
  so neither direction's moment-generating function is the envelope's (planning the
  window's top from their maximum left the bound on the mass above it at 0.26% of delta
  over 3,000 steps). It is taken from the envelope's own curve instead: connect-the-dots
  on a uniform grid of its support gives a PMF that dominates it, whose transform is
  summed in log space. ``points`` (the Gaussian's quadrature size) is not used.
  """
  del points
  a, b = support(q, s, _MGF_Z, "remove")
  e = a + (b - a) * jnp.linspace(0.0, 1.0, _MGF_GRID)
  p, _ = _discretize.connect_the_dots_general(
    jnp.exp(log_delta_curve(e, q, s, "remove")), jnp.diff(e), float(_MGF_GRID)
  )
  pos = p > 0
  log_p = jnp.where(pos, jnp.log(jnp.where(pos, p, 1.0)), -jnp.inf)
  lam = jnp.asarray(lam)
  out = jax.nn.logsumexp(log_p + lam[..., None] * e, axis=-1)
  alpha = 1.0 + lam
  # Holder: E_Q[(P/Q)^alpha] >= 1 outside (0, 1) and <= 1 inside.
  return jnp.where((alpha > 0) & (alpha < 1), jnp.minimum(out, 0.0), jnp.maximum(out, 0.0))


def support(q, s, z, direction):
  """A loss interval holding all but ``2 Phi(-z)`` of either direction's mass."""
  del direction
  a_r, b_r = _discretize.support(q, s, z, "remove")
  a_a, b_a = _discretize.support(q, s, z, "add")
  return jnp.minimum(a_r, a_a), jnp.maximum(b_r, b_a)
