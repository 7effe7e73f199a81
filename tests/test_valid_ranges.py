"""Each valid range is stated once (jaxrdp._core.validation): its eager check and its
traced mask accept exactly the same values."""

import numpy as np
import jax
import jax.numpy as jnp
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
