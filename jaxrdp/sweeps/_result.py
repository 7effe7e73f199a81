"""The labelled result of a sweep: epsilon over a grid, with what computed it.

:class:`SweepResult` holds the axes, epsilon and the order per cell, the attack risk
where it was asked for, and the accountant, sampler and relation that produced them;
it selects sub-grids and writes tables, CSV, JSON and pandas frames that carry those
labels. Printed bounds are rounded in the direction that keeps them bounds: an
upper bound (epsilon, a TPR, an advantage) up, a lower bound down.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from typing import Any

import numpy as np

from ._table import format_number, format_table, pick_indices

__all__ = ["SweepResult"]

# The attack-risk arrays a sweep may carry, and how each is rounded in a table:
# upper bounds up, lower bounds down.
_RISK = {"tpr": 1, "tpr_lower": -1, "advantage": 1, "advantage_lower": -1}


def _json_safe(a: np.ndarray):
  # JSON has no NaN or inf: they become the strings "nan", "inf" and "-inf" (as in
  # the CLI's --json), which say what the number is where null would not.
  a = np.asarray(a, dtype=np.float64)
  obj = a.astype(object)
  obj[np.isnan(a)] = "nan"
  obj[np.isposinf(a)] = "inf"
  obj[np.isneginf(a)] = "-inf"
  return obj.tolist()


@dataclasses.dataclass(frozen=True, eq=False)
class SweepResult:
  """Epsilon over a labelled grid, as returned by `sweep`.

  Attributes:
    axes: dict from axis name to its 1-D numpy values, in grid-dimension order
      (names among dataset_size, batch_size, q, sigma, epochs, steps, delta).
    epsilon: float64 array with one dimension per axis.
    order: the RDP order attaining each epsilon (same shape).
    q: sampling rate per cell, broadcastable to `epsilon.shape`.
    steps: number of steps per cell, broadcastable to `epsilon.shape`.
    accountant: the accountant that computed epsilon (``"rdp"``, ``"pld"``, ...),
      and the attack risk.
    sampling: the batching scheme (``"poisson"``, ``"fixed"``, ``"shuffle"``).
    relation: the neighbouring relation (``"add_remove"``, ``"replace_one"``).
    fpr: the false-positive rate of ``tpr`` (``sweep(tpr_at_fpr=...)``), else None.
    tpr: certified upper bound of the best membership-inference attack's
      true-positive rate at ``fpr`` per cell, broadcastable to ``epsilon.shape``
      (the delta axis has length 1: the risk does not depend on delta); None unless
      asked for.
    tpr_lower: its certified lower bound (the FPR itself for the Renyi-DP accountant).
    advantage: certified upper bound of the membership advantage ``max (TPR - FPR)``
      (``sweep(advantage=True)``), broadcastable likewise; None unless asked for.
    advantage_lower: its certified lower bound (0 for the Renyi-DP accountant).
  """

  axes: dict[str, np.ndarray]
  epsilon: np.ndarray
  order: np.ndarray
  q: np.ndarray
  steps: np.ndarray
  accountant: str = "rdp"
  sampling: str = "poisson"
  relation: str = "add_remove"
  fpr: float | None = None
  tpr: np.ndarray | None = None
  tpr_lower: np.ndarray | None = None
  advantage: np.ndarray | None = None
  advantage_lower: np.ndarray | None = None

  def _risk(self) -> dict[str, np.ndarray]:
    """The attack-risk arrays present, by name, in the order of ``_RISK``."""
    return {k: getattr(self, k) for k in _RISK if getattr(self, k) is not None}

  @property
  def label(self) -> str:
    """The accountant, sampler and relation that computed the epsilons, in words."""
    what = {"rdp": "Renyi-DP accountant", "pld": "tight (PLD) accountant"}
    return (
      f"{what.get(self.accountant, self.accountant)}, {self.sampling} sampling, "
      f"{self.relation.replace('_', '/')}"
    )

  @property
  def dims(self) -> tuple[str, ...]:
    """Axis names, one per dimension of `epsilon`."""
    return tuple(self.axes)

  @property
  def shape(self) -> tuple[int, ...]:
    return self.epsilon.shape

  @property
  def size(self) -> int:
    return int(self.epsilon.size)

  def __repr__(self) -> str:
    dims = ", ".join(f"{k}={len(v)}" for k, v in self.axes.items())
    return f"SweepResult({dims}; {self.size} cells)"

  def select(self, **values: float) -> SweepResult:
    """Sub-grid at the given axis values (each kept as a length-1 axis).

    Values match the axis entries up to a relative 1e-9; a value that is not on the
    axis raises ValueError. Example: `res.select(epochs=60, batch_size=256)`.
    """
    index: list[Any] = [slice(None)] * len(self.axes)
    axes = dict(self.axes)
    for name, value in values.items():
      if name not in self.axes:
        raise ValueError(f"{name!r} is not an axis of this sweep ({', '.join(self.axes)})")
      vals = self.axes[name]
      hit = np.nonzero(np.isclose(vals, value, rtol=1e-9, atol=0.0))[0]
      if hit.size == 0:
        raise ValueError(f"{name}={value!r} is not on the axis {vals.tolist()}")
      i = int(hit[0])
      index[self.dims.index(name)] = slice(i, i + 1)
      axes[name] = vals[i : i + 1]
    idx = tuple(index)

    def cut(a):
      a = np.asarray(a)
      sub = tuple(s if a.shape[k] > 1 else slice(None) for k, s in enumerate(idx))
      return a[sub]

    return dataclasses.replace(
      self,
      axes=axes,
      epsilon=self.epsilon[idx],
      order=self.order[idx],
      q=cut(self.q),
      steps=cut(self.steps),
      **{k: cut(v) for k, v in self._risk().items()},
    )

  def columns(self) -> dict[str, np.ndarray]:
    """Long format: one flat column per axis, plus q, steps, epsilon and order, and
    the attack risk where present (fpr, tpr, tpr_lower, advantage, advantage_lower)."""
    shape = self.shape
    cols: dict[str, np.ndarray] = {}
    for k, (name, vals) in enumerate(self.axes.items()):
      view = [1] * len(shape)
      view[k] = len(vals)
      cols[name] = np.broadcast_to(np.reshape(vals, view), shape).ravel()
    if "q" not in cols:
      cols["q"] = np.broadcast_to(self.q, shape).ravel()
    if "steps" not in cols:
      cols["steps"] = np.broadcast_to(self.steps, shape).ravel()
    cols["epsilon"] = self.epsilon.ravel()
    cols["order"] = self.order.ravel()
    if self.fpr is not None:
      cols["fpr"] = np.full(self.size, self.fpr)
    for k, v in self._risk().items():
      cols[k] = np.broadcast_to(v, shape).ravel()
    return cols

  def _labels(self) -> dict[str, str]:
    return {"accountant": self.accountant, "sampling": self.sampling, "relation": self.relation}

  def to_dict(self) -> dict:
    """JSON-ready dict: dims, axes, and nested lists of epsilon, order, q, steps (and
    of the attack risk where present, with ``fpr``), each of the grid's shape.

    Non-finite numbers (an infinite epsilon, say) become the strings ``"inf"``,
    ``"-inf"`` and ``"nan"`` (strict JSON has no literal for them).
    """
    shape = self.shape
    return {
      "accountant": self.accountant,
      "sampling": self.sampling,
      "relation": self.relation,
      "dims": list(self.dims),
      "axes": {k: np.asarray(v).tolist() for k, v in self.axes.items()},
      "epsilon": _json_safe(self.epsilon),
      "order": _json_safe(self.order),
      "q": _json_safe(np.broadcast_to(self.q, shape)),
      "steps": _json_safe(np.broadcast_to(self.steps, shape)),
      **({} if self.fpr is None else {"fpr": self.fpr}),
      **{k: _json_safe(np.broadcast_to(v, shape)) for k, v in self._risk().items()},
    }

  def to_json(self, path: str | None = None, indent: int | None = None) -> str:
    """JSON text of `to_dict()` (strict JSON: no NaN); written to `path` if given."""
    text = json.dumps(self.to_dict(), indent=indent, allow_nan=False)
    if path is not None:
      with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return text

  def to_csv(self, path: str | None = None) -> str:
    """Long-format CSV (one row per cell, header first); written to `path` if given.

    Floats are written with `repr`, so reading them back is exact.
    """
    cols = self.columns()
    labels = self._labels()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(cols) + list(labels))
    ints = {"dataset_size", "batch_size", "steps"}

    def cell(name, x):
      x = float(x)
      if name in ints and math.isfinite(x) and x == int(x):
        return str(int(x))
      return repr(x)

    names = list(cols)
    for row in zip(*cols.values()):
      writer.writerow([cell(n, x) for n, x in zip(names, row)] + list(labels.values()))
    text = buf.getvalue()
    if path is not None:
      with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return text

  def to_pandas(self):
    """Long-format `pandas.DataFrame` (needs pandas, which jaxrdp does not require)."""
    try:
      import pandas as pd
    except ImportError as e:
      raise ImportError("SweepResult.to_pandas() needs pandas: pip install pandas") from e
    frame = pd.DataFrame(self.columns())
    for k, v in self._labels().items():
      frame[k] = v
    return frame

  def table(self, max_rows: int = 48, max_cols: int = 8) -> str:
    """Readable text table of epsilon, each value rounded up to 4 significant digits.

    With a steps or epochs axis of several values, rows are the other varying axes
    and columns are the durations; long axes are thinned to round values (see
    `jaxrdp.sweeps._table.pick_indices`) and a note says how much is shown. Axes of one
    value are printed once above the table. The attack risk, where present, follows
    in the same layout (one block per quantity, or columns beside epsilon), upper
    bounds rounded up and lower bounds down.
    """
    dims = self.dims
    fixed = [f"{k} = {format_number(v[0])}" for k, v in self.axes.items() if len(v) == 1]
    varying = [k for k in dims if len(self.axes[k]) > 1]
    col_axis = next((k for k in ("epochs", "steps") if k in varying), None)
    row_axes = [k for k in varying if k != col_axis]
    # Thin row axes, the longest first, until the row count fits.
    keep = {k: np.arange(len(self.axes[k])) for k in dims}
    while row_axes and math.prod(len(keep[k]) for k in row_axes) > max_rows:
      k = max(row_axes, key=lambda a: len(keep[a]))
      others = math.prod(len(keep[a]) for a in row_axes if a != k)
      limit = max(2, max_rows // max(others, 1))
      if limit >= len(keep[k]):
        limit = len(keep[k]) - 1
      keep[k] = pick_indices(self.axes[k], limit)
    if col_axis is not None:
      keep[col_axis] = pick_indices(self.axes[col_axis], max_cols)
    pick = np.ix_(*[keep[k] for k in dims])
    sub_eps = self.epsilon[pick]
    sub_order = self.order[pick]
    sub_risk = {k: np.broadcast_to(v, self.shape)[pick] for k, v in self._risk().items()}
    at = f"TPR at FPR {format_number(self.fpr)}"
    names = {
      "tpr": at,
      "tpr_lower": f"{at}, lower bound",
      "advantage": "advantage",
      "advantage_lower": "advantage, lower bound",
    }

    lines = [f"epsilon by the {self.label}"]
    if fixed:
      lines.append("  ".join(fixed))
    if col_axis is not None:
      c = dims.index(col_axis)
      rest = [k for k in dims if k != col_axis]
      headers = [k for k in rest if k in row_axes] + [
        f"{col_axis}={format_number(v)}" for v in self.axes[col_axis][keep[col_axis]]
      ]
      # (the Renyi-DP lower bounds are the trivial FPR and 0: not shown in blocks)
      blocks = [("epsilon", sub_eps, 1)] + [
        (names[k], v, _RISK[k])
        for k, v in sub_risk.items()
        if not (k.endswith("_lower") and self.accountant == "rdp")
      ]
      for title, values, direction in blocks:
        values = np.moveaxis(values, c, -1)
        rows = []
        for idx in np.ndindex(*values.shape[:-1]):
          label = [
            format_number(self.axes[k][keep[k][i]]) for k, i in zip(rest, idx) if k in row_axes
          ]
          rows.append(label + [format_number(x, direction=direction) for x in values[idx]])
        lines.append(f"{title}:")
        lines.append(format_table(headers, rows))
    else:
      headers = row_axes + ["epsilon", "order"] + list(sub_risk)
      if self.fpr is not None:
        lines.append(f"tpr: at FPR {format_number(self.fpr)}")
      rows = []
      for idx in np.ndindex(*sub_eps.shape):
        label = [
          format_number(self.axes[k][keep[k][i]]) for k, i in zip(dims, idx) if k in row_axes
        ]
        risk = [format_number(v[idx], direction=_RISK[k]) for k, v in sub_risk.items()]
        rows.append(
          label + [format_number(sub_eps[idx], direction=1), format_number(sub_order[idx])] + risk
        )
      lines.append(format_table(headers, rows))
    shown = sub_eps.size
    if shown < self.size:
      lines.append(f"(showing {shown:,} of {self.size:,} cells)")
    return "\n".join(lines)
