"""Attack risk (jaxrdp.risk, jaxrdp.pld.pld_tpr & co.) against independent references.

* TPR at FPR 1% and the advantage on a held-out draw against the Laplace-inversion
  oracle (tests/risk_oracle.py, precomputed by tests/make_risk_reference.py at two
  resolutions): the certified upper bound within 1e-5 above it and never below,
  the lower bound never above it. The test takes the MNIST row and every third
  row of the draw (each configuration compiles its own FFT lengths);
  benchmarks/validate_risk.py checks all of them.
* q = 1 (the Gaussian mechanism composed T times, exactly mu-GDP): the closed form
  Phi(Phi^-1(alpha) + mu) at several FPRs, through the curve and the one-FPR call.
* One step: the closed form of each direction's Neyman-Pearson test.
* The Renyi-DP route is never below the tight one; calibration pasted back meets
  its target and 1e-5 less noise does not.
"""

from __future__ import annotations

import json
import math
import pathlib

import jax
import numpy as np
import pytest
from risk_oracle import gdp_tpr, single_step_tpr
from scipy import stats

import jaxrdp
import jaxrdp.risk
from jaxrdp.pld import pld_tpr

REFERENCE = json.loads((pathlib.Path(__file__).parent / "data" / "risk_reference.json").read_text())
ROWS = [r for r in REFERENCE["rows"] if "skipped" not in r]
# The MNIST row, then every third row of the held-out draw.
TESTED = ROWS[:1] + ROWS[1::3]
# Within this much above the oracle (and never below it).
TOL = 1e-5


def _columns(rows, *keys):
  return [np.array([r[k] for r in rows]) for k in keys]


def test_the_reference_is_converged_and_covers_the_draw():
  # The oracle at two resolutions agrees far below the tolerance.
  for r in ROWS:
    assert abs(r["tpr_2"] - r["tpr_1"]) < 1e-6, r
    assert abs(r["advantage_2"] - r["advantage_1"]) < 1e-6, r
  assert len(ROWS) >= 20


def test_tpr_at_one_percent_against_the_oracle():
  q, sigma, steps, ref = _columns(TESTED, "q", "sigma", "steps", "tpr_2")
  res = jaxrdp.dpsgd_tpr(q, sigma, steps, 0.01)
  up, low = np.asarray(res.tpr), np.asarray(res.tpr_lower)
  assert np.all(up >= ref), (up - ref).min()
  assert np.all(up - ref <= TOL), (up - ref).max()
  assert np.all(low <= ref) and np.all(low >= 0.01)


def test_advantage_against_the_oracle():
  q, sigma, steps, ref = _columns(TESTED, "q", "sigma", "steps", "advantage_2")
  res = jaxrdp.dpsgd_advantage(q, sigma, steps)
  up, low = np.asarray(res.advantage), np.asarray(res.advantage_lower)
  assert np.all(up >= ref), (up - ref).min()
  assert np.all(up - ref <= TOL), (up - ref).max()
  assert np.all(low <= ref) and np.all(low >= 0.0)


def test_gaussian_mechanism_is_exactly_gdp():
  # q = 1: T Gaussian steps of noise sigma are mu-GDP with mu = sqrt(T) / sigma.
  sigma, steps = np.array([1.0, 3.0]), np.array([4.0, 16.0])
  mu = np.sqrt(steps) / sigma
  fpr = np.array([1e-5, 1e-3, 0.01, 0.1, 0.5])
  curve = jaxrdp.tradeoff_curve(1.0, sigma, steps, fpr)
  exact = np.array([[gdp_tpr(a, m) for a in fpr] for m in mu])
  assert np.all(np.asarray(curve.tpr) >= exact)
  assert np.all(np.asarray(curve.tpr) - exact <= TOL), np.max(np.asarray(curve.tpr) - exact)
  assert np.all(np.asarray(curve.tpr_lower) <= exact)
  # The advantage of mu-GDP: 2 Phi(mu / 2) - 1.
  adv = jaxrdp.dpsgd_advantage(1.0, sigma, steps)
  exact_adv = 2.0 * stats.norm.cdf(0.5 * mu) - 1.0
  assert np.all(np.asarray(adv.advantage) >= exact_adv)
  assert np.all(np.asarray(adv.advantage) - exact_adv <= TOL)
  # ... and the estimate of mu recovers it.
  est = jaxrdp.risk.gdp_mu(1.0, sigma, steps)
  assert np.all(np.asarray(est.mu) >= mu) and np.all(np.asarray(est.mu) - mu <= 1e-4)


