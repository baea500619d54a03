"""The exact forest's estimators: ExactForestClassifier and ExactForestRegressor.

Guarantee: after ``fit(D)`` and ``forget(R)`` (or ``insert``), once ``wait_for_rebuilds()``
returns, ``predict_proba``, ``state_digest()`` and ``structure_digest()`` are bit for bit
those of ``fit`` on the rows held, with the same parameters and key. The surface — ids,
validation at the edge, atomic fit, receipts, the forget that makes a class vanish,
``partial_fit``, ``random_state=None``, snapshots and files — is
:class:`~.base.UnlearningEstimator`'s, shared with QSS. Here is what the forest adds: its
parameters and their resolution into a :class:`~forgetting.forest.ForestConfig`, features
with missing values (NaN) and pandas ``category`` columns read as codes, and its engine
(:class:`~forgetting.forest.engine.ForestEngine`). The model: docs/forest.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import validate_data

from .. import _clock as clock
from ..distributed import is_distributed_input
from ..engine.validation import check_rows
from ..forest.config import ForestConfig, fit_bytes
from ..forest.core import MAX_REGRESSION_ROWS
from ..forest.engine import ForestEngine
from ..ids import listing
from ..preprocessing.table import refuse_unreadable
from ..privacy.randomized_response import (
    RRLedger,
    check_rr_params,
    debias,
    dp_min_leaf,
    randomize,
    recover,
)
from ..receipts import Receipt
from ..rows.hashing import canonical_floats
from ..schema.membership import id_bytes
from ..snapshots import ModelSnapshot, SnapshotError, memory_budget
from .base import UnlearningEstimator
from .targets import ClassifierTargets, RegressorTargets


class _ExactForestBase(UnlearningEstimator):
    """Parameters, features and the engine both exact forests share (the parameters are
    documented on :class:`ExactForestClassifier`)."""

    _missing_values = True
    _fitted_optional = ("feature_names_in_", "categories_", "random_state_")
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
        "random_state": [Interval(Integral, 0, 2**63 - 1, closed="both"), None],
        "secret_key": [bytes, str, None],
        "mode": [StrOptions({"exact", "dp"})],
        "epsilon": [Interval(Real, 0.0, None, closed="neither"), None],
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
        random_state: int | None = 0,
        secret_key: bytes | str | None = None,
        mode: str = "exact",
        epsilon: float | None = None,
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
        self.mode = mode
        self.epsilon = epsilon

    def _check_params(self) -> None:
        """scikit-learn's constraints, then ``mode="dp"``'s (:func:`check_rr_params`): a
        finite ε > 0 and a secret key; ``epsilon`` outside it is refused."""
        self._validate_params()
        if self.mode == "dp":
            if isinstance(self, RegressorMixin):
                raise ValueError(
                    "mode='dp' is for ExactForestClassifier only: randomized response needs "
                    "a finite label set (QSSRegressor has mode='dp' for regression)"
                )
            check_rr_params(self.epsilon, self.secret_key)
        elif self.epsilon is not None:
            raise ValueError("epsilon applies to mode='dp' only")

    # -- configuration ---------------------------------------------------------------------
    def _min_leaf(self, n_outputs: int | None) -> int:
        """``min_samples_leaf``; in ``mode="dp"`` raised to :func:`dp_min_leaf` for the
        model's ε and k classes (randomized labels need more rows per leaf)."""
        leaf = int(self.min_samples_leaf)
        if self.mode == "dp" and n_outputs is not None and not isinstance(self, RegressorMixin):
            leaf = max(leaf, dp_min_leaf(float(self.epsilon), int(n_outputs)))
        return leaf

    def _config(self, d: int, n_outputs: int | None = None) -> ForestConfig:
        """The parameters resolved for ``d`` features (``max_features`` → candidates) and,
        in ``mode="dp"``, ``n_outputs`` classes (:meth:`_min_leaf`)."""
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
            min_leaf=self._min_leaf(n_outputs),
            max_depth=-1 if self.max_depth is None else int(self.max_depth),
            max_bins=int(self.max_bins),
            rho=float(self.rho),
            min_bin_rows=int(self.min_bin_rows),
            cache_min_rows=int(self.cache_min_rows),
            random_state=self._seed(),
        )

    def _n_instances(self) -> int:
        """At most one instance per tree: n_estimators=2 with the default 3 gives 2."""
        return min(int(self.n_instances), int(self.n_estimators))

    def _n_classes(self, n_outputs: int) -> int | None:
        return None if isinstance(self, RegressorMixin) else n_outputs

    def _new_engine(self, n_outputs: int, n_features: int, dtype: np.dtype) -> ForestEngine:
        return ForestEngine(
            self._config(n_features, n_outputs),
            self._key(),
            n_features,
            self._n_classes(n_outputs),
            self._n_instances(),
        )

    def _restored_engine(self, key: bytes, n_outputs: int, snapshot: Any) -> ForestEngine:
        """The forest grown from a snapshot's rows, every field checked first: float32
        features (NaN = missing, no infinity), unique ids, class indices of present classes
        or finite targets, no D° flags or instance state (a forest has none to keep), and
        the fit's memory against what this process may use."""
        classifier = not isinstance(self, RegressorMixin)
        task = "classification" if classifier else "regression"
        rows = getattr(snapshot, "rows", None)
        n, d, n_labeled = check_rows(rows, task, n_outputs, missing=True)
        if n_labeled != n or n < 2:
            raise SnapshotError(f"rows: a forest holds at least 2 rows, all labeled (got {n})")
        if (
            classifier
            and self.mode != "dp"  # randomized labels may leave a class without a row
            and np.count_nonzero(np.bincount(rows.targets, minlength=n_outputs)) < n_outputs
        ):
            raise SnapshotError("rows.targets: a class of classes_ has no row")
        if not classifier and n > MAX_REGRESSION_ROWS:
            raise SnapshotError(f"rows: more than {MAX_REGRESSION_ROWS} rows")
        if rows.in_pool.any():
            raise SnapshotError("rows.in_pool: a forest marks no row")
        p = self._n_instances()
        if snapshot.instances != [None] * p or snapshot.privacy is not None:
            raise SnapshotError(f"instances: a forest keeps none (expected {p} empty entries)")
        config = self._config(d, n_outputs)
        need = fit_bytes(config, n, d, n_outputs if classifier else 2)
        if need > memory_budget():
            raise SnapshotError(
                f"rows: growing the forest needs at least {need} bytes, more "
                "than this process may hold"
            )
        return ForestEngine.from_snapshot(config, key, self._n_classes(n_outputs), p, snapshot)

    @classmethod
    def _checked_fitted(cls, fitted: Any, rows: Any) -> dict:
        checked = super()._checked_fitted(fitted, rows)
        categories = checked.get("categories_")
        if categories is not None:
            names = checked.get("feature_names_in_")
            if not isinstance(categories, dict) or not all(
                isinstance(c, list) and len(set(map(repr, c))) == len(c)
                for c in categories.values()
            ):
                raise SnapshotError("fitted: categories_ must map columns to distinct categories")
            if names is None or not set(categories) <= set(names.tolist()):
                raise SnapshotError("fitted: categories_ names a column the model does not have")
        return checked

    # -- features --------------------------------------------------------------------------
    def _validate_X(self, X: Any, *, reset: bool) -> np.ndarray:
        """Dense float32 features; NaN is a missing value (its own bin), infinity is refused.
        A DataFrame's pandas ``category`` columns become their codes (:meth:`_category_codes`);
        a text column, complex numbers, dates or a repeated column name are refused by name."""
        refuse_unreadable(X, text=False)
        X = self._category_codes(X, reset=reset)
        X = validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan")
        X32 = canonical_floats(X.astype(np.float32))  # ±0 as +0, one NaN
        if np.isinf(X32).any():
            raise ValueError("X has values beyond float32 range; NaN marks a missing value")
        return X32

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

    # -- fit -------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None = None, **fit_params: Any):
        """Fit on rows ``X`` (NaN = missing; a DataFrame's ``category`` columns by their
        codes) with targets ``y`` and unique ``ids`` (default ``range(n)``). A dask array or
        DataFrame ``X`` is gathered from the active dask.distributed client and fitted here
        (the forest's trees need every row's counts; bit for bit the in-memory fit). On any
        error the previous fit stays. ``sample_weight`` is refused."""
        self._refuse_fit_params(fit_params)
        if is_distributed_input(X):
            X, y, ids = _gathered(X, y, ids)
        return self._fit(X, y, ids)

    # -- what the model is -------------------------------------------------------------------
    def structure_digest(self) -> str:
        """SHA-256 (hex) of the trees themselves — every node's split and counts — with the
        configuration, grid and rows: compare it with a refit's to check a forget was
        exact. It rebuilds the subtrees a change left stale (docs/forest.md)."""
        self._check_fitted()
        return self.engine_.structure_digest()

    @property
    def pool_ids_(self) -> list:
        """Ids of the D° rows (the rows that fix an instance's bin grid): forgetting one
        rebuilds that instance (in the background while another serves)."""
        self._check_fitted()
        return self.engine_.pool_ids()


