"""The derivative of the tight answers: the implicit function at the read point.

The tight epsilon solves ``delta(epsilon; q, sigma) = delta_target`` for the composed
PLD, so with ``D_x`` the partial derivatives of the curve at the answer,

  d epsilon = (d delta_target - D_q delta dq - D_sigma delta dsigma) / D_epsilon delta,

and the tight delta at a given epsilon moves as ``D_q delta dq + D_sigma delta dsigma +
D_epsilon delta d epsilon``. The partial derivatives come from one delta job per
direction at the answer, differentiated on its fixed grid
(:func:`._kernel.job_delta_partials`): a few forward calls' work, where
differentiating the whole computation runs back through every pass, FFT and search
of the driver. Rows of one step use the closed-form curve
(``jaxrdp.mechanisms.sgm_single_step_delta``), whose derivatives are exact.

Both bounds of the interval get the derivative of the tight value: they enclose it
within the accountant's tolerance, and it is what a caller differentiating the
epsilon means. Rows whose answer does not move with the arguments (nothing
released, an epsilon of 0, a rate floored or an epsilon capped at the grid's
limits) get 0; invalid rows NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._core.validation import is_concrete
from . import _single_step
from ._driver import delta_partials_of_rows

__all__ = ["answer_partials"]


def _one_step_log_partials(q, sigma, eps, family):
  """``log delta`` of one step (closed form, larger direction) and its derivatives in
  ``(q, sigma, eps)``, rows ``(B,)``."""

  def log_delta(q, sigma, eps):
    return _single_step.log_delta_max(eps, q, sigma, family)

  grad = jax.vmap(jax.value_and_grad(log_delta, argnums=(0, 1, 2)))
  value, (dq, ds, de) = grad(q, sigma, eps)
  return value, dq, ds, de


def answer_partials(q, sigma, steps, target, answer, mode, options, families):
  """Partial derivatives of the answers of rows of phases: ``(d/dq (B, P), d/dsigma
  (B, P), d/dtarget (B,))``.

  ``q, sigma, steps``: ``(B, P)`` and ``target``: ``(B,)``, as the driver runs them
  (regularized); ``answer``: ``(B,)``, the upper bounds returned (epsilon in
  ``"epsilon"`` mode, delta in ``"delta"`` mode). Rows without a usable read point
  get 0 (the caller sets the edge rows).
  """
  eps_mode = mode == "epsilon"
  usable = (answer > 0) & jnp.isfinite(answer) if eps_mode else jnp.isfinite(target)
  point = jnp.where(usable, answer if eps_mode else target, 1.0)
  if is_concrete(point):
    point = np.asarray(point)
  _, dq, ds, de = delta_partials_of_rows(q, sigma, steps, point, options, families)
  if eps_mode:
    # d epsilon = (d delta_target - D_q dq - D_sigma dsigma) / D_eps, with D_eps < 0.
    slope = jnp.where(de < 0, de, jnp.nan)[:, None]
    gq, gs, gt = -dq / slope, -ds / slope, 1.0 / slope[:, 0]
  else:
    gq, gs, gt = dq, ds, de
  closed = _single_step.closed_form(families)
  one = (steps[:, 0] == 1.0) if closed else jnp.zeros(q.shape[0], bool)
  if bool(np.any(np.asarray(one))) if is_concrete(one) else closed:
    log_d, lq, ls, le = _one_step_log_partials(
      jnp.where(one, q[:, 0], 0.5), jnp.where(one, sigma[:, 0], 1.0), point, families[0]
    )
    if eps_mode:
      # d log delta = d delta_target / delta_target at the answer.
      slope = jnp.where(le < 0, le, jnp.nan)
      o_q, o_s, o_t = -lq / slope, -ls / slope, 1.0 / (slope * target)
    else:
      value = jnp.exp(log_d)
      o_q, o_s, o_t = value * lq, value * ls, value * le
    gq = jnp.where(one[:, None], o_q[:, None], gq)
    gs = jnp.where(one[:, None], o_s[:, None], gs)
    gt = jnp.where(one, o_t, gt)
  zero = ~usable
  return (
    jnp.where(zero[:, None], 0.0, gq),
    jnp.where(zero[:, None], 0.0, gs),
    jnp.where(zero, 0.0, gt),
  )
