"""The public surface, pinned: the names each public module exports and the signatures of
its functions and classes (tests/data/public_surface.json). A change to the API changes
that file on purpose, in the same commit."""

from __future__ import annotations

import importlib
import inspect
import json
import pathlib

import pytest

SURFACE = json.loads((pathlib.Path(__file__).parent / "data" / "public_surface.json").read_text())


@pytest.mark.parametrize("module", sorted(SURFACE))
def test_names_and_signatures(module):
  mod = importlib.import_module(module)
  assert sorted(mod.__all__) == SURFACE[module]["names"]
  for name, want in SURFACE[module]["signatures"].items():
    assert str(inspect.signature(getattr(mod, name))) == want, name
  # Everything listed exists.
  assert all(hasattr(mod, n) for n in mod.__all__)


def test_no_public_name_refers_to_a_source_document():
  for module, entry in SURFACE.items():
    for name in entry["names"]:
      assert "seed" not in name.lower() and "issue" not in name.lower(), (module, name)
