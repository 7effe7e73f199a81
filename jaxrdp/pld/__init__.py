"""Tight, certified accounting of the Sampled Gaussian Mechanism by privacy-loss distributions.

``pld_epsilon(q, sigma, steps, delta)`` and ``pld_delta(q, sigma, steps, epsilon)``
(and ``*_phases`` for heterogeneous schedules) numerically compose the
privacy-loss distribution (PLD) of Poisson-subsampled Gaussian steps and return
a certified interval ``[lower, upper]`` around the true add/remove value.
They broadcast over arrays, run whole batches in one jitted program, and work
under ``jax.jit``, ``jax.vmap`` and ``jax.grad``.

Construction (per configuration and adjacency direction, a *job*):

1. *Plan* (``_grid``): from the moment-generating function of the privacy loss
   (Renyi divergences of all real orders, by quadrature), Chernoff bounds give
   the window ``[lo, hi]``, the exponential tilt ``lam`` (the candidate with the
   narrowest window that makes wrap-around harmless where the answer is read),
   a saddle-point estimate of the answer, and the spacing ``d`` from an error
   model of connect-the-dots. The FFT length is ``2^k`` or ``3 2^k`` per job.
2. *Discretize* (``_discretize``): connect-the-dots PMF of one step on a thinned
   lattice ``a + i d`` (Doroshenko et al. 2022, arXiv:2207.04380, which holds
   on any support): every point where a loss moves the answer, gaps up to a
   segment elsewhere; the curve comes from the closed-form single-step
   hockey-stick curve in log space. The support is folded modulo the FFT length.
3. *Tilt and compose* (``_compose``): ``p_s e^{lam s} / M(lam)``, then the
   product of spectra ``prod_j c_j^{T_j}`` (on the low frequencies where the
   others are provably below ``e^-700``) and one inverse real FFT.
4. *Read* (``_read``): ``delta(eps) = p_inf + M^T sum_{s>eps} r_s e^{-lam s}
   (1 - e^{eps - s})`` with block sums, and the exact solve of
   ``A - e^eps B = delta`` inside the crossing cell.

The reported value is the maximum over the two directions. For batches the add
direction (usually the smaller) is first bounded on a coarser grid; a second
pass refines the grid where the first answer and its slope show the plan's
estimates were off.

Derivatives (``_derivative``) are those of the implicit function at the read
point: the answer solves ``delta(epsilon; q, sigma) = delta``, and one delta job
per direction, differentiated on its fixed grid, gives the partial derivatives.
An eager ``jax.grad`` costs a few forward calls (``benchmarks/bench_pld_grad.py``)
and agrees with central differences of the tight epsilon within ``1e-3``
relative; under ``jax.jit`` it runs on the static traced grid.

Error model (each term is bounded, none is dropped):

* Discretization -- connect-the-dots dominates the exact PLD (Doroshenko et al.
  2022, Thm 3.2, for any finite support), and composition preserves dominance,
  so it only errs upward. Its size is about ``T d^2 (1 + lam) / 8`` in epsilon;
  the grid is chosen from this model to meet ``rtol``, and is never coarser
  than what gives dp_accounting's default interval (``1e-4``) its error, plus
  ``1e-6`` of epsilon.
* Truncation -- one step: mass below the support is moved up to its first point
  and mass above it goes to ``+inf`` (connect-the-dots does both), so nothing
  is dropped. Composition: the mass above the window is bounded by Chernoff on
  the *discrete* single-step MGF, ``P(L_T > hi) <= exp(sum_j T_j log M_j(nu) -
  nu hi)``, and added to delta, with the composed ``+inf`` mass
  ``1 - prod_j (1 - p_inf,j)^{T_j}``.
* Wrap-around -- the circular FFT folds out-of-window mass back into the window;
  this only adds mass (upper bound stays valid); the lower bound subtracts its
  Chernoff bound from both tails (``_read``).
* FFT round-off -- an a-posteriori bound per coefficient from the stage-wise
  error of the transform (Higham, Accuracy and Stability of Numerical
  Algorithms, Sec. 24.1), through the power ``c^T`` and the inverse transform,
  per bin and in norm (``_compose``); thanks to the tilt it is relative to
  delta, so tiny deltas (1e-15) stay exact instead of hitting the float64 noise
  floor.
* Lower bound -- coupling each exact loss with its connect-the-dots image
  ``L' = L + Z``, ``|Z| <= d``, ``E[Z | L] <= d^2 (1 + d) / 8``; by Hoeffding
  ``sum Z <= t`` except with probability ``eta = 1e-3 delta``, so
  ``delta_true(eps) >= delta_ctd(eps + t) - eta``.

Not in the certificate: the rounding of the single-step masses themselves
(second differences of the float64 curve, relative error about ``u / d`` per
mass, of either sign), which the upward discretization error dominates by
orders of magnitude at the default accuracy.

Double-word composition: the float64 round-off bound is relative to the total
tilted mass, so when delta is tiny (below about 1e-9) and the privacy-loss
distribution is lumpy or heavy-tailed (few steps include the example, ``q T``
below about 1, or sigma below about 0.8) it can be large next to delta (it
made the bound 0.7% loose for ``q = 1.3e-3, sigma = 1.87, T = 90, delta =
3.7e-12``). Each direction whose certified round-off moves its epsilon by more
than ``rtol / 10`` is composed again in double-word arithmetic (about 106
bits, ``_double_word``; Joldes, Muller and Popescu 2017), whose bound is
about ``1e-16`` times smaller, and the tighter certified bound is kept. That
pass needs concrete inputs: under ``jit`` the float64 bound stands.

One step: a configuration of one phase of one step needs no composition; its
interval comes from the root of the closed-form hockey-stick curve
(``_single_step``), exact to about ``1e-12`` relative, where a grid could not
resolve an epsilon far below its window (``1e-4`` after one step).

Attack risk (``_tradeoff``, ``_tradeoff_read``): the same composition read
through the Neyman-Pearson test, ``TPR(alpha) = min_eps [delta(eps) + e^eps
alpha]``, gives certified bounds on the best membership attack's true-positive
rate at a given false-positive rate (``pld_tpr``), on the whole trade-off curve
from one composition per direction (``pld_tradeoff``), and on the advantage
``delta(0)`` (``pld_advantage``); their accuracy parameter is ``atol``, an
absolute error of the TPR.

Other mechanisms (``_generic``, ``_single_plds``): an event tree given to
:class:`~jaxrdp.accountants.PldAccountant` with any mechanism besides Gaussian and Poisson-subsampled
Gaussian ones (Laplace, subsampled Laplace, randomized response, (eps, delta)-DP,
discrete Laplace, mixtures of Gaussians, the truncated subsampled Gaussian, ...)
is composed on the host in NumPy: each step's PLD per direction discretized by
connect-the-dots (upper) and rounded down (lower) on a uniform grid, composed by
FFT without wrap-around, with certified round-off and tail bounds.

Accuracy parameters: ``rtol`` (target relative error of epsilon, default 1e-5),
``grid_size`` (the FFT length, a power of two; automatic from ``rtol`` for
concrete inputs, ``TRACED_GRID_SIZE`` under a trace), ``max_grid_size`` and
``memory_limit`` (batch chunking under a trace).
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
from ._tradeoff import DEFAULT_ATOL as DEFAULT_ATOL
from ._tradeoff import PldAdvantage as PldAdvantage
from ._tradeoff import PldTpr as PldTpr
from ._tradeoff import PldTradeoff as PldTradeoff
from ._tradeoff import default_fpr_grid as default_fpr_grid
from ._tradeoff import pld_advantage as pld_advantage
from ._tradeoff import pld_tpr as pld_tpr
from ._tradeoff import pld_tradeoff as pld_tradeoff

__all__ = [
  "DEFAULT_ATOL",
  "DEFAULT_RTOL",
  "MAX_GRID_SIZE",
  "TRACED_GRID_SIZE",
  "PldAccountant",
  "PldAdvantage",
  "PldDelta",
  "PldEpsilon",
  "PldState",
  "PldTpr",
  "PldTradeoff",
  "default_fpr_grid",
  "pld_advantage",
  "pld_delta",
  "pld_delta_phases",
  "pld_epsilon",
  "pld_epsilon_phases",
  "pld_tpr",
  "pld_tradeoff",
]
