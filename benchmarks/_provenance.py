"""What a benchmark result was measured on: a digest of the code it ran.

Every script whose results the README quotes stamps its JSON with
:func:`stamp`: the jaxrdp modules the run imported (read from ``sys.modules`` at
the end of the run) and a digest of their code. The digest is of each module's
syntax tree with its docstrings removed, so comments, docstrings and formatting do
not count; any change to what the code computes does. ``tests/test_benchmark_
freshness.py`` recomputes the digest from the working tree and fails when a
quoted result was measured on other code: rerun that script.
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import pathlib
import platform
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _strip_docstrings(tree: ast.AST) -> ast.AST:
  for node in ast.walk(tree):
    body = getattr(node, "body", None)
    if (
      isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
      and body
      and isinstance(body[0], ast.Expr)
      and isinstance(getattr(body[0], "value", None), ast.Constant)
      and isinstance(body[0].value.value, str)
    ):
      node.body = body[1:] or [ast.Pass()]
  return tree


def code_digest(modules: list[str]) -> str:
  """sha256 of the docstring-free syntax trees of ``modules`` (dotted names, in order)."""
  h = hashlib.sha256()
  for name in sorted(modules):
    rel = pathlib.Path(*name.split("."))
    path = ROOT / rel / "__init__.py" if (ROOT / rel).is_dir() else ROOT / rel.with_suffix(".py")
    h.update(name.encode())
    if path.exists():
      tree = _strip_docstrings(ast.parse(path.read_text()))
      h.update(ast.dump(tree, annotate_fields=False).encode())
    else:
      h.update(b"<missing>")
  return h.hexdigest()


def measured_modules(script: str | None = None) -> list[str]:
  """The jaxrdp modules imported so far (and the benchmark script itself, if named)."""
  names = sorted(m for m in sys.modules if m == "jaxrdp" or m.startswith("jaxrdp."))
  if script is not None:
    names.append("benchmarks." + pathlib.Path(script).stem)
  return names


def package_modules(script: str | None = None) -> list[str]:
  """Every module of the jaxrdp package (for a script that measures jaxrdp in
  subprocesses, whose imports this process does not see), and the script."""
  pkg = ROOT / "jaxrdp"
  names = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for p in pkg.rglob("*.py")
  )
  if script is not None:
    names.append("benchmarks." + pathlib.Path(script).stem)
  return names


def stamp(result: dict, script: str, modules: list[str] | None = None) -> dict:
  """``result`` with the provenance of the run: modules (by default those this process
  imported), their digest, date and machine."""
  modules = measured_modules(script) if modules is None else modules
  result = dict(result)
  result["provenance"] = {
    "modules": modules,
    "code_digest": code_digest(modules),
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, python {platform.python_version()}",
  }
  return result
