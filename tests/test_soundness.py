"""Soundness over the whole float64 range: every output is a certified value or a
documented error naming the argument.

The oracles are lower bounds on the truth, computed in mpmath (60 digits):

* (1 - q + q L)^alpha >= (q L)^alpha gives
  RDP(alpha) >= alpha / (2 sigma^2) + alpha log(q) / (alpha - 1);
* for alpha >= 2, the RDP is non-decreasing in alpha and one term of the exact
  binomial sum at n = floor(alpha) gives
  RDP(alpha) >= log1p(C(n, 2) (1 - q)^(n - 2) q^2 expm1(1 / sigma^2)) / (n - 1).

The Gaussian mechanism, alpha / (2 sigma^2), bounds the RDP from above: where it
is finite the answer must be finite (no spurious inf).
"""

from __future__ import annotations

import decimal
import fractions
import os

import mpmath
import numpy as np
import pytest

import jaxrdp

mp = mpmath.mp.clone() if hasattr(mpmath.mp, "clone") else mpmath.mp

TINY = float(np.finfo(np.float64).tiny)
ORDERS = np.array([1.01, 1.5, 2.0, 2.5, 3.0, 4.0, 8.0, 16.0, 64.0, 256.0, 4096.0, 1e6, 1e15])


def _log_uniform(rng, lo, hi, n):
  return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def _sample(rng, n, lo, hi, extras):
  """n values: log-uniform in [lo, hi] with edge values mixed in."""
  x = _log_uniform(rng, lo, hi, n)
  pick = rng.random(n) < 0.3
  x[pick] = rng.choice(np.asarray(extras, dtype=np.float64), pick.sum())
  return x


def _configs(seed=0, n=80):
  rng = np.random.default_rng(seed)
  q = _sample(rng, n, 5e-324, 1.0, [5e-324, 1e-310, TINY, 1e-300, 1e-8, 0.5, 1.0, 0.0])
  sigma = _sample(
    rng,
    n,
    5e-324,
    1e308,
    [0.0, 1e-310, 1e-200, 1e-154, 1e-120, 0.01, 0.05, 1.0, 1e120, 1e154, 1e155, 1e300, np.inf],
  )
  alpha = 1.0 + _sample(rng, n, 1e-15, 1e15 - 1.0, [0.01, 0.5, 1.0, 2.5, 1e6, 1e15 - 1.0])
  return q, sigma, alpha


def _rdp_lower(q, sigma, alpha):
  """A certified lower bound on the RDP (mpmath), or None where none is needed."""
  with mpmath.workdps(60):
    q, s, a = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(alpha)
    if q == 0 or mpmath.isinf(s):
      return mpmath.mpf(0)
    if s == 0:
      return mpmath.inf
    best = a / (2 * s * s) + a * mpmath.log(q) / (a - 1)
    if a >= 2:
      n = mpmath.floor(a)
      term = mpmath.binomial(n, 2) * (1 - q) ** (n - 2) * q * q * mpmath.expm1(1 / (s * s))
      best = max(best, mpmath.log1p(term) / (n - 1))
    return max(best, mpmath.mpf(0))


def _check_certified(out, lower, upper_finite, what):
  assert not np.isnan(out), what
  assert out >= 0, what
  if lower == mpmath.inf:
    assert out == np.inf, what
    return
  assert mpmath.mpf(out) >= lower * (1 - mpmath.mpf("1e-12")), (what, out, lower)
  if upper_finite:
    assert np.isfinite(out), (what, out)


def test_sgm_rdp_never_below_oracle_over_float64_range():
  q, sigma, alpha = _configs(0)
  out = np.asarray(jaxrdp.mechanisms.sgm_rdp(q, sigma, alpha))
  for i in range(q.size):
    lower = _rdp_lower(q[i], sigma[i], alpha[i])
    with mpmath.workdps(30):
      gauss = mpmath.mpf(alpha[i]) / (2 * mpmath.mpf(sigma[i]) ** 2) if sigma[i] > 0 else mpmath.inf
    finite = gauss < mpmath.mpf("1e308") and sigma[i] >= TINY
    _check_certified(out[i], lower, finite, (q[i], sigma[i], alpha[i]))
    if gauss < mpmath.mpf("1e300"):  # the Gaussian mechanism bounds it from above
      floor = 2 * TINY / min(alpha[i] - 1.0, 1.0)  # the reported floor where the RDP underflows
      assert out[i] <= gauss * (1 + mpmath.mpf("1e-12")) + floor, (q[i], sigma[i], alpha[i])


