"""QSS-DP building blocks: calibration against the accountant, keyed noise, sensitivity.

The calibration is checked against dp-accounting itself (the PLD accountant it was searched
with, and the exact analytic Gaussian mechanism); the sensitivity bound is checked on the
statistics the real estimator stores, by changing one label and measuring the fold sums.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from forgetting.content.accumulators import (
    REGRESSION_SCALE_BITS,
    Accumulators,
    quantize_residuals,
)
from forgetting.content.materialize import build_content
from forgetting.privacy import (
    PrivacyLedger,
    calibrate_noise_multiplier,
    calibrate_sigma,
    check_privacy_params,
    clip_residuals,
    composed_epsilon,
    label_sensitivity,
    noise_fold_sums,
    public_state_digest,
    standard_normal,
)

KEY = bytes(range(32))
DELTA = 1e-5


@pytest.fixture
def dpa():
    """Google's accountant (the ``privacy`` extra); the noise and bounds tests run without it."""
    return pytest.importorskip("dp_accounting")


# -- calibration ---------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_calibrated_sigma_is_the_accountants_smallest(dpa, epsilon):
    sensitivity = math.sqrt(2 * 3)
    sigma = calibrate_sigma(epsilon, DELTA, sensitivity)
    z = sigma / sensitivity
    # certified by the PLD accountant and by the analytic (exact) Gaussian formula ...
    assert composed_epsilon(z, 1, DELTA) <= epsilon
    assert dpa.get_epsilon_gaussian(z, DELTA) <= epsilon + 1e-9
    # ... and minimal: 0.01 % less noise is no longer (ε, δ)-DP
    assert composed_epsilon(z * (1 - 1e-4), 1, DELTA) > epsilon
    assert dpa.get_epsilon_gaussian(z * (1 - 1e-4), DELTA) > epsilon
    analytic = sensitivity * dpa.get_sigma_gaussian(epsilon, DELTA)
    assert analytic <= sigma <= analytic * (1 + 1e-5)


def test_composition_of_p_releases_matches_one_gaussian(dpa):
    z1 = calibrate_noise_multiplier(1.0, DELTA, 1)
    z3 = calibrate_noise_multiplier(1.0, DELTA, 3)
    # three Gaussians with multiplier z compose to one with z/√3
    assert z3 == pytest.approx(math.sqrt(3) * z1, rel=1e-5)
    assert composed_epsilon(z3, 3, DELTA) <= 1.0
    assert composed_epsilon(z3, 6, DELTA) > 1.0  # a second model state costs budget
    assert composed_epsilon(z3, 0, DELTA) == 0.0
    assert composed_epsilon(0.0, 1, DELTA) == math.inf


def test_composition_is_exact_and_tighter_than_the_pld_accountant(dpa):
    """n releases compose to one Gaussian of multiplier z/√n: the ε reported is the exact
    analytic Gaussian's, never above the PLD accountant's pessimistic bound and close to it."""
    from dp_accounting.pld import pld_privacy_accountant

    for z, n in ((6.46, 3), (1.04, 12), (0.26, 5)):
        accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        accountant.compose(dpa.GaussianDpEvent(z), n)
        pld = accountant.get_epsilon(DELTA)
        exact = composed_epsilon(z, n, DELTA)
        assert exact == pytest.approx(dpa.get_epsilon_gaussian(z / math.sqrt(n), DELTA))
        assert exact <= pld * (1 + 1e-9) + 1e-9 and pld <= exact * (1 + 1e-3) + 1e-3


