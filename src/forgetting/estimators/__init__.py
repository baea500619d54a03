"""scikit-learn estimators that forget: QSSClassifier and QSSRegressor.

The public surface validates everything at the edge — parameters (``_parameter_constraints``,
checked once at the start of ``fit``), features (scikit-learn's ``validate_data``), labels and
ids — before any state changes, so a bad request raises and leaves the model exactly as it
was. The state itself lives in a :class:`~forgetting.engine.QSSEngine`; the estimator keeps
only what scikit-learn expects of a fitted estimator (``classes_``, ``n_features_in_``,
``feature_names_in_``) and hands the rest out through :meth:`snapshot`.

Guarantee (``mode="exact"``): after ``fit(D)`` and ``forget(R)`` and once
``wait_for_rebuilds()`` returns, predictions and ``state_digest()`` are bit-for-bit those of
``fit(D \\ R)`` with the same parameters. In ``mode="label"`` the codebook is trained on all
inputs, so ``forget`` removes a row's *label* exactly (≡ refitting with that label set to
unlabeled) but its input keeps shaping the codebook; erasing inputs needs
``forget(ids, erase_inputs=True)``, which rebuilds every instance. See docs/design.md.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Hashable, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from .._masked_repr import MaskedKeyRepr
from ..distributed import fit_distributed, is_distributed_input
from ..engine import EngineConfig, QSSEngine
from ..ids import listing, normalize_ids
from ..labels import UNLABELED, is_labeled, user_unlabeled
from ..parameters import PARAMETER_CONSTRAINTS, check_params, engine_config, resolve_partition
from ..persistence import load_model, save_model
from ..preprocessing.frames import wants_encoding
from ..privacy import PrivacyReport
from ..receipts import Receipt
from ..schema.membership import derive_key, id_bytes, key_fingerprint
from ..snapshots import ModelSnapshot, SnapshotError
from .tables import RawTables, _float32

_DIRECT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""Input dtypes a fitted model's predict/insert validate without scikit-learn (see _check_X)."""


class RowSource(Protocol):
    """Rows that fill the engine themselves (:meth:`_QSSBase.fit_from`): a dask collection
    whose row work runs on a cluster (forgetting.distributed) is one. The estimator asks for
    the shape, labels and ids (in this order, after validating its parameters), makes the
    engine, and hands it to :meth:`build`."""

    def shape(self) -> tuple[int, int]:
        """(rows, features); raises for an unusable collection."""

    def labels(self) -> Any:
        """The targets, in memory, as ``fit``'s ``y``."""

    def ids(self) -> Any:
        """The ids, in memory, as ``fit``'s ``ids`` (None: ``range(n)``)."""

    def feature_names(self) -> np.ndarray | None:
        """String column names (``feature_names_in_``), or None."""

    def build(self, engine: QSSEngine, ids: list, targets: np.ndarray) -> None:
        """Fill the unfitted ``engine`` with the rows (``engine.fit``), the normalized
        ``ids`` and the encoded ``targets``."""


