"""Misuse that pyright must flag (tests/test_typing.py): an event field that does not exist."""

from jaxrdp.events import Gaussian

Gaussian(sigma=1.0, bogus=3)
