"""Tight, certified accounting of the Sampled Gaussian Mechanism by privacy-loss distributions.

``pld_epsilon(q, sigma, steps, delta)`` and ``pld_delta(q, sigma, steps, epsilon)``
(and ``*_phases`` for heterogeneous schedules) numerically compose the
privacy-loss distribution (PLD) of Poisson-subsampled Gaussian steps and return
a certified interval ``[lower, upper]`` around the true add/remove value.
They broadcast over arrays, run whole batches in one jitted program, and work
under ``jax.jit``, ``jax.vmap`` and ``jax.grad``.

Construction (per configuration, both adjacency directions):

1. *Plan* (``_grid``): the tilt ``lam`` and the window ``[lo, hi]`` from Chernoff
   bounds on the moment-generating function of the loss
   ``E_P[e^{lam L}] = exp(lam D_{1+lam})``; a spacing ``d`` per configuration
   and one static FFT length ``n`` (power of two) per batch.
2. *Discretize* (``_discretize``): connect-the-dots PMF of one step on
   ``a + i d`` (Doroshenko et al. 2022, arXiv:2207.04380) from the closed-form
   single-step hockey-stick curve in log space.
3. *Tilt and compose* (``_compose``): ``p_s e^{lam s} / M(lam)``, then the
   product of spectra ``prod_j c_j^{T_j}`` and one inverse real FFT.
4. *Read* (``_read``): ``delta(eps) = p_inf + M^T sum_{s>eps} r_s e^{-lam s}
   (1 - e^{eps - s})`` with reverse cumulative log-sum-exps, and the exact
   solve of ``A - e^eps B = delta`` inside the crossing cell.

Error model (each term is bounded, none is dropped):

* Discretization -- connect-the-dots dominates the exact PLD (Doroshenko et al.
  2022, Thm 3.2), and composition preserves dominance, so it only errs upward.
  Its size is ``~ T d^2 (1 + lam) / 8`` in epsilon (a mean-preserving spread
  of ``e^{-L}`` within each cell); the grid is chosen from this model to meet
  ``rtol``.
* Truncation -- one step: mass below the support is moved up to its first point
  and mass above it goes to ``+inf`` (connect-the-dots does both), so nothing
  is dropped. Composition: the mass above the window is bounded by Chernoff on
  the *discrete* single-step MGF, ``P(L_T > hi) <= exp(sum_j T_j log M_j(nu) -
  nu hi)``, and added to delta, with the composed ``+inf`` mass
  ``1 - prod_j (1 - p_inf,j)^{T_j}``.
* Wrap-around -- the circular FFT folds out-of-window mass back into the window;
  this only adds mass (upper bound stays valid); the lower bound subtracts the
  Chernoff bound of the tilted out-of-window mass.
* FFT round-off -- an a-posteriori bound from Higham's FFT error theorem
  (Accuracy and Stability of Numerical Algorithms, Thm 24.2) through the power
  ``c^T`` and the inverse transform (``_compose``); thanks to the tilt it is
  relative to delta, so tiny deltas (1e-15) stay exact instead of hitting the
  float64 noise floor.
* Lower bound -- coupling each exact loss with its connect-the-dots image
  ``L' = L + Z``, ``|Z| <= d``, ``E[Z | L] <= d^2 (1 + d) / 8``; by Hoeffding
  ``sum Z <= t`` except with probability ``eta = 1e-3 delta``, so
  ``delta_true(eps) >= delta_ctd(eps + t) - eta``.

Accuracy parameters: ``rtol`` (target relative error of epsilon, default 1e-5),
``grid_size`` (the FFT length; automatic from ``rtol`` for concrete inputs,
``TRACED_GRID_SIZE`` under a trace), ``max_grid_size`` and ``memory_limit``
(batch chunking).
"""

from ._accountant import DEFAULT_RTOL as DEFAULT_RTOL
from ._accountant import MAX_GRID_SIZE as MAX_GRID_SIZE
from ._accountant import TRACED_GRID_SIZE as TRACED_GRID_SIZE
from ._accountant import PldDelta as PldDelta
from ._accountant import PldEpsilon as PldEpsilon
from ._accountant import pld_delta as pld_delta
from ._accountant import pld_delta_phases as pld_delta_phases
from ._accountant import pld_epsilon as pld_epsilon
from ._accountant import pld_epsilon_phases as pld_epsilon_phases
from ._event_accountant import PldAccountant as PldAccountant
from ._event_accountant import PldState as PldState
from ..accountants._protocol import register_accountant as _register_accountant

_register_accountant("pld", PldAccountant)

__all__ = [
  "DEFAULT_RTOL",
  "MAX_GRID_SIZE",
  "TRACED_GRID_SIZE",
  "PldAccountant",
  "PldDelta",
  "PldEpsilon",
  "PldState",
  "pld_delta",
  "pld_delta_phases",
  "pld_epsilon",
  "pld_epsilon_phases",
]
