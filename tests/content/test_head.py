"""The exact ridge head (content.heads): integer sums, exact serving, forget ≡ refit."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import assert_same_model, outside_all_schemas, schema_ids
from sklearn.datasets import make_regression

from forgetting import QSSClassifier, QSSRegressor
from forgetting.content.heads import (
    FixedWeights,
    GramCache,
    GramSystem,
    LinearHead,
    LogitRidgeHead,
    NewtonHead,
    head_features,
)
from forgetting.content.heads import fixed_point as fixed_point_module
from forgetting.content.heads import gram as gram_module
from forgetting.content.heads import newton as newton_module
from forgetting.content.heads.fixed_point import (
    FEATURE_BITS,
    exact_products,
    exact_weighted_grams,
)
from forgetting.content.heads.newton import (
    BOUND_ROWS,
    NEWTON_PENALTY,
    WEIGHT_BITS,
    newton_step,
    newton_weights,
)
from forgetting.instance import Instance

HEAD = dict(rho=0.1, n_instances=3, partition="trees", head="ridge", rebuild="sync")


def linear_data(n=900, d=30, k=3, seed=0, held_out=0):
    """Labels from a noisy linear score in 30 dimensions: a linear head beats the tables
    (64 random trees of 2 rows per cell) here by ~9 pp."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + held_out, d))
    B = rng.normal(size=(d, k))
    y = (X @ B + 0.5 * rng.normal(size=(n + held_out, k))).argmax(axis=1)
    if held_out:
        return X[:n], y[:n], X[n:], y[n:]
    return X, y


def refit(cls, X, y, ids, removed, **params):
    keep = [i for i, row_id in enumerate(ids) if row_id not in set(removed)]
    return cls(**params).fit(X[keep], y[keep], [ids[i] for i in keep])


# -- the sums ------------------------------------------------------------------------------
def test_exact_products_equal_integer_matmul():
    rng = np.random.default_rng(0)
    v = rng.integers(-(2**14), 2**14 + 1, size=(3000, 17))
    r = rng.integers(-(2**20), 2**20 + 1, size=(3000, 4))
    gram, cross = exact_products(v, r)
    assert np.array_equal(gram, v.T @ v)  # numpy's int64 matmul: exact, no BLAS
    assert np.array_equal(cross, v.T @ r)


@pytest.mark.parametrize("chunk", [1 << 18, 700])
def test_fold_sums_equal_integer_matmul_over_each_folds_rows(chunk, monkeypatch):
    """fold_cross (both folds' vᵀr from one product, rows split by fold) and exact_gram (a
    general float product) are numpy's exact int64 products of each fold's rows — across
    chunk boundaries too, and with float64 features holding the integers."""
    monkeypatch.setattr(fixed_point_module, "_CHUNK_ROWS", chunk)
    rng = np.random.default_rng(3)
    v = rng.integers(-(2**14), 2**14 + 1, size=(3000, 17))
    r = rng.integers(-(2**20), 2**20 + 1, size=(3000, 4))
    folds = rng.integers(0, 2, size=3000)
    for rows in (slice(None), slice(0, 40), slice(0, 0)):
        vs, rs, fs = v[rows], r[rows], folds[rows]
        both = fixed_point_module.fold_cross(vs.astype(np.float64), rs, fs)
        assert both.dtype == np.int64 and both.shape == (2, 17, 4)
        for f in (0, 1):
            assert np.array_equal(both[f], vs[fs == f].T @ rs[fs == f])
        assert np.array_equal(fixed_point_module.exact_gram(vs.astype(np.float64)), vs.T @ vs)
    one_fold = fixed_point_module.fold_cross(v, r, np.ones(3000, dtype=np.int64))
    assert not one_fold[0].any() and np.array_equal(one_fold[1], v.T @ r)


