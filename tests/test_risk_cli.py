"""Attack risk through accountant objects, sweep columns and the `jaxrdp risk` command.

The numbers are compared with :func:`jaxrdp.dpsgd_tpr` and :func:`jaxrdp.dpsgd_advantage`
called directly (themselves checked against the Laplace-inversion oracle in
tests/test_risk.py) and with invariants (FPR <= lower bound <= upper bound <= 1,
advantage in [0, 1]); printed numbers against the exact floats: an upper bound
printed is the least 5-digit decimal at or above the value, a lower bound the
largest at or below it.
"""

from __future__ import annotations

import csv
import decimal
import io
import json

import numpy as np
import pytest

import jaxrdp
import jaxrdp.risk
from jaxrdp.accountants import PldAccountant, RdpAccountant
from jaxrdp.cli import main
from jaxrdp.risk._rdp import RISK_ORDERS

# Small configurations (small FFTs): one sampling rate, two noise levels, 100 steps.
Q, SIGMAS, STEPS, FPR = 0.01, np.array([1.1, 2.0]), 100, 0.01


def run(argv, capsys):
  code = main(argv)
  out, err = capsys.readouterr()
  return code, out, err


def _same(a, b):
  for x, y in zip(a, b):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# --------------------------------------------------------------------------------------
# Accountant objects and options.


@pytest.mark.slow  # (Renyi-DP programs at three sets of orders)
def test_an_accountant_object_gives_what_its_name_gives():
  _same(
    jaxrdp.dpsgd_tpr(Q, SIGMAS, STEPS, FPR, accountant=PldAccountant()),
    jaxrdp.dpsgd_tpr(Q, SIGMAS, STEPS, FPR, accountant="pld"),
  )
  _same(
    jaxrdp.dpsgd_advantage(Q, SIGMAS, STEPS, accountant=PldAccountant()),
    jaxrdp.dpsgd_advantage(Q, SIGMAS, STEPS),
  )
  # The name "rdp" reads the risk at RISK_ORDERS; an object at its own orders.
  by_name = jaxrdp.dpsgd_tpr(Q, SIGMAS, STEPS, FPR, accountant="rdp")
  _same(jaxrdp.dpsgd_tpr(Q, SIGMAS, STEPS, FPR, accountant=RdpAccountant(RISK_ORDERS)), by_name)
  _same(
    jaxrdp.dpsgd_advantage(Q, SIGMAS, STEPS, accountant=RdpAccountant(RISK_ORDERS)),
    jaxrdp.dpsgd_advantage(Q, SIGMAS, STEPS, accountant="rdp"),
  )
  # Fewer orders: a minimum over fewer bounds, never below; and never below the tight one.
  few = jaxrdp.dpsgd_tpr(Q, SIGMAS, STEPS, FPR, accountant=RdpAccountant([2.0, 8.0, 32.0]))
  assert np.all(np.asarray(few.tpr) >= np.asarray(by_name.tpr))
  assert np.all(np.asarray(few.tpr) >= FPR)
  tight = jaxrdp.dpsgd_tpr(Q, SIGMAS, STEPS, FPR)
  assert np.all(np.asarray(by_name.tpr) >= np.asarray(tight.tpr))
  # The curve and the calibrations take the object too.
  _same(
    jaxrdp.tradeoff_curve(Q, SIGMAS[0], STEPS, [FPR], accountant=RdpAccountant(RISK_ORDERS)),
    jaxrdp.tradeoff_curve(Q, SIGMAS[0], STEPS, [FPR], accountant="rdp"),
  )
  _same(
    jaxrdp.risk.calibrate_noise_to_advantage(0.05, Q, STEPS, accountant=RdpAccountant(RISK_ORDERS)),
    jaxrdp.risk.calibrate_noise_to_advantage(0.05, Q, STEPS, accountant="rdp"),
  )


