"""dpsgd_epsilon throughput on whatever ``jax.devices()`` offers (CPU, GPU, TPU).

The standard grid of ``bench_grid.py`` (q in [1e-3, 1e-1] log-spaced, sigma in
[0.6, 3.0], T = 10,000, delta = 1e-5, dp_accounting's 156 orders) scaled to N
configurations: a sqrt(N) x sqrt(N) grid over the same ranges, cut to N.

For each N it runs

  * float64: ``jaxrdp.dpsgd_epsilon`` on float64 arrays (x64 scope inside jaxrdp);
  * float32: the same call traced inside the caller's own ``jax.jit`` with
    float32 inputs and ``jax_enable_x64`` off. jaxrdp still computes in float64
    internally (its kernels run in an x64 scope) and rounds the final epsilon
    *up* to float32, so the reported float32 error is that final rounding only;

and reports configurations/s, time per (q, sigma, alpha) evaluation
(= time / (N * 156)), and the achieved fraction of the device's exp throughput.

Work model (stated in the output): dpsgd_epsilon's order search evaluates a few
orders per configuration by quadrature (counted on the grid by the search itself).
Each search round runs the light node layout (272 nodes) on the whole round and
the full one (768) on chunks of the configurations that need it; the nodes each
layout evaluated are recorded per round during the counting run
(``quadrature_work``), times the transcendental calls per node of each layout
(exp/expm1/log/log1p, counted in the traced integrands: 4 and 5 at the time of
writing). The 63 integer coarse orders (exact series, 64 terms each) are not
counted. The exp throughput is
measured here with jitted sums of jnp.exp (compute-bound; see ``exp_throughput``).

Correctness first: before timing, a few cells of every batch are compared with
unbatched ``jaxrdp.dpsgd_epsilon`` calls (relative tolerance 1e-10).

PLD path (``--pld-sizes``, off with ``--no-pld``): the tight epsilon
``jaxrdp.pld.pld_epsilon`` on the same grid ranges (T = 10,000, delta = 1e-5),
N configurations in one call, in configurations/s. Correctness first: the MNIST
configuration (q = 256/60000, sigma = 1.1, T = 14,063, delta = 1e-5) must lie in
[2.381690 (1 - 1e-7), 2.381690 (1 + 1e-5)] around its converged value, and a
few cells of every batch must equal unbatched calls bit for bit (each cell runs
its own programs, and its plan comes from blocks of a fixed shape). The
accountant picks an FFT length per cell and
compiles one program per length, so compilation is reported apart from the
first call: the seconds JAX spent tracing, lowering and compiling (its
``/jax/core/compile/*`` duration events) during the reference calls and the
first batched call of each N, with the number of XLA compilations (small eager
operations included). The
target on an H100 is 10,000 configurations/s.

    python benchmarks/bench_accelerator.py [--sizes 1000 10000 ...] [--pld-sizes 100 1000 ...]
        [--no-pld] [--tiny] [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

TRANSCENDENTAL_PRIMITIVES = (
  "exp",
  "exp2",
  "expm1",
  "log",
  "log1p",
  "pow",
  "tanh",
  "logistic",
  "erf",
  "erfc",
)


def quadrature_work(q, s, orders):
  """(orders evaluated by quadrature over the whole grid, as counted by the order
  search; integrand nodes the light layout evaluated, and the full layout).

  The quadrature runs once per search round: the light layout on the whole round
  when at least half of it allows it, and the full layout on chunks of the
  configurations that do not (jaxrdp.mechanisms._sgm_quadrature.log_a_minus_1_quadrature).
  A callback records each round's nodes per layout, counting every light sum
  as exact (the full layout would redo one that is not; none is on this grid's
  domain, see tests/test_quadrature_layouts.py).
  """
  import jax
  import jax.numpy as jnp

  from jaxrdp.mechanisms import _sgm
  from jaxrdp.mechanisms import _sgm_quadrature as m
  from jaxrdp.rdp import _order_search

  work = []
  quadrature = _sgm.log_a_minus_1_quadrature

  def spy(qq, ss, aa):
    n = qq.size
    _, light = m._choose_layout(*(jnp.ravel(v) for v in (qq, ss, aa)))
    ran_light = m._runs_light_layout(light)
    chunk = m._chunk_size(n)
    chunks = -(-jnp.where(ran_light, jnp.sum(~light), n) // chunk)
    jax.debug.callback(
      lambda a, b: work.append((int(a), int(b))),
      jnp.where(ran_light, n * m.LIGHT_NODES, 0),
      chunks * chunk * m.FULL_NODES,
    )
    return quadrature(qq, ss, aa)

  _sgm.log_a_minus_1_quadrature = spy
  try:
    with jax.enable_x64(True):
      q, s = jnp.asarray(q, jnp.float64), jnp.asarray(s, jnp.float64)
      res = jax.jit(
        lambda q, s: _order_search.min_epsilon_over_orders(
          q, s, jnp.full(q.shape, float(STEPS)), jnp.full(q.shape, DELTA), orders, "improved"
        )
      )(q, s)
      count = int(jnp.sum(res.evaluations))
    jax.effects_barrier()
  finally:
    _sgm.log_a_minus_1_quadrature = quadrature
  return count, sum(w[0] for w in work), sum(w[1] for w in work)


def transcendentals_per_node():
  """Transcendental calls per quadrature node in (the light layout, the full layout),
  counted in the traced integrands.

  Each integrand is traced at one node with constant (q, sigma, alpha), so the
  per-(q, sigma, alpha) constants (log q, log sigma, ...) are folded away and only
  the per-node calls are counted. The light layout's shifted integrand includes
  its exp; the full layout's log-integrand gets +1 for the exp of its logsumexp.
  """
  import jax
  import jax.numpy as jnp

  from jaxrdp.mechanisms import _sgm_quadrature as m

  def count(jp):
    n = 0
    for eqn in jp.eqns:
      # Literal inputs (constants, e.g. log q) have a .val; per-node inputs do not.
      if eqn.primitive.name in TRANSCENDENTAL_PRIMITIVES and any(
        not hasattr(v, "val") for v in eqn.invars
      ):
        n += 1
      for param in eqn.params.values():
        sub = getattr(param, "jaxpr", param)  # ClosedJaxpr -> Jaxpr
        if hasattr(sub, "eqns"):
          n += count(sub)
    return n

  with jax.enable_x64(True):
    light = jax.make_jaxpr(
      lambda z: m._shifted_integrand(z[None, None], jnp.zeros(1), 0.01, 1.1, 7.3, 0.0)
    )(jnp.zeros(()))
    full = jax.make_jaxpr(lambda z: m._log_integrand(z, 0.01, 1.1, 7.3))(jnp.zeros(()))
  return count(light.jaxpr), count(full.jaxpr) + 1


STEPS, DELTA = 10_000, 1e-5


def grid(n):
  """N configurations spread over the standard grid's ranges."""
  side = max(1, math.ceil(math.sqrt(n)))
  q = np.geomspace(1e-3, 1e-1, side)
  s = np.linspace(0.6, 3.0, side)
  qq, ss = np.meshgrid(q, s, indexing="ij")
  return qq.ravel()[:n].copy(), ss.ravel()[:n].copy()


