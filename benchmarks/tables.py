"""The benchmark tables of the README and the documentation, generated from the results.

Every number these tables quote is read from ``benchmarks/results/*.json``, the files the
benchmark scripts write; nothing here runs a benchmark. A page holds a table between two
marker comments::

  <!-- BEGIN GENERATED comparison: python benchmarks/tables.py --write -->
  ...
  <!-- END GENERATED comparison -->

and ``python benchmarks/tables.py --write`` rewrites every marked region of
:data:`PAGES` from the results; without ``--write`` it checks them and exits 1 naming the
stale ones (``tests/test_benchmark_tables.py`` does the same). To refresh the numbers
themselves, rerun the scripts: ``python benchmarks/run_all.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import re
import statistics
import sys
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# The pages with generated regions, relative to the repository root.
PAGES = ("README.md", "docs/guide/performance.md")

BEGIN = re.compile(r"<!-- BEGIN GENERATED (?P<name>[\w-]+)[^>]*-->\n")
END = "<!-- END GENERATED {name} -->"


def load(name: str) -> dict:
  """The result file ``benchmarks/results/<name>``."""
  return json.loads((RESULTS / name).read_text())


# -- Number formats -------------------------------------------------------------------


def seconds(t: float) -> str:
  """A duration with two or three significant digits, in ms below 0.1 s."""
  if t < 0.01:
    return f"{t * 1e3:.1f} ms"
  if t < 0.1:
    return f"{t * 1e3:.0f} ms"
  if t < 1:
    return f"{t:.2f} s"
  if t < 10:
    return f"{t:.2f} s"
  if t < 100:
    return f"{t:.1f} s"
  return f"{t:.0f} s"


def sci(x: float, digits: int = 1) -> str:
  """``x`` in scientific notation without the exponent's leading zero: 6.6e-5."""
  mantissa, exponent = f"{x:.{digits}e}".split("e")
  return f"{mantissa}e{int(exponent)}"


def up(x: float, digits: int) -> str:
  """``x`` rounded up to ``digits`` decimals (an upper bound stays one)."""
  return f"{math.ceil(x * 10**digits - 1e-9) / 10**digits:.{digits}f}"


def down(x: float, digits: int) -> str:
  """``x`` rounded down to ``digits`` decimals (a lower bound stays one)."""
  return f"{math.floor(x * 10**digits + 1e-9) / 10**digits:.{digits}f}"


def short_commit(prov: dict) -> str:
  commit = prov.get("commit") or "unknown commit"
  head, _, dirty = commit.partition("+")
  return head[:7] + (f"+{dirty}" if dirty else "")


def versions_text(prov: dict) -> str:
  versions = prov.get("versions", {})
  return ", ".join(f"{k} {v}" for k, v in versions.items() if k != "python")


def source_line(script: str, result: str) -> str:
  """Where a row's numbers come from: the script, its result file and its provenance."""
  prov = load(result)["provenance"]
  return (
    f"`{script}` → `results/{result}`: {prov['date']}, commit `{short_commit(prov)}`, "
    f"{prov['machine']}; {versions_text(prov)}"
  )


# -- The tables ------------------------------------------------------------------------

COMPARISON = "compare_accountants.json"


