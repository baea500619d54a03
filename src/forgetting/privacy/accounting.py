"""Calibration and composition of the Gaussian mechanism with Google's ``dp-accounting``.

Why an accountant instead of a formula: the classic σ = Δ·√(2 ln(1.25/δ))/ε is loose (and only
valid for ε < 1), and hand-written composition bounds are a classic source of privacy bugs.
Every ε this module reports comes from ``dp_accounting``'s privacy-loss-distribution (PLD)
accountant, whose discretization is *pessimistic*: the ε it reports is an upper bound on the
true ε of the mechanism. The search for σ keeps that property: it returns a noise multiplier
the accountant itself certifies, never one that merely rounds to the target.

Conventions. A Gaussian release adds N(0, σ²·I) to a vector statistic whose L2 sensitivity is
Δ (the largest L2 distance between its values on two neighbouring data sets — for QSS-DP, data
sets that differ in one label, see :mod:`forgetting.privacy.sensitivity`). Its privacy depends
only on the *noise multiplier* z = σ/Δ: the two output distributions are N(0, σ²) and
N(Δ, σ²) along the direction of the change. ``dp_accounting``'s ``GaussianDpEvent(z)`` under
the ADD_OR_REMOVE_ONE relation is exactly that pair of Gaussians at distance 1 (in units of
σ/z), so it accounts for our replace-one-label relation once Δ is measured over that relation.
"""

from __future__ import annotations

import math
from functools import lru_cache

ACCOUNTANT_INSTALL = "pip install dp-accounting==0.6.0"
VALUE_DISCRETIZATION = 1e-4
"""PLD discretization of the privacy loss (the library default): ε is accurate to ~1e-4."""
RELATIVE_TOLERANCE = 1e-6
"""The calibrated noise multiplier is within this relative distance of the accountant's
smallest admissible one (and always on the admissible side)."""


def _dp_accounting():
    try:
        import dp_accounting
        from dp_accounting.pld import pld_privacy_accountant
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            f"QSS-DP needs Google's dp-accounting; install it with: {ACCOUNTANT_INSTALL}"
        ) from exc
    return dp_accounting, pld_privacy_accountant


def _check_delta(delta: float) -> float:
    delta = float(delta)
    if not (math.isfinite(delta) and 0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return delta


def _check_count(n_releases: int) -> int:
    if isinstance(n_releases, bool) or not isinstance(n_releases, int) or n_releases < 0:
        raise ValueError(f"n_releases must be an int ≥ 0, got {n_releases!r}")
    return n_releases


@lru_cache(maxsize=4096)
def composed_epsilon(noise_multiplier: float, n_releases: int, delta: float) -> float:
    """ε at ``delta`` of ``n_releases`` Gaussian releases, each with multiplier σ/Δ.

    Per the PLD accountant (an upper bound). 0 releases cost nothing (ε = 0); a multiplier of
    0 (no noise) is not private (ε = ∞).
    """
    delta = _check_delta(delta)
    n_releases = _check_count(n_releases)
    z = float(noise_multiplier)
    if not (z >= 0.0):
        raise ValueError(f"noise_multiplier must be ≥ 0, got {noise_multiplier!r}")
    if n_releases == 0 or z == math.inf:
        return 0.0
    if z == 0.0:
        return math.inf
    dpa, pld = _dp_accounting()
    accountant = pld.PLDAccountant(value_discretization_interval=VALUE_DISCRETIZATION)
    accountant.compose(dpa.GaussianDpEvent(z), n_releases)
    return float(accountant.get_epsilon(delta))


@lru_cache(maxsize=1024)
def calibrate_noise_multiplier(epsilon: float, delta: float, n_releases: int = 1) -> float:
    """The smallest noise multiplier z = σ/Δ whose ``n_releases``-fold composition is
    (ε, δ)-DP per the accountant (to :data:`RELATIVE_TOLERANCE`, on the safe side).

    A bisection on z whose upper end is always certified by the PLD accountant. It starts from
    the analytic Gaussian mechanism (Balle & Wang 2018, ``dp_accounting.get_sigma_gaussian``),
    which is exact for Gaussians, so the bracket is tight from the first step: the
    pessimistic PLD needs at most a slightly larger z. The result is certified by both.
    """
    epsilon = float(epsilon)
    if not (math.isfinite(epsilon) and epsilon > 0.0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    delta = _check_delta(delta)
    n_releases = _check_count(n_releases)
    if n_releases == 0:
        raise ValueError("n_releases must be ≥ 1 to calibrate noise")
    dpa, _ = _dp_accounting()
    # n Gaussian releases with multiplier z compose to one with multiplier z/√n (exactly).
    z_analytic = float(dpa.get_sigma_gaussian(epsilon, delta)) * math.sqrt(n_releases)
    lo, hi = z_analytic * (1.0 - RELATIVE_TOLERANCE), z_analytic * (1.0 + 1e-5)
    step = 1e-4
    while composed_epsilon(hi, n_releases, delta) > epsilon:
        lo, hi, step = hi, hi * (1.0 + step), step * 4.0
    step = 1e-4
    while composed_epsilon(lo, n_releases, delta) <= epsilon:
        lo, hi, step = lo * (1.0 - step), lo, step * 4.0
    while (hi - lo) > RELATIVE_TOLERANCE * hi:
        mid = 0.5 * (lo + hi)
        if composed_epsilon(mid, n_releases, delta) <= epsilon:
            hi = mid
        else:
            lo = mid
    # The analytic formula is exact for Gaussians; never go below it even if the PLD's
    # discretization were to land a hair under (it lands at most ~1e-6 above in practice).
    return max(hi, z_analytic)


def calibrate_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest σ (to 1e-6 relative, on the safe side) whose single Gaussian release of a
    statistic with L2 ``sensitivity`` is (ε, δ)-DP per the accountant."""
    sensitivity = float(sensitivity)
    if not (math.isfinite(sensitivity) and sensitivity > 0.0):
        raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity!r}")
    return sensitivity * calibrate_noise_multiplier(epsilon, delta, 1)


def analytic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The analytic Gaussian mechanism's σ (Balle & Wang 2018), for comparison only."""
    dpa, _ = _dp_accounting()
    return float(sensitivity) * float(dpa.get_sigma_gaussian(float(epsilon), _check_delta(delta)))