@pytest.mark.parametrize("epsilon", [1.0, 8.0, 50.0])
def test_calibration_and_composition_cost_one_accountant_call_at_any_n(dpa, epsilon, monkeypatch):
    """Composition is O(1) in the number of releases: one call of the analytic Gaussian's ε
    for n = 3, 300 or 100,000 (a PLD composition per release took a minute), and
    calibration a bounded number of calls. Counted, not timed."""
    from forgetting.privacy import accounting

    calls = []

    class Counted:
        def get_epsilon_gaussian(self, z, delta):
            calls.append("epsilon")
            return dpa.get_epsilon_gaussian(z, delta)

        def get_sigma_gaussian(self, eps, delta):
            calls.append("sigma")
            return dpa.get_sigma_gaussian(eps, delta)

    monkeypatch.setattr(accounting, "_gaussian", Counted)
    accounting.composed_epsilon.cache_clear()
    accounting.calibrate_noise_multiplier.cache_clear()
    z = calibrate_noise_multiplier(epsilon, DELTA, 3)
    assert calls.count("sigma") == 1 and len(calls) <= 10  # the root, then a few safety steps
    for n in (3, 300, 100_000):
        calls.clear()
        composed_epsilon(z, n + 1, DELTA)
        assert calls == ["epsilon"]
    assert composed_epsilon(z, 3, DELTA) <= epsilon
    accounting.composed_epsilon.cache_clear()
    accounting.calibrate_noise_multiplier.cache_clear()


# -- parameter checks ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"epsilon": "1"}, "epsilon"),
        ({"epsilon": None}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"delta": 2.0}, "delta"),
        ({"delta": math.nan}, "delta"),
        ({"task": "regression"}, "clip"),
        ({"task": "regression", "clip": 0.0}, "clip"),
        ({"task": "regression", "clip": math.inf}, "clip"),
        ({"clip": 3.0}, "regression only"),
        ({"secret_key": None}, "secret_key"),
        ({"secret_key": "short"}, "16"),
    ],
)
def test_bad_privacy_params_raise(kwargs, match):
    params = {
        "epsilon": 1.0,
        "delta": DELTA,
        "task": "classification",
        "clip": None,
        "secret_key": "a long enough secret",
    }
    params.update(kwargs)
    epsilon, delta = params.pop("epsilon"), params.pop("delta")
    with pytest.raises(ValueError, match=match):
        check_privacy_params(epsilon, delta, **params)


def test_good_privacy_params_pass():
    check_privacy_params(1.0, DELTA, task="classification", secret_key=b"k" * 32)
    check_privacy_params(8, 0.5, task="regression", clip=3, secret_key="s" * 16)


# -- noise ---------------------------------------------------------------------------------
def test_noise_is_a_deterministic_function_of_key_state_instance_and_shape():
    z = standard_normal(KEY, b"state-a", 0, (2, 3, 16, 4))
    assert np.array_equal(z, standard_normal(KEY, b"state-a", 0, (2, 3, 16, 4)))
    for other in (
        standard_normal(KEY, b"state-b", 0, (2, 3, 16, 4)),  # neighbouring state
        standard_normal(KEY, b"state-a", 1, (2, 3, 16, 4)),  # another instance
        standard_normal(bytes(32), b"state-a", 0, (2, 3, 16, 4)),  # another key
        standard_normal(KEY, b"state-a", 0, (2, 3, 16, 4, 1)).reshape(z.shape),
    ):
        assert not np.array_equal(z, other)
    big = standard_normal(KEY, "hex-digest", 0, (200_000,))
    assert abs(big.mean()) < 0.01 and abs(big.std() - 1) < 0.01


def test_neighbouring_states_do_not_cancel_noise():
    """The subtraction attack: releases before and after one deletion must not give the row."""
    rng = np.random.default_rng(0)
    T = rng.normal(size=(2, 4, 64, 3))
    row = np.zeros_like(T)
    row[1, :, 5, :] = [1.0, -0.4, -0.6]  # one row's residual in one cell per level
    sigma = 2.0
    before = noise_fold_sums(T, sigma, KEY, b"digest-before", instance=0)
    after = noise_fold_sums(T - row, sigma, KEY, b"digest-after", instance=0)
    error = (before - after) - row  # what the attacker's estimate of the row is off by
    assert abs(error.std() / (sigma * math.sqrt(2)) - 1) < 0.1  # fresh noise on both sides
    assert abs(np.corrcoef((before - T).ravel(), (after - T + row).ravel())[0, 1]) < 0.1
    # and equal states get bit-identical releases
    again = noise_fold_sums(T.copy(), sigma, KEY, b"digest-before", instance=0)
    assert np.array_equal(before, again)


