"""Attack risk of DP-SGD in one call: TPR at a given FPR, advantage, trade-off curve, GDP mu.

The accountant (a name or an object, :func:`jaxrdp.accountants.get_accountant`) and
the scheme are read here, once (:func:`resolve_risk_accountant`); below,
``jaxrdp.pld._tradeoff`` (tight, certified, both bounds) and ``jaxrdp.risk._rdp``
(Renyi DP, looser upper bounds) do the work.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.special
import numpy as np
from jax.typing import ArrayLike

from .._core import precision as _precision
from .._core.validation import COUNT, NOISE_MULTIPLIER, PROBABILITY, StaticArray, check_range
from ..accountants._protocol import Accountant, accountant_name, get_accountant
from ..events._dpsgd import dpsgd_event, resolve_scheme
from ..rdp._accountant import RdpAccountant
from ..rdp._dpsgd import _dpsgd_rdp_f64
from ..rdp._rules import as_sgm
from . import _rdp

__all__ = [
  "TprResult",
  "AdvantageResult",
  "TradeoffCurve",
  "GdpMu",
  "dpsgd_tpr",
  "dpsgd_advantage",
  "tradeoff_curve",
  "gdp_mu",
]

_RDP_ORDERS = _rdp.RISK_ORDERS


class TprResult(NamedTuple):
  """The true-positive rate of the most powerful membership test at a given FPR.

  Attributes:
    tpr: certified upper bound (an attacker can do no better).
    tpr_lower: certified lower bound (``accountant="rdp"``: the FPR itself, the
      trivial bound).
  """

  tpr: jax.Array
  tpr_lower: jax.Array


class AdvantageResult(NamedTuple):
  """The membership advantage ``max_alpha [TPR(alpha) - alpha]`` (total variation).

  Attributes:
    advantage: certified upper bound.
    advantage_lower: certified lower bound (``accountant="rdp"``: 0).
  """

  advantage: jax.Array
  advantage_lower: jax.Array


class TradeoffCurve(NamedTuple):
  """The attacker's trade-off curve on a grid of false-positive rates.

  Attributes:
    fpr: the grid ``(G,)``.
    tpr: certified upper bound of the TPR at each FPR (``batch + (G,)``).
    tpr_lower: certified lower bound.
  """

  fpr: jax.Array
  tpr: jax.Array
  tpr_lower: jax.Array

  @property
  def fnr(self) -> jax.Array:
    """``1 - tpr``: a certified lower bound of the trade-off function ``beta(alpha)``."""
    return 1.0 - self.tpr

  @property
  def fnr_upper(self) -> jax.Array:
    """``1 - tpr_lower``: a certified upper bound of ``beta(alpha)``."""
    return 1.0 - self.tpr_lower


class GdpMu(NamedTuple):
  """An *estimate* of the Gaussian-DP ``mu`` that describes the mechanism.

  Attributes:
    mu: from the upper bound of the matched quantity (the riskier side).
    mu_lower: from its lower bound.
  """

  mu: jax.Array
  mu_lower: jax.Array


class RiskAccountant(NamedTuple):
  """How the risk functions read an accountant (from :func:`resolve_risk_accountant`).

  Attributes:
    name: ``"pld"`` (tight, both bounds) or ``"rdp"`` (Renyi DP, upper bounds).
    pld_options: the tight readers' grid limits, ``max_grid_size`` and
      ``memory_limit`` (the :class:`~jaxrdp.accountants.PldAccountant`'s).
    orders: the Renyi orders of the ``"rdp"`` route (finite, float64), else None.
  """

  name: str
  pld_options: dict
  orders: np.ndarray | None


def resolve_risk_accountant(accountant: str | Accountant, sampling: str = "poisson"):
  """The route and settings of the risk functions for ``accountant`` and ``sampling``.

  ``accountant`` is a registered name or an accountant object
  (:func:`jaxrdp.accountants.get_accountant`). A
  :class:`~jaxrdp.accountants.PldAccountant` object lends its ``max_grid_size`` and
  ``memory_limit`` (its ``rtol`` is a relative target for epsilon; the risk's
  accuracy is set by ``atol``); an :class:`~jaxrdp.RdpAccountant` object
  its finite orders (the name ``"rdp"`` uses the 38 orders of
  :data:`jaxrdp.risk._rdp.RISK_ORDERS`, a fifth of the default ones).

  Raises:
    ValueError: an unknown name, a scheme other than Poisson sampling under
      add/remove, or an RdpAccountant with the classic conversion.
    TypeError: an object that is not an accountant.
    NotImplementedError: an accountant of another kind (no privacy profile or Renyi
      curve to read the risk from).
  """
  from ..pld._event_accountant import PldAccountant  # (the tight accountant is large)

  acct = get_accountant(accountant)  # ValueError (name) or TypeError (object)
  sampling, relation = resolve_scheme(sampling, None)  # an unknown name: the schemes listed
  if as_sgm(dpsgd_event(0.5, 1.0, 1.0, sampling=sampling, relation=relation)) is None:
    raise ValueError(
      f"sampling={sampling!r} is not supported by the attack-risk functions: they "
      "account Poisson-sampled Gaussian steps under add/remove (sampling='poisson')"
    )
  if isinstance(acct, PldAccountant):
    options = dict(max_grid_size=acct.max_grid_size, memory_limit=acct.memory_limit)
    return RiskAccountant("pld", options, None)
  if isinstance(acct, RdpAccountant):
    if acct.method != "improved":
      raise ValueError(
        "the attack-risk functions use the improved RDP-to-DP conversion; got an "
        f"RdpAccountant with method={acct.method!r}"
      )
    if isinstance(accountant, str):
      return RiskAccountant("rdp", {}, _RDP_ORDERS)
    orders = np.asarray(acct.orders, dtype=np.float64)
    orders = orders[np.isfinite(orders)]
    if orders.size == 0:
      raise ValueError("the Renyi-DP risk bounds need at least one finite order")
    return RiskAccountant("rdp", {}, orders)
  raise NotImplementedError(
    f"the attack-risk functions read the tight accountant's privacy profile "
    f"(accountant='pld') or the Renyi-DP curve (accountant='rdp'); "
    f"{accountant_name(acct)} is neither"
  )


def _pld_options(route, atol):
  return {**route.pld_options, **({} if atol is None else dict(atol=atol))}


def _check_rdp_options(atol):
  if atol is not None:
    raise ValueError(
      "atol sets the tight accountant's accuracy (accountant='pld'); the Renyi-DP bound "
      "has no such setting: leave atol out"
    )


def _check_rdp(q, sigma, steps):
  PROBABILITY.check("q", q)
  NOISE_MULTIPLIER.check("sigma", sigma)
  COUNT.check("steps", steps)


@functools.partial(jax.jit, static_argnames=("orders_static",))
def _rdp_tpr_f64(q, sigma, steps, fpr, orders, orders_static):
  q, sigma, steps, fpr = jnp.broadcast_arrays(q, sigma, steps, fpr)
  rdp = _dpsgd_rdp_f64(q, sigma, steps, orders, orders_static)
  a = jnp.clip(fpr, 1e-300, 1.0 - 1e-16)
  up = _rdp.tpr_bound(a, rdp, orders)
  up = jnp.where(fpr <= 0.0, 0.0, jnp.where(fpr >= 1.0, 1.0, up))
  return up, jnp.minimum(fpr, up)


@functools.partial(jax.jit, static_argnames=("orders_static",))
def _rdp_advantage_f64(q, sigma, steps, orders, orders_static):
  q, sigma, steps = jnp.broadcast_arrays(q, sigma, steps)
  rdp = _dpsgd_rdp_f64(q, sigma, steps, orders, orders_static)
  return _rdp.advantage_bound(rdp, orders)


def _rdp_orders(route):
  return jnp.asarray(route.orders), StaticArray(route.orders)


def dpsgd_tpr(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  fpr: ArrayLike,
  *,
  accountant: str | Accountant = "pld",
  sampling: str = "poisson",
  atol: float | None = None,
) -> TprResult:
  r"""True-positive rate of the best membership-inference attack on DP-SGD at a given FPR.

  For ``steps`` Poisson-sampled Gaussian steps (rate ``q``, noise multiplier
  ``sigma``), the most powerful test of "this example was in the batch
  draws" against "it was not", at false-positive rate ``fpr = alpha``, has

  .. math:: \mathrm{TPR}(\alpha) = \min_{\varepsilon}\,[\delta(\varepsilon) + e^\varepsilon \alpha],

  the larger of the two adjacency directions (Dong, Roth, Su 2019,
  arXiv:1905.02383, Prop. 2.12; Kulynych et al. 2024, arXiv:2407.02191).
  Any attack, with any auxiliary knowledge, has at most this TPR at this FPR.

  Args:
    q: Poisson sampling rate in [0, 1].
    sigma: noise multiplier, > 0.
    steps: number of steps (a whole number; at most 1e7 with ``"pld"``).
    fpr: false-positive rate in [0, 1]. All four broadcast.
    accountant: a name or an accountant object. ``"pld"`` (default) or a
      :class:`~jaxrdp.accountants.PldAccountant`: tight, from the privacy-loss
      distribution, with certified upper and lower bounds (:func:`jaxrdp.pld.pld_tpr`;
      the object's ``max_grid_size`` and ``memory_limit`` are used, its ``rtol``, an
      epsilon target, is not); ``"rdp"`` or an :class:`~jaxrdp.RdpAccountant`: a
      certified upper bound from the Renyi curve (far looser, and faster on large
      grids; the lower bound is the FPR itself), over 38 orders for the name and the
      object's own finite orders for an object.
    sampling: ``"poisson"`` only (other batching schemes raise ValueError).
    atol: the tight accountant's target absolute error of the TPR (default ``1e-6``,
      in [1e-9, 0.01]; ValueError with the Renyi-DP accountant).

  Raises:
    ValueError: an argument out of its range, an unknown accountant name, or another
      scheme.
    TypeError: an ``accountant`` that is neither a name nor an accountant object
      (and, as for any function, an unknown keyword argument).
    NotImplementedError: an accountant of another kind.

  Returns:
    :class:`~jaxrdp.risk.TprResult` ``(tpr, tpr_lower)`` of the broadcast shape.

  Examples:
    >>> import jaxrdp
    >>> r = jaxrdp.dpsgd_tpr(256 / 60000, 1.1, 14063, 0.01)
    >>> round(float(r.tpr), 4)
    0.0402
    >>> round(float(jaxrdp.dpsgd_tpr(256 / 60000, 1.1, 14063, 0.01, accountant="rdp").tpr), 4)
    0.049
  """
  route = resolve_risk_accountant(accountant, sampling)
  if route.name == "pld":
    from ..pld import _tradeoff

    r = _tradeoff.pld_tpr(q, sigma, steps, fpr, **_pld_options(route, atol))
    return TprResult(r.tpr, r.tpr_lower)
  _check_rdp_options(atol)
  _check_rdp(q, sigma, steps)
  check_range("fpr", fpr, lower=0.0, upper=1.0)
  orders, static = _rdp_orders(route)
  up, low = _precision.elementwise_float64(
    lambda q, s, t, a: _rdp_tpr_f64(q, s, t, a, orders, static), (q, sigma, steps, fpr)
  )
  return TprResult(up, low)


def dpsgd_advantage(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  *,
  accountant: str | Accountant = "pld",
  sampling: str = "poisson",
  atol: float | None = None,
) -> AdvantageResult:
  r"""Membership advantage of DP-SGD: ``max_alpha [TPR(alpha) - alpha]``.

  The largest gap between the true- and false-positive rates of any
  membership test, the total variation distance between the outputs with and
  without one example, ``delta(epsilon = 0)`` (Kulynych et al. 2024,
  arXiv:2407.02191, Sec. 2; Yeom et al. 2018, arXiv:1709.01604). Arguments as in
  :func:`~jaxrdp.dpsgd_tpr`.

  Returns:
    :class:`~jaxrdp.risk.AdvantageResult` ``(advantage, advantage_lower)``.

  Examples:
    >>> import jaxrdp
    >>> round(float(jaxrdp.dpsgd_advantage(256 / 60000, 1.1, 14063).advantage), 4)
    0.2245
  """
  route = resolve_risk_accountant(accountant, sampling)
  if route.name == "pld":
    from ..pld import _tradeoff

    r = _tradeoff.pld_advantage(q, sigma, steps, **_pld_options(route, atol))
    return AdvantageResult(r.advantage, r.advantage_lower)
  _check_rdp_options(atol)
  _check_rdp(q, sigma, steps)
  orders, static = _rdp_orders(route)
  up = _precision.elementwise_float64(
    lambda q, s, t: _rdp_advantage_f64(q, s, t, orders, static), (q, sigma, steps)
  )
  return AdvantageResult(up, jnp.zeros_like(up))


def tradeoff_curve(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  fpr: ArrayLike | None = None,
  *,
  accountant: str | Accountant = "pld",
  sampling: str = "poisson",
  atol: float | None = None,
) -> TradeoffCurve:
  """The trade-off curve of DP-SGD (the best attack's TPR against its FPR) on a grid.

  The curve is the larger of the two adjacency directions' TPR at each FPR,
  ``1 - min(T(mu0, mu), T(mu, mu0))`` in the f-DP notation of Dong, Roth, Su
  (2019, arXiv:1905.02383): symmetric, and equal to their symmetrized trade-off
  function except on its slope -1 segment near ``TPR = 1 - FPR``, where theirs
  is the convex envelope ``FPR + advantage``. With ``accountant="pld"`` one
  composition per direction is read at every FPR.

  Args:
    q, sigma, steps: as in :func:`~jaxrdp.dpsgd_tpr`; they broadcast to a batch shape.
    fpr: 1-D grid of false-positive rates in [0, 1]; default 129 points from
      1e-6 to 1 (:func:`jaxrdp.pld.default_fpr_grid`).
    accountant, sampling, atol: as in :func:`~jaxrdp.dpsgd_tpr`.

  Returns:
    :class:`~jaxrdp.risk.TradeoffCurve` ``(fpr, tpr, tpr_lower)``, the bounds of shape
    ``batch + (G,)``; ``fnr`` and ``fnr_upper`` give the trade-off function.

  Examples:
    >>> import jaxrdp
    >>> c = jaxrdp.tradeoff_curve(256 / 60000, 1.1, 14063, [1e-3, 1e-2, 1e-1])
    >>> [round(float(x), 3) for x in c.tpr]
    [0.006, 0.04, 0.24]
  """
  route = resolve_risk_accountant(accountant, sampling)
  from ..pld import _tradeoff

  grid = _tradeoff.default_fpr_grid() if fpr is None else fpr
  if route.name == "pld":
    c = _tradeoff.pld_tradeoff(q, sigma, steps, grid, **_pld_options(route, atol))
    return TradeoffCurve(c.fpr, c.tpr, c.tpr_lower)
  _check_rdp_options(atol)
  if np.ndim(grid) != 1 or np.shape(grid)[0] == 0:
    raise ValueError(f"fpr must be a non-empty 1-D grid, got shape {np.shape(grid)}")
  _check_rdp(q, sigma, steps)
  check_range("fpr", grid, lower=0.0, upper=1.0)
  g = np.asarray(grid, dtype=np.float64)
  expand = [jnp.expand_dims(jnp.asarray(x), -1) for x in (q, sigma, steps)]
  up, low = dpsgd_tpr(*expand, g, accountant=accountant)
  return TradeoffCurve(g, up, low)


def _ndtri(p):
  return jax.scipy.special.ndtri(p)


def gdp_mu(
  q: ArrayLike,
  sigma: ArrayLike,
  steps: ArrayLike,
  *,
  fpr: ArrayLike | None = None,
  accountant: str | Accountant = "pld",
  sampling: str = "poisson",
) -> GdpMu:
  r"""An estimate of the Gaussian-DP ``mu`` that describes DP-SGD's attack risk.

  DP-SGD is not exactly ``mu``-GDP (Dong, Roth, Su 2019, arXiv:1905.02383,
  Def. 2.6: ``TPR(alpha) = Phi(Phi^-1(alpha) + mu)``); this is the ``mu`` whose
  Gaussian curve passes through one point of the certified curve, so the two
  agree there and may differ elsewhere (at small FPRs the true curve is often
  above the Gaussian one). It is a summary, **not** a guarantee:

  * ``fpr=None`` (default): the advantage is matched,
    ``mu = 2 Phi^-1((1 + advantage) / 2)``;
  * ``fpr=alpha``: the TPR at that FPR is matched,
    ``mu = Phi^-1(TPR(alpha)) - Phi^-1(alpha)``.

  Args:
    q, sigma, steps: as in :func:`~jaxrdp.dpsgd_tpr`.
    fpr: the FPR to match in (0, 1), or None for the advantage.
    accountant, sampling: as in :func:`~jaxrdp.dpsgd_tpr`.

  Returns:
    :class:`~jaxrdp.risk.GdpMu` ``(mu, mu_lower)`` from the upper and the lower bound.

  Examples:
    >>> import jaxrdp.risk
    >>> round(float(jaxrdp.risk.gdp_mu(256 / 60000, 1.1, 14063).mu), 3)
    0.57
  """
  if fpr is None:
    r = dpsgd_advantage(q, sigma, steps, accountant=accountant, sampling=sampling)
    with _precision.x64_context():
      up, low = (jnp.asarray(x, jnp.float64) for x in r)
      return GdpMu(2.0 * _ndtri(0.5 * (1.0 + up)), 2.0 * _ndtri(0.5 * (1.0 + low)))
  check_range("fpr", fpr, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
  r = dpsgd_tpr(q, sigma, steps, fpr, accountant=accountant, sampling=sampling)
  with _precision.x64_context():
    z = _ndtri(jnp.asarray(fpr, jnp.float64))
    up, low = (jnp.asarray(x, jnp.float64) for x in r)
    return GdpMu(_ndtri(up) - z, _ndtri(low) - z)
