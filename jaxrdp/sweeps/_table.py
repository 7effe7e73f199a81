"""Plain-text tables and value picking for human-readable output (CLI, reprs)."""

from __future__ import annotations

import decimal
import fractions
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["format_table", "format_number", "round_decimal", "pick_indices"]


def round_decimal(x, digits: int = 4, direction: int = 0) -> str:
  """``x`` (a float, or an exact ``Fraction``) to ``digits`` significant digits, rounded exactly.

  ``direction=+1`` rounds up (toward +inf: the printed number is never below ``x``),
  ``-1`` down (never above it), ``0`` to nearest (ties to even, as ``%g`` does). The
  rounding is done on the exact binary value of ``x`` in decimal arithmetic, so the
  printed number compares with ``x`` exactly as the direction promises: a calibrated
  sigma printed rounded up, or an epsilon to publish, still keeps the budget. The text
  reads as ``%.{digits}g`` would (exponent notation below 1e-4 and from 10^digits
  on); NaN and infinities print as ``nan``, ``inf`` and ``-inf``.

  Examples:
    >>> round_decimal(1.01449, 4, +1), round_decimal(1.01449, 4, -1), round_decimal(1.01449)
    ('1.015', '1.014', '1.014')
    >>> round_decimal(3.0001e-7, 2, +1), round_decimal(0.1, 3, -1)
    ('3.1e-07', '0.1')
  """
  if isinstance(x, fractions.Fraction):
    exact = x
    x = float(x)  # for the checks below only
  else:
    x = float(x)
    exact = None
  if math.isnan(x):
    return "nan"
  if math.isinf(x):
    return "inf" if x > 0 else "-inf"
  if x == 0 and (exact is None or exact == 0):
    return "0"
  rounding = {1: decimal.ROUND_CEILING, -1: decimal.ROUND_FLOOR, 0: decimal.ROUND_HALF_EVEN}
  context = decimal.Context(
    prec=digits, rounding=rounding[direction], Emin=-999999, Emax=999999, traps=[]
  )
  if exact is None:
    d = context.create_decimal(x)  # Decimal(x) is exact; create_decimal rounds it once
  else:  # a correctly rounded quotient
    d = context.divide(decimal.Decimal(exact.numerator), decimal.Decimal(exact.denominator))
  sign, coefficient, exponent = d.normalize(context).as_tuple()
  text = "".join(map(str, coefficient))
  lead = exponent + len(text) - 1  # the exponent of the leading digit
  if -4 <= lead < digits:
    if exponent >= 0:
      body = text + "0" * exponent
    elif lead >= 0:
      body = text[: lead + 1] + "." + text[lead + 1 :]
    else:
      body = "0." + "0" * (-lead - 1) + text
  else:
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    body = f"{mantissa}e{'-' if lead < 0 else '+'}{abs(lead):02d}"
  return ("-" if sign else "") + body


def format_number(x, digits: int = 4, direction: int = 0) -> str:
  """Compact decimal for a table cell: ``digits`` significant digits, integers kept whole.

  ``direction=+1`` rounds up and ``-1`` down instead of to nearest
  (:func:`round_decimal`, exact), so that a printed upper bound (an epsilon or delta
  to publish, a calibrated sigma) is never below the computed one, and a printed
  lower bound (a calibrated number of steps, sampling rate or batch size) never
  above it. Integers below 10^15 print whole (exactly). ``x`` may be a ``Fraction``
  (an exact ratio such as epochs = T B / N), rounded without a float in between.
  """
  if isinstance(x, fractions.Fraction):
    if x.denominator == 1 and abs(x) < 10**15:
      return str(x.numerator)
    return round_decimal(x, digits, direction)
  try:
    x = float(x)
  except (TypeError, ValueError):
    return str(x)
  if math.isfinite(x) and x == int(x) and abs(x) < 1e15:
    return str(int(x))
  return round_decimal(x, digits, direction)


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
