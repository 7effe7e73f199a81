"""Boundary validation for the training helpers (concrete values only).

Concrete arguments are checked in Python before tracing and raise ValueError
naming the argument and its allowed range. Traced arguments cannot be inspected;
the functions that take them document what an invalid traced value does.
"""

from __future__ import annotations

import jax
import numpy as np

__all__ = [
    "is_concrete",
    "check_closed_unit_interval",
    "check_open_unit_interval",
    "check_nonnegative",
    "check_positive",
]


def is_concrete(x) -> bool:
    """True when no leaf of ``x`` is a tracer, so its value can be read."""
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(x))


def _values(x) -> np.ndarray | None:
    if x is None or callable(x) or not is_concrete(x):
        return None
    return np.asarray(x, dtype=np.float64)


def check_closed_unit_interval(name: str, x) -> None:
    v = _values(x)
    if v is not None and (np.any(np.isnan(v)) or np.any(v < 0.0) or np.any(v > 1.0)):
        raise ValueError(f"{name} must lie in [0, 1], got {x!r}")


def check_open_unit_interval(name: str, x) -> None:
    v = _values(x)
    if v is not None and (np.any(np.isnan(v)) or np.any(v <= 0.0) or np.any(v >= 1.0)):
        raise ValueError(f"{name} must lie in (0, 1), got {x!r}")


def check_nonnegative(name: str, x) -> None:
    v = _values(x)
    if v is not None and (np.any(np.isnan(v)) or np.any(v < 0.0)):
        raise ValueError(f"{name} must be >= 0 (inf allowed), got {x!r}")


def check_positive(name: str, x) -> None:
    v = _values(x)
    if v is not None and (np.any(np.isnan(v)) or np.any(v <= 0.0)):
        raise ValueError(f"{name} must be > 0 (inf allowed), got {x!r}")
