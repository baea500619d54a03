"""One estimator base for every model family: the surface a user learns once.

Why one base: every family (QSS, the exact forest, and the next) answers the same contract —
rows are named by ids, everything is validated at the edge before any state changes, a fit
is all or nothing, ``forget`` and ``insert`` return receipts, a class whose last row is
forgotten leaves the model (a refit with the classes that remain), ``partial_fit`` is
``fit`` then ``insert``, ``random_state=None`` draws a seed once and keeps it, and a fitted
model travels as a :class:`~forgetting.snapshots.ModelSnapshot` (files, stores, pickles). All
of that is written here once. A family plugs in the way scikit-learn's
``BaseHistGradientBoosting`` serves its classifier and regressor through ``_get_loss`` and
``_encode_y``: through a few hooks —

* :meth:`_validate_X` — its features (QSS: finite; the forest: NaN is a missing value);
* :meth:`_new_engine` / :meth:`_restored_engine` — the engine that holds the state (a
  :class:`~forgetting.engine.QSSEngine`, a :class:`~forgetting.forest.engine.ForestEngine`),
  made for a fit or restored from a snapshot;

and the task mixins of :mod:`.targets` (``ClassifierTargets``, ``RegressorTargets``) supply
the targets' validation and encoding. The engine is the fitted attribute ``engine_``; the base
talks to it through one interface, the same for every family: ``fit``, ``forget``,
``insert``, ``receipt``, ``known_ids``, ``unknown_ids``, ``ids``, ``n_rows``,
``n_instances``, ``effective_rho``, ``class_counts_without``, ``state_digest``,
``receipt_hash``, ``key_fingerprint``, ``wait_for_rebuilds``, ``retire``, ``locked``,
``snapshot``, ``continue_history`` (a refit takes over the served engine's history).
"""

from __future__ import annotations

import secrets
from collections.abc import Hashable, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._masked_repr import MaskedKeyRepr
from ..ids import listing, normalize_ids
from ..persistence import load_model, save_model
from ..receipts import Receipt
from ..rows.hashing import canonical_floats
from ..schema.membership import derive_key, id_bytes, key_fingerprint
from ..snapshots import ModelSnapshot, SnapshotError

DIRECT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""Input dtypes a fitted model's predict/insert validate without scikit-learn (see _check_X)."""

UNKNOWN_IDS = "unknown ids (never inserted, or already forgotten)"