def test_noise_fold_sums_validates():
    with pytest.raises(ValueError, match="fold axis"):
        noise_fold_sums(np.zeros((3, 2)), 1.0, KEY, b"d", instance=0)
    with pytest.raises(ValueError, match="sigma"):
        noise_fold_sums(np.zeros((2, 2)), -1.0, KEY, b"d", instance=0)
    with pytest.raises(ValueError, match="16 bytes"):
        noise_fold_sums(np.zeros((2, 2)), 1.0, b"short", b"d", instance=0)
    unchanged = noise_fold_sums(np.ones((2, 2)), 0.0, KEY, b"d", instance=0)
    assert np.array_equal(unchanged, np.ones((2, 2)))


def test_public_digest_is_keyed():
    a = public_state_digest(KEY, "abc")
    assert a == public_state_digest(KEY, "abc") != public_state_digest(bytes(32), "abc")
    assert a != public_state_digest(KEY, "abd")


# -- sensitivity ---------------------------------------------------------------------------
def _one_label_flipped_models(mode: str = "exact"):
    from forgetting import QSSClassifier

    rng = np.random.default_rng(3)
    n, d, k = 1200, 8, 4
    centers = rng.normal(size=(k, d)) * 3
    y = rng.integers(0, k, n)
    X = (centers[y] + rng.normal(size=(n, d))).astype(np.float32)
    params = dict(mode=mode, rho=0.1, n_instances=2, n_levels=3, n_centroids=8, rebuild="sync")
    a = QSSClassifier(**params).fit(X, y)
    outside = ~(a.engine_.rows.members(0) | a.engine_.rows.members(1))
    i = int(np.flatnonzero(outside)[0])
    y2 = y.copy()
    y2[i] = (y[i] + 1) % k
    b = QSSClassifier(**params).fit(X, y2)
    return a, b


def test_sensitivity_bound_holds_on_the_estimators_statistics():
    a, b = _one_label_flipped_models()
    for r in range(2):
        acc_a = a.engine_.instances[r].accumulators
        acc_b = b.engine_.instances[r].accumulators
        assert a.engine_.instances[r].schema_digest == b.engine_.instances[r].schema_digest
        assert np.array_equal(acc_a.counts, acc_b.counts)  # counts carry no labels
        assert np.array_equal(acc_a.pair_counts, acc_b.pair_counts)
        diff = (acc_a.sums - acc_b.sums).astype(np.float64) * 2.0**-acc_a.scale_bits
        changed_folds = np.flatnonzero(np.any(diff != 0, axis=(1, 2, 3)))
        assert changed_folds.size == 1  # the row sits in one fold
        n_groups = acc_a.sums.shape[1]
        assert np.count_nonzero(np.any(diff != 0, axis=3)) == n_groups  # one cell per group
        bound = label_sensitivity("classification", n_groups, scale_bits=acc_a.scale_bits)
        measured = float(np.linalg.norm(diff))
        assert measured <= bound
        assert measured == pytest.approx(math.sqrt(2 * n_groups), rel=1e-8)  # the bound is tight


