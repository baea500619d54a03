"""Float row functions (φ, g) give each row the same bits in any batch (canonical blocks)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.neural_network import MLPClassifier

from forgetting._rowwise import BLOCK_ROWS, rowwise
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
