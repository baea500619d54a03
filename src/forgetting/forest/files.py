"""Forest files: an exact forest saved as its rows and parameters, grown again on load.

The container is :mod:`forgetting.io.model_format`'s, of its own kind
(``"forgetting-forest-file"``: a QSS model or pipeline file given to a forest's ``load`` is
refused by kind, and the other way round). The payload is plain data: the estimator's class
and parameters (never ``secret_key`` unless ``store_key=True``), its fitted attributes (width,
feature names, categories, classes), the rows held (ids, float32 features, class indices or
float targets), the membership key's public fingerprint, the library versions and the
forest's structure digest.

Why rows and not trees: a forest is a pure function of (rows, parameters, key) — that is its
guarantee — so its trees need not be trusted from a file. They are grown again from the rows,
and nothing read from a file reaches the kernels but checked rows: a crafted file can at worst
be refused, never index past an array. Loading therefore costs one fit (docs/forest.md).
The refit's structure digest must equal the saved one: a file whose rows were edited (and its
checksum recomputed), or one written under other library builds, is refused rather than
served as the model that was saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils._param_validation import InvalidParameterError

from ..ids import normalize_ids
from ..io.atomic import atomic_write
from ..io.model_format import ModelFileError, dumps, loads, read_blob
from ..schema.membership import derive_key, id_bytes, key_fingerprint
from ..snapshots import memory_budget
from .core import fit_bytes

FILE_KIND = "forgetting-forest-file"


def save_forest(estimator: Any, path: str | Path, *, store_key: bool = False) -> None:
    """Write a fitted forest estimator atomically to ``path`` (see the module docstring)."""
    from ..persistence import environment, library_versions

    digest = estimator.structure_digest()  # refuses an unfitted model; rebuilds stale nodes
    ids, _, X, y = estimator.forest_.rows()
    state = {
        **saved_state(estimator),
        "libraries": library_versions(),
        "environment": environment(),
        "rows": {"ids": ids, "X": X, "y": y},
        "structure_digest": digest,
        "secret_key": estimator.secret_key if store_key else None,
    }
    atomic_write(path, dumps(state, FILE_KIND))


def load_forest(
    cls: type,
    path: str | Path,
    allow_version_mismatch: bool = False,
    *,
    secret_key: bytes | str | None = None,
) -> Any:
    """Read a forest written by :func:`save_forest` as an instance of ``cls``.

    Raises :class:`ModelFileError` for a damaged, foreign, incompatible, inconsistent or
    edited file, and ValueError when the model needs a secret key that is missing or wrong.
    """
    from ..persistence import version_mismatch

    what = str(path)
    state = loads(read_blob(path, what), FILE_KIND, what)
    if not isinstance(state, dict):
        raise ModelFileError(f"{what}: the file holds no forest")
    if state.get("class") != cls.__name__:
        raise ModelFileError(
            f"{what}: holds a {str(state.get('class'))[:40]}, not a {cls.__name__}"
        )
    mismatch = version_mismatch(state.get("libraries"))
    if mismatch and not allow_version_mismatch:
        raise ModelFileError(
            f"{what}: {mismatch}; bitwise exactness is only guaranteed with the same versions "
            "(install those, or pass allow_version_mismatch=True)"
        )
    if secret_key is None:
        secret_key = state.get("secret_key")
    estimator = restore_forest(cls, state, secret_key, what)
    if estimator.structure_digest() != state.get("structure_digest") and not mismatch:
        raise ModelFileError(
            f"{what}: its rows do not grow the forest that was saved (the file was edited, "
            "or written by another build of the libraries)"
        )
    return estimator


PARAMS_ADDED = {"n_instances": 1}
"""Parameters added after forest files were first written, with the value that gives the
model those files hold."""


def restore_forest(cls: type, state: dict, secret_key: Any, what: str) -> Any:
    """A fitted ``cls`` grown from ``state`` — a mapping with ``params``, ``fitted``,
    ``key_derived``, ``key_fingerprint`` and ``rows`` (``ids``, ``X``, ``y``) as a forest file
    holds them — every field checked first (a store restores through it too). Raises
    :class:`ModelFileError` naming ``what`` and the field, ValueError for a missing or wrong
    secret key."""
    estimator = _estimator(cls, state, secret_key, what)
    fitted = _fitted(state.get("fitted"), estimator, what)
    ids, X, y = _rows(state.get("rows"), fitted, what)
    k = 2 if "classes_" not in fitted else len(fitted["classes_"])
    need = fit_bytes(estimator._config(X.shape[1]), X.shape[0], X.shape[1], k)
    if need > memory_budget():
        raise ModelFileError(
            f"{what}: its forest needs at least {need} bytes, more than this process may hold"
        )
    try:
        estimator._restore(fitted, ids, [id_bytes(i) for i in ids], X, y)
    except (ValueError, TypeError, IndexError, KeyError) as err:
        raise ModelFileError(f"{what}: not a consistent forest ({err})") from None
    return estimator


def saved_state(estimator: Any) -> dict:
    """What a forest is restored from besides its rows (:func:`restore_forest`): class,
    parameters without the secret key, fitted attributes, the key's public fingerprint."""
    params = estimator.get_params(deep=False)
    secret = params.pop("secret_key")
    return {
        "class": type(estimator).__name__,
        "params": params,
        "fitted": estimator._fitted_state(),
        "key_derived": secret is None,
        "key_fingerprint": key_fingerprint(derive_key(secret, int(estimator.random_state))),
    }