def _eps_lower(q, sigma, steps, delta, orders):
  """min over the orders of the improved conversion of T * (lower bound), TV rule included."""
  with mpmath.workdps(60):
    best = mpmath.inf
    d = mpmath.mpf(delta)
    for a in orders:
      r = mpmath.mpf(steps) * _rdp_lower(q, sigma, a) if steps > 0 else mpmath.mpf(0)
      a = mpmath.mpf(a)
      if r == mpmath.inf:
        continue
      eps = r + mpmath.log1p(-1 / a) - (mpmath.log(d) + mpmath.log(a)) / (a - 1)
      if d >= mpmath.sqrt(-mpmath.expm1(-r)):
        eps = mpmath.mpf(0)
      best = min(best, max(eps, mpmath.mpf(0)))
    return best


def test_dpsgd_epsilon_never_below_oracle_over_float64_range():
  rng = np.random.default_rng(1)
  n = 60
  q, sigma, _ = _configs(1, n)
  steps = _sample(rng, n, 5e-324, 1e300, [0.0, 1e-310, 1.0, 100.0, 1e12, 1e300, float(10**20)])
  delta = _sample(rng, n, 5e-324, 0.99, [5e-324, 1e-310, TINY, 1e-5, 0.5])
  out = np.asarray(jaxrdp.dpsgd_epsilon(q, sigma, steps, delta, orders=ORDERS).epsilon)
  for i in range(n):
    if q[i] == 0 or steps[i] == 0 or np.isinf(sigma[i]):
      assert out[i] == 0
      continue
    lower = _eps_lower(q[i], sigma[i], steps[i], delta[i], ORDERS)
    _check_certified(out[i], lower, False, (q[i], sigma[i], steps[i], delta[i]))


@pytest.mark.parametrize(
  "name,value",
  [
    ("q", "0.1"),
    ("q", decimal.Decimal("0.1")),
    ("q", fractions.Fraction(1, 10)),
    ("q", 0.1j),
    ("q", object()),
    ("q", {}),
    ("q", None),
    ("q", [0.1, "a"]),
    ("q", -1e-310),
    ("q", 1.5),
    ("sigma", "1"),
    ("sigma", -1.0),
    ("sigma", np.nan),
    ("steps", "100"),
    ("steps", 10**400),
    ("steps", -1.0),
    ("delta", "x"),
    ("delta", 0.0),
    ("delta", 1.0),
    ("delta", -5e-324),
    ("orders", []),
    ("orders", [1e16]),
    ("orders", [2.0, 1e100]),
    ("orders", [1.0]),
  ],
)
def test_invalid_arguments_name_the_argument(name, value):
  args = dict(q=0.01, sigma=1.0, steps=100, delta=1e-5, orders=None)
  args[name] = value
  with pytest.raises((ValueError, TypeError), match=name):
    jaxrdp.dpsgd_epsilon(**args)


@pytest.mark.parametrize("value", ["2", decimal.Decimal(2), 2j, None, 1e16, 1e200, 1.0])
def test_invalid_order_names_alpha(value):
  with pytest.raises((ValueError, TypeError), match="alpha"):
    jaxrdp.mechanisms.sgm_rdp(0.01, 1.0, value)


def test_empty_orders_are_refused():
  with pytest.raises(ValueError, match="orders"):
    jaxrdp.dpsgd_epsilon(0.01, 1.0, 100, 1e-5, orders=[])
  with pytest.raises(ValueError, match="orders"):
    jaxrdp.RdpAccountant([])
  with pytest.raises(ValueError, match="orders"):
    jaxrdp.rdp_to_epsilon(np.zeros((0,)), [], 1e-5)


# Reproducers ----------------------------------------------------------------------------


def test_subnormal_q_is_not_zero():
  assert float(jaxrdp.mechanisms.sgm_rdp(2.2e-308, 0.01, 2.0)) >= 8583.0
  assert float(jaxrdp.dpsgd_epsilon(1e-310, 1e-3, 100, 1e-5).epsilon) > 1e6
  assert float(jaxrdp.dpsgd_epsilon(1e-310, 0.0, 100, 1e-5).epsilon) == np.inf


def test_sigma_beyond_square_overflow():
  # A - 1 = alpha (alpha - 1) q^2 / (2 sigma^2): RDP ~ 3e-311, reported as a bound >= it.
  v = float(jaxrdp.mechanisms.sgm_rdp(0.5, 1e155, 2.5))
  assert 3.1e-311 <= v <= 1e-300
  la = float(jaxrdp.mechanisms.sgm_log_a_minus_1(0.5, 1e120, 1e10))
  assert la == pytest.approx(np.log(0.5 * 1e10 * (1e10 - 1) * 0.25) - 240 * np.log(10), rel=1e-13)
  assert float(jaxrdp.dpsgd_epsilon(0.5, 1e155, 100, 1e-5).epsilon) == 0.0  # TV rule
  d = float(jaxrdp.dpsgd_delta(0.01, 1e155, 100, 1.0).delta)
  assert 0.0 <= d < 1e-100


