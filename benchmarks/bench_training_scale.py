"""DP-SGD step time against the dataset size n, at a fixed expected batch.

Two jitted steps on synthetic data (n examples, 20 features, 10 classes, an
MLP 20-16-10 with tanh; 506 parameters), both ending in the same optax Adam
update:

* ``gathered`` (new): a host :class:`jaxrdp.train.PoissonSampler` draws the
  step's indices at O(B_max) cost and pads them to the capacity B_max
  (:func:`jaxrdp.train.default_capacity` for T = 10,000 steps, delta = 1e-5);
  the jitted step gathers those B_max examples from the dataset on the device
  and runs :func:`jaxrdp.train.gathered_dp_gradient` (per-example gradients,
  clipping, noise, normalization by q n) on them only.
* ``full mask`` (old): :func:`jaxrdp.train.poisson_sample_mask` over all n and
  :func:`jaxrdp.train.dp_gradient` over all n examples, masked, as
  ``make_dpsgd_step`` does today. Run for n <= 1e5 (its per-example gradient
  buffer at n = 1e6 is 2 GB and a step takes seconds); its n = 1e6 time is
  extrapolated linearly from n = 1e5 and marked as such.

The expected batch is q n = 256 at every n. Correctness first: at n = 1000 and
zero noise, the gathered gradient equals the full-mask gradient on the same
sample. Each timed call runs ``--scan-steps`` steps in one jitted
``lax.scan`` (indices drawn beforehand, so Python dispatch and the sampler are
not in it); the step time is the call's time divided by its steps, and the
reported value is the *minimum* wall clock over ``--repeats`` calls, the
usual statistic on a shared machine, where other processes only ever add
time. The sizes are timed round-robin for the same reason. The median and
the process CPU time per step are printed and in the JSON. Compilation is
excluded. The full-mask step runs fewer steps and calls (10 steps x 5 calls
up to n = 1e4, 1 x 2 at n = 1e5). The host sampler is timed separately, per
step (minimum over 200 calls).

Runtime: about 1 min of CPU time (3 min wall on a shared 2-core machine at
load average 18, where compilation dominates).

The last line reads ``scale: step_ms_n1e3=<float> step_ms_n1e6=<float> ratio=<float>``
(the gathered step). A JSON report goes to benchmarks/results/.

    python benchmarks/bench_training_scale.py [--repeats 21 --scan-steps 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import pathlib
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrdp.train import (
  PoissonSampler,
  default_capacity,
  dp_gradient,
  gathered_dp_gradient,
  poisson_sample_mask,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
FEATURES, HIDDEN, CLASSES = 20, 16, 10
EXPECTED_BATCH = 256
CLIP, SIGMA, LR = 1.0, 1.0, 1e-3
STEPS_FOR_CAPACITY, DELTA = 10_000, 1e-5


def example_loss(params, ex):
  h = jnp.tanh(ex["x"] @ params["w1"] + params["b1"])
  logits = h @ params["w2"] + params["b2"]
  return optax.softmax_cross_entropy_with_integer_labels(logits, ex["y"])


def init_params(key):
  k1, k2 = jax.random.split(key)
  return {
    "w1": 0.3 * jax.random.normal(k1, (FEATURES, HIDDEN)),
    "b1": jnp.zeros(HIDDEN),
    "w2": 0.3 * jax.random.normal(k2, (HIDDEN, CLASSES)),
    "b2": jnp.zeros(CLASSES),
  }


def synthetic(n, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, FEATURES)).astype(np.float32)
  y = (x[:, :CLASSES].argmax(axis=1)).astype(np.int32)
  return {"x": jnp.asarray(x), "y": jnp.asarray(y)}


def make_steps(n, optimizer):
  """Jitted runs of several steps in one ``lax.scan`` (Python dispatch is not timed)."""
  q = EXPECTED_BATCH / n

  def gathered_step(data, carry, batch):
    params, opt_state = carry
    idx, mask, key = batch
    g = gathered_dp_gradient(
      example_loss,
      params,
      data,
      idx,
      mask,
      key,
      clip_norm=CLIP,
      noise_multiplier=SIGMA,
      expected_batch_size=q * n,
    )
    updates, opt_state = optimizer.update(g, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), None

  def full_mask_step(data, carry, key):
    params, opt_state = carry
    k_sample, k_noise = jax.random.split(key)
    mask = poisson_sample_mask(k_sample, n, q)
    g = dp_gradient(
      example_loss,
      params,
      data,
      mask,
      k_noise,
      clip_norm=CLIP,
      noise_multiplier=SIGMA,
      expected_batch_size=q * n,
    )
    updates, opt_state = optimizer.update(g, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), None

  # The dataset is an argument (a constant of the program would be folded into it).
  @jax.jit
  def gathered_run(params, opt_state, data, idx, mask, keys):
    return jax.lax.scan(
      functools.partial(gathered_step, data), (params, opt_state), (idx, mask, keys)
    )[0]

  @jax.jit
  def full_mask_run(params, opt_state, data, keys):
    return jax.lax.scan(functools.partial(full_mask_step, data), (params, opt_state), keys)[0]

  return gathered_run, full_mask_run


def check_correctness(optimizer):
  n = 1000
  data = synthetic(n)
  params = init_params(jax.random.PRNGKey(0))
  sampler = PoissonSampler(n=n, q=EXPECTED_BATCH / n, capacity=400, seed=1)
  idx, mask = sampler.sample(0)
  full = np.zeros(n, bool)
  full[idx[mask]] = True
  key = jax.random.PRNGKey(2)
  kw = dict(clip_norm=CLIP, noise_multiplier=0.0, expected_batch_size=float(EXPECTED_BATCH))
  a = jax.jit(lambda p: gathered_dp_gradient(example_loss, p, data, idx, mask, key, **kw))(params)
  b = jax.jit(lambda p: dp_gradient(example_loss, p, data, full, key, **kw))(params)
  err = max(float(jnp.max(jnp.abs(u - v))) for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
  scale = max(float(jnp.max(jnp.abs(v))) for v in jax.tree.leaves(b))
  ok = err <= 1e-5 * scale
  print(
    f"check: gathered == full-mask gradient at zero noise, n = {n}: max abs diff {err:.2e} "
    f"(scale {scale:.2e}) -> {'ok' if ok else 'FAILED'}"
  )
  if not ok:
    raise SystemExit("correctness check failed")
  return err


def _times(fn, repeats):
  """((median wall ms, min wall ms), median process-CPU ms) over ``repeats`` calls."""
  wall, cpu = [], []
  for _ in range(repeats):
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    wall.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
  return (1e3 * statistics.median(wall), 1e3 * min(wall)), 1e3 * statistics.median(cpu)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument(
    "--repeats", type=int, default=21, help="timed calls per size (the minimum is reported)"
  )
  p.add_argument("--scan-steps", type=int, default=20, help="steps per timed call (one lax.scan)")
  p.add_argument("--sizes", type=float, nargs="+", default=[1e3, 1e4, 1e5, 1e6])
  p.add_argument(
    "--full-mask-max", type=float, default=1e5, help="largest n for the full-mask step"
  )
  p.add_argument(
    "--json", default=str(ROOT / "benchmarks" / "results" / "bench_training_scale_cpu.json")
  )
  args = p.parse_args(argv)
  print(
    f"jax {jax.__version__}, backend {jax.default_backend()}, {os.cpu_count()} CPUs, "
    f"load average {os.getloadavg()[0]:.1f}"
  )
  optimizer = optax.adam(LR)
  check_err = check_correctness(optimizer)
  rows, runs = [], []
  k = args.scan_steps
  for n in (int(s) for s in args.sizes):
    q = EXPECTED_BATCH / n
    cap = default_capacity(n, q, STEPS_FOR_CAPACITY, DELTA)
    sampler = PoissonSampler(n=n, q=q, capacity=cap, seed=0)
    data = synthetic(n)
    params = init_params(jax.random.PRNGKey(0))
    opt_state = optimizer.init(params)
    gathered_run, full_mask_run = make_steps(n, optimizer)
    drawn = [sampler.sample(t) for t in range(k)]
    idx = jnp.asarray(np.stack([d[0] for d in drawn]))
    mask = jnp.asarray(np.stack([d[1] for d in drawn]))
    keys = jax.random.split(jax.random.PRNGKey(3), k)
    t0 = time.perf_counter()
    jax.block_until_ready(gathered_run(params, opt_state, data, idx, mask, keys))
    compile_s = time.perf_counter() - t0
    counter = iter(range(k, 10**6))
    sampler_ms = _times(lambda: sampler.sample(next(counter)), 200)[0][1]
    row = {
      "n": n,
      "q": q,
      "capacity": cap,
      "gathered_compile_s": compile_s,
      "sampler_ms_per_step": sampler_ms,
      "truncation_tv_per_10k_steps": sampler.truncation_delta(STEPS_FOR_CAPACITY),
    }
    if n <= args.full_mask_max:
      kf = min(k, 10) if n <= 10**4 else 1
      fkeys = keys[:kf]
      jax.block_until_ready(full_mask_run(params, opt_state, data, fkeys))
      reps = 5 if n <= 10**4 else 2
      fw, fc = _times(
        lambda: jax.block_until_ready(full_mask_run(params, opt_state, data, fkeys)), reps
      )
      row.update(
        full_mask_step_ms=fw[1] / kf,
        full_mask_step_median_ms=fw[0] / kf,
        full_mask_step_cpu_ms=fc / kf,
        full_mask_measured=True,
      )
    rows.append(row)
    runs.append(
      lambda f=gathered_run, a=(params, opt_state, data, idx, mask, keys): jax.block_until_ready(
        f(*a)
      )
    )
  # The gathered steps are timed round-robin over the sizes, so that load from
  # other processes on a shared machine falls on all sizes alike.
  wall = [[] for _ in rows]
  cpu = [[] for _ in rows]
  for _ in range(args.repeats):
    for i, run in enumerate(runs):
      (w, _), c = _times(run, 1)
      wall[i].append(w / k)
      cpu[i].append(c / k)
  for row, w, c in zip(rows, wall, cpu):
    row.update(
      gathered_step_ms=min(w),
      gathered_step_median_ms=statistics.median(w),
      gathered_step_cpu_ms=statistics.median(c),
    )
    print(
      f"n = {row['n']:>8}: capacity {row['capacity']:4d}   gathered step {row['gathered_step_ms']:8.3f} ms "
      f"(median {row['gathered_step_median_ms']:7.3f}, cpu {row['gathered_step_cpu_ms']:7.3f})   "
      f"sampler {row['sampler_ms_per_step']:6.3f} ms/step   "
      + (
        f"full mask {row['full_mask_step_ms']:9.2f} ms"
        if "full_mask_step_ms" in row
        else "full mask  (skipped)"
      )
    )
  measured = [r for r in rows if r.get("full_mask_measured")]
  if measured:
    last = measured[-1]
    for r in rows:
      if "full_mask_step_ms" not in r:
        r["full_mask_step_ms"] = last["full_mask_step_ms"] * r["n"] / last["n"]
        r["full_mask_measured"] = False
        print(
          f"n = {r['n']:>8}: full mask step extrapolated linearly from n = {last['n']}: "
          f"{r['full_mask_step_ms']:.1f} ms (not measured)"
        )
  print()
  print("|        n | capacity | gathered step (ms) | full-mask step (ms) | sampler (ms/step) |")
  print("|---------:|---------:|-------------------:|--------------------:|------------------:|")
  for r in rows:
    fm = f"{r['full_mask_step_ms']:.2f}" + ("" if r["full_mask_measured"] else " (extrapolated)")
    print(
      f"| {r['n']:>8} | {r['capacity']:>8} | {r['gathered_step_ms']:>18.3f} | {fm:>19} | "
      f"{r['sampler_ms_per_step']:>17.3f} |"
    )
  by_n = {r["n"]: r for r in rows}
  s3, s6 = by_n[1000]["gathered_step_ms"], by_n[10**6]["gathered_step_ms"]
  report = {
    "benchmark": "bench_training_scale",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "jax": jax.__version__,
    "backend": jax.default_backend(),
    "platform": platform.platform(),
    "cpus": os.cpu_count(),
    "load_average": os.getloadavg()[0],
    "model": f"MLP {FEATURES}-{HIDDEN}-{CLASSES} tanh, adam",
    "expected_batch": EXPECTED_BATCH,
    "clip": CLIP,
    "sigma": SIGMA,
    "repeats": args.repeats,
    "check_max_abs_diff": check_err,
    "rows": rows,
    "step_ms_n1e3": s3,
    "step_ms_n1e6": s6,
    "ratio": s6 / s3,
    "sampler_ms_per_step_n1e6": by_n[10**6]["sampler_ms_per_step"],
  }
  os.makedirs(os.path.dirname(args.json), exist_ok=True)
  with open(args.json, "w") as f:
    json.dump(report, f, indent=2)
  print(f"sampler at n = 1e6: {by_n[10**6]['sampler_ms_per_step']:.3f} ms/step (host, numpy)")
  print(f"scale: step_ms_n1e3={s3:.4f} step_ms_n1e6={s6:.4f} ratio={s6 / s3:.4f}")


if __name__ == "__main__":
  main()
