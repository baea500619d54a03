"""Random oblivious trees with D° thresholds.

An oblivious tree of depth D applies the same test at every node of a level, so it is a
D-bit cell code: bit l says whether coordinate ``a_l`` exceeds ``θ_l``. Here ``a_l`` is drawn
uniformly and ``θ_l`` is that coordinate's value in a uniformly drawn D° row — the cheapest
choice that puts every threshold inside the data's range, needs no labels and barely depends
on which rows D° holds (a new D° changes the draws, not their distribution). Accuracy comes
from averaging many such tables, each fitted on the statistics of all rows.

``projection``: "none" tests the features φ(x) themselves; "pca" tests coordinates of a D°-PCA
projection (whitened), which concentrates the tests on the directions the data varies in —
useful for wide, redundant features (HOG, pixels, sentence embeddings).
"""

from __future__ import annotations

import numpy as np

from .base import ThresholdPartition, fit_linear, pca_directions, random_thresholds, to_grid

PROJECTIONS = ("none", "pca")


def fit_trees(
    Z_schema: np.ndarray,
    n_tables: int,
    depth: int,
    seed: int,
    projection: str = "none",
    n_components: int = 32,
) -> ThresholdPartition:
    """Draw ``n_tables`` oblivious trees of ``depth`` levels from the D° rows ``Z_schema``."""
    if projection not in PROJECTIONS:
        raise ValueError(f"projection must be one of {PROJECTIONS}, got {projection!r}")
    if Z_schema.shape[0] < 1:
        raise ValueError("random trees need at least one D° row for their thresholds")
    rng = np.random.default_rng([int(seed), 0x7EE5])
    Xg = to_grid(Z_schema)
    stage1 = None
    if projection == "pca":
        W, center = pca_directions(Xg, n_components)
        stage1 = fit_linear(W, center, Xg)
        Y = stage1.apply(Xg)
    else:
        Y = Xg
    features = rng.integers(0, Y.shape[1], size=(n_tables, depth)).astype(np.intp)
    thresholds = random_thresholds(Y, features, rng)
    return ThresholdPartition(features=features, thresholds=thresholds, stage1=stage1)
