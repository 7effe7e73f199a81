"""The slow marks stay true: the fast loop's recorded cost fits its budget.

``conftest.py`` marks a test slow when ``tests/durations.json`` (a full run of the suite
and a run of the fast loop, each written by ``--write-durations``) records more than
``SLOW_SECONDS`` for it, and fails a run in which a test not marked slow takes more than
``UNMARKED_LIMIT``. This file checks the file itself.
"""

from __future__ import annotations

import conftest

# The recorded test time of the tests not marked slow, in seconds: two workers at 90 s.
# Where the fast table has a test, its time in a run of the fast loop itself counts.
FAST_BUDGET = 2 * 90.0


def test_the_fast_loop_fits_its_budget():
  recorded = conftest.recorded_durations()
  fast = sum(s for s in recorded.values() if s <= conftest.SLOW_SECONDS)
  assert fast <= FAST_BUDGET, (
    f"the tests not marked slow take {fast:.0f} s in durations.json, over the fast "
    f"loop's {FAST_BUDGET:.0f} s: lower SLOW_SECONDS or speed the tests up"
  )


def test_the_durations_are_a_full_run():
  recorded = conftest.recorded_tables()["full"]
  # A full run records every test file, slow or not (a file missing would mean a
  # partial run wrote it, and its tests would count as fast).
  files = {
    conftest.DURATIONS_FILE.parent / k.split("::")[0].removeprefix("tests/") for k in recorded
  }
  test_files = set(conftest.DURATIONS_FILE.parent.glob("test_*.py"))
  assert test_files <= files, sorted(str(p.name) for p in test_files - files)
  assert all(s >= 0 for s in recorded.values())
