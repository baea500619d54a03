"""scikit-learn estimators that forget: QSSClassifier and QSSRegressor.

The public surface validates everything at the edge — features, labels, ids, parameters —
before any state changes, so a bad request raises and leaves the model exactly as it was. The
state itself lives in a :class:`~forgetting.ensemble.QSSEngine`.

Guarantee (``mode="exact"``): after ``fit(D)`` and ``forget(R)`` and once
``wait_for_rebuilds()`` returns, predictions and ``state_digest()`` are bit-for-bit those of
``fit(D \\ R)`` with the same parameters. In ``mode="label"`` the codebook is trained on all
inputs, so ``forget`` removes a row's *label* exactly (≡ refitting with that label set to
unlabeled) but its input keeps shaping the codebook; erasing inputs needs
``forget(ids, erase_inputs=True)``, which rebuilds every instance.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .ensemble import EngineConfig, QSSEngine, canonical_params
from .receipts import Receipt
from .rows import UNLABELED
from .schema import SchemaConfig
from .schema.membership import canonical_id, derive_key, id_bytes, key_fingerprint
from .snapshots import ModelSnapshot

_MODES = ("exact", "label")
_REBUILDS = ("background", "sync")


class _QSSBase(BaseEstimator):
    """Shared parameters, validation and the forget/insert/persistence surface."""

    _task: str

    def __init__(
        self,
        *,
        mode: str = "exact",
        rho: float = 0.005,
        n_instances: int = 3,
        n_levels: int | None = None,
        n_centroids: int | None = None,
        alpha: float | str = "auto",
        shrinkage: float | str = "auto",
        base_model: Any = "auto",
        lda: bool | str = "auto",
        rebuild: str = "background",
        random_state: int = 0,
        secret_key: bytes | str | None = None,
        encoder: Any = None,
    ):
        self.mode = mode
        self.rho = rho
        self.n_instances = n_instances
        self.n_levels = n_levels
        self.n_centroids = n_centroids
        self.alpha = alpha
        self.shrinkage = shrinkage
        self.base_model = base_model
        self.lda = lda
        self.rebuild = rebuild
        self.random_state = random_state
        self.secret_key = secret_key
        self.encoder = encoder

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        """The usual repr, with ``secret_key`` masked: the key must never reach a log."""
        key = self.secret_key
        if key is None:
            return super().__repr__(N_CHAR_MAX)
        try:
            self.secret_key = "***"
            return super().__repr__(N_CHAR_MAX)
        finally:
            self.secret_key = key

    # -- validation at the edge ----------------------------------------------------------
    def _check_params(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {self.mode!r}")
        if self.rebuild not in _REBUILDS:
            raise ValueError(f"rebuild must be one of {_REBUILDS}, got {self.rebuild!r}")
        if not (isinstance(self.rho, float | int) and 0.0 < float(self.rho) <= 1.0):
            raise ValueError(f"rho must be in (0, 1], got {self.rho!r}")
        if not (isinstance(self.n_instances, int | np.integer) and self.n_instances >= 1):
            raise ValueError(f"n_instances must be a positive int, got {self.n_instances!r}")
        if self.n_levels is not None and not (
            isinstance(self.n_levels, int | np.integer) and 1 <= self.n_levels <= 16
        ):
            raise ValueError(f"n_levels must be None or an int in 1..16, got {self.n_levels!r}")
        b = self.n_centroids
        if b is not None and not (
            isinstance(b, int | np.integer) and 2 <= b <= 65536 and (b & (b - 1)) == 0
        ):
            raise ValueError(f"n_centroids must be None or a power of two in 2..65536, got {b!r}")
        for name in ("alpha", "shrinkage"):
            value = getattr(self, name)
            if value != "auto" and not (
                isinstance(value, float | int) and np.isfinite(value) and value >= 0
            ):
                raise ValueError(f"{name} must be 'auto' or a finite number ≥ 0, got {value!r}")
        if self.lda not in ("auto", True, False):
            raise ValueError(f"lda must be 'auto', True or False, got {self.lda!r}")
        if self.encoder is not None and not getattr(self.encoder, "learned", False):
            raise ValueError(
                "encoder must be a learned encoder (learned=True), trained on D° per instance; "
                "apply frozen encoders (e.g. MiniLMEncoder) to X before fit"
            )
        if not isinstance(self.random_state, int | np.integer):
            raise ValueError(
                "random_state must be an int: the model must be reproducible for its "
                "exactness guarantee"
            )

    def _check_X(self, X: Any, n_features: int | None = None) -> np.ndarray:
        try:
            X = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"X must be numeric: {err}") from err
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (rows × features), got shape {X.shape}")
        if X.shape[0] == 0:
            raise ValueError("X has no rows")
        if X.shape[1] == 0:
            raise ValueError("X has no features")
        if n_features is not None and X.shape[1] != n_features:
            raise ValueError(f"X has {X.shape[1]} features, the model was fitted with {n_features}")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or infinity")
        X = X.astype(np.float32)
        if not np.all(np.isfinite(X)):
            raise ValueError("X has values beyond float32 range")
        return np.ascontiguousarray(X)

    @staticmethod
    def _check_ids(ids: Any, n: int | None, *, allow_range: bool = False):
        if ids is None:
            if not allow_range:
                raise ValueError("ids are required")
            ids = range(n)
        if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
            raise TypeError("ids must be a sequence of ints or strings")
        ids = [canonical_id(i) for i in ids]
        if n is not None and len(ids) != n:
            raise ValueError(f"got {len(ids)} ids for {n} rows")
        if not ids:
            raise ValueError("no ids given")
        if len(set(ids)) != len(ids):
            seen, dupes = set(), []
            for i in ids:
                if i in seen:
                    dupes.append(i)
                seen.add(i)
            raise ValueError(f"duplicate ids: {dupes[:5]}")
        return ids, [id_bytes(i) for i in ids]

    def _config(self, n_outputs: int) -> EngineConfig:
        params = self.get_params(deep=False)
        params.pop("secret_key")
        schema = SchemaConfig(
            task=self._task,
            n_outputs=n_outputs,
            rho=float(self.rho),
            n_levels=None if self.n_levels is None else int(self.n_levels),
            n_centroids=None if self.n_centroids is None else int(self.n_centroids),
            lda=self.lda,
            base_model=self.base_model,
            encoder=self.encoder,
        )
        return EngineConfig(
            schema=schema,
            mode=self.mode,
            n_instances=int(self.n_instances),
            alpha=self.alpha if self.alpha == "auto" else float(self.alpha),
            shrinkage=self.shrinkage if self.shrinkage == "auto" else float(self.shrinkage),
            rebuild=self.rebuild,
            random_state=int(self.random_state),
            public_params=canonical_params({**params, "task": self._task, "n_outputs": n_outputs}),
        )

    # -- the unlearning surface ----------------------------------------------------------
    def _fit_engine(self, ids, X, targets, n_outputs: int):
        self._check_params()
        id_list, id_raw = self._check_ids(ids, X.shape[0], allow_range=True)
        key = derive_key(self.secret_key, int(self.random_state))
        engine = QSSEngine(self._config(n_outputs), key, X.shape[1], targets.dtype)
        engine.fit(id_list, id_raw, X, targets)
        old = getattr(self, "engine_", None)
        if old is not None:
            old.retire()
        self.engine_ = engine
        self.n_features_in_ = X.shape[1]
        return self

    def forget(self, ids: Sequence[Hashable], *, erase_inputs: bool = False) -> Receipt:
        """Forget rows by id and return a :class:`~forgetting.receipts.Receipt`.

        ``mode="exact"``: the rows are erased; the model equals a fit without them.
        ``mode="label"``: only the rows' labels are removed unless ``erase_inputs=True``,
        which also erases their inputs from the codebook's training pool — exact too, but it
        rebuilds every instance. Unknown ids raise KeyError, duplicates ValueError; on any
        error nothing changes.
        """
        check_is_fitted(self, "engine_")
        if erase_inputs and self.mode != "label":
            raise ValueError("erase_inputs applies to mode='label'; exact mode always erases")
        id_list, id_raw = self._check_ids(ids, None)
        engine = self.engine_
        missing = [i for i in id_list if i not in engine.rows.position]
        if missing:
            raise KeyError(
                f"unknown ids (never inserted, or already forgotten): {missing[:5]}"
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            )
        return self._forget_checked(id_list, id_raw, erase_inputs)

    def _forget_checked(self, id_list, id_raw, erase_inputs: bool) -> Receipt:
        return self.engine_.forget(id_list, id_raw, erase_inputs)

    def insert(self, X: Any, y: Any, ids: Sequence[Hashable]) -> Receipt:
        """Add labeled rows to the content (online learning); returns a receipt.

        In exact mode the result equals a fit on all rows. In label mode new inputs are encoded
        with the existing codebook but do not join its training pool.
        """
        check_is_fitted(self, "engine_")
        X = self._check_X(X, self.n_features_in_)
        targets = self._encode_targets(y, X.shape[0])
        id_list, id_raw = self._check_ids(ids, X.shape[0])
        known = [i for i in id_list if i in self.engine_.rows.position]
        if known:
            raise ValueError(f"ids already present: {known[:5]}; forget them first")
        return self.engine_.insert(id_list, id_raw, X, targets)

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Block until every background rebuild has landed (or raise its error)."""
        check_is_fitted(self, "engine_")
        self.engine_.wait_for_rebuilds(timeout)

    def state_digest(self) -> str:
        """SHA-256 (hex) of the canonical schema + content state."""
        check_is_fitted(self, "engine_")
        return self.engine_.state_digest()

    def audit_content(self) -> bool:
        """Recompute the accumulators from the stored rows and check they match, bit for bit."""
        check_is_fitted(self, "engine_")
        return self.engine_.audit_content()

    @property
    def n_rows_(self) -> int:
        check_is_fitted(self, "engine_")
        return self.engine_.rows.size

    @property
    def ids_(self) -> list:
        check_is_fitted(self, "engine_")
        return list(self.engine_.rows.ids)

    def _outputs(self, X: Any, instance: int | None = None) -> np.ndarray:
        check_is_fitted(self, "engine_")
        return self.engine_.predict_outputs(self._check_X(X, self.n_features_in_), instance)

    def snapshot(self) -> ModelSnapshot:
        """The fitted model as plain data (see :mod:`forgetting.snapshots`), after any pending
        rebuild has landed. The secret key is not part of it."""
        check_is_fitted(self, "engine_")
        engine = self.engine_
        engine.wait_for_rebuilds()
        with engine.locked():
            params = self.get_params(deep=False)
            params.pop("secret_key")
            fitted = {
                k: v
                for k, v in vars(self).items()
                if k.endswith("_") and not k.startswith("_") and k != "engine_"
            }
            return ModelSnapshot(
                estimator=type(self).__name__,
                params=params,
                fitted=fitted,
                key_fingerprint=engine.key_fingerprint(),
                key_derived=self.secret_key is None,
                engine=engine.snapshot(),
            )

    def save(self, path: str | Path) -> None:
        """Write the model atomically to ``path`` (versioned, checksummed)."""
        from .persistence import save_model

        check_is_fitted(self, "engine_")
        save_model(self, path)

    @classmethod
    def load(cls, path: str | Path, *, allow_version_mismatch: bool = False):
        """Read a model written by :meth:`save`; refuses corrupted or incompatible files.

        Raises :class:`~forgetting.persistence.ModelFileError` (a ValueError) for a file that
        is truncated, corrupted, of another format version or written by other library
        versions (unless ``allow_version_mismatch``).
        """
        from .persistence import load_model

        return load_model(cls, path, allow_version_mismatch)


