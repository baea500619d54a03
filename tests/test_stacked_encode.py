"""A prediction of a few rows encodes them in the p schemas at once (schema.stacked). These
tests pin that it is each schema's own arithmetic, bit for bit, that a difference is caught
and kept off for good, and that the schemas it cannot stack go one by one."""

from __future__ import annotations

import numpy as np
import pytest

from forgetting import QSSClassifier
from forgetting._rowwise import SERVE_BLOCK_ROWS
from forgetting.schema import normalized_rows
from forgetting.schema import stacked as stacked_module
from forgetting.schema.stacked import encode_block


def _clustered(n: int, d: int, k: int, seed: int):
    """Well-separated classes: with D° of a few hundred rows φ keeps LDA directions."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(k, d))
    y = rng.integers(0, k, size=n)
    return centers[y] + rng.normal(size=(n, d)), y


def _own(schemas, X, normalized):
    return [s.encode(X, SERVE_BLOCK_ROWS, normalized, head=False) for s in schemas]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x, y)
        for left, right in zip(a, b, strict=True)
        for x, y in zip(left, right, strict=True)
    )


@pytest.mark.parametrize("lda", [True, False])
def test_stacked_rows_are_each_schemas_own_encoding(lda):
    X, y = _clustered(3000, 24, 5, 0)
    model = QSSClassifier(rho=0.1, rebuild="sync", random_state=0, lda=lda).fit(X, y)
    schemas = [inst.schema for inst in model.engine_.instances]
    assert all(s.preprocessor.uses_lda == lda for s in schemas)
    Xq = np.random.default_rng(1).normal(scale=3.0, size=(SERVE_BLOCK_ROWS - 1, 24))
    for n in (1, 3, SERVE_BLOCK_ROWS - 1):
        u = normalized_rows(Xq[:n], SERVE_BLOCK_ROWS)
        got = encode_block(schemas, Xq[:n], u, SERVE_BLOCK_ROWS)  # checked, then trusted
        again = encode_block(schemas, Xq[:n], u, SERVE_BLOCK_ROWS)
        assert got is not None and _same(got, _own(schemas, Xq[:n], u)) and _same(again, got)
    assert all(stacked_module._VERDICTS[s.base_model.estimator][len(schemas)] for s in schemas)
    # through the engine: a row alone, a few, and the whole batch predict the same bits
    whole = model.predict_proba(Xq)
    assert np.array_equal(model.predict_proba(Xq[:1]), whole[:1])
    assert np.array_equal(model.predict_proba(Xq[2:5]), whole[2:5])


def test_a_difference_keeps_the_schemas_on_their_own_route(monkeypatch):
    X, y = _clustered(2000, 16, 4, 2)
    model = QSSClassifier(rho=0.1, rebuild="sync", random_state=3).fit(X, y)
    schemas = [inst.schema for inst in model.engine_.instances]
    Xq = X[:2]
    u = normalized_rows(Xq, SERVE_BLOCK_ROWS)
    real = stacked_module._encode_stacked

    def off_by_a_bit(schemas, normalized, block_rows):
        out = real(schemas, normalized, block_rows)
        codes, g, phi = out[1]
        out[1] = (codes, np.nextafter(g, 2.0), phi)
        return out

    monkeypatch.setattr(stacked_module, "_encode_stacked", off_by_a_bit)
    got = encode_block(schemas, Xq, u, SERVE_BLOCK_ROWS)
    assert _same(got, _own(schemas, Xq, u))  # the first call returns the checked route
    assert stacked_module._VERDICTS[schemas[1].base_model.estimator][3] is False
    assert encode_block(schemas, Xq, u, SERVE_BLOCK_ROWS) is None  # and stays off
    expected = model.predict_proba(X[:40])
    assert np.array_equal(model.predict_proba(X[:1]), expected[:1])


def test_schemas_of_another_kind_go_one_by_one():
    X, y = _clustered(2000, 16, 2, 4)  # binary: g's expit, not stacked
    binary = QSSClassifier(rho=0.1, rebuild="sync", random_state=0).fit(X, y)
    schemas = [inst.schema for inst in binary.engine_.instances]
    u = normalized_rows(X[:1], SERVE_BLOCK_ROWS)
    assert encode_block(schemas, X[:1], u, SERVE_BLOCK_ROWS) is None
    X3, y3 = _clustered(2000, 16, 3, 5)
    multi = QSSClassifier(rho=0.1, rebuild="sync", random_state=0).fit(X3, y3)
    three = [inst.schema for inst in multi.engine_.instances]
    u3 = normalized_rows(X3[:SERVE_BLOCK_ROWS], SERVE_BLOCK_ROWS)
    assert encode_block(three, X3[:SERVE_BLOCK_ROWS], u3, SERVE_BLOCK_ROWS) is None  # a block
    assert encode_block(three[:1], X3[:1], u3[:1], SERVE_BLOCK_ROWS) is None  # one schema


def test_the_kept_stacks_follow_the_serving_schemas():
    """The stacked arrays are kept by the serving schemas' identities: another set of
    schemas (a rebuild's, another model's, a subset, another order) gets its own arrays —
    each schema's own bits every time, whichever set was encoded before."""
    X, y = _clustered(2000, 16, 4, 5)
    first = [
        inst.schema for inst in QSSClassifier(rho=0.1, random_state=1).fit(X, y).engine_.instances
    ]
    other = [
        inst.schema for inst in QSSClassifier(rho=0.1, random_state=2).fit(X, y).engine_.instances
    ]
    Xq = X[:2]
    u = normalized_rows(Xq, SERVE_BLOCK_ROWS)
    for schemas in (
        first,
        other,
        first[::-1],
        other[:2],
        first,
        first[:1] + other[1:],
        first[1:] + other[:1],
    ):
        got = encode_block(schemas, Xq, u, SERVE_BLOCK_ROWS)
        assert got is not None and _same(got, _own(schemas, Xq, u))
