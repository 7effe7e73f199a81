"""Sweeps: values per cell, labels, exports, chunking, progress and sharding."""

import csv
import io
import json
import sys
import textwrap

import jax
import numpy as np
import pytest
from helpers import run_fresh_python

import jaxrdp
from jaxrdp.sweeps import _sharding

# Integer orders: the sweep's programs and the reference searches compile without the
# quadrature. The default orders, fractional ones included, have their own test below.
ORDERS = np.array([2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0])


@pytest.fixture(scope="module")
def q_sweep():
  return jaxrdp.sweep(
    q=[0.001, 0.01, 0.1], sigma=[0.8, 1.5], steps=[10, 1000], delta=[1e-5, 1e-3], orders=ORDERS
  )


@pytest.fixture(scope="module")
def data_sweep():
  return jaxrdp.sweep(
    dataset_size=60000,
    batch_size=[128, 256],
    sigma=[1.1, 2.0],
    epochs=[1, 60],
    delta=1e-5,
    orders=ORDERS,
  )


def test_dataset_helpers():
  assert float(jaxrdp.train.sampling_rate(256, 60000)) == 256 / 60000
  assert int(jaxrdp.train.epochs_to_steps(60, 60000, 256)) == 14063  # ceil(14062.5)
  assert int(jaxrdp.train.epochs_to_steps(1, 60000, 250)) == 240  # exact: no extra step
  assert int(jaxrdp.train.epochs_to_steps(0.3, 60000, 100)) == 180
  steps = jax.jit(jaxrdp.train.epochs_to_steps)(np.array([1.0, 2.5]), 1000, 3)
  np.testing.assert_array_equal(np.asarray(steps), [334, 834])
  q = jax.vmap(lambda b: jaxrdp.train.sampling_rate(b, 1000))(np.array([10.0, 20.0]))
  np.testing.assert_array_equal(np.asarray(q), [0.01, 0.02])
  steps = jax.vmap(lambda e: jaxrdp.train.epochs_to_steps(e, 1000, 3))(np.array([1.0, 2.5]))
  np.testing.assert_array_equal(np.asarray(steps), [334, 834])
  with pytest.raises(ValueError, match="batch_size"):
    jaxrdp.train.sampling_rate(0, 100)
  with pytest.raises(ValueError, match="batch_size"):
    jaxrdp.train.sampling_rate(200, 100)
  with pytest.raises(ValueError, match="epochs"):
    jaxrdp.train.epochs_to_steps(-1, 100, 10)


