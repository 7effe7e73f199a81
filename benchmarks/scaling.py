"""Scaling of epsilon computation: jaxrdp against dp_accounting.

Four measurements, each runnable on its own (``--part``), each written to
``benchmarks/results/scaling_<part>.json``; ``--plot`` turns the JSON files into
``benchmarks/figures/scaling_<part>.png``.

  size      time against the number of configurations N (standard grid ranges:
            q in [1e-3, 1e-1], sigma in [0.6, 3.0], T = 10,000, delta = 1e-5,
            dp_accounting's 156 orders). jaxrdp: one call on all N (median of
            repeated calls after the first, compiling call). dp_accounting: its
            RdpAccountant one configuration at a time, timed on at most
            --dpa-max configurations and extrapolated *linearly* in N (its cost
            per configuration does not depend on N). Grids above --chunk
            configurations (default 10^5) run in chunks of that size through one
            compiled program, timed in one pass.
  maxorder  time against the largest order: dp_accounting's orders cut at
            8, 32, 64, 256, 1024, plus 4096.
  norders   time against the number of orders: n fractional orders
            evenly spaced in [1.05, 64].
  latency   one configuration in a fresh Python process: import + first call
            (trace + compile + run) for jaxrdp, without and with JAX's
            persistent compilation cache, and import + one call for dp_accounting.

    python benchmarks/scaling.py --part size [--sizes 1 10 100 1000 10000 100000 1000000 10000000]
    python benchmarks/scaling.py --plot
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results"
FIGURES = HERE / "figures"
STEPS, DELTA = 10_000, 1e-5


def grid(n):
  side = max(1, math.ceil(math.sqrt(n)))
  qq, ss = np.meshgrid(np.geomspace(1e-3, 1e-1, side), np.linspace(0.6, 3.0, side), indexing="ij")
  return qq.ravel()[:n].copy(), ss.ravel()[:n].copy()


def time_jaxrdp(q, s, orders, min_total=0.5, max_repeats=5):
  import jax

  import jaxrdp

  def call():
    return jax.block_until_ready(jaxrdp.dpsgd_epsilon(q, s, STEPS, DELTA, orders=orders))

  t0 = time.perf_counter()
  out = call()
  first = time.perf_counter() - t0
  times = []
  while len(times) < max_repeats and (not times or sum(times) < min_total):
    t0 = time.perf_counter()
    call()
    times.append(time.perf_counter() - t0)
  return first, statistics.median(times), np.asarray(out.epsilon)


def time_jaxrdp_chunked(q, s, orders, chunk):
  """Grids larger than one call should hold: fixed-size chunks through one compiled program.

  The first chunk's call compiles the chunk shape unless an earlier size already
  did (reported apart from first-call latency); the grid is then timed once, end to
  end, chunk after chunk (the last chunk padded, so no chunk recompiles). One timed
  pass: at these sizes a pass takes seconds to minutes.
  """
  import jax

  import jaxrdp

  # Eager calls with float64 NumPy chunks, as users make them (an outer jax.jit
  # would see float32 inputs under JAX's default configuration).
  def fn(q, s):
    return jaxrdp.dpsgd_epsilon(q, s, STEPS, DELTA, orders=orders).epsilon

  n = q.size
  pad = -n % chunk
  qp, sp = np.concatenate([q, np.full(pad, q[-1])]), np.concatenate([s, np.full(pad, s[-1])])
  t0 = time.perf_counter()
  jax.block_until_ready(fn(qp[:chunk], sp[:chunk]))
  first = time.perf_counter() - t0
  out = np.empty(qp.size)
  t0 = time.perf_counter()
  for i in range(0, qp.size, chunk):
    out[i : i + chunk] = np.asarray(fn(qp[i : i + chunk], sp[i : i + chunk]))
  return first, time.perf_counter() - t0, out[:n]


def time_dpa_per_config(q, s, orders, max_configs):
  """dp_accounting seconds per configuration (mean over at most max_configs) and its epsilons."""
  import dp_accounting
  from absl import logging as absl_logging

  absl_logging.set_verbosity(absl_logging.ERROR)
  idx = np.unique(np.linspace(0, q.size - 1, min(q.size, max_configs)).astype(int))
  eps = []
  t0 = time.perf_counter()
  for i in idx:
    acc = dp_accounting.rdp.RdpAccountant(orders=[float(o) for o in orders])
    acc.compose(
      dp_accounting.PoissonSampledDpEvent(float(q[i]), dp_accounting.GaussianDpEvent(float(s[i]))),
      STEPS,
    )
    eps.append(acc.get_epsilon(DELTA))
  return (time.perf_counter() - t0) / idx.size, idx, np.array(eps)


def check(ours, idx, theirs, allow_above=False):
  """jaxrdp never above dp_accounting (beyond its ~1e-12 rounding) on the sampled cells.

  Returns the largest relative excess of jaxrdp over dp_accounting (<= 1e-10 when
  the check holds). With ``allow_above`` an excess is recorded instead of failing:
  dpsgd_epsilon returns the exact grid minimum (the search falls back to every
  order when it cannot certify it), so an excess would be a bug.
  """
  excess = float(np.max(ours[idx] / theirs - 1.0))
  ok = bool(np.all(np.isfinite(ours)) and excess <= 1e-10)
  if not ok and not (allow_above and np.all(np.isfinite(ours))):
    raise SystemExit("accuracy check failed: jaxrdp above dp_accounting or not finite")
  return excess


def part_size(args):
  import jaxrdp

  orders = jaxrdp.DP_ACCOUNTING_ORDERS
  rows = []
  for n in args.sizes:
    q, s = grid(n)
    chunked = n > args.chunk
    if chunked:
      first, med, ours = time_jaxrdp_chunked(q, s, orders, args.chunk)
    else:
      first, med, ours = time_jaxrdp(q, s, orders)
    per, idx, theirs = time_dpa_per_config(q, s, orders, args.dpa_max)
    check(ours, idx, theirs)
    # A chunked grid's first chunk reuses the program compiled for an earlier size
    # of the same chunk shape, if any: not a first-call latency, so named apart.
    rows.append(
      {
        "configurations": n,
        ("jaxrdp_first_chunk_s" if chunked else "jaxrdp_first_s"): first,
        "jaxrdp_s": med,
        "jaxrdp_chunks": -(-n // args.chunk) if chunked else 1,
        "dp_accounting_measured_configs": int(idx.size),
        "dp_accounting_s_extrapolated": per * n,
        "speedup": per * n / med,
      }
    )
    print(
      f"N={n:>6}: jaxrdp {med:.4f} s (first call {first:.2f} s); dp_accounting {per * n:.3f} s "
      f"(extrapolated from {idx.size}); speedup {per * n / med:.0f}x",
      flush=True,
    )
  return {"x": "configurations", "rows": rows}


def part_maxorder(args):
  import jaxrdp

  base = jaxrdp.DP_ACCOUNTING_ORDERS
  q, s = grid(args.configs)
  rows = []
  for top in [8, 32, 64, 256, 1024, 4096]:
    orders = base[base <= top] if top <= 1024 else np.concatenate([base, [2048.0, 4096.0]])
    first, med, ours = time_jaxrdp(q, s, orders)
    per, idx, theirs = time_dpa_per_config(q, s, orders, args.dpa_max)
    check(ours, idx, theirs)
    rows.append(
      {
        "largest_order": top,
        "orders": int(orders.size),
        "configurations": args.configs,
        "jaxrdp_s": med,
        "jaxrdp_first_s": first,
        "dp_accounting_s_extrapolated": per * args.configs,
      }
    )
    print(
      f"max order {top:>5} ({orders.size} orders): jaxrdp {med:.4f} s; "
      f"dp_accounting {per * args.configs:.3f} s",
      flush=True,
    )
  return {"x": "largest_order", "rows": rows}


def part_norders(args):
  q, s = grid(args.configs)
  rows = []
  for k in [4, 16, 64, 256]:
    orders = np.linspace(1.05, 64.0, k)
    orders = np.where(orders == np.round(orders), orders + 0.01, orders)  # keep them all fractional
    first, med, ours = time_jaxrdp(q, s, orders)
    per, idx, theirs = time_dpa_per_config(q, s, orders, args.dpa_max)
    excess = check(ours, idx, theirs, allow_above=True)
    rows.append(
      {
        "orders": k,
        "max_rel_above_dp_accounting": excess,
        "configurations": args.configs,
        "jaxrdp_s": med,
        "jaxrdp_first_s": first,
        "dp_accounting_s_extrapolated": per * args.configs,
      }
    )
    print(
      f"{k:>4} fractional orders: jaxrdp {med:.4f} s; dp_accounting {per * args.configs:.3f} s; "
      f"jaxrdp above dp_accounting by up to {excess:.1e} (relative)",
      flush=True,
    )
  return {"x": "orders", "rows": rows}


_JAXRDP_ONE = textwrap.dedent("""
    import time; t0 = time.perf_counter()
    import jax, jaxrdp
    t1 = time.perf_counter()
    r = jax.block_until_ready(jaxrdp.dpsgd_epsilon(0.01, 1.0, 10000, 1e-5, orders=jaxrdp.DP_ACCOUNTING_ORDERS))
    t2 = time.perf_counter()
    print(t1 - t0, t2 - t1, float(r.epsilon))
