"""Exact ridge regression with rank-one (rank-k) updates: the "ACU" baseline.

Ridge regression is fully determined by two sufficient statistics,

    A = X~ᵀ X~ + λ D        B = X~ᵀ Y

where ``X~`` is ``X`` with an appended column of ones (the intercept) and ``D`` is the
identity with a 0 in the intercept position (the intercept is not penalised, as in
``sklearn.linear_model.Ridge``).  Forgetting a row ``(x, y)`` is therefore just
``A -= x~ x~ᵀ``, ``B -= x~ yᵀ`` followed by a re-solve ``W = A⁻¹ B`` (Cholesky,
``O(d³)``), independent of the number of rows.  Inserting is the symmetric ``+=``.

Exactness caveat, stated plainly: the update is exact *in real arithmetic*, but
floating-point subtraction is not the inverse of addition, so after ``forget``
the statistics (and hence coefficients and predictions) differ from a
from-scratch refit in the last bits.  The error is tiny for well-scaled data
(tests check ``allclose`` at ``rtol=1e-9``) but grows with the condition number
of ``A`` and with the magnitude of the features (uncentred data with large means
loses precision in ``XᵀX``).  This is precisely the gap that bitwise-exact
unlearning methods close; this baseline does *not* give bit-for-bit history
independence.  Because the rows themselves must be kept to subtract them, the
model also stores ``X`` and ``Y``; forgotten rows are overwritten in that buffer.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ._ids import (
    RowId,
    check_forget_request,
    check_known_labels,
    check_labels,
    check_new_ids,
    check_targets,
    check_X,
    normalize_ids,
)


class _ExactRidgeBase(BaseEstimator):
    """Sufficient-statistic ridge with id bookkeeping; subclasses define the targets.

    Rows live in a growable buffer ``_X`` (first ``n_samples_`` rows valid) with
    per-row target data; removal swaps the last row into the hole so forgetting
    costs ``O(k·d)`` copying instead of ``O(n·d)``.
    """

    def __init__(self, alpha: float = 1.0, fit_intercept: bool = True) -> None:
        self.alpha = alpha
        self.fit_intercept = fit_intercept

    # -- hooks ---------------------------------------------------------------
    def _encode_fit(self, y: Any, n: int) -> np.ndarray:
        """Validate fit targets, set target-related state, return row payload."""
        raise NotImplementedError

    def _encode_new(self, y: Any, n: int) -> np.ndarray:
        """Validate insert targets against fitted state, return row payload."""
        raise NotImplementedError

    def _targets(self, payload: np.ndarray) -> np.ndarray:
        """Dense target matrix (rows x t) for stored row payload."""
        raise NotImplementedError

    def _after_update(self, removed: np.ndarray | None, added: np.ndarray | None) -> None:
        """Hook run after a commit with the removed/added row payloads."""

    # -- statistics ----------------------------------------------------------
    def _stats(self, X: np.ndarray, T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Unregularised contribution of rows ``(X, T)`` to ``(A, B)``.

        Built blockwise so the intercept column is never materialised as a copy of X.
        """
        n, d = X.shape
        p = d + int(self._intercept)
        A = np.empty((p, p))
        B = np.empty((p, T.shape[1]))
        A[:d, :d] = X.T @ X
        B[:d] = X.T @ T
        if self._intercept:
            s = X.sum(axis=0)
            A[:d, d] = s
            A[d, :d] = s
            A[d, d] = n
            B[d] = T.sum(axis=0)
        return A, B

    def _penalty(self, d: int) -> np.ndarray:
        pen = np.full(d + int(self._intercept), self._alpha)
        if self._intercept:
            pen[d] = 0.0
        return pen

    @staticmethod
    def _solve(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        c = cho_factor(A, lower=False, check_finite=False)
        return cho_solve(c, B, check_finite=False)

    def _set_coef(self, W: np.ndarray) -> None:
        d = self.n_features_in_
        self.coef_ = W[:d].T.copy()
        self.intercept_ = W[d].copy() if self._intercept else np.zeros(W.shape[1])

    # -- public API ----------------------------------------------------------
    def fit(self, X: Any, y: Any, ids: Any = None) -> _ExactRidgeBase:
        """Accumulate ``A``, ``B`` from all rows and solve.

        ``ids`` default to ``range(n)``; they must be unique ints or strings.
        """
        snapshot = dict(self.__dict__)
        try:
            return self._fit(X, y, ids)
        except BaseException:
            # a failed (re)fit must not leave a mix of old and new state
            self.__dict__.clear()
            self.__dict__.update(snapshot)
            raise

    def _fit(self, X: Any, y: Any, ids: Any) -> _ExactRidgeBase:
        try:
            alpha = float(self.alpha)
        except (TypeError, ValueError):
            alpha = float("nan")
        if not np.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"alpha must be a positive finite float, got {self.alpha!r}")
        X = check_X(X)
        n, d = X.shape
        if n == 0:
            raise ValueError("cannot fit on 0 rows")
        ids = normalize_ids(ids, n)
        self._alpha = alpha
        self._intercept = bool(self.fit_intercept)
        payload = self._encode_fit(y, n)
        A, B = self._stats(X, self._targets(payload))
        A[np.diag_indices_from(A)] += self._penalty(d)
        W = self._solve(A, B)
        self.n_features_in_ = d
        self.A_, self.B_ = A, B
        self._X = X.copy()
        self._P = payload.copy()
        self._ids: list[RowId] = list(ids)
        self._pos: dict[RowId, int] = {i: k for k, i in enumerate(ids)}
        self.n_samples_ = n
        self.n_refreshes_ = 0
        self._set_coef(W)
        return self

    @property
    def ids_(self) -> list[RowId]:
        """Ids of the rows currently held (buffer order, not meaningful)."""
        return list(self._ids)

    def forget(self, ids: Any) -> dict[str, float]:
        """Subtract the rows' contributions from ``A``, ``B`` and re-solve.

        Returns ``{"seconds": float}``.  Same error contract as SISA: unknown ids
        raise ``KeyError``; empty/duplicated requests or forgetting every row raise
        ``ValueError``; on error nothing changes.  If cancellation made ``A``
        numerically indefinite, ``A``/``B`` are recomputed from the kept rows
        (counted in ``n_refreshes_``).
        """
        check_is_fitted(self)
        t0 = time.perf_counter()
        req = check_forget_request(ids, self._pos)
        if len(req) >= self.n_samples_:
            raise ValueError("cannot forget every row; fit a new model instead")
        rows = np.fromiter((self._pos[i] for i in req), dtype=np.intp, count=len(req))
        dA, dB = self._stats(self._X[rows], self._targets(self._P[rows]))
        A, B = self.A_ - dA, self.B_ - dB
        try:
            W = self._solve(A, B)
            refreshed = False
        except LinAlgError:
            keep = np.ones(self.n_samples_, dtype=bool)
            keep[rows] = False
            n = self.n_samples_
            A, B = self._stats(self._X[:n][keep], self._targets(self._P[:n][keep]))
            A[np.diag_indices_from(A)] += self._penalty(self.n_features_in_)
            W = self._solve(A, B)
            refreshed = True
        removed = self._P[rows].copy()
        # commit: swap surviving tail rows into the holes, then wipe the tail
        n_old, n_new = self.n_samples_, self.n_samples_ - len(req)
        gone = set(rows.tolist())
        holes = sorted(r for r in gone if r < n_new)
        movers = [r for r in range(n_new, n_old) if r not in gone]
        if holes:
            self._X[holes] = self._X[movers]
            self._P[holes] = self._P[movers]
            for h, m in zip(holes, movers, strict=True):
                self._ids[h] = self._ids[m]
                self._pos[self._ids[h]] = h
        self._X[n_new:n_old] = 0.0
        self._P[n_new:n_old] = 0
        del self._ids[n_new:]
        for i in req:
            del self._pos[i]
        self.n_samples_ = n_new
        self.n_refreshes_ += int(refreshed)
        self.A_, self.B_ = A, B
        self._set_coef(W)
        self._after_update(removed, None)
        return {"seconds": time.perf_counter() - t0}

    def insert(self, X: Any, y: Any, ids: Any) -> dict[str, float]:
        """Add rows (new unique ids): ``A += x~ x~ᵀ``, ``B += x~ yᵀ``, re-solve."""
        check_is_fitted(self)
        t0 = time.perf_counter()
        X = check_X(X, self.n_features_in_, type(self).__name__)
        k = X.shape[0]
        if k == 0:
            raise ValueError("insert() needs at least one row")
        payload = self._encode_new(y, k)
        new_ids = check_new_ids(ids, k, self._pos)
        dA, dB = self._stats(X, self._targets(payload))
        A, B = self.A_ + dA, self.B_ + dB
        W = self._solve(A, B)
        n = self.n_samples_
        if n + k > self._X.shape[0]:
            cap = max(n + k, 2 * self._X.shape[0])
            Xb = np.zeros((cap, self._X.shape[1]))
            Pb = np.zeros((cap, *self._P.shape[1:]), dtype=self._P.dtype)
            Xb[:n], Pb[:n] = self._X[:n], self._P[:n]
            self._X, self._P = Xb, Pb
        self._X[n : n + k] = X
        self._P[n : n + k] = payload
        self._ids.extend(new_ids)
        self._pos.update((i, n + j) for j, i in enumerate(new_ids))
        self.n_samples_ = n + k
        self.A_, self.B_ = A, B
        self._set_coef(W)
        self._after_update(None, payload)
        return {"seconds": time.perf_counter() - t0}