def test_regression_sensitivity_with_clipping_and_fixed_point():
    rng = np.random.default_rng(1)
    n, G, b, C = 500, 4, 16, 2.5
    codes = rng.integers(0, b, size=(n, G))
    folds = rng.integers(0, 2, size=n)
    resid = rng.normal(scale=3.0, size=n)
    resid[0] = -10.0  # clipped to −C: flipping it to a huge value moves it by the full 2C
    worst = 0.0
    for i, new in [(0, 1e3), (1, -1e3), (2, 0.3), (3, C + 1e-9)]:
        changed = resid.copy()
        changed[i] = new
        sums = []
        for r in (resid, changed):
            acc = Accumulators.empty(G, b, 1, REGRESSION_SCALE_BITS)
            q = quantize_residuals(clip_residuals(r, C)[:, None], REGRESSION_SCALE_BITS)
            acc.add(codes, q, folds)
            sums.append(acc.sums.astype(np.float64) * 2.0**-REGRESSION_SCALE_BITS)
        worst = max(worst, float(np.linalg.norm(sums[0] - sums[1])))
    bound = label_sensitivity("regression", G, clip=C, scale_bits=REGRESSION_SCALE_BITS)
    assert worst <= bound
    assert worst == pytest.approx(2 * C * math.sqrt(G), rel=1e-6)  # and it is attained


def test_equal_states_get_equal_noise_after_forget(dpa):
    """forget(R) and a refit without R land on one state digest, hence the same noisy sums and
    the same noisy content (means, α), bit for bit."""
    from forgetting import QSSClassifier

    a, _ = _one_label_flipped_models()
    outside = ~(a.engine_.rows.members(0) | a.engine_.rows.members(1))
    drop = np.flatnonzero(outside)[:5]
    keep = np.setdiff1d(np.arange(a.n_rows_), drop)
    X = a.engine_.rows.X[: a.n_rows_]
    y = a.classes_[a.engine_.rows.targets[: a.n_rows_]]
    refit = QSSClassifier(**a.get_params()).fit(X[keep], y[keep], ids=keep.tolist())
    a.forget(drop.tolist())
    ledger = PrivacyLedger(1.0, DELTA, task="classification", n_instances=2)
    contents = []
    for model in (a, refit):
        inst = model.engine_.instances[0]
        noisy = inst.accumulators.copy()
        noisy.sums = ledger.noisy_fixed_point(
            noisy.sums, noisy.scale_bits, key=KEY, state_digest=inst.digest(), instance=0
        )
        assert not np.array_equal(noisy.sums, inst.accumulators.sums)
        contents.append(build_content(noisy, "auto", "auto"))
    assert np.array_equal(contents[0].means, contents[1].means)
    assert contents[0].alpha == contents[1].alpha
    assert ledger.n_releases == 1  # one state, released twice, counted once


# -- ledger --------------------------------------------------------------------------------
def test_ledger_counts_distinct_releases_and_composes(dpa):
    ledger = PrivacyLedger(1.0, DELTA, task="classification", n_instances=2)
    sums = np.zeros((2, 3, 8, 2))
    for state in (b"s0", b"s0", b"s1"):
        for r in range(2):
            ledger.noise_fold_sums(sums, key=KEY, state_digest=state, instance=r, n_groups=3)
    report = ledger.report()
    assert report.n_releases == 4
    assert report.sensitivity == pytest.approx(math.sqrt(6))
    assert report.sigma == pytest.approx(report.noise_multiplier * math.sqrt(6))
    assert report.epsilon == 1.0 and report.delta == DELTA
    assert report.composed_epsilon > 1.0  # two model states
    assert composed_epsilon(report.noise_multiplier, 2, DELTA) <= 1.0  # one model state
    restored = PrivacyLedger.from_dict(ledger.to_dict())
    assert restored.report() == report
    with pytest.raises(ValueError, match="instance"):
        ledger.noise_fold_sums(sums, key=KEY, state_digest=b"x", instance=2, n_groups=3)


