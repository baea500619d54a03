"""The residual-quantization codebook: trained by faiss, applied by a deterministic encoder.

Training uses faiss's ResidualQuantizer (ℓ levels of k-means on the running residual). faiss
gives different codebooks for different OpenMP thread counts (SPEC §5.5), so training runs
with one thread under a lock. Encoding is greedy nearest-centroid per level, done here in
numpy in canonical blocks: it is the same rule faiss applies with beam size 1, but we control
the tie-break (lowest index) and the batch shape, so a row's codes never depend on which
other rows were encoded with it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import faiss
import numpy as np

from .._rowwise import rowwise

_FAISS_LOCK = threading.Lock()


@dataclass(frozen=True)
class Codebook:
    """ℓ levels of b centroids each; ``centroids`` has shape (ℓ, b, d), float32."""

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
        sq_norms = np.einsum("lbd,lbd->lb", self.centroids, self.centroids)
        dtype = self.code_dtype

        def encode_block(block: np.ndarray) -> np.ndarray:
            residual = block.astype(np.float32, copy=True)
            codes = np.empty((block.shape[0], self.n_levels), dtype=dtype)
            for level in range(self.n_levels):
                C = self.centroids[level]
                dist = sq_norms[level][None, :] - 2.0 * (residual @ C.T)
                best = np.argmin(dist, axis=1)
                codes[:, level] = best
                residual -= C[best]
            return codes

        return rowwise(encode_block, np.asarray(Z, dtype=np.float32))


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
    return Codebook(centroids=np.ascontiguousarray(centroids, dtype=np.float32))