class _QSSBase(MaskedKeyRepr, RawTables, BaseEstimator):
    """Shared parameters, validation and the forget/insert/persistence surface."""

    _task: str
    _fitted_required: tuple[str, ...] = ("n_features_in_",)
    """The fitted attributes every fitted estimator of the class has (besides ``engine_``)."""

    _parameter_constraints: dict = PARAMETER_CONSTRAINTS

    def __init__(
        self,
        *,
        mode: str = "exact",
        rho: float = 0.005,
        n_instances: int = 3,
        min_schema_rows: int | str = "auto",
        n_levels: int | None = None,
        n_centroids: int | None = None,
        partition: str = "auto",
        head: str = "auto",
        alpha: float | str = "auto",
        shrinkage: float | str = "auto",
        base_model: Any = "auto",
        lda: bool | str = "auto",
        rebuild: str = "background",
        random_state: int | None = 0,
        secret_key: bytes | str | None = None,
        encoder: Any = None,
        epsilon: float | None = None,
        delta: float | None = None,
        clip: float | None = None,
    ):
        self.mode = mode
        self.rho = rho
        self.n_instances = n_instances
        self.min_schema_rows = min_schema_rows
        self.n_levels = n_levels
        self.n_centroids = n_centroids
        self.partition = partition
        self.head = head
        self.alpha = alpha
        self.shrinkage = shrinkage
        self.base_model = base_model
        self.lda = lda
        self.rebuild = rebuild
        self.random_state = random_state
        self.secret_key = secret_key
        self.encoder = encoder
        self.epsilon = epsilon
        self.delta = delta
        self.clip = clip

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        tags.non_deterministic = False
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "engine_")

    # -- validation at the edge ----------------------------------------------------------
    def _check_params(self) -> None:
        self._validate_params()
        check_params(self.get_params(deep=False), self._task)

    def _validate_X(self, X: Any, *, reset: bool) -> np.ndarray:
        """Dense, finite, float32 features (the precision rows are stored and hashed in)."""
        X = validate_data(
            self, X, reset=reset, dtype=np.float64, ensure_min_samples=1, ensure_all_finite=True
        )
        X32 = X.astype(np.float32)
        if not np.all(np.isfinite(X32)):
            raise ValueError("X has values beyond float32 range")
        return np.ascontiguousarray(X32)

    def _check_fitted(self) -> None:
        """check_is_fitted, skipped once fitted: scikit-learn's check reads the estimator's
        tags on every call, a noticeable share of a one-row forget and its prediction."""
        if "engine_" not in self.__dict__:
            check_is_fitted(self)

    def _check_X(self, X: Any, n_features: int | None = None) -> np.ndarray:
        """Features for a fitted model (predict, insert): validated against the fit.

        A plain finite float ndarray of the fitted width — what a service or a pipeline passes
        — takes a direct path: scikit-learn's ``validate_data`` (tags, checks, copies) is a
        large share of a one-row prediction. The result is the array ``validate_data`` would
        give (float64, then float32: for float32 input the round trip is the identity);
        anything else, including every input that is invalid, goes through ``validate_data``
        and gets its messages.
        """
        self._check_fitted()
        if "table_" in self.__dict__:
            return _float32(self.table_.encode(X))
        if (
            type(X) is np.ndarray
            and X.ndim == 2
            and X.dtype in _DIRECT_DTYPES
            and X.shape[0] >= 1
            and X.shape[1] == self.n_features_in_
            and "feature_names_in_" not in self.__dict__
        ):
            X32 = X.astype(np.float32)
            if np.isfinite(X32).all():
                return X32  # astype copies: C-contiguous, never the caller's array
        return self._validate_X(X, reset=False)

    @staticmethod
    def _check_ids(ids: Any, n: int | None, *, allow_range: bool = False):
        if ids is None and not allow_range:
            raise ValueError("ids are required")
        id_list = normalize_ids(ids, n)
        if not id_list:
            raise ValueError("no ids given")
        return id_list, [id_bytes(i) for i in id_list]

    def _partition(self) -> str:
        """The partition ``partition="auto"`` resolves to (forgetting.parameters)."""
        return resolve_partition(self.get_params(deep=False))

    def _config(self, n_outputs: int) -> EngineConfig:
        """Resolve the parameters once into the configuration the engine and schemas own."""
        params = {**self.get_params(deep=False), "random_state": self._seed()}
        return engine_config(params, self._task, n_outputs)

    def _draw_seed(self) -> None:
        """At fit: ``random_state_`` is ``random_state``, or with ``random_state=None`` a seed
        drawn now and kept (saved with the model), so the fitted model stays a function of
        its rows and stored configuration; forgets and rebuilds reuse it."""
        seed = self.random_state
        self.random_state_ = secrets.randbelow(2**31 - 1) if seed is None else int(seed)

    def _seed(self) -> int:
        """The seed of the fitted model (``random_state_``), else ``random_state``'s."""
        seed = self.__dict__.get("random_state_")
        if seed is None:
            if self.random_state is None:
                raise ValueError("random_state=None draws its seed at fit; fit the model first")
            seed = self.random_state
        return int(seed)

    # -- the unlearning surface ----------------------------------------------------------
    def _fit_engine(self, ids, X, targets, n_outputs: int):
        id_list, id_raw = self._check_ids(ids, X.shape[0], allow_range=True)
        engine = self._new_engine(n_outputs, X.shape[1], targets.dtype)
        engine.fit(id_list, id_raw, X, targets)
        self._install_engine(engine)
        return self

    def _new_engine(self, n_outputs: int, n_features: int, dtype: np.dtype) -> QSSEngine:
        key = derive_key(self.secret_key, self._seed())
        return QSSEngine(self._config(n_outputs), key, n_features, dtype)

    def _install_engine(self, engine: QSSEngine) -> None:
        """Serve ``engine`` from now on; the previous one (a refit) stops its rebuilds."""
        old = getattr(self, "engine_", None)
        if old is not None:
            old.retire()
        self.engine_ = engine

    def fit_from(self, source: RowSource) -> Any:
        """Fit on rows that ``source`` feeds to the engine itself (forgetting.distributed
        fits a dask collection this way, its row work on a cluster).

        The estimator validates its parameters, the labels and the ids exactly as :meth:`fit`
        does, sets the fitted attributes and makes the engine; ``source.build`` fills it.
        The result equals ``fit`` on the same rows, bit for bit, when the source computes the
        rows' work as the engine would. On any error the previous fit stays.
        """
        self._check_params()

        def run():
            self._draw_seed()
            n, d = source.shape()
            targets, n_outputs = self._fit_targets(source.labels(), n)
            id_values = source.ids()
            id_list = normalize_ids(id_values, n)
            self.n_features_in_ = d
            self.__dict__.pop("table_", None)
            names = source.feature_names()
            if names is not None:
                self.feature_names_in_ = names
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            engine = self._new_engine(n_outputs, d, targets.dtype)
            source.build(engine, id_list, targets)
            self._install_engine(engine)
            return self

        return self._fit_atomically(run)

    def _fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None):
        """``fit`` for both tasks: a dask input goes to the cluster, a raw table through the
        encoding, an array straight to the engine; all or nothing (``_fit_atomically``)."""
        if is_distributed_input(X):
            return fit_distributed(self, X, y, ids)
        self._check_params()

        def run():
            self._draw_seed()
            if wants_encoding(X):
                return self._fit_frame(X, y, ids)
            self.__dict__.pop("table_", None)
            X_valid = self._validate_X(X, reset=True)
            targets, n_outputs = self._fit_targets(y, X_valid.shape[0])
            return self._fit_engine(ids, X_valid, targets, n_outputs)

        return self._fit_atomically(run)

    def _fit_atomically(self, fit) -> Any:
        """Run ``fit``; if it raises, put every fitted attribute back as it was."""
        saved = {k: v for k, v in vars(self).items() if k.endswith("_")}
        try:
            return fit()
        except BaseException:
            for k in [k for k in vars(self) if k.endswith("_")]:
                delattr(self, k)
            for k, v in saved.items():
                setattr(self, k, v)
            raise

    def forget(self, ids: Sequence[Hashable], *, erase_inputs: bool = False) -> Receipt:
        """Forget rows by id and return a :class:`~forgetting.receipts.Receipt`.

        ``mode="exact"``: the rows are erased; the model equals a fit without them.
        ``mode="label"``: only the rows' labels are removed unless ``erase_inputs=True``,
        which also erases their inputs from the codebook's training pool — exact too, but it
        rebuilds every instance. Unknown ids raise KeyError, duplicates ValueError; on any
        error nothing changes.
        """
        self._check_fitted()
        if erase_inputs and self.mode != "label":
            raise ValueError("erase_inputs applies to mode='label'; exact mode always erases")
        id_list, id_raw = self._check_ids(ids, None)
        if "table_" in self.__dict__:
            with self.table_.lock:
                return self._forget_frame(id_list, id_raw)
        try:
            return self._forget_checked(id_list, id_raw, erase_inputs)
        except KeyError:
            # an unknown id fails the engine's row lookup before anything changes; which ids
            # are unknown is worked out here, on the error path only, so a forget looks its
            # ids up once
            missing = self.engine_.unknown_ids(id_list)
            if missing:
                raise KeyError(
                    f"unknown ids (never inserted, or already forgotten): {listing(missing)}"
                ) from None
            raise

    def _forget_checked(self, id_list, id_raw, erase_inputs: bool) -> Receipt:
        return self.engine_.forget(id_list, id_raw, erase_inputs)

    @staticmethod
    def _refuse_fit_params(fit_params: dict) -> None:
        """``fit`` takes no weights: every statistic is a sum over rows that a forget
        subtracts one row at a time, and exactness is checked against a fit on the set of
        rows left. A weighted row would need its weight in every sum, D° draw and refit; to
        weight a row, give it copies under distinct ids (a forget names each copy)."""
        if "sample_weight" in fit_params:
            if fit_params["sample_weight"] is None:
                fit_params = {k: v for k, v in fit_params.items() if k != "sample_weight"}
            else:
                raise ValueError(
                    "sample_weight is not supported: QSS statistics are unweighted sums over "
                    "rows; repeat a row under distinct ids to weight it (docs/design.md)"
                )
        if fit_params:
            raise TypeError(f"fit() got unexpected keyword arguments {sorted(fit_params)}")

    def _partial_fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None):
        """The first call fits; later ones insert. Without ``ids`` the rows get the next
        integers after the largest integer id held (``fit``'s default is ``range(n)``), so
        chunks given without ids number their rows as one fit on all of them would."""
        if not self.__sklearn_is_fitted__():
            return self.fit(X, y, ids)
        if ids is None:
            n = self._check_X(X).shape[0]
            held = [i for i in self.ids_ if isinstance(i, int)]
            start = max(held) + 1 if held else 0
            ids = range(start, start + n)
        self.insert(X, y, ids)
        return self

    def insert(self, X: Any, y: Any, ids: Sequence[Hashable]) -> Receipt:
        """Add labeled rows to the content (online learning); returns a receipt.

        In exact mode the result equals a fit on all rows. In label mode new inputs are encoded
        with the existing codebook but do not join its training pool. A classifier's label is
        one of ``classes_`` when it is equal in value, as in scikit-learn's ``partial_fit``:
        ``1.0`` and ``True`` are class ``1``; ``1.5``, ``"1"`` (for integer classes) or a new
        class are refused (refit to add a class). The HTTP service is stricter: its JSON
        labels must have the classes' type. A model fitted on a DataFrame takes a DataFrame
        with the fitted columns; a new category joins the encoding (the model refits).
        """
        if "table_" in self.__dict__:
            with self.table_.lock:
                return self._insert_frame(X, y, ids)
        X = self._check_X(X)
        targets = self._encode_targets(y, X.shape[0])
        id_list, id_raw = self._check_ids(ids, X.shape[0])
        known = self.engine_.known_ids(id_list)
        if known:
            raise ValueError(f"ids already present: {listing(known)}; forget them first")
        return self.engine_.insert(id_list, id_raw, X, targets)

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Block until every background rebuild has landed (or raise its error)."""
        check_is_fitted(self)
        self.engine_.wait_for_rebuilds(timeout)

    def state_digest(self) -> str:
        """SHA-256 (hex) of the canonical schema + content state (a model fitted on a raw
        DataFrame: with its table encoding's state)."""
        check_is_fitted(self)
        if "table_" in self.__dict__:
            return self._frame_digest(self.engine_.state_digest())
        return self.engine_.state_digest()

    def audit_content(self) -> bool:
        """Recompute the accumulators from the stored rows and check they match, bit for bit."""
        check_is_fitted(self)
        return self.engine_.audit_content()

    @property
    def n_rows_(self) -> int:
        """Rows currently held."""
        check_is_fitted(self)
        return self.engine_.n_rows

    @property
    def ids_(self) -> list:
        """Ids of the rows currently held, in storage order."""
        check_is_fitted(self)
        return self.engine_.ids()

    @property
    def effective_rho_(self) -> float:
        """Mean over instances of |D°_r| / labeled rows: the probability that forgetting a
        random row hits an instance's D° (ρ on large data; more while D° keeps its minimum
        of ``min_schema_rows`` rows). Receipts carry it too."""
        check_is_fitted(self)
        return self.engine_.effective_rho()

    @property
    def corrections_(self) -> list[str | None]:
        """Per instance, the correction it serves on top of g: "head" (exact ridge head on all
        rows), "tables" (flat partition), "codebook" (RQ), or None while rebuilding."""
        check_is_fitted(self)
        return self.engine_.corrections()

    @property
    def privacy_(self) -> PrivacyReport:
        """mode="dp": ε, δ, σ, sensitivity, the number of distinct releases so far and the
        ε they compose to (see docs/privacy.md). Each release is (ε, δ)-label-DP on its own;
        a stream of releases around deletions composes."""
        check_is_fitted(self)
        ledger = self.engine_.privacy
        if ledger is None:
            raise AttributeError("privacy_ is defined for mode='dp' only")
        return ledger.report()

    def _outputs(self, X: Any, instance: int | None = None) -> np.ndarray:
        if "table_" in self.__dict__:
            with self.table_.lock:
                return self.engine_.predict_outputs(self._check_X(X), instance)
        X = self._check_X(X)
        return self.engine_.predict_outputs(X, instance)

    # -- snapshots and files ---------------------------------------------------------------
    def snapshot(self) -> ModelSnapshot:
        """The fitted model as plain data (see :mod:`forgetting.snapshots`), after any pending
        rebuild has landed. The secret key is not part of it."""
        check_is_fitted(self)
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
            engine_snapshot = engine.snapshot()
            if "table_" in fitted:  # the raw rows, in the engine's row order
                fitted["table_"] = self.table_.stored(engine_snapshot.rows.ids)
            return ModelSnapshot(
                estimator=type(self).__name__,
                params=params,
                fitted=fitted,
                key_fingerprint=engine.key_fingerprint(),
                key_derived=self.secret_key is None,
                engine=engine_snapshot,
            )

    def save(self, path: str | Path, *, store_key: bool = False) -> None:
        """Write the model atomically to ``path`` (arrays + JSON, checksummed; no pickles).

        A secret ``secret_key`` is not written unless ``store_key=True``: pass it to
        :meth:`load` instead.
        """
        check_is_fitted(self)
        save_model(self, path, store_key=store_key)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        allow_version_mismatch: bool = False,
        secret_key: bytes | str | None = None,
    ):
        """Read a model written by :meth:`save`; refuses corrupted or incompatible files.

        Raises :class:`~forgetting.persistence.ModelFileError` (a ValueError) for a file that
        is truncated, corrupted, of another format version or written by other library
        versions (unless ``allow_version_mismatch``).
        """
        return load_model(cls, path, allow_version_mismatch, secret_key=secret_key)

    @classmethod
    def from_snapshot(cls, snapshot: ModelSnapshot, *, secret_key: bytes | str | None = None):
        """Rebuild a fitted estimator from :meth:`snapshot` output: the one restore path
        (files, stores). ``snapshot`` must be of this class.

        ``secret_key`` must be the key the model was fitted with (None for a derived key); a
        wrong or missing key is refused before anything is rebuilt, because it would silently
        move every row's D° membership.

        A snapshot read from a file or a store is checked whole before anything runs: its
        parameters go through the same validation as ``fit``'s, its fitted attributes are
        those of this class only (:meth:`_checked_fitted`), and the engine checks the rest
        (``forgetting.engine.validation``); an inconsistent one raises
        :class:`~forgetting.snapshots.SnapshotError` naming the field.
        """
        if not isinstance(snapshot, ModelSnapshot):
            raise SnapshotError(f"expected a model snapshot, found {type(snapshot).__name__}")
        if snapshot.estimator != cls.__name__:
            raise ValueError(f"the snapshot holds a {snapshot.estimator!r}, not a {cls.__name__}")
        if snapshot.key_derived and secret_key is not None:
            raise ValueError(
                "this model's membership key is derived from random_state; do not pass a secret_key"
            )
        if not snapshot.key_derived and secret_key is None:
            raise ValueError(
                "this model was fitted with a secret membership key; pass it as secret_key"
            )
        estimator = cls(**cls._checked_params(snapshot.params), secret_key=secret_key)
        try:
            estimator._check_params()
        except (ValueError, TypeError) as err:
            raise SnapshotError(f"params: {err}") from None
        rows = getattr(snapshot.engine, "rows", None)
        fitted = cls._checked_fitted(snapshot.fitted, rows)
        seed = fitted.get("random_state_", estimator.random_state)
        if seed is None or (estimator.random_state is not None and seed != estimator.random_state):
            raise SnapshotError(
                f"fitted: random_state_ {seed!r:.40} does not fit random_state "
                f"{estimator.random_state!r:.40}"
            )
        key = derive_key(secret_key, int(seed))
        if key_fingerprint(key) != snapshot.key_fingerprint:
            raise ValueError("secret_key does not match the key this model was fitted with")
        for name, value in fitted.items():
            setattr(estimator, name, value)
        estimator.random_state_ = int(seed)
        n_outputs = len(estimator.classes_) if hasattr(estimator, "classes_") else 1
        config = estimator._config(n_outputs)
        engine_snapshot = snapshot.engine
        if "table_" in snapshot.fitted:
            estimator.table_, encoded = estimator._restored_table(
                snapshot.fitted["table_"], rows, key
            )
            if rows.X is None:  # a store keeps the raw rows only: the encoding is refitted
                rows = dataclasses.replace(rows, X=encoded)
                engine_snapshot = dataclasses.replace(engine_snapshot, rows=rows)
        estimator.engine_ = QSSEngine.from_snapshot(config, key, engine_snapshot)
        return estimator

    @classmethod
    def _checked_params(cls, params: Any) -> dict:
        """A snapshot's parameters: exactly this class's, less ``secret_key``."""
        names = set(cls._get_param_names()) - {"secret_key"}
        if not isinstance(params, dict) or set(params) != names:
            found = sorted(map(str, params)) if isinstance(params, dict) else type(params).__name__
            raise SnapshotError(f"params: expected {sorted(names)}, found {str(found)[:200]}")
        return params

    @classmethod
    def _checked_fitted(cls, fitted: Any, rows: Any) -> dict:
        """A snapshot's fitted attributes: only those ``fit`` sets (``n_features_in_``, the
        rows' width; ``classes_``, a classifier's sorted unique labels;
        ``feature_names_in_``, one string per feature), never anything else (an attribute
        from a file must not shadow a method)."""
        allowed = {"n_features_in_", "feature_names_in_", "table_", "random_state_"}
        allowed |= set(cls._fitted_required)
        if not isinstance(fitted, dict) or not set(cls._fitted_required) <= set(fitted):
            raise SnapshotError(f"fitted: expected {sorted(allowed)}")
        unknown = [str(name)[:40] for name in fitted if name not in allowed]
        if unknown:
            raise SnapshotError(f"fitted: attributes {unknown} are not a fitted estimator's")
        d = fitted["n_features_in_"]
        width = rows.X.shape[1] if isinstance(getattr(rows, "X", None), np.ndarray) else None
        if "table_" in fitted:  # raw columns; the encoded width is checked on restore
            names = fitted["table_"].get("names") if isinstance(fitted["table_"], dict) else None
            width = len(names) if isinstance(names, list) else None
            if "feature_names_in_" not in fitted:
                raise SnapshotError("fitted: a table model has feature_names_in_")
        if isinstance(d, bool | np.bool_) or not isinstance(d, Integral) or int(d) != width:
            raise SnapshotError(f"fitted: n_features_in_ {d!r:.40}, but the rows have {width}")
        names = fitted.get("feature_names_in_")
        if names is not None and not (
            isinstance(names, np.ndarray)
            and names.shape == (int(d),)
            and all(type(n) is str for n in names.tolist())
        ):
            raise SnapshotError("fitted: feature_names_in_ is not one string per feature")
        if "classes_" in fitted:
            _check_classes(fitted["classes_"])
        seed = fitted.get("random_state_", 0)
        if isinstance(seed, bool | np.bool_) or not isinstance(seed, Integral):
            raise SnapshotError(f"fitted: random_state_ {seed!r:.40} is not an integer")
        return fitted


