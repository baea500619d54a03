"""head="shared-rf": the shared ridge head on [u, ψ(u)], ψ fixed random ReLU features.

What must hold: forget ≡ refit bit for bit (rows outside D°, D° hits, inserts, a save/load
round trip), a row's features and prediction the same alone as in any batch, one Gram for
every instance (one factorization per change) and a digest of its own."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_same_model, outside_all_schemas, schema_ids

from forgetting import QSSClassifier, QSSRegressor
from forgetting._rowwise import HEAD_BLOCK_ROWS, SERVE_BLOCK_ROWS
from forgetting.content.heads import GramSystem, head_features
from forgetting.content.heads import fixed_point as fixed_point_module
from forgetting.content.heads import gram as gram_module
from forgetting.content.tables import flat_content as tables_module
from forgetting.instance import Instance
from forgetting.schema import normalized_rows
from forgetting.schema.random_features import RF_SEED, random_features, rf_width

RF = dict(rho=0.1, n_instances=3, partition="trees", head="shared-rf", rebuild="sync")


def curved_data(n=900, d=30, k=3, seed=0):
    """Labels from a noisy *nonlinear* score (a tanh of a linear one, plus a product term):
    the random features have something to add to the linear head."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    B = rng.normal(size=(d, k))
    score = np.tanh(X @ B) + 0.5 * (X[:, :k] * X[:, k : 2 * k]) + 0.3 * rng.normal(size=(n, k))
    return X, score.argmax(axis=1)


def refit(cls, X, y, ids, removed, **params):
    gone = set(removed)
    keep = [i for i, row_id in enumerate(ids) if row_id not in gone]
    return cls(**params).fit(X[keep], y[keep], [ids[i] for i in keep])


@pytest.fixture(scope="module")
def served():
    X, y = curved_data()
    ids = [f"r{i}" for i in range(len(y))]
    return QSSClassifier(**RF).fit(X, y, ids), X, y, ids


# -- the features ----------------------------------------------------------------------------
def test_width_rule_and_features_are_the_formula_in_range():
    assert [rf_width(d) for d in (1, 16, 64, 65, 108, 384, 520, 4096)] == [
        64, 64, 64, 128, 128, 384, 512, 512,
    ]  # fmt: skip
    U = normalized_rows(np.random.default_rng(1).normal(size=(200, 30)))
    psi = random_features(30, 64)(U, HEAD_BLOCK_ROWS)
    R = np.random.default_rng(RF_SEED).standard_normal((30, 64))
    assert psi.shape == (200, 64) and psi.min() >= 0.0 and psi.max() <= 1.0
    np.testing.assert_allclose(psi, np.clip(U @ R / 8.0, 0.0, 1.0), rtol=0, atol=1e-12)
    assert random_features(30, 64) is random_features(30, 64, RF_SEED)  # one R per key


