"""The README's test command installs everything the suite, examples and notebooks use.

Reads the extras that command names from pyproject.toml and checks each requirement
is installed, so an extra the command stops installing (a renamed extra, a package
that no longer resolves, README and .ci/run drifting apart) fails here rather than
as an ImportError deep inside another test.
"""

import importlib.metadata
import os
import re

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_EXTRAS = ("test", "examples", "notebooks")  # `pip install -e ".[test,examples,notebooks]"`


def _pyproject():
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)


def test_readme_test_command_names_these_extras():
  with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
  assert '.[{}]"'.format(",".join(README_EXTRAS)) in readme
  with open(os.path.join(ROOT, ".ci", "run")) as f:
    assert '.[{}]"'.format(",".join(README_EXTRAS)) in f.read()


@pytest.mark.parametrize("extra", README_EXTRAS)
def test_every_requirement_of_the_extra_is_installed(extra):
  project = _pyproject()["project"]
  requirements = project["dependencies"] + project["optional-dependencies"][extra]
  missing = []
  for req in requirements:
    name = re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0]
    try:
      importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
      missing.append(name)
  assert not missing, missing


def test_xdist_workers_are_configured():
  # addopts passes -n; without pytest-xdist pytest would refuse to start, so
  # this is mostly a guard that the option and the extra stay together.
  addopts = _pyproject()["tool"]["pytest"]["ini_options"]["addopts"]
  assert "-n" in addopts.split()
  test_extra = _pyproject()["project"]["optional-dependencies"]["test"]
  names = [re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0] for req in test_extra]
  assert "pytest-xdist" in names


def test_installed_jax_is_in_the_declared_range():
  # jaxrdp._core.stored_programs reads private names of JAX: the suite runs with a JAX
  # (and jaxlib) in the range pyproject.toml declares, which is the range it tests.
  requirements = pytest.importorskip("packaging.requirements")
  declared = {}
  for req in _pyproject()["project"]["dependencies"]:
    parsed = requirements.Requirement(req)
    declared[parsed.name] = parsed.specifier
  for name in ("jax", "jaxlib"):
    assert str(declared[name]), f"{name} has no declared version range"
    version = importlib.metadata.version(name)
    assert declared[name].contains(version), (name, version, str(declared[name]))
