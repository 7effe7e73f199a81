"""A minimal progress reporter: tqdm when it is installed, else a stderr counter."""

from __future__ import annotations

import sys


class _Counter:
  """Fallback progress bar: rewrites one stderr line per update."""

  def __init__(self, total: int, desc: str):
    self.total = total
    self.desc = desc
    self.n = 0
    self._write()

  def _write(self) -> None:
    sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total} chunks")
    sys.stderr.flush()

  def update(self, n: int = 1) -> None:
    self.n += n
    self._write()

  def close(self) -> None:
    sys.stderr.write("\n")
    sys.stderr.flush()


class _Silent:
  def update(self, n: int = 1) -> None:
    pass

  def close(self) -> None:
    pass


def progress_bar(total: int, desc: str, enabled: bool):
  """An object with update(n) and close(): tqdm, a stderr counter, or nothing."""
  if not enabled:
    return _Silent()
  try:
    from tqdm import tqdm
  except ImportError:
    return _Counter(total, desc)
  return tqdm(total=total, desc=desc, unit="chunk", file=sys.stderr, leave=False)