def test_features_on_the_integer_grid_are_exact_in_any_batch():
    """ψ on the grid: ũ = rint(2^14 u), R̃ = rint(2^b R), an integer product below 2^53 —
    the float formula within the grid's rounding, and a row's bits the same alone, in any
    batch and in any order (no blocks)."""
    rng = np.random.default_rng(2)
    U = normalized_rows(rng.normal(size=(300, 30)))
    rf = random_features(30, 64, exact=True)
    assert rf.exact and rf.weight_bits == 24 and rf is random_features(30, 64, RF_SEED, True)
    assert rf is not random_features(30, 64)  # the block product's ψ is another object
    R = np.random.default_rng(RF_SEED).standard_normal((30, 64)) / 8.0
    assert np.array_equal(rf.R, np.rint(R * 2.0**24)) and float(np.max(np.abs(rf.R))) < 2**24
    psi = rf(U, HEAD_BLOCK_ROWS)
    np.testing.assert_allclose(psi, np.clip(U @ R, 0.0, 1.0), rtol=0, atol=30 * 2.0**-15)
    P = np.rint(U * 2.0**14) @ rf.R
    assert np.array_equal(P, np.rint(P)) and np.array_equal(psi, np.clip(P * 2.0**-38, 0, 1))
    alone = np.vstack([rf(U[i : i + 1], SERVE_BLOCK_ROWS) for i in range(300)])
    assert np.array_equal(psi, alone)
    assert np.array_equal(psi, rf(U[::-1], 7)[::-1])
    assert np.array_equal(psi[:5], rf.on_grid(np.vstack([U[:5], U[:5]]))[:5])


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
def test_fixed_point_features_in_one_pass_are_the_composed_forms_bits(kernels, use_kernels):
    """RandomFeatures.fixed_point_into (one product, then one compiled pass or numpy on
    contiguous arrays) writes head_features([u, ψ(u)]) bit for bit — zero rows, a basis
    vector, one row and none; and rows far off the unit sphere, where u's grid values pass
    ±2^14 and ψ clips at 1 (the composed form clips both), with ψ clipping at 0 throughout."""
    use_kernels(kernels)
    rng = np.random.default_rng(5)
    for n, d, width, scale in [
        (3000, 30, 64, 1.0),
        (1, 30, 64, 1.0),
        (0, 30, 64, 1.0),
        (257, 3, 64, 1.0),
        (300, 30, 64, 40.0),
    ]:
        X = rng.normal(size=(n, d)) * rng.uniform(0.01, 100.0, size=(n, 1))
        X[: min(n, 2)] = 0.0
        if n > 3:
            X[3] = 0.0
            X[3, 0] = 1.0
        U = normalized_rows(X, HEAD_BLOCK_ROWS) * scale
        rf = random_features(d, width, exact=True)
        composed = head_features(np.hstack([U, rf(U, HEAD_BLOCK_ROWS)]), np.float64)
        out = np.full((n, d + width + 1), np.nan)
        rf.fixed_point_into(U, out)
        assert np.array_equal(out, composed)
        if scale > 1.0:  # both clips active
            assert (out[:, d : d + width] == 2**14).any() and (np.abs(out[:, :d]) == 2**14).any()
    with pytest.raises(ValueError, match="integer grid"):
        random_features(30, 64).fixed_point_into(U, out)


def test_a_large_changes_features_split_between_threads_are_the_same_bits(monkeypatch):
    """statistics_head_features splits rows between the pool's threads at multiples of the
    block height (from SPLIT_FEATURE_ROWS rows): the composed form's bits, with the
    normalized rows given or computed per part, and for a schema without the grid."""
    from forgetting import instance as instance_module

    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(600, 12)), rng.integers(0, 3, size=600)
    model = QSSClassifier(**RF).fit(X, y)
    schema = model.engine_.instances[0].schema
    assert schema.rf_exact
    rows = rng.normal(size=(1000, 12)).astype(np.float32)
    composed = head_features(schema.head_inputs(rows, HEAD_BLOCK_ROWS), np.float64)
    for split in (10**9, 100, 1):
        monkeypatch.setattr(instance_module, "SPLIT_FEATURE_ROWS", split)
        got = instance_module.statistics_head_features(schema, rows)
        assert np.array_equal(got, composed)
        given = instance_module.statistics_head_features(schema, rows, normalized_rows(rows))
        assert np.array_equal(given, composed)
    old = dataclasses.replace(schema, rf_exact=False)
    composed_old = head_features(old.head_inputs(rows, HEAD_BLOCK_ROWS), np.float64)
    assert np.array_equal(instance_module.statistics_head_features(old, rows), composed_old)


def test_the_grid_bits_keep_every_sum_below_2_to_52():
    from forgetting.schema.random_features import weight_grid_bits

    assert weight_grid_bits(30, 0.6) == 24
    for d in (2**12, 2**16, 2**20):
        b = weight_grid_bits(d, 0.6)
        assert d * 2.0**14 * (2.0**b * 0.6 + 0.5) < 2.0**52
        assert b == 24 or 2.0**52 <= d * 2.0**14 * (2.0 ** (b + 1) * 0.6 + 0.5)  # the largest
    assert weight_grid_bits(2**16, 0.6) < 24


def test_models_fitted_before_the_grid_keep_the_block_product(served):
    """A schema without ``rf_exact`` (a model saved before it) computes ψ as then — the
    float product in canonical blocks, which its stored sums hold — and digests apart."""
    model, X, _, _ = served
    schema = model.engine_.instances[0].schema
    assert schema.rf_exact
    old = dataclasses.replace(schema, rf_exact=False)
    Xf = np.asarray(X[:100], np.float32)
    U = normalized_rows(Xf, HEAD_BLOCK_ROWS)
    block = random_features(30, 64)(U, HEAD_BLOCK_ROWS)
    assert np.array_equal(old.head_inputs(Xf, HEAD_BLOCK_ROWS), np.hstack([U, block]))
    grid = random_features(30, 64, exact=True)(U)
    assert np.array_equal(schema.head_inputs(Xf, HEAD_BLOCK_ROWS), np.hstack([U, grid]))
    assert not np.array_equal(block, grid)
    assert old.digest() != schema.digest() and old.input_head_key != schema.input_head_key


