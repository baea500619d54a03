"""Certified labels (QSSEngine.certified_labels, content.heads.certified): after a change, a
head-serving model's ``predict`` is answered from the gain filter's tracked weights when every
row's winner is certain — and must then be the exact route's labels, the refit's, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_model

from forgetting import QSSClassifier, QSSRegressor
from forgetting.content import kernels
from forgetting.content.heads import FixedWeights, NewtonWeights, head_features
from forgetting.content.heads import certified as certified_module
from forgetting.content.heads.certified import BoundedWeights, weight_tolerance
from forgetting.content.heads.newton import BoundedLogits
from forgetting_lab.bench.head_latency import CertifiedCounter as Spy
from forgetting_lab.bench.head_latency import synthetic
from forgetting_lab.bench.paper.stages import in_any_schema

PARAMS = dict(rebuild="sync", random_state=0)


@pytest.fixture(scope="module")
def data():
    X, y, X_test, _ = synthetic(3000, 300, 64, 6, seed=2)
    return X, y, X_test


def _fit(X, y, ids):
    model = QSSClassifier(**PARAMS).fit(X, y, ids)
    assert model.corrections_ == ["head"] * 3, model.corrections_
    return model


@pytest.mark.parametrize("kernel_setting", ["numba", "numpy"])
def test_certified_labels_are_the_exact_routes_through_forgets_and_inserts(data, kernel_setting):
    """40 one-row changes (forgets outside every D°, an insert every eighth), each followed by
    a 300-row predict: the certified model's labels equal those of a twin that always takes
    the exact route, at every step — with the tracked solution 40 rows past its last exact
    solve — and at the end the refit's labels, probabilities and state digest."""
    X, y, X_test = data
    with kernels.using(kernel_setting):
        ids = np.arange(2900)
        model, twin = _fit(X[:2900], y[:2900], ids), _fit(X[:2900], y[:2900], ids)
        spy, off = Spy(model.engine_), Spy(twin.engine_, enabled=False)
        outside = ids[~in_any_schema(model)[: len(ids)]]
        order = np.random.default_rng(0).choice(outside, 40, replace=False)
        model.predict(X_test[:1])
        twin.predict(X_test[:1])
        inserted = []
        for step, row_id in enumerate(order):
            for m in (model, twin):
                m.forget([int(row_id)])
            if step % 8 == 3:
                new = 2900 + step
                inserted.append(new)
                for m in (model, twin):
                    m.insert(X[new : new + 1], y[new : new + 1], [new])
            chunks = [X_test[:1], X_test[1:150], X_test[150:300]]
            labels = np.concatenate([model.predict(c) for c in chunks])
            assert np.array_equal(labels, twin.predict(X_test)), f"step {step}"
        assert off.certified == 0
        assert spy.certified >= 0.9 * spy.calls, f"{spy.certified} of {spy.calls} certified"
        keep = np.concatenate([np.setdiff1d(ids, order), inserted])
        refit = QSSClassifier(**PARAMS).fit(X[keep], y[keep], keep)
        assert np.array_equal(model.predict(X_test), refit.predict(X_test))
        assert_same_model(model, refit, X_test[:100])


def test_the_tracked_weights_stay_far_inside_their_tolerance(data):
    """After 60 tracked one-row forgets, the exact solve of the same sums audits the tracked
    solution (GainFilter._audit): its largest relative difference per column is below a
    thousandth of the tolerance the labels rely on, and certification stays on."""
    X, y, X_test = data
    ids = np.arange(3000)
    model = _fit(X, y, ids)
    outside = ids[~in_any_schema(model)[: len(ids)]]
    model.predict(X_test[:1])
    for row_id in np.random.default_rng(1).choice(outside, 60, replace=False):
        model.forget([int(row_id)])
        model.predict(X_test[:1])
    gains = model.engine_._gram_cache.gains
    assert gains.largest_drift == 0.0
    model.predict_proba(X_test[:1])  # the exact route: solves, and audits the tracked state
    D = model.engine_.instances[0].head.cross.shape[1]
    assert 0.0 < gains.largest_drift < 1e-3 * weight_tolerance(D), gains.largest_drift
    assert not gains.distrusted


