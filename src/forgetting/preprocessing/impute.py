"""SimpleImputer made exact: missing values filled from exact statistics.

``"mean"``: integer moments (:class:`~.statistics.Moments`); ``"median"`` and
``"most_frequent"``: the exact multiset of values (:class:`~.statistics.ValueCounts`, the
smallest value among ties as scikit-learn); ``"constant"``: no statistic. As the scalers,
``rows="schema"`` (default) takes the statistics from the pipeline's D° rows, ``rows="all"``
from every row (then a forget changes the fill value, and every remaining row that had a
missing value changes: the estimator is refitted — only if some remaining row has a missing
value in that column).

A column without any present value among the rows fitted on is dropped from the output (as
scikit-learn with ``keep_empty_features=False``; a forget that removes a column's last value
changes the output's width, which refits the estimator) or, with ``keep_empty_features=True``,
filled with 0 (text columns: ``"missing_value"``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .base import ROWS, ExactStep, Rows, as_input
from .statistics import Moments, ValueCounts, digest_values
from .table import Table, column_label, columns_of, is_text, n_rows

STRATEGIES = ("mean", "median", "most_frequent", "constant")


def _natural_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


class SimpleImputer(ExactStep):
    """Fill missing values per column (scikit-learn's ``SimpleImputer`` made exact).

    ``missing_values``: NaN or None (both mean NaN in numeric columns and None in text
    columns), or a number or string that marks missing values. ``fill_value`` for
    ``"constant"``: default 0 for numeric columns, ``"missing_value"`` for text ones.
    """

    def __init__(
        self,
        *,
        missing_values: Any = np.nan,
        strategy: str = "mean",
        fill_value: Any = None,
        keep_empty_features: bool = False,
        rows: str = "schema",
    ):
        self.missing_values = missing_values
        self.strategy = strategy
        self.fill_value = fill_value
        self.keep_empty_features = keep_empty_features
        self.rows = rows

    @property
    def uses(self) -> str:
        return "none" if self.strategy == "constant" else self.rows

    # -- statistics -------------------------------------------------------------------------
    def _mask(self, column: np.ndarray) -> np.ndarray:
        if _natural_missing(self.missing_values):
            if is_text(column):
                return np.fromiter((v is None for v in column), dtype=bool, count=len(column))
            return np.isnan(column)
        if is_text(column):
            return column == self.missing_values
        if isinstance(self.missing_values, str):
            return np.zeros(len(column), dtype=bool)
        return column == self.missing_values

    def _present(self, column: np.ndarray) -> np.ndarray:
        """The present values of ``column`` (missing ones left out)."""
        return column[~self._mask(column)]

    def fit_rows(self, rows: Rows) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"SimpleImputer: strategy must be one of {STRATEGIES}")
        if self.rows not in ROWS:
            raise ValueError(f"SimpleImputer: rows must be 'schema' or 'all', got {self.rows!r}")
        super().fit_rows(rows)
        cols = columns_of(rows.X)
        self.text_ = [is_text(c) for c in cols]
        if self.strategy == "mean":
            for j in range(len(cols)):
                if self.text_[j]:
                    raise ValueError(
                        f"SimpleImputer(strategy='mean'): column {column_label(rows.X, j)} "
                        "holds text; use strategy='most_frequent' or 'constant'"
                    )
        if self.strategy == "median" and any(self.text_):
            j = self.text_.index(True)
            raise ValueError(
                f"SimpleImputer(strategy='median'): column {column_label(rows.X, j)} holds "
                "text; use strategy='most_frequent' or 'constant'"
            )
        self.names_ = getattr(rows.X, "names", None)
        if self.strategy == "constant":
            self._derive()
            return
        if self.rows == "schema":
            rows = rows.schema_rows()
        cols = columns_of(rows.X)
        if self.strategy == "mean":
            present = np.column_stack([self._masked(c) for c in cols])
            self.moments_ = Moments.of(present)
        else:
            self.counts_ = [ValueCounts.of(self._present_column(c)) for c in cols]
        self._derive()

    def _masked(self, column: np.ndarray) -> np.ndarray:
        """A numeric column with missing values as NaN (what the moments skip)."""
        return np.where(self._mask(column), np.nan, column)

    def _present_column(self, column: np.ndarray) -> np.ndarray:
        """``column`` with missing values as NaN / None (what the value counts skip)."""
        mask = self._mask(column)
        if not mask.any():
            return column
        out = column.copy()
        out[mask] = None if is_text(column) else np.nan
        return out

    def _add_rows(self, delta: Rows, sign: int) -> bool:
        cols = columns_of(delta.X)
        if self.strategy == "mean":
            if not self.moments_.update(np.column_stack([self._masked(c) for c in cols]), sign):
                return False
            self._derive()
            return True
        for c, counts in zip(cols, self.counts_, strict=True):
            counts.update(self._present_column(c), sign)
        self._derive()
        return True

    def _derive(self) -> None:
        self._changed()
        d = len(self.text_)
        if self.strategy == "constant":
            stats = [self._constant(j) for j in range(d)]
            empty = [False] * d
        elif self.strategy == "mean":
            means = self.moments_.mean()
            stats = [float(v) for v in means]
            empty = [bool(n == 0) for n in self.moments_.count]
        elif self.strategy == "median":
            stats = [c.median() for c in self.counts_]
            empty = [c.n == 0 for c in self.counts_]
        else:
            stats = [c.most_frequent() for c in self.counts_]
            stats = [v if self.text_[j] or v is None else float(v) for j, v in enumerate(stats)]
            empty = [c.n == 0 for c in self.counts_]
        if self.keep_empty_features:
            stats = [
                ("missing_value" if self.text_[j] else 0.0) if empty[j] else v
                for j, v in enumerate(stats)
            ]
            empty = [False] * d
        self.statistics_ = stats
        self.kept_ = [j for j in range(d) if not empty[j]]

    def _constant(self, j: int) -> Any:
        if self.fill_value is None:
            return "missing_value" if self.text_[j] else 0.0
        if self.text_[j]:
            return str(self.fill_value)
        if isinstance(self.fill_value, str):
            raise ValueError(
                f"SimpleImputer: fill_value {self.fill_value!r} is text but column {j} is "
                "numeric; give a number, or a ColumnTransformer per column kind"
            )
        return float(self.fill_value)

    def transform(self, X: Any) -> Any:
        X = as_input(X)
        self._check_width(X)
        cols = columns_of(X)
        out = []
        for j in self.kept_:
            c = cols[j]
            if is_text(c) != self.text_[j]:
                kind = "text" if self.text_[j] else "numbers"
                raise ValueError(f"SimpleImputer: column {j} was fitted on {kind}")
            mask = self._mask(c)
            if mask.any():
                c = c.copy()
                c[mask] = self.statistics_[j]
            elif not is_text(c):
                c = np.array(c, dtype=np.float64, copy=True)
            out.append(c)
        if not any(self.text_[j] for j in self.kept_):
            if not out:
                return np.empty((n_rows(X), 0), dtype=np.float64)
            return np.column_stack(out).astype(np.float64, copy=False)
        names = None if self.names_ is None else tuple(self.names_[j] for j in self.kept_)
        return Table(tuple(out), names)

    def _transform_params(self) -> Any:
        return [list(self.statistics_), list(self.kept_)]

    def _stats_into(self, h: Any) -> None:
        if self.strategy == "mean":
            self.moments_.digest_into(h)
        elif self.strategy != "constant":
            for c in self.counts_:
                c.digest_into(h)
        digest_values(h, self.text_)


class MissingIndicator(ExactStep):
    """A 0/1 column per numeric input column that has a missing value (NaN) among the rows
    (scikit-learn's ``MissingIndicator(features="missing-only")`` made exact).

    Which columns get an indicator is a deterministic function of the current set of rows
    (SPEC §5 decision 11, rule c), kept as an exact count of missing values per column: a
    forget decrements it, and only the column's last missing value removes its indicator
    (the output's width changes, so a pipeline refits its estimator), as a new column with a
    missing value in an insert adds one.
    """

    _uses = "all"

    def fit_rows(self, rows: Rows) -> None:
        super().fit_rows(rows)
        M = self._matrix(rows.X)
        self.missing_counts_ = np.isnan(M).sum(axis=0).astype(np.int64)
        self._derive()

    @staticmethod
    def _matrix(X: Any) -> np.ndarray:
        cols = columns_of(X)
        for j, c in enumerate(cols):
            if is_text(c):
                raise ValueError(
                    f"MissingIndicator: column {column_label(X, j)} holds text; a category "
                    "encoder keeps missing text as its own category"
                )
        if not cols:
            return np.empty((n_rows(X), 0), dtype=np.float64)
        return np.column_stack(cols).astype(np.float64, copy=False)

    def _add_rows(self, delta: Rows, sign: int) -> bool:
        self.missing_counts_ = self.missing_counts_ + sign * np.isnan(self._matrix(delta.X)).sum(
            axis=0
        ).astype(np.int64)
        features = np.flatnonzero(self.missing_counts_ > 0)
        if not np.array_equal(features, self.features_):
            self._derive()
        return True

    def _derive(self) -> None:
        self._changed()
        self.features_ = np.flatnonzero(self.missing_counts_ > 0)

    def transform(self, X: Any) -> np.ndarray:
        X = as_input(X)
        self._check_width(X)
        M = self._matrix(X)
        return np.isnan(M[:, self.features_]).astype(np.float64)

    def _transform_params(self) -> Any:
        return self.features_.tolist()

    def _stats_into(self, h: Any) -> None:
        digest_values(h, self.missing_counts_.tolist())