def test_epochs_to_steps_is_exact_for_any_size():
  # FINDINGS 10: the float64 ceiling with its 1e-12 slack dropped a step beyond about
  # 1e12 examples. Concrete arguments are now counted in exact arithmetic, against
  # Python's integers and Fractions here (epochs as the decimal they print as).
  from fractions import Fraction

  f = jaxrdp.train.epochs_to_steps
  assert int(f(1, 2_000_000_000_001, 1_000_000)) == 2_000_001
  cases = [
    (1, 2_000_000_000_001, 1_000_000),
    (7, 10**15 + 3, 999_983),
    (3, 2**61, 3),  # E * N beyond int64
    (0.1, 2560, 256),  # 0.1 as 1/10: one step, not two
    (2.5, 10**13 + 1, 4),
    (0.7, 3 * 10**12 + 7, 1),
  ]
  for e, n, b in cases:
    exact = Fraction(repr(e)) * n / b
    want = -(-exact.numerator // exact.denominator)
    assert int(f(e, n, b)) == float(want), (e, n, b)
  # A grid: the same counts elementwise (ceil(E N / 7)).
  grid = np.asarray(f(np.array([[1.0], [2.5]]), np.array([10**12 + 1, 999]), 7))
  np.testing.assert_array_equal(grid, [[142857142858, 143], [357142857144, 357]])


def test_q_sweep_matches_dpsgd_epsilon(q_sweep):
  res = q_sweep
  assert res.dims == ("q", "sigma", "steps", "delta")
  assert res.shape == (3, 2, 2, 2)
  q, s, t, d = np.meshgrid(*res.axes.values(), indexing="ij")
  ref = jaxrdp.dpsgd_epsilon(q, s, t, d, orders=ORDERS)
  np.testing.assert_allclose(res.epsilon, np.asarray(ref.epsilon), rtol=1e-12)
  np.testing.assert_array_equal(res.order, np.asarray(ref.order))
  # More steps, larger q or smaller sigma never lower epsilon.
  assert np.all(np.diff(res.epsilon, axis=0) >= 0)
  assert np.all(np.diff(res.epsilon, axis=1) <= 0)
  assert np.all(np.diff(res.epsilon, axis=2) >= 0)


def test_dataset_sweep_matches_dpsgd_epsilon(data_sweep):
  res = data_sweep
  assert res.dims == ("dataset_size", "batch_size", "sigma", "epochs", "delta")
  steps = np.broadcast_to(res.steps, res.shape)
  assert steps[0, 1, 0, 1, 0] == 14063 and steps[0, 0, 0, 0, 0] == 469
  q = np.broadcast_to(res.q, res.shape)
  assert q[0, 1, 0, 0, 0] == 256 / 60000
  sigma = np.broadcast_to(res.axes["sigma"][None, None, :, None, None], res.shape)
  ref = jaxrdp.dpsgd_epsilon(q, sigma, steps, 1e-5, orders=ORDERS)
  np.testing.assert_allclose(res.epsilon, np.asarray(ref.epsilon), rtol=1e-12)


def test_select_and_columns(data_sweep):
  sub = data_sweep.select(batch_size=256, epochs=60)
  assert sub.shape == (1, 1, 2, 1, 1)
  np.testing.assert_array_equal(sub.epsilon.ravel(), data_sweep.epsilon[0, 1, :, 1, 0])
  cols = sub.columns()
  assert list(cols) == [
    "dataset_size",
    "batch_size",
    "sigma",
    "epochs",
    "delta",
    "q",
    "steps",
    "epsilon",
    "order",
  ]
  assert cols["steps"].tolist() == [14063, 14063]
  with pytest.raises(ValueError, match="batch_size"):
    data_sweep.select(batch_size=100)
  with pytest.raises(ValueError, match="not an axis"):
    data_sweep.select(q=0.1)


def test_csv_round_trip(q_sweep, tmp_path):
  path = tmp_path / "s.csv"
  text = q_sweep.to_csv(str(path))
  assert path.read_text() == text
  rows = list(csv.DictReader(io.StringIO(text)))
  assert len(rows) == q_sweep.size
  cols = q_sweep.columns()
  for i in (0, 7, q_sweep.size - 1):
    for name in ("q", "sigma", "steps", "delta", "epsilon", "order"):
      assert float(rows[i][name]) == cols[name][i]  # repr floats read back exactly


def test_json_round_trip(data_sweep, tmp_path):
  path = tmp_path / "s.json"
  data_sweep.to_json(str(path))
  back = json.loads(path.read_text())
  assert back["dims"] == list(data_sweep.dims)
  assert back["axes"]["batch_size"] == [128.0, 256.0]
  np.testing.assert_array_equal(np.array(back["epsilon"]), data_sweep.epsilon)
  assert np.array(back["steps"]).shape == data_sweep.shape
  assert data_sweep.to_dict()["order"] == back["order"]


def test_default_orders_match_dpsgd_epsilon():
  # The default orders, fractional ones included: the MNIST cell (REFERENCE.md) is
  # optimal at order 8.1, so the quadrature in the sweep's program is read. (A 4 x 4
  # reference grid: test_dpsgd's dp_accounting comparison compiles the same search.)
  q, sigma = np.array([256 / 60000, 0.001, 0.01, 0.1]), np.array([1.1, 0.8, 2.0, 3.0])
  res = jaxrdp.sweep(q=q, sigma=sigma, steps=[14063], delta=1e-5, progress=False)
  ref = jaxrdp.dpsgd_epsilon(q[:, None], sigma[None, :], 14063, 1e-5)
  eps, order = res.epsilon.reshape(4, 4), res.order.reshape(4, 4)
  np.testing.assert_allclose(eps, np.asarray(ref.epsilon), rtol=1e-12)
  np.testing.assert_array_equal(order, np.asarray(ref.order))
  assert order[0, 0] == 8.1 and round(float(eps[0, 0]), 3) == 2.597
  assert np.any(order != np.round(order))


def test_json_non_finite_is_named():
  # Strict JSON has no inf: it is the string "inf" (not null, which says nothing).
  res = jaxrdp.sweep(q=[0.5], sigma=[0.0, 1.0], steps=10, orders=ORDERS)
  assert np.isinf(res.epsilon[0, 0, 0, 0])
  back = json.loads(res.to_json())
  assert back["epsilon"][0][0][0][0] == "inf"
  assert isinstance(back["epsilon"][0][1][0][0], float)


def test_to_pandas_optional(q_sweep, monkeypatch):
  try:
    import pandas as pd  # noqa: F401
  except ImportError:
    with pytest.raises(ImportError, match="pandas"):
      q_sweep.to_pandas()
  else:
    df = q_sweep.to_pandas()
    assert len(df) == q_sweep.size and "epsilon" in df.columns
  monkeypatch.setitem(sys.modules, "pandas", None)
  with pytest.raises(ImportError, match="pip install pandas"):
    q_sweep.to_pandas()


def test_chunks_equal_one_call_and_show_progress(capsys, monkeypatch):
  monkeypatch.setitem(sys.modules, "tqdm", None)  # the fallback counter
  kw = dict(
    q=[0.001, 0.01, 0.1],
    sigma=[0.8, 1.5],
    steps=np.arange(1, 11) * 100,
    delta=[1e-5, 1e-3],
    orders=ORDERS,
  )
  whole = jaxrdp.sweep(**kw, progress=False)
  assert capsys.readouterr().err == ""
  chunked = jaxrdp.sweep(**kw, chunk_size=32)
  np.testing.assert_array_equal(chunked.epsilon, whole.epsilon)
  np.testing.assert_array_equal(chunked.order, whole.order)
  err = capsys.readouterr().err
  assert "jaxrdp sweep: 5/5 chunks" in err  # 6 pairs in 1 chunk, 120 cells in 4


def test_same_shape_does_not_recompile():
  kw = dict(sigma=[1.0, 2.0], steps=[100], orders=ORDERS)
  jaxrdp.sweep(q=[0.01, 0.02], **kw)
  programs = [
    _sharding._program(fn, _sharding._cell_mesh(tuple(jax.devices())).mesh, *n)
    for fn, n in ((_sharding._rdp_local, (1, 2)), (_sharding._eps_local, (2, 3)))
  ]
  before = [p._cache_size() for p in programs]
  assert min(before) >= 1
  jaxrdp.sweep(q=[0.03, 0.04], **kw)
  assert [p._cache_size() for p in programs] == before


def test_table_is_readable(data_sweep):
  text = data_sweep.table()
  assert "epochs=60" in text and "batch_size" in text
  assert "dataset_size = 60000" in text


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(q=2.0, sigma=1.0, steps=10), "q"),
    (dict(q=0.1, sigma=-1.0, steps=10), "sigma"),
    (dict(q=0.1, sigma=1.0, steps=10, delta=1.0), "delta"),
    (dict(q=0.1, sigma=1.0, epochs=10), "epochs"),
    (dict(sigma=1.0, steps=10), "q or batch_size"),
    (dict(dataset_size=100, batch_size=200, sigma=1.0, steps=10), "batch_size"),
    (dict(dataset_size=100, batch_size=2.5, sigma=1.0, steps=10), "batch_size"),
  ],
)
def test_invalid_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    jaxrdp.sweep(**kwargs)