class QSSClassifier(ClassifierMixin, _QSSBase):
    """Exact-unlearning classifier: g on D° plus quantized residual statistics of all rows.

    Parameters
    ----------
    mode : {"exact", "label", "dp"}
        "exact" (QSS-E): the whole schema depends on D° only, ``forget`` erases rows exactly.
        "label" (QSS-L): the codebook is trained on all inputs; ``forget`` erases labels.
        "dp" (QSS-DP): exact mode whose released statistics carry keyed Gaussian noise for
        (``epsilon``, ``delta``)-label-DP of the rows outside D°; needs ``secret_key``.
        Still exact: ``forget`` equals a refit bit for bit (docs/privacy.md).
    rho : float
        Fraction of rows (by keyed hash) in each instance's schema subset D°.
    n_instances : int
        p redundant instances; a request blocks only if all p are rebuilding.
    min_schema_rows : int or "auto"
        D° keeps at least this many labeled rows (the lowest keyed draws), so small data sets
        fit; "auto" is max(50, 5 · classes). D° stays a function of the set of rows, so
        exactness holds; the price is a higher ``effective_rho_`` on small data.
    n_levels, n_centroids : int or None
        ℓ and b of the residual quantizer; None chooses from D° alone.
    partition : {"auto", "rq", "trees", "hyperplanes"}
        How rows are cut into cells. "auto": "trees" in exact mode, "rq" in label and dp
        modes or when ``n_levels``/``n_centroids`` are set (chosen by
        benchmarks/results/partitions.md). "rq": the paper's residual-quantization codebook (k-means
        on D° in exact mode). "trees": 64 random oblivious trees whose thresholds are values of
        random D° rows; "hyperplanes": 64 random hyperplane hashes of D°-standardized
        features. The flat partitions need few D° rows, are far more accurate in exact mode
        on many classes, and a forget touches only one cell per table: nothing is
        re-materialized before the next prediction. See docs/partitions.md.
    head : {"auto", "ridge", "shared-ridge", "shared-rf", "newton", "none"}
        "ridge": each instance also keeps an exact ridge regression of g's residuals on φ(x)
        over *all* rows, from int64 sums Σvvᵀ and Σvrᵀ (exact under deletion), and serves it
        instead of the tables when its out-of-fold gain is larger (g is fit on D° alone; the
        head is what lifts image and text features to SISA's accuracy). Costs (d + 1)²
        integers per instance and one (d + 1)² factorization on the first prediction after
        a change. "newton" (classification): one Newton step of one-vs-rest logistic
        regression started from g's probabilities, also from exact integer sums (per class
        Σ p_c(1 − p_c) v vᵀ), served as softmax(log g + δᵀv) — closer to SISA's logistic
        shards on image features (benchmarks/results/heads.md), at k more
        (d + 1)² sums and factorizations per instance. "shared-ridge": the ridge head on the
        L2-normalized input x itself instead of φ(x) (no D°-fitted LDA directions), so every
        instance holds the same Gram matrix and the p instances share one factorization and
        one stacked solve after a change (the fastest head to forget and serve; the same
        accuracy as "ridge" on the paper benchmark, benchmarks/results/heads.md). With a
        learned encoder its input is the instance's f(x): per-instance Grams again.
        "shared-rf": "shared-ridge" on [x̂, ψ(x̂)], x̂ the normalized input and ψ E fixed,
        data-free random ReLU features (E = 64·⌈d/64⌉, at most 512): still one Gram for all
        instances, closer to SISA on image features (docs/partitions.md) at a (d + E + 1)²
        factorization per change; features as given only (refused with an encoder). "auto":
        with a flat partition outside mode="dp", "shared-rf" for classification and
        "shared-ridge" for regression ("ridge" with a learned encoder); "none": tables only.
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
    random_state : int or None
        Seeds and (unless ``secret_key`` is set) the membership key: a reproducible model.
        None draws a seed at each ``fit`` and keeps it in ``random_state_`` (saved with the
        model): forgets, rebuilds and reloads use it, so ``forget`` still equals a fit
        without the rows *with* ``random_state=model.random_state_``.
    secret_key : bytes, str or None
        Key of the keyed hash that decides D°; set it in production so nobody can aim
        deletions at D°. Never shown in ``repr``, never written to files unless asked.
    encoder : learned encoder or None
        An encoder f learned from data (``learned = True``, e.g.
        :class:`forgetting.encoders.LightGBMLeafContrib`). It is part of the schema: each
        instance trains its own copy on D° only and retrains it on rebuild, so exactness
        holds. Frozen encoders (identity, MiniLM) are applied to ``X`` before ``fit``.
    epsilon, delta : float or None
        mode="dp": the privacy of each release (ε > 0, 0 < δ < 1); ``privacy_`` reports it
        and its composition over releases.
    clip : float or None
        mode="dp", regressor only: residuals (in D°-standardized units) are clipped to ±clip,
        which bounds one label's influence.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_digits
    >>> from forgetting import QSSClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> model = QSSClassifier(rho=0.05, rebuild="sync").fit(X, y, ids=range(len(y)))
    >>> receipt = model.forget([3, 14, 15])
    >>> refit = QSSClassifier(rho=0.05).fit(
    ...     np.delete(X, [3, 14, 15], axis=0), np.delete(y, [3, 14, 15]),
    ...     ids=[i for i in range(len(y)) if i not in (3, 14, 15)])
    >>> bool(np.array_equal(model.predict_proba(X), refit.predict_proba(X)))
    True
    >>> model.state_digest() == refit.state_digest()
    True
    """

    _task = "classification"
    _fitted_required = ("n_features_in_", "classes_")

    def fit(
        self, X: Any, y: Any, ids: Sequence[Hashable] | None = None, **fit_params: Any
    ) -> QSSClassifier:
        """Fit on rows ``X`` with labels ``y`` and unique ``ids`` (default ``range(n)``).

        In label mode, ``y == -1`` marks unlabeled rows (scikit-learn's semi-supervised
        convention, numeric labels only): they shape the codebook only. A dask array or
        DataFrame ``X`` is fitted on the active dask.distributed client (bit for bit the
        in-memory fit; ``pip install "forgetting[distributed]"``, docs/distributed.md).
        ``sample_weight`` is refused (:meth:`_refuse_fit_params` says why).
        """
        self._refuse_fit_params(fit_params)
        return self._fit(X, y, ids)

    def partial_fit(
        self,
        X: Any,
        y: Any,
        ids: Sequence[Hashable] | None = None,
        classes: Any = None,
    ) -> QSSClassifier:
        """scikit-learn's spelling of :meth:`insert`: the first call fits (``classes``, if
        given, must be exactly the labels of its rows: the classes are fixed then, as
        scikit-learn fixes them at the first ``partial_fit``); later calls insert the rows
        under new ``ids`` (default: the integers after the largest integer id held) and
        return the estimator (:meth:`insert` returns the receipt)."""
        if classes is not None:
            wanted = np.unique(np.asarray(classes))
            if "classes_" in self.__dict__:
                known = self.classes_
            else:
                known = np.unique(self._check_y(y, len(y)))
            if not np.array_equal(wanted, known):
                raise ValueError(
                    f"classes {wanted.tolist()[:20]} differ from the model's "
                    f"{known.tolist()[:20]}: the first partial_fit must hold a row of every "
                    "class, and later calls cannot add one (refit to add a class)"
                )
        return self._partial_fit(X, y, ids)

    def _fit_targets(self, y: Any, n: int) -> tuple[np.ndarray, int]:
        """``fit``'s labels as class indices (UNLABELED = none) and the number of classes;
        sets ``classes_``."""
        y_valid = self._check_y(y, n)
        labeled = np.ones(len(y_valid), dtype=bool)
        if self.mode == "label":
            labeled = ~user_unlabeled(y_valid)
        if labeled.sum() == 0:
            raise ValueError("no labeled rows")
        classes = np.unique(y_valid[labeled])
        targets = np.full(len(y_valid), UNLABELED, dtype=np.int64)
        targets[labeled] = np.searchsorted(classes, y_valid[labeled])
        self._set_classes(classes)
        return targets, classes.size

    def _set_classes(self, classes: np.ndarray) -> None:
        if classes.size < 2:
            raise ValueError(
                f"need at least 2 classes, got 1 class ({classes.tolist()}): a classifier "
                "cannot be fitted on one class"
            )
        self.classes_ = classes

    def _fit_indices(self, X: np.ndarray, targets: np.ndarray, classes: np.ndarray, ids):
        """Fit on validated rows whose labels are already class indices (UNLABELED = none)."""
        self._set_classes(classes)
        return self._fit_engine(ids, X, targets, classes.size)

    def _row_labels(self, y: Any) -> np.ndarray:
        """The labels of validated ``y`` as a table model keeps them with its raw rows."""
        return column_or_1d(y)

    def _check_y(self, y: Any, n: int) -> np.ndarray:
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        y = column_or_1d(y, warn=True)
        if len(y) != n:
            raise ValueError(
                f"Found input variables with inconsistent numbers of samples: [{n}, {len(y)}]"
            )
        check_classification_targets(y)
        return y

    def _encode_targets(self, y: Any, n: int) -> np.ndarray:
        y = self._check_y(y, n)
        if self.mode == "label" and np.any(user_unlabeled(y)):
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
        remaining = engine.class_counts_without(id_list)
        if not np.any(remaining == 0):
            return engine.forget(id_list, id_raw, erase_inputs)
        if np.count_nonzero(remaining) < 2:
            raise ValueError(
                "forgetting these rows would leave fewer than 2 classes; no classifier can be "
                "fitted on what remains"
            )
        return self._refit_without(id_list, id_raw, erase_inputs)

    def _refit_without(self, id_list, id_raw, erase_inputs: bool) -> Receipt:
        """Refit on what remains, with the classes that remain (string or integer labels)."""
        started = time.perf_counter()
        self.engine_.wait_for_rebuilds()
        rows = self.engine_.snapshot().rows
        gone = set(id_list)
        targets = rows.targets.copy()
        label_only = self.mode == "label" and not erase_inputs
        hit = np.fromiter((i in gone for i in rows.ids), dtype=bool, count=len(rows.ids))
        keep = np.ones(len(rows.ids), dtype=bool)
        if label_only:
            targets[hit] = UNLABELED
        else:
            keep = ~hit
        targets = targets[keep]
        present = np.unique(targets[is_labeled(targets)])
        remap = np.full(len(self.classes_), UNLABELED, dtype=np.int64)
        remap[present] = np.arange(present.size)
        new_targets = np.where(is_labeled(targets), remap[targets.clip(min=0)], UNLABELED)
        classes = self.classes_[present]
        ids = [row_id for row_id, k in zip(rows.ids, keep, strict=True) if k]
        X = rows.X[keep]
        self._fit_atomically(lambda: self._fit_indices(X, new_targets, classes, ids))
        return self.engine_.receipt(
            "forget",
            "label" if label_only else "instance",
            id_raw,
            list(range(self.n_instances)),
            started,
        )

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities: g(x) + α·correction, clipped at 0 and renormalized.

        A row whose outputs are all ≤ 0 (possible when the correction outweighs g, e.g. under
        mode="dp" noise) gets probability 1 on its largest output — the class ``predict``
        returns — rather than 0/0.
        """
        raw = self._outputs(X)
        out = np.maximum(raw, 0.0)
        total = out.sum(axis=1, keepdims=True)
        empty = total[:, 0] <= 0.0
        if np.any(empty):
            out[empty] = 0.0
            out[empty, np.argmax(raw[empty], axis=1)] = 1.0
            total[empty] = 1.0
        return out / total

    def predict(self, X: Any) -> np.ndarray:
        """The class with the largest output (ties: the first class in ``classes_``).

        The labels alone: after a change, an exact head that serves need not be solved when
        its tracked weights make every row's winner certain (QSSEngine.certified_labels —
        the same labels, bit for bit); :meth:`predict_proba` always takes the exact route."""
        if "table_" in self.__dict__:
            with self.table_.lock:
                labels = self._labels(self._check_X(X))
        else:
            labels = self._labels(self._check_X(X))
        return self.classes_[labels]

    def _labels(self, X: np.ndarray) -> np.ndarray:
        labels = self.engine_.certified_labels(X)
        if labels is None:
            labels = np.argmax(self.engine_.predict_outputs(X), axis=1)
        return labels


class QSSRegressor(RegressorMixin, _QSSBase):
    """Exact-unlearning regressor (k = 1): g on D° plus quantized residual statistics.

    Same parameters as :class:`QSSClassifier` ("auto" ``min_schema_rows`` is 50). In label
    mode, ``y = NaN`` marks unlabeled rows in ``fit``. Targets are standardized with D°'s mean
    and scale inside the schema.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_diabetes
    >>> from forgetting import QSSRegressor
    >>> X, y = load_diabetes(return_X_y=True)
    >>> model = QSSRegressor(rho=0.2, rebuild="sync").fit(X, y)
    >>> model.forget([0, 1]).scope
    'instance'
    >>> refit = QSSRegressor(rho=0.2).fit(X[2:], y[2:], ids=range(2, len(y)))
    >>> bool(np.array_equal(model.predict(X), refit.predict(X)))
    True
    """

    _task = "regression"

    def fit(
        self, X: Any, y: Any, ids: Sequence[Hashable] | None = None, **fit_params: Any
    ) -> QSSRegressor:
        """Fit on rows ``X`` with targets ``y`` (NaN = unlabeled, label mode) and ``ids``;
        a dask ``X`` is fitted on the active dask.distributed client (see QSSClassifier.fit).
        ``sample_weight`` is refused (:meth:`_refuse_fit_params` says why)."""
        self._refuse_fit_params(fit_params)
        return self._fit(X, y, ids)

    def partial_fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None = None) -> QSSRegressor:
        """scikit-learn's spelling of :meth:`insert`: the first call fits, later calls insert
        the rows under new ``ids`` (default: the integers after the largest integer id held)
        and return the estimator."""
        return self._partial_fit(X, y, ids)

    def _fit_targets(self, y: Any, n: int) -> tuple[np.ndarray, int]:
        """``fit``'s targets (NaN = unlabeled, label mode) and the number of outputs (1)."""
        y_valid = self._check_y(y, n, allow_nan=self.mode == "label")
        n_labeled = int(np.count_nonzero(~np.isnan(y_valid)))
        if n_labeled < 2:
            raise ValueError(
                f"got n_samples={n_labeled} labeled row(s); a regressor needs at least 2"
            )
        return y_valid, 1

    def _row_labels(self, y: Any) -> np.ndarray:
        """The targets of validated ``y`` as a table model keeps them with its raw rows."""
        return np.asarray(column_or_1d(y), dtype=np.float64)

    def _check_y(self, y: Any, n: int, allow_nan: bool) -> np.ndarray:
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        y = column_or_1d(y, warn=True)
        if np.iscomplexobj(y):
            raise ValueError("Complex data not supported: regression targets must be real")
        try:
            y = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"regression targets must be numeric: {err}") from err
        if len(y) != n:
            raise ValueError(
                f"Found input variables with inconsistent numbers of samples: [{n}, {len(y)}]"
            )
        if np.any(np.isinf(y)) or (not allow_nan and np.any(np.isnan(y))):
            raise ValueError("y contains NaN or infinity")
        return y

    def _encode_targets(self, y: Any, n: int) -> np.ndarray:
        return self._check_y(y, n, allow_nan=False)

    def predict(self, X: Any) -> np.ndarray:
        return self._outputs(X)[:, 0]


