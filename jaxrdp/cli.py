"""The `jaxrdp` command line: epsilon, delta, calibrate, sweep and risk.

    jaxrdp epsilon   --q 0.0042667 --sigma 1.1 --steps 14063 --delta 1e-5
    jaxrdp epsilon   --dataset-size 60000 --batch-size 256 --epochs 60 --sigma 1.1
    jaxrdp epsilon   --dataset-size 60000 --batch-size 256 --epochs 60 --sigma 1.1 --sampling shuffle
    jaxrdp delta     --q 0.01 --sigma 1.0 --steps 1000 --epsilon 2
    jaxrdp calibrate --epsilon 1 2 4 --delta 1e-5 --q 0.01 --steps 1000   (solves sigma)
    jaxrdp sweep     (embedded MNIST-scale grid; writes jaxrdp_sweep.csv and .png)
    jaxrdp risk      --q 0.0042667 --sigma 1.1 --steps 14063 --fpr 0.01   (attack TPR, advantage)
    jaxrdp risk      --q 0.0042667 --steps 14063 --target-tpr 0.05        (solves sigma)

Every numeric option takes one or more values; several values give the outer-product
grid, evaluated in one vectorized call. Output is a readable table, or `--json` /
`--csv` on stdout. The table rounds every bound to publish (epsilon, delta) up and a
calibrated parameter in the direction that keeps the budget (sigma up; steps, epochs,
q and batch size down; a risk's upper bound up, its lower bound down), exactly; JSON and CSV carry the exact floats, with an
infinite or undefined value as the string "inf", "-inf" or "nan". Bad arguments exit
with status 2 and a one-line message naming the argument. Heavy modules (jax,
matplotlib) are imported only once the arguments parse. `jaxrdp --version` prints
the version.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time

__all__ = ["main"]

# The embedded default sweep: an MNIST-scale DP-SGD study (N = 60,000 examples).
DEFAULT_DATASET_SIZE = 60000
DEFAULT_BATCH_SIZES = (64, 128, 256, 512, 1024, 2048)
DEFAULT_SIGMAS = tuple(round(0.5 + 0.1 * i, 1) for i in range(26))  # 0.5, 0.6, ..., 3.0
DEFAULT_EPOCHS = tuple(range(1, 101))
DEFAULT_DELTA = 1e-5
# jaxrdp.events.SAMPLINGS, spelled out so that the parser does not import JAX
# (tests/test_dispatch.py checks that they agree).
_SAMPLINGS = ("poisson", "fixed", "shuffle", "allocation")
SWEEP_BASENAME = "jaxrdp_sweep"
#: Grids larger than this many cells need --yes (about 20 us per cell on a
#: 2-core CPU: a million cells take some 20 s, 27 million some 10 minutes).
SWEEP_CONFIRM_CELLS = 1_000_000
_SWEEP_SECONDS_PER_CELL = 2e-5
#: The attack's false-positive rate of `jaxrdp risk` by default.
DEFAULT_FPR = 0.01


class _Parser(argparse.ArgumentParser):
  """argparse with one-line errors (status 2) instead of usage dumps."""

  def error(self, message: str):
    message = " ".join(message.split())
    sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
    raise SystemExit(2)


def _number(check: str):
  """argparse type: a finite float passing `check` ('prob', 'nonneg', 'open01', 'pos')."""

  def parse(text: str) -> float:
    try:
      x = float(text)
    except ValueError:
      raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(x):
      raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    if check == "prob" and not 0.0 <= x <= 1.0:
      raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    if check == "nonneg" and x < 0:
      raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    if check == "open01" and not 0.0 < x < 1.0:
      raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return x

  parse.__name__ = check
  return parse


def _count(text: str) -> int:
  """argparse type: a positive integer."""
  try:
    x = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
  if not math.isfinite(x) or x < 1 or x != int(x):
    raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
  return int(x)


def _add_output(p: argparse.ArgumentParser) -> None:
  group = p.add_mutually_exclusive_group()
  group.add_argument(
    "--json",
    action="store_true",
    help='print JSON (a list of records); numbers are exact, and an infinite or '
    'undefined one is the string "inf", "-inf" or "nan" (JSON has no such numbers)',
  )
  group.add_argument(
    "--csv",
    action="store_true",
    help="print CSV with a header row (exact numbers; inf, -inf and nan as such)",
  )


def _add_values(g, flag: str, kind, metavar: str, help: str, **kwargs) -> None:
  """An option that takes one or more values: an axis of the outer-product grid."""
  g.add_argument(flag, nargs="+", type=kind, metavar=metavar, help=help, **kwargs)


def _add_mechanism(p: argparse.ArgumentParser, *, sigma_required: bool) -> None:
  g = p.add_argument_group("DP-SGD configuration (each option takes one or more values)")
  _add_values(g, "--q", _number("prob"), "Q", "Poisson sampling rate per step, in [0, 1]")
  _add_values(
    g, "--dataset-size", _count, "N", "number of training examples (with --batch-size: q = B / N)"
  )
  _add_values(g, "--batch-size", _count, "B", "expected batch size (needs --dataset-size)")
  _add_values(
    g,
    "--sigma",
    _number("nonneg"),
    "S",
    "noise multiplier (noise std / clipping norm), >= 0",
    required=sigma_required,
  )
  _add_values(g, "--steps", _number("nonneg"), "T", "number of training steps, >= 0")
  _add_values(
    g,
    "--epochs",
    _number("nonneg"),
    "E",
    "number of epochs; steps = ceil(E * N / B) (needs --dataset-size, --batch-size)",
  )
  _add_scheme(p)


def _add_delta(p, what: str = "delta", default=(DEFAULT_DELTA,)) -> None:
  help = f"{what}, in (0, 1) (default {DEFAULT_DELTA:g})"
  default = None if default is None else list(default)
  _add_values(p, "--delta", _number("open01"), "D", help, default=default)


def _add_epsilon(p, what: str = "epsilon") -> None:
  _add_values(p, "--epsilon", _number("nonneg"), "EPS", f"{what}, >= 0", required=True)


def _finish(p, handler, accountant_help=None) -> None:
  """The options every subcommand ends with, and its handler."""
  _add_accountant(p, accountant_help)
  _add_output(p)
  p.set_defaults(handler=handler)


def _add_scheme(p: argparse.ArgumentParser) -> None:
  g = p.add_argument_group("batching scheme and neighbouring relation")
  g.add_argument(
    "--sampling",
    choices=_SAMPLINGS,
    default="poisson",
    help="poisson (default): each example joins a batch with probability q; "
    "fixed: B distinct examples per step (q = B / N); shuffle: shuffled "
    "epochs, accounted without amplification (epsilon), with a certified lower "
    "bound on the true value (epsilon_lower, Chua et al. 2024); allocation: random allocation, "
    "epochs of 1 / q steps with each example in one of them (epsilon and delta)",
  )
  g.add_argument(
    "--relation",
    choices=("add_remove", "replace_one"),
    default=None,
    help="neighbouring relation (default: add_remove, or replace_one for "
    "--sampling fixed, the only one its bound covers)",
  )


def _add_accountant(p, help=None) -> None:
  """--accountant; ``help`` (a subcommand's own text) makes the tight one the default."""
  p.add_argument(
    "--accountant",
    choices=("rdp", "pld"),
    default="rdp" if help is None else "pld",
    help=help
    or "rdp: Renyi DP, exact over its orders (default); pld: tight, certified "
    "privacy-loss-distribution accounting (about 8 to 10%% lower epsilon, slower)",
  )


def _build_parser() -> _Parser:
  parser = _Parser(
    prog="jaxrdp",
    description="Privacy accounting for DP-SGD in JAX: Renyi DP (--accountant rdp) and tight, "
    "certified accounting by privacy-loss distributions (--accountant pld).",
  )
  from ._version import __version__

  parser.add_argument("--version", action="version", version=f"jaxrdp {__version__}")
  sub = parser.add_subparsers(
    dest="command",
    required=True,
    parser_class=_Parser,
    metavar="{epsilon,delta,calibrate,sweep,risk}",
  )

  p = sub.add_parser(
    "epsilon",
    help="epsilon of a DP-SGD run for a given delta",
    description="Epsilon of DP-SGD (and the optimal RDP order, or with --accountant pld "
    "the tight epsilon and its certified lower bound).",
  )
  _add_mechanism(p, sigma_required=True)
  _add_delta(p)
  p.add_argument(
    "--capacity",
    type=_count,
    default=None,
    metavar="BMAX",
    help="Poisson batches truncated at BMAX (needs --dataset-size and --sampling "
    "poisson): the epsilon then holds at --delta including the truncation term. "
    "(This subcommand only: for delta add jaxrdp.train.truncated_poisson_delta; "
    "calibrate and sweep assume untruncated batches, whose answers a capacity from "
    "jaxrdp.train.default_capacity changes by at most 0.1%% of delta)",
  )
  _finish(p, _cmd_epsilon)

  p = sub.add_parser(
    "delta",
    help="delta of a DP-SGD run for a given epsilon",
    description="Delta (and the optimal RDP order) of DP-SGD.",
  )
  _add_mechanism(p, sigma_required=True)
  _add_epsilon(p)
  _finish(p, _cmd_delta)

  p = sub.add_parser(
    "calibrate",
    help="solve for sigma, steps or the sampling rate under a budget",
    description="Leave out exactly one of --sigma, --steps/--epochs, --q/--batch-size: "
    "that is the quantity solved for (smallest sigma, largest steps or largest q "
    "whose epsilon at --delta is <= --epsilon).",
  )
  _add_mechanism(p, sigma_required=False)
  _add_epsilon(p, "epsilon budget")
  _add_delta(p, "delta budget")
  p.add_argument(
    "--target",
    choices=("epsilon", "delta"),
    default="epsilon",
    help="bound epsilon at the given delta (default), or delta at the given epsilon",
  )
  _finish(p, _cmd_calibrate)

  p = sub.add_parser(
    "sweep",
    help="epsilon over a hyperparameter grid; writes a CSV and a heatmap",
    description="Epsilon over the outer-product grid of the given values. With no "
    f"options: N = {DEFAULT_DATASET_SIZE:,}, batch sizes {', '.join(map(str, DEFAULT_BATCH_SIZES))}, "
    "sigma 0.5 to 3.0 by 0.1, epochs 1 to 100, delta = 1e-5. Writes "
    f"{SWEEP_BASENAME}.csv and {SWEEP_BASENAME}.png to --out-dir.",
  )
  _add_mechanism(p, sigma_required=False)
  _add_delta(p, default=None)  # the sweep fills in its default later
  p.add_argument(
    "--out-dir",
    default=".",
    metavar="DIR",
    help=f"where {SWEEP_BASENAME}.csv and {SWEEP_BASENAME}.png go (default: .)",
  )
  p.add_argument(
    "--plot",
    metavar="FILE.png",
    default=None,
    help=f"heatmap path (default DIR/{SWEEP_BASENAME}.png; needs matplotlib)",
  )
  p.add_argument("--no-files", action="store_true", help="write no CSV or PNG")
  p.add_argument(
    "--chunk-size",
    type=_count,
    default=1 << 14,
    metavar="K",
    help="grid cells per vectorized chunk (default 16384)",
  )
  p.add_argument("--no-progress", action="store_true", help="no progress bar")
  p.add_argument(
    "--tpr-at-fpr",
    type=_number("prob"),
    default=None,
    metavar="A",
    help="also the best membership-inference attack's TPR at FPR A, with its "
    "lower bound (Poisson sampling under add/remove)",
  )
  p.add_argument(
    "--advantage",
    action="store_true",
    help="also the membership advantage max (TPR - FPR), with its lower bound",
  )
  p.add_argument(
    "--yes",
    action="store_true",
    help=f"run grids of more than {SWEEP_CONFIRM_CELLS:,} cells without asking",
  )
  _finish(p, _cmd_sweep)

  p = sub.add_parser(
    "risk",
    help="the best membership-inference attack's TPR at an FPR, and its advantage",
    description="Attack risk of DP-SGD: the true-positive rate of the most powerful "
    "membership-inference attack at each --fpr (certified upper bound, with its "
    "certified lower bound beside it) and the membership advantage max (TPR - FPR). "
    "Leave out --sigma and give --target-tpr (at --fpr) or --target-advantage to "
    "solve for the least noise multiplier that keeps the risk under the target. "
    "Poisson sampling under add/remove.",
  )
  _add_mechanism(p, sigma_required=False)
  _add_values(
    p,
    "--fpr",
    _number("prob"),
    "A",
    f"false-positive rate of the attack, in [0, 1] (default {DEFAULT_FPR:g})",
    default=[DEFAULT_FPR],
  )
  target = p.add_mutually_exclusive_group()
  _add_values(
    target,
    "--target-tpr",
    _number("open01"),
    "TPR",
    "solve for sigma: the largest TPR allowed at --fpr, in (0, 1)",
  )
  _add_values(
    target,
    "--target-advantage",
    _number("open01"),
    "ADV",
    "solve for sigma: the largest advantage allowed, in (0, 1)",
  )
  _finish(
    p,
    _cmd_risk,
    accountant_help="pld: tight, from the privacy-loss distribution, with a certified "
    "lower bound (default); rdp: a looser upper bound from the Renyi curve (the lower "
    "bounds are then the trivial FPR and 0)",
  )
  return parser


# --------------------------------------------------------------------------------------
# Shared helpers.


def _sampling_axes(args, parser, *, optional: bool = False) -> dict | None:
  """{'q': [...]} or {'dataset_size': [...], 'batch_size': [...]} from the options."""
  if args.q is not None and (args.batch_size is not None or args.dataset_size is not None):
    parser.error("argument --q: give either --q or --dataset-size with --batch-size, not both")
  if args.q is not None:
    return {"q": args.q}
  if args.batch_size is not None and args.dataset_size is None:
    parser.error("argument --batch-size: needs --dataset-size")
  if args.batch_size is None:
    if optional:
      return None
    parser.error("argument --q: required (or --dataset-size with --batch-size)")
  if max(args.batch_size) > min(args.dataset_size):
    parser.error(
      f"argument --batch-size: must be <= --dataset-size, got {max(args.batch_size)} "
      f"> {min(args.dataset_size)}"
    )
  return {"dataset_size": args.dataset_size, "batch_size": args.batch_size}


def _duration_axes(args, parser, sampling: dict | None, *, optional: bool = False) -> dict | None:
  if args.steps is not None and args.epochs is not None:
    parser.error("argument --epochs: give either --steps or --epochs, not both")
  if args.steps is not None:
    return {"steps": args.steps}
  if args.epochs is not None:
    if sampling is None or "batch_size" not in sampling:
      parser.error("argument --epochs: needs --dataset-size and --batch-size")
    return {"epochs": args.epochs}
  if optional:
    return None
  parser.error("argument --steps: required (or --epochs)")


def _grid(axes: dict) -> dict:
  """Outer product of the axes, flattened to equal-length numpy columns."""
  import numpy as np

  mesh = np.meshgrid(*[np.asarray(v, dtype=np.float64) for v in axes.values()], indexing="ij")
  return {k: m.ravel() for k, m in zip(axes, mesh)}


def _derived(cols: dict) -> dict:
  """Add q and steps columns computed from dataset_size, batch_size and epochs."""
  import numpy as np

  from .events._dataset import epochs_to_steps

  out = dict(cols)
  if "batch_size" in cols:
    out["q"] = cols["batch_size"] / cols["dataset_size"]
    if "epochs" in cols:
      out["steps"] = np.asarray(
        epochs_to_steps(cols["epochs"], cols["dataset_size"], cols["batch_size"])
      )
  return out


def _json_value(x):
  """A JSON/CSV value: the string itself, an int when exact, a float, or "inf",
  "-inf", "nan" for the non-finite numbers (strict JSON has no literal for them)."""
  if isinstance(x, str):
    return x
  x = float(x)
  if math.isnan(x):
    return "nan"
  if math.isinf(x):
    return "inf" if x > 0 else "-inf"
  return int(x) if x == int(x) and abs(x) < 2**53 else x


def _labels(args, scheme: dict) -> dict:
  """What computed the numbers: the accountant, the sampler and the relation."""
  return {"accountant": args.accountant, **scheme}


def _emit(
  cols: dict,
  args,
  *,
  directions: dict | None = None,
  note: str | None = None,
  labels: dict | None = None,
) -> None:
  """Print equal-length columns as a table, JSON records or CSV.

  ``directions`` maps a column to how its table cells are rounded: +1 up, -1 down
  (exactly, ``jaxrdp.sweeps._table.round_decimal``); the other columns (the
  inputs) are printed to nearest. JSON and CSV carry every float exactly (repr).
  ``labels`` (the accountant, sampler and relation) head the table and are fields
  of every JSON record and CSV row.
  """
  from .sweeps._table import format_number, format_table

  names = list(cols)
  n = len(next(iter(cols.values()))) if cols else 0
  directions = directions or {}

  labels = labels or {}
  if args.json:
    import json

    records = [{**{k: _json_value(cols[k][i]) for k in names}, **labels} for i in range(n)]
    print(json.dumps(records, indent=2, allow_nan=False))
  elif args.csv:
    import csv

    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(names + list(labels))
    for i in range(n):
      row = [_json_value(cols[k][i]) for k in names]
      writer.writerow([v if isinstance(v, str) else repr(v) for v in row] + list(labels.values()))
  else:
    # A bound to publish (epsilon, delta) is printed with 5 significant digits,
    # rounded up (a lower bound down); a calibrated parameter with 4, rounded in
    # the direction that keeps the budget; so that the table never shows less
    # privacy loss than was computed.
    def cell(k, x):
      if isinstance(x, str):
        return x
      if k in directions:
        return format_number(x, digits=5 if k in _BOUNDS else 4, direction=directions[k])
      return format_number(x)

    rows = [[cell(k, cols[k][i]) for k in names] for i in range(n)]
    if labels:
      print(", ".join(f"{k} {v}" for k, v in labels.items()))
    print(format_table(names, rows))
  if note:
    print(note, file=sys.stderr)


_BOUNDS = (
  "epsilon",
  "delta",
  "epsilon_lower",
  "delta_lower",
  "tpr",
  "tpr_lower",
  "advantage",
  "advantage_lower",
)


# --------------------------------------------------------------------------------------
# Subcommands.


def _cmd_accountant(args, parser, given: str, value: str) -> int:
  """One accountant value per grid cell: epsilon at a given delta, or delta at a given epsilon."""
  sampling = _sampling_axes(args, parser)
  duration = _duration_axes(args, parser, sampling)
  cols = _derived(_grid({**sampling, **duration, "sigma": args.sigma, given: getattr(args, given)}))
  from .accountants._dpsgd import dpsgd_delta, dpsgd_epsilon

  fn = dpsgd_epsilon if value == "epsilon" else dpsgd_delta
  scheme = _scheme(args, parser)
  if getattr(args, "capacity", None) is not None:
    res = _truncated_epsilon(cols, args, parser, scheme)
  else:
    res = fn(
      cols["q"], cols["sigma"], cols["steps"], cols[given], accountant=args.accountant, **scheme
    )
  # As NumPy arrays: indexing a JAX array element by element runs a small
  # compiled program each time.
  import numpy as np

  # The value to publish (an upper bound), the Renyi order attaining it where the
  # accountant has one, and the certified lower bound on the true value where the
  # result carries one (the tight accountant; shuffled batches with either).
  cols[value] = np.asarray(getattr(res, value))
  if hasattr(res, "order"):
    cols["order"] = np.asarray(res.order)
  if hasattr(res, value + "_lower"):
    cols[value + "_lower"] = np.asarray(getattr(res, value + "_lower"))
  labels = _labels(args, scheme)
  _emit(cols, args, directions={value: 1, value + "_lower": -1}, labels=labels)
  return 0


def _scheme(args, parser) -> dict:
  """The --sampling and --relation keywords, checked (a bad pair is a usage error), and
  whether --accountant can account that scheme (its own answer, as a usage error)."""
  from .accountants._protocol import get_accountant, require_support
  from .events._dpsgd import dpsgd_event, resolve_scheme

  try:
    sampling, relation = resolve_scheme(args.sampling, args.relation)
  except ValueError as e:
    parser.error(f"argument --relation: {e}")
  try:
    event = dpsgd_event(0.5, 1.0, 1.0, sampling=sampling, relation=relation)
    require_support(get_accountant(args.accountant), event)
  except NotImplementedError as e:
    parser.error(f"argument --accountant: {e}")
  return {"sampling": sampling, "relation": relation}


def _truncated_epsilon(cols, args, parser, scheme):
  """epsilon per cell of Poisson batches truncated at --capacity (scalar calls).

  The result has the fields of the accountant's (epsilon and order, or epsilon and
  epsilon_lower for the tight accountant), one value per cell."""
  import numpy as np

  from .accountants._dpsgd import dpsgd_epsilon
  from .accountants._truncation import TruncationError

  if "dataset_size" not in cols:
    parser.error("argument --capacity: needs --dataset-size and --batch-size")
  fields = {}
  for i in range(len(cols["q"])):
    try:
      r = dpsgd_epsilon(
        float(cols["q"][i]),
        float(cols["sigma"][i]),
        float(cols["steps"][i]),
        float(cols["delta"][i]),
        capacity=args.capacity,
        dataset_size=int(cols["dataset_size"][i]),
        accountant=args.accountant,
        **scheme,
      )
    except TruncationError as e:
      parser.error(
        _capacity_advice(
          e, int(cols["dataset_size"][i]), cols["q"][i], cols["steps"][i], cols["delta"][i]
        )
      )
    except ValueError as e:
      parser.error(f"argument --capacity: {e}")
    for k, v in r._asdict().items():
      fields.setdefault(k, []).append(float(v))
  return type(r)(**{k: np.asarray(v) for k, v in fields.items()})


def _capacity_advice(error, n: int, q: float, steps: float, delta: float) -> str:
  """The --capacity error in the user's terms: what happened and a capacity that works."""
  from .mechanisms._truncated_poisson import default_capacity

  text = (
    f"argument --capacity: {error.capacity} is too small for this run: batches larger "
    f"than {error.capacity} are truncated so often over {int(steps):,} steps (probability "
    f"up to {min(error.eta, 1.0):.2g}) that it uses up --delta {delta:g}; give a larger --capacity"
  )
  try:
    suggested = default_capacity(n, float(q), int(steps), float(delta))
  except ValueError:
    return text
  if suggested > error.capacity:
    text += (
      f", e.g. --capacity {suggested} (truncation then costs at most 0.1% of delta "
      "for any epsilon up to 16)"
    )
  return text


def _cmd_epsilon(args, parser) -> int:
  return _cmd_accountant(args, parser, given="delta", value="epsilon")


def _cmd_delta(args, parser) -> int:
  return _cmd_accountant(args, parser, given="epsilon", value="delta")


def _cmd_calibrate(args, parser) -> int:
  import numpy as np

  if args.epochs is not None and args.q is None and args.batch_size is None:
    parser.error(
      "argument --epochs: to solve for the batch size give --steps "
      "(steps per epoch change with the batch size)"
    )
  # --dataset-size without --batch-size means: solve for the batch size.
  sampling = _sampling_axes(args, parser, optional=True)
  duration = _duration_axes(args, parser, sampling, optional=True)
  missing = [
    name
    for name, given in (
      ("sigma", args.sigma is not None),
      ("steps", duration is not None),
      ("q", sampling is not None),
    )
    if not given
  ]
  if len(missing) != 1:
    parser.error(
      "argument --sigma: leave out exactly one of --sigma, --steps/--epochs, "
      f"--q/--batch-size (the quantity to solve for); missing now: {missing or 'none'}"
    )
  solve = missing[0]
  by_delta = args.target == "delta"
  # tgt: the budgeted quantity; given: the other half of the (epsilon, delta) pair.
  tgt, given = ("delta", "epsilon") if by_delta else ("epsilon", "delta")
  target_name = "target_" + tgt

  def budget_of(cols):
    # The budget as the calibrations' keywords: target_epsilon and delta, or
    # target_delta and epsilon.
    return {target_name: cols[tgt], given: cols[given]}

  from .calibration import _calibration as cal

  scheme = _scheme(args, parser)

  # The grid's axes: the given parameters (sampling, sigma, duration), then the budget.
  if solve == "q":  # --dataset-size alone: the batch size is solved for
    sampling = {"dataset_size": args.dataset_size} if args.dataset_size else {}
  axes = {**sampling, **({"sigma": args.sigma} if solve != "sigma" else {}), **(duration or {})}
  cols = _derived(_grid({**axes, "epsilon": args.epsilon, "delta": args.delta}))
  calibrate, given_params = {
    "sigma": (cal.calibrate_noise, ("q", "steps")),
    "steps": (cal.calibrate_steps, ("q", "sigma")),
    "q": (cal.calibrate_sampling_rate, ("sigma", "steps")),
  }[solve]
  try:
    res = calibrate(
      **{k: cols[k] for k in given_params}, **budget_of(cols), accountant=args.accountant, **scheme
    )
  except NotImplementedError as e:
    parser.error(f"argument --accountant: {e}")
  out = {solve: np.asarray(getattr(res, solve))}
  if solve == "steps" and "batch_size" in cols:
    out["epochs"] = out["steps"] * cols["batch_size"] / cols["dataset_size"]
  if solve == "q" and "dataset_size" in cols:
    from .calibration._batch_size import floor_to_batch_size
    from .calibration._core import Budget

    res = floor_to_batch_size(
      res,
      cols["dataset_size"],
      cols["sigma"],
      cols["steps"],
      budget=Budget.DELTA if by_delta else Budget.EPSILON,
      accountant=args.accountant,
      **scheme,
    )
    out = {"batch_size": res.batch_size, "q": res.q}

  feasible = np.asarray(res.feasible)
  table = {k: v for k, v in cols.items() if k not in ("epsilon", "delta")}
  table[target_name] = cols[tgt]
  table[given] = cols[given]
  for k, v in out.items():
    table[k] = v if args.json or args.csv else np.where(feasible, v, np.nan)
  table[tgt] = np.asarray(getattr(res, tgt))
  if args.accountant == "rdp":
    table["order"] = np.asarray(res.order)
  if not (args.json or args.csv):
    if "dataset_size" in cols and ("epochs" in out or "batch_size" in out):
      # The exact ratios (epochs T B / N, or q = B / N), rounded down with no float
      # rounding in between.
      k, a, b = (
        ("epochs", table["steps"], cols["batch_size"])
        if "epochs" in out
        else ("q", table["batch_size"], np.ones(feasible.size))
      )
      table[k] = [_ratio(*abnx) for abnx in zip(a, b, cols["dataset_size"], table[k])]
    for k in out:
      table[k] = [("infeasible" if not f else x) for x, f in zip(table[k], feasible)]
  if args.json or args.csv:
    table["feasible"] = feasible.astype(float)
  n_bad = int((~feasible).sum())
  note = None
  if n_bad:
    what = {
      "sigma": "noise multiplier",
      "steps": "number of steps >= 1",
      "q": "sampling rate (or batch size >= 1)",
    }[solve]
    note = (
      f"note: {n_bad} of {feasible.size} requests are infeasible: no {what} meets "
      "the budget (an epsilon at or below the infinite-noise floor of the RDP "
      "conversion cannot be met)"
    )
  # Rounded so that the printed numbers keep the budget: the solved parameter
  # (sigma up; steps, epochs, q and the batch size down) and the achieved value up.
  directions = {k: (1 if solve == "sigma" else -1) for k in out}
  if "epochs" in out:
    directions["epochs"] = -1
  directions[tgt] = 1
  _emit(table, args, directions=directions, note=note, labels=_labels(args, scheme))
  return 0


def _ratio(a, b, n, fallback):
  """The exact ``a * b / n`` as a Fraction where a, b and n are finite integers, else
  ``fallback``."""
  from fractions import Fraction

  a, b, n = float(a), float(b), float(n)
  if not all(math.isfinite(v) and v == int(v) for v in (a, b, n)) or n <= 0:
    return fallback
  return Fraction(int(a) * int(b), int(n))


def _sweep_axes(args, parser) -> dict:
  """Sweep keyword arguments: the options given, embedded defaults for the rest."""
  sampling = _sampling_axes(args, parser, optional=True)
  if sampling is None:
    sampling = {
      "dataset_size": args.dataset_size or [DEFAULT_DATASET_SIZE],
      "batch_size": list(DEFAULT_BATCH_SIZES),
    }
    too_big = [b for b in DEFAULT_BATCH_SIZES if b > min(sampling["dataset_size"])]
    if too_big:
      sampling["batch_size"] = [b for b in DEFAULT_BATCH_SIZES if b not in too_big] or [1]
  duration = _duration_axes(args, parser, sampling, optional=True)
  if duration is None:
    if "q" in sampling:
      parser.error("argument --steps: required with --q (or give --dataset-size and --batch-size)")
    duration = {"epochs": list(DEFAULT_EPOCHS)}
  return {
    **sampling,
    "sigma": args.sigma or list(DEFAULT_SIGMAS),
    **duration,
    "delta": args.delta or [DEFAULT_DELTA],
  }


def _cmd_sweep(args, parser) -> int:
  kwargs = _sweep_axes(args, parser)
  if not args.no_files and not os.path.isdir(args.out_dir):
    parser.error(f"argument --out-dir: not a directory: {args.out_dir}")
  plot_path = args.plot
  if plot_path is not None and os.path.isdir(plot_path):
    parser.error(
      f"argument --plot: is a directory: {plot_path} (give a file such as "
      f"{os.path.join(plot_path, SWEEP_BASENAME + '.png')})"
    )
  if plot_path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(plot_path))):
    parser.error(f"argument --plot: directory does not exist: {os.path.dirname(plot_path)}")
  if plot_path is not None and not os.path.splitext(plot_path)[1]:
    plot_path += ".png"  # what matplotlib writes for a name without an extension
  # The heatmap's requirement, checked before anything is computed or written.
  samp = "batch_size" if "batch_size" in kwargs else "q"
  if plot_path is not None and (len(kwargs["sigma"]) < 2 or len(kwargs[samp]) < 2):
    parser.error(
      f"argument --plot: heatmap needs at least 2 values of --sigma and of "
      f"--{samp.replace('_', '-')}"
    )
  cells = math.prod(len(v) for v in kwargs.values() if isinstance(v, (list, tuple)))
  if cells > SWEEP_CONFIRM_CELLS and not args.yes:
    parser.error(
      f"the grid has {cells:,} cells, about {cells * _SWEEP_SECONDS_PER_CELL:,.0f} s "
      f"of computation on a 2-core CPU; pass --yes to run grids of more than "
      f"{SWEEP_CONFIRM_CELLS:,} cells"
    )

  from .sweeps._sweep import sweep

  start = time.perf_counter()
  result = sweep(
    **kwargs,
    chunk_size=args.chunk_size,
    progress=False if args.no_progress else None,
    accountant=args.accountant,
    **_scheme(args, parser),
    **_sweep_risk(args, parser),
  )
  elapsed = time.perf_counter() - start

  machine = args.json or args.csv
  info = sys.stderr if machine else sys.stdout
  sizes = " x ".join(f"{len(v)} {k}" for k, v in result.axes.items() if len(v) > 1) or "1 cell"
  fixed = ", ".join(f"{k} = {v[0]:g}" for k, v in result.axes.items() if len(v) == 1)
  print(
    f"jaxrdp sweep: {result.size:,} cell{'s' if result.size != 1 else ''} ({sizes}{'; ' + fixed if fixed else ''}) "
    f"in {elapsed:.2f} s",
    file=info,
  )
  if args.json:
    print(result.to_json(indent=None))
  elif args.csv:
    sys.stdout.write(result.to_csv())
  else:
    print(result.table())

  if not args.no_files:
    csv_path = os.path.join(args.out_dir, f"{SWEEP_BASENAME}.csv")
    result.to_csv(csv_path)
    print(f"wrote {csv_path} ({result.size:,} rows)", file=info)
  if plot_path is None and not args.no_files:
    plot_path = os.path.join(args.out_dir, f"{SWEEP_BASENAME}.png")
    explicit = False
  else:
    explicit = plot_path is not None
  if plot_path is not None:
    samp = "batch_size" if "batch_size" in result.axes else "q"
    if len(result.axes["sigma"]) < 2 or len(result.axes[samp]) < 2:
      msg = f"heatmap needs at least 2 values of --sigma and of --{samp.replace('_', '-')}"
      if explicit:
        parser.error(f"argument --plot: {msg}")
      print(f"note: no heatmap ({msg})", file=sys.stderr)
      return 0
    try:
      from .sweeps._plot import plot_sweep

      plot_sweep(result, plot_path)
    except ImportError as e:
      if explicit:
        parser.error(f"argument --plot: {e}")
      print(f"note: skipped {plot_path}: {e}", file=sys.stderr)
      return 0
    print(f"wrote {plot_path}", file=info)
  return 0