@pytest.mark.parametrize("block_rows", [SERVE_BLOCK_ROWS, HEAD_BLOCK_ROWS])
def test_a_rows_features_are_the_same_alone_as_in_a_batch(served, block_rows):
    model, X, _, _ = served
    schema = model.engine_.instances[0].schema
    assert schema.rf_width == 64 and schema.n_features == 30 + 64 and schema.input_head
    Xf = np.asarray(X[:300], np.float32)
    batch = schema.head_inputs(Xf, block_rows)  # > 3 blocks: the stacked evaluation
    again = schema.head_inputs(Xf[::-1], block_rows)[::-1]
    alone = np.vstack([schema.head_inputs(Xf[i : i + 1], block_rows) for i in range(0, 300, 7)])
    assert np.array_equal(batch, again)
    assert np.array_equal(batch[::7], alone)
    given = schema.head_inputs(Xf, block_rows, normalized_rows(Xf, 1024))  # normalized elsewhere
    assert np.array_equal(batch, given)


def test_a_rows_prediction_is_the_same_alone_as_in_a_batch(served):
    model, X, _, _ = served
    whole = model.predict_proba(X[:200])
    alone = np.vstack([model.predict_proba(X[i : i + 1]) for i in range(0, 200, 9)])
    assert np.array_equal(whole[::9], alone)


# -- forget ≡ refit --------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["outside", "one_schema", "many"])
def test_forget_equals_refit(served, which):
    _, X, y, ids = served
    model = QSSClassifier(**RF).fit(X, y, ids)
    assert "head" in model.corrections_
    s0, s1, s2 = (schema_ids(model, r) for r in range(3))
    removed = {
        "outside": outside_all_schemas(model)[:3],
        "one_schema": [i for i in s0 if i not in s1 and i not in s2][:1],  # a D° hit
        "many": ids[::4],
    }[which]
    receipt = model.forget(removed)
    if which == "one_schema":
        assert receipt.instances_hit == (0,)
    again = refit(QSSClassifier, X, y, ids, removed, **RF)
    assert model.corrections_ == again.corrections_
    assert_same_model(model, again, X)
    assert model.audit_content()


def test_insert_equals_fit(served):
    _, X, y, ids = served
    model = QSSClassifier(**RF).fit(X[:700], y[:700], ids[:700])
    model.insert(X[700:], y[700:], ids[700:])
    assert_same_model(model, QSSClassifier(**RF).fit(X, y, ids), X)


def test_save_load_keeps_it_exact(served, tmp_path):
    model, X, y, ids = served
    path = tmp_path / "m.qss"
    model.save(path)
    loaded = QSSClassifier.load(path)
    schema = loaded.engine_.instances[0].schema
    assert (schema.head, schema.rf_width, schema.rf_seed) == ("shared-rf", 64, RF_SEED)
    assert_same_model(model, loaded, X)
    removed = outside_all_schemas(loaded)[:5]
    loaded.forget(removed)
    assert_same_model(loaded, refit(QSSClassifier, X, y, ids, removed, **RF), X)


def test_regression_forget_equals_refit():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 12))
    y = np.sin(X[:, 0]) * 3 + X[:, 1] + 0.1 * rng.normal(size=500)
    ids = list(range(len(y)))
    model = QSSRegressor(**RF).fit(X, y, ids)
    removed = ids[::6]
    model.forget(removed)
    assert_same_model(model, refit(QSSRegressor, X, y, ids, removed, **RF), X)


