"""Each valid range is stated once (jaxrdp._core.validation): its eager check and its
traced mask accept exactly the same values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrdp._core import validation as v

VALUES = np.array(
  [-np.inf, -1.0, -0.0, 0.0, 1e-300, 0.5, 1.0, 1.0000001, 2.0, 1e300, np.inf, np.nan]
)
RANGES = [
  "PROBABILITY",
  "NOISE_MULTIPLIER",
  "FINITE_NOISE_MULTIPLIER",
  "ORDER",
  "DELTA",
  "COUNT",
  "EPSILON",
  "FINITE_EPSILON",
  "RDP",
]


@pytest.mark.parametrize("name", RANGES)
def test_eager_check_and_traced_mask_agree(name):
  interval = getattr(v, name)
  eager = []
  for x in VALUES:
    try:
      interval.check("x", x)
      eager.append(True)
    except ValueError:
      eager.append(False)
  traced = jax.jit(interval.holds)(jnp.asarray(VALUES))
  np.testing.assert_array_equal(np.asarray(traced), eager)


def test_message_names_the_argument_range_and_value():
  with pytest.raises(ValueError, match=r"^q must be in \[0\.0, 1\.0\], got 2\.0$"):
    v.PROBABILITY.check("q", np.array([0.5, 2.0]))
  with pytest.raises(ValueError, match=r"^delta must be in \(0\.0, 1\.0\), got 1\.0$"):
    v.DELTA.check("delta", 1)
  with pytest.raises(ValueError, match=r"^alpha must not be NaN; allowed range is \(1\.0, inf\]$"):
    v.ORDER.check("alpha", float("nan"))


@pytest.mark.parametrize(
  "value, what",
  [
    (True, "bool"),
    (np.True_, "bool"),
    ([0.5, False], "bool element"),
    (np.array([True]), "dtype bool"),
    ("0.5", "str"),
    (b"0.5", "bytes"),
    (np.longdouble("0.5"), "float64 precision"),
    (np.array([0.5], dtype=np.longdouble), "float64 precision"),
  ],
)
def test_non_numbers_refused_with_the_argument_name(value, what):
  # q=True is not a rate of 1; a longdouble has no JAX type (it used to fail inside
  # JAX with "No dtype_to_ir_type handler") and cannot be rounded to float64 safely.
  with pytest.raises(TypeError, match=f"^q must .*{what}"):
    v.check_range("q", value, lower=0.0, upper=1.0)


def test_public_functions_refuse_bools():
  import jaxrdp

  for call in (
    lambda: jaxrdp.dpsgd_epsilon(True, 1.0, 10, 1e-5),
    lambda: jaxrdp.calibrate_noise(1.0, 1e-5, True, 10),
    lambda: jaxrdp.sweep(q=0.1, sigma=[1.0, True], steps=10),
    lambda: jaxrdp.train.poisson_sample_mask(jax.random.PRNGKey(0), True, 0.5),
  ):
    with pytest.raises((TypeError, ValueError), match="q|sigma|n must"):
      call()
