"""Sharding a sweep's cells over devices: one SPMD program per chunk, any mesh.

Every chunk of cells goes through one jitted ``jax.shard_map`` program over a 1-D
device mesh; the per-device stage functions compute the RDP curves of the (q, sigma)
pairs and convert the cells to epsilon. See the notes below for why every mesh of
several devices gives the same bits.
"""

from __future__ import annotations

import functools
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..mechanisms._sgm import _rdp_f64
from ..rdp._conversions import epsilon_from_rdp_f64

# Sharding. Every chunk of cells goes through one jitted SPMD program over a 1-D device
# mesh (axis "cells"): `jax.shard_map` gives each device its slice of the chunk and runs
# the per-device function on it, and the jit's replicated output sharding all-gathers
# the slices, so every process of a multi-process run reads the whole chunk from its
# own devices. The same program runs on one device, several forced CPU devices, several
# GPUs, or the devices of several `jax.distributed` processes; it is compiled once per
# (mesh, chunk shape). Every device gets the same number of cells per chunk whatever
# the number of devices (`_Mesh.chunk_len`), so every mesh of two or more devices, in
# one process or several, runs the same per-device program on the same cells and the
# results agree bit for bit.
# A one-device mesh is the exception: JAX lowers shard_map over it without a manual
# computation, and XLA:CPU's pipeline for the partitioned module simplifies the kernel
# differently, so a few cells round differently (measured: 2 of 4,096 per-step RDP
# values, by 1.9e-15 relative). The thread-per-device dispatcher this replaced ran the
# single-device executable on every device and was exact; so was a partitioned module
# against another. Inside a device, cells go through ``lax.map`` in small batches, which
# bounds the kernel's working memory.
_AXIS = "cells"
_PAIR_BATCH = 8  # (q, sigma) pairs per batch: each costs a full RDP curve
_CELL_BATCH = 32  # cells per batch in the conversion stage


# The per-device functions of the two stages. A stage function takes its replicated
# arguments first, then its per-cell arguments (each with the cell axis leading), then
# static keyword arguments, and returns per-cell outputs. Another accountant plugs in
# by swapping the stage-2 function; the sharding around it does not change.
def _rdp_local(orders, q, sigma, *, orders_static):
  # Static orders let the kernel use the exact series for integer orders.
  return lax.map(
    lambda qs: _rdp_f64(qs[0], qs[1], orders, orders_static), (q, sigma), batch_size=_PAIR_BATCH
  )


def _scheme_rdp_local(orders, q, sigma, *, orders_static, scheme):
  # Another batching scheme or relation (a jaxrdp.rdp._sampling.DpsgdScheme, read from
  # the run's event): per step, or per epoch.
  return lax.map(
    lambda qs: scheme.per_step_rdp_f64(qs[0], qs[1], orders, orders_static),
    (q, sigma),
    batch_size=_PAIR_BATCH,
  )


def _eps_local(rdp1, orders, pair, steps, delta):
  def one(cell):
    p, t, d = cell
    # T-fold composition scales the per-step curve by T (Mironov 2017, Prop. 1);
    # zero steps spend nothing, as in dpsgd_epsilon.
    total = jnp.where(t == 0, 0.0, t * rdp1[p])
    res = epsilon_from_rdp_f64(total, orders, d, "improved")
    return res.epsilon, res.order

  return lax.map(one, (pair, steps, delta), batch_size=_CELL_BATCH)


@functools.lru_cache(maxsize=32)
def _program(local_fn, mesh: Mesh, n_replicated: int, n_cell_args: int):
  """jit(shard_map(local_fn)) over `mesh`: cell arguments split, outputs gathered.

  Static keyword arguments of `local_fn` go in as `static=((name, value), ...)`
  (hashable), so one jitted function serves every call of a stage on a mesh.
  """
  in_specs = (PartitionSpec(),) * n_replicated + (PartitionSpec(_AXIS),) * n_cell_args

  def program(*args, static=()):
    body = functools.partial(local_fn, **dict(static))
    # check_vma=False: the body has no collectives (each device works alone on its
    # cells), and the kernels' lax.cond/while_loop mix replicated and per-cell values,
    # which the varying-axes type check would otherwise ask to annotate.
    return jax.shard_map(
      body, mesh=mesh, in_specs=in_specs, out_specs=PartitionSpec(_AXIS), check_vma=False
    )(*args)

  return jax.jit(
    program, static_argnames="static", out_shardings=NamedSharding(mesh, PartitionSpec())
  )


