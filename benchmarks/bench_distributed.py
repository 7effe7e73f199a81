"""Sweep speedup from 1 device to several, and from 1 process to several (jax.distributed).

The same `jaxrdp.sweep` (one jitted shard_map program per chunk shape over a 1-D mesh of
all devices) is timed on

  devices    one process: a mesh of 1 device, then of all its devices. On a CPU-only
             machine the process gets --devices forced CPU devices
             (XLA_FLAGS=--xla_force_host_platform_device_count); on a GPU host, its GPUs.
  processes  1, then --processes jax.distributed processes on 127.0.0.1 (Gloo CPU
             collectives), one device each (a CPU device, or GPU number i for process i).

Before any time is reported, the epsilon and order arrays of every run are checked: the
runs on several devices (one process or several) bit for bit against each other, the
one-device runs against each other, and the two groups to 1e-12 with the same orders
(XLA compiles a one-device mesh apart; see jaxrdp/sweeps/_sweep.py). Times: the first call (compilation included) and the
median of --repeats later calls, wall clock. Results go to
benchmarks/results/bench_distributed_<platform>.json.

    python benchmarks/bench_distributed.py [--devices 4] [--processes 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results"
# 16 orders, fractional ones included (the quadrature kernel, as with the default
# orders, at a fraction of their compile time).
ORDERS = [1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 32.0, 64.0, 128.0]


def workload(pairs_q: int, pairs_sigma: int) -> dict:
  return dict(
    q=np.geomspace(1e-3, 0.1, pairs_q).tolist(),
    sigma=np.linspace(0.6, 3.0, pairs_sigma).tolist(),
    steps=[100, 1000, 10_000, 100_000],
    delta=[1e-5, 1e-6],
    orders=ORDERS,
    chunk_size=64,
    progress=False,
  )


def _timed(fn, repeats: int):
  t0 = time.perf_counter()
  res = fn()
  first = time.perf_counter() - t0
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return first, statistics.median(times), res


# --------------------------------------------------------------------------------------
# Workers (this file, run again with --worker).


def worker_devices(args) -> None:
  import jax

  import jaxrdp

  kw = json.loads(args.kw)
  rows = []
  for k in sorted({1, jax.device_count()}):
    devices = jax.devices()[:k]
    first, warm, res = _timed(lambda: jaxrdp.sweep(**kw, devices=devices), args.repeats)
    np.savez(os.path.join(args.out, f"devices{k}.npz"), epsilon=res.epsilon, order=res.order)
    rows.append(
      {
        "scaling": "devices",
        "processes": 1,
        "devices": k,
        "device_kind": str(devices[0].device_kind),
        "first_call_s": first,
        "warm_s": warm,
      }
    )
  (pathlib.Path(args.out) / "devices.json").write_text(json.dumps(rows))


def worker_process(args) -> None:
  import jax

  if args.num_processes > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
      coordinator_address=f"127.0.0.1:{args.port}",
      num_processes=args.num_processes,
      process_id=args.process_id,
      coordinator_bind_address=f"127.0.0.1:{args.port}",
      local_device_ids=[args.process_id] if args.gpu else None,
      initialization_timeout=120,
    )
  import jaxrdp

  kw = json.loads(args.kw)
  devices = jax.devices() if args.num_processes > 1 else jax.devices()[:1]
  first, warm, res = _timed(lambda: jaxrdp.sweep(**kw, devices=devices), args.repeats)
  tag = f"procs{args.num_processes}_p{args.process_id}"
  np.savez(os.path.join(args.out, tag + ".npz"), epsilon=res.epsilon, order=res.order)
  (pathlib.Path(args.out) / (tag + ".json")).write_text(
    json.dumps(
      {
        "processes": args.num_processes,
        "devices": len(devices),
        "first_call_s": first,
        "warm_s": warm,
      }
    )
  )
  if args.num_processes > 1:
    jax.distributed.shutdown()


# --------------------------------------------------------------------------------------
# Driver.


def _env(forced_cpu_devices: int | None) -> dict:
  env = dict(os.environ)
  env["PYTHONPATH"] = str(HERE.parent) + os.pathsep + env.get("PYTHONPATH", "")
  env.pop("JAX_COORDINATOR_ADDRESS", None)
  if forced_cpu_devices is not None:
    flags = [
      f
      for f in env.get("XLA_FLAGS", "").split()
      if not f.startswith("--xla_force_host_platform_device_count")
    ]
    env["XLA_FLAGS"] = " ".join(
      flags + [f"--xla_force_host_platform_device_count={forced_cpu_devices}"]
    )
  return env


def _run(argv: list[str], env: dict, timeout: float) -> None:
  subprocess.run([sys.executable, __file__, *argv], env=env, check=True, timeout=timeout)


def _free_loopback_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _run_processes(n: int, common: list[str], env: dict, timeout: float) -> None:
  port = str(_free_loopback_port())
  procs = [
    subprocess.Popen(
      [
        sys.executable,
        __file__,
        *common,
        "--worker",
        "process",
        "--num-processes",
        str(n),
        "--process-id",
        str(i),
        "--port",
        port,
      ],
      env=env,
    )
    for i in range(n)
  ]
  try:
    for p in procs:
      p.wait(timeout=timeout)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  if any(p.returncode for p in procs):
    raise SystemExit(f"a {n}-process run failed: exit codes {[p.returncode for p in procs]}")


def _machine() -> dict:
  model = platform.processor() or ""
  try:
    with open("/proc/cpuinfo") as f:
      model = next(
        (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model
      )
  except OSError:
    pass
  return {
    "nproc": os.cpu_count(),
    "cpu_model": model,
    "loadavg_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
  }


def main(argv=None) -> int:
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument("--devices", type=int, default=4, help="forced CPU devices (CPU-only machines)")
  p.add_argument("--processes", type=int, default=2)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--q", type=int, default=64, help="q values (pairs: q x sigma)")
  p.add_argument("--sigma", type=int, default=32, help="sigma values")
  p.add_argument("--timeout", type=float, default=1200, help="seconds per run")
  p.add_argument("--out", help=argparse.SUPPRESS)
  p.add_argument("--kw", help=argparse.SUPPRESS)
  p.add_argument("--worker", choices=["devices", "process"], help=argparse.SUPPRESS)
  p.add_argument("--num-processes", type=int, help=argparse.SUPPRESS)
  p.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
  p.add_argument("--port", help=argparse.SUPPRESS)
  p.add_argument("--gpu", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.worker == "devices":
    worker_devices(args)
    return 0
  if args.worker == "process":
    worker_process(args)
    return 0

  probe = subprocess.run(
    [sys.executable, "-c", "import jax; print(jax.default_backend(), jax.local_device_count())"],
    env=_env(None),
    capture_output=True,
    text=True,
    check=True,
  )
  backend, n_local = probe.stdout.split()
  gpu = backend != "cpu"
  kw = workload(args.q, args.sigma)
  machine = _machine()
  n_cells = args.q * args.sigma * 4 * 2
  print(
    f"backend {backend} ({n_local} local devices); {args.q * args.sigma} (q, sigma) pairs, "
    f"{n_cells} cells, {len(ORDERS)} orders; {machine['nproc']} CPUs ({machine['cpu_model']}), "
    f"load average {machine['loadavg_1min']:.1f}",
    flush=True,
  )
  with tempfile.TemporaryDirectory() as tmp:
    common = ["--out", tmp, "--kw", json.dumps(kw), "--repeats", str(args.repeats)] + (
      ["--gpu"] if gpu else []
    )
    _run(common + ["--worker", "devices"], _env(None if gpu else args.devices), args.timeout)
    rows = json.loads((pathlib.Path(tmp) / "devices.json").read_text())
    n_procs = min(args.processes, int(n_local)) if gpu else args.processes
    for n in sorted({1, n_procs}):
      env = _env(None if gpu else 1)
      if n == 1:
        _run(
          common + ["--worker", "process", "--num-processes", "1", "--process-id", "0"],
          env,
          args.timeout,
        )
      else:
        _run_processes(n, common, env, args.timeout)
      per = [json.loads((pathlib.Path(tmp) / f"procs{n}_p{i}.json").read_text()) for i in range(n)]
      rows.append(
        {
          "scaling": "processes",
          "processes": n,
          "devices": per[0]["devices"],
          "first_call_s": max(r["first_call_s"] for r in per),
          "warm_s": max(r["warm_s"] for r in per),
        }
      )
    # Before any time is reported: every mesh of several devices (one process or
    # several) gives the same bits, and so does every one-device run; the two groups
    # agree to rounding (a one-device mesh is compiled apart, see jaxrdp/sweeps/_sweep.py).
    tmp = pathlib.Path(tmp)
    single = [tmp / "devices1.npz", tmp / "procs1_p0.npz"]
    multi = sorted(set(tmp.glob("*.npz")) - set(single))
    check = {}
    for group in (single, multi):
      ref = np.load(group[0])
      for path in group[1:]:
        got = np.load(path)
        if not (
          np.array_equal(got["epsilon"], ref["epsilon"])
          and np.array_equal(got["order"], ref["order"])
        ):
          raise SystemExit(f"{path.name}: result differs from {group[0].name}")
    if multi:
      a, b = np.load(single[0]), np.load(multi[0])
      rel = np.abs(a["epsilon"] - b["epsilon"]) / np.abs(a["epsilon"])
      check = {
        "cells_differing": int(np.sum(a["epsilon"] != b["epsilon"])),
        "max_rel_diff": float(np.nanmax(rel)),
        "orders_differing": int(np.sum(a["order"] != b["order"])),
      }
      if not check["max_rel_diff"] <= 1e-12 or check["orders_differing"]:
        raise SystemExit(f"several devices against one: {check}")
  print(
    f"one-device runs ({len(single)}) equal bit for bit; several-device runs ({len(multi)}) "
    f"equal bit for bit; between the two: {check}"
  )
  for r in rows:
    ref_row = next(x for x in rows if x["scaling"] == r["scaling"] and x["devices"] == 1)
    r["speedup"] = ref_row["warm_s"] / r["warm_s"]
    print(
      f"{r['scaling']:>9}: {r['processes']} process(es), {r['devices']} device(s) in all: "
      f"first call {r['first_call_s']:.2f} s, warm {r['warm_s']:.3f} s, "
      f"speedup {r['speedup']:.2f}x",
      flush=True,
    )
  machine["loadavg_1min_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
  import jax

  result = {
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
    "backend": backend,
    "jax": jax.__version__,
    "machine": machine,
    "workload": {
      "pairs": args.q * args.sigma,
      "cells": n_cells,
      "orders": len(ORDERS),
      "chunk_size": kw["chunk_size"],
      "repeats": args.repeats,
    },
    "several_devices_bit_identical": True,
    "one_device_bit_identical": True,
    "several_against_one_device": check,
    "rows": rows,
  }
  RESULTS.mkdir(exist_ok=True)
  path = RESULTS / f"bench_distributed_{backend}.json"
  path.write_text(json.dumps(result, indent=2) + "\n")
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
