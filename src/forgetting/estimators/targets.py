"""Targets for every family's estimators: a classifier's labels and classes, a regressor's
numbers.

Why apart from the base (:mod:`.base`): these mixins are the task's half of an estimator,
as scikit-learn's ``_encode_y`` is the task's half of ``BaseHistGradientBoosting`` — how
``y`` is checked and encoded at fit and insert, what a class that loses its last row does to
the model (a refit with the classes that remain), ``partial_fit``'s classes. A family with a
label mode (QSS) says which rows are unlabeled; the rest is the same for every family.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from .. import _clock as clock
from ..labels import UNLABELED, is_labeled
from ..receipts import Receipt


class ClassifierTargets:
    """Labels for a classifier of any family: ``classes_``, validated labels, class indices,
    the forget that makes a class vanish, ``partial_fit``'s classes. A family with a label
    mode (QSS) says which rows are unlabeled (:meth:`_unlabeled`)."""

    _fitted_required = ("n_features_in_", "classes_")

    def _unlabeled(self, y: np.ndarray) -> np.ndarray | None:
        """Mask of the rows ``fit`` leaves unlabeled (None: every row is labeled)."""
        return None

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

    def _fit_targets(self, y: Any, n: int) -> tuple[np.ndarray, int]:
        """``fit``'s labels as class indices (UNLABELED = none) and the number of classes;
        sets ``classes_``."""
        y_valid = self._check_y(y, n)
        unlabeled = self._unlabeled(y_valid)
        labeled = np.ones(len(y_valid), dtype=bool) if unlabeled is None else ~unlabeled
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
        # in this machine's byte order, whatever the labels' (a file holds them so)
        self.classes_ = classes.astype(classes.dtype.newbyteorder("="), copy=False)

    def _encode_targets(self, y: Any, n: int) -> np.ndarray:
        """Inserted labels as class indices; an unseen label is refused."""
        y = self._check_y(y, n)
        unlabeled = self._unlabeled(y)
        if unlabeled is not None and np.any(unlabeled):
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

    def _row_labels(self, y: Any) -> np.ndarray:
        """The labels of validated ``y`` as a table model keeps them with its raw rows."""
        return column_or_1d(y)

    def _fit_indices(self, X: np.ndarray, targets: np.ndarray, classes: np.ndarray, ids, after):
        """Fit on validated rows whose labels are already class indices (UNLABELED = none),
        the model's history continued after the change ``after`` (``_fit_engine``)."""
        self._set_classes(classes)
        return self._fit_engine(ids, X, targets, classes.size, after)

    def _forget_checked(self, id_list: list, id_raw: list, erase_inputs: bool) -> Receipt:
        """Forget, refitting from the stored rows if a class would disappear entirely.

        A fit without the rows would not know that class, so the exact answer has fewer
        outputs: every instance is rebuilt on the remaining rows (in the call).
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

    def _refit_without(self, id_list: list, id_raw: list, erase_inputs: bool) -> Receipt:
        """Refit on what remains, with the classes that remain (string or integer labels):
        the model's next state, its history (mode="dp"'s ledger) continued."""
        started = clock.start()
        self.engine_.wait_for_rebuilds()
        rows = self.engine_.snapshot().rows
        gone = set(id_list)
        targets = rows.targets.copy()
        label_only = self._label_only(erase_inputs)
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
        after = (id_raw, [])  # the forgotten ids go on the ledger (mode="dp")
        self._fit_atomically(lambda: self._fit_indices(X, new_targets, classes, ids, after))
        every = list(range(self.engine_.n_instances))
        return self.engine_.receipt(
            "forget", "label" if label_only else "instance", id_raw, every, started, False
        )

    def partial_fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None = None, classes=None):
        """scikit-learn's spelling of :meth:`insert`: the first call fits (``classes``, if
        given, must be exactly the labels of its rows: the classes are fixed then, as
        scikit-learn fixes them at the first ``partial_fit``); later calls insert the rows
        under new ``ids`` (default: the integers after the largest integer id held) and
        return the estimator (:meth:`insert` returns the receipt). Chunks given this way
        build the model one fit on all of them builds, bit for bit."""
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


class RegressorTargets:
    """Targets for a regressor of any family: finite floats (NaN = unlabeled where the family
    has a label mode: :meth:`_allow_unlabeled`)."""

    def _allow_unlabeled(self) -> bool:
        return False

    def _check_y(self, y: Any, n: int, allow_nan: bool = False) -> np.ndarray:
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
            raise ValueError("y contains NaN or infinity; every target must be finite")
        return y

    def _fit_targets(self, y: Any, n: int) -> tuple[np.ndarray, int]:
        """``fit``'s targets (NaN = unlabeled, label mode) and the number of outputs (1)."""
        y_valid = self._check_y(y, n, allow_nan=self._allow_unlabeled())
        n_labeled = int(np.count_nonzero(~np.isnan(y_valid)))
        if n_labeled < 2:
            raise ValueError(
                f"got n_samples={n_labeled} labeled row(s); a regressor needs at least 2"
            )
        return y_valid, 1

    def _encode_targets(self, y: Any, n: int) -> np.ndarray:
        return self._check_y(y, n, allow_nan=False)

    def _row_labels(self, y: Any) -> np.ndarray:
        """The targets of validated ``y`` as a table model keeps them with its raw rows."""
        return np.asarray(column_or_1d(y), dtype=np.float64)

    def partial_fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None = None):
        """scikit-learn's spelling of :meth:`insert`: the first call fits, later calls insert
        the rows under new ``ids`` (default: the integers after the largest integer id held)
        and return the estimator."""
        return self._partial_fit(X, y, ids)
