"""Plain-text tables and value picking for human-readable output (CLI, reprs)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = ["format_table", "format_number", "pick_indices"]


def format_number(x, digits: int = 4, direction: int = 0) -> str:
  """Compact decimal for a table cell: ``digits`` significant digits, integers kept whole.

  ``direction=+1`` rounds up and ``-1`` down instead of to nearest, so that a
  printed upper bound (an epsilon or delta to publish) is never below the
  computed one, and a printed lower bound never above it.
  """
  try:
    x = float(x)
  except (TypeError, ValueError):
    return str(x)
  if math.isnan(x):
    return "nan"
  if math.isinf(x):
    return "inf" if x > 0 else "-inf"
  if x == int(x) and abs(x) < 1e15:
    return str(int(x))
  text = f"{x:.{digits}g}"
  if direction and x != 0 and (float(text) - x) * direction < 0:
    # Move the last printed digit one unit in the wanted direction.
    exponent = math.floor(math.log10(abs(x))) - (digits - 1)
    step = 10.0**exponent
    rounded = (math.ceil(x / step) if direction > 0 else math.floor(x / step)) * step
    text = f"{rounded:.{digits}g}"
    if (float(text) - x) * direction < 0:  # the decimal rounding of the step itself
      text = f"{rounded + direction * step:.{digits}g}"
  return text


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  """Right-aligned columns separated by two spaces, with a dashed rule under headers."""
  widths = [len(h) for h in headers]
  for row in rows:
    widths = [max(w, len(c)) for w, c in zip(widths, row)]
  lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths))]
  lines.append("  ".join("-" * w for w in widths))
  lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
  return "\n".join(lines)


def _nice_values(lo: float, hi: float) -> np.ndarray:
  # The 1-2-5 series (1, 2, 5, 10, 20, ...) between lo and hi.
  out = []
  for e in range(int(math.floor(math.log10(lo))) - 1, int(math.ceil(math.log10(hi))) + 1):
    for m in (1, 2, 5):
      v = m * 10.0**e
      if lo * (1 - 1e-12) <= v <= hi * (1 + 1e-12):
        out.append(v)
  return np.asarray(out)


def pick_indices(values: np.ndarray, limit: int) -> np.ndarray:
  """Up to `limit` indices of a 1-D axis to show, preferring round values.

  A wide positive axis (max/min >= 20) shows the entries that sit on the 1-2-5 series
  (1, 2, 5, 10, 20, 50, 100, ...) when there are at least three; otherwise evenly
  spaced entries, choosing a count that divides the axis evenly when one is close
  (26 sigmas 0.5..3.0 with limit 6 give 0.5, 1.0, ..., 3.0).
  """
  values = np.asarray(values, dtype=np.float64)
  n = values.size
  if n <= limit:
    return np.arange(n)
  finite = values[np.isfinite(values)]
  if finite.size and finite.min() > 0 and finite.max() / finite.min() >= 20:
    nice = _nice_values(finite.min(), finite.max())
    hits = [int(np.argmin(np.abs(values - v))) for v in nice]
    hits = [i for i, v in zip(hits, nice) if abs(values[i] - v) <= 1e-9 * v]
    hits = sorted(set(hits))
    if 3 <= len(hits) <= limit:
      return np.asarray(hits)
  for m in range(limit, max(limit // 2, 2) - 1, -1):
    if (n - 1) % (m - 1) == 0:
      return np.arange(0, n, (n - 1) // (m - 1))
  return np.unique(np.round(np.linspace(0, n - 1, limit)).astype(int))
