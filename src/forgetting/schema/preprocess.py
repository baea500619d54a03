"""The preprocessing φ: L2 normalization, optionally augmented with an LDA projection.

φ(x) = norm([norm(f(x)); W_LDA norm(f(x))]) (design.md §2). LDA is fitted on D° labels only, so it
is part of the frozen schema. Normalizing puts every row on the unit sphere, which keeps the
codebook's distances well scaled whatever the encoder's output scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from .._rowwise import block_matmul
from .direct import lda_transform


def l2_normalize(X: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalization in float64; all-zero rows stay zero."""
    X = np.asarray(X, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    norms[norms == 0.0] = 1.0
    return X / norms[:, None]


@dataclass(frozen=True)
class Preprocessor:
    """Frozen φ. ``lda`` is None when the projection is not used."""

    lda: LinearDiscriminantAnalysis | None
    projection: np.ndarray | None = None
    """The LDA directions φ keeps, (d, k − 1) contiguous; φ multiplies by them alone.

    scikit-learn's ``transform`` multiplies by all d eigenvectors and then drops all but
    k − 1 columns: d / (k − 1) times the work (14× at d = 128, k = 10), paid in every φ pass of
    a fit and of a deletion. The narrow product rounds differently (OpenBLAS picks other
    kernels for 9 columns than for 128), so it is a different φ: a model without a
    ``projection`` (None) keeps scikit-learn's product, the arithmetic its stored
    contributions were computed with. The schema digest says which.
    """

    @property
    def uses_lda(self) -> bool:
        return self.lda is not None

    def transform(self, X: np.ndarray) -> np.ndarray:
        return self.from_normalized(l2_normalize(X))

    def from_normalized(self, Z: np.ndarray) -> np.ndarray:
        """φ from the L2-normalized rows ``Z`` (φ's first step done): the same operations on
        the same numbers as :meth:`transform`, so the same bits. Why separate: the p
        instances of a model share that first step (it has no fitted state), and serving
        computes it once for all of them (ensemble: the normalized input)."""
        if self.lda is None:
            return Z
        if self.projection is not None:
            return l2_normalize(np.concatenate((Z, block_matmul(Z, self.projection)), axis=1))
        return l2_normalize(np.concatenate((Z, lda_transform(self.lda, Z)), axis=1))


def fit_preprocessor(X: np.ndarray, y: np.ndarray | None, use_lda: bool) -> Preprocessor:
    """Fit φ on the schema rows. ``y`` are class indices (classification) or None."""
    if not use_lda or y is None or np.unique(y).size < 2:
        return Preprocessor(lda=None)
    Z = l2_normalize(X)
    n_components = int(min(np.unique(y).size - 1, Z.shape[1]))
    lda = LinearDiscriminantAnalysis(solver="eigen", shrinkage="auto", n_components=n_components)
    try:
        lda.fit(Z, y)
    except np.linalg.LinAlgError:
        # The within-class scatter is singular (e.g. one feature: L2 normalization maps every
        # row to ±1, constant within classes). No projection can be estimated; φ is then the
        # plain normalization — still a function of D° alone.
        return Preprocessor(lda=None)
    # the eigen solver's transform is Z @ scalings_[:, :k − 1]: those columns are φ's projection
    projection = np.ascontiguousarray(lda.scalings_[:, : lda._n_features_out], dtype=np.float64)
    return Preprocessor(lda=lda, projection=projection)