class ExactRidge(RegressorMixin, _ExactRidgeBase):
    """Ridge regressor with exact-in-real-arithmetic forget/insert (see module doc).

    Minimises ``||Y - X w - b||² + alpha ||w||²`` like ``sklearn.linear_model.Ridge``.
    Not bitwise history independent: after :meth:`forget` the model equals a refit
    without those rows only up to floating-point rounding, because the downdate
    subtracts contributions that a refit would never have added.

    Parameters
    ----------
    alpha : float, default=1.0
        L2 penalty (> 0, which also keeps ``A`` positive definite).
    fit_intercept : bool, default=True
        Add an unpenalised intercept column.

    Attributes
    ----------
    coef_ : ndarray of shape (d,) or (t, d)
    intercept_ : float or ndarray of shape (t,)
    A_, B_ : ndarray
        The sufficient statistics (intercept in the last row/column).
    n_samples_, n_features_in_, n_refreshes_ : int
    """

    def _encode_fit(self, y: Any, n: int) -> np.ndarray:
        y = check_targets(y, n)
        self._y_1d = y.ndim == 1
        return y.reshape(n, -1)

    def _encode_new(self, y: Any, n: int) -> np.ndarray:
        y = check_targets(y, n).reshape(n, -1)
        if y.shape[1] != self._P.shape[1]:
            raise ValueError(
                f"y has {y.shape[1]} targets, the model was fit with {self._P.shape[1]}"
            )
        return y

    def _targets(self, payload: np.ndarray) -> np.ndarray:
        return payload

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _set_coef(self, W: np.ndarray) -> None:
        super()._set_coef(W)
        if self._y_1d:
            self.coef_ = self.coef_[0]
            self.intercept_ = float(self.intercept_[0])

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = check_X(X, self.n_features_in_, type(self).__name__)
        return X @ self.coef_.T + self.intercept_


