"""Dataclasses as pytree nodes whose structure includes their type.

jaxrdp's events and states are frozen dataclasses registered as pytrees. They are
not registered with ``jax.tree_util.register_dataclass``: with jaxlib 0.10, the
treedefs it makes for two different classes with the same fields compare equal
(only their hashes differ), for example ``Laplace(b)`` and
``RandomizedResponse(p)``. ``jax.jit`` keeps its compiled programs in a hash
table that compares keys with ``==``, so it can run the program traced for one
class on an instance of the other whenever the two hashes share a bucket: an
accountant then returns one mechanism's RDP curve for another. Measured on 300
one-field classes registered that way, one jitted function gave 46 wrong
results; the test suite once returned a Laplace curve for a randomized-response
event. Nodes registered with ``jax.tree_util.register_pytree_with_keys`` compare
their registrations, so treedefs of different classes never compare equal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax

__all__ = ["register_dataclass_pytree"]


def register_dataclass_pytree(
  cls: type, data_fields: Sequence[str], meta_fields: Sequence[str] = ()
) -> type:
  """Registers the dataclass ``cls`` as a pytree node and returns it.

  ``data_fields`` are children (leaves or nested pytrees), ``meta_fields``
  static metadata (hashable); together they must be every field of ``cls``.
  Key paths name the data fields (``GetAttrKey``), as for
  ``jax.tree_util.register_dataclass``. Unflattening calls ``cls(**fields)``.
  """
  data, meta = tuple(data_fields), tuple(meta_fields)
  names = {f.name for f in dataclasses.fields(cls)}
  if set(data) | set(meta) != names or set(data) & set(meta):
    raise ValueError(
      f"{cls.__name__}: data_fields {data} and meta_fields {meta} must split its fields "
      f"{tuple(sorted(names))}"
    )
  keys = tuple(jax.tree_util.GetAttrKey(name) for name in data)

  def flatten(x):
    return tuple(getattr(x, name) for name in data), tuple(getattr(x, name) for name in meta)

  def flatten_with_keys(x):
    children, aux = flatten(x)
    return tuple(zip(keys, children)), aux

  def unflatten(aux, children):
    return cls(**dict(zip(data, children)), **dict(zip(meta, aux)))

  jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
  return cls
