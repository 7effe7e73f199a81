"""Derivatives with jax_enable_x64 off (JAX's default), in a fresh interpreter.

The test session runs with x64 on (conftest), so this runs a script in a
subprocess. Oracles: the Gaussian mechanism (q = 1), where the RDP is
alpha / (2 sigma^2) in closed form, and central differences of the float64
values (the definition of the derivative, computed from function values only).
"""

from __future__ import annotations

import json

import pytest
from helpers import run_fresh_python

_SCRIPT = r"""
import json
import jax, jax.numpy as jnp, numpy as np, jaxrdp
assert not jax.config.jax_enable_x64
out = {}

def check(name, f, x, modes=("grad",)):
  # Each mode compiles its own derivative programs (tens of seconds for the
  # order search), so the modes are spread over the cases.
  g = jax.grad(f)(x)
  out[name] = dict(grad=float(g), dtype=str(g.dtype))
  if "jacfwd" in modes:
    out[name]["jacfwd"] = float(jax.jacfwd(f)(x))
  if "jit_grad" in modes:
    out[name]["jit_grad"] = float(jax.jit(jax.grad(f))(x))
  with jax.enable_x64(True):
    h = 1e-5 * x
    out[name]["fd"] = (float(f(jnp.float64(x + h))) - float(f(jnp.float64(x - h)))) / (2 * h)

check("rdp_gauss", lambda s: jaxrdp.mechanisms.sgm_rdp(1.0, s, 4.5), 1.3)
check("rdp_frac", lambda s: jaxrdp.mechanisms.sgm_rdp(0.01, s, 4.5), 1.0, modes=("jacfwd",))
# jit(grad) on the integer order (the exact series compiles in seconds); it is taken
# through the quadrature below, by eps_sigma and acct_eps.
check("rdp_int", lambda s: jaxrdp.mechanisms.sgm_rdp(0.01, s, 4.0), 1.0, modes=("jit_grad",))
check("eps_sigma", lambda s: jaxrdp.dpsgd_epsilon(0.01, s, 1000, 1e-5).epsilon, 1.0,
      modes=("jit_grad",))
check("eps_q", lambda q: jaxrdp.dpsgd_epsilon(q, 1.0, 1000, 1e-5).epsilon, 0.01)
check("eps_gauss", lambda s: jaxrdp.dpsgd_epsilon(1.0, s, 10, 1e-5).epsilon, 20.0)
check("delta_sigma", lambda s: jaxrdp.dpsgd_delta(0.01, s, 1000, 2.0).delta, 1.0)
# Through the accountant: two composed phases, then epsilon or delta from the state.
from jaxrdp.accountants import RdpAccountant
from jaxrdp.events import Gaussian, PoissonSampled, SelfComposed
acct = RdpAccountant(orders=[1.5, 2.0, 4.0, 8.0, 16.0, 32.0])
def acct_state(s):
  state = acct.compose(acct.init(), SelfComposed(PoissonSampled(0.01, Gaussian(s)), 1000))
  return acct.compose(state, SelfComposed(PoissonSampled(0.02, Gaussian(1.5 * s)), 100))
check("acct_eps", lambda s: acct.get_epsilon(acct_state(s), 1e-5).epsilon, 1.0,
      modes=("jit_grad",))
check("acct_delta", lambda s: acct.get_delta(acct_state(s), 2.0).delta, 1.0)
out["eps_gauss_order"] = float(jaxrdp.dpsgd_epsilon(1.0, 20.0, 10, 1e-5).order)
# Vectors: vmap of grad, and grad of a sum, on the Gaussian mechanism (closed form).
# An integer order: at q = 1 the quadrature's branch is discarded anyway, and the
# exact series compiles in seconds.
s = jnp.linspace(0.8, 2.0, 4)
f = lambda s: jaxrdp.mechanisms.sgm_rdp(1.0, s, 4.0)
out["vmap_grad"] = np.asarray(jax.vmap(jax.grad(f))(s)).tolist()
out["grad_sum"] = np.asarray(jax.grad(lambda s: jnp.sum(f(s)))(s)).tolist()
out["vector_sigma"] = np.asarray(s).tolist()
print("RESULT" + json.dumps(out))
"""

# Every test reads the module's results: a fresh interpreter runs every check (about a minute).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results():
  stdout = run_fresh_python(_SCRIPT, timeout=900)
  line = [t for t in stdout.splitlines() if t.startswith("RESULT")][-1]
  return json.loads(line[len("RESULT") :])


def test_every_mode_was_checked(results):
  assert {"grad", "jacfwd"} <= set(results["rdp_frac"]), results["rdp_frac"]
  assert {"grad", "jit_grad"} <= set(results["rdp_int"]), results["rdp_int"]
  assert "jit_grad" in results["eps_sigma"], results["eps_sigma"]
  assert "jit_grad" in results["acct_eps"], results["acct_eps"]


@pytest.mark.parametrize(
  "name",
  [
    "rdp_gauss",
    "rdp_frac",
    "rdp_int",
    "eps_sigma",
    "eps_q",
    "eps_gauss",
    "delta_sigma",
    "acct_eps",
    "acct_delta",
  ],
)
def test_derivatives_match_finite_differences(results, name):
  r = results[name]
  assert r["dtype"] == "float32"  # the caller's dtype
  for mode in ("grad", "jacfwd", "jit_grad"):
    if mode not in r:
      continue
    # float32 derivative of a float64 computation: a few float32 ulps.
    assert abs(r[mode] - r["fd"]) <= 2e-6 * abs(r["fd"]) + 1e-12, (mode, r)


def test_closed_form_derivatives_of_the_gaussian_mechanism(results):
  # q = 1: rdp = alpha / (2 sigma^2), so d rdp / d sigma = -alpha / sigma^3.
  assert abs(results["rdp_gauss"]["grad"] - (-4.5 / 1.3**3)) <= 2e-6 * 4.5 / 1.3**3
  # epsilon = min over orders of T alpha / (2 sigma^2) + c(alpha): its derivative is
  # that of the minimising order, -T alpha* / sigma^3 (envelope theorem).
  a = results["eps_gauss_order"]
  expected = -10 * a / 20.0**3
  assert abs(results["eps_gauss"]["grad"] - expected) <= 2e-6 * abs(expected)


def test_vmap_of_grad_and_grad_of_sum_on_vectors(results):
  # q = 1: d/d sigma of alpha / (2 sigma^2) is -alpha / sigma^3, element by element.
  for key in ("vmap_grad", "grad_sum"):
    for g, s in zip(results[key], results["vector_sigma"]):
      assert abs(g - (-4.0 / s**3)) <= 2e-6 * 4.0 / s**3, (key, g, s)