def test_ledger_refuses_to_reinsert_forgotten_ids(dpa):
    """forget(i) then insert(i, x_i, guess) would replay the old state iff the guess is right."""
    ledger = PrivacyLedger(1.0, DELTA, task="classification")
    ledger.check_insert(KEY, [b"row-7"])  # never forgotten: fine
    ledger.record_forgotten(KEY, [b"row-7", b"row-9"])
    with pytest.raises(ValueError, match="forgotten earlier"):
        ledger.check_insert(KEY, [b"row-1", b"row-7"])
    ledger.check_insert(bytes(32), [b"row-7"])  # tags are keyed
    restored = PrivacyLedger.from_dict(ledger.to_dict())
    with pytest.raises(ValueError, match="forgotten earlier"):
        restored.check_insert(KEY, [b"row-9"])


def test_noisy_fixed_point_rounds_and_zeroes_empty_cells(dpa):
    ledger = PrivacyLedger(2.0, DELTA, task="classification")
    sums = np.zeros((2, 2, 4, 3), dtype=np.int64)
    counts = np.ones((2, 2, 4), dtype=np.int64)
    counts[1, 0, 2] = 0
    noisy = ledger.noisy_fixed_point(
        sums, 32, key=KEY, state_digest=b"s", instance=0, counts=counts
    )
    assert noisy.dtype == np.int64
    assert np.all(noisy[1, 0, 2] == 0) and np.count_nonzero(noisy) == noisy.size - 3
    sigma = ledger.report().sigma
    assert np.std(noisy / 2.0**32) == pytest.approx(sigma, rel=0.5)
    with pytest.raises(ValueError, match="integer"):
        ledger.noisy_fixed_point(sums.astype(float), 32, key=KEY, state_digest=b"s", instance=0)


def test_flat_tables_sensitivity_and_noisy_copy(dpa):
    """A flat partition (T tables, one cell each per row): the same bound with G = T, and a
    noised copy of the tables serves through the unchanged flat-content code."""
    from forgetting.content.accumulators import CLASSIFICATION_SCALE_BITS as BITS
    from forgetting.content.tables import FlatTables, build_flat_content

    rng = np.random.default_rng(5)
    n, T, C, k = 400, 6, 32, 3
    codes = rng.integers(0, C, size=(n, T))
    folds = rng.integers(0, 2, size=n)
    g = rng.dirichlet(np.ones(k), size=n)
    y = rng.integers(0, k, n)

    def tables(labels):
        t = FlatTables.empty(T, C, k, BITS)
        t.add(codes, quantize_residuals(np.eye(k)[labels] - g, BITS), folds)
        return t

    y2 = y.copy()
    y2[7] = (y[7] + 1) % k
    a, b = tables(y), tables(y2)
    diff = (a.sums - b.sums).astype(np.float64) * 2.0**-BITS
    assert np.array_equal(a.counts, b.counts)
    bound = label_sensitivity("classification", T, scale_bits=BITS)
    assert np.linalg.norm(diff) <= bound
    assert np.linalg.norm(diff) == pytest.approx(math.sqrt(2 * T), rel=1e-8)

    ledger = PrivacyLedger(1.0, DELTA, task="classification")
    noisy = a.copy()
    noisy.sums = ledger.noisy_fixed_point(
        a.sums, BITS, key=KEY, state_digest=b"flat", instance=0, counts=a.counts
    )
    noisy.rebuild_totals()
    content = build_flat_content(noisy, "auto", "auto")
    assert np.all(np.isfinite(content.correction(codes[:10])))
    assert ledger.report().sensitivity == pytest.approx(bound)


def test_a_ledger_keeps_its_stored_multiplier_unless_it_is_too_small(dpa):
    """A ledger restores with the multiplier it was saved with (its releases stay the saved
    model's bits): one a hair above this version's calibration (the earlier PLD search) is
    kept; one below it would not give (ε, δ) and is refused."""
    ledger = PrivacyLedger(2.0, DELTA, task="classification", n_instances=3)
    state = ledger.to_dict()
    above = {**state, "noise_multiplier": ledger.noise_multiplier * (1 + 3e-6)}
    assert PrivacyLedger.from_dict(above).noise_multiplier == above["noise_multiplier"]
    below = {**state, "noise_multiplier": ledger.noise_multiplier * (1 - 1e-6)}
    with pytest.raises(ValueError, match="below this version's calibration"):
        PrivacyLedger.from_dict(below)
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError):
            PrivacyLedger.from_dict({**state, "noise_multiplier": bad})


