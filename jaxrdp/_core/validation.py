"""Argument validation at the Python boundary.

Concrete (non-traced) arguments are checked eagerly and raise ``ValueError``
naming the argument and its allowed range. Traced arguments cannot be checked
in Python; the kernels map invalid traced values to NaN instead, and never to a
wrong finite number. Each range is an :class:`Interval` defined once below
(``PROBABILITY``, ``DELTA``, ``ORDER``, ...): its ``check`` is the eager test and
its ``holds`` the traced mask.
"""

from __future__ import annotations

import decimal
import fractions
import operator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
  "is_concrete",
  "check_range",
  "check_all",
  "all_hold",
  "concrete_or_none",
  "Interval",
  "PROBABILITY",
  "NOISE_MULTIPLIER",
  "FINITE_NOISE_MULTIPLIER",
  "ORDER",
  "DELTA",
  "COUNT",
  "EPSILON",
  "FINITE_EPSILON",
  "RDP",
  "check_real",
  "check_int",
  "real_scalar",
]


def is_concrete(x) -> bool:
  """True if ``x`` holds a value now (it is not a JAX tracer)."""
  return not isinstance(x, jax.core.Tracer)


def concrete_or_none(x):
  """Returns ``x`` as a float64 numpy array if concrete, else ``None``."""
  if not is_concrete(x):
    return None
  try:
    return np.asarray(x, dtype=np.float64)
  except (TypeError, ValueError, OverflowError) as e:
    raise ValueError(f"could not convert argument to a float array: {e}") from None


_REAL_KINDS = "iuf"  # numpy dtype kinds accepted: integers, floats


def _holds_bool(x) -> bool:
  """True if the nested list or tuple ``x`` has a bool among its elements."""
  return any(
    isinstance(e, (bool, np.bool_)) or (isinstance(e, (list, tuple)) and _holds_bool(e)) for e in x
  )


def check_real(name: str, x) -> None:
  """Raises TypeError unless ``x`` is a real number or an array (or nested list) of them.

  Strings, bytes, None, booleans (``q=True`` is not a rate of 1), complex numbers,
  Decimal, Fraction, dicts and other objects are refused here, with the argument's
  name, instead of failing later inside JAX (or, for Decimal and Fraction, being
  rounded to the nearest float, which can be below the value given). So are floats
  wider than float64 (``np.longdouble``): JAX has no such type, and rounding them to
  float64 can land below the value given. A Python int too large for float64 raises
  ValueError.
  """
  if not is_concrete(x):
    return
  allowed = "a real number (int or float) or an array or list of them"
  if isinstance(x, (bool, np.bool_)):
    raise TypeError(f"{name} must be {allowed}, got a bool ({x!r})")
  if isinstance(x, (jax.Array, np.ndarray, np.generic)):
    kind = np.dtype(x.dtype).kind
  elif isinstance(x, (int, float)):
    kind = "f"
  elif isinstance(x, (list, tuple)):
    if _holds_bool(x):  # np.asarray([1.0, True]) would read True as 1.0
      raise TypeError(f"{name} must be {allowed}, got {type(x).__name__} with a bool element")
    try:
      kind = np.asarray(x).dtype.kind
    except (TypeError, ValueError, OverflowError):
      kind = "O"
  else:
    raise TypeError(f"{name} must be {allowed}, got {type(x).__name__}")
  if kind not in _REAL_KINDS:
    raise TypeError(
      f"{name} must be {allowed}, got {type(x).__name__} with "
      f"{'elements of dtype ' + str(np.asarray(x).dtype) if kind != 'O' else 'non-numeric or oversized elements'}"
    )
  if kind == "f" and not isinstance(x, (int, float)) and np.asarray(x).dtype.itemsize > 8:
    raise TypeError(
      f"{name} must be at most float64 precision, got {np.asarray(x).dtype} "
      "(np.longdouble): JAX computes in float64; convert it, knowing that rounding to "
      "float64 can go either way"
    )
  try:
    np.asarray(x, dtype=np.float64)
  except OverflowError:
    raise ValueError(f"{name} must be a float64 number; an integer this large overflows") from None


def check_range(
  name: str,
  x,
  *,
  lower: float | None = None,
  upper: float | None = None,
  lower_open: bool = False,
  upper_open: bool = False,
  allow_inf: bool = False,
) -> None:
  """Raises ValueError if concrete ``x`` has NaN or leaves the given interval.

  Args:
    name: argument name used in the message.
    x: array-like or tracer (tracers are not checked).
    lower, upper: bounds; ``None`` means unbounded.
    lower_open, upper_open: whether the bound itself is excluded.
    allow_inf: whether +inf is an allowed value.
  """
  check_real(name, x)
  arr = concrete_or_none(x)
  if arr is None:
    return
  lo = "-inf" if lower is None else repr(float(lower))
  hi = "inf" if upper is None else repr(float(upper))
  closes = (upper is None and allow_inf) or (upper is not None and not upper_open)
  interval = f"{'(' if lower_open or lower is None else '['}{lo}, {hi}{']' if closes else ')'}"
  if np.isnan(arr).any():
    raise ValueError(f"{name} must not be NaN; allowed range is {interval}")
  bad = np.zeros(arr.shape, dtype=bool)
  if lower is not None:
    bad |= (arr <= lower) if lower_open else (arr < lower)
  if upper is not None:
    bad |= (arr >= upper) if upper_open else (arr > upper)
  if not allow_inf:
    bad |= np.isinf(arr)
  if bad.any():
    first = float(arr[bad].flat[0])  # a Python float: "got 2.0", not "got np.float64(2.0)"
    raise ValueError(f"{name} must be in {interval}, got {first!r}")


