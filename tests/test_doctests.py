"""The docstring examples of the library, run as doctests.

They run with JAX's defaults, as a user runs them: x64 off (conftest.py turns it on
for the rest of the suite; jax.enable_x64 scopes the change to this thread), so an
example that needs float64 from its caller fails here.
"""

import doctest
import importlib
import io
import pkgutil

import jax
import pytest

import jaxrdp


def _modules_with_examples():
  names = []
  for info in pkgutil.walk_packages(jaxrdp.__path__, prefix="jaxrdp."):
    spec = importlib.util.find_spec(info.name)
    with open(spec.origin, encoding="utf-8") as f:
      if ">>>" in f.read():
        names.append(info.name)
  return sorted(names)


MODULES = _modules_with_examples()


def test_examples_are_found():
  # A sanity floor, so that a broken discovery does not pass by finding nothing.
  assert {
    "jaxrdp.accountants._dpsgd",
    "jaxrdp.mechanisms._sgm",
    "jaxrdp.calibration._calibration",
  } <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
  module = importlib.import_module(name)
  finder = doctest.DocTestFinder(exclude_empty=True)
  runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
  report = io.StringIO()
  with jax.enable_x64(False):
    assert not jax.config.jax_enable_x64
    for test in finder.find(module, name):
      runner.run(test, out=report.write)
  result = runner.summarize(verbose=False)
  assert result.attempted > 0
  assert result.failed == 0, report.getvalue()