class _OtherAccountant:
  """An accountant of another kind (it implements the protocol, nothing else)."""

  def supports(self, event):
    return True

  def unsupported(self, event):
    return None

  def init(self):
    return ()

  def compose(self, state, event):
    return state

  def get_epsilon(self, state, delta):
    raise AssertionError

  def get_delta(self, state, epsilon):
    raise AssertionError

  def epsilon(self, event, delta):
    raise AssertionError

  def delta(self, event, epsilon):
    raise AssertionError


def test_bad_accountants_and_options_are_refused():
  with pytest.raises(TypeError):
    jaxrdp.dpsgd_tpr(Q, 1.0, STEPS, FPR, rtol=1e-4)  # not an option of the risk functions
  with pytest.raises(TypeError):
    jaxrdp.risk.calibrate_noise_to_tpr(0.02, FPR, Q, STEPS, grid_size=2**12)
  with pytest.raises(TypeError):
    jaxrdp.sweep(q=Q, sigma=1.0, steps=STEPS, fpr=FPR)
  with pytest.raises(TypeError, match="accountant must be a registered name"):
    jaxrdp.dpsgd_advantage(Q, 1.0, STEPS, accountant=object())
  with pytest.raises(ValueError, match="unknown accountant 'prv'"):
    jaxrdp.dpsgd_tpr(Q, 1.0, STEPS, FPR, accountant="prv")
  with pytest.raises(NotImplementedError, match="_OtherAccountant is neither"):
    jaxrdp.dpsgd_tpr(Q, 1.0, STEPS, FPR, accountant=_OtherAccountant())
  with pytest.raises(ValueError, match="improved"):
    jaxrdp.dpsgd_tpr(Q, 1.0, STEPS, FPR, accountant=RdpAccountant(method="classic"))
  with pytest.raises(ValueError, match="atol"):
    jaxrdp.dpsgd_tpr(Q, 1.0, STEPS, FPR, accountant="rdp", atol=1e-4)
  with pytest.raises(ValueError, match="atol"):
    jaxrdp.risk.calibrate_noise_to_tpr(0.02, FPR, Q, STEPS, atol=1.0)
  with pytest.raises(ValueError, match="sampling='fixed'"):
    jaxrdp.risk.calibrate_noise_to_advantage(0.1, Q, STEPS, sampling="fixed")


# --------------------------------------------------------------------------------------
# Sweep columns.


def test_sweep_risk_columns_agree_with_the_direct_calls():
  res = jaxrdp.sweep(
    q=Q,
    sigma=SIGMAS,
    steps=STEPS,
    delta=[1e-5, 1e-6],
    tpr_at_fpr=FPR,
    advantage=True,
    accountant="pld",
  )
  tpr = jaxrdp.dpsgd_tpr(Q, SIGMAS, STEPS, FPR)
  adv = jaxrdp.dpsgd_advantage(Q, SIGMAS, STEPS)
  assert res.fpr == FPR and res.accountant == "pld"
  full = {k: np.broadcast_to(getattr(res, k), res.shape) for k in ("tpr", "tpr_lower")}
  for d in range(2):  # the same risk at every delta
    np.testing.assert_array_equal(full["tpr"][0, :, 0, d], np.asarray(tpr.tpr))
    np.testing.assert_array_equal(full["tpr_lower"][0, :, 0, d], np.asarray(tpr.tpr_lower))
  np.testing.assert_array_equal(res.advantage[0, :, 0, 0], np.asarray(adv.advantage))
  np.testing.assert_array_equal(res.advantage_lower[0, :, 0, 0], np.asarray(adv.advantage_lower))
  # CSV: one row per cell, both bounds, exact floats; JSON likewise.
  rows = list(csv.DictReader(io.StringIO(res.to_csv())))
  assert len(rows) == res.size
  for r in rows:
    i = int(np.argmin(np.abs(SIGMAS - float(r["sigma"]))))
    assert float(r["fpr"]) == FPR and r["accountant"] == "pld"
    assert float(r["tpr"]) == float(tpr.tpr[i]) and float(r["tpr_lower"]) == float(tpr.tpr_lower[i])
    assert float(r["advantage"]) == float(adv.advantage[i])
    assert FPR <= float(r["tpr_lower"]) <= float(r["tpr"]) <= 1.0
    assert 0.0 <= float(r["advantage_lower"]) <= float(r["advantage"]) <= 1.0
  data = json.loads(res.to_json())
  assert data["fpr"] == FPR
  assert np.array(data["tpr"]).shape == res.shape
  assert np.array(data["tpr_lower"])[0, 1, 0, 1] == float(tpr.tpr_lower[1])
  # A sub-grid keeps its risk; the table shows the bounds rounded outward.
  sub = res.select(sigma=SIGMAS[1], delta=1e-6)
  assert float(np.squeeze(sub.tpr)) == float(tpr.tpr[1])
  table = res.table()
  assert "tpr_lower" in table and "advantage" in table