def test_unsure_labels_take_the_exact_route(data, monkeypatch):
    """With the tolerance made enormous no label is certain, and with the filter distrusted
    none is tried: every predict takes the exact route — and still serves the refit's labels."""
    X, y, X_test = data
    ids = np.arange(3000)
    model = _fit(X, y, ids)
    spy = Spy(model.engine_)
    outside = ids[~in_any_schema(model)[: len(ids)]]
    model.predict(X_test[:1])  # exact contents after the fit: labels without a bound
    assert spy.certified == 1
    spy.calls = spy.certified = 0
    monkeypatch.setattr(certified_module, "TOLERANCE_FACTOR", 1e12)
    model.forget([int(outside[0])])
    model.predict(X_test)
    assert spy.calls == 1 and spy.certified == 0
    monkeypatch.undo()
    model.engine_._gram_cache.gains.distrusted = True
    model.forget([int(outside[1])])
    model.predict(X_test)
    assert spy.certified == 0
    keep = np.setdiff1d(ids, outside[:2])
    refit = QSSClassifier(**PARAMS).fit(X[keep], y[keep], keep)
    assert np.array_equal(model.predict(X_test), refit.predict(X_test))


def test_a_regressor_and_dp_mode_never_certify(data):
    X, y, X_test = data
    regressor = QSSRegressor(**PARAMS).fit(X, y.astype(float))
    assert regressor.engine_.certified_labels(X_test[:3]) is None
    dp = dict(mode="dp", epsilon=2.0, delta=1e-5, secret_key=b"k" * 32)
    private = QSSClassifier(**dp, **PARAMS).fit(X, y)
    assert private.engine_.certified_labels(X_test[:3]) is None


def _within(W, radius, rng):
    """W plus, per column, a random perturbation of norm just inside ``radius``."""
    E = rng.normal(size=W.shape)
    E *= 0.999 * radius / np.linalg.norm(E, axis=0)
    return W + E


@pytest.mark.parametrize("kernel_setting", ["numba", "numpy"])
@pytest.mark.parametrize("logistic", [False, True], ids=["additive", "logistic"])
def test_the_output_bounds_hold_for_every_weight_within_the_radius(kernel_setting, logistic):
    """For tracked weights W̃ and any W within the radius — columns whose peak sits on a power
    of two included, so W's fixed point may take another exponent — the outputs the exact
    route serves from W (FixedWeights / NewtonWeights) are within the bounds of those served
    from W̃; and the bounds are not vacuous."""
    rng = np.random.default_rng(3)
    D, k, n = 41, 5, 64
    with kernels.using(kernel_setting):
        if kernel_setting == "numba":
            kernels.GAIN_FILTER_KERNELS.get(1 << 40)  # load the compiled group
        for trial in range(30):
            W_tracked = rng.normal(size=(D, k)) * 0.3
            W_tracked[0, 0] = 0.5  # a peak on a power of two
            W_tracked[:, 1] *= 1e-3
            Z = rng.normal(size=(n, D - 1))
            Z /= np.linalg.norm(Z, axis=1, keepdims=True)
            v = head_features(Z, np.float64)
            g = rng.dirichlet(np.ones(k), size=n)
            bounded = BoundedWeights.around(W_tracked, 1e-4)
            if logistic:
                out, near = BoundedLogits(bounded).served(v, g)
            else:
                out, near = bounded.served(v, g)
            assert np.all(near > 0) and np.all(near < 0.05)
            for _ in range(5):
                W = _within(W_tracked, bounded.radius, rng)
                if logistic:
                    exact = NewtonWeights(FixedWeights.of(W)).outputs(v, g)
                else:
                    exact = g + FixedWeights.of(W).apply(v)
                assert np.all(np.abs(exact - out) <= near), trial


def test_a_long_run_of_changes_without_predictions_keeps_no_growing_log(data, monkeypatch):
    """Changes past REFRESH_ROWS with no prediction between them: the filter drops its log
    (an estimate would not vouch for it anyway) instead of keeping every row's features, and
    the next predict takes the exact route — the refit's labels."""
    from forgetting.content.heads import gain_filter

    monkeypatch.setattr(gain_filter, "REFRESH_ROWS", 10)
    X, y, X_test = data
    ids = np.arange(3000)
    model = _fit(X, y, ids)
    outside = ids[~in_any_schema(model)[: len(ids)]]
    model.predict(X_test[:1])
    gains = model.engine_._gram_cache.gains
    for row_id in outside[:25]:
        model.forget([int(row_id)])
    assert not gains.behind()  # dropped at the 11th row, not tracking since
    keep = np.setdiff1d(ids, outside[:25])
    refit = QSSClassifier(**PARAMS).fit(X[keep], y[keep], keep)
    assert np.array_equal(model.predict(X_test), refit.predict(X_test))


def test_the_head_latency_benchmark_runs_and_finds_forget_equal_to_refit(tmp_path):
    """forgetting_lab.bench.head_latency --quick: both routes timed, every check equal."""
    from forgetting_lab.bench import head_latency

    assert head_latency.main(["--quick", "--out", str(tmp_path), "--name", "hl"]) == 0
    text = (tmp_path / "hl.md").read_text()
    assert "certified labels (shipped)" in text and "exact route" in text
    assert "False" not in text
