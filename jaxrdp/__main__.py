"""`python -m jaxrdp`: the jaxrdp command line (see `jaxrdp.cli`)."""

from jaxrdp.cli import run

run()