@pytest.mark.slow  # (the sweep's own Renyi-DP programs)
def test_sweep_risk_from_the_dataset_form_and_the_renyi_route():
  # 1000 examples, batches of 10, 1 epoch: q = 0.01 and 100 steps (the cells above).
  res = jaxrdp.sweep(
    dataset_size=1000, batch_size=10, epochs=1, sigma=SIGMAS, tpr_at_fpr=FPR, advantage=True
  )
  rdp = jaxrdp.dpsgd_tpr(Q, SIGMAS, STEPS, FPR, accountant="rdp")
  np.testing.assert_array_equal(np.ravel(res.tpr), np.asarray(rdp.tpr))
  assert np.all(np.ravel(res.tpr_lower) == FPR) and np.all(np.ravel(res.advantage_lower) == 0)
  adv = jaxrdp.dpsgd_advantage(Q, SIGMAS, STEPS, accountant="rdp")
  np.testing.assert_array_equal(np.ravel(res.advantage), np.asarray(adv.advantage))
  with pytest.raises(ValueError, match="Poisson sampling under add/remove"):
    jaxrdp.sweep(q=Q, sigma=1.0, steps=STEPS, sampling="fixed", tpr_at_fpr=FPR)
  with pytest.raises(ValueError, match="one false-positive rate"):
    jaxrdp.sweep(q=Q, sigma=1.0, steps=STEPS, tpr_at_fpr=[0.01, 0.1])
  with pytest.raises(ValueError, match="tpr_at_fpr must be"):
    jaxrdp.sweep(q=Q, sigma=1.0, steps=STEPS, tpr_at_fpr=1.5)
  with pytest.raises(TypeError, match="advantage must be True or False"):
    jaxrdp.sweep(q=Q, sigma=1.0, steps=STEPS, advantage="yes")


# --------------------------------------------------------------------------------------
# The command line.


def _ulp5(x: float) -> decimal.Decimal:
  """One unit in the 5th significant digit of ``x``."""
  return decimal.Decimal(1).scaleb(decimal.Decimal(repr(x)).adjusted() - 4)


def _check_up(printed: str, x: float):
  p, exact = decimal.Decimal(printed), decimal.Decimal(x)
  assert p >= exact and p - _ulp5(x) < exact, (printed, x)


def _check_down(printed: str, x: float):
  p, exact = decimal.Decimal(printed), decimal.Decimal(x)
  assert p <= exact and p + _ulp5(x) > exact, (printed, x)


