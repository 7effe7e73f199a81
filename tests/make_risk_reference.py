"""Precomputes the attack-risk references of tests/test_risk.py with tests/risk_oracle.py.

For each configuration (a draw, log-uniform in q, sigma and T, from a seed that
no tuning of jaxrdp used, plus the MNIST configuration), the oracle's TPR at
FPR 1% in each adjacency direction and the advantage, at two resolutions of
the Laplace inversion (``refine`` 1 and 2; the test requires them to agree).
Configurations where the oracle has no answer (it raises: few steps, or a
threshold far below one step's loss scale), or none within ``--limit`` seconds
(a lumpy composition can need minutes per contour), are recorded as skipped.

Run: python tests/make_risk_reference.py [--n 24] [--seed 20271] [--out FILE]
[--limit 600] [--resume LOG] (``--resume``: the rows already printed to a log of
an earlier run are kept, not recomputed).
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path

import numpy as np
import risk_oracle

FPR = 0.01


def draw(n, seed):
  """``n`` configurations, log-uniform in q, sigma and T, kept where the Gaussian-DP
  central-limit ``mu = q sqrt(T (e^{1/sigma^2} - 1))`` is in [0.05, 6] (beyond, the TPR
  at 1% is within 1e-4 of 0.01 or of 1)."""
  rng = np.random.default_rng(seed)
  rows = []
  while len(rows) < n:
    q = np.exp(rng.uniform(np.log(1e-3), np.log(0.5)))
    sigma = np.exp(rng.uniform(np.log(0.5), np.log(10.0)))
    steps = float(np.round(np.exp(rng.uniform(np.log(10.0), np.log(1e5)))))
    mu = q * np.sqrt(steps * np.expm1(1.0 / sigma**2))
    if 0.05 <= mu <= 6.0:
      rows.append((q, sigma, steps))
  return tuple(np.array(x) for x in zip(*rows))


class _Timeout(Exception):
  pass


def _alarm(signum, frame):
  raise _Timeout()


def reference(q, sigma, steps, limit):
  row = dict(q=q, sigma=sigma, steps=steps, fpr=FPR)
  t = time.time()
  signal.signal(signal.SIGALRM, _alarm)
  signal.alarm(int(limit))
  try:
    for refine in (1, 2):
      best, remove, add = risk_oracle.tpr(q, sigma, steps, FPR, refine)
      row[f"tpr_{refine}"] = best
      row[f"tpr_remove_{refine}"] = remove
      row[f"tpr_add_{refine}"] = add
      row[f"advantage_{refine}"] = risk_oracle.advantage(q, sigma, steps, refine)
  except ValueError as e:
    row["skipped"] = str(e)
  except _Timeout:
    row["skipped"] = f"no answer within {limit:g} s"
  finally:
    signal.alarm(0)
  row["seconds"] = round(time.time() - t, 1)
  return row


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--n", type=int, default=24)
  p.add_argument("--seed", type=int, default=20271)
  p.add_argument("--out", default=str(Path(__file__).parent / "data" / "risk_reference.json"))
  p.add_argument("--limit", type=float, default=600.0, help="seconds per configuration")
  p.add_argument("--resume", help="log of an earlier run whose printed rows are kept")
  args = p.parse_args(argv)
  configs = [(256 / 60000, 1.1, 14063.0)] + list(zip(*draw(args.n, args.seed)))
  done = {}
  if args.resume:
    for line in Path(args.resume).read_text().splitlines():
      if line.startswith("{"):
        r = json.loads(line)
        done[(r["q"], r["sigma"], r["steps"])] = r
  rows = []
  for q, sigma, steps in configs:
    key = (float(q), float(sigma), float(steps))
    row = done.get(key) or reference(*key, args.limit)
    rows.append(row)
    print(json.dumps(row), flush=True)
  Path(args.out).write_text(
    json.dumps(
      dict(
        source="tests/risk_oracle.py (Laplace inversion of the composed MGF)",
        seed=args.seed,
        fpr=FPR,
        rows=rows,
      ),
      indent=1,
    )
    + "\n"
  )


if __name__ == "__main__":
  main()