def test_tiny_sigma_fractional_orders_finite_where_finite():
  # RDP = alpha / (2 sigma^2) to ~1e-300 relative; 7.5e307 fits a float64.
  assert float(jaxrdp.mechanisms.sgm_rdp(0.5, 1e-154, 1.5)) == pytest.approx(7.5e307, rel=1e-14)
  assert float(jaxrdp.mechanisms.sgm_rdp(0.5, 1e-154, 2.0)) == pytest.approx(1e308, rel=1e-14)
  assert float(jaxrdp.mechanisms.sgm_rdp(0.5, 1e-154, 3.0)) == pytest.approx(1.5e308, rel=1e-14)
  assert float(jaxrdp.mechanisms.sgm_rdp(0.5, 1e-154, 4.0)) == np.inf  # 2e308 overflows


def test_small_sigma_fractional_orders_not_below_lower_bound():
  # The quadrature is verified for sigma >= 0.1; below, a certified bound is used.
  # The orders on a third axis: one compiled program for the whole grid.
  q = np.array([1e-8, 1e-2, 0.5, 0.9])[:, None, None]
  s = np.array([1e-4, 1e-3, 0.01, 0.03, 0.05, 0.09])[None, :, None]
  a = np.array([1.01, 1.5, 3.7, 100.5])
  v = np.asarray(jaxrdp.mechanisms.sgm_rdp(q, s, a))
  assert v.shape == (4, 6, 4)
  lb = a / (2 * s * s) + a * np.log(q) / (a - 1)
  assert np.all(v >= lb * (1 - 1e-13))
  assert np.all(v <= a / (2 * s * s) * (1 + 1e-12))


def test_subnormal_delta():
  e = float(jaxrdp.dpsgd_epsilon(0.01, 1.0, 100, 1e-310).epsilon)
  assert np.isfinite(e) and e > float(jaxrdp.dpsgd_epsilon(0.01, 1.0, 100, 1e-300).epsilon)
  r = jaxrdp.rdp_to_epsilon([1.0, 2.0], [2.0, 3.0], 1e-310)
  assert np.isfinite(float(r.epsilon))
  acct = jaxrdp.RdpAccountant()
  st = acct.compose(
    acct.init(),
    jaxrdp.events.SelfComposed(
      jaxrdp.events.PoissonSampled(0.01, jaxrdp.events.Gaussian(1.0)), 100
    ),
  )
  assert float(acct.get_epsilon(st, 1e-310).epsilon) == pytest.approx(e, rel=1e-12)


def test_huge_orders_refused_not_under_reported():
  for a in (1e16, 1e20, 1e100, 1e200):
    with pytest.raises(ValueError, match="orders"):
      jaxrdp.dpsgd_epsilon(0.01, 1.0, 100, 1e-5, orders=[a])
    with pytest.raises(ValueError, match="alpha"):
      jaxrdp.mechanisms.sgm_rdp(0.01, 1.0, a)
  # At the limit the RDP lies between its lower and upper bounds.
  v = float(jaxrdp.mechanisms.sgm_rdp(0.01, 1.0, jaxrdp.mechanisms.MAX_ORDER))
  assert 5e14 + np.log(0.01) * (1 + 1e-12) <= v <= 5e14 * (1 + 1e-12)
  assert float(jaxrdp.mechanisms.sgm_rdp(0.01, 1.0, np.inf)) == np.inf


def test_epsilon_never_looser_than_total_variation_bound():
  args = (0.00011435149070816554, 15.25073702456042, 2, 0.00034439396829379266)
  assert float(jaxrdp.dpsgd_epsilon(*args, orders=jaxrdp.DP_ACCOUNTING_ORDERS).epsilon) == 0.0
  assert float(jaxrdp.dpsgd_epsilon(*args).epsilon) == 0.0
  rdp = (
    np.asarray(jaxrdp.mechanisms.sgm_rdp(args[0], args[1], jaxrdp.DP_ACCOUNTING_ORDERS)) * args[2]
  )
  assert float(jaxrdp.rdp_to_epsilon(rdp, jaxrdp.DP_ACCOUNTING_ORDERS, args[3]).epsilon) == 0.0