def test_risk_command_prints_certified_bounds_rounded_outward(capsys):
  fprs = [0.001, 0.01, 0.1]
  argv = ["risk", "--q", str(Q), "--sigma", "1.1", "2", "--steps", str(STEPS), "--fpr"]
  code, out, err = run(argv + [str(a) for a in fprs], capsys)
  assert code == 0 and err == ""
  lines = out.splitlines()
  assert lines[0] == "accountant pld, sampling poisson, relation add_remove"
  header = lines[1].split()
  assert header[-4:] == ["tpr", "tpr_lower", "advantage", "advantage_lower"]
  body = [dict(zip(header, ln.split())) for ln in lines[3:]]
  assert len(body) == 6
  for row in body:
    s, a = float(row["sigma"]), float(row["fpr"])
    t = jaxrdp.dpsgd_tpr(Q, s, STEPS, a)
    v = jaxrdp.dpsgd_advantage(Q, s, STEPS)
    _check_up(row["tpr"], float(t.tpr))
    _check_down(row["tpr_lower"], float(t.tpr_lower))
    _check_up(row["advantage"], float(v.advantage))
    _check_down(row["advantage_lower"], float(v.advantage_lower))
  # JSON: both bounds, exact, and what computed them.
  code, out, _ = run(argv + ["0.01", "--json"], capsys)
  records = json.loads(out)
  assert len(records) == 2
  for rec in records:
    t = jaxrdp.dpsgd_tpr(Q, rec["sigma"], STEPS, rec["fpr"])
    assert rec["tpr"] == float(t.tpr) and rec["tpr_lower"] == float(t.tpr_lower)
    assert 0.0 <= rec["advantage_lower"] <= rec["advantage"] <= 1.0
    assert (rec["accountant"], rec["sampling"], rec["relation"]) == (
      "pld",
      "poisson",
      "add_remove",
    )
  # The Renyi-DP route: its (looser) upper bound and the trivial lower bound.
  code, out, _ = run(argv + ["0.01", "--accountant", "rdp", "--csv"], capsys)
  rows = list(csv.DictReader(io.StringIO(out)))
  rdp = jaxrdp.dpsgd_tpr(Q, np.array([1.1, 2.0]), STEPS, 0.01, accountant="rdp")
  assert [float(r["tpr"]) for r in rows] == np.asarray(rdp.tpr).tolist()
  assert [float(r["tpr_lower"]) for r in rows] == [0.01, 0.01]
  assert {r["accountant"] for r in rows} == {"rdp"}


def test_risk_command_calibrates_sigma_to_a_tpr_target(capsys):
  argv = ["risk", "--q", str(Q), "--steps", str(STEPS), "--target-tpr", "0.012"]
  code, out, _ = run(argv, capsys)
  assert code == 0
  header, _, row = out.splitlines()[1:4]
  rec = dict(zip(header.split(), row.split()))
  # The printed sigma (rounded up) pasted back keeps the target.
  assert float(jaxrdp.dpsgd_tpr(Q, float(rec["sigma"]), STEPS, FPR).tpr) <= 0.012
  code, out, _ = run(argv + ["--json"], capsys)
  (rec,) = json.loads(out)
  assert rec["feasible"] == 1 and rec["tpr"] <= 0.012
  assert float(jaxrdp.dpsgd_tpr(Q, rec["sigma"], STEPS, FPR).tpr) == rec["tpr"]


@pytest.mark.parametrize(
  "argv, name",
  [
    (
      ["risk", "--q", "0.01", "--steps", "100", "--sigma", "1", "--sampling", "fixed"],
      "--sampling",
    ),
    (
      ["risk", "--q", "0.01", "--steps", "100", "--sigma", "1", "--relation", "replace_one"],
      "--relation",
    ),
    (["risk", "--q", "0.01", "--steps", "100"], "--sigma"),
    (["risk", "--q", "0.01", "--steps", "100", "--sigma", "1", "--target-tpr", "0.1"], "--target"),
    (
      ["risk", "--q", "0.01", "--steps", "100", "--target-tpr", "0.1", "--target-advantage", "0.1"],
      "--target",
    ),
    (["risk", "--q", "0.01", "--steps", "100", "--sigma", "1", "--fpr", "2"], "--fpr"),
    (
      ["sweep", "--q", "0.01", "--steps", "100", "--sampling", "shuffle", "--advantage"],
      "--sampling",
    ),
  ],
)
def test_risk_usage_errors_exit_2_with_one_line(argv, name, capsys):
  code, out, err = run(argv, capsys)
  assert code == 2 and out == ""
  assert len(err.strip().splitlines()) == 1 and name in err and "Traceback" not in err