# -- one Gram for every instance -------------------------------------------------------------
def test_one_gram_for_every_instance_factored_once_per_change(served, monkeypatch):
    _, X, y, ids = served
    model = QSSClassifier(**RF).fit(X, y, ids)
    heads = [inst.head for inst in model.engine_.instances]
    assert heads[0].gram.shape == (2, 95, 95)
    assert all(np.array_equal(heads[0].gram, h.gram) for h in heads[1:])
    model.predict(X[:5])
    systems, grams, inputs = [], [], []
    real_of = GramSystem.of.__func__
    monkeypatch.setattr(
        GramSystem, "of", classmethod(lambda cls, g: systems.append(1) or real_of(cls, g))
    )
    real_with_pending = gram_module._with_pending  # the leaving rows' Gram terms added
    monkeypatch.setattr(
        gram_module, "_with_pending", lambda g, p: grams.append(1) or real_with_pending(g, p)
    )
    real_inputs = Instance.head_inputs
    monkeypatch.setattr(Instance, "head_inputs", lambda s, X: inputs.append(1) or real_inputs(s, X))
    model.forget(outside_all_schemas(model)[:2])
    assert len(inputs) == 1  # the leaving rows' ψ: once
    model.predict_proba(X[:5])  # exact outputs (labels alone may skip the solve: §5.15)
    assert len(grams) == 1  # their Gram terms (pending until the solve reads the sums): once
    assert len(systems) == 1  # one factorization for the three heads
    heads = [inst.head for inst in model.engine_.instances]
    assert all(np.array_equal(heads[0].gram, h.gram) for h in heads[1:])
    # ... held as one read-only array, known by one token: the next change adds its terms
    # to it once and compares no (2, D, D) sums
    assert all(h.gram is heads[0].gram and h.gram_token == heads[0].gram_token for h in heads)
    compared = []
    real_equal = np.array_equal
    monkeypatch.setattr(
        np,
        "array_equal",
        lambda a, b, **kw: (
            (compared.append(np.shape(a)) if np.ndim(a) == 3 else None) or real_equal(a, b, **kw)
        ),
    )
    grams.clear(), systems.clear()
    model.forget(outside_all_schemas(model)[:1])
    model.predict_proba(X[:5])
    assert len(grams) == 1 and len(systems) == 1 and compared == []
    assert all(h.gram is heads[0].gram for h in heads)


def test_a_batch_computes_its_fold_grams_once_without_comparing_its_features(served, monkeypatch):
    """A batch's head features are computed once, read-only, and its two fold Grams once for
    the three heads (on two threads) — the heads find them by the features' identity, no
    (n, D) copy or comparison — and the forget still lands on the refit."""
    _, X, y, ids = served
    model = QSSClassifier(**RF).fit(X, y, ids)
    model.predict(X[:5])
    grams, compared = [], []
    real_gram = fixed_point_module.exact_gram
    monkeypatch.setattr(
        fixed_point_module, "exact_gram", lambda v: grams.append(len(v)) or real_gram(v)
    )
    real_equal = np.array_equal
    monkeypatch.setattr(
        np,
        "array_equal",
        lambda a, b, **kw: (
            (compared.append(np.shape(a)) if np.shape(a)[:1] == (40,) and np.ndim(a) == 2 else None)
            or real_equal(a, b, **kw)
        ),
    )
    gone = list(outside_all_schemas(model)[:40])
    model.forget(gone)
    model.predict(X[:5])
    monkeypatch.undo()
    assert len(grams) == 2 and sum(grams) == 40  # the two folds, once
    assert compared == []
    assert_same_model(model, refit(QSSClassifier, X, y, ids, gone, **RF), X)


# -- identity ---------------------------------------------------------------------------------
def test_digest_names_the_head_its_width_and_seed(served):
    model, X, y, ids = served
    schema = model.engine_.instances[0].schema
    ridge = QSSClassifier(**{**RF, "head": "shared-ridge"}).fit(X, y, ids)
    assert ridge.engine_.instances[0].schema.digest() != schema.digest()
    assert ridge.state_digest() != model.state_digest()
    wider = dataclasses.replace(schema, rf_width=128, n_features=30 + 128)
    reseeded = dataclasses.replace(schema, rf_seed=RF_SEED + 1)
    assert len({schema.digest(), wider.digest(), reseeded.digest()}) == 3


class _Learned:
    learned = True

    def fit(self, X, y, seed):
        return self

    def transform(self, X):
        return X


def test_refused_with_an_encoder_the_codebook_or_dp():
    X, y = curved_data(n=200)
    with pytest.raises(ValueError, match="features as given"):
        QSSClassifier(**{**RF, "encoder": _Learned()}).fit(X, y)
    with pytest.raises(ValueError, match="flat partition"):
        QSSClassifier(**{**RF, "partition": "rq"}).fit(X, y)