def _check_devices(devices) -> tuple:
  """The devices of the cell mesh, from the `devices` argument of `sweep`."""
  if devices is None:
    return tuple(jax.devices())
  if isinstance(devices, Mesh):
    devices = devices.devices.ravel().tolist()
  elif isinstance(devices, jax.Device):
    devices = [devices]
  try:
    devices = tuple(devices)
  except TypeError:
    raise TypeError(
      f"devices must be a sequence of jax.Device or a jax.sharding.Mesh, got "
      f"{type(devices).__name__}"
    ) from None
  if not devices:
    raise ValueError("devices must not be empty (default: jax.devices())")
  bad = [d for d in devices if not isinstance(d, jax.Device)]
  if bad:
    raise TypeError(f"devices must hold jax.Device objects, got {bad[0]!r}")
  if len(set(devices)) != len(devices):
    raise ValueError("devices lists a device more than once")
  platforms = sorted({d.platform for d in devices})
  if len(platforms) > 1:
    raise ValueError(f"devices mixes platforms ({', '.join(platforms)}); give devices of one kind")
  here = jax.process_index()
  if not any(d.process_index == here for d in devices):
    raise ValueError(
      f"devices holds no device of this process (process {here}): every process that "
      f"calls sweep must own at least one of them (default: jax.devices(), all of them)"
    )
  return devices


class _Mesh:
  """The 1-D cell mesh of a sweep: chunk lengths, placement of host arrays, process check."""

  def __init__(self, devices: tuple):
    self.n = len(devices)
    self.mesh = Mesh(np.asarray(devices, dtype=object), (_AXIS,))
    self.cells = NamedSharding(self.mesh, PartitionSpec(_AXIS))
    self.replicated = NamedSharding(self.mesh, PartitionSpec())
    # Several processes take part when the mesh holds devices of another process.
    self.multiprocess = any(d.process_index != jax.process_index() for d in devices)

  def chunk_len(self, total: int, chunk_size: int, batch: int) -> int:
    """Cells per chunk: devices x a per-device length that ignores the device count."""
    # Power-of-two buckets (at least 32) limit recompilation across grid sizes (the
    # SGM kernel takes seconds to compile); whole batches per device.
    length = min(chunk_size, max(32, 1 << max(total - 1, 1).bit_length()))
    return self.n * (-(-length // batch) * batch)

  def _place(self, x: np.ndarray, sharding) -> jax.Array:
    # Every process holds the same host array (computed from the same arguments) and
    # hands each of its devices the slice it owns: no transfer between processes.
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

  def replicate(self, x: np.ndarray) -> jax.Array:
    return self._place(x, self.replicated)

  def shard(self, x: np.ndarray) -> jax.Array:
    return self._place(x, self.cells)

  def check_same_everywhere(self, fingerprint: np.ndarray) -> None:
    """Raises unless every process of the mesh passed the same `fingerprint` (int64)."""
    if not self.multiprocess:
      return
    rows = np.broadcast_to(fingerprint, (self.n, fingerprint.size))
    gathered = np.asarray(
      _program(_identity, self.mesh, 0, 1)(self.shard(rows)).addressable_data(0)
    )
    if not np.all(gathered == gathered[:1]):
      raise ValueError(
        "sweep was called with different arguments on different processes: every "
        "process must call it with the same axes, orders, chunk_size and devices"
      )


def _identity(x):
  return x


def _to_host(out) -> list[np.ndarray]:
  """Host copies of a program's outputs (replicated: read this process's first device)."""
  return [np.asarray(leaf.addressable_data(0)) for leaf in jax.tree_util.tree_leaves(out)]


def _map_chunks(run, n: int, length: int, inputs, outputs, bar) -> None:
  """Runs `run` over [0, n) in chunks of `length`, writing into the `outputs` arrays.

  `inputs(lo, hi)` builds a chunk's (padded) per-cell host arguments and `run` dispatches
  the program on them. Dispatch is asynchronous: chunk c + 1 is prepared and dispatched
  before chunk c is copied back, so the host work overlaps the devices'.
  """
  pending = None

  def collect(lo, hi, out):
    for dst, src in zip(outputs, _to_host(out)):
      dst[lo:hi] = src[: hi - lo]
    bar.update(1)

  for lo in range(0, n, length):
    hi = min(lo + length, n)
    out = run(*inputs(lo, hi))
    if pending is not None:
      collect(*pending)
    pending = (lo, hi, out)
  if pending is not None:
    collect(*pending)


def _padded(x: np.ndarray, length: int, fill) -> np.ndarray:
  if x.shape[0] == length:
    return x
  pad = np.full((length - x.shape[0],) + x.shape[1:], fill, dtype=x.dtype)
  return np.concatenate([x, pad])


@functools.lru_cache(maxsize=8)
def _cell_mesh(devices: tuple) -> _Mesh:
  return _Mesh(devices)


def _fingerprint(*parts) -> np.ndarray:
  """A digest of the arguments that shape a sweep, as 4 int64 (for the process check)."""
  h = hashlib.sha256()
  for part in parts:
    for x in part.values() if isinstance(part, dict) else [part]:
      x = np.ascontiguousarray(x)
      h.update(str((x.dtype, x.shape)).encode())
      h.update(x.tobytes())
  return np.frombuffer(h.digest(), dtype=np.int64).copy()