def timed(fn, min_total=1.0, max_repeats=5):
  """(first-call seconds, median seconds of the following calls, last result)."""
  import jax

  t0 = time.perf_counter()
  out = jax.block_until_ready(fn())
  first = time.perf_counter() - t0
  times = []
  while len(times) < max_repeats and (not times or sum(times) < min_total):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return first, statistics.median(times), out


def exp_throughput(dtype_name):
  """exp evaluations per second, compute-bound on each backend.

  Accelerators: a jitted sum of exp over a 2^24-element iota, which XLA fuses into
  the reduction. CPU: XLA:CPU writes a float64 iota out to memory before the sum
  (0.33 G/s on the 2-core machine: memory traffic), so there the sums run over one
  2^16-element array in cache, 256 passes, each scaled differently so that nothing
  is hoisted (0.8 to 1.5 G/s there).
  """
  import jax
  import jax.numpy as jnp

  cpu = jax.default_backend() == "cpu"
  n, passes = (1 << 16, 256) if cpu else (1 << 24, 1)

  def kernel(x, scale):
    # The scale is a runtime argument so that XLA cannot constant-fold the sums.
    def one_pass(i, acc):
      v = jax.lax.iota(scale.dtype, n) if x is None else x
      return acc + jnp.sum(jnp.exp(v * (scale * (i + 1).astype(scale.dtype))))

    return jax.lax.fori_loop(0, passes, one_pass, jnp.zeros((), scale.dtype))

  f = jax.jit(kernel)
  dtype = jnp.float64 if dtype_name == "float64" else jnp.float32
  with jax.enable_x64(dtype_name == "float64"):
    x = jnp.linspace(0.0, 1.0, n, dtype=dtype) if cpu else None
    scale = jnp.asarray(-1e-3 if cpu else -1e-7, dtype)
    _, med, _ = timed(lambda: f(x, scale), min_total=0.3)
  return n * passes / med  # (median; the machine may be shared)


