"""Codes are a pure function of the row: never of its neighbours in a batch."""

from __future__ import annotations

import numpy as np
import pytest

from forgetting.schema import _kernels as schema_kernels
from forgetting.schema.codebook import train_codebook
from forgetting.schema.preprocess import l2_normalize


def test_codes_do_not_depend_on_batch_position_even_with_near_ties():
    rng = np.random.default_rng(0)
    X = l2_normalize(np.abs(rng.normal(size=(6000, 784))) ** 3)
    # Exact-mode regime: as many centroids as half the training rows, so deep levels are
    # trained on near-zero residuals and rows meet near-ties there. A float32 BLAS encoder
    # fails this test (checked when it was written); the exact integer one may not.
    codebook = train_codebook(X[:256], n_levels=4, n_centroids=128, seed=1)
    reference = codebook.encode(X)
    for shift in (1, 37, 255):
        rolled = codebook.encode(np.roll(X, shift, axis=0))
        assert np.array_equal(np.roll(reference, shift, axis=0), rolled)
    alone = np.vstack([codebook.encode(X[i : i + 1]) for i in range(0, 64, 3)])
    assert np.array_equal(reference[0:64:3], alone)


def test_codebook_training_is_deterministic():
    rng = np.random.default_rng(2)
    X = l2_normalize(rng.normal(size=(500, 16)))
    a = train_codebook(X, 3, 16, seed=5)
    b = train_codebook(X, 3, 16, seed=5)
    assert np.array_equal(a.centroids, b.centroids)
    assert np.all(a.centroids == np.rint(a.centroids)), "centroids live on the integer grid"


def _exact_reference(codebook, Z):
    """Greedy exact argmin with the lowest index on ties, one row at a time, no shortcuts."""
    from forgetting.schema.codebook import to_grid

    C = codebook.centroids
    out = np.empty((len(Z), C.shape[0]), dtype=np.int64)
    for i, z in enumerate(to_grid(Z)):
        r = z.copy()
        for level in range(C.shape[0]):
            d = [float(np.sum((r - c) ** 2)) for c in C[level]]
            out[i, level] = int(np.argmin(d))
            r -= C[level][out[i, level]]
    return out


def test_certified_codes_equal_the_exact_argmin_including_ties():
    rng = np.random.default_rng(3)
    X = l2_normalize(rng.normal(size=(400, 24)))
    codebook = train_codebook(X[:40], n_levels=3, n_centroids=16, seed=0)
    from forgetting.schema.codebook import GRID_BITS

    centroids = codebook.centroids[0] / 2.0**GRID_BITS
    midpoints = (centroids[0] + centroids[1]) / 2  # equidistant from two centroids
    Z = np.vstack([X, centroids, midpoints[None, :], X[:5]])
    assert np.array_equal(codebook.encode(Z), _exact_reference(codebook, Z))


def test_few_rows_compiled_codes_equal_the_numpy_route(compiled):
    """A prediction's few rows go through one compiled call (``codebook_codes``: the exact
    argmin in integers); larger batches and FORGETTING_KERNELS=numpy through the float32
    product and its certificate. Both must give the exact greedy codes, ties to the lowest
    index: near-zero deep levels (exact mode's regime), rows equidistant from two centroids,
    centroids themselves, duplicate centroids, grid values beyond float32's exact range."""
    from forgetting.schema.codebook import GRID_BITS, Codebook, to_grid

    rng = np.random.default_rng(7)
    X = l2_normalize(np.abs(rng.normal(size=(600, 48))) ** 3)
    codebook = train_codebook(X[:64], n_levels=4, n_centroids=32, seed=2)
    first = codebook.centroids[0] / 2.0**GRID_BITS
    ties = np.vstack(
        [first[:4], (first[0] + first[1])[None, :] / 2, (first[2] + first[3])[None, :] / 2]
    )
    Z = np.vstack([X[:40], ties, X[100:118]])
    assert len(Z) <= 64
    few = codebook.encode(Z)  # the compiled route (≤ 64 rows, kernels forced on)
    _, sq_norms, _, max_norm = codebook._search_tables
    direct = np.empty(few.shape, dtype=np.int64)
    assert schema_kernels.codebook_codes(to_grid(Z), codebook.centroids, sq_norms, max_norm, direct)
    assert np.array_equal(direct, few), "the kernel ran and its codes are the ones returned"
    assert np.array_equal(few, codebook._encode_chunk(Z))
    assert np.array_equal(few, _exact_reference(codebook, Z))
    one_by_one = np.vstack([codebook.encode(Z[i : i + 1]) for i in range(len(Z))])
    assert np.array_equal(one_by_one, few)
    # duplicate centroids: exact ties, the lower index wins in both routes
    C = codebook.centroids.copy()
    C[1, 5] = C[1, 3]
    twin = Codebook(centroids=C)
    assert np.array_equal(twin.encode(Z), twin._encode_chunk(Z))
    assert np.array_equal(twin.encode(Z), _exact_reference(twin, Z))
    # grid values of 2^24 and beyond: the float32 certificate gives up there (exact route)
    big = Codebook(centroids=np.ascontiguousarray(to_grid(first[None] * 24.0)))
    W = X[:20] * 24.0
    assert np.abs(to_grid(W)).max() >= 2.0**24
    assert np.array_equal(big.encode(W), big._encode_chunk(W))
    assert np.array_equal(big.encode(W), _exact_reference(big, W))


def test_few_rows_compiled_codes_decline_what_numpy_decides(compiled):
    """Rows the exact encoder cannot encode raise the numpy route's error, and a row that is
    not finite gets whatever the numpy route gives — the kernel declines both."""
    from forgetting.schema.codebook import Codebook, to_grid

    rng = np.random.default_rng(8)
    X = l2_normalize(rng.normal(size=(200, 16)))
    codebook = train_codebook(X, n_levels=2, n_centroids=8, seed=1)
    _, sq_norms, _, max_norm = codebook._search_tables
    huge = X[:2] * 2.0**40
    out = np.empty((2, 2), dtype=np.int64)
    assert not schema_kernels.codebook_codes(
        to_grid(huge), codebook.centroids, sq_norms, max_norm, out
    )
    with pytest.raises(ValueError, match="too large for exact encoding"):
        codebook.encode(huge)
    bad = X[:3].copy()
    bad[1, 4] = np.nan
    assert not schema_kernels.codebook_codes(
        to_grid(bad), codebook.centroids, sq_norms, max_norm, np.empty((3, 2), np.int64)
    )
    assert np.array_equal(codebook.encode(bad), codebook._encode_chunk(bad))
    assert isinstance(codebook, Codebook)
