"""DP-SGD on scikit-learn's digits with the privacy accountant inside the jitted step.

A one-hidden-layer MLP is trained on the 8x8 digits bundled with scikit-learn
(1,797 images, no download) with DP-SGD:

* Poisson sampling with a capacity (``jaxrdp.train.PoissonSampler``): each
  training example joins a step's batch independently with probability q; the
  host draws the indices (O(batch) per step) and pads them to a fixed capacity
  B_max with a mask, so shapes never change and the step computes per-example
  gradients for B_max examples, not for the whole dataset. B_max comes from
  ``jaxrdp.train.default_capacity``: batches larger than it (truncated) are so rare
  that the truncation term it adds to delta is at most 1e-3 delta;
* per-example gradients clipped to L2 norm C, summed over the sampled examples,
  plus Gaussian noise of std sigma * C, divided by the expected batch size q * n;
* the RDP accountant (jaxrdp) in the train state, composed every step, and
  epsilon(delta) read from it inside jit; a step that would exceed
  ``--target-epsilon`` is refused;
* the reported guarantee includes the truncation term: the final epsilon is
  ``jaxrdp.train.epsilon_with_truncation`` of the accountant (equal to
  ``jaxrdp.dpsgd_epsilon(q, sigma, steps, delta, capacity=B_max, dataset_size=n)``),
  which holds at total delta ``delta`` (truncation included);
* the number to publish is printed beside it: the tight epsilon of the same run
  (``jaxrdp.train.tight_epsilon``, privacy-loss distributions, truncation term
  included) with its certified lower bound.

With ``--sampling allocation`` the batches come from random allocation instead
(``jaxrdp.train.RandomAllocationSampler``, "balls in bins": every epoch of
t = round(1/q) steps puts each example in exactly one of its steps, chosen
uniformly; Feldman and Shenfeld 2025, arXiv:2502.08202). Its privacy is per
epoch, so the accountant in the step composes a whole epoch's RDP at the
epoch's first step, and the epsilon it reports already pays the truncation term
of the capacity (``default_capacity`` at rate 1/t); that in-step epsilon is the
one printed (it equals ``jaxrdp.dpsgd_epsilon(1/t, sigma, steps, delta,
sampling="allocation", capacity=B_max, dataset_size=n)``).

The same model is also trained without privacy (shuffled minibatches, which is
fine there, but is NOT the sampling the SGM accounting assumes) as a baseline.

Run:  python examples/dpsgd_digits.py            (about 30 s on a shared 2-core CPU)
      python examples/dpsgd_digits.py --epochs 2 (tiny configuration for tests)
      python examples/dpsgd_digits.py --sampling allocation

The last line has the fixed shape

    final: epsilon=<float> delta=<float> q=<float> sigma=<float> steps=<int> test_accuracy=<float> baseline_accuracy=<float>
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import jaxrdp

# Operating point (docs/howto/train.md shows the accuracy and epsilon it reaches).
DEFAULTS = dict(
  q=0.09,  # expected batch ~129 of 1,437 training examples
  sigma=1.5,
  clip=1.0,
  epochs=30,
  lr=0.01,
  hidden=32,
  delta=1e-5,
  target_epsilon=8.0,
  seed=0,
  sampling="poisson",  # or "allocation" (random allocation, one step per epoch each)
)


class Data(NamedTuple):
  x_train: jax.Array
  y_train: jax.Array
  x_test: jax.Array
  y_test: jax.Array


@functools.cache
def load_data() -> Data:
  """Digits split 80/20 (stratified, fixed seed); pixels scaled by 1/16.

  The scale 1/16 is the known pixel range, not a statistic of the data, so
  preprocessing spends no privacy (standardizing with the training mean and
  variance would).
  """
  x, y = load_digits(return_X_y=True)
  x_tr, x_te, y_tr, y_te = train_test_split(x / 16.0, y, test_size=0.2, random_state=0, stratify=y)
  return Data(
    jnp.asarray(x_tr, jnp.float32),
    jnp.asarray(y_tr, jnp.int32),
    jnp.asarray(x_te, jnp.float32),
    jnp.asarray(y_te, jnp.int32),
  )


def init_params(key: jax.Array, hidden: int, n_in: int = 64, n_out: int = 10) -> dict:
  k1, k2 = jax.random.split(key)
  return {
    "w1": jax.random.normal(k1, (n_in, hidden), jnp.float32) / np.sqrt(n_in),
    "b1": jnp.zeros((hidden,), jnp.float32),
    "w2": jax.random.normal(k2, (hidden, n_out), jnp.float32) / np.sqrt(hidden),
    "b2": jnp.zeros((n_out,), jnp.float32),
  }


def logits(params: dict, x: jax.Array) -> jax.Array:
  h = jnp.tanh(x @ params["w1"] + params["b1"])
  return h @ params["w2"] + params["b2"]


def example_loss(params: dict, example: tuple[jax.Array, jax.Array]) -> jax.Array:
  """Cross-entropy of one example (DP-SGD needs per-example losses)."""
  x, y = example
  return optax.softmax_cross_entropy_with_integer_labels(logits(params, x), y)


@jax.jit
def accuracy(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
  return jnp.mean(jnp.argmax(logits(params, x), axis=-1) == y)


class EpochRecord(NamedTuple):
  epoch: int
  epsilon: float
  test_accuracy: float
  steps: int


def steps_per_epoch(q: float) -> int:
  return max(1, int(round(1.0 / q)))


def make_sampler(cfg: dict, n: int):
  """Poisson sampler at rate q (or random allocation over round(1/q) steps per epoch)
  with the default capacity.

  The capacity is sized for a horizon of at least the default 30 epochs, so a run
  extended up to that length keeps the same sampler (and a resumed run equals an
  uninterrupted one). Any capacity is sound: the reported epsilon pays the
  truncation term for the steps actually taken.
  """
  per_epoch = steps_per_epoch(cfg["q"])
  steps = max(cfg["epochs"], DEFAULTS["epochs"]) * per_epoch
  if cfg.get("sampling", "poisson") == "allocation":
    capacity = jaxrdp.train.default_capacity(n, 1.0 / per_epoch, steps, cfg["delta"])
    return jaxrdp.train.RandomAllocationSampler(
      n=n, steps_per_epoch=per_epoch, capacity=capacity, seed=cfg["seed"]
    )
  capacity = jaxrdp.train.default_capacity(n, cfg["q"], steps, cfg["delta"])
  return jaxrdp.train.PoissonSampler(n=n, q=cfg["q"], capacity=capacity, seed=cfg["seed"])


@functools.cache
def compiled_epoch(sampler, sigma, clip, lr, delta, target_epsilon):
  """(optimizer, epoch_fn): one epoch = round(1/q) DP-SGD steps in one jitted scan.

  ``epoch_fn(state, data, indices, masks)`` takes the epoch's sampled indices and
  masks (``[steps, B_max]``, drawn on the host) and gathers each batch from the
  device-resident data inside jit. Cached by configuration so repeated runs in
  one process (tests, notebook, resume) compile once.
  """
  optimizer = optax.adam(lr)
  step = jaxrdp.train.make_dpsgd_step(
    example_loss,
    optimizer,
    sampler=sampler,
    clip_norm=clip,
    sigma=sigma,
    delta=delta,
    target_epsilon=target_epsilon,
  )

  @jax.jit
  def epoch(state, data, indices, masks):
    def body(s, im):
      idx, mask = im
      return step(s, jaxrdp.train.gather_batch(data, idx), mask)

    return jax.lax.scan(body, state, (indices, masks))

  return optimizer, epoch


def epoch_batches(sampler, first_step: int, length: int) -> tuple[np.ndarray, np.ndarray]:
  """Indices and masks of steps first_step .. first_step + length - 1 (host, O(B_max) each)."""
  drawn = [sampler.sample(t) for t in range(first_step, first_step + length)]
  return np.stack([d[0] for d in drawn]), np.stack([d[1] for d in drawn])


def initial_state(cfg: dict, optimizer, sampler=None) -> jaxrdp.train.DPSGDState:
  k_init, k_train = jax.random.split(jax.random.PRNGKey(cfg["seed"]))
  return jaxrdp.train.dpsgd_init(
    init_params(k_init, cfg["hidden"]), optimizer, k_train, sampler=sampler
  )


def train_private(
  cfg: dict,
  data: Data,
  *,
  checkpoint: str | None = None,
  resume: bool = False,
  log: Callable[[str], None] = print,
) -> tuple[jaxrdp.train.DPSGDState, list[EpochRecord]]:
  """DP-SGD training; returns the final state and one record per epoch."""
  sampler = make_sampler(cfg, int(data.x_train.shape[0]))
  state = initial_state(cfg, optax.adam(cfg["lr"]), sampler)
  per_epoch = steps_per_epoch(cfg["q"])
  start = 0
  if resume:
    # The template fixes structure, dtypes and accountant orders; a missing,
    # corrupted or mismatched file raises instead of restarting at zero.
    state = jaxrdp.train.load_checkpoint(checkpoint, state)
    # The sampler's seed and configuration come back with the state (its
    # counter is state.step), so the resumed run draws the same batches.
    sampler = jaxrdp.train.sampler_from_state(state.sampler)
    start = int(state.step) // per_epoch
    eps = float(jaxrdp.RdpAccountant().get_epsilon(state.accountant, cfg["delta"]).epsilon)
    log(f"resumed from {checkpoint} at epoch {start} (step {int(state.step)}, epsilon={eps:.4f})")
  optimizer, epoch_fn = compiled_epoch(
    sampler, cfg["sigma"], cfg["clip"], cfg["lr"], cfg["delta"], cfg["target_epsilon"]
  )
  xy = (data.x_train, data.y_train)
  history = []
  for e in range(start, cfg["epochs"]):
    indices, masks = epoch_batches(sampler, int(state.step), per_epoch)
    state, info = epoch_fn(state, xy, indices, masks)
    eps = float(info.epsilon[-1])
    acc = float(accuracy(state.params, data.x_test, data.y_test))
    history.append(EpochRecord(e + 1, eps, acc, int(state.step)))
    log(f"epoch {e + 1:3d}/{cfg['epochs']}  epsilon={eps:.4f}  test_accuracy={acc:.4f}")
    if checkpoint is not None:
      jaxrdp.train.save_checkpoint(checkpoint, state)
    if not bool(info.applied[-1]):
      log(f"stopping: the next step would exceed target_epsilon={cfg['target_epsilon']}")
      break
  return state, history


def baseline_accuracies(cfg: dict) -> list[float]:
  """Test accuracy per epoch of :func:`train_baseline` on :func:`load_data`, computed
  once per configuration in a process (it does not depend on the private run's
  sampling, so a second run with other sampling reuses it)."""
  return list(_baseline_cached(tuple(cfg[k] for k in ("q", "epochs", "lr", "hidden", "seed"))))


@functools.cache
def _baseline_cached(key: tuple) -> tuple[float, ...]:
  cfg = dict(zip(("q", "epochs", "lr", "hidden", "seed"), key))
  return tuple(train_baseline(cfg, load_data())[1])


def train_baseline(cfg: dict, data: Data) -> tuple[dict, list[float]]:
  """The same model without privacy: shuffled minibatches of the same size.

  Shuffled fixed-size batches are fine here because nothing is accounted;
  they are not the Poisson sampling that the SGM accounting of DP-SGD assumes.
  """
  optimizer = optax.adam(cfg["lr"])
  params = init_params(jax.random.split(jax.random.PRNGKey(cfg["seed"]))[0], cfg["hidden"])
  opt_state = optimizer.init(params)
  n = data.x_train.shape[0]
  batch = max(1, int(round(cfg["q"] * n)))
  n_batches = n // batch

  def loss(p, x, y):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits(p, x), y))

  @jax.jit
  def epoch(params, opt_state, key):
    perm = jax.random.permutation(key, n)[: n_batches * batch].reshape(n_batches, batch)

    def body(carry, idx):
      p, o = carry
      g = jax.grad(loss)(p, data.x_train[idx], data.y_train[idx])
      u, o = optimizer.update(g, o, p)
      return (optax.apply_updates(p, u), o), None

    (params, opt_state), _ = jax.lax.scan(body, (params, opt_state), perm)
    return params, opt_state

  key = jax.random.PRNGKey(cfg["seed"] + 1)
  accs = []
  for _ in range(cfg["epochs"]):
    key, k = jax.random.split(key)
    params, opt_state = epoch(params, opt_state, k)
    accs.append(float(accuracy(params, data.x_test, data.y_test)))
  return params, accs


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
  p.add_argument("--q", type=float, default=DEFAULTS["q"], help="Poisson sampling rate")
  p.add_argument("--sigma", type=float, default=DEFAULTS["sigma"], help="noise multiplier")
  p.add_argument("--clip", type=float, default=DEFAULTS["clip"], help="per-example L2 clip C")
  p.add_argument("--lr", type=float, default=DEFAULTS["lr"])
  p.add_argument("--hidden", type=int, default=DEFAULTS["hidden"])
  p.add_argument("--delta", type=float, default=DEFAULTS["delta"])
  p.add_argument("--target-epsilon", type=float, default=DEFAULTS["target_epsilon"])
  p.add_argument("--seed", type=int, default=DEFAULTS["seed"])
  p.add_argument(
    "--sampling",
    choices=("poisson", "allocation"),
    default=DEFAULTS["sampling"],
    help="Poisson sampling at rate q, or random allocation (each example in one of "
    "every epoch's round(1/q) steps)",
  )
  p.add_argument("--checkpoint", default=None, help="save the DP train state here every epoch")
  p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
  args = p.parse_args(argv)
  if args.resume and args.checkpoint is None:
    p.error("--resume needs --checkpoint")
  return args


def main(argv=None) -> int:
  args = parse_args(argv)
  cfg = dict(
    q=args.q,
    sigma=args.sigma,
    clip=args.clip,
    epochs=args.epochs,
    lr=args.lr,
    hidden=args.hidden,
    delta=args.delta,
    target_epsilon=args.target_epsilon,
    seed=args.seed,
    sampling=args.sampling,
  )
  t0 = time.perf_counter()
  data = load_data()
  sampler = make_sampler(cfg, int(data.x_train.shape[0]))
  print(
    f"digits: {data.x_train.shape[0]} train / {data.x_test.shape[0]} test; "
    f"sampling={cfg['sampling']} q={sampler.q:.6g} (expected batch "
    f"{sampler.expected_batch_size:.1f}), sigma={cfg['sigma']}, C={cfg['clip']}, "
    f"{steps_per_epoch(cfg['q'])} steps/epoch, capacity {sampler.capacity}"
  )
  state, history = train_private(cfg, data, checkpoint=args.checkpoint, resume=args.resume)
  base_accs = baseline_accuracies(cfg)
  if cfg["sampling"] == "allocation":
    return report_allocation(cfg, data, state, history, base_accs, t0)
  # The reported guarantee: the Poisson epsilon at a delta' that leaves room for
  # the truncation term, so that (epsilon, delta) holds for the truncated run.
  sampler = jaxrdp.train.sampler_from_state(state.sampler)
  eps = jaxrdp.train.epsilon_with_truncation(
    state.accountant, sampler, int(state.step), cfg["delta"]
  )
  in_jit = jaxrdp.RdpAccountant().get_epsilon(state.accountant, cfg["delta"])
  eta = sampler.truncation_delta(int(state.step))
  test_acc = float(accuracy(state.params, data.x_test, data.y_test))
  print(f"baseline (non-private) test_accuracy={base_accs[-1]:.4f}")
  print(
    f"truncation: capacity={sampler.capacity} eta={eta!r} "
    f"epsilon_untruncated={float(in_jit.epsilon)!r}"
  )
  print(
    f"epsilon attained at RDP order {float(eps.order):g}; runtime {time.perf_counter() - t0:.1f} s"
  )
  # The number to publish: the tight (PLD) epsilon of the same run, truncation
  # term included, with its certified lower bound.
  tight = jaxrdp.train.tight_epsilon(state, q=cfg["q"], sigma=cfg["sigma"], delta=cfg["delta"])
  print(
    f"tight: epsilon={float(tight.epsilon)!r} epsilon_lower={float(tight.epsilon_lower)!r} "
    f"(Renyi DP: {float(eps.epsilon):.4f})"
  )
  print(
    f"final: epsilon={float(eps.epsilon)!r} delta={cfg['delta']!r} q={cfg['q']!r} "
    f"sigma={cfg['sigma']!r} steps={int(state.step)} test_accuracy={test_acc!r} "
    f"baseline_accuracy={base_accs[-1]!r}"
  )
  return 0


def report_allocation(cfg, data, state, history, base_accs, t0) -> int:
  """The end of a random-allocation run: the epsilon the step itself accounted, and
  the tight one.

  The step composed one epoch's RDP at each epoch's first step and read epsilon
  at total delta with the truncation term paid, so the epsilon of its last call
  (the last epoch record) is the run's guarantee at ``delta``, as it stands; the
  tight bracket (``jaxrdp.train.tight_epsilon``) charges the same epochs and term.
  """
  sampler = jaxrdp.train.sampler_from_state(state.sampler)
  steps = int(state.step)
  if history:
    eps = history[-1].epsilon
  else:  # resumed with nothing left to train: the same number, read from the state
    eps = float(
      jaxrdp.train.epsilon_with_truncation(state.accountant, sampler, steps, cfg["delta"]).epsilon
    )
  test_acc = float(accuracy(state.params, data.x_test, data.y_test))
  print(f"baseline (non-private) test_accuracy={base_accs[-1]:.4f}")
  print(
    f"allocation: steps_per_epoch={sampler.steps_per_epoch} capacity={sampler.capacity} "
    f"eta={sampler.truncation_delta(steps)!r} epsilon_in_step={eps!r}; "
    f"runtime {time.perf_counter() - t0:.1f} s"
  )
  # The number to publish: the tight (PLD) bracket of the same run, started epochs
  # whole and the truncation term included, as the step charges them.
  tight = jaxrdp.train.tight_epsilon(state, q=sampler.q, sigma=cfg["sigma"], delta=cfg["delta"])
  print(
    f"tight: epsilon={float(tight.epsilon)!r} epsilon_lower={float(tight.epsilon_lower)!r} "
    f"(Renyi DP: {eps:.4f})"
  )
  print(
    f"final: epsilon={eps!r} delta={cfg['delta']!r} q={sampler.q!r} "
    f"sigma={cfg['sigma']!r} steps={steps} test_accuracy={test_acc!r} "
    f"baseline_accuracy={base_accs[-1]!r}"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