def _check_classes(classes: Any) -> None:
    """``classes_`` as ``fit`` sets it (``np.unique`` of the labels): at least two, strictly
    increasing — ``searchsorted`` encodes labels by it — numbers or strings."""
    if not (
        isinstance(classes, np.ndarray)
        and classes.ndim == 1
        and classes.size >= 2
        and classes.dtype.kind in "biufUSO"
    ):
        raise SnapshotError("fitted: classes_ is not a 1-d array of at least two labels")
    values = classes.tolist()
    if classes.dtype.kind == "O" and not all(type(v) is str for v in values):
        raise SnapshotError("fitted: classes_ of object dtype must be strings")
    if not all(a < b for a, b in zip(values, values[1:], strict=False)):
        raise SnapshotError("fitted: classes_ is not sorted and unique")


def restore_estimator(snapshot: ModelSnapshot, *, secret_key: bytes | str | None = None):
    """The estimator a snapshot holds (QSSClassifier or QSSRegressor, by its recorded class
    name), rebuilt through that class's :meth:`~_QSSBase.from_snapshot`."""
    classes = {"QSSClassifier": QSSClassifier, "QSSRegressor": QSSRegressor}
    if snapshot.estimator not in classes:
        raise ValueError(f"unknown estimator {snapshot.estimator!r} in snapshot")
    return classes[snapshot.estimator].from_snapshot(snapshot, secret_key=secret_key)


def defaults_fingerprint() -> str:
    """12 hex digits naming the shipped defaults: both estimators' default parameters, what
    ``partition="auto"`` and ``head="auto"`` resolve to for each task, the head-vs-tables
    factor and the library version.

    Why: a benchmark's figures describe the model it measured. Results files record this
    fingerprint (the lab's ``write_results``), so a figure quoted from a file written before
    a default changed is detected (tests/test_results_staleness.py) rather than silently
    describing a model no longer shipped.
    """
    import hashlib
    import json
    from importlib.metadata import PackageNotFoundError, version

    from ..content.tables.flat_content import TABLES_GAIN_FACTOR
    from ..parameters import resolve_head

    try:
        release = version("forgetting")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        release = "unknown"
    described = {"version": release, "tables_gain_factor": TABLES_GAIN_FACTOR}
    for cls in (QSSClassifier, QSSRegressor):
        params = cls().get_params(deep=False)
        task = cls._task
        described[cls.__name__] = {
            **{k: repr(v) for k, v in sorted(params.items())},
            "partition_resolved": resolve_partition(params),
            "head_resolved": repr(resolve_head(params, task)),
        }
    blob = json.dumps(described, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
