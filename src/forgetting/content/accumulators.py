"""Integer sufficient statistics T, n, N (design.md §2), split in two folds.

Float sums are not exact under subtraction, so residuals are quantized to fixed point once per
row and summed as int64: adding then subtracting a row restores the very same integers, and
any order of insertion gives the same sums. Each statistic is kept per fold (a keyed-hash bit
of the row id) so that α and the shrinkage can be cross-fitted from the statistics alone; the
full-data statistic is the sum of the two folds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

CLASSIFICATION_SCALE_BITS = 32
REGRESSION_SCALE_BITS = 24
MAX_ROWS = 2**28
MAX_ABS_RESIDUAL = 2.0**10
"""Residuals are bounded by 1 for classification; a regression residual beyond 1024 standard
deviations of D°'s target is refused as a data error. With ≤ 2^28 rows no sum can overflow."""


def quantize_residuals(residuals: np.ndarray, scale_bits: int) -> np.ndarray:
    """Fixed-point int64 residuals; refuses values whose sums could overflow."""
    residuals = np.asarray(residuals, dtype=np.float64)
    if residuals.size and not np.all(np.abs(residuals) <= MAX_ABS_RESIDUAL):
        worst = float(np.max(np.abs(residuals)))
        raise ValueError(
            f"a residual of {worst:.3g} standard deviations is too large to accumulate "
            "exactly; check the targets for outliers or unit errors"
        )
    return np.rint(np.ldexp(residuals, scale_bits)).astype(np.int64)


def level_pairs(n_levels: int) -> list[tuple[int, int]]:
    """The (q, m) pairs with q < m, in the order the pair-count matrices are stored."""
    return [(q, m) for m in range(n_levels) for q in range(m)]


