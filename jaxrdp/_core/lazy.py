"""A package's public names, imported on first use (PEP 562).

``import jaxrdp`` and the ``jaxrdp`` command import only what they use: a
one-number query does not pay for the training step, the tight accountant, the
sweeps or the plots (about 0.1 s of a fresh process on a 2-core machine).
``jaxrdp.train.make_dpsgd_step``, ``from jaxrdp.train import dpsgd_init`` and
``dir(jaxrdp)`` work as before: the defining module is imported the first time
a name is asked for, and the name is then an ordinary attribute of the package.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["exports"]


def exports(package: str, names: dict[str, str], submodules: tuple[str, ...] = ()):
  """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``).

  Args:
    package: the package's name.
    names: each public name -> the module defining it, relative to the package
      (``"._sgm"``).
    submodules: subpackages or modules reachable as attributes of the package.
  """

  def __getattr__(name: str):
    if name in names:
      value = getattr(importlib.import_module(names[name], package), name)
    elif name in submodules:
      value = importlib.import_module("." + name, package)
    else:
      raise AttributeError(f"module {package!r} has no attribute {name!r}")
    setattr(sys.modules[package], name, value)  # later look-ups find it directly
    return value

  def __dir__():
    return sorted(set(vars(sys.modules[package])) | set(names) | set(submodules))

  return __getattr__, __dir__
