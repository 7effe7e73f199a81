"""The user guide's table of which accountant accounts which event is the code's answer.

It is generated from every registered accountant's ``unsupported`` on a representative
instance of every event type (``jaxrdp.accountants._support_table``); here it is
regenerated and compared with the committed page, and every event type of
``jaxrdp.events`` must have an instance in it.
"""

import pathlib

import jaxrdp.events as E
from jaxrdp.accountants import _support_table, get_accountant

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "guide" / "event_support.md"


def test_the_page_is_the_generated_table():
  assert PAGE.read_text() == _support_table.support_page(), (
    "docs/guide/event_support.md is stale: run "
    "python -m jaxrdp.accountants._support_table docs/guide/event_support.md"
  )


def test_every_event_type_has_an_example():
  types = {
    getattr(E, n)
    for n in E.__all__
    if isinstance(getattr(E, n), type) and issubclass(getattr(E, n), E.Event)
  }
  types.discard(E.Event)
  covered = {type(ev) for _, ev in _support_table.EXAMPLES}
  assert types <= covered, sorted(t.__name__ for t in types - covered)


def test_the_table_says_what_the_accountants_do():
  # A check that can fail: the table's answers are what accounting the example does.
  for label, answers in _support_table.support_rows():
    event = dict(_support_table.EXAMPLES)[label]
    for name, why in answers.items():
      assert get_accountant(name).supports(event) == (why is None), (label, name)