@dataclass
class Accumulators:
    """Per fold f ∈ {0, 1}: sums T[f] (ℓ, b, k), counts n[f] (ℓ, b), pair counts N[f] (P, b, b)."""

    sums: np.ndarray
    counts: np.ndarray
    pair_counts: np.ndarray
    scale_bits: int

    def __post_init__(self) -> None:
        self._fold_changes = [0, 0]
        self._kept: dict = {}
        self._floats: _Floats | None = None

    def __getstate__(self) -> dict:
        # what fold_kept and the float copies hold is derived from these integers: not
        # pickled or copied
        state = dict(self.__dict__)
        state.pop("_kept", None)
        state.pop("_floats", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._fold_changes = [0, 0]
        self._kept = {}
        self._floats = None

    def fold_floats(self, fold: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fold ``fold``'s (T, n, N) as floats, T in units of 1 (read-only views): the
        numbers ``content.materialize._stats`` converts, bit for bit.

        Why kept rather than converted per read: RQ mode materializes after every change,
        and converting the pair counts (P·b² per fold: 3 MB at ℓ = 4, b = 256) was a
        fifth of that. A change of a few rows converts again only the entries it
        touched — each float is a function of its own integer, so the same bits."""
        floats = self._current_floats()
        return _read_only(floats.T[fold]), _read_only(floats.n[fold]), _read_only(floats.N[fold])

    def total_count_floats(self) -> tuple[np.ndarray, np.ndarray]:
        """(n, N) of both folds as floats (read-only): fold 0's floats + fold 1's, which
        are integers below 2^53, so exactly the integers' sums."""
        floats = self._current_floats()
        return _read_only(floats.n_all), _read_only(floats.N_all)

    def _current_floats(self) -> _Floats:
        floats = self._floats
        if floats is None or not floats.made_from(self):
            floats = self._floats = _Floats.of(self)
        return floats

    def fold_kept(self, fold: int, name: object, compute: Callable[[], Any]) -> Any:
        """``compute()``, a function of fold ``fold``'s statistics alone, kept until a change
        touches that fold.

        Why: RQ mode materializes again after every change (content.materialize), and a
        one-row change lies in one fold — the other fold's cell means on the λ grid are the
        same floats as before (the same operations on the same integers), so they are kept
        instead of recomputed: a quarter of the products of the first prediction after a
        forget. Kept under the arrays' identities too, so replacing an array (mode="dp"'s
        noised copy) computes anew; arrays returned are read-only."""
        stamp = (self._fold_changes[fold], self.sums, self.counts, self.pair_counts)
        entry = self._kept.get((fold, name))
        if (
            entry is not None
            and entry[0][0] == stamp[0]
            and all(a is b for a, b in zip(entry[0][1:], stamp[1:], strict=True))
        ):
            return entry[1]
        value = compute()
        for array in value if isinstance(value, tuple) else (value,):
            if isinstance(array, np.ndarray):
                array.flags.writeable = False
        self._kept[(fold, name)] = (stamp, value)
        return value

    @classmethod
    def empty(cls, n_levels: int, n_centroids: int, n_outputs: int, scale_bits: int):
        n_pairs = len(level_pairs(n_levels))
        return cls(
            sums=np.zeros((2, n_levels, n_centroids, n_outputs), dtype=np.int64),
            counts=np.zeros((2, n_levels, n_centroids), dtype=np.int64),
            pair_counts=np.zeros((2, n_pairs, n_centroids, n_centroids), dtype=np.int64),
            scale_bits=scale_bits,
        )

    @property
    def n_levels(self) -> int:
        return self.sums.shape[1]

    @property
    def n_rows(self) -> int:
        return int(self.counts[:, 0].sum())

    def add(self, codes: np.ndarray, residuals: np.ndarray, folds: np.ndarray) -> None:
        """Add rows: ``codes`` (n, ℓ), int64 ``residuals`` (n, k), ``folds`` (n,) in {0, 1}."""
        self._update(codes, residuals, folds, 1)

    def subtract(self, codes: np.ndarray, residuals: np.ndarray, folds: np.ndarray) -> None:
        """Remove rows previously added with exactly these codes, residuals and folds."""
        self._update(codes, residuals, folds, -1)

    def _update(self, codes, residuals, folds, sign: int) -> None:
        n = codes.shape[0]
        if n == 0:
            return
        if sign > 0 and self.n_rows + n > MAX_ROWS:
            raise OverflowError(f"more than {MAX_ROWS} rows cannot be accumulated exactly")
        codes = codes.astype(np.intp)
        folds = np.asarray(folds, dtype=np.intp)
        values = residuals if sign > 0 else -residuals
        if n == 1:
            self._update_one(codes[0].tolist(), values[0], int(folds[0]), sign)
            return
        levels = np.arange(self.n_levels)
        self._changed(folds)
        cells = (folds[:, None], levels[None, :], codes)
        np.add.at(self.sums, cells, values[:, None, :])
        np.add.at(self.counts, cells, sign)
        pairs = [(p, codes[:, q], codes[:, m]) for p, (q, m) in enumerate(level_pairs(levels.size))]
        for p, left, right in pairs:
            np.add.at(self.pair_counts, (folds, p, left, right), sign)
        floats = self._floats
        if floats is not None:
            if n <= FLOAT_UPDATE_ROWS and floats.made_from(self):
                floats.convert(self, cells, pairs, folds)
            else:
                self._floats = None

    def _update_one(self, codes: list[int], values: np.ndarray, fold: int, sign: int) -> None:
        """:meth:`_update` of one row (a one-row forget or insert, the latency path): the
        same integers by scalar indexing instead of ``np.add.at``'s index arrays, and the
        touched entries of the float copies converted as :meth:`_Floats.convert` converts
        them (~20 small numpy calls fewer per instance)."""
        b = self.sums.shape[2]
        if not 0 <= fold <= 1 or len(codes) != self.n_levels or not all(0 <= c < b for c in codes):
            raise IndexError("a code or fold lies outside the accumulators")
        self._fold_changes[fold] += 1
        floats = self._floats
        if floats is not None and not floats.made_from(self):
            floats = self._floats = None
        for level, c in enumerate(codes):
            self.sums[fold, level, c] += values
            self.counts[fold, level, c] += sign
            if floats is not None:
                floats.T[fold, level, c] = self.sums[fold, level, c] * floats.unit
                floats.n[fold, level, c] = self.counts[fold, level, c]
                floats.n_all[level, c] = floats.n[0, level, c] + floats.n[1, level, c]
        for p, (q, m) in enumerate(level_pairs(len(codes))):
            at = (p, codes[q], codes[m])
            self.pair_counts[(fold, *at)] += sign
            if floats is not None:
                floats.N[(fold, *at)] = self.pair_counts[(fold, *at)]
                floats.N_all[at] = floats.N[(0, *at)] + floats.N[(1, *at)]

    def merge(self, other: Accumulators) -> None:
        """Add another part's statistics (rows summarized elsewhere: distributed fits)."""
        self._changed(np.array([0, 1]))
        self._floats = None
        self.sums += other.sums
        self.counts += other.counts
        self.pair_counts += other.pair_counts

    def _changed(self, folds: np.ndarray) -> None:
        """Whatever :meth:`fold_kept` holds for these folds is out of date (the float
        copies are the caller's to convert or drop)."""
        for f in (0, 1):
            if np.any(folds == f):
                self._fold_changes[f] += 1

    def copy(self) -> Accumulators:
        return Accumulators(
            self.sums.copy(), self.counts.copy(), self.pair_counts.copy(), self.scale_bits
        )

    def equals(self, other: Accumulators) -> bool:
        return (
            self.scale_bits == other.scale_bits
            and np.array_equal(self.sums, other.sums)
            and np.array_equal(self.counts, other.counts)
            and np.array_equal(self.pair_counts, other.pair_counts)
        )


FLOAT_UPDATE_ROWS = 64
"""Up to this many rows a change converts the float copies' touched entries; a larger one
drops them, and the next read converts every entry once."""


@dataclass
class _Floats:
    """The float copies :meth:`Accumulators.fold_floats` reads, with the integer arrays they
    were made from (a replaced array — mode="dp"'s noised copy — makes them anew)."""

    sources: tuple
    unit: float
    T: np.ndarray
    n: np.ndarray
    N: np.ndarray
    n_all: np.ndarray
    N_all: np.ndarray

    @classmethod
    def of(cls, acc: Accumulators) -> _Floats:
        unit = float(np.ldexp(1.0, -acc.scale_bits))
        n = acc.counts.astype(np.float64)
        N = acc.pair_counts.astype(np.float64)
        return cls(
            (acc.sums, acc.counts, acc.pair_counts),
            unit,
            acc.sums.astype(np.float64) * unit,
            n,
            N,
            n[0] + n[1],
            N[0] + N[1],
        )

    def made_from(self, acc: Accumulators) -> bool:
        now = (acc.sums, acc.counts, acc.pair_counts)
        return all(a is b for a, b in zip(self.sources, now, strict=True))

    def convert(self, acc: Accumulators, cells: tuple, pairs: list, folds: np.ndarray) -> None:
        """Convert again the entries a change of a few rows touched (``cells``: its
        (fold, level, code) index, ``pairs``: (p, left codes, right codes) per level pair):
        each from its own integer, as :meth:`of` converts every entry."""
        _, levels, codes = cells
        self.T[cells] = acc.sums[cells].astype(np.float64) * self.unit
        self.n[cells] = acc.counts[cells]
        self.n_all[levels, codes] = self.n[0][levels, codes] + self.n[1][levels, codes]
        for p, left, right in pairs:
            self.N[folds, p, left, right] = acc.pair_counts[folds, p, left, right]
            self.N_all[p, left, right] = self.N[0, p, left, right] + self.N[1, p, left, right]


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view
