"""Every public kernel from one table: plain, under jit, vmap and grad, and with x64 off.

One row per public numeric function of :mod:`jaxrdp.mechanisms` and
:mod:`jaxrdp.classical`, the conversions ``jaxrdp.rdp_to_epsilon`` and
``rdp_to_delta``, and ``jaxrdp.dpsgd_epsilon`` and ``dpsgd_delta`` (Renyi-DP
accountant). A row holds a batch of three valid configurations, the argument to
differentiate, and an independent oracle of the value: a closed form, or mpmath at 50
digits (the SGM's exact binomial sum and the WBK19 bound at integer orders, the
hockey-stick divergences of the Gaussian and single-step SGM pairs, roots found by
mpmath), never the function itself. Each row checks

* plain: the value against the oracle (relative tolerance per row);
* jit: ``jax.jit`` equals the plain call;
* vmap: ``jax.vmap`` over the batch equals the plain batched call;
* grad: ``jax.grad`` of the batch's sum (under jit) against central finite
  differences of the plain call (each row of the result depends on its own row of
  the differentiated argument only, so one pair of perturbed calls gives every
  row's derivative);
* x64 off: in one fresh interpreter for all rows (the suite enables x64), the
  jitted call on float32 arguments returns float32 at least the float64 value at
  the same arguments and at most one float32 ulp (2^-23 relative) above it (below
  the normal range, 1.2e-38, the smallest normal float32); for a lower bound (the
  shuffled-batch bounds), at most the float64 value and at most one ulp below it,
  and never above its oracle.

Shapes are few and small (batches of three; integer orders, where the quadrature is
not the subject): the cost is compilation, most of it the derivatives of
dpsgd_epsilon and dpsgd_delta (the derivative at the selected order compiles the
quadrature's) and the x64-off interpreter. The tests spread over both workers, but
the x64-off ones, which share one interpreter.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import oracle
import pytest
from _oracle_helpers import mp_on_grid, mp_wor_log_a
from allocation_oracle import remove_log_moment_partitions
from shuffle_oracle import delta_lower_bound, epsilon_lower_bound

import jaxrdp
from jaxrdp import classical as C
from jaxrdp import mechanisms as M

ORDERS = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0])  # few, integer: the series, no quadrature


def _a(*xs):
  return np.array(xs, dtype=np.float64)


# --------------------------------------------------------------------------------------
# Oracles (mpmath; the test evaluates them at 50 digits).


def _phi(x):
  return mp.ncdf(x)


def _gaussian_delta(eps, s):
  # Balle and Wang 2018, arXiv:1805.06530, Thm 8.
  eps, s = mp.mpf(eps), mp.mpf(s)
  return _phi(1 / (2 * s) - eps * s) - mp.exp(eps) * _phi(-1 / (2 * s) - eps * s)


def _sgm_step_delta(eps, q, s):
  """max of H_{e^eps}(mu || mu0) and H_{e^eps}(mu0 || mu), mu = (1-q) N(0,s^2) + q N(1,s^2).

  The likelihood ratio mu / mu0 = 1 - q + q exp((2z - 1) / (2 s^2)) increases in z,
  so each divergence is a difference of Gaussian tails beyond one threshold."""
  eps, q, s = mp.mpf(eps), mp.mpf(q), mp.mpf(s)
  e = mp.exp(eps)
  # mu / mu0 > e^eps beyond z1.
  z1 = s**2 * mp.log((e - 1 + q) / q) + mp.mpf(1) / 2
  # (Upper tails as Phi(-x): 1 - Phi(x) would lose them entirely.)
  remove = (1 - q - e) * _phi(-z1 / s) + q * _phi((1 - z1) / s)
  add = mp.mpf(0)
  if 1 / e > 1 - q:  # mu0 / mu > e^eps below z2
    z2 = s**2 * mp.log((1 / e - 1 + q) / q) + mp.mpf(1) / 2
    add = _phi(z2 / s) - e * ((1 - q) * _phi(z2 / s) + q * _phi((z2 - 1) / s))
  return max(remove, add)


def _root(f, target, lo, hi):
  """The s in [lo, hi] with f(s) = target (f decreasing), by mpmath's bracketing solver."""
  return mp.findroot(lambda s: mp.log(f(s)) - mp.log(target), (lo, hi), solver="anderson")


