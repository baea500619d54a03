"""ExactForestClassifier: the scikit-learn surface of :class:`~forgetting.forest.ExactForest`.

Guarantee: after ``fit(D)`` and ``forget(R)`` (or ``insert``), ``predict_proba``,
``state_digest()`` and ``structure_digest()`` are bit for bit those of ``fit`` on the rows
held, with the same parameters and key. Everything is validated before any state changes,
so a bad request raises one clear error and leaves the model as it was. Ids, keys and
receipts follow the QSS estimators (:mod:`forgetting.ids`,
:mod:`forgetting.schema.membership`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Sequence
from datetime import UTC, datetime
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from .._masked_repr import MaskedKeyRepr
from ..ids import listing, normalize_ids
from ..receipts import Receipt
from ..schema.membership import derive_key, id_bytes, receipt_hashes
from .core import ForestConfig
from .instances import ForestInstances


class _ExactForestBase(MaskedKeyRepr, BaseEstimator):
    """Parameters, validation, receipts and the read-only surface both exact forests share
    (the parameters are documented on :class:`ExactForestClassifier`)."""

    _parameter_constraints: dict = {
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "max_features": [
            Interval(Integral, 1, None, closed="left"),
            Interval(Real, 0.0, 1.0, closed="right"),
            StrOptions({"sqrt", "log2"}),
        ],
        "min_samples_leaf": [Interval(Integral, 1, None, closed="left")],
        "max_depth": [Interval(Integral, 1, None, closed="left"), None],
        "max_bins": [Interval(Integral, 2, 255, closed="both")],
        "rho": [Interval(Real, 0.0, 1.0, closed="right")],
        "min_bin_rows": [Interval(Integral, 0, None, closed="left")],
        "cache_min_rows": [Interval(Integral, 1, None, closed="left")],
        "n_instances": [Interval(Integral, 1, None, closed="left")],
        "random_state": [Interval(Integral, 0, 2**63 - 1, closed="both")],
        "secret_key": [bytes, str, None],
    }

    def __init__(
        self,
        *,
        n_estimators: int = 30,
        max_features: int | float | str = "sqrt",
        min_samples_leaf: int = 1,
        max_depth: int | None = None,
        max_bins: int = 255,
        rho: float = 0.005,
        min_bin_rows: int = 200,
        cache_min_rows: int = 64,
        n_instances: int = 3,
        random_state: int = 0,
        secret_key: bytes | str | None = None,
    ):
        self.n_estimators = n_estimators
        self.max_features = max_features
        self.min_samples_leaf = min_samples_leaf
        self.max_depth = max_depth
        self.max_bins = max_bins
        self.rho = rho
        self.min_bin_rows = min_bin_rows
        self.cache_min_rows = cache_min_rows
        self.n_instances = n_instances
        self.random_state = random_state
        self.secret_key = secret_key

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.sparse = False
        tags.non_deterministic = False
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return "forest_" in self.__dict__

    # -- validation ------------------------------------------------------------------------
    def _config(self, d: int) -> ForestConfig:
        mf = self.max_features
        if mf == "sqrt":
            K = math.ceil(math.sqrt(d))
        elif mf == "log2":
            K = max(1, math.ceil(math.log2(d))) if d > 1 else 1
        elif isinstance(mf, Integral):
            K = int(mf)
        else:
            K = max(1, math.ceil(float(mf) * d))
        return ForestConfig(
            n_trees=int(self.n_estimators),
            n_candidates=K,
            min_leaf=int(self.min_samples_leaf),
            max_depth=-1 if self.max_depth is None else int(self.max_depth),
            max_bins=int(self.max_bins),
            rho=float(self.rho),
            min_bin_rows=int(self.min_bin_rows),
            cache_min_rows=int(self.cache_min_rows),
            random_state=int(self.random_state),
        )

    def _validate_X(self, X: Any, *, reset: bool) -> np.ndarray:
        """Dense float32 features; NaN is a missing value (its own bin), infinity is refused.
        A DataFrame's pandas ``category`` columns become their codes (:meth:`_category_codes`)."""
        X = self._category_codes(X, reset=reset)
        X = validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan")
        X32 = X.astype(np.float32)
        if np.isinf(X32).any():
            raise ValueError("X has values beyond float32 range; NaN marks a missing value")
        return np.ascontiguousarray(X32)

    def _category_codes(self, X: Any, *, reset: bool) -> Any:
        """A DataFrame's ``category`` columns as float codes in the order of their dtype's
        declared categories, kept at fit in ``categories_`` (column name → categories), as
        HistGradientBoosting's ``categorical_features="from_dtype"`` reads them. The codes
        depend on the dtype only, never on which rows are present, so forget stays exact.
        A missing value, or a category the fit's dtype did not declare, is missing (NaN)."""
        dtypes = getattr(X, "dtypes", None)
        if dtypes is None:
            if reset:
                self.__dict__.pop("categories_", None)
            return X
        columns = [c for c, t in zip(X.columns, dtypes, strict=True) if str(t) == "category"]
        if reset:
            self.categories_ = {c: list(X[c].cat.categories) for c in columns}
        known = self.__dict__.get("categories_", {})
        if not known and not columns:
            return X
        import pandas as pd

        out = X.copy()
        for c, categories in known.items():
            if c not in out.columns:
                continue  # validate_data names the missing column
            values = out[c].astype(object).to_numpy()
            codes = pd.Index(categories).get_indexer(values).astype(np.float64)
            codes[codes < 0] = np.nan
            out[c] = codes
        for c in columns:
            if c not in known:
                raise ValueError(
                    f"column {c!r} is categorical here but was not at fit; pass the columns "
                    "with the dtypes the model was fitted with"
                )
        return out

    def _check_X(self, X: Any) -> np.ndarray:
        """Features for a fitted model: a plain float ndarray of the fitted width takes a
        direct path (scikit-learn's checks are most of a one-row prediction); anything else
        goes through :meth:`_validate_X` and gets its messages."""
        if (
            type(X) is np.ndarray
            and X.ndim == 2
            and X.dtype in (np.float32, np.float64)
            and X.shape[0] >= 1
            and X.shape[1] == self.n_features_in_
            and "feature_names_in_" not in self.__dict__
        ):
            X32 = X.astype(np.float32)
            if not np.isinf(X32).any():
                return X32
        return self._validate_X(X, reset=False)

    @staticmethod
    def _check_ids(ids: Any, n: int | None, *, allow_range: bool = False):
        if ids is None and not allow_range:
            raise ValueError("ids are required")
        id_list = normalize_ids(ids, n)
        if not id_list:
            raise ValueError("no ids given")
        return id_list, [id_bytes(i) for i in id_list]

    def _check_fitted(self) -> None:
        if "forest_" not in self.__dict__:
            check_is_fitted(self)

    def _column(self, y: Any, n: int) -> np.ndarray:
        """``y`` as one column of ``n`` values, with scikit-learn's messages."""
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        y = column_or_1d(y, warn=True)
        if len(y) != n:
            raise ValueError(
                f"Found input variables with inconsistent numbers of samples: [{n}, {len(y)}]"
            )
        return y

    def _fit_atomically(self, fit) -> None:
        """Validate the parameters and run ``fit``; on any error every fitted attribute is
        put back as it was."""
        self._validate_params()
        saved = {k: v for k, v in vars(self).items() if k.endswith("_")}
        try:
            fit()
        except BaseException:
            for k in [k for k in vars(self) if k.endswith("_")]:
                delattr(self, k)
            for k, v in saved.items():
                setattr(self, k, v)
            raise

    def _new_forest(self, d: int, n_classes: int | None) -> ForestInstances:
        key = derive_key(self.secret_key, int(self.random_state))
        config = self._config(d)
        self._key = key
        # at most one instance per tree: n_estimators=2 with the default 3 gives 2 instances
        p = min(int(self.n_instances), config.n_trees)
        return ForestInstances(config, key, d, n_classes, p)

    def _replace_forest(self, forest: ForestInstances) -> None:
        """Serve ``forest`` from now on; the one it replaces stops its rebuilds."""
        old = self.__dict__.get("forest_")
        self.forest_ = forest
        if old is not None and old is not forest:
            old.discard_rebuilds()

    def _unknown_ids_refused(self, id_list: list) -> None:
        missing = self.forest_.unknown_ids(id_list)
        if missing:
            raise KeyError(
                f"unknown ids (never inserted, or already forgotten): {listing(missing)}"
            )

    def _receipt(
        self, operation: str, id_raw: list, hit: tuple[tuple[int, ...], bool], started: float
    ) -> Receipt:
        """``hit``: the instances whose D° the change moved, and whether they rebuild in the
        background (else they were refitted in the call)."""
        return Receipt(
            operation=operation,
            scope="instance",
            n_rows=len(id_raw),
            id_hashes=tuple(receipt_hashes(self._key, id_raw)),
            instances_hit=hit[0],
            rebuild_started=hit[1],
            state_digest=self.forest_.state_digest(),
            timestamp=datetime.now(UTC).isoformat(timespec="microseconds"),
            seconds=time.perf_counter() - started,
            effective_rho=self.forest_.effective_rho,
        )

    def receipt_hash(self, row_id: Hashable) -> str:
        """The keyed hash receipts carry for ``row_id`` (the id itself never appears in a
        receipt): look a row's receipts up by it."""
        self._check_fitted()
        (row_id,) = normalize_ids([row_id])
        return receipt_hashes(self._key, [id_bytes(row_id)])[0]

    def state_digest(self) -> str:
        """SHA-256 (hex) of what the forest is a function of: the configuration, key, grid
        and rows held (receipts carry it; computing it rebuilds nothing)."""
        self._check_fitted()
        return self.forest_.state_digest()

    def structure_digest(self) -> str:
        """SHA-256 (hex) of the trees themselves — every node's split and counts — with the
        configuration, grid and rows: compare it with a refit's to check a forget was
        exact. It rebuilds the subtrees a change left stale (docs/forest.md)."""
        self._check_fitted()
        return self.forest_.structure_digest()

    # -- files ---------------------------------------------------------------------------
    def save(self, path: str | Path, *, store_key: bool = False) -> None:
        """Write the model atomically to ``path``: its rows, parameters and fitted
        attributes (arrays + JSON, checksummed; no pickles). A secret ``secret_key`` is not
        written unless ``store_key=True``: pass it to :meth:`load` instead."""
        from .files import save_forest

        save_forest(self, path, store_key=store_key)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        allow_version_mismatch: bool = False,
        secret_key: bytes | str | None = None,
    ):
        """Read a model written by :meth:`save`, growing its forest again from the saved
        rows (one fit's time; the result's structure digest must be the saved one).

        Raises :class:`~forgetting.io.model_format.ModelFileError` (a ValueError) for a file
        that is damaged, foreign, edited or written by other library versions (unless
        ``allow_version_mismatch``: then the forest is a refit under these versions), and
        ValueError when the model needs a secret key that is missing or wrong.
        """
        from .files import load_forest

        return load_forest(cls, path, allow_version_mismatch, secret_key=secret_key)

    def _fitted_state(self) -> dict:
        """The fitted attributes besides the forest, as plain data (what a file keeps)."""
        out: dict[str, Any] = {"n_features_in_": int(self.n_features_in_)}
        if "feature_names_in_" in self.__dict__:
            out["feature_names_in_"] = [str(c) for c in self.feature_names_in_]
        if "categories_" in self.__dict__:
            out["categories_"] = {c: list(v) for c, v in self.categories_.items()}
        if "classes_" in self.__dict__:
            out["classes_"] = self.classes_
        return out

    def _restore(self, fitted: dict, id_list: list, id_raw: list, X32, targets) -> None:
        """Become the fit on these checked rows with these fitted attributes (a file's)."""
        for name, value in fitted.items():
            if name != "classes_":
                setattr(self, name, value)
        self._fit_rows(fitted, id_list, id_raw, X32, targets)

    @property
    def n_rows_(self) -> int:
        """Rows currently held."""
        self._check_fitted()
        return self.forest_.n_rows

    @property
    def ids_(self) -> list:
        """Ids of the rows held, in storage order."""
        self._check_fitted()
        return self.forest_.ids()

    @property
    def pool_ids_(self) -> list:
        """Ids of the D° rows (the rows that fix an instance's bin grid): forgetting one
        rebuilds that instance (in the background while another serves)."""
        self._check_fitted()
        return self.forest_.pool_ids()

    @property
    def effective_rho_(self) -> float:
        """The probability that forgetting a random row hits a D° (and rebuilds)."""
        self._check_fitted()
        return self.forest_.effective_rho

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Block until no instance rebuilds in the background (``timeout`` seconds at most:
        TimeoutError). From then until the next change the model is a fit on the rows held,
        bit for bit; while one rebuilds, the other instances serve."""
        self._check_fitted()
        self.forest_.wait_for_rebuilds(timeout)


class ExactForestClassifier(ClassifierMixin, _ExactForestBase):
    """Extremely randomized trees with exact forget and insert.

    Each of ``n_estimators`` trees draws ``max_features`` random (feature, bin threshold)
    candidates per node from the node's feasible bin range (fixed by its ancestors, so no
    row proposes them) and splits on the one with the largest Gini gain over the integer
    class counts of all its rows, down to ``min_samples_leaf`` rows, pure nodes or
    ``max_depth``. The bin grid (``max_bins`` per feature, NaN its own bin) comes from D°,
    the rows whose keyed id hash is below ``rho`` (at least ``min_bin_rows`` rows), so
    forgetting a D° row rebuilds the trees grown on that grid. ``cache_min_rows`` sets which
    nodes cache candidate counts (a speed knob only: results do not depend on it).

    ``n_instances`` = p > 1 (3 by default, at most one per tree) splits the trees into p
    instances, each with its own D° and grid (docs/forest.md): forgetting a row of one
    instance's D° rebuilds that instance in the background while the others serve, so the
    call returns at once; the model equals a refit again once the rebuild lands
    (:meth:`wait_for_rebuilds`). With 1, such a forget refits the forest in the call.
    """

    def _check_y(self, y: Any, n: int) -> np.ndarray:
        y = self._column(y, n)
        check_classification_targets(y)
        return y

    # -- fit -------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None = None):
        """Fit on rows ``X`` (NaN = missing) with labels ``y`` and unique ``ids`` (default
        ``range(n)``). On any error the previous fit stays."""

        def fit():
            X32 = self._validate_X(X, reset=True)
            labels = self._check_y(y, X32.shape[0])
            classes = np.unique(labels)
            if classes.size < 2:
                raise ValueError(
                    f"need at least 2 classes, got 1 class ({classes.tolist()}): a classifier "
                    "cannot be fitted on one class"
                )
            id_list, id_raw = self._check_ids(ids, X32.shape[0], allow_range=True)
            self._fit_indices(X32, np.searchsorted(classes, labels), classes, id_list, id_raw)

        self._fit_atomically(fit)
        return self

    def _fit_rows(self, fitted, id_list, id_raw, X32, targets) -> None:
        self._fit_indices(X32, targets, fitted["classes_"], id_list, id_raw)

    def _fit_indices(self, X32, targets, classes, id_list, id_raw) -> None:
        forest = self._new_forest(X32.shape[1], classes.size)
        forest.fit(id_list, id_raw, X32, targets.astype(np.int64))
        self.classes_ = classes
        self._replace_forest(forest)

    # -- forget / insert -------------------------------------------------------------------
    def forget(self, ids: Sequence[Hashable]) -> Receipt:
        """Forget rows by id; returns a receipt. Unknown ids raise KeyError, duplicates
        ValueError; forgetting every row of a class refits with the classes that remain
        (fewer than 2 raise). On any error nothing changes."""
        self._check_fitted()
        started = time.perf_counter()
        id_list, id_raw = self._check_ids(ids, None)
        forest = self.forest_
        self._unknown_ids_refused(id_list)
        remaining = forest.class_counts_without(id_list)
        if np.count_nonzero(remaining) < 2:
            raise ValueError(
                "forgetting these rows would leave fewer than 2 classes; no classifier can be "
                "fitted on what remains"
            )
        if np.any(remaining == 0):
            self._refit_without(id_list)
            hit = (tuple(range(self.forest_.n_instances)), False)
        else:
            hit = forest.forget(id_list)
        return self._receipt("forget", id_raw, hit, started)

    def _refit_without(self, id_list: list) -> None:
        """Refit on what remains, with the classes that remain."""
        ids, raw, X, y = self.forest_.rows()
        gone = set(id_list)
        keep = np.array([i not in gone for i in ids], dtype=bool)
        present = np.unique(y[keep])
        remap = np.full(self.classes_.size, -1, dtype=np.int64)
        remap[present] = np.arange(present.size)
        self._fit_indices(
            X[keep],
            remap[y[keep]],
            self.classes_[present],
            [i for i, k in zip(ids, keep, strict=True) if k],
            [b for b, k in zip(raw, keep, strict=True) if k],
        )

    def insert(self, X: Any, y: Any, ids: Sequence[Hashable]) -> Receipt:
        """Add labeled rows of known classes; the result equals a fit on all rows."""
        self._check_fitted()
        started = time.perf_counter()
        X32 = self._validate_X(X, reset=False)
        y = self._check_y(y, X32.shape[0])
        idx = np.searchsorted(self.classes_, y).clip(max=self.classes_.size - 1)
        unseen = self.classes_[idx] != y
        if np.any(unseen):
            raise ValueError(
                f"unseen labels {np.unique(y[unseen])[:5].tolist()}; known classes are "
                f"{self.classes_.tolist()} — refit to add a class"
            )
        id_list, id_raw = self._check_ids(ids, X32.shape[0])
        known = self.forest_.known_ids(id_list)
        if known:
            raise ValueError(f"ids already present: {listing(known)}; forget them first")
        hit = self.forest_.insert(id_list, id_raw, X32, idx.astype(np.int64))
        return self._receipt("insert", id_raw, hit, started)

    # -- serving ---------------------------------------------------------------------------
    def predict_proba(self, X: Any) -> np.ndarray:
        """Mean over trees of each leaf's class frequencies (a float function of counts)."""
        self._check_fitted()
        return self.forest_.predict_proba(self._check_X(X))

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class (ties: the first in ``classes_``)."""
        self._check_fitted()
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


class ExactForestRegressor(RegressorMixin, _ExactForestBase):
    """Extremely randomized regression trees with exact forget and insert.

    As :class:`ExactForestClassifier` (the same parameters, grid, candidates and D°), but
    each node keeps two integers — its row count and the sum of its rows' targets quantized
    on a 1,024-level grid fixed by D° — and splits by the squared-error gain computed from
    them; a leaf predicts its rows' mean target on that grid, and the forest the mean over
    trees. Forgetting a row of an instance's D° rebuilds that instance (the grid moves with
    its D°): in the background with the default three instances, in the call with one.
    """

    def _check_targets(self, y: Any, n: int) -> np.ndarray:
        y = self._column(y, n)
        try:
            targets = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError("regression targets must be numbers") from None
        if not np.all(np.isfinite(targets)):
            raise ValueError("y contains NaN or infinity; every target must be finite")
        return targets

    # -- fit -------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None = None):
        """Fit on rows ``X`` (NaN = missing) with finite targets ``y`` and unique ``ids``
        (default ``range(n)``). On any error the previous fit stays."""

        def fit():
            X32 = self._validate_X(X, reset=True)
            targets = self._check_targets(y, X32.shape[0])
            if targets.size < 2:
                raise ValueError(f"got n_samples={targets.size}; a regressor needs at least 2")
            id_list, id_raw = self._check_ids(ids, X32.shape[0], allow_range=True)
            self._fit_rows({}, id_list, id_raw, X32, targets)

        self._fit_atomically(fit)
        return self

    def _fit_rows(self, fitted, id_list, id_raw, X32, targets) -> None:
        forest = self._new_forest(X32.shape[1], None)
        forest.fit(id_list, id_raw, X32, targets)
        self._replace_forest(forest)

    # -- forget / insert -------------------------------------------------------------------
    def forget(self, ids: Sequence[Hashable]) -> Receipt:
        """Forget rows by id; returns a receipt. Unknown ids raise KeyError, duplicates
        ValueError, leaving fewer than 2 rows ValueError; on any error nothing changes."""
        self._check_fitted()
        started = time.perf_counter()
        id_list, id_raw = self._check_ids(ids, None)
        self._unknown_ids_refused(id_list)
        if self.forest_.n_rows - len(id_list) < 2:
            raise ValueError("forgetting these rows would leave fewer than 2; refit instead")
        hit = self.forest_.forget(id_list)
        return self._receipt("forget", id_raw, hit, started)

    def insert(self, X: Any, y: Any, ids: Sequence[Hashable]) -> Receipt:
        """Add rows with finite targets; the result equals a fit on all rows."""
        self._check_fitted()
        started = time.perf_counter()
        X32 = self._validate_X(X, reset=False)
        targets = self._check_targets(y, X32.shape[0])
        id_list, id_raw = self._check_ids(ids, X32.shape[0])
        known = self.forest_.known_ids(id_list)
        if known:
            raise ValueError(f"ids already present: {listing(known)}; forget them first")
        hit = self.forest_.insert(id_list, id_raw, X32, targets)
        return self._receipt("insert", id_raw, hit, started)

    # -- serving ---------------------------------------------------------------------------
    def predict(self, X: Any) -> np.ndarray:
        """Mean over trees of each leaf's mean target (a float function of integer sums)."""
        self._check_fitted()
        return self.forest_.predict_values(self._check_X(X))
