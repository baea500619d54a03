"""Fitted scikit-learn models applied directly, without their per-call input validation.

Why: a deletion computes φ and g for the leaving row and the first prediction after it for
the predicted row — on small blocks, p times each. scikit-learn's ``transform`` and
``predict_proba`` validate their input on every call (finite check, feature names through
narwhals, namespace dispatch), which on a small block costs many times the arithmetic: it
would be the larger part of a forget with its first prediction, and a large share of a fit,
which makes such calls by the thousand.

Exactness: every function here performs the *same numpy operations in the same order* as the
scikit-learn method it stands for (same BLAS call on the same arrays, same in-place softmax),
so it returns the same bits — a model whose g went through scikit-learn's own methods, or a
process that falls back, forgets and serves identically. That is not left to reading the
source: before the first direct call on a fitted object, :func:`_agrees` compares the direct
result with scikit-learn's own on fixed probe rows, and any difference (a future scikit-learn
that changes its arithmetic), a model type not covered here, or an error falls back to
scikit-learn for that object. Inputs here are always our own validated float64 blocks (φ's
output), which is why skipping the validation is safe.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import numpy as np
import scipy.special
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.neural_network import MLPClassifier, MLPRegressor

from .._rowwise import BLOCK_ROWS, HEAD_BLOCK_ROWS, SERVE_BLOCK_ROWS, block_matmul, unstacked

_PROBE_HEIGHTS = (SERVE_BLOCK_ROWS, HEAD_BLOCK_ROWS, BLOCK_ROWS)
_VERDICTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def lda_transform(lda: LinearDiscriminantAnalysis, Z: np.ndarray) -> np.ndarray:
    """``lda.transform(Z)`` for a fitted eigen- or svd-solver LDA on float64 ``Z``."""
    direct = _direct(lda, "transform", _lda_direct)
    return direct(Z) if direct is not None else lda.transform(Z)


def predict_proba(estimator, Z: np.ndarray) -> np.ndarray:
    """``estimator.predict_proba(Z)`` (direct for LogisticRegression and MLPClassifier)."""
    direct = _direct(estimator, "predict_proba", _proba_direct)
    return direct(Z) if direct is not None else estimator.predict_proba(Z)


def predict(estimator, Z: np.ndarray) -> np.ndarray:
    """``estimator.predict(Z)`` (direct for Ridge, LinearRegression and MLPRegressor)."""
    direct = _direct(estimator, "predict", _predict_direct)
    return direct(Z) if direct is not None else estimator.predict(Z)


# -- the direct formulas, one per scikit-learn method they replace ---------------------------
def _lda_direct(lda) -> Callable[[np.ndarray], np.ndarray] | None:
    if type(lda) is not LinearDiscriminantAnalysis:
        return None
    width = lda._n_features_out  # = _max_components, what transform slices to
    # scikit-learn multiplies by every eigenvector and then keeps the first ``width`` columns
    # (the eigen solver's scalings_ are d × d). Multiplying by the kept columns alone would be
    # cheaper but is not the same arithmetic: OpenBLAS's kernels for 9 columns round
    # differently from its kernels for 128 (_agrees refuses it), so the full product it is.
    if lda.solver == "eigen":
        return lambda Z: block_matmul(Z, lda.scalings_)[:, :width]
    if lda.solver == "svd":
        return lambda Z: block_matmul(Z - lda.xbar_, lda.scalings_)[:, :width]
    return None


def _linear_scores(est) -> Callable[[np.ndarray], np.ndarray]:
    """``decision_function``: X @ coef_.T + intercept_, flattened when it has one column."""
    coef_t = est.coef_.T if est.coef_.ndim == 2 else est.coef_

    def scores(Z: np.ndarray) -> np.ndarray:
        out = block_matmul(Z, coef_t) + est.intercept_
        return out.reshape(-1) if out.ndim > 1 and out.shape[1] == 1 else out

    return scores


def _proba_direct(est) -> Callable[[np.ndarray], np.ndarray] | None:
    if type(est) is LogisticRegression:
        scores = _linear_scores(est)
        if np.size(est.classes_) <= 2:  # _predict_proba_lr: expit, then [1 − p, p]

            def binary(Z: np.ndarray) -> np.ndarray:
                prob = scipy.special.expit(scores(Z))
                return np.stack([1 - prob, prob], axis=1)

            return binary

        def softmax(Z: np.ndarray) -> np.ndarray:  # sklearn.utils.extmath.softmax, in place
            X = scores(Z)
            X -= np.max(X, axis=1).reshape((-1, 1))
            np.exp(X, out=X)
            X /= np.sum(X, axis=1).reshape((-1, 1))
            return X

        return softmax
    if type(est) is MLPClassifier:

        def mlp(Z: np.ndarray) -> np.ndarray:
            y = est._forward_pass_fast(Z, check_input=False)
            if est.n_outputs_ == 1:
                y = y.ravel()
            return np.vstack([1 - y, y]).T if y.ndim == 1 else y

        return mlp
    return None


def _predict_direct(est) -> Callable[[np.ndarray], np.ndarray] | None:
    if type(est) in (Ridge, LinearRegression):
        return _linear_scores(est)
    if type(est) is MLPRegressor:

        def mlp(Z: np.ndarray) -> np.ndarray:
            y = est._forward_pass_fast(Z, check_input=False)
            return y.ravel() if y.shape[1] == 1 else y

        return mlp
    return None


# -- the check that makes skipping scikit-learn safe -----------------------------------------
def _direct(obj, method: str, make) -> Callable[[np.ndarray], np.ndarray] | None:
    """The direct function for ``obj.method``, or None to call scikit-learn.

    Decided once per fitted state of an object: cached weakly by object, and re-decided when
    its fitted arrays are no longer the same objects (the estimator was fitted again).
    """
    state = _fitted_state(obj)
    try:
        seen, direct = _VERDICTS[obj]
        if _same(seen, state):
            return direct
    except (KeyError, TypeError):
        pass
    direct = None
    try:
        candidate = make(obj)
        if candidate is not None and _agrees(candidate, getattr(obj, method), obj):
            direct = candidate
    except Exception:  # noqa: BLE001 - any surprise means "use scikit-learn"
        direct = None
    with _LOCK:
        try:
            _VERDICTS[obj] = (state, direct)
        except TypeError:  # not weak-referenceable: decided on every call, never direct
            return None
    return direct


_STATE_ATTRIBUTES = ("scalings_", "xbar_", "coef_", "intercept_", "classes_", "coefs_")


def _fitted_state(obj) -> tuple:
    """The fitted arrays a direct formula reads (a refit replaces them with new objects)."""
    return tuple(getattr(obj, name, None) for name in _STATE_ATTRIBUTES)


def _same(a: tuple, b: tuple) -> bool:
    return all(x is y for x, y in zip(a, b, strict=True))


def _agrees(direct, reference, obj) -> bool:
    """Same bits as scikit-learn on fixed probe rows (unit-norm, like φ's output), in blocks of
    each height the library evaluates (:mod:`forgetting._rowwise`: 64 and 1 024 rows). BLAS
    picks its kernels by shape, never by value, so agreement on random rows of a shape means
    the same arithmetic for every input of that shape."""
    width = int(getattr(obj, "n_features_in_", 0))
    if width <= 0:
        return False
    rng = np.random.default_rng(20261130)
    with unstacked():  # scikit-learn multiplies a probe block in one product: so must we
        return all(_agrees_at(direct, reference, rng, rows, width) for rows in _PROBE_HEIGHTS)


def _agrees_at(direct, reference, rng, rows: int, width: int) -> bool:
    Z = rng.normal(size=(rows, width))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    expected = np.asarray(reference(Z.copy()))
    got = np.asarray(direct(Z.copy()))
    return got.dtype == expected.dtype and np.array_equal(got, expected)
