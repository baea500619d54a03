"""Float row functions (φ, g) give each row the same bits in any batch (canonical blocks)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.neural_network import MLPClassifier

from forgetting import _rowwise
from forgetting._rowwise import BLOCK_ROWS, SERVE_BLOCK_ROWS, rowwise
from forgetting.schema.base_model import fit_base_model
from forgetting.schema.preprocess import fit_preprocessor


@pytest.mark.parametrize(
    "spec", ["auto", MLPClassifier(hidden_layer_sizes=(64,), max_iter=30)], ids=["lr", "mlp"]
)
def test_phi_and_g_do_not_depend_on_batch_position(spec):
    rng = np.random.default_rng(0)
    n, d, k = 2 * BLOCK_ROWS + 77, 96, 6
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, k, n)
    pre = fit_preprocessor(X[:400], y[:400], use_lda=True)
    Z = rowwise(pre.transform, X)
    g = fit_base_model(spec, "classification", Z[:400], y[:400], k, seed=0)
    reference = rowwise(g.predict, Z)
    for shift in (1, 37, BLOCK_ROWS - 1):
        Zs = rowwise(pre.transform, np.roll(X, shift, axis=0))
        assert np.array_equal(np.roll(Z, shift, axis=0), Zs)
        assert np.array_equal(np.roll(reference, shift, axis=0), rowwise(g.predict, Zs))
    alone = np.vstack([rowwise(g.predict, Z[i : i + 1]) for i in range(0, n, 41)])
    assert np.array_equal(reference[::41], alone)


@pytest.mark.parametrize(
    "spec", ["auto", MLPClassifier(hidden_layer_sizes=(32,), max_iter=30)], ids=["lr", "mlp"]
)
@pytest.mark.parametrize("height", [SERVE_BLOCK_ROWS, BLOCK_ROWS])
def test_stacked_blocks_give_the_bits_of_block_by_block(monkeypatch, spec, height):
    """Many blocks in one call (block_matmul) — or the fallback when a function cannot take
    them — return exactly what one call per block returns, across chunk boundaries and a
    padded last block, for φ with its LDA projection and for g."""
    monkeypatch.setattr(_rowwise, "STACK_ROWS", 3 * height)  # several chunks per call
    rng = np.random.default_rng(1)
    n, d, k = 7 * height + 13, 40, 5
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, k, n)
    pre = fit_preprocessor(X[:300], y[:300], use_lda=True)
    Z = _rowwise.rowwise(pre.transform, X, height)
    g = fit_base_model(spec, "classification", Z[:300], y[:300], k, seed=0)
    assert np.array_equal(_rowwise.rowwise(pre.transform, X, height, owner=pre), Z)
    expected = _rowwise.rowwise(g.predict, Z, height)
    assert np.array_equal(_rowwise.rowwise(g.predict, Z, height, owner=g), expected)
    assert _rowwise._verdicts_of(pre)[(height, (d,), "<f4")] is True  # φ did stack


def test_a_function_that_cannot_take_many_blocks_falls_back():
    """A block-dependent function (centred on its block's mean) gives other bits when blocks
    are stacked: the check sees it and every call goes block by block."""

    class Centre:
        def __call__(self, block: np.ndarray) -> np.ndarray:
            return block - block.mean(axis=0)

    centre = Centre()
    X = np.random.default_rng(2).normal(size=(5 * SERVE_BLOCK_ROWS + 3, 4))
    expected = _rowwise.rowwise(centre, X, SERVE_BLOCK_ROWS)
    assert np.array_equal(_rowwise.rowwise(centre, X, SERVE_BLOCK_ROWS, owner=centre), expected)
    assert _rowwise._verdicts_of(centre)[(SERVE_BLOCK_ROWS, (4,), "<f8")] is False
