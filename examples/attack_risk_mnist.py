"""Worked example of docs/guide/attack_risk.md: MNIST DP-SGD calibrated to attack risk.

DP-SGD on MNIST with batches of 256 of 60,000 examples (q = 256 / 60000) for 60
epochs (T = 14,063 steps), delta = 1e-5. The script prints:

1. the noise that epsilon = 8 needs, and the attack risk that run actually has
   (the best membership attack's TPR at FPR 0.1%, 1% and 10%, the advantage,
   a Gaussian-DP estimate), next to what (8, 1e-5)-DP alone promises;
2. for TPR targets at FPR 1%, the noise calibrated to the target directly, the
   noise that the epsilon route needs for the same certified risk (any
   (epsilon, delta)-DP mechanism has TPR <= e^epsilon FPR + delta, so epsilon =
   log((target - delta) / FPR)), and the noise of the epsilon = 8 run.

All values are jaxrdp's tight, certified accountant (accountant="pld").

Run: python examples/attack_risk_mnist.py [--json FILE] [--plot FILE]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

import jaxrdp
import jaxrdp.risk

Q = 256 / 60000
STEPS = 14063
DELTA = 1e-5
FPR = 0.01
TARGETS = (0.1, 0.2, 0.3, 0.5)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--json", help="also write the numbers to this file")
  ap.add_argument("--plot", help="also draw the epsilon = 8 run's trade-off curve to this file")
  args = ap.parse_args(argv)

  eps8 = jaxrdp.calibrate_noise(target_epsilon=8.0, delta=DELTA, q=Q, steps=STEPS, accountant="pld")
  sigma8 = float(eps8.sigma)
  fprs = np.array([1e-3, 1e-2, 1e-1])
  risk8 = jaxrdp.dpsgd_tpr(Q, sigma8, STEPS, fprs)
  adv8 = jaxrdp.dpsgd_advantage(Q, sigma8, STEPS)
  mu8 = jaxrdp.risk.gdp_mu(Q, sigma8, STEPS)
  print(f"epsilon = 8 at delta = {DELTA:g}: sigma = {sigma8:.4f}")
  for a, t, lo in zip(fprs, np.asarray(risk8.tpr), np.asarray(risk8.tpr_lower)):
    generic = min(1.0, math.exp(8.0) * a + DELTA)
    print(
      f"  TPR at FPR {a:g}: {t:.4f} (certified interval [{lo:.4f}, {t:.4f}]); "
      f"(8, 1e-5)-DP alone: <= {generic:.4g}"
    )
  print(f"  advantage: {float(adv8.advantage):.4f}; Gaussian-DP estimate mu = {float(mu8.mu):.3f}")

  rows = []
  print(
    f"\nTPR target at FPR {FPR:g} | sigma (risk) | sigma (epsilon route, epsilon) | vs epsilon 8"
  )
  direct = jaxrdp.risk.calibrate_noise_to_tpr(np.array(TARGETS), FPR, Q, STEPS)
  for target, sigma in zip(TARGETS, np.asarray(direct.sigma)):
    eps = math.log((target - DELTA) / FPR)
    via = float(
      jaxrdp.calibrate_noise(
        target_epsilon=eps, delta=DELTA, q=Q, steps=STEPS, accountant="pld"
      ).sigma
    )
    row = dict(
      target_tpr=target,
      sigma_risk=float(sigma),
      epsilon_route=eps,
      sigma_epsilon_route=via,
      noise_saved_vs_epsilon_route=1.0 - float(sigma) / via,
      noise_vs_epsilon_8=float(sigma) / sigma8 - 1.0,
    )
    rows.append(row)
    print(
      f"  {target:.2f} | {sigma:.4f} | {via:.4f} (epsilon {eps:.2f}) | "
      f"{100 * row['noise_vs_epsilon_8']:+.1f}%"
    )
  if args.plot:
    curve = jaxrdp.tradeoff_curve(Q, sigma8, STEPS, jaxrdp.pld.default_fpr_grid(65))
    jaxrdp.risk.plot_tradeoff(curve, args.plot, label=f"MNIST, epsilon = 8 (sigma = {sigma8:.3f})")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(
        dict(
          q=Q,
          steps=STEPS,
          delta=DELTA,
          sigma_epsilon_8=sigma8,
          tpr_epsilon_8=dict(zip(map(str, fprs.tolist()), np.asarray(risk8.tpr).tolist())),
          advantage_epsilon_8=float(adv8.advantage),
          gdp_mu_epsilon_8=float(mu8.mu),
          targets=rows,
        ),
        f,
        indent=1,
      )


if __name__ == "__main__":
  main()
