"""Types that tools can check: pyright reads the public API as the library declares it.

``tests/typing/usage.py`` is typed use of the API that pyright must accept, with the
result type of ``dpsgd_epsilon`` revealed and asserted per accountant and scheme (its
overloads); ``tests/typing/bad_event.py`` passes an event a field it does not have,
which pyright must flag (``event_type`` is a ``dataclass_transform``). The pyright tests
are skipped, saying why, where pyright cannot run (it needs Node.js). The last test
checks at run time that each overload's declared type is what comes back.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import jaxrdp
from jaxrdp.accountants import DeltaBracket, EpsilonBracket
from jaxrdp.events import Gaussian
from jaxrdp.pld import PldDelta, PldEpsilon
from jaxrdp.rdp import DeltaResult, EpsilonResult

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TYPING = os.path.join(ROOT, "tests", "typing")


def _pyright_command():
  exe = shutil.which("pyright") or os.path.join(os.path.dirname(sys.executable), "pyright")
  if os.path.exists(exe):
    return [exe]
  try:
    import pyright  # noqa: F401
  except ImportError:
    return None
  return [sys.executable, "-m", "pyright"]


@pytest.fixture(scope="module")
def pyright(tmp_path_factory):
  """Runs pyright on files, with this tree's jaxrdp first on its import path."""
  cmd = _pyright_command()
  if cmd is None:
    pytest.skip("pyright is not installed (pip install pyright; it is in the test extra)")
  env = dict(os.environ, PYRIGHT_PYTHON_IGNORE_WARNINGS="1")
  try:
    version = subprocess.run(
      [*cmd, "--version"], capture_output=True, text=True, timeout=300, env=env
    )
  except (OSError, subprocess.TimeoutExpired) as err:
    pytest.skip(f"pyright cannot run here: {err}")
  if version.returncode != 0:
    pytest.skip(f"pyright cannot run here (it needs Node.js): {version.stderr[-500:]}")
  config = tmp_path_factory.mktemp("pyright") / "pyrightconfig.json"
  config.write_text(
    json.dumps(
      {
        "extraPaths": [ROOT],
        "pythonVersion": f"{sys.version_info.major}.{sys.version_info.minor}",
        "typeCheckingMode": "standard",
      }
    )
  )

  def run(*files):
    out = subprocess.run(
      [*cmd, "-p", str(config), "--pythonpath", sys.executable, "--outputjson", *files],
      capture_output=True,
      text=True,
      timeout=300,
      env=env,
      cwd=ROOT,
    )
    try:
      return json.loads(out.stdout)["generalDiagnostics"]
    except (ValueError, KeyError):
      pytest.fail(f"pyright gave no report: {out.stdout[-2000:]} {out.stderr[-2000:]}")

  return run


def test_typed_usage_passes_pyright_with_the_declared_result_types(pyright):
  found = pyright(os.path.join(TYPING, "usage.py"))
  errors = [d for d in found if d["severity"] == "error"]
  assert errors == [], errors
  revealed = [d["message"] for d in found if d["severity"] == "information"]
  assert revealed == ['Type of "res" is "EpsilonResult"'], revealed


def test_pyright_flags_a_field_an_event_does_not_have(pyright):
  found = pyright(os.path.join(TYPING, "bad_event.py"))
  errors = [d for d in found if d["severity"] == "error"]
  assert len(errors) == 1, found
  assert 'No parameter named "bogus"' in errors[0]["message"]
  assert errors[0]["range"]["start"]["line"] == 4  # Gaussian(sigma=1.0, bogus=3), 0-based


def test_each_overload_declares_what_comes_back():
  # The overloads of dpsgd_epsilon and dpsgd_delta, at run time.
  q, sigma, steps = 0.1, 2.0, 20
  for sampling in ("poisson", "fixed", "allocation"):
    assert type(jaxrdp.dpsgd_epsilon(q, sigma, steps, 1e-5, sampling=sampling)) is EpsilonResult
    assert type(jaxrdp.dpsgd_delta(q, sigma, steps, 1.0, sampling=sampling)) is DeltaResult
  assert type(jaxrdp.dpsgd_epsilon(q, sigma, steps, 1e-5, sampling="shuffle")) is EpsilonBracket
  assert type(jaxrdp.dpsgd_delta(q, sigma, steps, 1.0, sampling="shuffle")) is DeltaBracket
  for sampling in ("poisson", "shuffle"):
    tight = jaxrdp.dpsgd_epsilon(q, sigma, steps, 1e-5, accountant="pld", sampling=sampling)
    assert type(tight) is PldEpsilon
    assert np.all(np.asarray(tight.epsilon_lower) <= np.asarray(tight.epsilon))
    assert type(jaxrdp.dpsgd_delta(q, sigma, steps, 1.0, accountant="pld")) is PldDelta


def test_an_event_refuses_a_field_it_does_not_have_at_run_time_too():
  with pytest.raises(TypeError, match="bogus"):
    Gaussian(sigma=1.0, bogus=3)  # type: ignore[call-arg]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="typing.dataclass_transform is 3.11+")
def test_event_decorators_are_dataclass_transforms():
  # What type checkers read: frozen dataclasses, compared by identity (eq=False).
  from jaxrdp.events import _events, _mechanism_events, _sampling_events

  for decorator in (
    _events.event_type,
    _mechanism_events._meta_event,
    _sampling_events._event_with_relation,
  ):
    spec = decorator.__dataclass_transform__
    assert spec["eq_default"] is False and spec["kwargs"] == {"frozen_default": True}