""")
_DPA_ONE = textwrap.dedent("""
    import time; t0 = time.perf_counter()
    import dp_accounting, jaxrdp
    from absl import logging; logging.set_verbosity(logging.ERROR)
    t1 = time.perf_counter()
    acc = dp_accounting.rdp.RdpAccountant(orders=[float(o) for o in jaxrdp.DP_ACCOUNTING_ORDERS])
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 10000)
    e = acc.get_epsilon(1e-5)
    t2 = time.perf_counter()
    print(t1 - t0, t2 - t1, e)
""")


def _fresh(code, env_extra=None):
  env = dict(os.environ)
  env["PYTHONPATH"] = str(HERE.parent) + os.pathsep + env.get("PYTHONPATH", "")
  env.update(env_extra or {})
  out = subprocess.run(
    [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
  )
  imp, call, eps = (float(x) for x in out.stdout.split())
  return imp, call, eps


def part_latency(args):
  rows = []
  imp, call, e1 = _fresh(_JAXRDP_ONE)
  rows.append(
    {"what": "jaxrdp, fresh process, no compilation cache", "import_s": imp, "first_call_s": call}
  )
  with tempfile.TemporaryDirectory() as cache:
    env = {
      "JAX_COMPILATION_CACHE_DIR": cache,
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
      "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    _fresh(_JAXRDP_ONE, env)  # fills the cache
    imp, call, e2 = _fresh(_JAXRDP_ONE, env)
  rows.append(
    {
      "what": "jaxrdp, fresh process, warm persistent compilation cache",
      "import_s": imp,
      "first_call_s": call,
    }
  )
  imp, call, e3 = _fresh(_DPA_ONE)
  rows.append({"what": "dp_accounting, fresh process", "import_s": imp, "first_call_s": call})
  if not (e1 == e2 and e1 <= e3 * (1 + 1e-10)):
    raise SystemExit(f"latency runs disagree: {e1} {e2} {e3}")
  for r in rows:
    print(
      f"{r['what']}: import {r['import_s']:.2f} s, first call {r['first_call_s']:.3f} s", flush=True
    )
  return {"x": None, "rows": rows, "epsilon": e1}


def plot():
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  FIGURES.mkdir(exist_ok=True)
  specs = {
    "size": ("configurations", "number of configurations (q, sigma)", "log"),
    "maxorder": ("largest_order", "largest Renyi order", "log"),
    "norders": ("orders", "number of (fractional) orders", "log"),
  }
  for part, (key, xlabel, xscale) in specs.items():
    path = RESULTS / f"scaling_{part}.json"
    if not path.exists():
      continue
    rows = json.loads(path.read_text())["rows"]
    x = [r[key] for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.4), dpi=80)
    ax.plot(x, [r["jaxrdp_s"] for r in rows], "o-", label="jaxrdp (after compilation)")
    if "jaxrdp_first_s" in rows[0]:
      firsts = [r for r in rows if "jaxrdp_first_s" in r]
      ax.plot(
        [r[key] for r in firsts],
        [r["jaxrdp_first_s"] for r in firsts],
        "^:",
        label="jaxrdp first call (incl. compile)",
      )
    ax.plot(
      x,
      [r["dp_accounting_s_extrapolated"] for r in rows],
      "s--",
      label="dp_accounting (linear extrapolation)",
    )
    ax.set_xscale(xscale)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("wall time (s)")
    ax.set_title("epsilon, T=10^4, delta=1e-5 (shared 2-core CPU)", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(FIGURES / f"scaling_{part}.png")
    plt.close(fig)
    print(f"wrote {FIGURES / f'scaling_{part}.png'}")


def main(argv=None):
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument("--part", choices=["size", "maxorder", "norders", "latency"], action="append")
  p.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000, 10000])
  p.add_argument(
    "--chunk",
    type=int,
    default=100_000,
    help="--part size: larger grids run in chunks of this many configurations",
  )
  p.add_argument("--configs", type=int, default=100, help="configurations for maxorder/norders")
  p.add_argument(
    "--dpa-max", type=int, default=20, help="dp_accounting configurations timed per point"
  )
  p.add_argument("--plot", action="store_true", help="plot the saved results")
  args = p.parse_args(argv)
  parts = {
    "size": part_size,
    "maxorder": part_maxorder,
    "norders": part_norders,
    "latency": part_latency,
  }
  for name in args.part or []:
    import jax

    res = parts[name](args)
    res.update(
      {
        "date": datetime.date.today().isoformat(),
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
        "cpu_count": os.cpu_count(),
        "dp_accounting_max_configs": args.dpa_max,
      }
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"scaling_{name}.json").write_text(json.dumps(res, indent=2) + "\n")
  if args.plot:
    plot()
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
