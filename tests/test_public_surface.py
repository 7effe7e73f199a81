"""The public surface, pinned: the names each public module exports and the signatures of
its functions and classes (tests/data/public_surface.json). A change to the API changes
that file on purpose, in the same commit."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pathlib
import subprocess
import sys

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


_LAZY_SCRIPT = """
import importlib, json, sys
import jaxrdp
loaded = [m for m in HEAVY if m in sys.modules]
from jaxrdp.train import dpsgd_init  # a from-import resolves through the package
step = jaxrdp.train.make_dpsgd_step
missing = [
  (module, name)
  for module, names in SURFACE.items()
  for name in names
  if not hasattr(importlib.import_module(module), name)
]
print(json.dumps({
  "loaded_by_import": loaded,
  "missing": missing,
  "in_dir": sorted({"dpsgd_epsilon", "train", "sweep"} & set(dir(jaxrdp))),
  "same": jaxrdp.dpsgd_epsilon is importlib.import_module("jaxrdp.accountants._dpsgd").dpsgd_epsilon,
}))
"""


def test_import_is_lazy_and_every_public_name_resolves():
  # In a fresh process: `import jaxrdp` loads none of the heavy modules (not even
  # JAX), and every public name of every public module still resolves, from the
  # module that defines it.
  heavy = ["jax", "jaxrdp.rdp._dpsgd", "jaxrdp.pld", "jaxrdp.train._step", "optax", "matplotlib"]
  surface = {module: entry["names"] for module, entry in SURFACE.items()}
  script = f"HEAVY = {heavy!r}\nSURFACE = {surface!r}\n" + _LAZY_SCRIPT
  root = str(pathlib.Path(__file__).resolve().parents[1])
  env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
  proc = subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  assert got == {
    "loaded_by_import": [],
    "missing": [],
    "in_dir": ["dpsgd_epsilon", "sweep", "train"],
    "same": True,
  }


def test_an_unknown_name_is_an_attribute_error():
  import jaxrdp

  with pytest.raises(AttributeError, match="no_such_name"):
    jaxrdp.no_such_name  # noqa: B018
  assert not hasattr(jaxrdp.train, "no_such_name")


_LAZY_PACKAGES = [
  "jaxrdp",
  "jaxrdp.accountants",
  "jaxrdp.calibration",
  "jaxrdp.events",
  "jaxrdp.mechanisms",
  "jaxrdp.rdp",
  "jaxrdp.risk",
  "jaxrdp.sweeps",
  "jaxrdp.train",
]


@pytest.mark.parametrize("package", _LAZY_PACKAGES)
def test_one_export_table_per_package(package):
  # __all__ is derived from the table of lazy names, and the static-analysis block
  # (``if TYPE_CHECKING:``, what pyright and IDEs read) imports exactly those names
  # from the same modules, so the three cannot drift apart.
  import ast

  mod = importlib.import_module(package)
  subs = tuple(getattr(mod, "_SUBMODULES", ()))
  assert sorted(mod.__all__) == sorted([*mod._NAMES, *subs])
  tree = ast.parse(pathlib.Path(mod.__file__).read_text())
  blocks = [
    n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
  ]
  assert len(blocks) == 1, package
  static = {}
  for node in blocks[0].body:
    assert isinstance(node, ast.ImportFrom), ast.unparse(node)
    for alias in node.names:
      assert alias.asname == alias.name, ast.unparse(node)
      static[alias.name] = "." * node.level + (node.module or "")
  want = {name: where for name, where in mod._NAMES.items()}
  want.update({name: "." for name in subs})
  assert static == want


def test_the_package_is_typed():
  import jaxrdp

  assert (pathlib.Path(jaxrdp.__file__).parent / "py.typed").exists()