class StaticArray:
  """A concrete float64 array usable as a static (hashable) ``jax.jit`` argument.

  Orders are usually a fixed grid; passing them statically lets the kernels
  choose per-order algorithms (series for integer orders) at trace time.
  """

  __slots__ = ("array", "_key")

  def __init__(self, array):
    self.array = np.asarray(array, dtype=np.float64)
    self.array.setflags(write=False)
    self._key = (self.array.shape, self.array.tobytes())

  def __hash__(self):
    return hash(self._key)

  def __eq__(self, other):
    return isinstance(other, StaticArray) and self._key == other._key


def static_or_none(x):
  """StaticArray of ``x`` if it is concrete, else None (it is traced)."""
  arr = concrete_or_none(x)
  return None if arr is None else StaticArray(arr)


class Interval(NamedTuple):
  """The valid range of an argument, stated once.

  ``check`` raises for concrete values outside it (eager use), and ``holds`` is
  the same set as a traced boolean mask, where a kernel maps what lies outside
  to NaN: the two cannot disagree.
  """

  lower: float | None = None
  upper: float | None = None
  lower_open: bool = False
  upper_open: bool = False
  allow_inf: bool = False

  def check(self, name: str, x) -> None:
    """Raises ValueError naming ``name`` if concrete ``x`` has NaN or leaves the range."""
    check_range(name, x, **self._asdict())

  def holds(self, x) -> jax.Array:
    """Elementwise: ``x`` lies in the range (False at NaN); traceable."""
    ok = None
    if self.lower is not None:
      ok = (x > self.lower) if self.lower_open else (x >= self.lower)
    if self.upper is not None:
      up = (x < self.upper) if self.upper_open else (x <= self.upper)
      ok = up if ok is None else ok & up
    if not self.allow_inf and (self.upper is None or self.upper == np.inf):
      # (A finite upper bound already excludes +inf; a lower one, -inf.)
      finite = jnp.isfinite(x) if self.lower is None else x < np.inf
      ok = finite if ok is None else ok & finite
    return ~jnp.isnan(x) if ok is None else ok  # comparisons are False at NaN


def check_all(args) -> None:
  """``interval.check(name, x)`` for every ``(name, x, interval)`` of ``args``, in order."""
  for name, x, interval in args:
    interval.check(name, x)


def all_hold(args) -> jax.Array:
  """Traced mask: every ``x`` of the ``(x, interval)`` pairs lies in its interval."""
  ok = None
  for x, interval in args:
    ok = interval.holds(x) if ok is None else ok & interval.holds(x)
  return ok


# The ranges, one definition each. Their messages read, for example,
# "q must be in [0.0, 1.0], got 2.0".
PROBABILITY = Interval(0.0, 1.0)  # a sampling rate q, a probability p
NOISE_MULTIPLIER = Interval(0.0, allow_inf=True)  # sigma: 0 (no noise) up to inf (no release)
FINITE_NOISE_MULTIPLIER = Interval(0.0)
ORDER = Interval(1.0, lower_open=True, allow_inf=True)  # a Renyi order alpha in (1, inf]
DELTA = Interval(0.0, 1.0, lower_open=True, upper_open=True)  # a target delta in (0, 1)
COUNT = Interval(0.0)  # a number of steps or compositions: finite, >= 0
EPSILON = Interval(0.0, allow_inf=True)
FINITE_EPSILON = Interval(0.0)
RDP = Interval(0.0, allow_inf=True)  # an RDP value (inf: no bound at that order)


def check_int(name, value, low, high=None):
  """``value`` as a Python int in [low, high], or an error naming ``name``.

  TypeError for what is not a number (a str, bytes, a bool, Decimal, Fraction);
  ValueError for a number that is not an integer or lies outside the range."""
  if isinstance(value, (bool, np.bool_, str, bytes, decimal.Decimal, fractions.Fraction)):
    raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
  try:
    v = operator.index(value)
  except TypeError:
    raise ValueError(f"{name} must be an integer, got {value!r}") from None
  if v < low or (high is not None and v > high):
    hi = "inf" if high is None else str(high)
    raise ValueError(f"{name} must be in [{low}, {hi}], got {v}")
  return v


def real_scalar(name, value) -> float:
  """A real scalar as a float, or an error naming ``name``: TypeError for a str,
  bytes, a bool, Decimal, Fraction or np.longdouble (as ``jaxrdp.dpsgd_epsilon``
  refuses them), ValueError for an array."""
  check_real(name, value)
  if np.ndim(value) != 0:
    raise ValueError(f"{name} must be a scalar, got shape {np.shape(value)}")
  return float(np.asarray(value, dtype=np.float64))