def comparison_table() -> str:
  """Epsilon and time per configuration of jaxrdp and the other accountants."""
  res = load(COMPARISON)
  prov = res["provenance"]
  have_prv = res.get("prv_accountant_installed", False)
  lines = [
    "| configuration (q, sigma, steps, delta) | RDP: jaxrdp | RDP: dp_accounting "
    "| tight: jaxrdp [certified lower bound] | tight: dp_accounting PLD "
    "| tight: prv_accountant | time: jaxrdp RDP / PLD | time: dp_accounting RDP / PLD |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ]
  for r in res["rows"]:
    config = f"{r['name']} ({r['q']:.4g}, {r['sigma']:g}, {r['steps']:,}, {r['delta']:g})"
    prv = f"{r['prv_accountant']:.5f}" if have_prv else "not run"
    lines.append(
      f"| {config} | {r['jaxrdp_rdp']:.5f} | {r['dp_accounting_rdp']:.5f} "
      f"| {up(r['jaxrdp_pld'], 5)} [{down(r['jaxrdp_pld_lower'], 4)}] "
      f"| {r['dp_accounting_pld']:.5f} | {prv} "
      f"| {seconds(r['jaxrdp_rdp_s'])} / {seconds(r['jaxrdp_pld_s'])} "
      f"| {seconds(r['dp_accounting_rdp_s'])} / {seconds(r['dp_accounting_pld_s'])} |"
    )
  note = (
    f"Measured in one run by `benchmarks/compare_accountants.py` ({prov['date']}, commit "
    f"`{short_commit(prov)}`, {prov['machine']}; {versions_text(prov)}). jaxrdp's "
    "tight upper bounds are rounded up and its lower bounds down; its times are after the "
    "first call (the first calls, with compilation, are in "
    "`benchmarks/results/compare_accountants.json`)."
  )
  return "\n".join(lines) + "\n\n" + note + "\n"


def headline() -> str:
  """One sentence: the RDP grid against dp_accounting."""
  g = load("bench_grid_cpu.json")
  prov = g["provenance"]
  return (
    f"An RDP grid of {g['configurations']} configurations takes "
    f"{seconds(g['jaxrdp_median_s'])} after its first call, {g['speedup']:,.0f} times "
    f"faster than dp_accounting's {seconds(g['dp_accounting_s'])} in the same run "
    f"(`benchmarks/bench_grid.py`, {prov['date'][:10]}, {prov['machine']}).\n"
  )


def performance_table() -> str:
  """jaxrdp against its competitors, one row per job, with each row's source."""
  rows, sources = [], []

  def row(what, ours, theirs, ratio, script, result):
    rows.append(f"| {what} | {ours} | {theirs} | {ratio} | `{script}` |")
    line = source_line(script, result)
    if line not in sources:
      sources.append(line)

  g = load("bench_grid_cpu.json")
  row(
    f"RDP epsilon, {g['configurations']} configurations (20 q x 20 sigma, T = 10,000)",
    f"{seconds(g['jaxrdp_median_s'])} (first call {seconds(g['jaxrdp_first_call_s'])})",
    f"dp_accounting {seconds(g['dp_accounting_s'])}",
    f"{g['speedup']:.0f}x",
    "bench_grid.py",
    "bench_grid_cpu.json",
  )

  p = load("bench_pld.json")
  grid, ratio, cells = p["grid"], p["ratio"], p["cells"]
  row(
    "tight epsilon, same grid, at equal accuracy",
    f"{grid['per_config_ms']:.1f} ms per configuration (compile {grid['compile_s']:.0f} s, "
    f"peak {grid['peak_rss_mb'] / 1000:.1f} GB)",
    f"dp_accounting PLD {seconds(ratio['dp_accounting_equal_accuracy_s'])} per configuration",
    f"{ratio['ratio_equal_accuracy']:.0f}x ({ratio['ratio_vs_default']:.0f}x against its "
    f"default interval, up to {sci(max(x['dp_accounting']['0.0001']['rel_err'] for x in cells))}"
    f" relative off on {len(cells)} sampled configurations, jaxrdp up to "
    f"{sci(max(x['jaxrdp_rel_err'] for x in cells))})",
    "bench_pld.py",
    "bench_pld.json",
  )

  c = load("bench_pld_calibration_cpu.json")
  row(
    f"{c['jaxrdp']['cells']} tight noise calibrations, same grid of q, in one call",
    f"{seconds(c['jaxrdp']['median_s'])} (first call {seconds(c['jaxrdp']['first_call_s'])})",
    f"dp_accounting PLD, one at a time: {seconds(c['dp_accounting']['median_s'])} each",
    f"{c['ratio']:.0f}x",
    "bench_pld_calibration.py",
    "bench_pld_calibration_cpu.json",
  )

  d = load("bench_pld_grad.json")
  row(
    "derivative of the tight epsilon in sigma (MNIST), `jax.grad` called eagerly, "
    f"within {sci(d['relative_error'])} of a central difference",
    f"{seconds(d['grad_s'])} (first call {seconds(d['first_grad_s'])}; under `jax.jit` "
    f"{seconds(d['jit_grad_s'])}, compile {seconds(d['jit_grad_compile_s'])})",
    f"the tight epsilon itself {seconds(d['forward_s'])}",
    f"{d['grad_in_forward_calls']:.1f} forward calls",
    "bench_pld_grad.py",
    "bench_pld_grad.json",
  )

  r = load("bench_risk.json")
  coarse, default, ratio = r["grid_atol_1e-4"], r["grid"], r["ratio"]
  row(
    f"certified TPR at FPR 1% (attack risk), same {default['cells']} configurations, at "
    f"`atol=1e-4` (at most {sci(coarse['max_above_default'])} above the default answer)",
    f"{seconds(coarse['run_s'])} ({coarse['per_config_ms']:.1f} ms per configuration; "
    f"default `atol=1e-6`: {seconds(default['run_s'])}; compile "
    f"{default['compile_s']:.0f} s)",
    f"riskcal {r['riskcal']}, one at a time: {seconds(ratio['riskcal_mean_s_per_cell'])} "
    f"each, within {sci(ratio['riskcal_minus_jaxrdp_upper_max_abs'])} of jaxrdp's default",
    f"{ratio['ratio_coarse']['0.0001']:.0f}x ({ratio['ratio']:.0f}x at the default)",
    "bench_risk.py",
    "bench_risk.json",
  )

  a = load("bench_allocation.json")
  cells, grid, ratio = a["pld_accounting_cells"], a["grid"], a["ratio"]
  sigmas = sorted({x["sigma"] for x in a["grid_cells"]})
  ts = sorted({x["t"] for x in a["grid_cells"]})
  theirs = [x["pld_accounting_s"] for x in cells]
  row(
    f"tight epsilon of random allocation, {grid['cells']} configurations ({len(sigmas)} "
    f"sigma in [{sigmas[0]:g}, {sigmas[-1]:g}] x {len(ts)} t in [{ts[0]}, {ts[-1]}], "
    f"{a['epochs']} epochs, delta {sci(a['delta'], 0)}), bracket median "
    f"{sci(grid['median_bracket'])} wide",
    f"{seconds(grid['per_config_s'])} per configuration (first call "
    f"{seconds(grid['first_call_one_cell_s'])})",
    f"pld-accounting {a['pld_accounting']} at its default accuracy (bracket median "
    f"{sci(statistics.median(x['pld_accounting_bracket'] for x in cells))} wide): "
    f"{seconds(min(theirs))} to {seconds(max(theirs))} per configuration, timed on one per "
    f"t up to {max(x['t'] for x in cells)}",
    f"at least {ratio['ratio']:.0f}x (power-law estimate {ratio['ratio_fit']:.0f}x)",
    "bench_allocation.py",
    "bench_allocation.json",
  )

  cmp_rows = load(COMPARISON)["rows"]
  ours = [x["jaxrdp_pld_s"] for x in cmp_rows]
  theirs = [x["dp_accounting_pld_s"] for x in cmp_rows]
  ratios = [x["dp_accounting_pld_s"] / x["jaxrdp_pld_s"] for x in cmp_rows]
  row(
    f"one tight epsilon, the {len(cmp_rows)} configurations of the comparison",
    f"{seconds(min(ours))} to {seconds(max(ours))}",
    f"dp_accounting PLD {seconds(min(theirs))} to {seconds(max(theirs))}",
    f"{min(ratios):.1f}x to {max(ratios):.1f}x",
    "compare_accountants.py",
    COMPARISON,
  )

  f = load("first_query_cpu.json")["questions"]
  for how, prefix in (("a fresh `jaxrdp epsilon` process", "cli"), ("Python", "api")):
    rdp, pld = f[f"{prefix}-rdp"], f[f"{prefix}-pld"]
    row(
      f"one epsilon (MNIST) from {how}, import included: Renyi DP / tight",
      f"{seconds(rdp['jaxrdp_warm_s'])} / {seconds(pld['jaxrdp_warm_s'])} with a warm "
      f"cache (first call ever {seconds(rdp['jaxrdp_cold_s'])} / "
      f"{seconds(pld['jaxrdp_cold_s'])})",
      f"dp_accounting script {seconds(rdp['dp_accounting_s'])} / {seconds(pld['dp_accounting_s'])}",
      f"{1 / rdp['ratio_warm_over_dp_accounting']:.2f}x / "
      f"{1 / pld['ratio_warm_over_dp_accounting']:.2f}x",
      "first_query.py",
      "first_query_cpu.json",
    )

  table = [
    "| what | jaxrdp | competitor, same run | ratio | script |",
    "| --- | ---: | ---: | ---: | --- |",
    *rows,
  ]
  return (
    "\n".join(table)
    + "\n\nWhere each row's numbers come from (date, commit, machine, versions):\n\n"
    + "\n".join(f"* {s}" for s in sources)
    + "\n"
  )


REGIONS: dict[str, Callable[[], str]] = {
  "comparison": comparison_table,
  "headline": headline,
  "performance": performance_table,
}


# -- Regions of a page -----------------------------------------------------------------


def render(text: str, where: str = "page") -> str:
  """``text`` with every generated region rewritten from the results."""
  out, pos = [], 0
  for m in BEGIN.finditer(text):
    if m.start() < pos:
      continue
    name = m["name"]
    if name not in REGIONS:
      raise ValueError(f"{where}: unknown generated region {name!r} (known: {sorted(REGIONS)})")
    end = text.find(END.format(name=name), m.end())
    if end < 0:
      raise ValueError(f"{where}: the region {name!r} has no {END.format(name=name)!r}")
    out += [text[pos : m.end()], "\n", REGIONS[name](), "\n"]
    pos = end
  out.append(text[pos:])
  return "".join(out)


def regions(text: str) -> list[str]:
  """The names of the generated regions of ``text``, in order."""
  return [m["name"] for m in BEGIN.finditer(text)]


def stale_pages(root: pathlib.Path = ROOT) -> list[str]:
  """The pages of :data:`PAGES` whose generated regions differ from the results."""
  stale = []
  for page in PAGES:
    text = (root / page).read_text()
    if render(text, page) != text:
      stale.append(page)
  return stale


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--write", action="store_true", help="rewrite the generated regions")
  args = ap.parse_args(argv)
  if args.write:
    for page in PAGES:
      path = ROOT / page
      text = path.read_text()
      new = render(text, page)
      if new != text:
        path.write_text(new)
        print(f"rewrote {page}")
    return 0
  stale = stale_pages()
  for page in stale:
    print(f"{page}: stale tables (python benchmarks/tables.py --write)")
  return 1 if stale else 0


if __name__ == "__main__":
  sys.exit(main())
