"""The residual-quantization codebook: trained by faiss, applied by a deterministic encoder.

Training uses faiss's ResidualQuantizer (ℓ levels of k-means on the running residual). faiss
gives different codebooks for different OpenMP thread counts (design.md §5.5), so training runs
with one thread under a lock.

Encoding is greedy nearest-centroid per level — the rule faiss applies with beam size 1 — but
its result is the *exact* argmin: rows and centroids live on a fixed-point grid (2^-20), and
a code is only taken from floating point when it is certified. A float32 product gives every
distance (up to the row's constant ‖r‖²) within a proven bound E of the exact value
(|error| ≤ γ_{d+3}(‖r‖ + ‖c‖)², doubled for safety), so when the runner-up is more than 2E
behind the winner, the winner is the exact argmin. (numpy's BLAS is used rather than faiss's
search: faiss's OpenMP threads and numpy's BLAS threads contend for the same cores and slow
the float32 pass.) The remaining near-ties — frequent in exact mode, whose deep levels are
trained on almost-zero D° residuals — are recomputed in float64 on integer values small
enough that every product and partial sum is exact, ties going to the lowest index. A row's
codes are thus a pure function of the row: a plain float32 product is not (its last bits
change with the row's position in the batch, so a fit and a refit could disagree on codes).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property

import faiss
import numpy as np

from ..content.kernels import SCHEMA_KERNELS

_FAISS_LOCK = threading.Lock()


GRID_BITS = 20
_EXACT = 2.0**52
_CHUNK_ROWS = 16384
_FLOAT32_EXACT = 2.0**24
_FEW_ROWS = 64
"""Rows up to which :meth:`Codebook.encode` asks the compiled encoder first (a prediction's
row or few; larger batches run the float32 BLAS product, which wins there)."""


def to_grid(values: np.ndarray) -> np.ndarray:
    """Round to the fixed-point grid; integer-valued float64."""
    grid = np.multiply(values, 2.0**GRID_BITS, dtype=np.float64)
    return np.rint(grid, out=grid)


@dataclass(frozen=True)
class Codebook:
    """ℓ levels of b centroids each; ``centroids`` (ℓ, b, d) are on the grid (integer-valued
    float64, in units of 2^-20)."""

    centroids: np.ndarray

    @property
    def n_levels(self) -> int:
        return self.centroids.shape[0]

    @property
    def n_centroids(self) -> int:
        return self.centroids.shape[1]

    @property
    def code_dtype(self) -> np.dtype:
        return np.dtype(np.uint8) if self.n_centroids <= 256 else np.dtype(np.uint16)

    def encode(self, Z: np.ndarray) -> np.ndarray:
        """Codes (n, ℓ) of rows ``Z`` (n, d): exact greedy nearest centroid per level."""
        Z = np.asarray(Z, dtype=np.float64)
        codes = np.empty((Z.shape[0], self.n_levels), dtype=self.code_dtype)
        # asked with the batch's whole work, so a fit's encode loads the kernels (as the
        # flat partition's does) and the prediction's row or few after it finds them loaded
        kernels = SCHEMA_KERNELS.get(Z.shape[0] * self.n_levels * self.n_centroids * Z.shape[1])
        if (
            kernels is not None
            and 0 < Z.shape[0] <= _FEW_ROWS
            and self._few_codes(kernels, Z, codes)
        ):
            return codes
        for start in range(0, Z.shape[0], _CHUNK_ROWS):
            codes[start : start + _CHUNK_ROWS] = self._encode_chunk(Z[start : start + _CHUNK_ROWS])
        return codes

    @cached_property
    def _search_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Transposed float32 centroids, their squared norms (exact, and in float32), and the
        largest norm per level."""
        C = self.centroids
        sq_norms = np.sum(C * C, axis=2)
        C32_T = np.ascontiguousarray(C.astype(np.float32).transpose(0, 2, 1))
        return C32_T, sq_norms, sq_norms.astype(np.float32), np.sqrt(sq_norms.max(axis=1))

    def _few_codes(self, kernels, Z: np.ndarray, codes: np.ndarray) -> bool:
        """The codes of a few rows in one compiled call (``codebook_codes``: the exact argmin
        directly, in integers — the same codes), False when the kernel declines (then the
        general route decides). Why: the general route is ~15 numpy calls per level on a
        row or two, where the arithmetic is ℓ·b·d multiply-adds."""
        _, sq_norms, _, max_norm = self._search_tables
        centroids = np.ascontiguousarray(self.centroids, dtype=np.float64)  # as trained: no copy
        out = np.empty(codes.shape, dtype=np.int64)
        if not kernels.codebook_codes(to_grid(Z), centroids, sq_norms, max_norm, out):
            return False
        codes[...] = out
        return True

    def _encode_chunk(self, Z: np.ndarray) -> np.ndarray:
        C = self.centroids
        C32_T, sq_norms, sq_norms32, max_norm = self._search_tables
        gamma = 2.0 * _float32_gamma(C.shape[2] + 3)
        residual = to_grid(Z)
        codes = np.empty((Z.shape[0], self.n_levels), dtype=self.code_dtype)
        for level in range(self.n_levels):
            norms = np.sqrt(np.einsum("ij,ij->i", residual, residual))
            if norms.max(initial=0.0) * max_norm[level] * 2.0 + sq_norms[level].max() >= _EXACT:
                raise ValueError("features too large for exact encoding; normalize them")
            dist = residual.astype(np.float32) @ C32_T[level]
            dist *= -2.0
            dist += sq_norms32[level]
            best = np.argmin(dist, axis=1)
            rows = np.arange(len(best))
            first = dist[rows, best].astype(np.float64)
            dist[rows, best] = np.inf
            gap = dist.min(axis=1) - first
            bound = gamma * (norms + max_norm[level]) ** 2
            if np.abs(residual).max(initial=0.0) >= _FLOAT32_EXACT:
                bound[:] = np.inf  # float32 no longer holds the grid values exactly
            unsure = np.flatnonzero(~(gap > 2.0 * bound))
            if unsure.size:
                exact = sq_norms[level][None, :] - 2.0 * (residual[unsure] @ C[level].T)
                best[unsure] = np.argmin(exact, axis=1)
            codes[:, level] = best
            residual -= C[level][best]
        return codes


def _float32_gamma(n: int) -> float:
    """γ_n = n·u / (1 − n·u) for float32 (u = 2^-24): the classic dot-product error factor."""
    u = 2.0**-24
    return n * u / (1.0 - n * u)


def train_codebook(Z: np.ndarray, n_levels: int, n_centroids: int, seed: int) -> Codebook:
    """Train an RQ codebook on the rows ``Z`` (already in canonical order)."""
    Z = np.ascontiguousarray(Z, dtype=np.float32)
    n, d = Z.shape
    if n < n_centroids:
        raise ValueError(
            f"cannot train a codebook of {n_centroids} centroids on {n} rows; "
            "lower n_centroids or raise rho"
        )
    nbits = int(n_centroids).bit_length() - 1
    rq = faiss.ResidualQuantizer(d, n_levels, nbits)
    rq.train_type = faiss.ResidualQuantizer.Train_default
    rq.max_beam_size = 1
    rq.cp.seed = int(seed % (2**31 - 1))
    rq.cp.min_points_per_centroid = 1
    with _FAISS_LOCK:
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            rq.train(Z)
        finally:
            faiss.omp_set_num_threads(threads)
    centroids = faiss.vector_to_array(rq.codebooks).reshape(n_levels, n_centroids, d)
    return Codebook(centroids=np.ascontiguousarray(to_grid(centroids)))
