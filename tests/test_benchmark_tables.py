"""The benchmark tables of the README and the docs are the committed results, regenerated.

``benchmarks/tables.py`` writes the tables between marker comments from
``benchmarks/results/*.json``; here they are regenerated and compared with the pages, so
a number edited by hand, or a result rerun without ``--write``, fails. Nothing is
benchmarked: this reads JSON. ``benchmarks/run_all.py`` is checked in its listing modes.
"""

from __future__ import annotations

import copy
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_all  # noqa: E402
import tables  # noqa: E402


@pytest.mark.parametrize("page", tables.PAGES)
def test_page_tables_match_the_results(page):
  text = (ROOT / page).read_text()
  assert tables.regions(text), f"{page} has no generated region"
  assert tables.render(text, page) == text, (
    f"{page}: its tables differ from benchmarks/results: run python benchmarks/tables.py --write"
  )


def test_readme_shows_the_generated_comparison():
  assert "comparison" in tables.regions((ROOT / "README.md").read_text())


def test_tables_are_read_from_the_results(monkeypatch):
  # A check that can fail: change one stored epsilon and the table changes with it.
  real = tables.load

  def changed(name):
    result = copy.deepcopy(real(name))
    if name == tables.COMPARISON:
      result["rows"][0]["dp_accounting_pld"] = 9.87654
    return result

  before = tables.comparison_table()
  monkeypatch.setattr(tables, "load", changed)
  after = tables.comparison_table()
  assert "9.87654" in after and "9.87654" not in before


def test_an_unclosed_region_is_refused():
  text = "<!-- BEGIN GENERATED headline: python benchmarks/tables.py --write -->\nold\n"
  with pytest.raises(ValueError, match="END GENERATED headline"):
    tables.render(text)
  with pytest.raises(ValueError, match="unknown generated region"):
    tables.render("<!-- BEGIN GENERATED nothing -->\n<!-- END GENERATED nothing -->\n")


@pytest.mark.parametrize("script", run_all.SCRIPTS, ids=lambda s: s.name)
def test_each_result_records_its_provenance(script):
  prov = tables.load(script.result)["provenance"]
  for key in ("commit", "date", "machine", "versions", "modules"):
    assert prov.get(key), f"{script.result} records no {key}"
  assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", prov["commit"]), prov["commit"]
  assert "jax" in prov["versions"]


def _quoted_scripts(page):
  names = re.findall(r"`(?:benchmarks/)?(\w+\.py)", (ROOT / page).read_text())
  return {n for n in names if (ROOT / "benchmarks" / n).is_file()}


@pytest.mark.parametrize("page", tables.PAGES)
def test_run_all_reruns_every_quoted_script(page):
  rerun = {s.name for s in run_all.SCRIPTS} | {"run_all.py", "tables.py"}
  missing = sorted(_quoted_scripts(page) - rerun)
  assert not missing, f"{page} quotes {missing}, which benchmarks/run_all.py does not rerun"
  for script in run_all.SCRIPTS:
    assert (ROOT / "benchmarks" / script.name).is_file(), script.name


def test_run_all_dry_run_lists_the_commands(capsys):
  assert run_all.main(["--dry-run"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == len(run_all.SCRIPTS) + 1
  for line, script in zip(lines, run_all.SCRIPTS):
    assert line.startswith(f"python benchmarks/{script.name}")
  assert lines[-1] == "python benchmarks/tables.py --write"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_run_all_stale_is_a_listing(capsys):
  inside = subprocess.run(
    ["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True, check=False
  )
  if inside.returncode:
    pytest.skip("not a git checkout")
  assert run_all.main(["--stale"]) == 0
  lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith(" ")]
  assert [ln.split(" ")[0] for ln in lines] == [s.result for s in run_all.SCRIPTS]
