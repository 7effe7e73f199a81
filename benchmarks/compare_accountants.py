"""Epsilon and time of jaxrdp against dp_accounting (and prv_accountant) on published configurations.

For each DP-SGD configuration (Poisson sampling rate q, noise multiplier sigma,
steps T, delta) the script computes epsilon with

* jaxrdp's Renyi-DP accountant (``dpsgd_epsilon``) and its tight, certified PLD
  accountant (``accountant="pld"``, with its certified lower bound);
* dp_accounting's ``RdpAccountant`` (its default orders) and
  ``PLDAccountant`` (its default ``value_discretization_interval`` 1e-4);
* prv_accountant's ``Accountant`` (``eps_error=0.01``, its upper estimate), if it
  is installed.

It checks correctness first: jaxrdp's RDP epsilon is never above dp_accounting's
(its orders are a superset and its fractional orders exact), the tight epsilon lies
in its certified interval, and every tight estimate of the peers lies above 1e-3
relative of that interval's lower end and within their stated accuracy of its upper end
(dp_accounting's PLD at its default interval: 1e-3 relative; prv_accountant's upper
estimate: eps_error 0.01 above an estimate within 0.01). Then it
times each accountant per configuration in the same process: jaxrdp after a first
(compiling) call, whose time is reported separately.

Run: python benchmarks/compare_accountants.py [--out benchmarks/results/compare_accountants.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time

from _dp_accounting import pld_epsilon as dp_accounting_pld
from _provenance import stamp

import jaxrdp

# (name, q, sigma, steps, delta): public configurations.
CONFIGS = [
  ("MNIST, batch 256, 60 epochs", 256 / 60000, 1.1, 14063, 1e-5),
  ("Opacus test (q 0.04, 2250 steps)", 0.04, 1.5, 2250, 1e-5),
  ("N 60000, batch 150, 15 epochs", 150 / 60000, 1.3, 6000, 1e-5),
  ("N 100000, batch 100, 30 epochs, delta 1e-7", 100 / 100000, 1.0, 30000, 1e-7),
]


def _time(fn, repeats):
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    out = fn()
    times.append(time.perf_counter() - t)
  return out, statistics.median(times)


def dp_accounting_rdp(q, sigma, steps, delta):
  from dp_accounting import dp_event, rdp

  acc = rdp.RdpAccountant()
  acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
  return acc.get_epsilon(delta)


def prv(q, sigma, steps, delta):
  from prv_accountant import Accountant

  acc = Accountant(
    noise_multiplier=sigma,
    sampling_probability=q,
    delta=delta,
    eps_error=0.01,
    max_compositions=steps,
  )
  _, _, upper = acc.compute_epsilon(num_compositions=steps)
  return upper


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--out", default=os.path.join(os.path.dirname(__file__), "results", "compare_accountants.json")
  )
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  try:
    import prv_accountant  # noqa: F401

    have_prv = True
  except ImportError:
    have_prv = False

  rows = []
  for name, q, sigma, steps, delta in CONFIGS:
    row = {"name": name, "q": q, "sigma": sigma, "steps": steps, "delta": delta}
    t = time.perf_counter()
    float(jaxrdp.dpsgd_epsilon(q, sigma, steps, delta).epsilon)
    row["jaxrdp_rdp_first_call_s"] = time.perf_counter() - t
    res, row["jaxrdp_rdp_s"] = _time(
      lambda: jaxrdp.dpsgd_epsilon(q, sigma, steps, delta), args.repeats
    )
    row["jaxrdp_rdp"] = float(res.epsilon)
    t = time.perf_counter()
    jaxrdp.dpsgd_epsilon(q, sigma, steps, delta, accountant="pld")
    row["jaxrdp_pld_first_call_s"] = time.perf_counter() - t
    res, row["jaxrdp_pld_s"] = _time(
      lambda: jaxrdp.dpsgd_epsilon(q, sigma, steps, delta, accountant="pld"), args.repeats
    )
    row["jaxrdp_pld"], row["jaxrdp_pld_lower"] = float(res.epsilon), float(res.epsilon_lower)
    row["dp_accounting_rdp"], row["dp_accounting_rdp_s"] = _time(
      lambda: dp_accounting_rdp(q, sigma, steps, delta), args.repeats
    )
    row["dp_accounting_pld"], row["dp_accounting_pld_s"] = _time(
      lambda: dp_accounting_pld(q, sigma, steps, delta), 1
    )
    if have_prv:
      row["prv_accountant"], row["prv_accountant_s"] = _time(lambda: prv(q, sigma, steps, delta), 1)

    # Correctness before any timing is reported.
    assert row["jaxrdp_rdp"] <= row["dp_accounting_rdp"] * (1 + 1e-12), row
    assert row["jaxrdp_pld_lower"] <= row["jaxrdp_pld"] <= row["jaxrdp_rdp"], row
    # dp_accounting's PLD at its default interval is within 1e-3 relative; prv_accountant's
    # upper estimate is its estimate plus eps_error (0.01), the estimate within 0.01.
    for peer, slack in (("dp_accounting_pld", 1e-3 * row["jaxrdp_pld"]), ("prv_accountant", 0.02)):
      if peer in row:
        assert row["jaxrdp_pld_lower"] * (1 - 1e-3) <= row[peer], (peer, row)
        assert row[peer] <= row["jaxrdp_pld"] + slack, (peer, row)
    rows.append(row)
    print(
      f"{name}: RDP {row['jaxrdp_rdp']:.5f} (dp_accounting {row['dp_accounting_rdp']:.5f}), "
      f"tight {row['jaxrdp_pld']:.5f} in [{row['jaxrdp_pld_lower']:.5f}, .] "
      f"(dp_accounting PLD {row['dp_accounting_pld']:.5f}"
      + (f", prv_accountant {row['prv_accountant']:.5f}" if have_prv else "")
      + ")"
    )
    print(
      f"  time: jaxrdp RDP {row['jaxrdp_rdp_s'] * 1e3:.1f} ms vs dp_accounting "
      f"{row['dp_accounting_rdp_s'] * 1e3:.1f} ms ({row['dp_accounting_rdp_s'] / row['jaxrdp_rdp_s']:.0f}x); "
      f"jaxrdp PLD {row['jaxrdp_pld_s']:.2f} s vs dp_accounting PLD "
      f"{row['dp_accounting_pld_s']:.2f} s ({row['dp_accounting_pld_s'] / row['jaxrdp_pld_s']:.1f}x)"
    )

  out = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.processor() or 'cpu'}",
    "jaxrdp": jaxrdp.__version__,
    "prv_accountant_installed": have_prv,
    "rows": rows,
  }
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(stamp(out, __file__), f, indent=1)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