@pytest.mark.parametrize("kind", [LinearHead, LogitRidgeHead])
def test_one_row_changes_compiled_or_not_are_the_same_integers(kind, use_kernels):
    """A one-row add or subtract (the latency path) in one compiled call — cross sums, the
    pending Gram diagonal and, for the logit head, the Newton weights — leaves the integers
    numpy's calls leave, and both equal the bulk path's sums."""
    rng = np.random.default_rng(7)
    Z = rng.normal(size=(60, 8))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    v = head_features(Z)
    r = rng.integers(-(2**32), 2**32 + 1, size=(60, 3))
    r[0] = 2**32  # |r| at the one-hot bound, and beyond it below
    r[1] = -(2**33)
    folds = rng.integers(0, 2, size=60)
    heads = []
    for kernels in ("numba", "numpy"):
        use_kernels(kernels)
        head = kind.empty(8, 3, 32)
        for i in range(60):
            head.add(v[i : i + 1], r[i : i + 1], folds[i : i + 1])
        for i in range(0, 60, 3):
            head.subtract(v[i : i + 1], r[i : i + 1], folds[i : i + 1])
        heads.append(head)
    bulk = kind.empty(8, 3, 32)
    keep = np.setdiff1d(np.arange(60), np.arange(0, 60, 3))
    bulk.add(v[keep], r[keep], folds[keep])
    # the pending diagonal first (penalty reads it; reading the Gram adds the pending rows)
    assert heads[0].penalty() == heads[1].penalty() == bulk.penalty()
    assert heads[0].equals(heads[1]) and heads[0].equals(bulk)


def test_the_compiled_gram_passes_give_numpys_integers_and_floats(use_kernels):
    """GramSystem.of's one-pass conversion and the flush's one-pass copy with pending rows
    (content.heads._kernels) give the very floats and integers of numpy's steps — on sums
    near the int64 limit too, where the adds wrap alike."""
    rng = np.random.default_rng(11)
    D = 40
    rows = rng.integers(-(2**14), 2**14 + 1, size=(2, 300, D)).astype(np.int64)
    gram = np.stack([r.T @ r for r in rows])  # two positive definite fold Grams
    v = rng.integers(-(2**14), 2**14 + 1, size=(5, D)).astype(np.int64)
    pending = [(v[:1], np.array([1]), -1), (v[1:4], np.array([0, 1, 0]), 1), (v[4:], [0], -1)]
    results = []
    for kernels in ("numba", "numpy"):
        use_kernels(kernels)
        system = gram_module.GramSystem.of(gram)
        results.append((system.G0, system.factor, gram_module._with_pending(gram, pending)))
    (G0_a, factor_a, new_a), (G0_b, factor_b, new_b) = results
    assert np.array_equal(G0_a, G0_b) and np.array_equal(factor_a, factor_b)
    assert np.array_equal(new_a, new_b)
    manual = gram.copy()
    for block, folds, sign in pending:
        for row, f in zip(block, folds, strict=True):
            manual[f] += sign * np.outer(row, row)
    assert np.array_equal(new_a, manual)
    # sums past the int64 range wrap in both (never reached by real Grams: a guard)
    from forgetting.content.heads import _kernels as kernels

    huge = np.full((2, 3, 3), 2**62, dtype=np.int64)
    G, G0 = np.empty((3, 3)), np.empty((3, 3))
    kernels.gram_floats(huge, 2.0**-28, G, G0)
    assert np.array_equal(G, np.add(huge[0], huge[1]).astype(np.float64) * 2.0**-28)
    assert np.array_equal(G0, huge[0].astype(np.float64) * 2.0**-28)