def test_huge_integer_steps():
  e = float(jaxrdp.dpsgd_epsilon(0.01, 1.0, 10**20, 1e-5).epsilon)
  assert e > 1e15
  with pytest.raises(ValueError, match="steps"):
    jaxrdp.dpsgd_epsilon(0.01, 1.0, 10**400, 1e-5)


# Checkpoints ----------------------------------------------------------------------------


def _state():
  return {"w": np.arange(3.0), "acct": jaxrdp.RdpAccountant([2.0, 4.0]).init()}


def _npz_with_header(path, header_json):
  np.savez(path, header=np.frombuffer(header_json.encode(), dtype=np.uint8))


@pytest.mark.parametrize(
  "kind",
  [
    "npy",
    "header_list",
    "header_null",
    "header_int",
    "directory",
    "compression_flag",
    "encryption_flag",
    "npy_header",
  ],
)
def test_foreign_or_damaged_checkpoint_raises_checkpoint_error(tmp_path, kind):
  path = str(tmp_path / "ck.npz")
  if kind == "npy":
    with open(path, "wb") as f:
      np.save(f, np.arange(3.0))
  elif kind.startswith("header_"):
    _npz_with_header(path, {"header_list": "[]", "header_null": "null", "header_int": "42"}[kind])
  elif kind == "directory":
    os.mkdir(path)
  else:
    jaxrdp.train.save_checkpoint(path, _state())
    with open(path, "rb") as f:
      data = bytearray(f.read())
    at = data.find(b"PK\x01\x02")  # the first central directory entry, which zipfile reads
    if kind == "compression_flag":
      data[at + 10] = 99  # compression method
    elif kind == "encryption_flag":
      data[at + 8] |= 1  # general purpose flag: encrypted
    else:
      npy = data.find(b"\x93NUMPY", data.find(b"leaf_00000"))
      data[npy + 10 : npy + 18] = b"{'descr("  # an unterminated header dict
    with open(path, "wb") as f:
      f.write(bytes(data))
  with pytest.raises(jaxrdp.train.CheckpointError):
    jaxrdp.train.load_checkpoint(path, _state())


def test_stale_temporary_removed_on_next_save(tmp_path):
  path = tmp_path / "ck.npz"
  stale = tmp_path / ".ck.npz.abcd1234.tmp"
  stale.write_bytes(b"partial")
  other = tmp_path / ".other.npz.abcd1234.tmp"
  other.write_bytes(b"not ours")
  jaxrdp.train.save_checkpoint(path, _state())
  assert not stale.exists() and other.exists()
  jaxrdp.train.load_checkpoint(path, _state())


# Command line ---------------------------------------------------------------------------


def _cli(argv, capsys):
  from jaxrdp import cli

  code = cli.main(argv)
  return code, capsys.readouterr().err


def test_cli_output_errors_exit_2_with_one_line(tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("JAXRDP_CACHE_DIR", "")
  base = ["sweep", "--q", "0.01", "0.02", "--sigma", "1", "2", "--steps", "10", "--no-progress"]
  code, err = _cli(base + ["--plot", "/proc/jaxrdp-test/x.png", "--no-files"], capsys)
  assert code == 2 and len(err.strip().splitlines()) == 1
  (tmp_path / "jaxrdp_sweep.csv").mkdir()
  code, err = _cli(base + ["--out-dir", str(tmp_path)], capsys)
  assert code == 2 and len(err.strip().splitlines()) == 1 and "jaxrdp_sweep.csv" in err
  code, err = _cli(base + ["--plot", str(tmp_path)], capsys)
  assert code == 2 and "directory" in err


def test_cli_checks_heatmap_and_size_before_computing(tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("JAXRDP_CACHE_DIR", "")
  import jaxrdp.sweeps._sweep as sweep_module

  def boom(*a, **k):
    raise AssertionError("computed")

  monkeypatch.setattr(sweep_module, "sweep", boom)
  code, err = _cli(
    [
      "sweep",
      "--q",
      "0.01",
      "--sigma",
      "1",
      "2",
      "--steps",
      "10",
      "--out-dir",
      str(tmp_path),
      "--plot",
      str(tmp_path / "h.png"),
    ],
    capsys,
  )
  assert code == 2 and "at least 2 values" in err
  assert not (tmp_path / "jaxrdp_sweep.csv").exists()
  qs = [str(x) for x in np.linspace(0.001, 0.3, 300)]
  sig = [str(x) for x in np.linspace(0.5, 3.5, 300)]
  code, err = _cli(
    [
      "sweep",
      "--q",
      *qs,
      "--sigma",
      *sig,
      "--steps",
      *[str(i) for i in range(1, 31)],
      "--no-files",
    ],
    capsys,
  )
  assert code == 2 and "--yes" in err and "2,700,000 cells" in err