def _laplace(scale, a):
  lam, a = mp.mpf(scale), mp.mpf(a)
  inner = a / (2 * a - 1) * mp.exp((a - 1) / lam) + (a - 1) / (2 * a - 1) * mp.exp(-a / lam)
  return mp.log(inner) / (a - 1)


def _randomized_response(p, a):
  p, a = mp.mpf(p), mp.mpf(a)
  return mp.log(p**a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)) / (a - 1)


def _epsilon_per_order(rdp, a, delta):
  # Canonne, Kamath, Steinke 2020, arXiv:2004.00010, Prop. 12 (the "improved" conversion).
  a, delta = mp.mpf(a), mp.mpf(delta)
  return max(mp.mpf(rdp) + mp.log(1 - 1 / a) - (mp.log(delta) + mp.log(a)) / (a - 1), 0)


def _delta_per_order(rdp, a, eps):
  a, r = mp.mpf(a), mp.mpf(rdp)
  conv = mp.exp((a - 1) * (r - eps + mp.log(1 - 1 / a)) - mp.log(a))
  tv = mp.sqrt(1 - mp.exp(-r))  # Bretagnolle-Huber, with KL <= r(alpha)
  return min(conv, tv, 1)


def _best(values, orders):
  """(min, argmin) with the last of equal minima, as the library breaks ties."""
  i = min(range(len(values)), key=lambda k: (values[k], -k))
  return values[i], orders[i]


def _rdp_curve_oracle(rdp_rows, orders, given, per_order):
  out = [
    _best([per_order(r, a, g) for r, a in zip(row, orders)], list(orders))
    for row, g in zip(rdp_rows, given)
  ]
  return np.array([float(v) for v, _ in out]), np.array([float(o) for _, o in out])


def _dpsgd_oracle(q, s, steps, given, per_order):
  rows = [
    [steps[i] * oracle.rdp_binomial(q[i], s[i], int(a), dps=50) for a in ORDERS]
    for i in range(len(q))
  ]
  return _rdp_curve_oracle(rows, ORDERS, given, per_order)


# --------------------------------------------------------------------------------------
# The table.


@dataclasses.dataclass(frozen=True)
class Row:
  """One public kernel.

  Attributes:
    name: the test id.
    fn: the public function, static options bound; called as ``fn(*args)``.
    args: float64 arrays, the batch of three on axis 0 (except where ``in_axes``
      says None); a kernel of orders gets them bound in ``fn`` (concrete, so that
      jit and vmap keep the series for integer orders) and its other arguments with
      shape (3, 1), so that the result is (3, n_orders).
    oracle: ``args -> value`` (an array, or a tuple of arrays for the result's
      fields), computed independently of ``fn``.
    diff: which argument ``jax.grad`` differentiates (it acts on its own row of the
      batch only).
    rtol: against the oracle.
    grad_rtol: ``jax.grad`` against central finite differences (step 1e-5 relative).
    in_axes: ``jax.vmap``'s in_axes (default: every argument batched on axis 0).
    field: the result's field that grad differentiates (None: the result itself).
    lower_bound: the kernel returns a certified lower bound, whose safe side is
      smaller: never above the oracle, and float32 rounds it down, not up.
  """

  name: str
  fn: Callable
  args: tuple
  oracle: Callable
  diff: int
  rtol: float = 1e-12
  grad_rtol: float = 1e-7
  in_axes: tuple | None = None
  field: str | None = None
  lower_bound: bool = False


