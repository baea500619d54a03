"""The forest's configuration, the trees' root seeds, and what a fit of it allocates.

Why a module of its own: these are what a caller decides before any row arrives — the
estimators resolve their parameters into a :class:`ForestConfig`, and a loader compares
:func:`fit_bytes` with the memory it may use before fitting from a file — while
:mod:`.core` holds a fitted forest's state.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ForestConfig:
    """The forest's configuration (everything a fit depends on besides rows and key)."""

    n_trees: int = 30
    n_candidates: int = 4
    min_leaf: int = 1
    max_depth: int = -1
    max_bins: int = 255
    rho: float = 0.005
    min_bin_rows: int = 200
    cache_min_rows: int = 64
    refit_fraction: float = 0.25
    random_state: int = 0

    def candidates(self, d: int) -> int:
        """K, the candidates drawn per node on d features (at most 16·d)."""
        return max(1, min(self.n_candidates, 16 * d))

    def first_nodes(self, trees: int, n: int) -> int:
        """Nodes a fit of ``trees`` trees on n rows allocates before its first tree (the
        arrays grow when a tree needs more)."""
        return max(64, trees * (2 * n // max(self.min_leaf, 1) + 1) // 4)


def fit_bytes(config: ForestConfig, n: int, d: int, k: int) -> int:
    """Bytes a fit on n rows of d features (k classes; 2 for regression) allocates at least:
    the arrays :meth:`.core.ExactForest.fit` sizes before its first tree, and the rows. A
    loader compares it with the memory it may use before fitting from a file."""
    K_ = config.candidates(d)
    nodes = config.first_nodes(config.n_trees, n)
    slots = max(16, nodes // 8)
    per_node = 7 * 4 + 8 + 16 + 4 * k
    per_slot = 4 * (2 * K_ + K_ * k + 1)
    rows = n * (5 * d + 4 + 4 + 8)  # uint8 codes, float32 features, labels, perm, draws
    return nodes * per_node + slots * per_slot + 4 * config.n_trees * n + rows


def root_seed(random_state: int, tree: int) -> np.uint64:
    """Tree ``tree``'s root seed: a function of (random_state, tree) alone, whichever
    instance grows it."""
    raw = hashlib.blake2b(f"forest-root:{random_state}:{tree}".encode(), digest_size=8).digest()
    return np.uint64(int.from_bytes(raw, "little"))
