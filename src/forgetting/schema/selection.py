"""Choosing ℓ, b and whether to use LDA from D° alone (design.md §5.4).

These choices shape the accumulators, so they may only depend on the schema rows and the
configuration. The expected number of rows n ≈ n°/ρ is a function of D° and ρ, not of D•,
which lets b scale with the data without peeking at it.
"""

from __future__ import annotations

MAX_AUTO_CENTROIDS = 1024
MIN_ROWS_PER_CELL = 16
WIDE_CODEBOOK = 512


def _pow2_floor(x: float) -> int:
    x = max(int(x), 1)
    return 1 << (x.bit_length() - 1)


def choose_n_centroids(n_codebook_rows: int, n_schema: int, rho: float) -> int:
    """b = largest power of two ≤ 1024 with ≥ 2 codebook rows per centroid and ≥ 16 expected
    rows per cell."""
    expected_rows = n_schema / rho
    b = min(MAX_AUTO_CENTROIDS, n_codebook_rows / 2, expected_rows / MIN_ROWS_PER_CELL)
    return max(2, _pow2_floor(b))


def choose_n_levels(n_centroids: int) -> int:
    """ℓ = 4, or 2 for wide codebooks (b ≥ 512).

    Accuracy saturates by ℓ = 2..4 and width beats depth (the paper's finding, and ours on a
    validation split of MNIST's training set); the pair counts grow as ℓ²b², so wide
    codebooks get fewer levels.
    """
    return 2 if n_centroids >= WIDE_CODEBOOK else 4


def choose_lda(task: str, class_counts, n_features: int) -> bool:
    """Use the LDA projection when D° can estimate it: ≥ 2 rows per class and ≥ 2 rows per
    feature. With fewer rows the within-class covariance is mostly shrinkage and the
    projection overfits D° (on a validation split of MNIST's training set, 300 schema rows
    on 784 pixels, LDA cost 4 pp)."""
    n_schema = int(sum(class_counts))
    return (
        task == "classification"
        and len(class_counts) >= 2
        and min(class_counts) >= 2
        and n_schema >= 2 * n_features
    )


def schema_problem(n_schema: int, n_codebook_rows: int, n_centroids: int | None) -> str | None:
    """Why a schema cannot be trained on these many rows, or None when it can."""
    if n_schema < 2:
        return f"D° would hold {n_schema} labeled row(s); a base model needs at least 2"
    needed = n_centroids or 2
    if n_codebook_rows < needed:
        return f"the codebook would have {n_codebook_rows} training row(s) for {needed} centroids"
    return None