# Kernels of (q or gamma, sigma, alpha): rows (3, 1) against the orders bound in fn.
_SGM_ORDERS = _a(2.0, 8.0, 32.0)
_SGM = (_a(0.01, 0.05, 0.2)[:, None], _a(0.8, 1.1, 2.0)[:, None])
_WOR_ORDERS = _a(2.0, 4.0, 8.0)
_WOR = (_a(0.01, 0.05, 0.2)[:, None], _a(0.8, 1.5, 3.0)[:, None])
# Random allocation at small t, integer orders: the remove direction is the exact sum.
_ALLOCATION_ORDERS = _a(2.0, 5.0, 12.0)
_ALLOCATION = (_a(0.7, 1.1, 2.5)[:, None], _a(2.0, 3.0, 5.0)[:, None])
_CURVES = np.array(
  [
    [0.01, 0.05, 0.3, 1.0, 3.0, 8.0],
    [0.2, 0.5, 1.5, 4.0, 10.0, 25.0],
    [1e-4, 4e-4, 2e-3, 1e-2, 0.05, 0.2],
  ]
)


ROWS = [
  # jaxrdp.mechanisms
  Row(
    "gaussian_rdp",
    M.gaussian_rdp,
    (_a(0.7, 1.3, 4.0), _a(2.0, 4.0, 8.0)),
    lambda s, a: a / (2 * s**2),
    diff=0,
  ),
  Row(
    "laplace_rdp",
    M.laplace_rdp,
    (_a(0.5, 2.0, 10.0), _a(1.5, 4.0, 8.0)),
    lambda b, a: mp_on_grid(_laplace, b, a),
    diff=0,
  ),
  Row(
    "randomized_response_rdp",
    M.randomized_response_rdp,
    (_a(0.6, 0.75, 0.9), _a(2.0, 4.0, 8.0)),
    lambda p, a: mp_on_grid(_randomized_response, p, a),
    diff=0,
  ),
  Row(
    "sgm_rdp",
    functools.partial(M.sgm_rdp, alpha=_SGM_ORDERS),
    _SGM,
    lambda q, s: mp_on_grid(lambda *x: oracle.rdp_binomial(*x, dps=50), q, s, _SGM_ORDERS),
    diff=1,
  ),
  Row(
    "sgm_log_a",
    functools.partial(M.sgm_log_a, alpha=_SGM_ORDERS),
    _SGM,
    lambda q, s: mp_on_grid(lambda *x: oracle.log_a_binomial(*x, dps=50), q, s, _SGM_ORDERS),
    diff=1,
  ),
  Row(
    "sgm_log_a_minus_1",
    functools.partial(M.sgm_log_a_minus_1, alpha=_SGM_ORDERS),
    _SGM,
    lambda q, s: mp_on_grid(
      lambda *x: oracle.log_a_minus_1_binomial(*x, dps=50), q, s, _SGM_ORDERS
    ),
    diff=1,
  ),
  Row(
    # Inside the conditions of Mironov, Talwar, Zhang 2019, Thm 11: 2 q^2 alpha / sigma^2.
    "sgm_rdp_closed_form",
    M.sgm_rdp_closed_form,
    (_a(0.01, 0.02, 0.05), _a(5.0, 6.0, 8.0), _a(2.0, 4.0, 8.0)),
    lambda q, s, a: 2 * q**2 * a / s**2,
    diff=1,
  ),
  Row(
    "sgm_single_step_delta",
    M.sgm_single_step_delta,
    (_a(0.5, 1.0, 2.0), _a(0.01, 0.1, 0.5), _a(0.8, 1.0, 2.0)),
    lambda e, q, s: mp_on_grid(_sgm_step_delta, e, q, s),
    diff=2,
    rtol=1e-11,
  ),
  Row(
    # Conservative by at most about 1e-13 relative (its docstring).
    "sgm_single_step_sigma",
    M.sgm_single_step_sigma,
    (_a(0.5, 1.0, 2.0), _a(1e-5, 1e-6, 1e-3), _a(0.01, 0.1, 0.5)),
    lambda e, d, q: mp_on_grid(
      lambda e, d, q: _root(lambda s: _sgm_step_delta(e, q, s), d, 0.05, 50.0), e, d, q
    ),
    diff=1,
    rtol=1e-11,
    grad_rtol=1e-5,
  ),
  Row(
    "analytic_gaussian_delta",
    M.analytic_gaussian_delta,
    (_a(0.5, 1.0, 3.0), _a(1.0, 2.0, 4.0)),
    lambda e, s: mp_on_grid(_gaussian_delta, e, s),
    diff=1,
    # delta ~ 1e-30 at (3, 4): so steep that the difference step's own truncation
    # error (h^2 times the third over six times the first derivative) reaches 4e-7.
    grad_rtol=1e-5,
  ),
  Row(
    "analytic_gaussian_sigma",
    M.analytic_gaussian_sigma,
    (_a(0.5, 1.0, 3.0), _a(1e-5, 1e-3, 1e-8)),
    lambda e, d: mp_on_grid(
      lambda e, d: _root(lambda s: _gaussian_delta(e, s), d, 0.05, 50.0), e, d
    ),
    diff=1,
    rtol=1e-11,
    grad_rtol=1e-5,
  ),
  Row(
    "effective_noise_multiplier",
    functools.partial(M.effective_noise_multiplier, relation="replace_one"),
    (_a(0.5, 1.1, 3.0),),
    lambda s: s / 2,
    diff=0,
    rtol=0.0,
  ),
  Row(
    "sampled_without_replacement_gaussian_rdp",
    functools.partial(M.sampled_without_replacement_gaussian_rdp, alpha=_WOR_ORDERS),
    _WOR,
    lambda g, s: mp_on_grid(
      lambda g, s, a: mp_wor_log_a(g, s, int(a)) / (a - 1), g, s, _WOR_ORDERS
    ),
    diff=1,
    rtol=1e-10,  # its docstring's guarantee
    grad_rtol=1e-6,
  ),
  Row(
    "sampled_without_replacement_gaussian_log_a",
    functools.partial(M.sampled_without_replacement_gaussian_log_a, alpha=_WOR_ORDERS),
    _WOR,
    lambda g, s: mp_on_grid(lambda g, s, a: mp_wor_log_a(g, s, int(a)), g, s, _WOR_ORDERS),
    diff=1,
    rtol=1e-10,
    grad_rtol=1e-6,
  ),
  Row(
    # The remove direction, exact at integer orders: Feldman and Shenfeld 2025
    # (arXiv:2502.08202)'s sum over the partitions of alpha with at most t parts,
    # enumerated literally in mpmath (allocation_oracle.py). Measured: 4e-15 relative.
    # (The add direction is a quadrature, and "both" their maximum: test_random_allocation_rdp.py.)
    "random_allocation_rdp",
    functools.partial(M.random_allocation_rdp, alpha=_ALLOCATION_ORDERS, direction="remove"),
    _ALLOCATION,
    lambda s, t: mp_on_grid(
      lambda s, t, a: remove_log_moment_partitions(int(a), s, int(t), dps=50) / (a - 1),
      s,
      t,
      _ALLOCATION_ORDERS,
    ),
    diff=0,
  ),
  # Shuffled batches, one epoch: max over thresholds C of the cube events' bound,
  # maximized in mpmath (a scan, then golden section; shuffle_oracle.py). The kernel
  # searches a grid, so it may lie below the maximum, never above (lower_bound), and
  # lowers every probability by 1e-12 relative: measured 3e-13 to 3e-12 relative below
  # (epsilon), 3e-12 to 5e-11 (delta, where A - e^eps B amplifies the 1e-12). Its grad is
  # that of the final grid's best threshold, about 1e-6 of a unit off the maximizer
  # (the envelope theorem there): measured up to 3e-7 (epsilon) and 1e-6 (delta)
  # relative from the central differences, which agree with mpmath's derivative of the
  # maximum to 1e-8 (at sigma = 0.5, t = 1000). t = 1 is the Gaussian mechanism.
  Row(
    "shuffle_epsilon_lower_bound",
    M.shuffle_epsilon_lower_bound,
    (_a(0.6, 1.0, 2.0), _a(1000.0, 1.0, 50.0), _a(1e-6, 1e-3, 1e-5)),
    lambda s, t, d: mp_on_grid(lambda s, t, d: epsilon_lower_bound(s, int(t), d, dps=50), s, t, d),
    diff=0,
    rtol=1e-10,
    grad_rtol=5e-6,
    lower_bound=True,
  ),
  Row(
    "shuffle_delta_lower_bound",
    M.shuffle_delta_lower_bound,
    (_a(0.5, 1.3, 2.0), _a(1000.0, 7.0, 100.0), _a(2.0, 0.5, 0.1)),
    lambda s, t, e: mp_on_grid(lambda s, t, e: delta_lower_bound(s, int(t), e, dps=50), s, t, e),
    diff=0,
    rtol=1e-9,
    grad_rtol=5e-6,
    lower_bound=True,
  ),
  # jaxrdp.classical
  Row(
    "classical_gaussian_sigma",
    C.classical_gaussian_sigma,
    (_a(0.1, 0.5, 0.9), _a(1e-5, 1e-3, 0.1)),
    lambda e, d: mp_on_grid(lambda e, d: mp.sqrt(2 * mp.log(mp.mpf(1.25) / d)) / e, e, d),
    diff=0,
  ),
  Row(
    "gaussian_tail_delta",
    C.gaussian_tail_delta,
    (_a(0.5, 1.0, 2.0), _a(3.0, 5.0, 8.0)),
    lambda e, s: mp_on_grid(lambda e, s: mp.exp(-((e * s - 1 / (2 * mp.mpf(s))) ** 2) / 2), e, s),
    diff=1,
    grad_rtol=1e-5,  # delta ~ 1e-55 at (2, 8): steep, as analytic_gaussian_delta's
  ),
  Row(
    # The root of t = sqrt(2 log(1/delta)), t = eps sigma - 1 / (2 sigma) (Pei 2019 (6.91)).
    "gaussian_tail_sigma",
    C.gaussian_tail_sigma,
    (_a(0.5, 1.0, 3.0), _a(1e-5, 1e-3, 1e-8)),
    lambda e, d: mp_on_grid(
      lambda e, d: mp.findroot(
        lambda s: e * s - 1 / (2 * s) - mp.sqrt(-2 * mp.log(d)),
        (mp.mpf(0.01), mp.mpf(1e3)),
        solver="anderson",
      ),
      e,
      d,
    ),
    diff=0,
  ),
  Row("laplace_scale", C.laplace_scale, (_a(0.1, 1.0, 5.0),), lambda e: 1 / e, diff=0),
  Row(
    "basic_composition",
    C.basic_composition,
    (_a(0.1, 0.5, 1.0), _a(1e-6, 1e-5, 0.0), _a(10.0, 3.0, 100.0)),
    lambda e, d, k: (k * e, k * d),
    diff=0,
    field="epsilon",
  ),
  Row(
    "advanced_composition",
    C.advanced_composition,
    (_a(0.1, 0.5, 1.0), _a(1e-6, 1e-7, 0.0), _a(10.0, 100.0, 50.0), _a(1e-5, 1e-6, 1e-3)),
    lambda e, d, k, dp: mp_on_grid(
      lambda e, d, k, dp: (
        e * mp.sqrt(2 * k * mp.log(1 / mp.mpf(dp))) + k * e * mp.tanh(mp.mpf(e) / 2),
        k * mp.mpf(d) + dp,
      ),
      e,
      d,
      k,
      dp,
    ),
    diff=0,
    field="epsilon",
  ),
  Row(
    # eps below and above log 2 (Pei 2019 (6.98)), away from the switch.
    "advanced_composition_capped_kl",
    C.advanced_composition_capped_kl,
    (_a(0.1, 0.5, 1.0), _a(1e-6, 1e-7, 0.0), _a(10.0, 100.0, 50.0), _a(1e-5, 1e-6, 1e-3)),
    lambda e, d, k, b: mp_on_grid(
      lambda e, d, k, b: (
        k * (e * mp.expm1(e) if e <= mp.log(2) else mp.mpf(e))
        + mp.sqrt(2 * k * mp.log(1 / mp.mpf(b))) * e,
        k * mp.mpf(d) + b,
      ),
      e,
      d,
      k,
      b,
    ),
    diff=0,
    field="epsilon",
  ),
  Row(
    "amplify_by_subsampling",
    C.amplify_by_subsampling,
    (_a(0.5, 1.0, 3.0), _a(1e-5, 1e-6, 1e-3), _a(0.01, 0.1, 0.5)),
    lambda e, d, r: mp_on_grid(
      lambda e, d, r: (mp.log(1 + r * (mp.exp(e) - 1)), mp.mpf(r) * d), e, d, r
    ),
    diff=0,
    field="epsilon",
  ),
  Row(
    "zcdp_to_epsilon",
    C.zcdp_to_epsilon,
    (_a(0.01, 0.1, 1.0), _a(1e-5, 1e-3, 1e-8)),
    lambda r, d: mp_on_grid(lambda r, d: r + 2 * mp.sqrt(r * mp.log(1 / mp.mpf(d))), r, d),
    diff=0,
  ),
  # Conversions from Renyi DP.
  Row(
    "rdp_to_epsilon",
    jaxrdp.rdp_to_epsilon,
    (_CURVES, ORDERS, _a(1e-5, 1e-3, 1e-8)),
    lambda r, o, d: _rdp_curve_oracle(r, o, d, _epsilon_per_order),
    diff=2,
    in_axes=(0, None, 0),
    field="epsilon",
  ),
  Row(
    "rdp_to_delta",
    jaxrdp.rdp_to_delta,
    (_CURVES, ORDERS, _a(1.0, 5.0, 0.5)),
    lambda r, o, e: _rdp_curve_oracle(r, o, e, _delta_per_order),
    diff=2,
    in_axes=(0, None, 0),
    field="delta",
  ),
  # DP-SGD in one call, Renyi-DP accountant.
  Row(
    "dpsgd_epsilon",
    lambda q, s, t, d: jaxrdp.dpsgd_epsilon(q, s, t, d, ORDERS),
    (_a(0.01, 0.02, 0.05), _a(1.0, 1.2, 1.5), _a(100.0, 1000.0, 50.0), _a(1e-5, 1e-5, 1e-6)),
    lambda q, s, t, d: _dpsgd_oracle(q, s, t, d, _epsilon_per_order),
    diff=1,
    field="epsilon",
  ),
  Row(
    "dpsgd_delta",
    lambda q, s, t, e: jaxrdp.dpsgd_delta(q, s, t, e, ORDERS),
    (_a(0.01, 0.02, 0.05), _a(1.0, 1.2, 1.5), _a(100.0, 1000.0, 50.0), _a(1.0, 2.0, 0.5)),
    lambda q, s, t, e: _dpsgd_oracle(q, s, t, e, _delta_per_order),
    diff=1,
    field="delta",
  ),
]