# -- the head's release (docs/privacy.md, Theorem 3) ----------------------------------------
def _head_label_flipped(head: str, task: str = "classification", new_label=None):
    """Two exact-mode models whose training sets differ in one D• row's label, with a head on
    a flat partition (the sums are the ones mode="dp" noises), the row, and its features."""
    from forgetting import QSSClassifier, QSSRegressor

    rng = np.random.default_rng(5)
    n, d, k = 900, 6, 3
    centers = rng.normal(size=(k, d)) * 3
    c = rng.integers(0, k, n)
    X = centers[c] + rng.normal(size=(n, d))
    X[:3] *= 1e6  # rows far outside the training distribution: the bound must hold for them
    params = dict(rho=0.1, n_instances=2, partition="trees", head=head, rebuild="sync")
    if task == "classification":
        cls, y = QSSClassifier, c
    else:
        cls, y = QSSRegressor, X @ rng.normal(size=d) + rng.normal(size=n)
    a = cls(**params).fit(X, y)
    outside = ~(a.engine_.rows.members(0) | a.engine_.rows.members(1))
    i = int(np.flatnonzero(outside)[0])  # row 0: far out, and in D• for this seed
    y2 = y.copy()
    y2[i] = (y[i] + 1) % k if new_label is None else new_label
    b = cls(**params).fit(X, y2)
    return a, b, X[i]


def _cross_real(head) -> np.ndarray:
    return head.cross.astype(np.float64) * 2.0**-14 * head.target_unit()


@pytest.mark.parametrize("head", ["shared-ridge", "shared-rf", "ridge"])
def test_head_sensitivity_bound_holds_and_is_attained(head):
    """A planted label change moves the real head sums: G and every count unchanged, H by a
    rank-one v_i (q(r) − q(r'))ᵀ in one fold, of norm ‖v_i‖·√2 (up to fixed-point terms),
    below Δ_H — for a row 10⁶ times outside the training data's scale."""
    from forgetting.engine.serving import head_feature_norm
    from forgetting.privacy.sensitivity import head_label_sensitivity

    a, b, x = _head_label_flipped(head)
    assert np.linalg.norm(x) > 1e5
    for r in range(2):
        ia, ib = a.engine_.instances[r], b.engine_.instances[r]
        assert ia.schema_digest == ib.schema_digest
        assert np.array_equal(ia.head.gram, ib.head.gram)  # the Gram carries no labels
        assert np.array_equal(ia.head.counts, ib.head.counts)
        assert np.array_equal(ia.accumulators.counts, ib.accumulators.counts)
        if hasattr(ia.head, "weights"):  # p(1 − p) is the same for either label
            assert np.abs(ia.head.weights - ib.head.weights).max() <= 1
        diff = _cross_real(ia.head) - _cross_real(ib.head)
        assert np.count_nonzero(np.any(diff != 0, axis=(1, 2))) == 1  # one fold
        D = ia.head.cross.shape[1]
        bound = head_label_sensitivity(
            "classification", head_feature_norm(ia.schema, D), curvature=hasattr(ia.head, "weights")
        )
        measured = float(np.linalg.norm(diff))
        assert measured <= bound
        v = ia.head_inputs(x[None, :])[0] * 2.0**-14  # the row's own features on the grid
        assert measured == pytest.approx(np.linalg.norm(v) * math.sqrt(2), rel=1e-5)
        if head != "shared-rf":  # unit-norm φ: ‖v‖ = √2, the bound itself is attained
            assert measured == pytest.approx(bound, rel=1e-4)


