"""Attack risk on every row of the held-out draw against the Laplace-inversion reference.

tests/test_risk.py checks the MNIST row and every third row of
tests/data/risk_reference.json (each configuration compiles its own FFT lengths);
this script checks all of them: the certified upper bounds of the TPR at FPR 1%
and of the advantage must be at or above the reference and within 1e-5 of it, the
lower bounds at or below it. The reference (tests/risk_oracle.py, built by
tests/make_risk_reference.py from a seed no tuning of jaxrdp used) agrees with
itself at two resolutions of the inversion to better than 1e-6.

Writes benchmarks/results/validate_risk.json. Usage: python benchmarks/validate_risk.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import jaxrdp  # noqa: E402

TOL = 1e-5


def _summary(up, low, ref):
  above = up - ref
  return {
    "max_abs_error_upper": float(np.max(np.abs(above))),
    "min_upper_minus_reference": float(np.min(above)),
    "max_upper_minus_reference": float(np.max(above)),
    "max_reference_minus_lower": float(np.max(ref - low)),
    "min_reference_minus_lower": float(np.min(ref - low)),
    "upper_never_below": bool(np.all(above >= 0)),
    "upper_within_tolerance": bool(np.all(above <= TOL)),
    "lower_never_above": bool(np.all(low <= ref)),
  }


def main():
  ref = json.loads((ROOT / "tests" / "data" / "risk_reference.json").read_text())
  rows = [r for r in ref["rows"] if "skipped" not in r]
  q, sigma, steps = (np.array([r[k] for r in rows]) for k in ("q", "sigma", "steps"))
  t = time.perf_counter()
  tpr = jaxrdp.dpsgd_tpr(q, sigma, steps, ref["fpr"])
  adv = jaxrdp.dpsgd_advantage(q, sigma, steps)
  seconds = time.perf_counter() - t
  tpr_up, tpr_low = np.asarray(tpr.tpr), np.asarray(tpr.tpr_lower)
  adv_up, adv_low = np.asarray(adv.advantage), np.asarray(adv.advantage_lower)
  tpr_ref = np.array([r["tpr_2"] for r in rows])
  adv_ref = np.array([r["advantage_2"] for r in rows])
  results = {
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    "rows": len(rows),
    "skipped_by_the_reference": len(ref["rows"]) - len(rows),
    "fpr": ref["fpr"],
    "tolerance": TOL,
    "seconds_with_compilation": seconds,
    "tpr": _summary(tpr_up, tpr_low, tpr_ref),
    "advantage": _summary(adv_up, adv_low, adv_ref),
    "per_row": [
      {
        "q": float(a),
        "sigma": float(b),
        "steps": float(c),
        "tpr_reference": float(d),
        "tpr": float(e),
        "tpr_lower": float(f),
        "advantage_reference": float(g),
        "advantage": float(h),
        "advantage_lower": float(i),
      }
      for a, b, c, d, e, f, g, h, i in zip(
        q, sigma, steps, tpr_ref, tpr_up, tpr_low, adv_ref, adv_up, adv_low
      )
    ],
  }
  out = ROOT / "benchmarks" / "results" / "validate_risk.json"
  out.write_text(json.dumps(results, indent=1) + "\n")
  print(json.dumps({k: results[k] for k in ("rows", "tpr", "advantage")}, indent=1))
  checks = ("upper_never_below", "upper_within_tolerance", "lower_never_above")
  ok = all(results[k][c] for k in ("tpr", "advantage") for c in checks)
  print(f"wrote {out}; {'all checks pass' if ok else 'A CHECK FAILED'}")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