class UnlearningEstimator(MaskedKeyRepr, BaseEstimator):
    """The surface every family shares (module docstring); not instantiated itself."""

    _fitted_required: tuple[str, ...] = ("n_features_in_",)
    """The fitted attributes every fitted estimator of the class has (besides ``engine_``)."""
    _fitted_optional: tuple[str, ...] = ("feature_names_in_", "random_state_")
    """Fitted attributes a snapshot may hold besides the required ones."""
    _missing_values = False
    """Whether NaN in the features is a missing value (else refused)."""

    # -- family hooks ----------------------------------------------------------------------
    def _check_params(self) -> None:
        """Validate the parameters (scikit-learn's constraints; a family adds its rules)."""
        self._validate_params()

    def _validate_X(self, X: Any, *, reset: bool) -> np.ndarray:
        """The family's features as the engine stores them (float32, C order)."""
        raise NotImplementedError

    def _new_engine(self, n_outputs: int, n_features: int, dtype: np.dtype) -> Any:
        """A new, unfitted engine for ``n_outputs`` outputs over ``n_features`` features."""
        raise NotImplementedError

    def _restored_engine(self, key: bytes, n_outputs: int, snapshot: Any) -> Any:
        """The engine an engine snapshot holds (checked whole first)."""
        raise NotImplementedError

    def _fit_targets(self, y: Any, n: int) -> tuple[np.ndarray, int]:  # task mixins
        raise NotImplementedError

    def _encode_targets(self, y: Any, n: int) -> np.ndarray:  # task mixins
        raise NotImplementedError

    # -- scikit-learn ------------------------------------------------------------------------
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = self._missing_values
        tags.input_tags.sparse = False
        tags.non_deterministic = False
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return "engine_" in self.__dict__

    def _check_fitted(self) -> None:
        """check_is_fitted, skipped once fitted: scikit-learn's check reads the estimator's
        tags on every call, a noticeable share of a one-row forget and its prediction."""
        if "engine_" not in self.__dict__:
            check_is_fitted(self)

    # -- validation at the edge --------------------------------------------------------------
    def _check_X(self, X: Any) -> np.ndarray:
        """Features for a fitted model (predict, insert), validated against the fit.

        A plain float ndarray of the fitted width — what a service or a pipeline passes —
        takes a direct path: scikit-learn's ``validate_data`` (tags, checks, copies) is a
        large share of a one-row prediction. The result is the array ``validate_data`` would
        give (float64, then float32: for float32 input the round trip is the identity);
        anything else, including every invalid input, goes through :meth:`_validate_X` and
        gets its messages.
        """
        self._check_fitted()
        if (
            type(X) is np.ndarray
            and X.ndim == 2
            and X.dtype in DIRECT_DTYPES
            and X.shape[0] >= 1
            and X.shape[1] == self.n_features_in_
            and "feature_names_in_" not in self.__dict__
        ):
            X32 = canonical_floats(X.astype(np.float32))  # a copy, C order; ±0 as +0
            if self._missing_values:
                if not np.isinf(X32).any():
                    return X32
            elif np.isfinite(X32).all():
                return X32
        return self._validate_X(X, reset=False)

    @staticmethod
    def _check_ids(ids: Any, n: int | None, *, allow_range: bool = False):
        """(normalized ids, their canonical bytes); ``range(n)`` for None where allowed."""
        if ids is None and not allow_range:
            raise ValueError("ids are required")
        id_list = normalize_ids(ids, n)
        if not id_list:
            raise ValueError("no ids given")
        return id_list, [id_bytes(i) for i in id_list]

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
                    "sample_weight is not supported: the model's statistics are unweighted "
                    "sums over rows; repeat a row under distinct ids to weight it "
                    "(docs/design.md)"
                )
        if fit_params:
            raise TypeError(f"fit() got unexpected keyword arguments {sorted(fit_params)}")

    # -- seeds and keys ------------------------------------------------------------------------
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

    def _key(self) -> bytes:
        """The membership key (secret, or derived from the seed): never logged or stored."""
        return derive_key(self.secret_key, self._seed())

    # -- fit -------------------------------------------------------------------------------------
    def _fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None):
        """``fit`` for every family: validate the parameters, then all or nothing
        (:meth:`_fit_atomically`): draw the seed, validate the rows, fit the engine."""
        self._check_params()

        def run():
            self._draw_seed()
            return self._fit_rows(X, y, ids)

        return self._fit_atomically(run)

    def _fit_rows(self, X: Any, y: Any, ids: Any, after: tuple | None = None):
        """Fit on raw rows (inside :meth:`_fit_atomically`): features, targets, ids, engine
        (``after``: see :meth:`_fit_engine`)."""
        X_valid = self._validate_X(X, reset=True)
        targets, n_outputs = self._fit_targets(y, X_valid.shape[0])
        return self._fit_engine(ids, X_valid, targets, n_outputs, after)

    def _fit_engine(
        self, ids, X: np.ndarray, targets: np.ndarray, n_outputs: int, after: tuple | None = None
    ):
        """Fit a new engine on the rows and serve it. ``after``: a refit, the model's next
        state after a change — (forgotten, inserted) id bytes — whose engine continues the
        served engine's history (``continue_history``: mode="dp"'s ledger) before it is
        fitted; None: a new model, a new history."""
        id_list, id_raw = self._check_ids(ids, X.shape[0], allow_range=True)
        engine = self._new_engine(n_outputs, X.shape[1], targets.dtype)
        if after is not None and "engine_" in self.__dict__:
            engine.continue_history(self.engine_, *after)
        engine.fit(id_list, id_raw, X, targets)
        self._install_engine(engine)
        return self

    def refit(
        self,
        X: Any,
        y: Any,
        ids: Sequence[Hashable] | None = None,
        *,
        forgotten: Sequence[Hashable] = (),
        inserted: Sequence[Hashable] = (),
    ):
        """Fit this fitted model again on rows ``X``, ``y``, ``ids`` as its next state after
        a change — what ``fit`` on them builds, bit for bit — keeping its history: in QSS's
        mode="dp" the ledger goes on (every release so far, the ids forgotten so far and
        ``forgotten``, the ids of the change); ``inserted`` ids forgotten earlier are refused.
        A pipeline refits its estimator this way when a step's output moves. ``fit`` starts
        a new model and a new history. On any error nothing changes; returns the estimator."""
        self._check_fitted()
        self._check_params()
        after = tuple(
            [id_bytes(i) for i in normalize_ids(list(named))] if len(named) else []
            for named in (forgotten, inserted)
        )

        def run():
            if self.random_state is not None:  # as fit sets it; None keeps the model's seed
                self._draw_seed()
            return self._fit_rows(X, y, ids, after)

        return self._fit_atomically(run)

    def _install_engine(self, engine: Any) -> None:
        """Serve ``engine`` from now on; the previous one (a refit) stops its rebuilds."""
        old = self.__dict__.get("engine_")
        self.engine_ = engine
        if old is not None and old is not engine:
            old.retire()

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

    # -- forget and insert --------------------------------------------------------------------
    def forget(self, ids: Sequence[Hashable], *, erase_inputs: bool = False) -> Receipt:
        """Forget rows by id and return a :class:`~forgetting.receipts.Receipt`: the model
        then equals a fit without them. Unknown ids raise KeyError, duplicates ValueError;
        on any error nothing changes."""
        self._check_fitted()
        self._check_forget_options(erase_inputs)
        id_list, id_raw = self._check_ids(ids, None)
        try:
            return self._forget_checked(id_list, id_raw, erase_inputs)
        except KeyError:
            # an unknown id fails the engine's row lookup before anything changes; which ids
            # are unknown is worked out here, on the error path only, so a forget looks its
            # ids up once
            missing = self.engine_.unknown_ids(id_list)
            if missing:
                raise KeyError(f"{UNKNOWN_IDS}: {listing(missing)}") from None
            raise

    def _check_forget_options(self, erase_inputs: bool) -> None:
        if erase_inputs:
            raise ValueError("erase_inputs applies to QSS's mode='label'; a forget erases rows")

    def _forget_checked(self, id_list: list, id_raw: list, erase_inputs: bool) -> Receipt:
        """Forget rows whose ids are checked (known ones: the engine raises KeyError)."""
        return self.engine_.forget(id_list, id_raw, erase_inputs)

    def _label_only(self, erase_inputs: bool) -> bool:
        """Whether a forget removes labels only (QSS's label mode)."""
        return False

    def insert(self, X: Any, y: Any, ids: Sequence[Hashable]) -> Receipt:
        """Add labeled rows under new ``ids``; returns a receipt. The result equals a fit on
        all rows. A classifier's label is one of ``classes_`` when it is equal in value, as in
        scikit-learn's ``partial_fit``: a new class is refused (refit to add a class)."""
        X = self._check_X(X)
        targets = self._encode_targets(y, X.shape[0])
        id_list, id_raw = self._check_ids(ids, X.shape[0])
        known = self.engine_.known_ids(id_list)
        if known:
            raise ValueError(f"ids already present: {listing(known)}; forget them first")
        return self.engine_.insert(id_list, id_raw, X, targets)

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Block until every background rebuild has landed (``timeout`` seconds at most:
        TimeoutError) or raise its error. From then until the next change the model is a fit
        on the rows held, bit for bit; while one rebuilds, the other instances serve."""
        self._check_fitted()
        self.engine_.wait_for_rebuilds(timeout)

    # -- what the model is -------------------------------------------------------------------
    def state_digest(self) -> str:
        """SHA-256 (hex) of the model's state: equal to a refit's on the rows held, bit for
        bit. Receipts carry it."""
        self._check_fitted()
        return self.engine_.state_digest()

    def receipt_hash(self, row_id: Hashable) -> str:
        """The keyed hash receipts carry for ``row_id`` (the id itself never appears in a
        receipt): look a row's receipts up by it."""
        self._check_fitted()
        (row_id,) = normalize_ids([row_id])
        return self.engine_.receipt_hash(row_id)

    @property
    def n_rows_(self) -> int:
        """Rows currently held."""
        self._check_fitted()
        return self.engine_.n_rows

    @property
    def ids_(self) -> list:
        """Ids of the rows currently held, in storage order."""
        self._check_fitted()
        return self.engine_.ids()

    @property
    def effective_rho_(self) -> float:
        """The probability that forgetting a random row hits an instance's D° (and starts a
        rebuild): ρ on large data, more while D° keeps its minimum of rows. Receipts carry
        it too."""
        self._check_fitted()
        return self.engine_.effective_rho()

    # -- snapshots and files -----------------------------------------------------------------
    def snapshot(self) -> ModelSnapshot:
        """The fitted model as plain data (see :mod:`forgetting.snapshots`), after any pending
        rebuild has landed. The secret key is not part of it."""
        self._check_fitted()
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
            self._snapshot_fitted(fitted, engine_snapshot)
            return ModelSnapshot(
                estimator=type(self).__name__,
                params=params,
                fitted=fitted,
                key_fingerprint=engine.key_fingerprint(),
                key_derived=self.secret_key is None,
                engine=engine_snapshot,
            )

    def _snapshot_fitted(self, fitted: dict, engine_snapshot: Any) -> None:
        """A family's fitted attributes as a snapshot holds them (in place)."""

    def save(self, path: str | Path, *, store_key: bool = False) -> None:
        """Write the model atomically to ``path`` (arrays + JSON, checksummed; no pickles).

        A secret ``secret_key`` is not written unless ``store_key=True``: pass it to
        :meth:`load` instead.
        """
        self._check_fitted()
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
        is truncated, corrupted, edited, of another format version or written by other
        library versions (unless ``allow_version_mismatch``), and ValueError when the model
        needs a secret key that is missing or wrong.
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
        those of this class only (:meth:`_checked_fitted`), and the engine checks the rest;
        an inconsistent one raises :class:`~forgetting.snapshots.SnapshotError` naming the
        field.
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
            if snapshot.key_derived:  # nothing the caller passed: the snapshot disagrees
                raise SnapshotError("key_fingerprint does not match random_state's key")
            raise ValueError("secret_key does not match the key this model was fitted with")
        for name, value in fitted.items():
            setattr(estimator, name, value)
        estimator.random_state_ = int(seed)
        n_outputs = len(estimator.classes_) if "classes_" in estimator.__dict__ else 1
        engine_snapshot = estimator._restore_fitted(snapshot, key)
        estimator.engine_ = estimator._restored_engine(key, n_outputs, engine_snapshot)
        return estimator

    def _restore_fitted(self, snapshot: ModelSnapshot, key: bytes) -> Any:
        """A family's fitted state besides the engine, restored from ``snapshot`` (QSS: a
        table model's encoding); returns the engine snapshot to restore the engine from."""
        return snapshot.engine

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
        ``feature_names_in_``, one string per feature; a family's own), never anything else
        (an attribute from a file must not shadow a method)."""
        allowed = set(cls._fitted_required) | set(cls._fitted_optional)
        if not isinstance(fitted, dict) or not set(cls._fitted_required) <= set(fitted):
            raise SnapshotError(f"fitted: expected {sorted(allowed)}")
        unknown = [str(name)[:40] for name in fitted if name not in allowed]
        if unknown:
            raise SnapshotError(f"fitted: attributes {unknown} are not a fitted estimator's")
        d = fitted["n_features_in_"]
        width = cls._snapshot_width(fitted, rows)
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
            check_classes(fitted["classes_"])
        seed = fitted.get("random_state_", 0)
        if isinstance(seed, bool | np.bool_) or not isinstance(seed, Integral):
            raise SnapshotError(f"fitted: random_state_ {seed!r:.40} is not an integer")
        return fitted

    @classmethod
    def _snapshot_width(cls, fitted: dict, rows: Any) -> int | None:
        """The number of features the snapshot's rows have."""
        X = getattr(rows, "X", None)
        return X.shape[1] if isinstance(X, np.ndarray) and X.ndim == 2 else None


def check_classes(classes: Any) -> None:
    """``classes_`` as ``fit`` sets it (``np.unique`` of the labels): at least two, strictly
    increasing — ``searchsorted`` encodes labels by it — numbers or strings."""
    if not (
        isinstance(classes, np.ndarray)
        and classes.ndim == 1
        and classes.size >= 2
        and classes.dtype.kind in "biufUSO"
    ):
        raise SnapshotError("fitted: classes_ is not a 1-d array of at least two labels")
    if not classes.dtype.isnative:  # fit keeps them in this machine's order (_set_classes)
        raise SnapshotError(f"fitted: classes_ in byte order {classes.dtype.str!r}, not native")
    values = classes.tolist()
    if classes.dtype.kind == "O" and not all(type(v) is str for v in values):
        raise SnapshotError("fitted: classes_ of object dtype must be strings")
    if not all(a < b for a, b in zip(values, values[1:], strict=False)):
        raise SnapshotError("fitted: classes_ is not sorted and unique")