def test_one_step_against_the_closed_form():
  q, sigma = np.array([0.3, 0.02, 0.9]), np.array([1.0, 0.7, 3.0])
  fpr = np.array([1e-4, 0.01, 0.2])
  exact = np.array([[max(single_step_tpr(qi, si, a)) for a in fpr] for qi, si in zip(q, sigma)])
  res = jaxrdp.dpsgd_tpr(q[:, None], sigma[:, None], 1, fpr)
  up, low = np.asarray(res.tpr), np.asarray(res.tpr_lower)
  assert np.all(up >= exact) and np.all(up - exact <= TOL), up - exact
  assert np.all(low <= exact)


def test_curve_is_a_trade_off_curve_and_agrees_with_the_one_fpr_call():
  fpr = jaxrdp.pld.default_fpr_grid(33)
  c = jaxrdp.tradeoff_curve(256 / 60000, 1.1, 14063, fpr)
  up, low = np.asarray(c.tpr), np.asarray(c.tpr_lower)
  assert np.all(np.diff(up) >= 0) and np.all(up >= fpr) and np.all(up <= 1)
  assert np.all(low <= up) and np.all(low >= fpr)
  assert np.allclose(c.fnr, 1 - up)
  # The MNIST reference at 1% (in the grid), and the one-FPR call.
  mnist = ROWS[0]
  assert mnist["q"] == 256 / 60000
  i = int(np.argmin(np.abs(fpr - 0.01)))
  assert fpr[i] == 0.01
  assert mnist["tpr_2"] <= up[i] <= mnist["tpr_2"] + TOL
  assert low[i] <= mnist["tpr_2"]


def test_renyi_route_is_certified_and_looser():
  # The configurations of the oracle tests (their programs are compiled already).
  q, sigma, steps = _columns(TESTED, "q", "sigma", "steps")
  tight = jaxrdp.dpsgd_tpr(q, sigma, steps, 0.01)
  rdp = jaxrdp.dpsgd_tpr(q, sigma, steps, 0.01, accountant="rdp")
  assert np.all(np.asarray(rdp.tpr) >= np.asarray(tight.tpr))
  assert np.all(np.asarray(rdp.tpr_lower) == 0.01)
  # (one cell: the shape of the calibration test's program)
  adv_t = jaxrdp.dpsgd_advantage(q[:1], sigma[:1], steps[:1])
  adv_r = jaxrdp.dpsgd_advantage(q[:1], sigma[:1], steps[:1], accountant="rdp")
  assert np.all(np.asarray(adv_r.advantage) >= np.asarray(adv_t.advantage))
  # Edge cases of the Renyi route: no privacy loss, and no noise (in the same program).
  edge = jaxrdp.dpsgd_tpr(
    np.r_[q[:-2], 0.0, 0.1], np.r_[sigma[:-2], 1.0, 0.0], steps, 0.01, accountant="rdp"
  )
  assert np.all(np.asarray(edge.tpr[:-2]) == np.asarray(rdp.tpr[:-2]))
  assert 0.01 <= float(edge.tpr[-2]) <= 0.01 + 1e-8  # the margin covering the rounding
  assert float(edge.tpr[-1]) == 1.0


def test_fpr_ends_and_validation():
  res = jaxrdp.dpsgd_tpr(0.01, 1.0, 100, np.array([0.0, 1.0]))
  assert np.asarray(res.tpr).tolist() == [0.0, 1.0]
  # Nothing released (q = 0, or no steps): the attack is a coin, TPR = FPR, advantage 0.
  none = jaxrdp.dpsgd_tpr(np.array([0.0, 0.01]), 1.0, np.array([100, 0]), 0.01)
  assert np.asarray(none.tpr).tolist() == [0.01, 0.01]
  assert np.asarray(none.tpr_lower).tolist() == [0.01, 0.01]
  adv = jaxrdp.dpsgd_advantage(np.array([0.0, 0.01]), 1.0, np.array([100, 0]))
  assert np.asarray(adv.advantage).tolist() == [0.0, 0.0]
  with pytest.raises(ValueError, match="sampling='fixed'"):
    jaxrdp.dpsgd_tpr(0.01, 1.0, 100, 0.01, sampling="fixed")
  with pytest.raises(ValueError, match="unknown accountant 'prv'"):
    jaxrdp.dpsgd_advantage(0.01, 1.0, 100, accountant="prv")
  with pytest.raises(ValueError, match="fpr must be in"):
    jaxrdp.dpsgd_tpr(0.01, 1.0, 100, 1.5)
  with pytest.raises(ValueError, match="steps must be a whole number"):
    jaxrdp.dpsgd_tpr(0.01, 1.0, 10.5, 0.01)
  with pytest.raises(ValueError, match="target_tpr"):
    jaxrdp.risk.calibrate_noise_to_tpr(1.5, 0.01, 0.01, 100)


