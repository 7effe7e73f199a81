"""sgm_log_a against the 60-digit mpmath reference (tests/oracle.py).

The guarantee in the sgm_log_a docstring: relative error <= 1e-12 over
q in [1e-8, 1], sigma in [0.1, 1e3], alpha in (1, 1e4], and never below the
exact value by more than 1e-12 relative.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from helpers import DATA, load_reference

import jaxrdp

TOL = 1e-12

FILES = [
  f
  for f in ("sgm_reference.json", "sgm_heldout.json", "sgm_small_sigma.json")
  if os.path.exists(os.path.join(DATA, f))
]


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("path", ["concrete_orders", "traced_orders"])
def test_log_a_matches_reference(name, path):
  q, s, a, la, _, tags = load_reference(name)
  if path == "concrete_orders":  # integer orders take the series, others quadrature
    got = np.asarray(jaxrdp.mechanisms.sgm_log_a(q, s, a))
  else:  # every order through the quadrature kernel
    got = np.asarray(jax.jit(jaxrdp.mechanisms.sgm_log_a)(q, s, a))
  rel = (got - la) / np.abs(la)
  worst = int(np.argmax(np.abs(rel)))
  assert np.all(np.isfinite(got))
  assert np.abs(rel).max() <= TOL, (tags[worst], q[worst], s[worst], a[worst], rel[worst])
  assert rel.min() >= -TOL


@pytest.mark.parametrize("name", FILES)
def test_log_a_minus_1_keeps_relative_accuracy(name):
  # log(A - 1) is the quantity with full relative accuracy in the tiny-RDP corner.
  q, s, a, _, lam1, _ = load_reference(name)
  got = np.asarray(jaxrdp.mechanisms.sgm_log_a_minus_1(q, s, a))
  ok = np.isfinite(lam1)
  # |error of log(A - 1)| is the relative error of A - 1 itself.
  err = np.abs(got[ok] - lam1[ok]) / np.maximum(1.0, np.abs(lam1[ok]))
  assert err.max() <= TOL


def test_reference_covers_both_corners():
  q, s, a, _, _, tags = load_reference("sgm_reference.json")
  slow_tail = (a < 1.7) & (s < 1.2) & (q > 0.01)
  tiny_rdp = (q < 1e-5) & (s > 10)
  assert slow_tail.sum() >= 10 and tiny_rdp.sum() >= 10
  assert (a != np.round(a)).sum() >= 100 and (a == np.round(a)).sum() >= 100


@pytest.mark.parametrize(
  "q,sigma,alpha",
  [
    (0.3, 0.7, 1.3),  # slow tail: dp_accounting returns inf here
    (2e-8, 500.0, 1.5),  # tiny RDP: Opacus goes negative / zero here
    (0.02, 0.1, 3000.5),  # sigma = 0.1 with a large fractional order
    (0.999, 2.0, 7.25),  # q close to 1
  ],
)
def test_live_oracle_spot_checks(q, sigma, alpha):
  ref = float(oracle.log_a_quad(q, sigma, alpha, dps=40))
  got = float(jaxrdp.mechanisms.sgm_log_a(q, sigma, alpha))
  assert abs(got - ref) <= TOL * abs(ref)


# The small-sigma table lies wholly outside the light layout's domain (sigma < 0.3).
@pytest.mark.parametrize("name", [f for f in FILES if f != "sgm_small_sigma.json"])
def test_both_quadrature_layouts_match_reference(name):
  """Each node layout of the quadrature (jaxrdp.mechanisms._sgm_quadrature) on its own.

  A whole reference table is one mixed batch and takes the full layout, so the
  light one is checked here element by element: within TOL of the reference
  wherever its conditions hold, and the conditions are not vacuous (outside
  them the light layout misses by far more).
  """
  from jaxrdp._core import precision as _precision
  from jaxrdp.mechanisms import _sgm_quadrature as m

  q, s, a, _, lam1, tags = load_reference(name)
  keep = (q > 0) & (q < 1) & np.isfinite(lam1)  # q = 1 is answered in closed form
  q, s, a, lam1 = q[keep], s[keep], a[keep], lam1[keep]
  tags = [t for t, k in zip(tags, keep) if k]
  with _precision.x64_context():
    q, s, a = (jnp.asarray(v, jnp.float64) for v in (q, s, a))
    g = jax.jit(jax.vmap(m._geometry))(q, s, a)
    eligible = np.asarray(jax.jit(jax.vmap(m._light_enough))(s, g))
    light, exact = (np.asarray(v) for v in jax.jit(jax.vmap(m._log_a_minus_1_light))(q, s, a, g))
    full = np.asarray(jax.jit(jax.vmap(m._log_a_minus_1_full))(q, s, a, g))
    # An all-eligible batch takes the light layout (test_regression_guard checks the choice).
    chosen = np.asarray(jax.jit(m.log_a_minus_1_quadrature)(q[eligible], s[eligible], a[eligible]))
  err = lambda got: np.abs(got - lam1) / np.maximum(1.0, np.abs(lam1))
  assert eligible.sum() >= 100 and (~eligible).sum() >= 50
  assert err(full).max() <= TOL
  worst = int(np.argmax(np.where(eligible, err(light), 0.0)))
  assert err(light)[eligible].max() <= TOL, (tags[worst], q[worst], s[worst], a[worst])
  assert exact[
    eligible
  ].all()  # its shifted sum (jaxrdp.mechanisms._sgm_quadrature._log_integral_shifted)
  rel = np.abs(chosen - lam1[eligible]) / np.maximum(1.0, np.abs(lam1[eligible]))
  assert rel.max() <= TOL
  assert np.nanmax(np.where(eligible, 0.0, err(light))) > 1e-9