BY_NAME = {row.name: row for row in ROWS}
NAMES = list(BY_NAME)


def _leaves(x):
  return [np.asarray(leaf, dtype=np.float64) for leaf in jax.tree.leaves(x)]


def _pick(out, field):
  return out if field is None else getattr(out, field)


def _vmapped(row):
  in_axes = row.in_axes or (0,) * len(row.args)
  return jax.vmap(row.fn, in_axes=in_axes)


@functools.cache
def _plain(name):
  row = BY_NAME[name]
  return row.fn(*row.args)


def test_the_table_covers_every_public_kernel():
  # Every public function of the kernel modules, plus the conversions and DP-SGD.
  # (The truncated-Poisson functions are host arithmetic on Python numbers, tested in
  # test_sampling.py, not traced kernels.)
  host = {"binomial_log_sf", "default_capacity", "truncated_poisson_delta", "truncation_delta"}
  public = {
    n
    for mod in (M, C)
    for n in mod.__all__
    if callable(getattr(mod, n)) and not isinstance(getattr(mod, n), type) and n not in host
  }
  public |= {"rdp_to_epsilon", "rdp_to_delta", "dpsgd_epsilon", "dpsgd_delta"}
  assert set(NAMES) == public


@pytest.mark.parametrize("name", NAMES)
def test_plain_call_matches_the_oracle(name):
  row = BY_NAME[name]
  got = _leaves(_plain(name))
  with mp.workdps(50):
    want = row.oracle(*row.args)
  want = [np.asarray(w, dtype=np.float64) for w in (want if isinstance(want, tuple) else (want,))]
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.shape == w.shape and g.shape[0] == 3, (g.shape, w.shape)
    np.testing.assert_allclose(g, w, rtol=row.rtol, atol=0)
    if row.lower_bound:  # never above the quantity it bounds
      assert np.all(g <= w + 1e-15 * np.abs(w)), g - w


