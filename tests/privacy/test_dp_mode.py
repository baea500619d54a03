"""mode="dp" on the estimators: exact under forget, releases accounted, bad settings refused.

The mechanism itself (calibration against dp-accounting, noise determinism and neighbour
independence, the sensitivity bound) is tested in tests/privacy/test_privacy.py.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers import classification_data, regression_data
from sklearn.datasets import make_classification

from forgetting import QSSClassifier, QSSRegressor

KEY = b"a secret of at least sixteen bytes"
DP = dict(mode="dp", epsilon=2.0, delta=1e-5, secret_key=KEY, rho=0.25, rebuild="sync")


def linear_data(n=1000):
    """Three linearly separated classes on six informative features: the head's out-of-fold
    gain over the tables is wide enough that noise at ε = 8 never flips the choice (on
    classification_data()'s 240 rows at ε = 2 it is a coin toss that BLAS builds decide)."""
    return make_classification(
        n_samples=n,
        n_features=6,
        n_informative=6,
        n_redundant=0,
        n_classes=3,
        n_clusters_per_class=1,
        random_state=0,
    )


def _refit_equal(cls, params, X, y, ids, gone):
    model = cls(**params).fit(X, y, ids)
    model.predict(X)
    model.forget(gone)
    keep = [i for i, row_id in enumerate(ids) if row_id not in set(gone)]
    refit = cls(**params).fit(X[keep], y[keep], [ids[i] for i in keep])
    out = model.predict_proba(X) if hasattr(model, "predict_proba") else model.predict(X)
    ref = refit.predict_proba(X) if hasattr(refit, "predict_proba") else refit.predict(X)
    assert np.array_equal(out, ref)
    assert model.state_digest() == refit.state_digest()
    return model


def test_classifier_forget_equals_refit_bitwise():
    X, y = classification_data()
    ids = list(range(len(y)))
    model = _refit_equal(QSSClassifier, DP, X, y, ids, [3, 7, 11])
    report = model.privacy_
    assert report.epsilon == 2.0 and report.delta == 1e-5 and report.sigma > 0
    # Two model states were served (before and after the forget), p = 3 instances each.
    assert report.n_releases == 6
    assert report.composed_epsilon > report.epsilon


def test_regressor_needs_a_clip_and_forget_equals_refit():
    X, y = regression_data()
    with pytest.raises(ValueError, match="clip"):
        QSSRegressor(**DP).fit(X, y)
    _refit_equal(QSSRegressor, {**DP, "clip": 3.0}, X, y, list(range(len(y))), [0, 5])


def test_noise_is_fresh_for_each_state():
    """The released means move by far more than one row's exact contribution: the noise of
    the state after a deletion is not the noise of the state before."""
    X, y = classification_data()
    model = QSSClassifier(**DP).fit(X, y)
    exact = QSSClassifier(**{**DP, "mode": "exact", "epsilon": None, "delta": None}).fit(X, y)
    before = model.predict_proba(X) - exact.predict_proba(X)
    victim = next(i for i in range(len(y)) if not model.forget([i]).rebuild_started)
    exact.forget([victim])
    after = model.predict_proba(X) - exact.predict_proba(X)
    assert not np.allclose(before, after, atol=1e-3)


def test_forgotten_ids_cannot_be_reinserted_and_state_survives_pickle():
    X, y = classification_data()
    model = QSSClassifier(**DP).fit(X, y)
    model.forget([4])
    with pytest.raises(ValueError, match="forgotten earlier"):
        model.insert(X[4:5], y[4:5], [4])
    twin = pickle.loads(pickle.dumps(model))
    assert np.array_equal(twin.predict_proba(X), model.predict_proba(X))
    assert twin.privacy_.n_releases == model.privacy_.n_releases
    with pytest.raises(ValueError, match="forgotten earlier"):
        twin.insert(X[4:5], y[4:5], [4])


@pytest.mark.parametrize(
    "bad",
    [
        {"epsilon": 0.0},
        {"epsilon": -1.0},
        {"delta": 0.0},
        {"delta": 1.5},
        {"secret_key": None},
        {"clip": 1.0},  # a classifier's residuals are bounded already
        {"mode": "exact"},  # epsilon/delta without mode="dp"
    ],
)
def test_impossible_settings_are_refused_before_fitting(bad):
    X, y = classification_data()
    model = QSSClassifier(**{**DP, **bad})
    with pytest.raises(ValueError):
        model.fit(X, y)
    assert not hasattr(model, "engine_")


def test_probabilities_stay_finite_when_every_output_is_clipped():
    """Noise can push every class output of a row to ≤ 0: predict_proba then puts all mass on
    the class predict returns instead of dividing 0 by 0."""
    X, y = classification_data()
    model = QSSClassifier(**DP).fit(X, y)
    far = X[:5] * 1e3  # far outside the data: g is confident, the cells are arbitrary
    raw = model._outputs(far)
    raw[0] = -np.abs(raw[0]) - 1.0  # force the degenerate case on one row
    model._outputs = lambda X, instance=None: raw.copy()
    proba = model.predict_proba(far)
    assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(axis=1), 1.0)
    assert proba[0].max() == 1.0
    assert np.array_equal(np.argmax(proba, axis=1), np.argmax(raw, axis=1))