class ExactForestClassifier(ClassifierMixin, ClassifierTargets, _ExactForestBase):
    """Extremely randomized trees with exact forget and insert: the model for tables.

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
    ``random_state`` seeds the trees and (without ``secret_key``) the membership key; None
    draws a seed at fit, kept in ``random_state_``.

    ``mode="dp"`` (with ``epsilon`` and a ``secret_key``) makes the model ε-label-DP for
    everything it releases, in every state (δ = 0, no composition over trees or releases):
    each row's label is replaced by keyed randomized response before the trees see it, and
    ``predict_proba`` debiases the leaves' frequencies; leaves keep at least
    0.5/(p − q)² rows, forget and insert still equal a DP fit bit for bit, a forgotten id
    is refused on insert, and ``privacy_`` reports the guarantee (docs/privacy.md §12).
    ``mode="exact"`` (the default) takes no ``epsilon``.

    See Also
    --------
    QSSClassifier : the model for embeddings (sentence or image features), raw pixels, a
        semi-supervised label mode and label-DP (``mode="dp"``). On tables — numeric and
        categorical columns, missing values — the forest is the exact model closest to a
        retrained HistGradientBoosting (docs/forest.md).

    Examples
    --------
    Forget two rows of a table with missing values: the trees are then a refit's.

    >>> from forgetting import ExactForestClassifier
    >>> from sklearn.datasets import load_breast_cancer
    >>> import numpy as np
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X[::7, 0] = np.nan  # a missing value is a bin of its own
    >>> names = [f"p{i}" for i in range(len(y))]
    >>> params = dict(n_estimators=10, n_instances=1)
    >>> model = ExactForestClassifier(**params).fit(X, y, names)
    >>> model.forget(["p3", "p14"]).operation
    'forget'
    >>> rest = [i for i in range(len(y)) if i not in (3, 14)]
    >>> refit = ExactForestClassifier(**params).fit(X[rest], y[rest], [names[i] for i in rest])
    >>> model.structure_digest() == refit.structure_digest()  # the refit's very trees
    True
    """

    def predict_proba(self, X: Any) -> np.ndarray:
        """Mean over trees of each leaf's class frequencies (a float function of counts).
        In ``mode="dp"`` the trees count randomized labels ỹ, and the frequencies are
        debiased to y's (:func:`~forgetting.privacy.randomized_response.debias`: (P̃ − q)/
        (p − q), clipped at 0, renormalised; the argmax is unchanged)."""
        self._check_fitted()
        proba = self.engine_.predict_proba(self._check_X(X))
        ledger = self.__dict__.get("_rr_ledger_")
        if ledger is None:
            return proba
        return debias(proba, ledger.epsilon, len(self.classes_))

    # -- mode="dp": keyed randomized response at the estimator's edge ------------------------
    # The engine only ever sees ỹ; the true labels' class counts (``_rr_counts_``) decide
    # when a class's last row leaves, as a fit on the rows left would decide it.
    @property
    def privacy_(self):
        """mode="dp": ε (δ = 0), the mechanism, p, the leaf size used and ``composed_epsilon``
        (ε for any number of releases; ε per class list if a class was dropped):
        :class:`~forgetting.privacy.randomized_response.RRReport`, docs/privacy.md §12."""
        self._check_fitted()
        ledger = self.__dict__.get("_rr_ledger_")
        if ledger is None:
            raise AttributeError("privacy_ is defined for mode='dp' only")
        k = len(self.classes_)
        return ledger.report(k, self._min_leaf(k))

    def _fit_engine(self, ids, X, targets, n_outputs, after=None):
        """mode="dp": randomize the labels (class indices of ``classes_``) by the model's key
        and the rows' ids, keep the true class counts and the ledger (continued by a refit:
        ``after`` = (forgotten, inserted) id bytes), then fit the engine on ỹ."""
        if self.mode != "dp":
            if after is not None and self.__dict__.get("_rr_ledger_") is not None:
                raise ValueError(
                    "mode changed since the model was fitted in mode='dp': a change cannot "
                    "release its labels in the clear; fit the model again"
                )
            self.__dict__.pop("_rr_ledger_", None)
            self.__dict__.pop("_rr_counts_", None)
            return super()._fit_engine(ids, X, targets, n_outputs, after)
        id_list, id_raw = self._check_ids(ids, X.shape[0], allow_range=True)
        key = self._key()
        epsilon = float(self.epsilon)
        previous = self.__dict__.get("_rr_ledger_") if after is not None else None
        if previous is not None:
            if previous.epsilon != epsilon:
                raise ValueError(
                    "epsilon changed since the model was fitted: its releases so far cannot "
                    "be composed with the new ones; fit the model again to start a new ledger"
                )
            previous.check_insert(key, after[1])
            ledger = previous.continued()
            ledger.record_forgotten(key, after[0])
        else:
            ledger = RRLedger(epsilon)
        ledger.record_class_count(n_outputs)
        noisy = randomize(targets, key, id_raw, epsilon, n_outputs)
        super()._fit_engine(id_list, X, noisy, n_outputs, after)
        self._rr_ledger_ = ledger
        self._rr_counts_ = np.bincount(targets, minlength=n_outputs).astype(np.int64)
        return self

    def insert(self, X: Any, y: Any, ids: Sequence[Hashable]) -> Receipt:
        """Add labeled rows under new ``ids`` (see the base). In ``mode="dp"`` an id forgotten
        earlier is refused, and the rows' labels are randomized before the trees see them."""
        ledger = self.__dict__.get("_rr_ledger_")
        if ledger is None:
            return super().insert(X, y, ids)
        X = self._check_X(X)
        targets = self._encode_targets(y, X.shape[0])
        id_list, id_raw = self._check_ids(ids, X.shape[0])
        key = self._key()
        ledger.check_insert(key, id_raw)
        known = self.engine_.known_ids(id_list)
        if known:
            raise ValueError(f"ids already present: {listing(known)}; forget them first")
        k = len(self.classes_)
        noisy = randomize(targets, key, id_raw, ledger.epsilon, k)
        receipt = self.engine_.insert(id_list, id_raw, X, noisy)
        self._rr_counts_ = self._rr_counts_ + np.bincount(targets, minlength=k)
        return receipt

    def _forget_checked(self, id_list: list, id_raw: list, erase_inputs: bool) -> Receipt:
        """mode="dp": the forgotten rows' true labels (recovered from ỹ with the key) say
        whether a class loses its last row; then a refit on the rows left, their labels
        randomized again over the classes left, as a fit on them would do."""
        ledger = self.__dict__.get("_rr_ledger_")
        if ledger is None:
            return super()._forget_checked(id_list, id_raw, erase_inputs)
        key, k = self._key(), len(self.classes_)
        gone = self.engine_.snapshot(ids=id_list, features=False).rows.targets  # KeyError
        true = recover(gone, key, id_raw, ledger.epsilon, k)
        remaining = self._rr_counts_ - np.bincount(true, minlength=k)
        if np.all(remaining > 0):
            receipt = self.engine_.forget(id_list, id_raw, erase_inputs)
            ledger.record_forgotten(key, id_raw)
            self._rr_counts_ = remaining
            return receipt
        if np.count_nonzero(remaining) < 2:
            raise ValueError(
                "forgetting these rows would leave fewer than 2 classes; no classifier can be "
                "fitted on what remains"
            )
        started = clock.start()
        self.engine_.wait_for_rebuilds()
        rows = self.engine_.snapshot().rows
        raw = [id_bytes(i) for i in rows.ids]
        labels = recover(rows.targets, key, raw, ledger.epsilon, k)
        drop = set(id_list)
        keep = np.fromiter((i not in drop for i in rows.ids), dtype=bool, count=len(rows.ids))
        present = np.flatnonzero(remaining > 0)
        remap = np.full(k, -1, dtype=np.int64)
        remap[present] = np.arange(present.size)
        targets, classes = remap[labels[keep]], self.classes_[present]
        ids = [row_id for row_id, kept in zip(rows.ids, keep, strict=True) if kept]
        X = rows.X[keep]
        self._fit_atomically(lambda: self._fit_indices(X, targets, classes, ids, (id_raw, [])))
        every = list(range(self.engine_.n_instances))
        return self.engine_.receipt("forget", "instance", id_raw, every, started, False)

    def snapshot(self) -> ModelSnapshot:
        """The base's snapshot; in ``mode="dp"`` its engine part carries the ledger
        (``privacy``: :meth:`RRLedger.to_dict`), as QSS-DP's does."""
        snapshot = super().snapshot()
        ledger = self.__dict__.get("_rr_ledger_")
        if ledger is None:
            return snapshot
        engine = dataclasses.replace(snapshot.engine, privacy=ledger.to_dict())
        return dataclasses.replace(snapshot, engine=engine)

    def ledger_state(self) -> dict | None:
        """``mode="dp"``: the ledger as a snapshot and a store keep it
        (:meth:`RRLedger.to_dict`: forgotten-id tags, class lists); else None. A durable store
        writes it with every change, so a reopened model refuses what this one refuses."""
        ledger = self.__dict__.get("_rr_ledger_")
        return None if ledger is None else ledger.to_dict()

    def _restore_fitted(self, snapshot: ModelSnapshot, key: bytes) -> Any:
        """mode="dp": the ledger from the engine snapshot's ``privacy`` and the true class
        counts recovered from the stored ỹ; returns the engine snapshot without the ledger."""
        privacy = getattr(snapshot.engine, "privacy", None)
        if self.mode != "dp":
            return snapshot.engine
        if privacy is None:
            raise SnapshotError("privacy: a mode='dp' forest keeps its ledger")
        try:
            ledger = RRLedger.from_dict(privacy)
        except ValueError as err:
            raise SnapshotError(f"privacy: {err}") from None
        if ledger.epsilon != float(self.epsilon):
            raise SnapshotError("privacy: the ledger's epsilon is not the model's")
        rows = snapshot.engine.rows
        k = len(self.classes_)
        targets = np.asarray(rows.targets)
        if (
            targets.dtype.kind != "i"
            or targets.size == 0
            or not (targets.min() >= 0 and targets.max() < k)
        ):
            raise SnapshotError("rows.targets: not class indices of classes_")
        raw = [id_bytes(i) for i in rows.ids]
        labels = recover(targets, key, raw, ledger.epsilon, k)
        counts = np.bincount(labels, minlength=k).astype(np.int64)
        if np.any(counts == 0):
            raise SnapshotError("rows.targets: a class of classes_ has no row")
        self._rr_ledger_ = ledger
        self._rr_counts_ = counts
        return dataclasses.replace(snapshot.engine, privacy=None)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class (ties: the first in ``classes_``)."""
        self._check_fitted()
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


class ExactForestRegressor(RegressorMixin, RegressorTargets, _ExactForestBase):
    """Extremely randomized regression trees with exact forget and insert.

    As :class:`ExactForestClassifier` (the same parameters, grid, candidates and D°), but
    each node keeps two integers — its row count and the sum of its rows' targets quantized
    on a 1,024-level grid fixed by D° — and splits by the squared-error gain computed from
    them; a leaf predicts its rows' mean target on that grid, and the forest the mean over
    trees. Forgetting a row of an instance's D° rebuilds that instance (the grid moves with
    its D°): in the background with the default three instances, in the call with one.

    See Also
    --------
    QSSRegressor : the model for embeddings, label mode and ``mode="dp"``; on tables the
        forest is closer to a retrained HistGradientBoostingRegressor.
    """

    def predict(self, X: Any) -> np.ndarray:
        """Mean over trees of each leaf's mean target (a float function of integer sums)."""
        self._check_fitted()
        return self.engine_.predict_values(self._check_X(X))


def _gathered(X: Any, y: Any, ids: Any) -> tuple[Any, Any, Any]:
    """A dask collection's rows, labels and ids, computed into this process in row order
    (so a fit of the result is the in-memory fit of the same rows)."""

    def local(value: Any) -> Any:
        return value.compute() if hasattr(value, "__dask_graph__") else value

    X_local = local(X)
    if type(X_local).__name__ != "DataFrame":
        X_local = np.asarray(X_local)
    return X_local, local(y), local(ids)