COMPILE_EVENTS = (
  "/jax/core/compile/jaxpr_trace_duration",
  "/jax/core/compile/jaxpr_to_mlir_module_duration",
  "/jax/core/compile/backend_compile_duration",
)
MNIST = (256 / 60000, 1.1, 14063, 1e-5)
MNIST_EPSILON = 2.381690  # converged value (bench_pld.py, dp_accounting at fine intervals)
MNIST_BOUNDS = (MNIST_EPSILON * (1 - 1e-7), MNIST_EPSILON * (1 + 1e-5))
# Batched against unbatched tight epsilons (see the module docstring): equal.
PLD_BATCH_RTOL = 0.0


class CompileClock:
  """Seconds JAX spends tracing, lowering and compiling, and XLA compilations.

  Listens to JAX's compile duration events while registered (a context manager);
  ``mark()`` returns the totals so far, so that a phase's share is a difference.
  """

  def __init__(self):
    self.seconds = 0.0
    self.compilations = 0

  def _listen(self, event, duration, **kwargs):
    if event in COMPILE_EVENTS:
      self.seconds += duration
      self.compilations += event == COMPILE_EVENTS[-1]

  def __enter__(self):
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(self._listen)
    return self

  def __exit__(self, *exc):
    import jax.monitoring

    jax.monitoring.unregister_event_duration_listener(self._listen)

  def mark(self):
    return self.seconds, self.compilations


