"""Flat partitions: D°-only structure, cells that are a pure function of each row."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from forgetting.schema.partitions import ExactLinear, ThresholdPartition, choose_depth, to_grid
from forgetting.schema.partitions.hyperplanes import fit_hyperplanes
from forgetting.schema.partitions.trees import fit_trees
from forgetting.schema.preprocess import l2_normalize


def _features(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return l2_normalize(rng.standard_normal((n, d)) * rng.uniform(0.1, 3.0, d))


FITS = [
    ("trees/none", lambda Z, s: fit_trees(Z, 16, 6, s, "none")),
    ("trees/pca", lambda Z, s: fit_trees(Z, 16, 6, s, "pca", n_components=8)),
    ("hyperplanes/standardize", lambda Z, s: fit_hyperplanes(Z, 16, 6, s, "standardize")),
    ("hyperplanes/pca", lambda Z, s: fit_hyperplanes(Z, 16, 6, s, "pca", n_components=8)),
]


@pytest.mark.parametrize("name,fit", FITS, ids=[f[0] for f in FITS])
def test_cells_are_a_pure_function_of_the_row(name, fit) -> None:
    """Codes of a row are the same alone, in any batch, in any order and in float32 copies
    (the exact-projection design: no BLAS summation order can move a row across a cut)."""
    Z = _features(3000, 40)
    part = fit(Z[:60], 1)
    whole = part.cells(Z)
    assert whole.shape == (3000, 16) and whole.max() < part.n_cells
    singles = np.vstack([part.cells(Z[i : i + 1]) for i in range(0, 3000, 37)])
    assert np.array_equal(singles, whole[::37])
    perm = np.random.default_rng(2).permutation(3000)
    assert np.array_equal(part.cells(Z[perm]), whole[perm])
    assert np.array_equal(part.cells(np.asfortranarray(Z)), whole)


@pytest.mark.parametrize("name,fit", FITS, ids=[f[0] for f in FITS])
def test_a_few_rows_codes_in_one_compiled_call_are_the_numpy_routes(name, fit, use_kernels):
    """The one-call route for a few rows (grid, 0–2 exact stages and the tests row by row:
    ``partition_codes``) gives the numpy definition's codes — rows beyond D°'s range that the
    grid and the stages clip included — and a non-finite feature goes to the numpy route."""
    use_kernels("numba")
    Z = _features(200, 40, seed=3)
    part = fit(Z[:60], 1)
    rows = np.vstack([Z[:4], Z[100:136], np.full((2, 40), 1e6), np.full((2, 40), -3.0)])
    expected = part._codes_numpy(part.project(rows))
    for k in (1, 7, 44):
        assert np.array_equal(part.cells(rows[:k]), expected[:k].astype(part.cell_dtype))
    # two hand-made stages that shift (D°'s stages usually need no shift): fractions rounded
    rng = np.random.default_rng(4)
    first = ExactLinear(np.rint(rng.uniform(-8, 8, (12, 40))), np.zeros(40), 9)
    second = ExactLinear(np.rint(rng.uniform(-8, 8, (6, 12))), np.ones(12), 3)
    tests = rng.integers(0, 6, (5, 3))
    outputs = ThresholdPartition(tests, np.zeros((5, 3)), first, second).project(rows[:5])
    # thresholds at the rows' own outputs, like D°'s: a unit off anywhere flips a test
    made = ThresholdPartition(tests, outputs[np.arange(5)[:, None], tests], first, second)
    made_expected = made._codes_numpy(made.project(rows))
    assert np.array_equal(made.cells(rows[:9]), made_expected[:9].astype(made.cell_dtype))
    bad = rows[:3].copy()
    bad[1, 5] = np.nan
    use_kernels("numpy")
    assert np.array_equal(
        part.cells(bad), part._codes_numpy(part.project(bad)).astype(part.cell_dtype)
    )
    use_kernels("numba")
    assert np.array_equal(
        part.cells(bad), part._codes_numpy(part.project(bad)).astype(part.cell_dtype)
    )


def test_kept_kernel_arguments_follow_the_partition(use_kernels):
    """Each partition's few-row kernel arguments are kept by its identity, outside it: two
    partitions of one shape taking turns each get their own codes, and a kept partition's
    digest (its attributes) is what it was before any encode."""
    from forgetting.schema import _hash_value

    use_kernels("numba")
    Z = _features(120, 40, seed=8)
    fit = FITS[0][1]
    one, two = fit(Z[:60], 1), fit(Z[60:], 2)

    def digest(part):
        h = hashlib.sha256()
        _hash_value(h, part)
        return h.hexdigest()

    before = digest(one)
    for part in (one, two, one, two):
        want = part._codes_numpy(part.project(Z[:3])).astype(part.cell_dtype)
        assert np.array_equal(part.cells(Z[:3]), want)
    assert digest(one) == before


@pytest.mark.parametrize("name,fit", FITS, ids=[f[0] for f in FITS])
def test_structure_depends_on_d0_and_seed_only(name, fit) -> None:
    Z = _features(500, 30, seed=3)
    a, b = fit(Z[:50], 7), fit(Z[:50].copy(), 7)
    assert np.array_equal(a.cells(Z), b.cells(Z))
    c = fit(Z[:50], 8)
    assert not np.array_equal(a.cells(Z), c.cells(Z))


@pytest.mark.parametrize("name,fit", FITS, ids=[f[0] for f in FITS])
def test_cells_spread_the_rows(name, fit) -> None:
    """Thresholds drawn at D° rows cut through the data: most tables use many cells."""
    Z = _features(4000, 30, seed=4)
    cells = fit(Z[:80], 5).cells(Z)
    used = [len(np.unique(cells[:, t])) for t in range(cells.shape[1])]
    assert np.median(used) >= 16


def test_projection_is_exact_integer_arithmetic() -> None:
    """The projected grid values equal an int64 (Python-exact) evaluation of the same map."""
    Z = _features(200, 50, seed=5)
    part = fit_hyperplanes(Z[:40], 4, 5, 0, "standardize")
    stage = part.stage2
    Xg = to_grid(Z).astype(np.int64)
    W = stage.weights.astype(np.int64)
    exact = (Xg - stage.center.astype(np.int64)) @ W.T
    assert np.array_equal(
        part.project(Z),
        np.clip(np.rint(np.ldexp(exact.astype(np.float64), -stage.shift)), -(2.0**21), 2.0**21),
    )


def test_rows_far_outside_d0_are_clipped_not_wrong() -> None:
    Z = _features(100, 20, seed=6)
    part = fit_hyperplanes(Z[:30], 8, 4, 0, "pca", n_components=5)
    far = np.full((3, 20), 1e6)
    cells = part.cells(far)
    assert cells.shape == (3, 8) and np.array_equal(cells[0], cells[1])


def test_choose_depth_uses_d0_and_rho_only() -> None:
    assert choose_depth(300, 0.005, 16) == 11  # 60 000 expected rows / 16 → 3750 → 2^11
    assert choose_depth(300, 0.005, 1) == 14  # capped
    assert choose_depth(2, 0.5, 16) == 1


def test_partition_is_plain_data() -> None:
    """Frozen dataclass of arrays and ints (the model file codec stores it without pickle)."""
    part = fit_trees(_features(50, 10), 4, 3, 0, "pca", n_components=4)
    assert isinstance(part, ThresholdPartition)
    with pytest.raises(AttributeError):
        part.features = None  # type: ignore[misc]
    for value in (part.features, part.thresholds, part.stage1.weights, part.stage1.center):
        assert isinstance(value, np.ndarray)
    assert isinstance(part.stage1.shift, int)


# -- flat partitions inside the estimators: forget ≡ refit, bit for bit ---------------------
FLAT = dict(rho=0.25, n_instances=3, rebuild="sync", random_state=0)


def _refit_without(cls, params, X, y, ids, removed):
    removed = set(removed)
    keep = [i for i, row_id in enumerate(ids) if row_id not in removed]
    return cls(**params).fit(X[keep], y[keep], [ids[i] for i in keep])


@pytest.mark.parametrize(
    "task,partition",
    [("classification", "trees"), ("classification", "hyperplanes"), ("regression", "trees")],
)
def test_flat_forget_equals_refit_including_d0_hits(task, partition) -> None:
    from helpers import (
        assert_same_model,
        classification_data,
        outside_all_schemas,
        schema_ids,
    )

    from forgetting import QSSClassifier, QSSRegressor

    if task == "classification":
        cls, (X, y) = QSSClassifier, classification_data(n=300, k=4)
    else:
        from helpers import regression_data

        cls, (X, y) = QSSRegressor, regression_data(n=300)
    params = {**FLAT, "partition": partition}
    ids = [f"r{i}" for i in range(len(y))]
    model = cls(**params).fit(X, y, ids)
    assert model.engine_.instances[0].schema.partition is not None
    outside = outside_all_schemas(model)
    removed = outside[:1]
    assert model.forget(removed).instances_hit == ()
    assert_same_model(model, _refit_without(cls, params, X, y, ids, removed), X)
    more = sorted(set(outside[1:40:3] + schema_ids(model, 0)[:1] + schema_ids(model, 2)[:2]))
    receipt = model.forget(more)
    assert set(receipt.instances_hit) >= {0, 2}
    removed = removed + more
    assert_same_model(model, _refit_without(cls, params, X, y, ids, removed), X)
    assert model.audit_content()


@pytest.mark.parametrize("partition", ["trees"])
def test_flat_insert_equals_fit_on_all_rows(partition) -> None:
    from helpers import assert_same_model, classification_data

    from forgetting import QSSClassifier

    X, y = classification_data(n=300, k=3, seed=1)
    ids = list(range(300))
    params = {**FLAT, "partition": partition}
    model = QSSClassifier(**params).fit(X[:200], y[:200], ids[:200])
    model.insert(X[200:260], y[200:260], ids[200:260])
    model.insert(X[260:], y[260:], ids[260:])
    assert_same_model(model, QSSClassifier(**params).fit(X, y, ids), X)


def test_flat_label_mode_forget_equals_fit_with_labels_removed() -> None:
    from helpers import assert_same_model, classification_data, schema_ids

    from forgetting import QSSClassifier

    X, y = classification_data(n=300, k=3, seed=2)
    params = {**FLAT, "mode": "label", "partition": "trees"}
    model = QSSClassifier(**params).fit(X, y)
    removed = sorted(set(range(0, 300, 7)) | set(schema_ids(model, 1)[:2]))
    assert model.forget(removed).scope == "label"
    y_prime = y.copy()
    y_prime[removed] = -1
    assert_same_model(model, QSSClassifier(**params).fit(X, y_prime), X)


def test_flat_background_rebuilds_land_on_the_refit() -> None:
    from helpers import assert_same_model, classification_data, schema_ids

    from forgetting import QSSClassifier

    X, y = classification_data(n=300, k=3, seed=3)
    ids = list(range(300))
    params = {**FLAT, "partition": "trees", "rebuild": "background"}
    model = QSSClassifier(**params).fit(X, y, ids)
    removed = schema_ids(model, 0)[:1] + [i for i in range(150, 170)]
    model.forget(sorted(set(removed)))
    model.predict(X[:5])  # served by the valid instances meanwhile
    model.wait_for_rebuilds()
    ref = _refit_without(QSSClassifier, {**params, "rebuild": "sync"}, X, y, ids, removed)
    assert np.array_equal(model.predict_proba(X), ref.predict_proba(X))
    model_sync = _refit_without(QSSClassifier, params, X, y, ids, removed)
    model_sync.wait_for_rebuilds()
    assert_same_model(model, model_sync, X)


def test_flat_save_load_then_forget(tmp_path) -> None:
    from helpers import assert_same_model, classification_data

    from forgetting import QSSClassifier

    X, y = classification_data(n=300, k=3, seed=4)
    ids = list(range(300))
    params = {**FLAT, "partition": "hyperplanes"}
    model = QSSClassifier(**params).fit(X, y, ids)
    model.save(tmp_path / "m.qss")
    loaded = QSSClassifier.load(tmp_path / "m.qss")
    assert_same_model(model, loaded, X)
    removed = list(range(0, 300, 9))
    loaded.forget(removed)
    assert_same_model(loaded, _refit_without(QSSClassifier, params, X, y, ids, removed), X)


def test_flat_partition_parameter_is_validated() -> None:
    from helpers import classification_data

    from forgetting import QSSClassifier

    X, y = classification_data(n=120)
    with pytest.raises(ValueError, match="partition"):
        QSSClassifier(partition="kmeans").fit(X, y)
    with pytest.raises(ValueError, match="rq"):
        QSSClassifier(partition="trees", n_centroids=8).fit(X, y)