def test_devices_argument(q_sweep):
  kw = dict(
    q=[0.001, 0.01, 0.1], sigma=[0.8, 1.5], steps=[10, 1000], delta=[1e-5, 1e-3], orders=ORDERS
  )
  # A mesh of any shape is flattened into the cell axis.
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("a", "b"))
  res = jaxrdp.sweep(**kw, devices=mesh)
  np.testing.assert_array_equal(res.epsilon, q_sweep.epsilon)
  res = jaxrdp.sweep(**kw, devices=jax.devices()[0])
  np.testing.assert_array_equal(res.epsilon, q_sweep.epsilon)
  with pytest.raises(ValueError, match="devices must not be empty"):
    jaxrdp.sweep(**kw, devices=[])
  with pytest.raises(TypeError, match="devices must hold jax.Device"):
    jaxrdp.sweep(**kw, devices=["cpu"])
  with pytest.raises(TypeError, match="devices must be a sequence"):
    jaxrdp.sweep(**kw, devices=4)
  with pytest.raises(ValueError, match="devices lists a device more than once"):
    jaxrdp.sweep(**kw, devices=jax.devices()[:1] * 2)


_SHARD_SCRIPT = textwrap.dedent("""
    import numpy as np, jax, jaxrdp
    assert jax.device_count() == 4, jax.devices()
    orders = np.array([2.0, 3.0, 4.0, 8.0, 16.0, 64.0])  # integer: no quadrature to compile
    # 15 (q, sigma) pairs, 240 cells: with chunk_size=8 the 4 devices take 2 chunks
    # of 4 x 32 cells, 2 devices 4 chunks of 2 x 32, the single device 8 chunks of 32.
    kw = dict(q=np.geomspace(1e-3, 0.2, 5), sigma=[0.7, 1.0, 2.0],
              steps=[1, 10, 100, 300, 1000, 3000, 7000, 20000], delta=[1e-6, 1e-5],
              orders=orders, progress=False, chunk_size=8)
    sharded = jaxrdp.sweep(**kw)
    two = jaxrdp.sweep(**kw, devices=jax.devices()[2:])
    single = jaxrdp.sweep(**kw, devices=jax.devices()[:1])
    # Meshes of 2 and 4 devices run one per-device program: bit for bit.
    assert np.array_equal(sharded.epsilon, two.epsilon), "epsilon differs"
    assert np.array_equal(sharded.order, two.order), "order differs"
    # A one-device mesh compiles apart (see _sweep.py): equal to rounding.
    np.testing.assert_allclose(sharded.epsilon, single.epsilon, rtol=1e-13)
    assert np.array_equal(sharded.order, single.order), "order differs from one device"
    print("SHARDED-OK")
""")