class ExactRidgeClassifier(ClassifierMixin, _ExactRidgeBase):
    """Ridge on one-hot targets, predicting the argmax column.

    Each class gets a one-hot target column (unlike ``sklearn.linear_model.
    RidgeClassifier``, which uses ±1 and a single column for binary problems).
    ``classes_`` tracks the labels still held: when the last row of a class is
    forgotten its column is dropped, matching what a refit would produce.  Inserting
    a label outside ``classes_`` raises ``ValueError``.  Like :class:`ExactRidge`,
    forget matches a refit up to floating-point rounding, not bit for bit.

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    coef_ : ndarray of shape (K, d)
    intercept_ : ndarray of shape (K,)
    A_, B_, n_samples_, n_features_in_, n_refreshes_ : see :class:`ExactRidge`
    """

    def _encode_fit(self, y: Any, n: int) -> np.ndarray:
        y = check_labels(y, n)
        self.classes_, codes = np.unique(y, return_inverse=True)
        self.class_counts_ = np.bincount(codes, minlength=self.classes_.size)
        return codes.astype(np.intp)

    def _encode_new(self, y: Any, n: int) -> np.ndarray:
        y = check_labels(y, n)
        check_known_labels(y, self.classes_)
        return np.searchsorted(self.classes_, y).astype(np.intp)

    def _targets(self, payload: np.ndarray) -> np.ndarray:
        T = np.zeros((payload.shape[0], self.classes_.size))
        T[np.arange(payload.shape[0]), payload] = 1.0
        return T

    def _after_update(self, removed: np.ndarray | None, added: np.ndarray | None) -> None:
        K = self.classes_.size
        if added is not None:
            self.class_counts_ = self.class_counts_ + np.bincount(added, minlength=K)
        if removed is None:
            return
        self.class_counts_ = self.class_counts_ - np.bincount(removed, minlength=K)
        n = self.n_samples_
        alive = self.class_counts_ > 0
        if alive.all():
            return
        # a class vanished: drop its column everywhere and renumber the codes
        remap = np.cumsum(alive) - 1
        self._P[:n] = remap[self._P[:n]]
        self.classes_ = self.classes_[alive]
        self.class_counts_ = self.class_counts_[alive]
        self.B_ = self.B_[:, alive].copy()
        self.coef_ = self.coef_[alive].copy()
        self.intercept_ = self.intercept_[alive].copy()

    def _scores(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = check_X(X, self.n_features_in_, type(self).__name__)
        return X @ self.coef_.T + self.intercept_

    def decision_function(self, X: Any) -> np.ndarray:
        """Per-class ridge scores, shape (n, K).

        For two classes, sklearn's convention is followed instead: a 1-D score that
        is positive when ``classes_[1]`` wins (``score_1 - score_0``), so the model
        plugs into ``roc_auc_score`` and friends.
        """
        S = self._scores(X)
        return S[:, 1] - S[:, 0] if S.shape[1] == 2 else S

    def predict(self, X: Any) -> np.ndarray:
        """Class with the largest score (ties: the smallest label)."""
        best = np.argmax(self._scores(X), axis=1)  # checks fitted before classes_ is read
        return self.classes_[best]
