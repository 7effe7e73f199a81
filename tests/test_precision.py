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


def test_round_up_to_float32_is_never_below_and_at_most_one_ulp_above():
  # In this process (x64 on): the cast itself, across float32's whole range. XLA's CPU
  # flushes subnormals to zero, which once made the one-ulp bump vanish below 1e-31.
  import jax
  import jax.numpy as jnp
  import numpy as np

  from jaxrdp._core.precision import round_up_to

  mags = np.geomspace(1e-45, 3e38, 3000)
  x = np.concatenate([mags, -mags, [0.0, 2.0**-126, 1.0, 1.0 + 2.0**-40]])
  tiny = float(np.finfo(np.float32).tiny)
  for got in (
    round_up_to(jnp.asarray(x), jnp.float32),
    jax.jit(round_up_to, static_argnums=1)(x, jnp.float32),
  ):
    assert got.dtype == jnp.float32
    y = np.asarray(got, np.float64)
    assert np.all(y >= x)
    ulp = np.spacing(np.abs(y).astype(np.float32)).astype(np.float64)
    normal = np.abs(x) >= tiny
    assert np.all((y - x)[normal] <= ulp[normal])
    # Below the normal range: the smallest normal float (positive x) or 0 (negative x).
    assert np.all(y[~normal] == np.where(x[~normal] > 0, tiny, 0.0))


def test_float32_tight_bounds_round_outwards_and_traced_bad_steps_give_nan():
  # A jitted float32 call: the upper bound is rounded up and the certified lower
  # bound down (it used to be rounded up too, above the truth 1.0690777020 here);
  # a traced non-integer number of steps gives NaN, not the value at fewer steps.
  out = _run("""
      import numpy as np, jax, jax.numpy as jnp
      import jaxrdp
      assert not jax.config.jax_enable_x64
      f = jax.jit(lambda q, s, t, d: jaxrdp.dpsgd_epsilon(q, s, t, d, accountant="pld"))
      args = [np.float32(x) for x in (0.16036066, 2.2302697, 1.0, 2.3914223e-10)]
      r = f(*args)
      assert r.epsilon.dtype == jnp.float32 and r.epsilon_lower.dtype == jnp.float32
      exact = jaxrdp.dpsgd_epsilon(*[float(x) for x in args], accountant="pld")
      assert float(r.epsilon) >= float(exact.epsilon), (r, exact)
      assert float(r.epsilon_lower) <= float(exact.epsilon_lower), (r, exact)
      g = jax.jit(lambda t: jaxrdp.dpsgd_epsilon(0.01, 1.0, t, 1e-5, accountant="pld").epsilon)
      assert np.isnan(float(g(2.5))), g(2.5)
      assert np.isfinite(float(g(3.0)))
      print("ok")
  """)
  assert out.strip().endswith("ok")