def test_add_then_subtract_restores_the_integers_and_order_does_not_matter():
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(500, 8))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    v = head_features(Z)
    assert np.abs(v).max() <= 2**FEATURE_BITS
    r = rng.integers(-(2**32), 2**32, size=(500, 3))
    folds = rng.integers(0, 2, size=500)
    a, b = LinearHead.empty(8, 3, 32), LinearHead.empty(8, 3, 32)
    a.add(v, r, folds)
    a.subtract(v[:100], r[:100], folds[:100])
    order = rng.permutation(np.arange(100, 500))
    b.add(v[order], r[order], folds[order])
    assert a.equals(b)
    assert a.counts.tolist() == [int((folds[100:] == 0).sum()), int((folds[100:] == 1).sum())]


def test_fixed_weights_give_the_same_bits_in_any_batch():
    rng = np.random.default_rng(2)
    W = FixedWeights.of(rng.normal(size=(65, 10)) * 50)
    v = rng.integers(-(2**14), 2**14 + 1, size=(300, 65))
    whole = W.apply(v)
    one_by_one = np.vstack([W.apply(v[i : i + 1]) for i in range(len(v))])
    assert np.array_equal(whole, one_by_one)
    assert np.array_equal(whole, W.apply(v[::-1])[::-1])


# -- the estimator -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served():
    X, y, _, _ = linear_data(held_out=400)
    ids = [f"r{i}" for i in range(len(y))]
    model = QSSClassifier(**HEAD).fit(X, y, ids)
    return model, X, y, ids


def test_the_head_serves_where_it_wins_and_is_more_accurate(served):
    model, X, y, ids = served
    assert "head" in model.corrections_
    _, _, X_test, y_test = linear_data(held_out=400)
    tables = QSSClassifier(**{**HEAD, "head": "none"}).fit(X, y, ids)
    assert tables.corrections_ == ["tables"] * 3
    assert model.score(X_test, y_test) > tables.score(X_test, y_test)


@pytest.mark.parametrize("head", ["ridge", "newton", "shared-ridge"])
@pytest.mark.parametrize("which", ["outside", "one_schema", "all_schemas", "many"])
def test_forget_equals_refit_with_the_head(served, which, head):
    model0, X, y, ids = served
    params = {**HEAD, "head": head}
    model = QSSClassifier(**params).fit(X, y, ids)
    out = outside_all_schemas(model)
    s0, s1, s2 = (schema_ids(model, r) for r in range(3))
    removed = {
        "outside": out[:3],
        "one_schema": [i for i in s0 if i not in s1 and i not in s2][:1],
        "all_schemas": [s0[0], s1[0], s2[0]],
        "many": ids[::4],
    }[which]
    model.forget(removed)
    again = refit(QSSClassifier, X, y, ids, removed, **params)
    assert "head" in again.corrections_
    assert model.corrections_ == again.corrections_
    assert_same_model(model, again, X)
    assert model.audit_content()


@pytest.mark.parametrize("head", ["ridge", "shared-ridge"])
def test_insert_equals_fit_with_the_head(served, head):
    _, X, y, ids = served
    params = {**HEAD, "head": head}
    model = QSSClassifier(**params).fit(X[:700], y[:700], ids[:700])
    model.insert(X[700:], y[700:], ids[700:])
    assert_same_model(model, QSSClassifier(**params).fit(X, y, ids), X)


def test_save_load_keeps_the_head_exact(served, tmp_path):
    model, X, y, ids = served
    path = tmp_path / "m.qss"
    model.save(path)
    loaded = QSSClassifier.load(path)
    assert_same_model(model, loaded, X)
    removed = outside_all_schemas(loaded)[:5]
    loaded.forget(removed)
    assert_same_model(loaded, refit(QSSClassifier, X, y, ids, removed, **HEAD), X)


def test_audit_notices_tampered_head_sums(served):
    _, X, y, ids = served
    model = QSSClassifier(**HEAD).fit(X, y, ids)
    assert model.audit_content()
    head = model.engine_.instances[0].head
    with pytest.raises(ValueError, match="read-only"):  # the public view refuses writes
        head.gram[0, 0, 0] += 1
    head._own_gram()[0, 0, 0] += 1  # tampering in memory, past the view
    assert not model.audit_content()


