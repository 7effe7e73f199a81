"""Classical (epsilon, delta)-DP tools: Gaussian and Laplace calibration, composition, subsampling.

Sources:

* Yu-Xiang Wang, lecture notes 6 ("Advanced composition, Gaussian
  mechanism").
* Y. Pei, "A Tail of Two Densities" (2019 blog post, part 1), Claims 9, 10,
  14, 17, 18 and 19.
* C. Dwork, A. Roth, The Algorithmic Foundations of Differential Privacy (2014),
  Theorems 3.16, 3.20 and A.1.

Sensitivity is 1 throughout; scale ``sigma`` (or the Laplace scale) by the
sensitivity otherwise.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.numerics import log1p_rate_expm1
from .._core.validation import (
  DELTA,
  EPSILON,
  PROBABILITY,
  Interval,
  all_hold,
  check_all,
)

__all__ = [
  "EpsilonDelta",
  "classical_gaussian_sigma",
  "gaussian_tail_delta",
  "gaussian_tail_sigma",
  "laplace_scale",
  "basic_composition",
  "advanced_composition",
  "advanced_composition_capped_kl",
  "amplify_by_subsampling",
]

_LOG_2PI = 1.8378770664093453  # log(2 pi)


class EpsilonDelta(NamedTuple):
  """An ``(epsilon, delta)``-DP guarantee (a pytree of two arrays)."""

  epsilon: jax.Array
  delta: jax.Array


# Valid ranges besides the shared ones of jaxrdp._core.validation, stated once: the
# eager check (ValueError) and the traced NaN mask both come from them.
_POSITIVE = Interval(0.0, lower_open=True)  # a finite x > 0
_UNIT_EPSILON = Interval(0.0, 1.0, lower_open=True)  # (0, 1], the classical theorem's domain
_COUNT = Interval(0.0)  # a number of mechanisms k: finite, >= 0


def _theorem(formula, *args, **static):
  """``formula`` on float64 arguments, NaN where a traced one leaves its range.

  ``args``: ``(name, value, Interval)`` triples in the formula's argument order;
  concrete values outside their interval raise ValueError naming them first. The
  result (an array or an :class:`EpsilonDelta`) is finalized for the caller as by
  ``Float64Scope``.
  """
  check_all(args)
  with _precision.Float64Scope() as scope:
    xs = [_precision.as_float64(x) for _, x, _ in args]
    out = formula(*xs, **static)
    invalid = ~all_hold(zip(xs, (interval for _, _, interval in args)))
    out = jax.tree.map(lambda o: jnp.where(invalid, jnp.nan, o), out)
  return scope.finalize(out)


def _check_kind(name, value, allowed):
  if value not in allowed:
    raise ValueError(f"{name} must be one of {sorted(allowed)}; got {value!r}")


def classical_gaussian_sigma(epsilon: ArrayLike, delta: ArrayLike) -> jax.Array:
  r"""Classical Gaussian-mechanism calibration: ``sigma = sqrt(2 log(1.25/delta)) / epsilon``.

  Valid (the mechanism is ``(epsilon, delta)``-DP) for ``0 < epsilon <= 1``
  and ``0 < delta < 1``. For ``epsilon > 1`` the theorem does not apply; use
  :func:`jaxrdp.mechanisms.analytic_gaussian_sigma`, which is exact for every epsilon
  and never larger.

  Args:
    epsilon: target epsilon, in ``(0, 1]``.
    delta: target delta, in ``(0, 1)``.

  Returns:
    float64 array of the broadcast shape. Traced out-of-range inputs give NaN.

  Raises:
    ValueError: for concrete ``epsilon`` outside ``(0, 1]``, ``delta``
      outside ``(0, 1)`` or NaN.

  References:
    Wang, lecture notes 6, "Classical Gaussian mechanism"; Dwork and Roth (2014), Thm A.1.

  Examples:
    >>> import jaxrdp
    >>> round(float(jaxrdp.classical.classical_gaussian_sigma(1.0, 1e-5)), 6)
    4.844805
  """
  # Domain of the classical theorem (Dwork and Roth 2014, Thm A.1).
  return _theorem(
    lambda epsilon, delta: jnp.sqrt(2.0 * jnp.log(1.25 / delta)) / epsilon,
    ("epsilon", epsilon, _UNIT_EPSILON),
    ("delta", delta, DELTA),
  )


def gaussian_tail_delta(epsilon: ArrayLike, sigma: ArrayLike) -> jax.Array:
  r"""Tail-bound delta of the Gaussian mechanism, Pei 2019 eq. (6.8).

  .. math:: \delta = \exp\left(-\tfrac12 (\epsilon\sigma - \tfrac{1}{2\sigma})^2\right)

  The privacy loss of the Gaussian mechanism is ``N(eta, 2 eta)`` with
  ``eta = 1/(2 sigma^2)``, so ``P(L > epsilon) = P(xi > t)`` with
  ``t = epsilon sigma - 1/(2 sigma)`` and the Chernoff bound
  ``P(xi > t) < exp(-t^2/2)`` (Pei 2019 eq. (6.5)) gives (6.8). It needs
  ``t > 0``; where ``t <= 0`` this returns ``1`` (a trivially valid delta).
  Always at least the exact delta (:func:`jaxrdp.mechanisms.analytic_gaussian_delta`).

  Args:
    epsilon: epsilon, ``>= 0``.
    sigma: noise multiplier, ``> 0``.

  Returns:
    float64 array of the broadcast shape. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete ``epsilon < 0``, ``sigma <= 0`` or NaN.

  References:
    Pei 2019, Claim 9, eq. (6.8).

  Examples:
    >>> import jaxrdp
    >>> round(float(jaxrdp.classical.gaussian_tail_delta(1.0, 5.0)), 8)
    6.11e-06
  """
  return _theorem(_tail_delta, ("epsilon", epsilon, EPSILON), ("sigma", sigma, _POSITIVE))


def _tail_delta(epsilon, sigma):
  t = epsilon * sigma - 0.5 / sigma
  return jnp.where(t > 0, jnp.exp(-0.5 * t**2), 1.0)


# Names of the bounds, with their equation numbers in Pei 2019, Claim 9.
_TAIL_BOUNDS = {
  "chernoff": "6.8",
  "chernoff_split": "6.81",
  "mills_split": "6.82",
  "chernoff_concave": "6.83",
  "mills_concave": "6.84",
}


def gaussian_tail_sigma(epsilon: ArrayLike, delta: ArrayLike, bound: str = "chernoff") -> jax.Array:
  r"""Gaussian-mechanism calibrations from tail bounds, Pei 2019 Claim 9.

  Each returns a threshold: any ``sigma`` above it makes the Gaussian
  mechanism ``(epsilon, delta)``-DP, for every ``epsilon > 0``. With
  ``t = epsilon sigma - 1/(2 sigma)``:

  * ``"chernoff"`` (eq. (6.8)): the exact inverse of (6.8), i.e. the root of
    ``t = sqrt(2 log(1/delta))`` (Pei 2019 (6.91)):
    ``sigma = (c + sqrt(c^2 + 2 epsilon)) / (2 epsilon)``, ``c = sqrt(2 log(1/delta))``.
  * ``"chernoff_split"`` (eq. (6.81)): ``sigma = sqrt(2 log(1/delta)) / epsilon + (2 epsilon)^(-1/2)``
    (from (6.91) with ``sqrt(a + b) <= sqrt(a) + sqrt(b)``).
  * ``"mills_split"`` (eq. (6.82)): ``sigma = max(1, sqrt((log(1/(2 pi delta^2)))_+)) / epsilon + (2 epsilon)^(-1/2)``.
  * ``"chernoff_concave"`` (eq. (6.83)): ``sigma = sqrt(log(e^epsilon / delta^2)) / epsilon``
    (from (6.91) by concavity of the square root).
  * ``"mills_concave"`` (eq. (6.84)): ``sigma = max(sqrt(1 + epsilon), sqrt((log(e^epsilon / (2 pi delta^2)))_+)) / epsilon``.

  (6.8), (6.81) and (6.83) rest on the Chernoff bound
  ``P(xi > t) < exp(-t^2/2)``; (6.82) and (6.84) on the Mills-ratio bound
  ``P(xi > t) < exp(-t^2/2) / (sqrt(2 pi) t)`` with ``t > 1``. (The post's
  proof swaps the labels (6.3) and (6.5) of these two bounds; the formulas
  above are the ones its equations state.)

  Args:
    epsilon: target epsilon, ``> 0``.
    delta: target delta, in ``(0, 1)``.
    bound: one of ``"chernoff"`` (default), ``"chernoff_split"``, ``"mills_split"``,
      ``"chernoff_concave"``, ``"mills_concave"`` (static).

  Returns:
    float64 array of the broadcast shape. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete ``epsilon <= 0``, ``delta`` outside ``(0, 1)``,
      NaN, or an unknown ``bound``.

  References:
    Pei 2019, Claim 9, eqs. (6.8), (6.81) to (6.84), and (6.91) to (6.95).

  Examples:
    >>> import jaxrdp
    >>> round(float(jaxrdp.classical.gaussian_tail_sigma(1.0, 1e-5, "chernoff_concave")), 6)
    4.901617
  """
  _check_kind("bound", bound, tuple(_TAIL_BOUNDS))
  return _theorem(
    _tail_sigma, ("epsilon", epsilon, _POSITIVE), ("delta", delta, DELTA), bound=bound
  )


def _tail_sigma(epsilon, delta, bound):
  log_inv_delta = -jnp.log(delta)
  if bound == "chernoff":
    c = jnp.sqrt(2.0 * log_inv_delta)
    return (c + jnp.sqrt(c**2 + 2.0 * epsilon)) / (2.0 * epsilon)
  if bound == "chernoff_split":
    return jnp.sqrt(2.0 * log_inv_delta) / epsilon + jnp.sqrt(0.5 / epsilon)
  if bound == "mills_split":
    # log((2 pi)^-1 delta^-2), clipped at 0 by (.)_+ (Pei 2019 (6.95)).
    c = jnp.sqrt(jnp.maximum(2.0 * log_inv_delta - _LOG_2PI, 0.0))
    return jnp.maximum(1.0, c) / epsilon + jnp.sqrt(0.5 / epsilon)
  if bound == "chernoff_concave":
    return jnp.sqrt(epsilon + 2.0 * log_inv_delta) / epsilon
  # "mills_concave"
  c = jnp.sqrt(jnp.maximum(epsilon + 2.0 * log_inv_delta - _LOG_2PI, 0.0))
  return jnp.maximum(jnp.sqrt(1.0 + epsilon), c) / epsilon


def laplace_scale(epsilon: ArrayLike) -> jax.Array:
  r"""Scale of the Laplace mechanism that is ``epsilon``-DP: ``b = 1 / epsilon``.

  Any ``b >= 1/epsilon`` works (Pei 2019, Claim (1.5)); the pure-DP epsilon of
  scale ``b`` is ``1/b``. ``epsilon = 0`` gives ``inf``.

  Args:
    epsilon: target epsilon, ``>= 0``.

  Returns:
    float64 array. Traced invalid inputs give NaN.

  Raises:
    ValueError: for concrete ``epsilon < 0`` or NaN.

  References:
    Pei 2019, Laplace mechanism claim (1.5); Dwork and Roth (2014), Thm 3.6.

  Examples:
    >>> import jaxrdp
    >>> float(jaxrdp.classical.laplace_scale(0.5))
    2.0
  """
  return _theorem(lambda epsilon: 1.0 / epsilon, ("epsilon", epsilon, EPSILON))


def basic_composition(epsilon: ArrayLike, delta: ArrayLike, k: ArrayLike = 1) -> EpsilonDelta:
  r"""Basic composition of ``k`` ``(epsilon, delta)``-DP mechanisms: ``(k epsilon, k delta)``.

  Holds for adaptive composition. For mechanisms with different parameters,
  sum them (``(sum eps_i, sum delta_i)``); this function is the homogeneous
  case, vectorized over all arguments. ``delta`` is not clipped at 1.

  Args:
    epsilon: per-mechanism epsilon, ``>= 0``.
    delta: per-mechanism delta, in ``[0, 1]``.
    k: number of mechanisms, ``>= 0`` (need not be an integer array).

  Returns:
    :class:`EpsilonDelta` of broadcast-shape float64 arrays.

  Raises:
    ValueError: for concrete negative or NaN inputs, or ``delta > 1``.

  References:
    Pei 2019, Claim 10 (Dwork-Lei 2009; Dwork and Roth 2014, Thm 3.16).

  Examples:
    >>> import jaxrdp
    >>> r = jaxrdp.classical.basic_composition(0.1, 1e-6, 10)
    >>> round(float(r.epsilon), 12), round(float(r.delta), 18)
    (1.0, 1e-05)
  """
  return _theorem(
    lambda epsilon, delta, k: EpsilonDelta(k * epsilon, k * delta),
    ("epsilon", epsilon, EPSILON),
    ("delta", delta, PROBABILITY),
    ("k", k, _COUNT),
  )


_KL_BOUNDS = ("dwork_roth", "two_epsilon_squared", "bun_steinke", "tanh")


def _kl_bound(epsilon, kind):
  # Bounds on D(P||Q) for P, Q with |log(p/q)| <= epsilon (Wang, lecture notes 6,
  # "Improved bounds of the KL-divergence").
  if kind == "dwork_roth":
    return epsilon * jnp.expm1(epsilon)
  if kind == "two_epsilon_squared":
    return 2.0 * epsilon**2
  if kind == "bun_steinke":
    return 0.5 * epsilon**2
  return epsilon * jnp.tanh(0.5 * epsilon)


def advanced_composition(
  epsilon: ArrayLike,
  delta: ArrayLike,
  k: ArrayLike,
  delta_prime: ArrayLike,
  *,
  kl_bound: str = "tanh",
) -> EpsilonDelta:
  r"""Advanced composition of ``k`` adaptively chosen ``(epsilon, delta)``-DP mechanisms.

  .. math::
      \tilde\epsilon = \epsilon\sqrt{2k\log(1/\delta')} + k\,\mathrm{KL}(\epsilon),
      \qquad \tilde\delta = k\delta + \delta'

  where ``KL(epsilon)`` bounds the KL divergence between two distributions
  whose log-ratio is at most ``epsilon`` (Wang, lecture notes 6, "Improved bounds of the
  KL-divergence"; the ``sqrt`` term is Azuma-Hoeffding on the summed privacy
  losses):

  * ``"dwork_roth"``: ``epsilon (e^epsilon - 1)`` (Dwork, Rothblum, Vadhan
    2010; Dwork and Roth 2014, Thm 3.20);
  * ``"two_epsilon_squared"``: ``2 epsilon^2``, the clean form stated in Wang, lecture notes 6;
  * ``"bun_steinke"``: ``epsilon^2 / 2`` (Bun and Steinke 2016);
  * ``"tanh"``: ``epsilon tanh(epsilon/2)``, the tight bound (Wang, lecture notes 6, after
    A. Smith; attained by randomized response). The default, and never larger
    than the others.

  Args:
    epsilon: per-mechanism epsilon, ``>= 0``.
    delta: per-mechanism delta, in ``[0, 1]``.
    k: number of mechanisms, ``>= 0``.
    delta_prime: the extra delta spent by the composition, in ``(0, 1)``.
    kl_bound: which KL bound, see above (static).

  Returns:
    :class:`EpsilonDelta` of broadcast-shape float64 arrays.

  Raises:
    ValueError: for concrete out-of-range or NaN inputs, or unknown ``kl_bound``.

  References:
    Wang, lecture notes 6, "Recap: Advanced Composition" and "Improved bounds of the
    KL-divergence"; C. Dwork, G. Rothblum, S. Vadhan, Boosting and
    Differential Privacy, FOCS 2010; Dwork and Roth (2014), Thm 3.20.

  Examples:
    >>> import jaxrdp
    >>> r = jaxrdp.classical.advanced_composition(0.1, 0.0, 100, 1e-5, kl_bound="bun_steinke")
    >>> round(float(r.epsilon), 6)  # 0.1 * sqrt(200 log 1e5) + 100 * 0.005
    5.298526
  """
  _check_kind("kl_bound", kl_bound, _KL_BOUNDS)
  return _theorem(
    _advanced,
    ("epsilon", epsilon, EPSILON),
    ("delta", delta, PROBABILITY),
    ("k", k, _COUNT),
    ("delta_prime", delta_prime, DELTA),
    kl_bound=kl_bound,
  )


def _advanced(epsilon, delta, k, delta_prime, kl_bound):
  eps_total = epsilon * jnp.sqrt(2.0 * k * -jnp.log(delta_prime)) + k * _kl_bound(epsilon, kl_bound)
  return EpsilonDelta(eps_total, k * delta + delta_prime)


def _a_of_epsilon(epsilon):
  # Pei 2019 (6.98): a(eps) = eps (e^eps - 1) if eps <= log 2 else eps, which is
  # min(eps (e^eps - 1), eps): a bound on both KL divergences of an eps-DP pair.
  return jnp.where(epsilon <= jnp.log(2.0), epsilon * jnp.expm1(epsilon), epsilon)


def advanced_composition_capped_kl(
  epsilon: ArrayLike, delta: ArrayLike, k: ArrayLike, beta: ArrayLike, *, adaptive: bool = False
) -> EpsilonDelta:
  r"""Advanced composition with the capped KL bound min(eps (e^eps - 1), eps) (Pei 2019, Claims 17, 18).

  With ``a(epsilon) = epsilon (e^epsilon - 1)`` for ``epsilon <= log 2`` and
  ``epsilon`` otherwise (Pei 2019 (6.98)):

  * independent composition (Claim 17, via Hoeffding, Claim 14):
    ``(k a(eps) + sqrt(2 k log(1/beta)) eps, k delta + beta)``;
  * adaptive composition (Claim 18, via Azuma with increments bounded by
    ``eps + a(eps)``, Claim 16):
    ``(k a(eps) + sqrt(2 k log(1/beta)) (eps + a(eps)), k delta + beta)``.

  Args:
    epsilon: per-mechanism epsilon, ``>= 0``.
    delta: per-mechanism delta, in ``[0, 1]``.
    k: number of mechanisms, ``>= 0``.
    beta: the extra delta spent by the composition, in ``(0, 1)``.
    adaptive: use Claim 18 (adaptive) instead of Claim 17 (static).

  Returns:
    :class:`EpsilonDelta` of broadcast-shape float64 arrays.

  Raises:
    ValueError: for concrete out-of-range or NaN inputs.

  References:
    Pei 2019, eq. (6.98), Claims 14, 16, 17 and 18.

  Examples:
    >>> import jaxrdp
    >>> r = jaxrdp.classical.advanced_composition_capped_kl(0.1, 0.0, 100, 1e-5)
    >>> round(float(r.epsilon), 6)
    5.850235
  """
  return _theorem(
    _capped_kl,
    ("epsilon", epsilon, EPSILON),
    ("delta", delta, PROBABILITY),
    ("k", k, _COUNT),
    ("beta", beta, DELTA),
    adaptive=adaptive,
  )


def _capped_kl(epsilon, delta, k, beta, adaptive):
  a = _a_of_epsilon(epsilon)
  spread = epsilon + a if adaptive else epsilon
  eps_total = k * a + jnp.sqrt(2.0 * k * -jnp.log(beta)) * spread
  return EpsilonDelta(eps_total, k * delta + beta)


def amplify_by_subsampling(epsilon: ArrayLike, delta: ArrayLike, rate: ArrayLike) -> EpsilonDelta:
  r"""Privacy amplification by subsampling: ``(log(1 + r (e^eps - 1)), r delta)``.

  An ``(epsilon, delta)``-DP mechanism run on a random subsample that
  contains each record with probability ``r`` is
  ``(log(1 + r (e^epsilon - 1)), r delta)``-DP. Computed as
  ``log1p(r expm1(epsilon))`` (no loss of precision for small ``r`` or
  ``epsilon``), and without ``e^epsilon`` where that would overflow.

  Args:
    epsilon: epsilon of the mechanism, ``>= 0``.
    delta: delta of the mechanism, in ``[0, 1]``.
    rate: subsampling rate ``r``, in ``[0, 1]``.

  Returns:
    :class:`EpsilonDelta` of broadcast-shape float64 arrays.

  Raises:
    ValueError: for concrete out-of-range or NaN inputs.

  References:
    Pei 2019, Claim 19 (Ullman 2017); Kasiviswanathan et al. (2011).

  Examples:
    >>> import jaxrdp
    >>> r = jaxrdp.classical.amplify_by_subsampling(1.0, 1e-5, 0.01)
    >>> round(float(r.epsilon), 8), round(float(r.delta), 15)
    (0.01703686, 1e-07)
  """
  return _theorem(
    _amplified,
    ("epsilon", epsilon, EPSILON),
    ("delta", delta, PROBABILITY),
    ("rate", rate, PROBABILITY),
  )


def _amplified(epsilon, delta, rate):
  # log(1 + rate (e^eps - 1)), formed without e^eps where it would overflow (eps > 709);
  # at rate 0 with epsilon = inf the product would be 0 * inf: sanitize it.
  rate_s = jnp.where(rate > 0, rate, 1.0)
  eps_amp = jnp.where(rate > 0, log1p_rate_expm1(rate_s, epsilon), 0.0)
  return EpsilonDelta(eps_amp, rate * delta)