def _estimator(cls: type, state: dict, secret_key: Any, what: str) -> Any:
    """An unfitted ``cls`` with the file's parameters and the key, both checked."""
    params = state.get("params")
    names = set(cls().get_params(deep=False)) - {"secret_key"}
    if isinstance(params, dict):  # files written before a parameter existed: its old value
        params = {**{k: v for k, v in PARAMS_ADDED.items() if k not in params}, **params}
    if not isinstance(params, dict) or set(params) != names:
        raise ModelFileError(f"{what}: params must name exactly {sorted(names)}")
    estimator = cls(**params, secret_key=secret_key)
    try:
        estimator._validate_params()
    except InvalidParameterError as err:
        raise ModelFileError(f"{what}: invalid parameters ({err})") from None
    derived = state.get("key_derived")
    if not isinstance(derived, bool):
        raise ModelFileError(f"{what}: key_derived must be true or false")
    if not derived and secret_key is None:
        raise ValueError(
            f"{what}: this model was fitted with a secret key, which is not in the file; "
            "pass it as secret_key"
        )
    if derived and secret_key is not None:
        raise ValueError(f"{what}: this model was fitted without a secret key; pass none")
    key = derive_key(secret_key, int(estimator.random_state))
    if key_fingerprint(key) != state.get("key_fingerprint"):
        if derived:
            raise ModelFileError(f"{what}: the key fingerprint does not match random_state")
        raise ValueError(f"{what}: wrong secret key (its fingerprint differs from the model's)")
    return estimator


def _fitted(fitted: Any, estimator: Any, what: str) -> dict:
    """The file's fitted attributes, checked: width, names, categories, classes."""
    if not isinstance(fitted, dict):
        raise ModelFileError(f"{what}: fitted must be a mapping")
    d = fitted.get("n_features_in_")
    if type(d) is not int or d < 1:
        raise ModelFileError(f"{what}: n_features_in_ must be a positive integer")
    out: dict[str, Any] = {"n_features_in_": d}
    names = fitted.get("feature_names_in_")
    if names is not None:
        if not (
            isinstance(names, list)
            and len(names) == d
            and all(type(n) is str for n in names)
            and len(set(names)) == d
        ):
            raise ModelFileError(f"{what}: feature_names_in_ must be {d} distinct strings")
        out["feature_names_in_"] = np.asarray(names, dtype=object)
    categories = fitted.get("categories_")
    if categories is not None:
        if not isinstance(categories, dict) or not all(
            isinstance(c, list) and len(set(map(repr, c))) == len(c) for c in categories.values()
        ):
            raise ModelFileError(f"{what}: categories_ must map columns to distinct categories")
        if names is not None and not set(categories) <= set(names):
            raise ModelFileError(f"{what}: categories_ names a column the model does not have")
        out["categories_"] = categories
    if hasattr(estimator, "predict_proba"):
        classes = fitted.get("classes_")
        if not (
            isinstance(classes, np.ndarray)
            and classes.ndim == 1
            and classes.size >= 2
            and classes.dtype.kind in "biufU"
            and np.array_equal(np.unique(classes), classes)
        ):
            raise ModelFileError(f"{what}: classes_ must be at least 2 sorted distinct labels")
        out["classes_"] = classes
    elif "classes_" in fitted:
        raise ModelFileError(f"{what}: a regressor has no classes_")
    return out


def _rows(rows: Any, fitted: dict, what: str) -> tuple[list, np.ndarray, np.ndarray]:
    """The file's rows, checked: unique ids, finite-or-missing float32 features of the
    fitted width, class indices of present classes (or finite float targets)."""
    if not isinstance(rows, dict) or set(rows) != {"ids", "X", "y"}:
        raise ModelFileError(f"{what}: rows must hold exactly ids, X and y")
    X, y, d = rows["X"], rows["y"], fitted["n_features_in_"]
    if not (isinstance(X, np.ndarray) and X.dtype == np.float32 and X.ndim == 2):
        raise ModelFileError(f"{what}: rows.X must be a 2-d float32 array")
    n = X.shape[0]
    if X.shape[1] != d or n < 2:
        raise ModelFileError(f"{what}: rows.X must be (n >= 2, {d}), got {X.shape}")
    if np.isinf(X).any():
        raise ModelFileError(f"{what}: rows.X holds infinity (NaN marks a missing value)")
    try:
        ids = normalize_ids(rows["ids"], n)
    except (TypeError, ValueError) as err:
        raise ModelFileError(f"{what}: rows.ids: {err}") from None
    if not isinstance(y, np.ndarray) or y.shape != (n,):
        raise ModelFileError(f"{what}: rows.y must be a 1-d array of {n} values")
    if "classes_" in fitted:
        k = len(fitted["classes_"])
        if y.dtype != np.int64 or y.min() < 0 or y.max() >= k:
            raise ModelFileError(f"{what}: rows.y must be int64 class indices in [0, {k})")
        if np.count_nonzero(np.bincount(y, minlength=k)) < k:
            raise ModelFileError(f"{what}: a class of classes_ has no row in rows.y")
    elif y.dtype != np.float64 or not np.isfinite(y).all():
        raise ModelFileError(f"{what}: rows.y must be finite float64 targets")
    return ids, np.ascontiguousarray(X), y
