"""Random hyperplane hashes of D°-standardized or D°-PCA-whitened features.

Each table is a B-bit locality-sensitive hash: bit l is the side of the hyperplane
{u : ⟨w_l, u⟩ = ⟨w_l, u_l⟩} on which the row's coordinates u fall, with w_l a Gaussian
direction and u_l a random D° row (so the cut passes through the data, not through an
arbitrary origin). The coordinates u are the features standardized with D°'s mean and
standard deviation ("standardize"), or their D°-PCA projection scaled to unit variance
("pca"), so that no single feature's scale decides the cuts. Everything is drawn from the seed
and D° only.

All T·B directions are one exact linear stage (see :mod:`forgetting.schema.partitions`), so a
row costs one matrix product; the PCA variant first projects to ``n_components`` dimensions,
which keeps that product small on wide features.
"""

from __future__ import annotations

import numpy as np

from .base import ThresholdPartition, fit_linear, pca_directions, random_thresholds, to_grid

PROJECTIONS = ("standardize", "pca")


def fit_hyperplanes(
    Z_schema: np.ndarray,
    n_tables: int,
    n_bits: int,
    seed: int,
    projection: str = "pca",
    n_components: int = 32,
) -> ThresholdPartition:
    """Draw ``n_tables`` hashes of ``n_bits`` random hyperplanes each from D° rows."""
    if projection not in PROJECTIONS:
        raise ValueError(f"projection must be one of {PROJECTIONS}, got {projection!r}")
    if Z_schema.shape[0] < 1:
        raise ValueError("random hyperplanes need at least one D° row for their offsets")
    rng = np.random.default_rng([int(seed), 0x4A54])
    Xg = to_grid(Z_schema)
    stage1 = None
    if projection == "pca":
        W, center = pca_directions(Xg, n_components)
        stage1 = fit_linear(W, center, Xg)
        U = stage1.apply(Xg)
        directions = rng.standard_normal((n_tables * n_bits, U.shape[1]))
        stage2 = fit_linear(directions, np.zeros(U.shape[1]), U)
        Y = stage2.apply(U)
    else:
        center = np.rint(Xg.mean(axis=0))
        sd = Xg.std(axis=0)
        sd[sd == 0.0] = 1.0
        directions = rng.standard_normal((n_tables * n_bits, Xg.shape[1])) / sd[None, :]
        stage2 = fit_linear(directions, center, Xg)
        Y = stage2.apply(Xg)
    features = np.arange(n_tables * n_bits, dtype=np.intp).reshape(n_tables, n_bits)
    thresholds = random_thresholds(Y, features, rng)
    return ThresholdPartition(
        features=features, thresholds=thresholds, stage1=stage1, stage2=stage2
    )
