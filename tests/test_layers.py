"""The package's layers run one way: no subpackage imports one above it, anywhere; and no
two modules of jaxrdp import each other, directly or through others.

The contracts are in pyproject.toml ([tool.importlinter]); import-linter reads every
import statement, at module level and inside functions, so an import hidden in a
function to dodge a cycle breaks them too. The module graph is also searched here for
any cycle at all (a package and its own modules included, which the siblings contract
does not compare).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_layers_contract_is_kept():
  exe = shutil.which("lint-imports") or os.path.join(
    os.path.dirname(sys.executable), "lint-imports"
  )
  if not os.path.exists(exe):
    pytest.fail("import-linter is not installed (it is in the test extra)")
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
  assert out.returncode == 0, out.stdout + out.stderr
  assert "0 broken" in out.stdout, out.stdout


def test_a_broken_layer_is_detected(tmp_path):
  # The check can fail: a copy of the contract with the layers reversed must break.
  tomllib = pytest.importorskip("tomllib")  # Python 3.11+

  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    config = tomllib.load(f)["tool"]["importlinter"]
  layers = config["contracts"][0]["layers"][::-1]
  body = "\n".join(f"    {layer}" for layer in layers)
  ini = tmp_path / "reversed.ini"
  ini.write_text(
    f"[importlinter]\nroot_package = jaxrdp\n\n[importlinter:contract:layers]\n"
    f"name = reversed\ntype = layers\nlayers =\n{body}\n"
  )
  exe = shutil.which("lint-imports") or os.path.join(
    os.path.dirname(sys.executable), "lint-imports"
  )
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run(
    [exe, "--config", str(ini)], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env
  )
  assert out.returncode != 0, out.stdout


def _cycles(graph):
  """The strongly connected components of more than one module of ``graph`` (sorted)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []
  counter = [0]

  def visit(root):
    # Tarjan's algorithm, iterative: (module, iterator over what it imports).
    work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
    index[root] = low[root] = counter[0]
    counter[0] += 1
    stack.append(root)
    on_stack.add(root)
    while work:
      module, todo = work[-1]
      child = next(todo, None)
      if child is not None:
        if child not in index:
          index[child] = low[child] = counter[0]
          counter[0] += 1
          stack.append(child)
          on_stack.add(child)
          work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
        elif child in on_stack:
          low[module] = min(low[module], index[child])
        continue
      work.pop()
      if work:
        parent = work[-1][0]
        low[parent] = min(low[parent], low[module])
      if low[module] == index[module]:
        component = []
        while True:
          m = stack.pop()
          on_stack.discard(m)
          component.append(m)
          if m == module:
            break
        if len(component) > 1:
          found.append(sorted(component))

  for module in sorted(graph.modules):
    if module not in index:
      visit(module)
  return sorted(found)


def _graph():
  grimp = pytest.importorskip("grimp")  # import-linter's graph builder (the test extra)
  sys.path.insert(0, ROOT)
  try:
    # Every import statement, inside functions too (grimp reads the source).
    return grimp.build_graph("jaxrdp", cache_dir=None)
  finally:
    sys.path.remove(ROOT)


def test_no_module_of_jaxrdp_is_in_an_import_cycle():
  graph = _graph()
  assert "jaxrdp.rdp._rules" in graph.modules  # the graph of this tree
  assert _cycles(graph) == []


def test_an_import_cycle_is_detected():
  # The check can fail: one import added against an existing one makes a cycle of two.
  graph = _graph()
  graph.add_import(importer="jaxrdp.rdp._event_curves", imported="jaxrdp.rdp._sampling")
  assert ["jaxrdp.rdp._event_curves", "jaxrdp.rdp._sampling"] in _cycles(graph)
  # A package importing one of its own modules back (which the siblings contract of
  # pyproject.toml does not compare) is found too.
  graph.add_import(importer="jaxrdp.pld._grid", imported="jaxrdp.pld")
  assert any("jaxrdp.pld" in c and "jaxrdp.pld._grid" in c for c in _cycles(graph))


_RULES_SCRIPT = """
import json, sys
from jaxrdp.rdp import _accountant
from jaxrdp.pld import _event_accountant
from jaxrdp.rdp import _event_curves
from jaxrdp.pld import _generic
print(json.dumps([sorted(t.__name__ for t in _event_curves._RULES),
                  sorted(t.__name__ for t in _event_curves._REFUSED),
                  sorted(t.__name__ for t in _generic._RULES)]))
"""


def test_each_accountant_loads_all_its_rules_from_its_rules_module():
  # In a fresh interpreter, importing an accountant registers every rule: the rules come
  # from the one module each accountant imports (jaxrdp/rdp/_rules.py, jaxrdp/pld/_rules.py).
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run(
    [sys.executable, "-c", _RULES_SCRIPT], capture_output=True, text=True, timeout=300, env=env
  )
  assert out.returncode == 0, out.stderr
  rdp_rules, rdp_refused, pld_rules = json.loads(out.stdout.strip().splitlines()[-1])
  for name in ("Gaussian", "PoissonSampled", "ZCDp", "RepeatAndSelect", "FixedSizeSampled"):
    assert name in rdp_rules, name
  assert "ShuffledEpochs" in rdp_rules and "RandomAllocation" in rdp_rules
  assert rdp_refused == ["TruncatedSubsampledGaussian"]
  assert pld_rules == ["FixedSizeSampled", "RandomAllocation"]