def pld_section(sizes):
  """Tight epsilon throughput on ``sizes`` configurations of the standard grid's ranges.

  Returns ``(report, ok)``: the MNIST check, one row per size, and the warnings the
  accountant raised. Nothing is timed unless the MNIST check passes, and a size's
  steady-state time is taken only after its cells match the unbatched calls.
  """
  import warnings

  import jax

  from jaxrdp.pld import pld_epsilon

  def epsilons(q, s):
    r = jax.block_until_ready(pld_epsilon(q, s, STEPS, DELTA))
    return np.asarray(r.epsilon, np.float64), np.asarray(r.epsilon_lower, np.float64)

  report = {"rows": []}
  with warnings.catch_warnings(record=True) as caught, CompileClock() as clock:
    warnings.simplefilter("always")
    t0 = time.perf_counter()
    r = pld_epsilon(*MNIST)
    mnist = float(r.epsilon)
    seconds = time.perf_counter() - t0
    lo, hi = MNIST_BOUNDS
    report["mnist"] = {
      "configuration": dict(zip(("q", "sigma", "steps", "delta"), MNIST)),
      "epsilon": mnist,
      "epsilon_lower": float(r.epsilon_lower),
      "reference": MNIST_EPSILON,
      "bounds": [lo, hi],
      "first_call_s": seconds,
      "compile_s": clock.seconds,
      "ok": bool(lo <= mnist <= hi),
    }
    ok = report["mnist"]["ok"]
    for n in sizes if ok else []:
      q, s = grid(n)
      check = np.unique(np.linspace(0, n - 1, min(n, 4)).astype(int))
      c0, p0 = clock.mark()
      ref = np.array([epsilons(q[i], s[i])[0] for i in check])
      t0 = time.perf_counter()
      eps, low = epsilons(q, s)
      first = time.perf_counter() - t0
      c1, p1 = clock.mark()
      cell_err = float(np.max(np.abs(eps[check] - ref) / ref))
      good = bool(
        np.all(np.isfinite(eps))
        and np.all(low <= eps)
        and np.all(low > 0)
        and cell_err <= PLD_BATCH_RTOL
      )
      row = {
        "configurations": n,
        "first_call_s": first,
        "compile_s": c1 - c0,
        "xla_compilations": p1 - p0,
        "max_rel_err_unbatched": cell_err,
        "max_rel_gap_lower": float(np.max((eps - low) / eps)),
        "epsilon_range": [float(np.min(eps)), float(np.max(eps))],
        "ok": good,
      }
      if good:
        _, med, _ = timed(lambda q=q, s=s: epsilons(q, s), min_total=1.0, max_repeats=3)
        _, p2 = clock.mark()
        row.update(
          median_s=med,
          configurations_per_s=n / med,
          xla_compilations_after_first_call=p2 - p1,
        )
      ok &= good
      report["rows"].append(row)
  report["warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
  return report, bool(ok)


def main(argv=None):
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument(
    "--sizes",
    type=float,
    nargs="+",
    default=[1e3, 1e4, 1e5, 1e6],
    help="numbers of configurations (default 1e3 1e4 1e5 1e6)",
  )
  p.add_argument(
    "--pld-sizes",
    type=float,
    nargs="+",
    default=[1e2, 1e3, 1e4],
    help="numbers of configurations for the tight (PLD) epsilon (default 1e2 1e3 1e4)",
  )
  p.add_argument("--no-pld", action="store_true", help="skip the tight (PLD) epsilon")
  p.add_argument(
    "--tiny",
    action="store_true",
    help="CI smoke run: sizes 10 and 100 only, PLD on 2 configurations",
  )
  p.add_argument(
    "--dtypes", nargs="+", default=["float64", "float32"], choices=["float64", "float32"]
  )
  p.add_argument(
    "--chunk",
    type=int,
    default=100_000,
    help="configurations per call; larger N runs in chunks of this size (bounds memory)",
  )
  p.add_argument("--json", help="also write the results to this JSON file")
  args = p.parse_args(argv)
  sizes = [10, 100] if args.tiny else [int(s) for s in args.sizes]
  # Tiny PLD: two cells (and the MNIST check); each FFT length is a program to compile.
  pld_sizes = [] if args.no_pld else [2] if args.tiny else [int(s) for s in args.pld_sizes]
  load_start = os.getloadavg()

  import jax
  import jax.numpy as jnp

  import jaxrdp

  if jax.config.jax_enable_x64:
    print(
      "note: jax_enable_x64 is on globally; the float32 run still uses float32 inputs",
      file=sys.stderr,
    )
  orders = jaxrdp.DP_ACCOUNTING_ORDERS
  n_orders = int(orders.size)
  device = jax.devices()[0]

  def eps64(q, s):
    return jaxrdp.dpsgd_epsilon(q, s, STEPS, DELTA, orders=orders).epsilon

  @jax.jit
  def eps32_jit(q, s):
    # The caller's program is float32 (x64 off); jaxrdp's kernels run in float64 inside.
    return jaxrdp.dpsgd_epsilon(q, s, STEPS, DELTA, orders=orders).epsilon

  def eps32(q, s):
    return eps32_jit(jnp.asarray(q, jnp.float32), jnp.asarray(s, jnp.float32))

  def chunked(fn, q, s):
    """fn over chunks of args.chunk configurations; the last chunk is padded (one shape)."""
    n = q.size
    c = min(args.chunk, n)
    outs = []
    for i in range(0, n, c):
      qi, si = q[i : i + c], s[i : i + c]
      pad = c - qi.size
      if pad:
        qi, si = np.pad(qi, (0, pad), mode="edge"), np.pad(si, (0, pad), mode="edge")
      outs.append(fn(qi, si))
    return jax.block_until_ready(outs), c

  rates = {dt: exp_throughput(dt) for dt in ("float64", "float32")}
  counted = {n: quadrature_work(*grid(n), orders) for n in sizes}
  quadratures = {n: c[0] for n, c in counted.items()}
  tpn = transcendentals_per_node()
  # Transcendental calls of the quadrature per grid evaluation (see quadrature_work).
  transcendentals = {n: c[1] * tpn[0] + c[2] * tpn[1] for n, c in counted.items()}
  rows, ok = [], True
  for n in sizes:
    q, s = grid(n)
    # Correctness first: a few cells against unbatched calls.
    check = np.unique(np.linspace(0, n - 1, min(n, 4)).astype(int))

    def unbatched(qs, ss):
      return np.array(
        [
          float(jaxrdp.dpsgd_epsilon(qs[i], ss[i], STEPS, DELTA, orders=orders).epsilon)
          for i in check
        ]
      )

    ref64 = unbatched(q, s)
    # The float32 program sees float32-rounded q and sigma: compare with those.
    ref32 = unbatched(
      q.astype(np.float32).astype(np.float64), s.astype(np.float32).astype(np.float64)
    )
    eps_by_dtype = {}
    for dt in args.dtypes:
      fn = eps64 if dt == "float64" else eps32
      first, med, out = timed(lambda: chunked(fn, q, s)[0], min_total=1.0, max_repeats=3)
      eps = np.concatenate([np.asarray(o, dtype=np.float64) for o in out])[:n]
      eps_by_dtype[dt] = eps
      ref = ref64 if dt == "float64" else ref32
      rtol = 1e-10 if dt == "float64" else 2.0**-22  # float32: one ulp, rounded up
      cell_err = float(np.max(np.abs(eps[check] - ref) / ref))
      good = bool(np.all(np.isfinite(eps)) and cell_err <= rtol)
      if dt == "float32":
        good = good and bool(np.all(eps[check] >= ref * (1 - 1e-15)))  # rounded up, never down
      ok &= good
      rows.append(
        {
          "configurations": n,
          "dtype": dt,
          "chunk": min(args.chunk, n),
          "first_call_s": first,
          "median_s": med,
          "configurations_per_s": n / med,
          "ns_per_evaluation": 1e9 * med / (n * n_orders),
          # jaxrdp computes in float64 in both runs: compare with the float64 exp rate.
          "fraction_of_exp_throughput": transcendentals[n] / med / rates["float64"],
          "max_rel_err_unbatched": cell_err,
          "ok": good,
        }
      )
    if "float64" in eps_by_dtype and "float32" in eps_by_dtype:
      e64, e32 = eps_by_dtype["float64"], eps_by_dtype["float32"]
      err = float(np.max(np.abs(e32 - e64) / e64))
      for r in rows:
        if r["configurations"] == n and r["dtype"] == "float32":
          r["float32_max_rel_err_vs_float64"] = err

  pld, pld_ok = pld_section(pld_sizes) if pld_sizes else (None, True)
  ok &= pld_ok
  load_end = os.getloadavg()

  print(
    f"device: {device} ({device.platform}), jax {jax.__version__}, "
    f"{platform.machine()} {os.cpu_count()} cores; T={STEPS}, delta={DELTA}, {n_orders} orders"
  )
  print(
    "measured exp throughput: " + ", ".join(f"{dt} {r / 1e9:.2f} G/s" for dt, r in rates.items())
  )
  per_config = {n: quadratures[n] / n for n in sizes}
  print(
    "work model: quadrature orders per configuration (counted by the order search: "
    + ", ".join(f"{v:.2f} at {n:,}" for n, v in per_config.items())
    + "); integrand nodes "
    "evaluated by the light / full layout (recorded per search round): "
    + ", ".join(f"{counted[n][1]:,} / {counted[n][2]:,} at {n:,}" for n in sizes)
    + f"; {tpn[0]} / {tpn[1]} transcendentals per node (counted in the traced integrands, "
    "the full layout's +1 for its logsumexp); integer series orders not counted; against the "
    "float64 exp rate (jaxrdp computes in float64 in both runs)"
  )
  print(
    "note: float32 = float32 program (x64 off, float32 q and sigma); jaxrdp still computes in "
    "float64 inside and rounds epsilon up to float32; its error vs float64 includes the input rounding"
  )
  print()
  print(
    "| configurations | dtype | first call (s) | median (s) | configs/s | ns per (q,sigma,alpha) "
    "| fraction of exp peak | f32 rel err vs f64 | check |"
  )
  print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
  for r in rows:
    f32 = r.get("float32_max_rel_err_vs_float64")
    print(
      f"| {r['configurations']:,} | {r['dtype']} | {r['first_call_s']:.2f} | {r['median_s']:.4f} "
      f"| {r['configurations_per_s']:.3g} | {r['ns_per_evaluation']:.1f} "
      f"| {100 * r['fraction_of_exp_throughput']:.1f}% | {'' if f32 is None else f'{f32:.1e}'} "
      f"| {'ok' if r['ok'] else 'FAILED'} |"
    )
  print(f"load average (1 min) {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end")
  if pld is not None:
    m = pld["mnist"]
    print()
    print(
      f"tight epsilon (jaxrdp.pld.pld_epsilon), T={STEPS}, delta={DELTA}; MNIST check: "
      f"{m['epsilon']:.7f} in [{m['bounds'][0]:.7f}, {m['bounds'][1]:.7f}] "
      f"{'ok' if m['ok'] else 'FAILED'} ({m['first_call_s']:.2f} s, compile {m['compile_s']:.2f} s)"
    )
    print(
      "compile = JAX trace + lower + compile seconds in the reference calls and first call; "
      "XLA compilations include small eager operations"
    )
    print()
    print(
      "| PLD configurations | first call (s) | compile (s) | XLA compilations | median (s) | configs/s "
      "| max rel err vs single | check |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in pld["rows"]:
      med = r.get("median_s")
      print(
        f"| {r['configurations']:,} | {r['first_call_s']:.2f} | {r['compile_s']:.2f} "
        f"| {r['xla_compilations']} | {'' if med is None else f'{med:.3f}'} "
        f"| {'' if med is None else format(r['configurations_per_s'], '.3g')} "
        f"| {r['max_rel_err_unbatched']:.1e} | {'ok' if r['ok'] else 'FAILED'} |"
      )
    for w in pld["warnings"]:
      print(f"warning from the PLD accountant: {w}")
  if args.json:
    report = {
      "date": datetime.date.today().isoformat(),
      "load_average": {"start": list(load_start), "end": list(load_end)},
      "device": str(device),
      "platform": device.platform,
      "jax": jax.__version__,
      "machine": f"{platform.machine()}, {os.cpu_count()} cores",
      "orders": n_orders,
      "steps": STEPS,
      "delta": DELTA,
      "work_model": {
        "quadratures_per_configuration": {str(n): v for n, v in per_config.items()},
        "light_layout_nodes": {str(n): counted[n][1] for n in sizes},
        "full_layout_nodes": {str(n): counted[n][2] for n in sizes},
        "transcendentals_per_node": {"light": tpn[0], "full": tpn[1]},
      },
      "exp_per_s": rates,
      "rows": rows,
      "pld": pld,
    }
    with open(args.json, "w") as f:
      json.dump(report, f, indent=2)
  if not ok:
    print("FAILED correctness checks", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