def _sweep_risk(args, parser) -> dict:
  """The sweep's attack-risk keywords from --tpr-at-fpr and --advantage."""
  if args.tpr_at_fpr is None and not args.advantage:
    return {}
  _risk_scheme(args, parser)
  return {"tpr_at_fpr": args.tpr_at_fpr, "advantage": args.advantage}


def _risk_scheme(args, parser) -> dict:
  """The scheme of the attack-risk functions (Poisson sampling under add/remove), or a
  usage error naming the option."""
  flag = "--sampling" if args.sampling != "poisson" else "--relation"
  if args.sampling != "poisson" or args.relation not in (None, "add_remove"):
    parser.error(
      f"argument {flag}: the attack risk is accounted for Poisson sampling under "
      f"add/remove only (--sampling poisson), got --sampling {args.sampling}"
      + (f" --relation {args.relation}" if args.relation else "")
    )
  return {"sampling": "poisson", "relation": "add_remove"}


def _cmd_risk(args, parser) -> int:
  import numpy as np

  sampling = _sampling_axes(args, parser)
  duration = _duration_axes(args, parser, sampling)
  scheme = _risk_scheme(args, parser)
  target = (
    ("tpr", args.target_tpr)
    if args.target_tpr is not None
    else ("advantage", args.target_advantage)
    if args.target_advantage is not None
    else None
  )
  if target is not None and args.sigma is not None:
    parser.error(
      f"argument --target-{target[0]}: solves for sigma; leave out --sigma (or the target)"
    )
  if target is None and args.sigma is None:
    parser.error(
      "argument --sigma: required (or leave it out and give --target-tpr or "
      "--target-advantage to solve for it)"
    )
  labels = _labels(args, scheme)
  if target is not None:
    return _risk_calibration(args, sampling, duration, target, labels)

  from .risk._api import dpsgd_advantage, dpsgd_tpr

  # The configurations (without the FPR axis), then the FPRs of each: one call each.
  base = _derived(_grid({**sampling, **duration, "sigma": args.sigma}))
  fpr = np.asarray(args.fpr, dtype=np.float64)
  q, sigma, steps = (base[k][:, None] for k in ("q", "sigma", "steps"))
  tpr = dpsgd_tpr(q, sigma, steps, fpr[None, :], accountant=args.accountant)
  adv = dpsgd_advantage(base["q"], base["sigma"], base["steps"], accountant=args.accountant)
  n, g = len(base["q"]), fpr.size
  cols = {k: np.repeat(v, g) for k, v in base.items()}
  cols["fpr"] = np.tile(fpr, n)
  cols["tpr"] = np.asarray(tpr.tpr).ravel()
  cols["tpr_lower"] = np.asarray(tpr.tpr_lower).ravel()
  cols["advantage"] = np.repeat(np.asarray(adv.advantage), g)
  cols["advantage_lower"] = np.repeat(np.asarray(adv.advantage_lower), g)
  directions = {"tpr": 1, "tpr_lower": -1, "advantage": 1, "advantage_lower": -1}
  _emit(cols, args, directions=directions, labels=labels)
  return 0


