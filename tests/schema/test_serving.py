"""The serving route (schema.serving): a prediction's φ, g and cells are a function of the row
and the schema alone — the compiled kernels and the numpy definition give the same bits, a row
encodes the same alone, in any batch and beside any other schemas, and the schemas it does not
compile keep the models' own arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import regression_data, with_kernels

from forgetting import QSSClassifier, QSSRegressor
from forgetting._rowwise import SERVE_BLOCK_ROWS, kept_for
from forgetting.schema import serving


def _clustered(n: int, d: int, k: int, seed: int):
    """Well-separated classes: with D° of a few hundred rows φ keeps LDA directions."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(k, d))
    y = rng.integers(0, k, size=n)
    return centers[y] + rng.normal(size=(n, d)), y


def _queries(d: int, seed: int, extreme: float = 1e150) -> np.ndarray:
    """Rows of every kind the route must take: ordinary, tiny, huge (``extreme``; the
    estimators take float32's range), one all-zero row, rows with zeros and signed zeros,
    and one with a single non-zero entry."""
    rng = np.random.default_rng(seed)
    X = rng.normal(scale=3.0, size=(40, d))
    X[1] /= extreme
    X[2] *= extreme
    X[3] = 0.0
    X[4, ::2] = 0.0
    X[5] = -0.0
    X[6] = 0.0
    X[6, d // 2] = -7.5
    return X


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x, y, equal_nan=True)
        for left, right in zip(a, b, strict=True)
        for x, y in zip(left, right, strict=True)
    )


@pytest.mark.parametrize("lda", [True, False])
def test_kernels_and_the_numpy_definition_give_the_same_bits(lda):
    X, y = _clustered(3000, 24, 5, 0)
    model = QSSClassifier(rho=0.1, rebuild="sync", random_state=0, lda=lda).fit(X, y)
    schemas = [inst.schema for inst in model.engine_.instances]
    assert all(serving.serves_compiled(s) for s in schemas)
    assert all(s.preprocessor.uses_lda == lda for s in schemas)
    Xq = _queries(24, 1)
    heads = [False] * len(schemas)

    def route():
        u = serving.normalized(Xq)
        return u, serving.encode(schemas, Xq, u, heads)

    u_numba, numba = with_kernels("numba", route)
    u_numpy, numpy = with_kernels("numpy", route)
    assert np.array_equal(u_numba, u_numpy)
    assert _same(numba, numpy)
    assert np.all(u_numba[3] == 0.0) and np.all(np.isfinite(u_numba))
    for (codes, g, phi), schema in zip(numba, schemas, strict=True):
        assert codes.shape == (len(Xq), schema.partition.n_tables)
        assert np.allclose(g.sum(axis=1), 1.0)
        # the same numbers as the models' own arithmetic, up to the order of the sums
        own_codes, own_g, own_phi = schema.encode(Xq, SERVE_BLOCK_ROWS, head=False)
        assert np.allclose(phi, own_phi, rtol=1e-12, atol=1e-15)
        assert np.allclose(g, own_g, rtol=1e-9, atol=1e-12)


def test_a_row_encodes_the_same_alone_in_any_batch_and_beside_any_schemas():
    X, y = _clustered(3000, 24, 5, 2)
    model = QSSClassifier(rho=0.1, rebuild="sync", random_state=1).fit(X, y)
    schemas = [inst.schema for inst in model.engine_.instances]
    Xq = _queries(24, 3)
    u = serving.normalized(Xq)
    whole = serving.encode(schemas, Xq, u, [False] * 3)
    for start, stop in ((0, 1), (5, 6), (2, 9), (0, len(Xq))):
        part = serving.encode(schemas, Xq[start:stop], u[start:stop], [False] * 3)
        assert np.array_equal(serving.normalized(Xq[start:stop]), u[start:stop])
        for got, full in zip(part, whole, strict=True):
            assert all(np.array_equal(a, b[start:stop]) for a, b in zip(got, full, strict=True))
    for r, schema in enumerate(schemas):  # one schema alone, and two in another order
        alone = schema.serve(Xq, head=False)
        assert all(np.array_equal(a, b) for a, b in zip(alone, whole[r], strict=True))
    pair = serving.encode([schemas[2], schemas[0]], Xq, u, [False] * 2)
    assert _same(pair, [whole[2], whole[0]])
    # the thread pool's route (many rows: one call per schema) gives the same bits
    one_by_one = lambda f, items: list(map(f, items))  # noqa: E731 - any map but serial_map
    threaded = serving.encode(schemas, Xq, u, [False] * 3, each=one_by_one)
    assert _same(threaded, whole)
    # through the engine: a row alone, a few and the whole batch predict the same bits
    Xq = _queries(24, 3, extreme=1e30)
    proba = model.predict_proba(Xq)
    assert np.array_equal(model.predict_proba(Xq[:1]), proba[:1])
    assert np.array_equal(model.predict_proba(Xq[2:5]), proba[2:5])