class QSSClassifier(ClassifierMixin, _QSSBase):
    """Exact-unlearning classifier: g on D° plus quantized residual statistics of all rows.

    Parameters
    ----------
    mode : {"exact", "label"}
        "exact" (QSS-E): the whole schema depends on D° only, ``forget`` erases rows exactly.
        "label" (QSS-L): the codebook is trained on all inputs; ``forget`` erases labels.
    rho : float
        Fraction of rows (by keyed hash) in each instance's schema subset D°.
    n_instances : int
        p redundant instances; a request blocks only if all p are rebuilding.
    n_levels, n_centroids : int or None
        ℓ and b of the residual quantizer; None chooses from D° alone.
    alpha : float or "auto"
        Weight of the quantized correction; "auto" cross-fits it on the statistics' two folds.
    shrinkage : float or "auto"
        λ in μ = S / (n + λ); "auto" cross-fits it the same way.
    base_model : "auto" or estimator
        g: logistic regression (n° < 5000) or a one-hidden-layer MLP; or any classifier with
        ``predict_proba``.
    lda : bool or "auto"
        Append an LDA projection (fitted on D°) to the normalized features.
    rebuild : {"background", "sync"}
        Whether D° hits rebuild in a background thread or before ``forget`` returns.
    random_state : int
        Seeds and (unless ``secret_key`` is set) the membership key: a reproducible model.
    secret_key : bytes, str or None
        Key of the keyed hash that decides D°; set it in production so nobody can aim
        deletions at D°. Never shown in ``repr``.
    encoder : learned encoder or None
        An encoder f learned from data (``learned = True``, e.g.
        :class:`forgetting.encoders.LightGBMLeafContrib`). It is part of the schema: each
        instance trains its own copy on D° only and retrains it on rebuild, so exactness
        holds. Frozen encoders (identity, MiniLM) are applied to ``X`` before ``fit``.
    """

    _task = "classification"

    def fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None = None) -> QSSClassifier:
        """Fit on rows ``X`` with labels ``y`` and unique ``ids`` (default ``range(n)``).

        In label mode, ``y == -1`` marks unlabeled rows (scikit-learn's semi-supervised
        convention): they shape the codebook only.
        """
        X = self._check_X(X)
        y = self._check_y(y, X.shape[0])
        labeled = np.ones(len(y), dtype=bool)
        if self.mode == "label":
            labeled = ~_is_unlabeled(y)
        if labeled.sum() == 0:
            raise ValueError("no labeled rows")
        classes = np.unique(y[labeled])
        if classes.size < 2:
            raise ValueError(f"need at least 2 classes, got {classes.tolist()}")
        targets = np.full(len(y), UNLABELED, dtype=np.int64)
        targets[labeled] = np.searchsorted(classes, y[labeled])
        previous = getattr(self, "classes_", None)
        self.classes_ = classes
        try:
            return self._fit_engine(ids, X, targets, classes.size)
        except BaseException:
            if previous is None:
                del self.classes_
            else:
                self.classes_ = previous
            raise

    @staticmethod
    def _check_y(y: Any, n: int) -> np.ndarray:
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D, got shape {y.shape}")
        if len(y) != n:
            raise ValueError(f"X has {n} rows but y has {len(y)}")
        if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or infinity")
        if y.dtype.kind not in "biuUSO" and not (y.dtype.kind == "f" and np.all(y == np.round(y))):
            raise ValueError("classification labels must be integers or strings")
        return y

    def _encode_targets(self, y: Any, n: int) -> np.ndarray:
        y = self._check_y(y, n)
        if self.mode == "label" and np.any(_is_unlabeled(y)):
            raise ValueError("insert needs labeled rows (y == -1 is only meaningful in fit)")
        idx = np.searchsorted(self.classes_, y)
        idx = idx.clip(max=len(self.classes_) - 1)
        unseen = self.classes_[idx] != y
        if np.any(unseen):
            raise ValueError(
                f"unseen labels {np.unique(y[unseen])[:5].tolist()}; known classes are "
                f"{self.classes_.tolist()} — refit to add a class"
            )
        return idx.astype(np.int64)

    def _forget_checked(self, id_list, id_raw, erase_inputs: bool) -> Receipt:
        """Forget, refitting from the stored rows if a class would disappear entirely.

        A fit without the rows would not know that class, so the exact answer has fewer
        outputs: every instance is rebuilt on the remaining rows (synchronously).
        """
        engine = self.engine_
        rows = engine.rows
        pos = rows.positions_of(id_list)
        lost = rows.class_counts_without(pos)
        if not np.any(lost == 0):
            return engine.forget(id_list, id_raw, erase_inputs)
        if np.count_nonzero(lost) < 2:
            raise ValueError(
                "forgetting these rows would leave fewer than 2 classes; no classifier can be "
                "fitted on what remains"
            )
        return self._refit_without(id_list, id_raw, pos, erase_inputs)

    def _refit_without(self, id_list, id_raw, pos, erase_inputs: bool) -> Receipt:
        started = time.perf_counter()
        self.engine_.wait_for_rebuilds()
        rows = self.engine_.rows
        n = rows.size
        targets = rows.targets[:n].copy()
        keep = np.ones(n, dtype=bool)
        label_only = self.mode == "label" and not erase_inputs
        if label_only:
            targets[pos] = UNLABELED
        else:
            keep[pos] = False
        labels = np.where(targets >= 0, self.classes_[targets.clip(min=0)], UNLABELED)
        ids = [row_id for row_id, k in zip(rows.ids, keep, strict=True) if k]
        self.fit(rows.X[:n][keep].copy(), labels[keep], ids)
        return self.engine_.receipt(
            "forget",
            "label" if label_only else "instance",
            id_raw,
            list(range(self.n_instances)),
            started,
        )

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities: g(x) + α·correction, clipped at 0 and renormalized."""
        out = self._outputs(X)
        np.maximum(out, 0.0, out=out)
        total = out.sum(axis=1, keepdims=True)
        return out / total

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[np.argmax(self._outputs(X), axis=1)]


class QSSRegressor(RegressorMixin, _QSSBase):
    """Exact-unlearning regressor (k = 1): g on D° plus quantized residual statistics.

    Same parameters as :class:`QSSClassifier`. In label mode, ``y = NaN`` marks unlabeled
    rows in ``fit``. Targets are standardized with D°'s mean and scale inside the schema.
    """

    _task = "regression"

    def fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None = None) -> QSSRegressor:
        X = self._check_X(X)
        y = self._check_y(y, X.shape[0], allow_nan=self.mode == "label")
        if np.all(np.isnan(y)):
            raise ValueError("no labeled rows")
        return self._fit_engine(ids, X, y, 1)

    @staticmethod
    def _check_y(y: Any, n: int, allow_nan: bool) -> np.ndarray:
        try:
            y = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"regression targets must be numeric: {err}") from err
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D, got shape {y.shape}")
        if len(y) != n:
            raise ValueError(f"X has {n} rows but y has {len(y)}")
        if np.any(np.isinf(y)) or (not allow_nan and np.any(np.isnan(y))):
            raise ValueError("y contains NaN or infinity")
        return y

    def _encode_targets(self, y: Any, n: int) -> np.ndarray:
        return self._check_y(y, n, allow_nan=False)

    def predict(self, X: Any) -> np.ndarray:
        return self._outputs(X)[:, 0]


def _is_unlabeled(y: np.ndarray) -> np.ndarray:
    if y.dtype.kind in "iuf":
        return y == -1
    return np.zeros(len(y), dtype=bool)


def restore_estimator(snapshot: ModelSnapshot, *, secret_key: bytes | str | None = None):
    """Rebuild a fitted estimator from :meth:`snapshot` output: the one restore path.

    ``secret_key`` must be the key the model was fitted with (None for a derived key); a
    wrong or missing key is refused before anything is rebuilt, because it would silently
    move every row's D° membership.
    """
    classes = {"QSSClassifier": QSSClassifier, "QSSRegressor": QSSRegressor}
    if snapshot.estimator not in classes:
        raise ValueError(f"unknown estimator {snapshot.estimator!r} in snapshot")
    if snapshot.key_derived and secret_key is not None:
        raise ValueError(
            "this model's membership key is derived from random_state; do not pass a secret_key"
        )
    if not snapshot.key_derived and secret_key is None:
        raise ValueError(
            "this model was fitted with a secret membership key; pass it as secret_key"
        )
    estimator = classes[snapshot.estimator](**snapshot.params, secret_key=secret_key)
    key = derive_key(secret_key, int(estimator.random_state))
    if key_fingerprint(key) != snapshot.key_fingerprint:
        raise ValueError("secret_key does not match the key this model was fitted with")
    for name, value in snapshot.fitted.items():
        setattr(estimator, name, value)
    n_outputs = len(estimator.classes_) if hasattr(estimator, "classes_") else 1
    estimator.engine_ = QSSEngine.from_snapshot(estimator._config(n_outputs), key, snapshot.engine)
    return estimator
