"""History independence: fit(D); forget(R) ≡ fit(D \\ R), bit for bit (design.md §5.1)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    FAST,
    assert_same_model,
    classification_data,
    outside_all_schemas,
    regression_data,
    schema_ids,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forgetting import QSSClassifier, QSSRegressor
from forgetting.content.fingerprint import Contributions


def refit_without(cls, params, X, y, ids, removed):
    removed = set(removed)
    keep = [i for i, row_id in enumerate(ids) if row_id not in removed]
    return cls(**params).fit(X[keep], y[keep], [ids[i] for i in keep])


@pytest.mark.parametrize(
    "cls,data", [(QSSClassifier, classification_data), (QSSRegressor, regression_data)]
)
@pytest.mark.parametrize(
    "which", ["outside", "one_schema", "several_schemas", "all_schemas", "many"]
)
def test_forget_equals_refit(cls, data, which):
    X, y = data()
    ids = [f"row-{i}" for i in range(len(y))]
    model = cls(**FAST).fit(X, y, ids)
    out = outside_all_schemas(model)
    s0, s1, s2 = (schema_ids(model, r) for r in range(3))
    removed = {
        "outside": out[:1],
        "one_schema": [i for i in s0 if i not in s1 and i not in s2][:1],
        "several_schemas": [s0[0], s1[0]],
        "all_schemas": [s0[0], s1[0], s2[0]],
        "many": ids[::3],
    }[which]
    assert removed
    receipt = model.forget(removed)
    hit = set(receipt.instances_hit)
    if which == "outside":
        assert hit == set() and not receipt.rebuild_started
    if which == "all_schemas":
        assert hit == {0, 1, 2}
    assert_same_model(model, refit_without(cls, FAST, X, y, ids, removed), X)
    assert model.audit_content()


@pytest.mark.parametrize("mode", ["exact", "label"])
def test_a_row_that_joins_d0_when_a_member_leaves_is_a_hit_when_forgotten(mode):
    """With D° at its minimum size, forgetting a member (its row, or its label) moves the
    threshold up and the next row by draw joins D°; forgetting that row must then rebuild
    the instance. The row store refreshes its thresholds on every removal or unlabeling that
    touches a D°: a stale threshold would miss the hit and serve an instance built on a row
    that is gone."""
    X, y = classification_data(n=200)
    ids = list(range(len(y)))
    params = dict(FAST, rho=0.05, mode=mode)  # 10 rows by ρ, 50 by the minimum: it binds
    model = QSSClassifier(**params).fit(X, y, ids)
    rows = model.engine_.rows
    members = schema_ids(model, 0)
    assert len(members) == 50
    order = np.argsort(rows.draws[: rows.size, 0])
    joining = rows.ids[order[len(members)]]  # the first row by draw outside D°_0
    assert joining not in members
    model.forget([members[0]])
    assert joining in schema_ids(model, 0)
    receipt = model.forget([joining])
    assert 0 in receipt.instances_hit
    if mode == "exact":
        expected = refit_without(QSSClassifier, params, X, y, ids, [members[0], joining])
    else:
        y_prime = y.copy()
        y_prime[[members[0], joining]] = -1
        expected = QSSClassifier(**params).fit(X, y_prime, ids)
    assert_same_model(model, expected, X)


def test_forget_one_by_one_equals_batch_and_refit(clf_data):
    X, y = clf_data
    ids = list(range(len(y)))
    removed = list(range(0, 120, 7))
    a = QSSClassifier(**FAST).fit(X, y)
    for i in removed:
        a.forget([i])
    b = QSSClassifier(**FAST).fit(X, y)
    b.forget(removed)
    assert_same_model(a, b, X)
    assert_same_model(a, refit_without(QSSClassifier, FAST, X, y, ids, removed), X)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(120, 260),
    k=st.integers(2, 4),
    ops=st.lists(
        st.tuples(st.sampled_from(["forget", "insert"]), st.integers(1, 25)), min_size=1, max_size=5
    ),
)
def test_interleaved_forgets_and_inserts_equal_refit(seed, n, k, ops):
    X, y = classification_data(n=n, k=k, seed=seed)
    rng = np.random.default_rng(seed)
    start = n // 2
    model = QSSClassifier(**FAST).fit(X[:start], y[:start], list(range(start)))
    present = set(range(start))
    pending = list(range(start, n))
    for op, size in ops:
        if op == "forget":
            victims = (
                rng.choice(
                    sorted(present), size=min(size, len(present) - 60), replace=False
                ).tolist()
                if len(present) > 60
                else []
            )
            if not victims:
                continue
            counts = np.bincount(y[sorted(present - set(victims))], minlength=k)
            if np.count_nonzero(counts) < 2:
                continue
            model.forget(victims)
            present -= set(victims)
        else:
            batch, pending = pending[:size], pending[size:]
            if not batch or not set(y[batch]) <= set(model.classes_):
                continue
            model.insert(X[batch], y[batch], batch)
            present |= set(batch)
    keep = sorted(present)
    fresh = QSSClassifier(**FAST).fit(X[keep], y[keep], keep)
    assert_same_model(model, fresh, X)


def test_insert_order_and_batching_do_not_matter(clf_data):
    X, y = clf_data
    base = list(range(150))
    extra = list(range(150, 240))
    one = QSSClassifier(**FAST).fit(X[base], y[base], base)
    one.insert(X[extra], y[extra], extra)
    many = QSSClassifier(**FAST).fit(X[base], y[base], base)
    for chunk in np.array_split(np.array(extra[::-1]), 7):
        many.insert(X[chunk], y[chunk], chunk.tolist())
    assert_same_model(one, many, X)
    assert_same_model(one, QSSClassifier(**FAST).fit(X, y), X)


def test_forgetting_a_whole_class_refits_without_it():
    X, y = classification_data(k=3)
    ids = list(range(len(y)))
    model = QSSClassifier(**FAST).fit(X, y)
    gone = [i for i in ids if y[i] == 2]
    receipt = model.forget(gone)
    assert receipt.instances_hit == (0, 1, 2)
    assert model.classes_.tolist() == [0, 1]
    assert_same_model(model, refit_without(QSSClassifier, FAST, X, y, ids, gone), X)


@pytest.mark.parametrize(
    "cls,data,unlabeled",
    [(QSSClassifier, classification_data, -1), (QSSRegressor, regression_data, np.nan)],
)
def test_label_mode_forget_equals_fit_with_labels_removed(cls, data, unlabeled):
    X, y = data()
    y = y.astype(np.float64) if cls is QSSRegressor else y
    params = {**FAST, "mode": "label"}
    model = cls(**params).fit(X, y)
    removed = list(range(0, len(y), 5)) + schema_ids(model, 0)[:2]
    removed = sorted(set(removed))
    receipt = model.forget(removed)
    assert receipt.scope == "label"
    y_prime = y.copy()
    y_prime[removed] = unlabeled
    assert_same_model(model, cls(**params).fit(X, y_prime), X)


def test_label_mode_erase_inputs_equals_refit_without_rows(clf_data):
    X, y = clf_data
    params = {**FAST, "mode": "label"}
    ids = list(range(len(y)))
    model = QSSClassifier(**params).fit(X, y)
    removed = ids[::11]
    receipt = model.forget(removed, erase_inputs=True)
    assert receipt.scope == "instance" and receipt.instances_hit == (0, 1, 2)
    assert_same_model(model, refit_without(QSSClassifier, params, X, y, ids, removed), X)


def test_label_mode_refuses_to_forget_a_label_twice(clf_data):
    X, y = clf_data
    model = QSSClassifier(**{**FAST, "mode": "label"}).fit(X, y)
    model.forget([3])
    with pytest.raises(KeyError):
        model.forget([3])


def test_exact_mode_rejects_erase_inputs_flag(clf_data):
    X, y = clf_data
    model = QSSClassifier(**FAST).fit(X, y)
    with pytest.raises(ValueError, match="erase_inputs"):
        model.forget([1], erase_inputs=True)


def test_rows_predict_the_same_alone_or_in_batches(clf_data):
    X, y = clf_data
    model = QSSClassifier(**FAST).fit(X, y)
    batch = model.predict_proba(X)
    alone = np.vstack([model.predict_proba(X[i : i + 1]) for i in range(0, len(y), 9)])
    assert np.array_equal(batch[::9], alone)


def test_default_parameters_are_reproducible():
    X, y = classification_data(n=2400, d=8, k=3)
    a = QSSClassifier().fit(X, y)
    b = QSSClassifier().fit(X, y)
    assert a.state_digest() == b.state_digest()
    a.forget([0, 1, 2])
    a.wait_for_rebuilds()
    assert_same_model(a, QSSClassifier().fit(X[3:], y[3:], list(range(3, len(y)))), X)


def test_state_digest_commits_to_each_rows_contribution(clf_data):
    """Same rows and schema but one row contributing other codes → a different digest."""
    X, y = clf_data
    model = QSSClassifier(**FAST).fit(X, y)
    twin = QSSClassifier(**FAST).fit(X, y)
    assert model.state_digest() == twin.state_digest()
    rows, inst = twin.engine_.rows, twin.engine_.instances[0]
    p = np.array([rows.position[outside_all_schemas(twin)[0]]])
    inst.subtract_rows(rows.contributions(0, p), rows.folds(p))
    altered = (rows.codes[0][p] + 1) % inst.schema.codebook.n_centroids
    inst.add_rows(Contributions.of(rows.row_hash[p], altered, rows.residuals[0][p]), rows.folds(p))
    assert model.state_digest() != twin.state_digest()
    assert not twin.audit_content()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(120, 240),
    batches=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    string_ids=st.booleans(),
)
def test_regressor_sequences_of_forgets_equal_refit(seed, n, batches, string_ids):
    X, y = regression_data(n=n, seed=seed)
    ids = [f"r{i}" for i in range(n)] if string_ids else list(range(n))
    model = QSSRegressor(**FAST).fit(X, y, ids)
    rng = np.random.default_rng(seed)
    remaining = list(ids)
    for size in batches:
        if len(remaining) - size < 80:
            break
        victims = [remaining[i] for i in rng.choice(len(remaining), size, replace=False)]
        model.forget(victims)
        remaining = [i for i in remaining if i not in set(victims)]
    index = {row_id: i for i, row_id in enumerate(ids)}
    keep = [index[i] for i in remaining]
    assert_same_model(model, QSSRegressor(**FAST).fit(X[keep], y[keep], remaining), X)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), fraction=st.floats(0.01, 0.4), k=st.integers(2, 4))
def test_label_mode_random_forgets_equal_fit_with_unlabeled(seed, fraction, k):
    X, y = classification_data(n=200, k=k, seed=seed)
    params = {**FAST, "mode": "label"}
    model = QSSClassifier(**params).fit(X, y)
    rng = np.random.default_rng(seed)
    victims = sorted(rng.choice(len(y), max(1, int(fraction * len(y))), replace=False).tolist())
    y_prime = y.copy()
    y_prime[victims] = -1
    labeled = y_prime[y_prime >= 0]
    if np.unique(labeled).size < k:
        return  # a class vanished: covered by the refit test
    model.forget(victims)
    assert_same_model(model, QSSClassifier(**params).fit(X, y_prime), X)