def test_other_schemas_keep_their_models_own_arithmetic():
    X, y = regression_data()
    model = QSSRegressor(rho=0.25, rebuild="sync", random_state=0).fit(X, y)
    schemas = [inst.schema for inst in model.engine_.instances]
    assert not any(serving.serves_compiled(s) for s in schemas)
    u = serving.normalized(X[:20])
    got = serving.encode(schemas, X[:20], u, [False] * len(schemas))
    own = [s.encode(X[:20], SERVE_BLOCK_ROWS, u, head=False) for s in schemas]
    assert _same(got, own)
    # a binary g (expit) is not compiled either
    Xb, yb = _clustered(1500, 12, 2, 4)
    binary = QSSClassifier(rho=0.1, rebuild="sync", random_state=0).fit(Xb, yb)
    assert not any(serving.serves_compiled(i.schema) for i in binary.engine_.instances)


def test_predictions_do_not_depend_on_which_implementation_ran():
    X, y = _clustered(2500, 16, 4, 5)
    ids = np.arange(len(y))
    model = QSSClassifier(rho=0.1, rebuild="sync", random_state=0).fit(X, y, ids)
    Xq = _queries(16, 6, extreme=1e30)
    numba = with_kernels("numba", lambda: model.predict_proba(Xq))
    numpy = with_kernels("numpy", lambda: model.predict_proba(Xq))
    assert np.array_equal(numba, numpy)
    # and a model after a forget serves its refit's bits, whichever ran
    model.forget(ids[10:300:3].tolist())
    keep = np.setdiff1d(ids, ids[10:300:3])
    refit = QSSClassifier(rho=0.1, rebuild="sync", random_state=0).fit(X[keep], y[keep], keep)
    assert np.array_equal(
        with_kernels("numba", lambda: model.predict_proba(Xq)),
        with_kernels("numpy", lambda: refit.predict_proba(Xq)),
    )


def test_the_kept_stacks_stay_few_however_often_the_other_schemas_change():
    """A rebuild replaces an instance's schema while the others stay: the first schema keeps
    the stacked arrays of the group it was served in, so without a bound every rebuild of
    another instance would leave one more stack behind for as long as it lives."""
    X, y = _clustered(2000, 16, 4, 7)
    first = QSSClassifier(rho=0.1, rebuild="sync", random_state=0).fit(X, y)
    schemas = [inst.schema for inst in first.engine_.instances]
    Xq = _queries(16, 8, extreme=1e30)
    u = serving.normalized(Xq[:1])
    expected = serving.encode(schemas, Xq[:1], u, [False] * 3)
    for seed in range(1, 9):  # eight "rebuilds" of the other two instances
        others = QSSClassifier(rho=0.1, rebuild="sync", random_state=seed).fit(X, y)
        group = [schemas[0]] + [inst.schema for inst in others.engine_.instances[1:]]
        got = serving.encode(group, Xq[:1], u, [False] * 3)
        assert all(np.array_equal(a, b) for a, b in zip(got[0], expected[0], strict=True))
        alone = schemas[0].serve(Xq[:1], head=False)  # a group of one beside it
        assert all(np.array_equal(a, b) for a, b in zip(alone, expected[0], strict=True))
    stacks = [key for key in kept_for(schemas[0]) if key[0] == "serving stack"]
    assert len(stacks) <= 2, stacks