def test_sharded_equals_single_device():
  env = dict(XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
  assert "SHARDED-OK" in run_fresh_python(_SHARD_SCRIPT, env=env)


def test_sweep_with_the_pld_accountant_equals_its_cells():
  # A non-RDP sweep evaluates each cell through the accountant: the same numbers as
  # the one-line call on the broadcast grid, below the Renyi-DP epsilons (tight
  # accounting), and no order.
  q, sigma = [0.01, 0.02], [1.0, 2.0]
  res = jaxrdp.sweep(
    q=q, sigma=sigma, steps=[100], delta=1e-5, accountant="pld", chunk_size=3, progress=False
  )
  want = jaxrdp.dpsgd_epsilon(
    np.array(q)[:, None], np.array(sigma)[None, :], 100, 1e-5, accountant="pld"
  ).epsilon
  np.testing.assert_array_equal(res.epsilon.reshape(2, 2), np.asarray(want))
  rdp = jaxrdp.sweep(q=q, sigma=sigma, steps=[100], delta=1e-5).epsilon
  assert np.all(res.epsilon < rdp) and np.all(np.isnan(res.order))
  with pytest.raises(ValueError, match="orders"):
    jaxrdp.sweep(q=q, sigma=sigma, steps=[100], orders=[2.0, 3.0], accountant="pld")


def test_random_allocation_sweep_equals_its_cells():
  # Random allocation has one curve per epoch of t = 1 / q steps, so a sweep evaluates
  # it cell by cell: the one-line call's numbers and orders on the broadcast grid, in
  # both the rate and the dataset form, and never above Poisson at the same rate
  # (Feldman and Shenfeld 2025, arXiv:2502.08202).
  q, sigma, steps = [0.01, 0.05], [0.8, 2.0], [100, 400]
  res = jaxrdp.sweep(
    q=q,
    sigma=sigma,
    steps=steps,
    delta=1e-5,
    sampling="allocation",
    chunk_size=3,
    progress=False,
  )
  assert res.sampling == "allocation" and res.shape == (2, 2, 2, 1)
  want = jaxrdp.dpsgd_epsilon(
    np.array(q)[:, None, None],
    np.array(sigma)[None, :, None],
    np.array(steps)[None, None, :],
    1e-5,
    sampling="allocation",
  )
  np.testing.assert_array_equal(res.epsilon[..., 0], np.asarray(want.epsilon))
  np.testing.assert_array_equal(res.order[..., 0], np.asarray(want.order))
  poisson = jaxrdp.sweep(q=q, sigma=sigma, steps=steps, delta=1e-5).epsilon
  assert np.all(res.epsilon <= poisson)
  # Epochs of the dataset form: q = B / N, t = N / B steps each.
  data = jaxrdp.sweep(
    dataset_size=1000,
    batch_size=[10, 50],
    sigma=1.0,
    epochs=[2],
    delta=1e-5,
    sampling="allocation",
    orders=[2.0, 4.0, 8.0, 16.0],
    progress=False,
  )
  want = jaxrdp.dpsgd_epsilon(
    np.array([0.01, 0.05]),
    1.0,
    np.array([200, 40]),
    1e-5,
    [2.0, 4.0, 8.0, 16.0],
    sampling="allocation",
  )
  np.testing.assert_array_equal(data.epsilon.ravel(), np.asarray(want.epsilon))
  assert set(np.asarray(data.order).ravel()) <= {2.0, 4.0, 8.0, 16.0}
  # The tight accountant: its certified upper bound, below the Renyi-DP epsilon.
  tight = jaxrdp.sweep(
    q=0.1,
    sigma=1.0,
    steps=20,
    delta=1e-5,
    sampling="allocation",
    accountant="pld",
    progress=False,
  )
  cell = jaxrdp.dpsgd_epsilon(0.1, 1.0, 20, 1e-5, sampling="allocation", accountant="pld")
  assert float(tight.epsilon.ravel()[0]) == float(cell.epsilon)
  rdp = jaxrdp.dpsgd_epsilon(0.1, 1.0, 20, 1e-5, sampling="allocation").epsilon
  assert float(cell.epsilon_lower) <= float(cell.epsilon) < float(rdp)
  assert np.isnan(tight.order).all()