def test_label_mode_with_a_flat_partition_keeps_the_head_exact(served):
    _, X, y, ids = served
    params = {**HEAD, "mode": "label"}
    model = QSSClassifier(**params).fit(X, y, ids)
    removed = outside_all_schemas(model)[:4]
    model.forget(removed)
    y2 = y.astype(np.int64).copy()
    y2[[ids.index(i) for i in removed]] = -1
    assert_same_model(model, QSSClassifier(**params).fit(X, y2, ids), X)


def test_regression_head_forget_equals_refit():
    X, y = make_regression(n_samples=600, n_features=20, noise=5.0, random_state=0)
    ids = list(range(len(y)))
    params = dict(HEAD)
    model = QSSRegressor(**params).fit(X, y, ids)
    assert "head" in model.corrections_
    removed = ids[::5]
    model.forget(removed)
    assert_same_model(model, refit(QSSRegressor, X, y, ids, removed, **params), X)


def test_head_is_refused_where_it_cannot_run():
    X, y = linear_data(n=300)
    with pytest.raises(ValueError, match="flat partition"):
        QSSClassifier(partition="rq", head="ridge").fit(X, y)
    with pytest.raises(ValueError, match="dp"):
        QSSClassifier(
            mode="dp", head="ridge", partition="trees", epsilon=1.0, secret_key=b"k" * 32
        ).fit(X, y)


def test_auto_head_is_off_for_the_codebook_and_dp():
    X, y = linear_data(n=300)
    rq = QSSClassifier(partition="rq", rho=0.2, rebuild="sync").fit(X, y)
    assert rq.corrections_ == ["codebook"] * 3


