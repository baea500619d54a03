"""Exact statistics of columns: integer moments on a fixed-point grid, and value counts.

Why integers: a float sum is not undone by subtracting a term (rounding depends on the order,
design.md §5.2), so a mean kept as a float sum would drift from a refit's after a forget. An
integer sum is: subtracting a row restores exactly the integers a fit without it computes, in
any order. What the steps derive from the integers (mean, variance, median, the most frequent
value, the categories present) is a deterministic float function of them, so a forgotten
model and its refit compute the same bits.

:class:`Moments` (mean and variance of numeric columns): each value x of column j is put on
the grid ``q = rint(x · 2^(31 − E_j))``, where ``2^E_j`` bounds the column's magnitudes (E_j
is the largest binary exponent among the column's values: ``frexp``). Then ``|q| ≤ 2^31`` and
``q² ≤ 2^62``, so Σq and Σq² — the latter split in 31-bit halves, each summed in int64 —
cannot overflow below 2^31 rows. The grid keeps 31 bits relative to the column's largest
magnitude: the mean and variance are exact for the quantized values (correctly rounded
quotients of Python integers), within 2^-31 of the largest magnitude of the float values.
E_j is itself a function of the multiset: the counts of each exponent are kept, and when the
largest exponent appears or disappears every value moves to the new grid (``update``
answers False and the caller recomputes from the rows: a rare event, as rare as a new
maximum's binade).

:class:`ValueCounts` (median, most frequent, minimum/maximum, categories): the exact
multiset of each column's values — sorted distinct values and their integer counts, missing
values left out — so removing a row decrements a count, and a value whose count reaches zero
is dropped (no residue).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

GRID_BITS = 31
_LOW = (1 << GRID_BITS) - 1
MAX_ROWS = 1 << GRID_BITS
"""Σ|q| and the halves of Σq² stay below 2^62 for fewer rows than this."""


def _exponents(X: np.ndarray) -> np.ndarray:
    """Binary exponent E of each value (|x| < 2^E), with a very low sentinel for 0 and NaN."""
    mant, exp = np.frexp(np.nan_to_num(X, nan=0.0))
    return np.where(mant == 0.0, np.iinfo(np.int32).min, exp)


class Moments:
    """Per column: number of present values, Σq, Σq² (two halves), exponent counts.

    State is plain integers (``state()``); ``mean()``/``variance()`` are exact rational
    quotients rounded once to float64.
    """

    def __init__(self, d: int):
        self.count = np.zeros(d, dtype=np.int64)
        self.s1 = np.zeros(d, dtype=np.int64)
        self.s2_high = np.zeros(d, dtype=np.int64)
        self.s2_low = np.zeros(d, dtype=np.int64)
        self.exponents: list[dict[int, int]] = [{} for _ in range(d)]

    @classmethod
    def of(cls, X: np.ndarray) -> Moments:
        """The moments of the rows ``X`` (a fresh grid from their exponents)."""
        m = cls(X.shape[1])
        m._add(X, 1, None, fresh=True)
        return m

    def top(self) -> list[int]:
        """E_j of every column (0 for a column with no nonzero value)."""
        return [max(e) if e else 0 for e in self.exponents]

    def update(self, X: np.ndarray, sign: int) -> bool:
        """Add (sign=+1) or remove (-1) rows ``X``; False if the grid of some column moves
        (then nothing changed and the caller recomputes with :meth:`of`)."""
        if X.shape[0] == 0:
            return True
        before = self.top()
        counts = [dict(e) for e in self.exponents]
        exps = _exponents(X)
        for j in range(X.shape[1]):
            values, n = np.unique(exps[:, j], return_counts=True)
            for v, c in zip(values.tolist(), n.tolist(), strict=True):
                if v == np.iinfo(np.int32).min:
                    continue
                left = counts[j].get(v, 0) + sign * c
                if left < 0:
                    raise ValueError("removing values that were never added")
                if left:
                    counts[j][v] = left
                else:
                    counts[j].pop(v, None)
        after = [max(e) if e else 0 for e in counts]
        if after != before:
            return False
        self._add(X, sign, np.asarray(before, dtype=np.int64), fresh=False)
        self.exponents = counts
        return True

    def _add(self, X: np.ndarray, sign: int, top: np.ndarray | None, *, fresh: bool) -> None:
        if fresh:
            exps = _exponents(X)
            for j in range(X.shape[1]):
                values, n = np.unique(exps[:, j], return_counts=True)
                self.exponents[j] = {
                    v: c
                    for v, c in zip(values.tolist(), n.tolist(), strict=True)
                    if v != np.iinfo(np.int32).min
                }
            top = np.asarray(self.top(), dtype=np.int64)
        if X.shape[0] + int(self.count.max(initial=0)) >= MAX_ROWS:
            raise ValueError(f"more than {MAX_ROWS - 1} rows: the integer moments would overflow")
        present = ~np.isnan(X)
        q = np.rint(np.ldexp(np.where(present, X, 0.0), (GRID_BITS - top)[None, :])).astype(
            np.int64
        )
        sq = q * q
        self.count += sign * present.sum(axis=0)
        self.s1 += sign * q.sum(axis=0)
        self.s2_high += sign * (sq >> GRID_BITS).sum(axis=0)
        self.s2_low += sign * (sq & _LOW).sum(axis=0)

    def mean(self) -> np.ndarray:
        """Σx / n per column on the grid (NaN for a column without values)."""
        out = np.full(len(self.count), np.nan)
        columns = zip(self.count.tolist(), self.s1.tolist(), self.top(), strict=True)
        for j, (n, s1, e) in enumerate(columns):
            if n:
                out[j] = _quotient(s1, n, GRID_BITS - e)
        return out

    def variance(self) -> np.ndarray:
        """Population variance (ddof = 0) per column on the grid (NaN without values)."""
        out = np.full(len(self.count), np.nan)
        top = self.top()
        for j, n in enumerate(self.count.tolist()):
            if not n:
                continue
            s1 = int(self.s1[j])
            s2 = (int(self.s2_high[j]) << GRID_BITS) + int(self.s2_low[j])
            out[j] = _quotient(n * s2 - s1 * s1, n * n, 2 * (GRID_BITS - top[j]))
        return out

    def state(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "s1": self.s1,
            "s2_high": self.s2_high,
            "s2_low": self.s2_low,
            "exponents": [sorted(e.items()) for e in self.exponents],
        }

    def digest_into(self, h: Any) -> None:
        for name in ("count", "s1", "s2_high", "s2_low"):
            h.update(np.ascontiguousarray(getattr(self, name), dtype="<i8").tobytes())
        h.update(repr([sorted(e.items()) for e in self.exponents]).encode())


def _quotient(num: int, den: int, shift: int) -> float:
    """num / (den · 2^shift), correctly rounded (Python integer division is)."""
    if shift >= 0:
        return num / (den << shift)
    return (num << -shift) / den


# -- value counts ---------------------------------------------------------------------------
def _missing_mask(column: np.ndarray) -> np.ndarray:
    if column.dtype == object:
        return np.fromiter((v is None for v in column), dtype=bool, count=len(column))
    return np.isnan(column)


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and their counts (strings as an object array)."""
    if values.dtype == object:
        if not len(values):
            return np.empty(0, dtype=object), np.empty(0, dtype=np.int64)
        text = values.astype(str)
        u, n = np.unique(text, return_counts=True)
        return u.astype(object), n.astype(np.int64)
    u, n = np.unique(values, return_counts=True)
    return u, n.astype(np.int64)


