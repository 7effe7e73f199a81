"""Overhead of in-jit privacy accounting on a DP-SGD training step.

Times the jitted DP-SGD step of ``examples/dpsgd_digits.py`` (MLP on the 1,437
digits training images, Poisson mask over all of them, per-example clipping,
noise, Adam) in two variants built from the same pieces:

* ``with accounting``: :func:`jaxrdp.train.make_dpsgd_step` (the accountant is
  composed with the step's SGM, epsilon(delta) is read, the budget guard runs);
* ``without``: the same sampling, DP gradient and optimizer update, no
  accountant.

Each call runs ``--steps`` steps in one jitted ``lax.scan`` (so Python dispatch
is not measured); the variants alternate, and the median and minimum over
``--repeats`` calls are reported per step (wall clock and process CPU time),
compile time separately. On a shared machine the difference of two noisy
timings is itself noisy, so the accounting work is also timed alone (the same
compose / epsilon / select ops in a scan) and compared with the step. Before
any timing, the accounted run's epsilon is checked against
jaxrdp.dpsgd_epsilon and both variants' parameters against each other.

Run:  python benchmarks/bench_training_overhead.py [--steps 200 --repeats 15]
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxrdp
from jaxrdp.rdp._accountant import add_rdp_curve
from jaxrdp.train._step import tree_select

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _load_example():
  spec = importlib.util.spec_from_file_location(
    "dpsgd_digits", ROOT / "examples" / "dpsgd_digits.py"
  )
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--steps", type=int, default=200, help="steps per timed call")
  p.add_argument("--repeats", type=int, default=15)
  p.add_argument("--hidden", type=int, default=None)
  args = p.parse_args(argv)

  ex = _load_example()
  cfg = dict(ex.DEFAULTS)
  if args.hidden is not None:
    cfg["hidden"] = args.hidden
  cfg["target_epsilon"] = None  # never stop: both variants do the same work
  data = ex.load_data()
  xy = (data.x_train, data.y_train)
  n = data.x_train.shape[0]
  optimizer = optax.adam(cfg["lr"])  # the example's optimizer
  q, sigma, clip = cfg["q"], cfg["sigma"], cfg["clip"]

  accounted = jaxrdp.train.make_dpsgd_step(
    ex.example_loss, optimizer, clip_norm=clip, q=q, sigma=sigma, delta=cfg["delta"]
  )

  def plain(state, data_):
    # Same work as the applied branch of make_dpsgd_step, minus accounting.
    key, k_sample, k_noise = jax.random.split(state.key, 3)
    mask = jaxrdp.train.poisson_sample_mask(k_sample, n, q)
    grads = jaxrdp.train.dp_gradient(
      ex.example_loss,
      state.params,
      data_,
      mask,
      k_noise,
      clip_norm=clip,
      noise_multiplier=sigma,
      expected_batch_size=q * n,
    )
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = jax.tree.map(lambda a, u: a + u, state.params, updates)
    return state._replace(params=params, opt_state=opt_state, key=key, step=state.step + 1), None

  def runner(step):
    @jax.jit
    def run(state, data_):
      return jax.lax.scan(lambda s, _: step(s, data_), state, None, length=args.steps)

    return run

  run_acc, run_plain = runner(accounted), runner(plain)
  state0 = ex.initial_state(cfg, optimizer)

  compile_s = {}
  for name, fn in (("with accounting", run_acc), ("without", run_plain)):
    t = time.perf_counter()
    jax.block_until_ready(fn(state0, xy))
    compile_s[name] = time.perf_counter() - t

  # Correctness before timing: the in-jit epsilon is the closed-form one and
  # both variants draw the same masks and noise (same keys), so same params.
  s_acc, info = run_acc(state0, xy)
  s_plain, _ = run_plain(state0, xy)
  ref = jaxrdp.dpsgd_epsilon(q, sigma, args.steps, cfg["delta"])
  np.testing.assert_allclose(float(info.epsilon[-1]), float(ref.epsilon), rtol=1e-11)
  for a, b in zip(jax.tree.leaves(s_acc.params), jax.tree.leaves(s_plain.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)

  # The accounting work alone, as make_dpsgd_step does it with constant q and
  # sigma: add the precomputed per-step curve, read epsilon before and after,
  # compare with a budget, select. Same number of steps per call.
  with jax.enable_x64(True):
    curve = jaxrdp.mechanisms.sgm_rdp(q, sigma, jnp.asarray(jaxrdp.DEFAULT_ORDERS))

  acct = jaxrdp.RdpAccountant()

  @jax.jit
  def run_accounting(acc):
    def body(a, _):
      with jax.enable_x64(True):
        new = add_rdp_curve(a, curve)
        after = acct.get_epsilon(new, cfg["delta"])
        now = acct.get_epsilon(a, cfg["delta"])
        ok = after.epsilon <= 1e9
        a = tree_select(ok, new, a)
        return a, jnp.where(ok, after.epsilon, now.epsilon)

    return jax.lax.scan(body, acc, None, length=args.steps)

  acc0 = acct.init()
  jax.block_until_ready(run_accounting(acc0))

  variants = (("with accounting", run_acc), ("without", run_plain))
  times = {name: [] for name, _ in variants}
  cpu = {name: [] for name, _ in variants}
  acct_only = []
  for _ in range(args.repeats):
    for name, fn in variants:
      t, c = time.perf_counter(), time.process_time()
      jax.block_until_ready(fn(state0, xy))
      times[name].append((time.perf_counter() - t) / args.steps)
      cpu[name].append((time.process_time() - c) / args.steps)
    t = time.perf_counter()
    jax.block_until_ready(run_accounting(acc0))
    acct_only.append((time.perf_counter() - t) / args.steps)

  print(f"jax {jax.__version__}, backend {jax.default_backend()}, {jax.device_count()} device(s)")
  print(
    f"model: MLP 64-{cfg['hidden']}-10, n={n}, q={q}, sigma={sigma}, "
    f"{args.steps} steps per call, {args.repeats} repeats"
  )
  print(
    f"check: in-jit epsilon after {args.steps} steps = {float(info.epsilon[-1]):.6f} (matches dpsgd_epsilon)"
  )
  for name in times:
    t = np.asarray(times[name]) * 1e6
    print(
      f"{name:>16}: median {statistics.median(t):8.1f} us/step   min {t.min():8.1f} us/step"
      f"   compile {compile_s[name]:.2f} s"
    )
  for name in cpu:
    t = np.asarray(cpu[name]) * 1e6
    print(
      f"{name:>16}: process CPU time median {statistics.median(t):8.1f} us/step   min {t.min():8.1f}"
    )
  a = np.asarray(acct_only) * 1e6
  print(
    f" accounting only: median {statistics.median(a):8.2f} us/step   min {a.min():8.2f} us/step"
  )
  med = {k: statistics.median(v) for k, v in times.items()}
  mins = {k: min(v) for k, v in times.items()}
  cmed = {k: statistics.median(v) for k, v in cpu.items()}
  print(
    f"overhead (wall):  median {100 * (med['with accounting'] / med['without'] - 1):+.2f}%   "
    f"min {100 * (mins['with accounting'] / mins['without'] - 1):+.2f}%"
  )
  print(f"overhead (CPU):   median {100 * (cmed['with accounting'] / cmed['without'] - 1):+.2f}%")
  print(
    f"accounting alone / step without accounting (min): "
    f"{100 * a.min() / (mins['without'] * 1e6):.3f}%"
  )
  # Deterministic complement to the timings: XLA's own cost model of one
  # compiled step (no scan), with and without the accounting.
  costs = {}
  for name, step in (("with accounting", accounted), ("without", plain)):
    c = jax.jit(lambda s, d, step=step: step(s, d)[0]).lower(state0, xy).compile().cost_analysis()
    costs[name] = c[0] if isinstance(c, (list, tuple)) else c
  for key in ("flops", "bytes accessed", "transcendentals"):
    w, wo = costs["with accounting"].get(key), costs["without"].get(key)
    if w is not None and wo:
      print(f"XLA cost analysis, {key:>15}: {wo:14.0f} -> {w:14.0f}  ({100 * (w / wo - 1):+.3f}%)")


if __name__ == "__main__":
  main()