# -- the Newton head (one step of one-vs-rest logistic regression from g) -------------------
def newton_problem(n=1500, d=12, k=4, seed=3):
    """Unit-norm features, labels from a logistic model, and a weak g (a shrunken, noisy copy
    of the true scores) as the head would see them: head features, int64 residuals, folds."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    B = rng.normal(size=(d, k)) * 6.0
    scores = Z @ B
    y = np.array([rng.choice(k, p=p) for p in _softmax(scores)])
    g = _softmax(0.3 * scores + rng.normal(size=(n, k)))
    residuals = np.rint(np.ldexp(np.eye(k)[y] - g, 32)).astype(np.int64)
    return head_features(Z), residuals, rng.integers(0, 2, size=n), g, y


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_newton_weights_are_p_times_one_minus_p_on_their_grid():
    rng = np.random.default_rng(4)
    p = rng.uniform(size=(400, 3))
    y = rng.integers(0, 2, size=(400, 3))
    r = np.rint(np.ldexp(y - p, 32)).astype(np.int64)
    w = newton_weights(r, 32)
    for value, weight in zip(r.ravel().tolist(), w.ravel().tolist(), strict=True):
        a = abs(value)  # Python integers: the exact value, rounded half up to 2^-8
        exact = a * (2**32 - a)
        assert weight == (exact + 2**55) >> 56
    assert w.min() >= 0 and w.max() <= 2 ** (WEIGHT_BITS - 2)
    assert np.abs(w / 2.0**WEIGHT_BITS - p * (1 - p)).max() <= 2.0 ** -(WEIGHT_BITS + 1) + 1e-9
    with pytest.raises(ValueError, match="classification"):
        newton_weights(r, 24)


@pytest.mark.parametrize(("n", "D", "k"), [(5, 9, 3), (3000, 9, 3), (300, 90, 50)])
def test_weighted_grams_equal_integer_products(n, D, k):
    """Few rows (int64 products), classes stacked in one product (small k·D), class by class."""
    rng = np.random.default_rng(5)
    v = rng.integers(-(2**14), 2**14 + 1, size=(n, D))
    w = rng.integers(0, 2 ** (WEIGHT_BITS - 2) + 1, size=(n, k))
    w[:, 1] = 0  # a class without weight stays zero
    expected = np.stack([(v * w[:, c, None]).T @ v for c in range(k)])
    assert np.array_equal(exact_weighted_grams(v, w), expected)


def test_newton_head_sums_are_history_independent():
    v, r, folds, _, _ = newton_problem()
    a, b, c = (NewtonHead.empty(v.shape[1] - 1, r.shape[1], 32) for _ in range(3))
    a.add(v, r, folds)
    for i in (7, 100, 1499):  # one-row forgets (their own update path)
        a.subtract(v[i : i + 1], r[i : i + 1], folds[i : i + 1])
    a.subtract(v[200:260], r[200:260], folds[200:260])
    keep = np.setdiff1d(np.arange(len(v)), [7, 100, 1499, *range(200, 260)])
    order = np.random.default_rng(6).permutation(keep)
    b.add(v[order], r[order], folds[order])
    c.add(v[keep[:500]], r[keep[:500]], folds[keep[:500]])
    part = NewtonHead.empty(v.shape[1] - 1, r.shape[1], 32)
    part.add(v[keep[500:]], r[keep[500:]], folds[keep[500:]])
    c.merge(part)
    assert a.equals(b) and a.equals(c)
    assert not a.equals(LinearHead(a.gram, a.cross, a.counts, a.scale_bits))
    with pytest.raises(TypeError):
        c.merge(LinearHead.empty(v.shape[1] - 1, r.shape[1], 32))
    # the served step is a function of the sums: same bits after either history
    (gain_a, wa), (gain_b, wb) = a.solution(), b.solution()
    assert gain_a == gain_b
    assert np.array_equal(wa.logits.weights, wb.logits.weights)
    assert np.array_equal(wa.logits.exponents, wb.logits.exponents)


def test_newton_step_solves_the_penalized_newton_system():
    v, r, folds, g, y = newton_problem()
    head = NewtonHead.empty(v.shape[1] - 1, r.shape[1], 32)
    head.add(v, r, folds)
    _, weights = head.solution()
    V = v / 2.0**FEATURE_BITS
    R = r / 2.0**32
    w = newton_weights(r, 32) / 2.0**WEIGHT_BITS
    for c in range(r.shape[1]):
        A = (V * w[:, c, None]).T @ V + BOUND_ROWS / len(V) * (V.T @ V) / 4
        A += NEWTON_PENALTY * np.trace(A) / len(A) * np.eye(len(A))
        expected = np.linalg.solve(A, V.T @ R[:, c]) * newton_step(r.shape[1])
        served = np.ldexp(weights.logits.weights[:, c], -int(weights.logits.exponents[c]))
        assert np.linalg.norm(served - expected) <= 1e-3 * np.linalg.norm(expected)


def test_newton_outputs_are_rowwise_probabilities_and_beat_the_ridge_head():
    v, r, folds, g, y = newton_problem(n=4000)
    fit, test = slice(0, 3000), slice(3000, None)
    newton = NewtonHead.empty(v.shape[1] - 1, r.shape[1], 32)
    newton.add(v[fit], r[fit], folds[fit])
    ridge = LinearHead.empty(v.shape[1] - 1, r.shape[1], 32)
    ridge.add(v[fit], r[fit], folds[fit])
    _, step = newton.solution()
    _, ridge_weights = ridge.solution()
    out = step.outputs(v[test], g[test])
    assert np.allclose(out.sum(axis=1), 1.0) and out.min() >= 0.0
    one_by_one = np.vstack([step.outputs(v[i : i + 1], g[i : i + 1]) for i in range(3000, 3100)])
    assert np.array_equal(out[:100], one_by_one)
    assert np.array_equal(step.correction(v[test], g[test]), out - g[test])
    accuracy = lambda s: float(np.mean(s.argmax(axis=1) == y[test]))  # noqa: E731
    ridge_acc = accuracy(g[test] + ridge_weights.apply(v[test]))
    assert accuracy(out) > ridge_acc > accuracy(g[test])


def test_newton_head_refuses_more_rows_than_it_can_sum_exactly():
    v, r, folds, _, _ = newton_problem(n=50)
    head = NewtonHead.empty(v.shape[1] - 1, r.shape[1], 32)
    head.counts[0] = 2**28 - 10
    with pytest.raises(OverflowError):
        head.add(v, r, folds)
    assert not head.weighted.any()  # nothing was added before the refusal


def test_newton_solve_falls_back_to_float64_and_a_class_without_gradient_gets_no_step(monkeypatch):
    v, r, folds, _, _ = newton_problem()
    r[:, 2] = 0  # no row with 0 < p_2 < 1, no gradient: only the bound curvature, no step
    head = NewtonHead.empty(v.shape[1] - 1, r.shape[1], 32)
    head.add(v, r, folds)
    assert not head.weighted[2].any()
    _, single = head.solution()
    assert not single.logits.weights[:, 2].any()
    monkeypatch.setattr(newton_module, "_SPOTRF", lambda a, **kw: (a, 1))  # float32 "fails"
    _, double = head.solution()
    assert not double.logits.weights[:, 2].any()
    s = lambda w: np.ldexp(w.logits.weights, -w.logits.exponents[None, :])  # noqa: E731
    assert not np.array_equal(s(single), s(double))  # the float64 path ran
    assert np.allclose(s(single), s(double), rtol=0, atol=1e-3 * np.abs(s(double)).max())


def test_the_newton_step_is_computed_only_when_the_head_is_served(monkeypatch):
    """serve_if sees the ridge gain first: when the tables win, no class is factored (the
    change costs the ridge gain alone); when the head wins, the same step as without it."""
    v, r, folds, _, _ = newton_problem()
    head = NewtonHead.empty(v.shape[1] - 1, r.shape[1], 32)
    head.add(v, r, folds)
    gain, served = head.solution()
    gain_yes, same = head.solution(serve_if=lambda g: True)
    assert gain_yes == gain and np.array_equal(same.logits.weights, served.logits.weights)

    def no_factorization(*args, **kwargs):
        raise AssertionError("a class was factored for a head that is not served")

    monkeypatch.setattr(newton_module, "_SPOTRF", no_factorization)  # the classes' (float32)
    seen = []
    gain_no, none = head.solution(serve_if=lambda g: seen.append(g) or False)
    assert (gain_no, none) == (gain, None) and seen == [gain]


def test_two_classes_share_one_factorization_with_the_same_bits(monkeypatch):
    """Binary tasks: both classes' curvature sums are equal, so one factorization serves both
    — and the step equals the one from factoring each class (bits, not just values)."""
    v, r, folds, _, _ = newton_problem()
    r2 = np.stack([r[:, 0], -r[:, 0]], axis=1)  # y − p for two classes: r_1 = −r_0
    head = NewtonHead.empty(v.shape[1] - 1, 2, 32)
    head.add(v, r2, folds)
    assert np.array_equal(head.weighted[0], head.weighted[1])
    calls = []
    real = newton_module._SPOTRF
    monkeypatch.setattr(newton_module, "_SPOTRF", lambda *a, **k: calls.append(1) or real(*a, **k))
    _, shared = head.solution()
    assert len(calls) == 1
    monkeypatch.setattr(newton_module, "_same_curvature", lambda w: False)  # factor both
    _, separate = head.solution()
    assert len(calls) == 3
    assert np.array_equal(shared.logits.weights, separate.logits.weights)
    assert np.array_equal(shared.logits.exponents, separate.logits.exponents)


# -- one Gram for every instance: head="shared-ridge" ------------------------------------------
def test_shared_ridge_heads_hold_one_gram_and_factor_it_once_per_change(served, monkeypatch):
    """The "shared-ridge" head fits on the normalized input (no D° LDA directions, which φ
    has here), so all three instances hold the same Gram sums after fit and after a forget:
    a forget computes the leaving rows' Gram terms once and the first prediction after it
    factors once for the three; the "ridge" head on φ (different per instance) does each
    three times."""
    _, X, y, ids = served
    calls = []
    real_of = GramSystem.of.__func__

    def counting_of(cls, gram):
        calls.append(1)
        return real_of(cls, gram)

    monkeypatch.setattr(GramSystem, "of", classmethod(counting_of))
    grams = []  # the leaving rows' Gram terms added to the sums (content.heads.gram._with_pending)
    real_with_pending = gram_module._with_pending

    def counting_with_pending(gram, pending):
        grams.append(1)
        return real_with_pending(gram, pending)

    inputs = []
    real_head_inputs = Instance.head_inputs

    def counting_head_inputs(self, X):
        inputs.append(1)
        return real_head_inputs(self, X)

    for head, per_change in (("shared-ridge", 1), ("ridge", 3)):
        model = QSSClassifier(**{**HEAD, "head": head}).fit(X, y, ids)
        heads = [inst.head for inst in model.engine_.instances]
        assert all(inst.schema.preprocessor.uses_lda for inst in model.engine_.instances)
        same = [np.array_equal(heads[0].gram, h.gram) for h in heads[1:]]
        assert same == ([True, True] if head == "shared-ridge" else [False, False])
        model.predict(X[:5])
        grams.clear()
        inputs.clear()
        monkeypatch.setattr(gram_module, "_with_pending", counting_with_pending)
        monkeypatch.setattr(Instance, "head_inputs", counting_head_inputs)
        model.forget(outside_all_schemas(model)[:2])
        assert len(inputs) == per_change, head  # the leaving rows' head features
        monkeypatch.setattr(Instance, "head_inputs", real_head_inputs)
        calls.clear()
        model.predict_proba(X[:5])  # exact outputs (labels alone may skip the solve: §5.15)
        # the leaving rows' Gram terms (pending until the solve reads the sums): once, or per
        # head; and the factorization
        assert len(grams) == per_change, head
        monkeypatch.setattr(gram_module, "_with_pending", real_with_pending)
        assert len(calls) == per_change, head
        heads = [inst.head for inst in model.engine_.instances]
        assert all(np.array_equal(heads[0].gram, h.gram) for h in heads) == (head == "shared-ridge")


def test_a_stacked_head_gets_the_same_bits_solved_alone_or_with_its_siblings(served):
    """Slot r's columns do not depend on what the other slots hold: each head solved alone
    in its slot (the others zero) returns exactly what the engine's joint solve served."""
    _, X, y, ids = served
    model = QSSClassifier(**{**HEAD, "head": "shared-ridge"}).fit(X, y, ids)
    model.predict(X[:3])  # the engine solves the three heads together
    heads = [inst.head for inst in model.engine_.instances]
    together = [h.solution() for h in heads]
    for r, h in enumerate(heads):
        h.share_solves(GramCache(), (r, 3))  # forgets the joint result
        gain, weights = h.solution()
        assert gain == together[r][0]
        assert np.array_equal(weights.weights, together[r][1].weights)
        assert np.array_equal(weights.exponents, together[r][1].exponents)
    cache = GramCache()
    other = LinearHead.empty(heads[0].gram.shape[1] - 1, 3, 32)
    rng = np.random.default_rng(0)
    v = head_features(rng.normal(size=(50, heads[0].gram.shape[1] - 1)) / 10)
    other.add(v, rng.integers(-(2**31), 2**31, size=(50, 3)), rng.integers(0, 2, 50))
    first = cache.system_for(heads[0])
    assert heads[0].gram_token == first.token and heads[0].gram is first.gram  # now shared
    second = cache.system_for(other)  # a different Gram: not reused
    assert second is not first and second.serves(other.gram)
    assert not second.serves(heads[0].gram) and other.gram_token == second.token
    assert cache.system_for(other) is second  # known by its token


