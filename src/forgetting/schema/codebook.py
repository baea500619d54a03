"""The residual-quantization codebook: trained by faiss, applied by a deterministic encoder.

Training uses faiss's ResidualQuantizer (ℓ levels of k-means on the running residual). faiss
gives different codebooks for different OpenMP thread counts (SPEC §5.5), so training runs
with one thread under a lock.

Encoding is greedy nearest-centroid per level — the rule faiss applies with beam size 1 — but
computed *exactly*: rows and centroids are put on a fixed-point grid (2^-20) and distances are
evaluated in float64 on integer values small enough that every product and partial sum is
exact. A float32 BLAS product is not: its last bits depend on where a row sits in the batch,
and in exact mode deep levels are full of near-ties (centroids trained on D° residuals that
are almost zero), so float codes differed between a fit and a refit. Exact integer distances
make a row's codes a pure function of the row, with ties broken by the lowest index.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import faiss
import numpy as np

from .._rowwise import rowwise

_FAISS_LOCK = threading.Lock()


GRID_BITS = 20
_EXACT_LIMIT = 2.0**52


def to_grid(values: np.ndarray) -> np.ndarray:
    """Round to the fixed-point grid; integer-valued float64."""
    return np.rint(np.ldexp(np.asarray(values, dtype=np.float64), GRID_BITS))


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
        """Codes (n, ℓ) of rows ``Z`` (n, d): greedy nearest centroid on the running residual."""
        C = self.centroids
        sq_norms = np.sum(C * C, axis=2)
        max_norm = float(np.sqrt(sq_norms.max())) if C.size else 0.0
        dtype = self.code_dtype

        def encode_block(block: np.ndarray) -> np.ndarray:
            residual = to_grid(block)
            codes = np.empty((block.shape[0], self.n_levels), dtype=dtype)
            for level in range(self.n_levels):
                bound = float(np.sqrt(np.max(np.sum(residual * residual, axis=1)))) * max_norm
                if 2.0 * bound + sq_norms[level].max() >= _EXACT_LIMIT:
                    raise ValueError("features too large for exact encoding; normalize them")
                dist = sq_norms[level][None, :] - 2.0 * (residual @ C[level].T)
                best = np.argmin(dist, axis=1)
                codes[:, level] = best
                residual -= C[level][best]
            return codes

        return rowwise(encode_block, np.asarray(Z, dtype=np.float64))


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
