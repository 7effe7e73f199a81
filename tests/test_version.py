"""__version__ comes from the installed package's metadata, written once in pyproject.toml."""

import importlib
import importlib.metadata
import os

import pytest

import jaxrdp
from jaxrdp import _version


def test_version_is_the_metadata_version():
  assert jaxrdp.__version__ == importlib.metadata.version("jaxrdp")


def test_metadata_version_is_pyproject_version():
  tomllib = pytest.importorskip("tomllib")
  path = os.path.join(os.path.dirname(__file__), os.pardir, "pyproject.toml")
  with open(path, "rb") as f:
    assert tomllib.load(f)["project"]["version"] == importlib.metadata.version("jaxrdp")


def test_fallback_when_not_installed(monkeypatch):
  def missing(name):
    raise importlib.metadata.PackageNotFoundError(name)

  monkeypatch.setattr(importlib.metadata, "version", missing)
  try:
    assert importlib.reload(_version).__version__ == "0+unknown"
  finally:
    monkeypatch.undo()
    importlib.reload(_version)
  assert _version.__version__ == importlib.metadata.version("jaxrdp")