def test_a_chunked_build_equals_the_one_piece_build():
    """The row work a cluster runs (chunks of 1,024 rows, the last one short, reduced
    exactly) gives the same head sums as one piece: ψ is row by row, the sums are integers."""
    from forgetting.distributed import LocalRowWork
    from forgetting.instance import build_instance

    X, y = curved_data(n=2100)
    model = QSSClassifier(**{**RF, "n_instances": 2}).fit(X, y)
    engine = model.engine_
    data = engine._row_data(copy=False)
    engine.set_row_work(LocalRowWork(1024))
    for r in range(2):
        one, _, _ = build_instance(
            engine.config.schema, data, r, engine.config.random_state, engine.config.label_mode
        )
        chunked, _, _ = engine._build(r, data)
        assert one.digest() == chunked.digest()
        assert one.head.equals(chunked.head)
        assert one.head.gram.shape == (2, 95, 95)


def test_forget_equals_refit_at_the_image_sets_width():
    """d = 520 (the HOG features' width): E = 512, a (1033, 1033) Gram — the shapes of
    MNIST- and Fashion-HOG, where BLAS takes other kernels than at d = 30. The head is
    served (labels linear in x), a row outside D° and a D° hit are forgotten."""
    rng = np.random.default_rng(0)
    X = np.abs(rng.normal(size=(4000, 520)))
    y = (X @ rng.normal(size=(520, 10)) + 2 * rng.normal(size=(4000, 10))).argmax(axis=1)
    ids = list(range(len(y)))
    params = {**RF, "rho": 0.05}
    model = QSSClassifier(**params).fit(X, y, ids)
    assert model.engine_.instances[0].schema.n_features == 520 + 512
    assert model.corrections_ == ["head"] * 3
    s0, s1, s2 = (schema_ids(model, r) for r in range(3))
    removed = outside_all_schemas(model)[:2] + [i for i in s0 if i not in s1 and i not in s2][:1]
    model.forget(removed)
    assert_same_model(model, refit(QSSClassifier, X, y, ids, removed, **params), X[:300])


def test_a_prediction_computes_head_inputs_only_for_a_served_head(served, monkeypatch):
    """Where every instance serves its tables, a prediction reads φ, g and the cells alone
    (ψ's block product is skipped); where heads serve, the inputs are computed once for all."""
    heads, X, y, _ = served
    assert heads.corrections_ == ["head"] * 3
    with monkeypatch.context() as patch:  # the tables serve: the threshold past every gain
        patch.setattr(tables_module, "TABLES_GAIN_FACTOR", np.inf)
        tables = QSSClassifier(**RF).fit(X, y)
        expected = tables.engine_.predict_outputs(X[:5])
    assert tables.corrections_ == ["tables"] * 3
    calls = []
    original = type(heads.engine_.instances[0].schema).head_inputs

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(heads.engine_.instances[0].schema), "head_inputs", counted)
    with monkeypatch.context() as patch:
        patch.setattr(tables_module, "TABLES_GAIN_FACTOR", np.inf)
        assert np.array_equal(tables.engine_.predict_outputs(X[:5]), expected)
    assert calls == []  # the tables' prediction read no head inputs
    heads.predict_proba(X[:5])
    assert calls == [1]  # once for the three instances


def test_a_head_served_after_the_choice_gets_its_inputs(served, monkeypatch):
    """The served content is chosen, then re-read under the lock that guards the sums (a
    change may land in between): when the head serves only at the second read, its inputs
    are computed then, and the prediction is what the head serves."""
    model, X, _, _ = served
    expected = model.predict_proba(X[:40])
    engine = model.engine_
    real = type(engine)._content
    seen: dict[int, int] = {}

    def tables_first(self, inst):
        content = real(self, inst)
        seen[id(inst)] = seen.get(id(inst), 0) + 1
        if seen[id(inst)] == 1:  # the first read: as if the tables served
            return dataclasses.replace(content, head=None)
        return content

    monkeypatch.setattr(type(engine), "_content", tables_first)
    assert np.array_equal(model.predict_proba(X[:40]), expected)
    assert sorted(seen.values()) == [2, 2, 2]