def _risk_calibration(args, sampling, duration, target, labels) -> int:
  """The least sigma whose certified risk meets each target (--target-tpr at each
  --fpr, or --target-advantage)."""
  import numpy as np

  from .risk._calibration import calibrate_noise_to_advantage, calibrate_noise_to_tpr

  kind, values = target
  extra = {"fpr": args.fpr} if kind == "tpr" else {}
  cols = _derived(_grid({**sampling, **duration, **extra, f"target_{kind}": values}))
  if kind == "tpr":
    res = calibrate_noise_to_tpr(
      cols["target_tpr"], cols["fpr"], cols["q"], cols["steps"], accountant=args.accountant
    )
  else:
    res = calibrate_noise_to_advantage(
      cols["target_advantage"], cols["q"], cols["steps"], accountant=args.accountant
    )
  feasible = np.asarray(res.feasible)
  machine = args.json or args.csv
  sigma, risk = np.asarray(res.sigma), np.asarray(res.risk)
  cols["sigma"] = sigma if machine else [x if f else "infeasible" for x, f in zip(sigma, feasible)]
  cols[kind] = risk if machine else [x if f else "infeasible" for x, f in zip(risk, feasible)]
  if machine:
    cols["feasible"] = feasible.astype(float)
  n_bad = int((~feasible).sum())
  note = None
  if n_bad:
    floor = "(a TPR at or below the FPR cannot be met)" if kind == "tpr" else ""
    note = (
      f"note: {n_bad} of {feasible.size} requests are infeasible: no noise multiplier "
      f"up to 1e6 meets the target {floor}".rstrip()
    )
  # sigma rounded up and the certified risk at it up: pasted back, they keep the target.
  _emit(cols, args, directions={"sigma": 1, kind: 1}, note=note, labels=labels)
  return 0