def test_calibration_meets_its_target_pasted_back():
  q, steps = 0.01, 100
  targets = np.array([0.012])
  res = jaxrdp.risk.calibrate_noise_to_tpr(targets, 0.01, q, steps)
  assert np.all(res.feasible)
  again = np.asarray(jaxrdp.dpsgd_tpr(q, res.sigma, steps, 0.01).tpr)
  assert np.all(again <= targets) and np.all(again == res.risk)
  less = np.asarray(jaxrdp.dpsgd_tpr(q, res.sigma * (1 - 2e-5), steps, 0.01).tpr)
  assert np.all(less > targets)
  adv = jaxrdp.risk.calibrate_noise_to_advantage(0.05, q, steps, accountant="rdp")
  pasted = float(jaxrdp.dpsgd_advantage(q, adv.sigma, steps, accountant="rdp").advantage)
  assert pasted <= 0.05
  assert float(jaxrdp.dpsgd_advantage(q, adv.sigma * (1 - 2e-5), steps, accountant="rdp")[0]) > 0.05
  # Infeasible: no noise makes the TPR smaller than the FPR.
  bad = jaxrdp.risk.calibrate_noise_to_tpr(0.005, 0.01, q, steps)
  assert not bool(bad.feasible) and math.isnan(float(bad.sigma))


def test_pld_tpr_is_differentiable_under_jit():
  # The traced path (plans made inside the jobs): its value matches the eager call's
  # and its derivative a central difference of eager calls (one program, 2^13 points).
  fn = jax.jit(jax.value_and_grad(lambda s: pld_tpr(0.05, s, 200, 0.01, grid_size=2**13).tpr))
  value, grad = fn(1.2)
  h = 1e-4
  eager = [float(pld_tpr(0.05, 1.2 + e, 200, 0.01, grid_size=2**13).tpr) for e in (0.0, h, -h)]
  assert float(value) == pytest.approx(eager[0], abs=2e-6)
  assert float(grad) == pytest.approx((eager[1] - eager[2]) / (2 * h), rel=1e-3)


def test_pld_tpr_of_a_batch_in_a_float32_jit_brackets_the_same_truth():
  # A batch under jit with x64 off traced a float32 initial value into a float64
  # argmin reduction (a TypeError). Now it answers; its interval and the float64 eager
  # call's both contain the true TPR, so they overlap, and lower <= upper in each.
  sigmas = np.array([1.0, 1.5, 2.0])
  with jax.enable_x64(False):
    got = jax.jit(lambda s: pld_tpr(0.01, s, 100, 0.01, grid_size=2**13))(sigmas)
  assert got.tpr.dtype == np.float32
  eager = pld_tpr(0.01, sigmas, 100, 0.01)
  up, low = np.asarray(got.tpr, np.float64), np.asarray(got.tpr_lower, np.float64)
  assert np.all(np.isfinite(up)) and np.all(low <= up)
  assert np.all(up >= np.asarray(eager.tpr_lower)) and np.all(low <= np.asarray(eager.tpr))


def test_plot_tradeoff_draws_the_curve(tmp_path):
  pytest.importorskip("matplotlib")
  c = jaxrdp.tradeoff_curve(256 / 60000, 1.1, 14063, jaxrdp.pld.default_fpr_grid(33))
  fig = jaxrdp.risk.plot_tradeoff(c, tmp_path / "roc.png")
  assert (tmp_path / "roc.png").stat().st_size > 1000
  labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
  assert any("Gaussian DP" in t for t in labels)