def test_stacked_heads_serve_the_refits_bits_while_a_sibling_rebuilds(served):
    """While instance 0 rebuilds in the background (its slot empty), instances 1 and 2 serve
    exactly what the refit's instances 1 and 2 serve (all three slots full)."""
    _, X, y, ids = served
    params = {**HEAD, "head": "shared-ridge", "rebuild": "background"}
    model = QSSClassifier(**params).fit(X, y, ids)
    s0, s1, s2 = (schema_ids(model, r) for r in range(3))
    removed = [i for i in s0 if i not in s1 and i not in s2][:1]
    engine = model.engine_
    release = threading.Event()
    build = engine._build

    def held_build(r, data, *gram):
        release.wait(60)
        return build(r, data, *gram)

    engine._build = held_build
    try:
        model.forget(removed)
        assert engine.instances[0] is None
        during = [engine.predict_outputs(np.asarray(X, np.float32), instance=r) for r in (1, 2)]
        assert engine.instances[0] is None  # still rebuilding: the solves above had 2 heads
    finally:
        release.set()
    model.wait_for_rebuilds()
    again = refit(QSSClassifier, X, y, ids, removed, **{**params, "rebuild": "sync"})
    for r, out in zip((1, 2), during, strict=True):
        assert np.array_equal(out, again.engine_.predict_outputs(np.asarray(X, np.float32), r))
    assert_same_model(model, again, X)


