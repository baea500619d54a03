"""Exact category encoders: one-hot and ordinal codes of the categories present.

With ``categories="auto"`` a column's categories are a deterministic function of the current
set of rows (SPEC §5 decision 11): the distinct values present, sorted, with the missing value
(NaN or None) last when some row lacks a value — as scikit-learn orders them. Each encoder
keeps the exact count of every category over all rows (:class:`~.statistics.ValueCounts`),
so a forget decrements counts, and only forgetting a category's *last* row changes the
categories: then the output (its width, or later categories' codes) changes for the rows that
stay, and the pipeline refits its estimator on them. A new category in an insert does the
same. Given categories (a list per column) never change; a value outside them is refused at
fit and insert, as scikit-learn refuses it at fit.

At transform (prediction), a value outside the categories is an unknown category: refused
with ``handle_unknown="error"`` (naming the column and the value), encoded as all zeros
(one-hot, ``"ignore"``) or as ``unknown_value`` (ordinal, ``"use_encoded_value"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import ExactStep, Rows, as_input
from .statistics import ValueCounts, digest_values
from .table import column_label, columns_of, is_text, n_rows


def _missing(column: np.ndarray) -> np.ndarray:
    if is_text(column):
        return np.fromiter((v is None for v in column), dtype=bool, count=len(column))
    return np.isnan(column)


class _CategoryEncoder(ExactStep):
    """Categories per column, and the code of each value (-1: unknown)."""

    @property
    def uses(self) -> str:
        return "all" if isinstance(self.categories, str) else "none"

    def _check_params(self) -> None:
        if isinstance(self.categories, str) and self.categories != "auto":
            raise ValueError(f"{type(self).__name__}: categories must be 'auto' or a list")

    def fit_rows(self, rows: Rows) -> None:
        self._check_params()
        super().fit_rows(rows)
        cols = columns_of(rows.X)
        self.text_ = [is_text(c) for c in cols]
        self.names_ = getattr(rows.X, "names", None)
        if isinstance(self.categories, str):
            self.counts_ = [ValueCounts.of(c) for c in cols]
        else:
            if len(self.categories) != len(cols):
                raise ValueError(
                    f"{type(self).__name__}: {len(self.categories)} category lists for "
                    f"{len(cols)} columns"
                )
            self._check_rows(rows)
        self._derive()

    def _check_rows(self, delta: Rows) -> None:
        if isinstance(self.categories, str):
            return
        given = self._given()
        for j, c in enumerate(columns_of(delta.X)):
            codes = self._codes_for(c, given[j])
            if (codes < 0).any():
                bad = np.unique(np.asarray(c[codes < 0], dtype=object).astype(str))[:5]
                raise ValueError(
                    f"Found unknown categories {bad.tolist()} in column "
                    f"{column_label(delta.X, j)} during fit"
                )

    def _given(self) -> list[np.ndarray]:
        out = []
        for j, cats in enumerate(self.categories):
            values = list(cats)
            present = [v for v in values if not _is_missing_value(v)]
            has_missing = len(present) < len(values)
            # in the order given (an ordinal scale's order), missing last
            if self.text_[j]:
                items: list = [str(v) for v in present] + ([None] if has_missing else [])
                arr = np.array(items, dtype=object)
            else:
                items = [float(v) for v in present] + ([np.nan] if has_missing else [])
                arr = np.array(items, dtype=np.float64)
            if len(set(items)) != len(items):
                raise ValueError(f"{type(self).__name__}: categories of column {j} repeat")
            out.append(arr)
        return out

    def _add_rows(self, delta: Rows, sign: int) -> bool:
        moved = False
        for c, counts in zip(columns_of(delta.X), self.counts_, strict=True):
            values, has_missing = counts.values, counts.missing > 0
            counts.update(c, sign)
            moved |= counts.values is not values or (counts.missing > 0) != has_missing
        if moved:  # a category appeared or left: the categories (and the output) change
            self._derive()
        return True

    def _derive(self) -> None:
        self._changed()
        if not isinstance(self.categories, str):
            self.categories_ = self._given()
            return
        cats = []
        for j, counts in enumerate(self.counts_):
            values = list(counts.values)
            if counts.missing:
                values.append(None if self.text_[j] else np.nan)
            cats.append(np.array(values, dtype=object if self.text_[j] else np.float64))
        self.categories_ = cats

    @staticmethod
    def _codes_for(column: np.ndarray, categories: np.ndarray) -> np.ndarray:
        """Index of each value in ``categories`` (missing last), -1 where absent."""
        miss = _missing(column)
        cat_missing = _missing(categories)
        present_cats = categories[~cat_missing]
        codes = np.full(len(column), -1, dtype=np.int64)
        if cat_missing.any():
            codes[miss] = len(categories) - 1
        values = column[~miss]
        if len(values) and len(present_cats):
            if is_text(column):
                values = values.astype(str)
                present_cats = present_cats.astype(str)
            order = np.argsort(present_cats, kind="stable")  # given categories keep their order
            ordered = present_cats[order]
            pos = np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)
            found = ordered[pos] == values
            codes[~miss] = np.where(found, order[pos], -1)
        return codes

    def _codes(self, X: Any) -> tuple[list[np.ndarray], Any]:
        X = as_input(X)
        self._check_width(X)
        out = []
        for j, c in enumerate(columns_of(X)):
            if is_text(c) != self.text_[j]:
                if not _missing(c).all():
                    fitted = "text" if self.text_[j] else "numbers"
                    raise ValueError(
                        f"{type(self).__name__}: column {column_label(X, j)} was fitted on "
                        f"{fitted}; pass the same kind"
                    )
                c = (
                    np.full(len(c), None, dtype=object)
                    if self.text_[j]
                    else np.full(len(c), np.nan)
                )
            codes = self._codes_for(c, self.categories_[j])
            if (codes < 0).any() and self._unknown_is_error():
                bad = np.unique(np.asarray(c[codes < 0], dtype=object).astype(str))[:5]
                raise ValueError(
                    f"Found unknown categories {bad.tolist()} in column {column_label(X, j)} "
                    "during transform; refit (or insert rows with them) to learn them, or set "
                    "handle_unknown to encode them"
                )
            out.append(codes)
        return out, X

    def _transform_params(self) -> Any:
        return list(self.categories_)

    def _stats_into(self, h: Any) -> None:
        for c in getattr(self, "counts_", []):
            c.digest_into(h)
        digest_values(h, self.text_)


def _is_missing_value(v: Any) -> bool:
    return v is None or (isinstance(v, float | np.floating) and np.isnan(v))


class OneHotEncoder(_CategoryEncoder):
    """One 0/1 column per category (scikit-learn's ``OneHotEncoder`` made exact; dense output).

    ``drop``: None, ``"first"`` (drop each column's first category) or ``"if_binary"`` (only
    where a column has two categories). ``handle_unknown``: ``"error"`` or ``"ignore"``
    (unknown categories → all zeros; scikit-learn's ``"infrequent_if_exist"`` is the same here:
    there are no infrequent categories).
    """

    def __init__(
        self, *, categories: Any = "auto", drop: str | None = None, handle_unknown: str = "error"
    ):
        self.categories = categories
        self.drop = drop
        self.handle_unknown = handle_unknown

    def _check_params(self) -> None:
        super()._check_params()
        if self.drop not in (None, "first", "if_binary"):
            raise ValueError("OneHotEncoder: drop must be None, 'first' or 'if_binary'")
        if self.handle_unknown not in ("error", "ignore"):
            raise ValueError("OneHotEncoder: handle_unknown must be 'error' or 'ignore'")

    def _unknown_is_error(self) -> bool:
        return self.handle_unknown == "error"

    def _derive(self) -> None:
        super()._derive()
        drop = []
        for cats in self.categories_:
            if self.drop == "first" or (self.drop == "if_binary" and len(cats) == 2):
                drop.append(0)
            else:
                drop.append(None)
        self.drop_idx_ = drop

    def transform(self, X: Any) -> np.ndarray:
        codes, X = self._codes(X)
        widths = [
            len(c) - (d is not None) for c, d in zip(self.categories_, self.drop_idx_, strict=True)
        ]
        out = np.zeros((n_rows(X), sum(widths)), dtype=np.float64)
        offset = 0
        rows = np.arange(n_rows(X))
        for code, width, drop in zip(codes, widths, self.drop_idx_, strict=True):
            col = code.copy()
            keep = col >= 0
            if drop is not None:
                keep &= col != drop
                col = np.where(col > drop, col - 1, col)
            out[rows[keep], offset + col[keep]] = 1.0
            offset += width
        return out

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        names = input_features or self.names_ or [f"x{j}" for j in range(len(self.categories_))]
        out = []
        for name, cats, drop in zip(names, self.categories_, self.drop_idx_, strict=True):
            out += [f"{name}_{v}" for i, v in enumerate(cats.tolist()) if i != drop]
        return np.array(out, dtype=object)

    def _transform_params(self) -> Any:
        return [super()._transform_params(), list(self.drop_idx_)]


class OrdinalEncoder(_CategoryEncoder):
    """The index of each value among its column's categories (scikit-learn's
    ``OrdinalEncoder`` made exact; float64 codes).

    Missing values get ``encoded_missing_value`` (default NaN: impute or replace it before a
    QSS estimator, which takes no NaN). ``handle_unknown``: ``"error"`` or
    ``"use_encoded_value"`` with ``unknown_value``.
    """

    def __init__(
        self,
        *,
        categories: Any = "auto",
        handle_unknown: str = "error",
        unknown_value: float | None = None,
        encoded_missing_value: float = np.nan,
    ):
        self.categories = categories
        self.handle_unknown = handle_unknown
        self.unknown_value = unknown_value
        self.encoded_missing_value = encoded_missing_value

    def _check_params(self) -> None:
        super()._check_params()
        if self.handle_unknown not in ("error", "use_encoded_value"):
            raise ValueError(
                "OrdinalEncoder: handle_unknown must be 'error' or 'use_encoded_value'"
            )
        if (self.handle_unknown == "use_encoded_value") != (self.unknown_value is not None):
            raise ValueError(
                "OrdinalEncoder: unknown_value is set with handle_unknown='use_encoded_value', "
                "and only then"
            )

    def _unknown_is_error(self) -> bool:
        return self.handle_unknown == "error"

    def transform(self, X: Any) -> np.ndarray:
        codes, X = self._codes(X)
        out = np.empty((n_rows(X), len(codes)), dtype=np.float64)
        for j, (code, cats) in enumerate(zip(codes, self.categories_, strict=True)):
            col = code.astype(np.float64)
            if len(cats) and _missing(cats[-1:])[0]:
                col[code == len(cats) - 1] = self.encoded_missing_value
            if self.unknown_value is not None:
                col[code < 0] = self.unknown_value
            out[:, j] = col
        return out
