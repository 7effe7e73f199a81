"""The package version, read from the installed distribution's metadata.

pyproject.toml is the one place the version is written; an installed jaxrdp
(wheel or editable) carries it in its metadata. A source tree imported without
being installed has no metadata: it reports a local version that says so.
"""

from __future__ import annotations

import importlib.metadata

__all__ = ["__version__"]

try:
  __version__ = importlib.metadata.version("jaxrdp")
except importlib.metadata.PackageNotFoundError:
  __version__ = "0+unknown"