@pytest.mark.parametrize("partition", ["trees", "hyperplanes"])
def test_flat_partitions_are_private_and_exact_too(partition):
    """The noise goes on a copy of the flat tables' sums (2, T, cells, k); their cross-fit
    totals and probe terms are recomputed from the noised copy."""
    X, y = classification_data()
    params = {**DP, "partition": partition}
    model = _refit_equal(QSSClassifier, params, X, y, list(range(len(y))), [2, 9])
    exact = QSSClassifier(**{**params, "mode": "exact", "epsilon": None, "delta": None})
    exact.fit(X, y)
    exact.forget([2, 9])
    assert not np.array_equal(model.predict_proba(X), exact.predict_proba(X))
    assert model.privacy_.n_releases == 6
    # 64 tables: one label change moves one cell per table, so Δ = √(2·64).
    assert model.privacy_.sensitivity == pytest.approx(np.sqrt(2 * 64), rel=1e-3)


def test_privacy_report_composes_many_releases_at_once(monkeypatch):
    """The ledger composes its releases in O(1) (n Gaussian releases of multiplier z are one
    of multiplier z/√n): fitting at ε = 50 calibrates once per fit, and reading ``privacy_``
    after 100 forgets — 300 releases, each answered by a prediction — composes once, with
    n = 300 (a PLD composition of every release took a minute here). Counted, not timed."""
    from forgetting.privacy import ledger

    calls = {"calibrate": 0, "compose": []}
    calibrate, compose = ledger.calibrate_noise_multiplier, ledger.composed_epsilon

    def counted_calibrate(*args, **kwargs):
        calls["calibrate"] += 1
        return calibrate(*args, **kwargs)

    def counted_compose(z, n, delta):
        calls["compose"].append(n)
        return compose(z, n, delta)

    monkeypatch.setattr(ledger, "calibrate_noise_multiplier", counted_calibrate)
    monkeypatch.setattr(ledger, "composed_epsilon", counted_compose)
    X, y = classification_data()
    params = {**DP, "epsilon": 50.0, "rho": 0.2, "rebuild": "background"}
    model = QSSClassifier(**params).fit(X, y)
    assert calls["calibrate"] <= 1
    outside = [i for i in range(len(y)) if not model.engine_.rows.instances_holding([i]).size]
    for victim in outside[:100]:
        model.forget([victim])
        model.predict(X[:1])
    calls["compose"].clear()
    report = model.privacy_
    assert calls["compose"] == [300]  # one composition of all 300 releases
    assert report.n_releases == 3 * 100  # one state per forget, served by its prediction
    assert report.composed_epsilon > 50.0


