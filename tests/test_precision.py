"""float64 without touching the caller's config; float32 callers get values rounded up.

These run in a subprocess because the test session itself enables x64.
"""

import subprocess
import sys
import textwrap


def _run(code):
  out = subprocess.run(
    [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert out.returncode == 0, out.stderr
  return out.stdout


def test_float32_jit_context_rounds_up_and_leaves_config_alone():
  out = _run("""
      import numpy as np, jax, jax.numpy as jnp
      import jaxrdp
      assert not jax.config.jax_enable_x64
      eager = jaxrdp.dpsgd_epsilon(np.geomspace(1e-3, 0.1, 7), np.linspace(0.6, 3, 7), 1000, 1e-5)
      assert eager.epsilon.dtype == np.float64          # eager results are float64
      ref = np.asarray(eager.epsilon)

      @jax.jit
      def step(q, s):                                   # a float32 program
        acct = jaxrdp.RdpAccountant()
        event = jaxrdp.events.SelfComposed(jaxrdp.events.PoissonSampled(q, jaxrdp.events.Gaussian(s)), 1000)
        st = acct.compose(acct.init(), event)
        return acct.get_epsilon(st, 1e-5).epsilon, jaxrdp.dpsgd_epsilon(q, s, 1000, 1e-5).epsilon

      qs, ss = jnp.geomspace(1e-3, 0.1, 7).astype(jnp.float32), jnp.linspace(0.6, 3, 7).astype(jnp.float32)
      for q, s, r in zip(qs, ss, ref):
        a, b = step(q, s)
        assert a.dtype == jnp.float32 and b.dtype == jnp.float32
        # The float32 inputs are not the float64 grid; compare with float64 at the float32 inputs.
        r64 = float(jaxrdp.dpsgd_epsilon(float(q), float(s), 1000, 1e-5).epsilon)
        for x in (float(a), float(b)):
          assert x >= r64, (x, r64)                     # never below the float64 value
          assert x - r64 <= 2.0 ** -23 * r64 * 1.0001   # at most one float32 ulp above
      assert not jax.config.jax_enable_x64
      print("ok")
  """)
  assert out.strip().endswith("ok")
