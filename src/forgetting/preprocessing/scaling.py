"""Exact scalers: standardization from integer moments, min/max from value counts.

Which rows (``rows``): ``"schema"`` (the default) fits the statistics on the pipeline's
schema rows D° only, so they change only when a forget hits D° — then the estimator is
refitted, about as often as its own instances rebuild. ``"all"`` fits them on every row, as
scikit-learn does, from integer sums (:mod:`.statistics`): exact too, but a mean over all rows
moves with every forget, and with it every remaining row's scaled value, so every forget and
insert refits the estimator on all rows. docs/pipelines.md weighs the two.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import ROWS, ExactStep, Rows, as_input
from .statistics import Moments, ValueCounts, digest_values
from .table import to_matrix


def _check_rows_param(step: Any) -> None:
    if step.rows not in ROWS:
        raise ValueError(
            f"{type(step).__name__}: rows must be 'schema' or 'all', got {step.rows!r}"
        )


class StandardScaler(ExactStep):
    """(x − mean) / scale per column, scikit-learn's ``StandardScaler`` made exact.

    ``mean_`` and ``var_`` (population variance) are correctly rounded quotients of integer
    sums on a fixed-point grid (:class:`~forgetting.preprocessing.statistics.Moments`); they
    can differ from scikit-learn's float sums in the last bits. ``scale_`` = √var, or 1 for a
    constant column. Missing values (NaN) are left out of the statistics and stay NaN.
    """

    def __init__(self, *, with_mean: bool = True, with_std: bool = True, rows: str = "schema"):
        self.with_mean = with_mean
        self.with_std = with_std
        self.rows = rows

    @property
    def uses(self) -> str:
        return self.rows

    def fit_rows(self, rows: Rows) -> None:
        _check_rows_param(self)
        super().fit_rows(rows)
        if self.rows == "schema":
            rows = rows.schema_rows()
        self.moments_ = Moments.of(to_matrix(rows.X, "StandardScaler"))
        self._derive()

    def _add_rows(self, delta: Rows, sign: int) -> bool:
        if not self.moments_.update(to_matrix(delta.X, "StandardScaler"), sign):
            return False
        self._derive()
        return True

    def _derive(self) -> None:
        self._changed()
        m = self.moments_
        self.n_samples_seen_ = m.count.copy()
        self.mean_ = m.mean()
        self.var_ = m.variance()
        scale = np.sqrt(self.var_)
        scale[self.var_ == 0.0] = 1.0
        self.scale_ = scale

    def transform(self, X: Any) -> np.ndarray:
        X = as_input(X)
        self._check_width(X)
        out = np.array(to_matrix(X, "StandardScaler"), dtype=np.float64, copy=True)
        if self.with_mean:
            out -= self.mean_
        if self.with_std:
            out /= self.scale_
        return out

    def _transform_params(self) -> Any:
        return [self.with_mean and self.mean_, self.with_std and self.scale_]

    def _stats_into(self, h: Any) -> None:
        self.moments_.digest_into(h)


class MinMaxScaler(ExactStep):
    """(x − min) / (max − min) mapped to ``feature_range``, scikit-learn's ``MinMaxScaler``
    made exact: min and max of the exact multiset of each column's values, so forgetting the
    row that held the maximum moves it to the next value exactly as a refit would."""

    def __init__(self, feature_range: tuple = (0, 1), *, clip: bool = False, rows: str = "schema"):
        self.feature_range = feature_range
        self.clip = clip
        self.rows = rows

    @property
    def uses(self) -> str:
        return self.rows

    def fit_rows(self, rows: Rows) -> None:
        _check_rows_param(self)
        lo, hi = self.feature_range
        if not lo < hi:
            raise ValueError("MinMaxScaler: feature_range must be (min, max) with min < max")
        super().fit_rows(rows)
        if self.rows == "schema":
            rows = rows.schema_rows()
        M = to_matrix(rows.X, "MinMaxScaler")
        self.counts_ = [ValueCounts.of(M[:, j]) for j in range(M.shape[1])]
        self._derive()

    def _add_rows(self, delta: Rows, sign: int) -> bool:
        M = to_matrix(delta.X, "MinMaxScaler")
        for j, counts in enumerate(self.counts_):
            counts.update(M[:, j], sign)
        self._derive()
        return True

    def _derive(self) -> None:
        self._changed()
        lo, hi = (float(v) for v in self.feature_range)
        self.data_min_ = np.array([c.values[0] if len(c.values) else np.nan for c in self.counts_])
        self.data_max_ = np.array([c.values[-1] if len(c.values) else np.nan for c in self.counts_])
        self.data_range_ = self.data_max_ - self.data_min_
        rng = np.where(self.data_range_ == 0.0, 1.0, self.data_range_)
        self.scale_ = (hi - lo) / rng
        self.min_ = lo - self.data_min_ * self.scale_

    def transform(self, X: Any) -> np.ndarray:
        X = as_input(X)
        self._check_width(X)
        out = np.array(to_matrix(X, "MinMaxScaler"), dtype=np.float64, copy=True)
        out *= self.scale_
        out += self.min_
        if self.clip:
            np.clip(out, self.feature_range[0], self.feature_range[1], out=out)
        return out

    def _transform_params(self) -> Any:
        return [self.scale_, self.min_]

    def _stats_into(self, h: Any) -> None:
        for c in self.counts_:
            c.digest_into(h)
        digest_values(h, len(self.counts_))
