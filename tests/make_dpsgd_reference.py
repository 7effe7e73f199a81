"""Exhaustive references for tests/test_dpsgd.py: log A and epsilon at every order.

The order search (jaxrdp.rdp._order_search) evaluates few orders exactly and must
return the exact minimum of epsilon over the grid of orders. Its oracle is the
exhaustive computation: log A (``sgm_log_a``) or the per-step RDP (``sgm_rdp``) at
every order of the grid, then the minimum over them (``rdp_to_epsilon``). That takes
a separate compilation per grid and shape (about a minute of the test file at the
suite's XLA level), so it is stored here:

* ``grid``: the minimum over the default orders on every live cell (q > 0, sigma > 0,
  steps > 0) of the test's broadcast grid ``GRID_Q x GRID_SIGMA x GRID_STEPS x
  GRID_DELTA``.
* ``dense``: the minimum over each dense grid of orders (``DENSE``) at its two
  configurations.
* ``floors``: log A at every point of the search's table for the default orders
  (``_order_search._point_sets``) at ``FLOORS`` with sigma raised by the factor
  ``1 + FLOORS["rise"]``, and the minimum of epsilon over the default orders at
  ``FLOORS`` itself.

The configurations are defined here and imported by the test, which checks that the
stored ones are the same. Floats are written with ``repr`` (exact round trip).

Run from the repository root (about a minute; writes tests/data/dpsgd_reference.json):

    python tests/make_dpsgd_reference.py
"""

import json
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxrdp  # noqa: E402
from jaxrdp.rdp import _order_search  # noqa: E402

PATH = Path(__file__).parent / "data" / "dpsgd_reference.json"

# The test's broadcast grid (searched once by the test for several checks): q = 0,
# sigma = 0 and 0 steps are its edges, the rest is live. The live part holds the
# corners the order search must get right: q from 1e-4 to 0.2, sigma from 0.5 to 4,
# one step to 10^4 steps, delta from 1e-3 to 1e-7.
GRID_Q = [0.0, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.2]
GRID_SIGMA = [0.0, 0.5, 0.6, 0.9, 1.0, 1.5, 3.0, 4.0]
GRID_STEPS = [0, 1, 10, 100, 1000, 10000]
GRID_DELTA = [1e-3, 1e-5, 1e-7]

# Dense grids of orders, each at two configurations (q, sigma), 1000 steps, delta 1e-5.
DENSE = {
  "orders0": dict(start=1.05, stop=40.0, num=256),
  "orders1": dict(start=1.5, stop=20.0, num=4000),
}
DENSE_Q = [0.05, 0.001]
DENSE_SIGMA = [0.8, 0.98]
DENSE_STEPS = 1000
DENSE_DELTA = 1e-5

# The floors test: a 4 x 4 grid of (q, sigma) at 10^4 steps and delta 1e-5.
FLOORS = dict(
  q=list(np.geomspace(1e-3, 0.1, 4)),
  sigma=list(np.linspace(0.7, 3.0, 4)),
  steps=1e4,
  delta=1e-5,
  rise=1e-4,
)


def dense_orders(name):
  return np.linspace(**DENSE[name])


def floor_points(orders):
  """The sorted points of the search's table (after orders 0 and 1)."""
  coarse, others = _order_search._point_sets(np.asarray(orders, dtype=np.float64))
  return np.sort(np.concatenate([coarse, others]))


def _exhaustive(rdp, orders, delta):
  res = jaxrdp.rdp_to_epsilon(rdp, orders, delta)
  return np.asarray(res.epsilon), np.asarray(res.order)


def _grid():
  orders = jaxrdp.DEFAULT_ORDERS
  q, s = np.array(GRID_Q[1:]), np.array(GRID_SIGMA[1:])
  rdp = np.asarray(jaxrdp.mechanisms.sgm_rdp(q[:, None, None], s[None, :, None], orders))
  eps = np.empty((q.size, s.size, len(GRID_STEPS) - 1, len(GRID_DELTA)))
  order = np.empty_like(eps)
  for i, t in enumerate(GRID_STEPS[1:]):
    for j, d in enumerate(GRID_DELTA):
      eps[:, :, i, j], order[:, :, i, j] = _exhaustive(t * rdp, orders, d)
  return dict(epsilon=eps.tolist(), order=order.tolist())


def _dense(name):
  orders = dense_orders(name)
  q, s = np.array(DENSE_Q), np.array(DENSE_SIGMA)
  rdp = np.asarray(jaxrdp.mechanisms.sgm_rdp(q[:, None], s[:, None], orders)) * DENSE_STEPS
  eps, order = _exhaustive(rdp, orders, DENSE_DELTA)
  return dict(epsilon=eps.tolist(), order=order.tolist())


def _floors():
  orders = jaxrdp.DEFAULT_ORDERS
  q = np.array(FLOORS["q"])[:, None, None]
  s = np.array(FLOORS["sigma"])[None, :, None]
  points = floor_points(orders)
  above = np.asarray(jaxrdp.mechanisms.sgm_log_a(q, s * (1 + FLOORS["rise"]), points))
  here = np.asarray(jaxrdp.mechanisms.sgm_log_a(q, s, points))
  in_grid = np.isin(points, orders)
  rdp = FLOORS["steps"] * here[..., in_grid] / (points[in_grid] - 1)
  eps, order = _exhaustive(rdp, points[in_grid], FLOORS["delta"])
  return dict(
    points=points.tolist(), log_a_above=above.tolist(), epsilon=eps.tolist(), order=order.tolist()
  )


def config():
  """Everything the stored values depend on besides the library: compared by the test."""
  return dict(
    grid=dict(q=GRID_Q, sigma=GRID_SIGMA, steps=GRID_STEPS, delta=GRID_DELTA),
    default_orders=jaxrdp.DEFAULT_ORDERS.tolist(),
    dense=dict(grids=DENSE, q=DENSE_Q, sigma=DENSE_SIGMA, steps=DENSE_STEPS, delta=DENSE_DELTA),
    floors={k: (v if np.isscalar(v) else [float(x) for x in v]) for k, v in FLOORS.items()},
  )


def main():
  out = dict(
    source="jaxrdp " + jaxrdp.__version__ + " (sgm_rdp / sgm_log_a at every order)",
    config=config(),
    grid=_grid(),
    dense={name: _dense(name) for name in DENSE},
    floors=_floors(),
  )
  PATH.write_text(json.dumps(out, indent=1) + "\n")
  print(f"wrote {PATH}")


if __name__ == "__main__":
  main()