@pytest.mark.parametrize("head", ["shared-rf", "shared-ridge", "ridge"])
def test_head_is_released_with_noise_and_forget_equals_refit(head):
    """mode="dp" with a head: forget ≡ DP refit bit for bit; the head serves from noisy cross
    sums (not the exact head's weights); one release per (instance, state) — the head's sums
    and the tables' are one Gaussian mechanism — and privacy_ reports the head's σ."""
    from forgetting.engine.serving import head_feature_norm
    from forgetting.privacy.sensitivity import head_label_sensitivity

    X, y = linear_data()
    params = {**DP, "head": head, "n_instances": 2, "epsilon": 8.0}
    model = _refit_equal(QSSClassifier, params, X, y, list(range(len(y))), [3, 7, 11])
    report = model.privacy_
    assert report.n_releases == 4  # two states × p = 2, the head's sums counted with them
    assert report.head_share == 1.0
    inst = model.engine_.instances[0]
    D = inst.head.cross.shape[1]
    curvature = head == "shared-rf"
    delta_h = head_label_sensitivity(
        "classification", head_feature_norm(inst.schema, D), curvature=curvature
    )
    assert report.head_sensitivity == pytest.approx(delta_h)
    assert report.head_sigma == pytest.approx(report.noise_multiplier * delta_h)
    # the served content is built from noised sums: it differs from the exact model's
    exact = QSSClassifier(**{**params, "mode": "exact", "epsilon": None, "delta": None})
    exact.fit(X, y)
    exact.forget([3, 7, 11])
    assert not np.array_equal(model.predict_proba(X), exact.predict_proba(X))
    assert "head" in model.engine_.corrections()
    twin = pickle.loads(pickle.dumps(model))
    assert np.array_equal(twin.predict_proba(X), model.predict_proba(X))
    assert twin.privacy_.n_releases == report.n_releases
    assert twin.privacy_.head_sigma == report.head_sigma


def _released_head_noise(model, r=0):
    """The noise on instance r's released head cross sums (real units): the noisy copy the
    engine serves from, minus the exact sums."""
    from forgetting.engine.serving import privatizer

    engine = model.engine_
    inst = engine.instances[r]
    _, private = privatizer(engine.privacy, engine._key, inst, r)(inst.accumulators, inst.head)
    unit = 2.0**-14 * inst.head.target_unit()
    return (private.head.cross - inst.head.cross).astype(np.float64) * unit


def test_head_noise_differs_between_neighbouring_states_and_not_across_histories():
    """The head's noise is fresh after a one-row forget (a new state: independent noise of
    σ_H, so the two releases' difference is not the row's contribution), and the same for a
    refit reaching that state (any history)."""
    X, y = linear_data()
    params = {**DP, "head": "shared-ridge", "n_instances": 1, "epsilon": 8.0}
    model = QSSClassifier(**params).fit(X, y, list(range(len(y))))
    before = _released_head_noise(model)
    members = model.engine_.rows.members(0)
    victim = int(np.flatnonzero(~members & (y >= 0))[0])  # a D• row: no rebuild
    assert not model.forget([victim]).rebuild_started
    after = _released_head_noise(model)
    sigma = model.privacy_.head_sigma
    assert np.std(before) == pytest.approx(sigma, rel=0.2)
    assert np.std(after - before) == pytest.approx(sigma * np.sqrt(2), rel=0.2)
    keep = [i for i in range(len(y)) if i != victim]
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    assert np.array_equal(_released_head_noise(refit), after)


def test_regressor_head_is_private_and_exact():
    X, y = regression_data()
    params = {**DP, "clip": 3.0, "head": "shared-ridge", "n_instances": 2}
    model = _refit_equal(QSSRegressor, params, X, y, list(range(len(y))), [0, 5])
    assert np.isfinite(model.privacy_.head_sigma)


def test_dp_refuses_a_newton_head_and_a_head_on_the_codebook():
    X, y = classification_data()
    with pytest.raises(ValueError, match="newton"):
        QSSClassifier(**{**DP, "head": "newton"}).fit(X, y)
    with pytest.raises(ValueError, match="flat partition"):
        QSSClassifier(**{**DP, "head": "shared-rf", "partition": "rq"}).fit(X, y)