def test_regression_head_sensitivity_with_clip_in_dp_mode():
    """mode="dp" regression clips residuals to ±C: one label jumping from far below to far
    above moves H by ‖v‖·2C, within Δ_H = ‖v‖_max·(2C + slack)."""
    from forgetting import QSSRegressor
    from forgetting.engine.serving import head_feature_norm
    from forgetting.privacy.sensitivity import head_label_sensitivity

    rng = np.random.default_rng(2)
    n, d, C = 600, 5, 1.5
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    params = dict(
        mode="dp",
        epsilon=4.0,
        delta=1e-5,
        secret_key=KEY,
        clip=C,
        rho=0.1,
        n_instances=1,
        partition="trees",
        head="shared-ridge",
        rebuild="sync",
    )
    y1 = y.copy()
    i = int(np.flatnonzero(~QSSRegressor(**params).fit(X, y1).engine_.rows.members(0))[0])
    y1[i], y2 = -1e9, y.copy()
    y2[i] = 1e9
    a = QSSRegressor(**params).fit(X, y1)
    b = QSSRegressor(**params).fit(X, y2)
    ia, ib = a.engine_.instances[0], b.engine_.instances[0]
    diff = _cross_real(ia.head) - _cross_real(ib.head)
    v = ia.head_inputs(X[i : i + 1])[0] * 2.0**-14
    measured = float(np.linalg.norm(diff))
    bound = head_label_sensitivity(
        "regression", head_feature_norm(ia.schema, ia.head.cross.shape[1]), clip=C
    )
    assert measured <= bound
    assert measured == pytest.approx(np.linalg.norm(v) * 2 * C, rel=1e-4)


def test_head_noise_is_keyed_by_state_and_apart_from_the_tables(dpa):
    """The head's noise: the same for equal states (any history), fresh for another state,
    independent of the tables' noise of the same release, and σ_H = z·Δ_H/√s."""
    from forgetting.privacy.noise import HEAD_NOISE_DOMAIN, noise_seed
    from forgetting.privacy.sensitivity import head_label_sensitivity

    ledger = PrivacyLedger(2.0, DELTA, task="classification", n_instances=2)
    cross = np.zeros((2, 7, 3), dtype=np.int64)
    unit = 2.0**-34
    common = dict(key=KEY, instance=0, feature_norm=1.5, head_share=1.0)
    one, _, _ = ledger.noisy_head(cross, unit, None, 1.0, state_digest=b"s1", **common)
    again, _, _ = ledger.noisy_head(cross, unit, None, 1.0, state_digest=b"s1", **common)
    other, _, _ = ledger.noisy_head(cross, unit, None, 1.0, state_digest=b"s2", **common)
    assert np.array_equal(one, again)
    assert not np.array_equal(one, other)
    assert ledger.n_releases == 2  # two states, each one release
    sigma = ledger.noise_multiplier * head_label_sensitivity("classification", 1.5)
    assert ledger.report().head_sigma == pytest.approx(sigma)
    spread = np.std(np.concatenate([one, other]).astype(np.float64) * unit)
    assert spread == pytest.approx(sigma, rel=0.5)
    assert noise_seed(KEY, b"s1", 0, (42,)) != noise_seed(KEY, b"s1", 0, (42,), HEAD_NOISE_DOMAIN)
    # a budget split: the head's σ grows by 1/√s, the tables' by 1/√(1 − s)
    ledger.noisy_head(cross, unit, None, 1.0, state_digest=b"s3", **{**common, "head_share": 0.5})
    assert ledger.report().head_sigma == pytest.approx(sigma * math.sqrt(2))
    with pytest.raises(ValueError, match="head_share"):
        ledger.noisy_head(
            cross, unit, None, 1.0, state_digest=b"s3", **{**common, "head_share": 0.0}
        )
