"""What both DP-SGD steps do once a step is allowed: one noisy update of the train state.

The full-mask step (:func:`jaxrdp.train.make_dpsgd_step` with ``q``) and the sampler
step (``jaxrdp.train._sampled_step``) differ in how they sample and what their
accountant composes; the clipped, noised gradient (:func:`jaxrdp.train.dp_gradient`;
Abadi et al. 2016, arXiv:1607.00133, Algorithm 1), the optimizer update and the
bookkeeping of the state are the same, and live here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ._dp_gradient import dp_gradient

__all__ = ["apply_updates", "check_state_orders", "noisy_update"]

PyTree = Any


def apply_updates(params: PyTree, updates: PyTree) -> PyTree:
  """params + updates, keeping each parameter's dtype (as optax.apply_updates)."""
  return jax.tree.map(lambda p, u: (p + u).astype(jnp.asarray(p).dtype), params, updates)


def check_state_orders(state, orders) -> None:
  """Raises ValueError if the state's accountant has other orders than the step's.

  The orders are static metadata of the accountant state, so this runs when the
  step is traced, never at run time."""
  if state.accountant.orders != orders:
    raise ValueError(
      f"the state's accountant has {len(state.accountant.orders)} orders, other than "
      f"the {len(orders)} orders this step was built with"
    )


def noisy_update(
  loss_fn: Callable,
  optimizer: Any,
  state,
  batch: PyTree,
  mask,
  k_noise: jax.Array,
  key: jax.Array,
  *,
  clip_norm,
  sigma,
  expected_batch_size,
):
  """``state`` after one DP-SGD update on the masked ``batch``.

  The gradient is :func:`jaxrdp.train.dp_gradient` (noise from ``k_noise``), the
  update is ``optimizer``'s; the state takes the new parameters, optimizer state
  and PRNG ``key``, and counts the step.
  """
  grads = dp_gradient(
    loss_fn,
    state.params,
    batch,
    mask,
    k_noise,
    clip_norm=clip_norm,
    noise_multiplier=sigma,
    expected_batch_size=expected_batch_size,
  )
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  return state._replace(
    params=apply_updates(state.params, updates),
    opt_state=opt_state,
    key=key,
    step=state.step + 1,
  )
