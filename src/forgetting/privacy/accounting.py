"""Calibration and composition of the Gaussian mechanism with Google's ``dp-accounting``.

Why an accountant instead of a formula of our own: the classic σ = Δ·√(2 ln(1.25/δ))/ε is
loose (and only valid for ε < 1), and hand-written bounds are a classic source of privacy
bugs. Every ε and σ here comes from ``dp_accounting.gaussian_mechanism``: the *analytic*
Gaussian mechanism (Balle & Wang 2018), the exact ε(δ) of a Gaussian release, computed in
log space — no discretization, tight rather than an upper bound of one, and fast at any ε.

Composition is exact too: a Gaussian release with noise multiplier z is the test between
N(0, 1) and N(1/z, 1), and n of them compose to the test between N(0, 1) and N(√n/z, 1) —
one Gaussian release with multiplier z/√n (Dong, Roth & Su 2019, Gaussian DP). So the ε of
n releases costs O(1) whatever n; a privacy-loss-distribution accountant composing n events
grows with n and, at large ε, with the width of each event's loss distribution.
tests/privacy/test_privacy.py checks both against dp-accounting's PLD accountant, which the exact
values never exceed.

Conventions. A Gaussian release adds N(0, σ²·I) to a vector statistic whose L2 sensitivity is
Δ (the largest L2 distance between its values on two neighbouring data sets — for QSS-DP, data
sets that differ in one label, see :mod:`forgetting.privacy.sensitivity`). Its privacy depends
only on the *noise multiplier* z = σ/Δ: the two output distributions are N(0, σ²) and
N(Δ, σ²) along the direction of the change.
"""

from __future__ import annotations

import math
from functools import lru_cache

ACCOUNTANT_INSTALL = 'pip install "forgetting[privacy]"'
SAFETY_STEP = 1e-9
"""A calibrated multiplier is nudged up by this relative step until the exact ε it gives is
at most the target: the root finder's tolerance must never land on the unsafe side."""


def _gaussian():
    try:
        from dp_accounting import gaussian_mechanism
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            f"QSS-DP needs Google's dp-accounting; install it with: {ACCOUNTANT_INSTALL}"
        ) from exc
    return gaussian_mechanism


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
    """ε at ``delta`` of ``n_releases`` Gaussian releases, each with multiplier σ/Δ: the
    exact ε of one Gaussian release with multiplier z/√n (see the module docstring).

    0 releases cost nothing (ε = 0); a multiplier of 0 (no noise) is not private (ε = ∞).
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
    return float(_gaussian().get_epsilon_gaussian(z / math.sqrt(n_releases), delta))


@lru_cache(maxsize=1024)
def calibrate_noise_multiplier(epsilon: float, delta: float, n_releases: int = 1) -> float:
    """The smallest noise multiplier z = σ/Δ whose ``n_releases``-fold composition is
    (ε, δ)-DP: √n times the analytic Gaussian mechanism's multiplier for (ε, δ), on the safe
    side of the root (checked with :func:`composed_epsilon`, nudged up by
    :data:`SAFETY_STEP` where the root finder's tolerance left it a hair below)."""
    epsilon = float(epsilon)
    if not (math.isfinite(epsilon) and epsilon > 0.0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    delta = _check_delta(delta)
    n_releases = _check_count(n_releases)
    if n_releases == 0:
        raise ValueError("n_releases must be ≥ 1 to calibrate noise")
    z = float(_gaussian().get_sigma_gaussian(epsilon, delta)) * math.sqrt(n_releases)
    while composed_epsilon(z, n_releases, delta) > epsilon:
        z *= 1.0 + SAFETY_STEP
    return z


def calibrate_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest σ (on the safe side) whose single Gaussian release of a statistic with L2
    ``sensitivity`` is (ε, δ)-DP."""
    sensitivity = float(sensitivity)
    if not (math.isfinite(sensitivity) and sensitivity > 0.0):
        raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity!r}")
    return sensitivity * calibrate_noise_multiplier(epsilon, delta, 1)


def analytic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The analytic Gaussian mechanism's σ (Balle & Wang 2018) for one release."""
    gaussian = _gaussian()
    return float(sensitivity) * float(
        gaussian.get_sigma_gaussian(float(epsilon), _check_delta(delta))
    )