class ValueCounts:
    """The exact multiset of one column's present values: sorted distinct values + counts,
    and the number of missing values."""

    def __init__(self, values: np.ndarray, counts: np.ndarray, missing: int, text: bool):
        self.values = values
        self.counts = counts
        self.missing = missing
        self.text = text

    def _values_blob(self) -> bytes:
        """The byte string of ``values`` (text): hashed by every digest, rarely changed, so
        kept until ``values`` is replaced (``_blob_of`` names the array it was made from)."""
        if self.__dict__.get("_blob_of") is not self.values:
            self._blob = text_blob(self.values.tolist())
            self._blob_of = self.values
        return self._blob

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_blob", "_blob_of")}

    def __deepcopy__(self, memo: dict) -> ValueCounts:
        """A copy whose counts are its own; ``values`` is shared: it is never changed in
        place (an update that adds or drops a value assigns a new array)."""
        twin = ValueCounts(self.values, self.counts.copy(), self.missing, self.text)
        if self.__dict__.get("_blob_of") is self.values:
            twin._blob, twin._blob_of = self._blob, self.values
        return twin

    @classmethod
    def of(cls, column: np.ndarray) -> ValueCounts:
        miss = _missing_mask(column)
        values, counts = _distinct(column[~miss])
        return cls(values, counts, int(miss.sum()), column.dtype == object)

    def update(self, column: np.ndarray, sign: int) -> None:
        """Add (+1) or remove (-1) the values of ``column``."""
        delta = ValueCounts.of(column)
        self.missing += sign * delta.missing
        if not len(delta.values):
            return
        pos = np.searchsorted(self.values, delta.values)
        found = pos < len(self.values)
        found[found] = self.values[pos[found]] == delta.values[found]
        if sign > 0 and found.all():  # no new value: the values array stays the same object
            self.counts[pos] += delta.counts
            return
        if sign < 0:
            if not found.all() or (self.counts[pos] < delta.counts).any():
                raise ValueError("removing values that were never added")
            self.counts[pos] -= delta.counts
            keep = self.counts > 0
            if not keep.all():
                self.values, self.counts = self.values[keep], self.counts[keep]
            return
        merged = np.concatenate([self.values, delta.values])
        weights = np.concatenate([self.counts, delta.counts])
        if self.text:
            u, inv = np.unique(merged.astype(str), return_inverse=True)
            u = u.astype(object)
        else:
            u, inv = np.unique(merged, return_inverse=True)
        self.values = u
        self.counts = np.zeros(len(u), dtype=np.int64)
        np.add.at(self.counts, inv, weights)

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def median(self) -> float:
        """numpy's median of the present values (mean of the middle two for an even count)."""
        n = self.n
        if not n:
            return np.nan
        cum = np.cumsum(self.counts)
        lo = self.values[int(np.searchsorted(cum, (n - 1) // 2, side="right"))]
        hi = self.values[int(np.searchsorted(cum, n // 2, side="right"))]
        if n % 2:
            return float(hi)
        return float(np.mean(np.array([lo, hi], dtype=np.float64)))

    def most_frequent(self) -> Any:
        """The most frequent present value; the smallest among ties (as scikit-learn)."""
        if not len(self.counts):
            return None
        return self.values[int(np.argmax(self.counts))]

    def digest_into(self, h: Any) -> None:
        h.update(b"T" if self.text else b"N")
        if self.text:
            h.update(self._values_blob())
        else:
            h.update(np.ascontiguousarray(self.values, dtype="<f8").tobytes())
        h.update(np.ascontiguousarray(self.counts, dtype="<i8").tobytes())
        h.update(int(self.missing).to_bytes(8, "little"))


def text_blob(values: list) -> bytes:
    """One unambiguous byte string for a list of strings and Nones (length-prefixed)."""
    parts = []
    for v in values:
        if v is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            b = v.encode("utf-8")
            parts.append(len(b).to_bytes(4, "little") + b)
    return b"".join(parts)


def digest_values(h: Any, values: Any) -> None:
    """Feed a canonical encoding of plain values (arrays, numbers, strings, lists) to ``h``."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        h.update(values.dtype.str.encode() + repr(values.shape).encode())
        h.update(np.ascontiguousarray(values).tobytes())
    elif isinstance(values, np.ndarray) and all(
        v is None or isinstance(v, str) for v in values.tolist()
    ):
        h.update(b"text%d" % len(values) + text_blob(values.tolist()))
    elif isinstance(values, list | tuple | np.ndarray):
        h.update(b"[%d" % len(values))
        for v in values:
            digest_values(h, v)
        h.update(b"]")
    elif isinstance(values, float | np.floating):
        h.update(b"f" + np.float64(values).tobytes())
    else:
        text = repr(values).encode("utf-8")
        h.update(len(text).to_bytes(8, "little") + text)


def new_hash() -> Any:
    return hashlib.sha256()