def test_shared_ridge_is_exact_for_regression_and_through_save_and_load(served, tmp_path):
    X, y = make_regression(n_samples=600, n_features=20, noise=5.0, random_state=0)
    ids = list(range(len(y)))
    params = {**HEAD, "head": "shared-ridge"}
    model = QSSRegressor(**params).fit(X, y, ids)
    assert "head" in model.corrections_
    path = tmp_path / "m.qss"
    model.save(path)
    loaded = QSSRegressor.load(path)
    assert_same_model(model, loaded, X)
    removed = ids[::5]
    loaded.forget(removed)
    assert_same_model(loaded, refit(QSSRegressor, X, y, ids, removed, **params), X)


@pytest.mark.parametrize("rebuild", ["sync", "background"])
def test_a_rebuild_adopts_a_siblings_gram_and_lands_on_the_refit(served, monkeypatch, rebuild):
    """A D° hit on one instance: its rebuild takes the Gram sums of a sibling (the same
    integers over the same rows, with "shared-ridge") instead of recomputing them; the model
    equals the refit and the audit, which recomputes every head sum from the rows, agrees.
    A hit on every instance has no current sibling: the Gram sums are computed."""
    _, X, y, ids = served
    params = {**HEAD, "head": "shared-ridge", "rebuild": rebuild}
    model = QSSClassifier(**params).fit(X, y, ids)
    adopted = []
    real = LinearHead.adopt_gram
    monkeypatch.setattr(
        LinearHead, "adopt_gram", lambda self, g, c: adopted.append(1) or real(self, g, c)
    )
    s0, s1, s2 = (schema_ids(model, r) for r in range(3))
    one = [i for i in s0 if i not in s1 and i not in s2][:1]
    model.forget(one)
    model.wait_for_rebuilds()
    assert adopted == [1]
    assert_same_model(model, refit(QSSClassifier, X, y, ids, one, **params), X)
    assert model.audit_content()
    adopted.clear()
    every = list(dict.fromkeys(next(i for i in s if i not in one) for s in (s0, s1, s2)))
    receipt = model.forget(every)
    assert receipt.instances_hit == (0, 1, 2)
    model.wait_for_rebuilds()
    assert adopted == []
    assert_same_model(model, refit(QSSClassifier, X, y, ids, one + every, **params), X)
    assert model.audit_content()