def _enable_compilation_cache() -> None:
  """Keeps compiled kernels on disk between runs (the SGM kernel takes seconds).

  jaxrdp's own programs are kept by the library itself (jaxrdp._core.stored_programs,
  in $JAXRDP_CACHE_DIR/programs, default ~/.cache/jaxrdp/programs on Linux); for the
  others this command turns on JAX's persistent cache in $JAXRDP_CACHE_DIR/xla, in the
  same private directory (a directory other users can write to is refused with a
  warning). JAXRDP_CACHE_DIR="" turns both off. A cache directory already configured
  for JAX (JAX_COMPILATION_CACHE_DIR) is left alone.
  """
  from ._core.stored_programs import cache_root, private_dir

  root = cache_root()
  if root is None:
    return
  import jax

  if jax.config.jax_compilation_cache_dir:
    return
  path = private_dir(root / "xla")
  if path is None:
    return
  jax.config.update("jax_compilation_cache_dir", str(path))
  # Cache every program: a run compiles several small ones besides the kernel.
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def main(argv: list[str] | None = None) -> int:
  """Run the command line on `argv` (default `sys.argv[1:]`); returns the exit status.

  Also turns on JAX's persistent compilation cache for this process (see
  `_enable_compilation_cache`), so that repeated commands skip recompiling.
  """
  parser = _build_parser()
  try:
    args = parser.parse_args(argv)
    _enable_compilation_cache()
    return args.handler(args, parser)
  except SystemExit as e:
    code = e.code
    if code is None:
      return 0
    if isinstance(code, int):
      return code
    print(code, file=sys.stderr)
    return 1
  except ValueError as e:
    # Validation inside the library (a range the options could not check alone).
    print(f"jaxrdp: error: {' '.join(str(e).split())}", file=sys.stderr)
    return 2
  except OSError as e:
    # An output file that cannot be written (missing directory, a directory in
    # the way, permissions, a full disk).
    where = f"{e.filename}: " if getattr(e, "filename", None) else ""
    print(f"jaxrdp: error: cannot write {where}{e.strerror or e}", file=sys.stderr)
    return 2


def run() -> None:
  """The ``jaxrdp`` command (and ``python -m jaxrdp``): `main`, then a prompt exit.

  Once the answer is printed and the output streams are flushed, the process
  ends with ``os._exit``: tearing down the interpreter (JAX's CPU client and
  its thread pools, the loaded executable, thousands of modules' objects) takes
  about 0.35 s on a 2-core machine, longer than a warm query computes. Nothing
  is lost by skipping it: every file the command writes is closed by then, and
  JAX writes its compilation cache when it compiles. `main` itself, for callers
  in a Python process, returns normally.
  """
  code = main()
  logging.shutdown()  # flushes any log handler (JAX_LOG_COMPILES and the like)
  try:
    sys.stdout.flush()
    sys.stderr.flush()
  except OSError:  # a closed pipe: let the interpreter exit as usual and report it
    raise SystemExit(code) from None
  os._exit(code)


if __name__ == "__main__":  # pragma: no cover
  run()