@pytest.mark.parametrize("name", NAMES)
def test_jit_equals_the_plain_call(name):
  row = BY_NAME[name]
  for g, w in zip(_leaves(jax.jit(row.fn)(*row.args)), _leaves(_plain(name))):
    np.testing.assert_allclose(g, w, rtol=1e-13, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_vmap_equals_the_plain_batched_call(name):
  row = BY_NAME[name]
  for g, w in zip(_leaves(_vmapped(row)(*row.args)), _leaves(_plain(name))):
    np.testing.assert_allclose(g, w, rtol=1e-13, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_grad_matches_central_differences(name):
  row = BY_NAME[name]
  x = row.args[row.diff]

  def at(x):
    args = list(row.args)
    args[row.diff] = x
    return args

  # Under jit: one program (an eager grad also compiles each outer operation).
  g = jax.jit(jax.grad(lambda x: jnp.sum(_pick(row.fn(*at(x)), row.field))))(jnp.asarray(x))
  # Row i of the result depends on row i of x only: one pair of calls moves every row.
  h = 1e-5 * np.abs(x)
  up = np.asarray(_pick(row.fn(*at(x + h)), row.field)).reshape(3, -1).sum(1)
  down = np.asarray(_pick(row.fn(*at(x - h)), row.field)).reshape(3, -1).sum(1)
  fd = (up - down) / (2 * h.reshape(3))
  assert np.all(np.abs(fd) > 0), fd  # a derivative that vanishes would test nothing
  np.testing.assert_allclose(np.asarray(g).reshape(3), fd, rtol=row.grad_rtol, atol=0)


# --------------------------------------------------------------------------------------
# x64 off: every row in one fresh interpreter.

_X64_OFF = r"""
import json, sys
import numpy as np, jax
sys.path.insert(0, sys.argv[1])
import test_kernel_table as t
assert not jax.config.jax_enable_x64
out = {}
for row in t.ROWS:
  got = jax.jit(row.fn)(*(np.asarray(a, np.float32) for a in row.args))
  leaves = jax.tree.leaves(got)
  out[row.name] = dict(
    dtypes=[str(leaf.dtype) for leaf in leaves],
    got=[np.asarray(leaf, np.float64).tolist() for leaf in leaves],
  )
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def x64_off():
  """Every row's float32 values, from one x64-off interpreter."""
  tests = os.path.dirname(os.path.abspath(__file__))
  env = dict(os.environ)
  env["PYTHONPATH"] = os.path.dirname(tests) + os.pathsep + env.get("PYTHONPATH", "")
  env.pop("JAX_ENABLE_X64", None)
  proc = subprocess.run(
    [sys.executable, "-W", "error", "-c", _X64_OFF, tests],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  line = [t for t in proc.stdout.splitlines() if t.startswith("RESULT")][-1]
  return json.loads(line[len("RESULT") :])


@pytest.mark.parametrize("name", NAMES)
def test_float32_is_rounded_to_the_safe_side_of_float64(x64_off, name):
  row = BY_NAME[name]
  r = x64_off[name]
  assert set(r["dtypes"]) == {"float32"}, r["dtypes"]
  # The float64 values at the same (float32) arguments, here (x64 on): the plain
  # call's program. (In the x64-off interpreter, a float64 call after the float32
  # ones can fail: jax 0.10.2 reuses the float32 device copy of a NumPy array that
  # a float32 program captured, such as the orders bound in a row.)
  refs = _leaves(row.fn(*(np.asarray(a, np.float32).astype(np.float64) for a in row.args)))
  for got, ref in zip(r["got"], refs):
    got = np.asarray(got)
    # The safe side: above the float64 value (a lower bound: below it), by at most one
    # ulp; below the normal range, the smallest normal float32.
    excess = (ref - got) if row.lower_bound else (got - ref)
    assert np.all(excess >= 0), (got, ref)
    bound = np.maximum(2.0**-23 * np.abs(ref) * (1 + 1e-9), np.finfo(np.float32).tiny)
    assert np.all(excess <= bound), (got, ref)
