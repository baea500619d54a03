"""SISA training (Sharded, Isolated, Sliced, Aggregated), Bourtoule et al., IEEE S&P 2021.

SISA makes unlearning cheap by *isolation*: the training set is split into
disjoint shards, one model is trained per shard, and predictions are aggregated.
Forgetting a row only requires retraining the shard that held it.  With
``n_slices > 1`` each shard is further cut into slices trained incrementally —
checkpoint j is checkpoint j−1 warm-started on slices 1..j — so a deletion in slice j
retrains only from checkpoint j−1 on (estimators without ``warm_start`` retrain each
checkpoint from scratch, which keeps exactness but saves nothing).

Two design choices make the result *history independent*, i.e. ``fit(D);
forget(R)`` yields exactly (``numpy.array_equal``) the predictions of ``fit(D \\ R)``
with the same parameters:

* a row's shard is a function of ``hash(random_state, id)`` only, so removing or
  adding other rows never moves it (a random permutation of ``range(n)``, as in a
  naive implementation, would reshuffle everything after each deletion);
* inside a shard, rows are ordered canonically by that hash before training, so
  neither the input order nor the order of earlier edits leaks into the model.

History independence additionally requires the per-shard estimator to be
deterministic given its training data: pass a fixed ``random_state`` to stochastic
estimators (forests, SGD, ...).  ``classes_`` is recomputed from the rows still
held, so forgetting every row of a class removes that class, exactly as a refit
would.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.utils.validation import check_is_fitted

from ._ids import (
    RowId,
    canonical_order,
    check_forget_request,
    check_int_param,
    check_known_labels,
    check_labels,
    check_new_ids,
    check_targets,
    check_X,
    id_keys,
    normalize_ids,
)


@dataclass(frozen=True, eq=False)
class Shard:
    """The rows of one shard, in canonical (hash) order.

    These are the rows a retrain needs; they are replaced (never mutated in place)
    when the shard changes, so forgotten rows do not linger in the object.
    """

    ids: tuple[RowId, ...]
    keys: np.ndarray  # uint64 hash of (random_state, id), sorted ascending
    X: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


class _SingleClassModel:
    """Stand-in for a shard whose rows all carry one label.

    Most sklearn classifiers refuse to fit a single class; SISA semantics are
    simply that such a shard votes for that class with probability 1.
    """

    def __init__(self, label: Any) -> None:
        self.classes_ = np.asarray([label])

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return np.ones((X.shape[0], 1))

    def __repr__(self) -> str:
        return f"_SingleClassModel(label={self.classes_[0]!r})"


def _build_shards(
    ids: list[RowId], keys: np.ndarray, X: np.ndarray, y: np.ndarray, n_shards: int
) -> list[Shard]:
    """Split rows into shards by ``key % n_shards`` and order each canonically."""
    order = canonical_order(keys, ids)
    shard_of = keys[order] % np.uint64(n_shards)
    shards = []
    for k in range(n_shards):
        rows = order[shard_of == np.uint64(k)]
        shards.append(Shard(tuple(ids[i] for i in rows.tolist()), keys[rows], X[rows], y[rows]))
    return shards


def _merge(shard: Shard, ids: list[RowId], keys: np.ndarray, X: np.ndarray, y: np.ndarray) -> Shard:
    """Add rows to a shard, restoring canonical order."""
    all_ids = list(shard.ids) + ids
    all_keys = np.concatenate([shard.keys, keys])
    order = canonical_order(all_keys, all_ids)
    return Shard(
        tuple(all_ids[i] for i in order.tolist()),
        all_keys[order],
        np.concatenate([shard.X, X])[order],
        np.concatenate([shard.y, y])[order],
    )


def _drop(shard: Shard, gone: set[RowId]) -> Shard:
    """Remove rows from a shard; the canonical order of the rest is preserved."""
    keep = np.fromiter((i not in gone for i in shard.ids), dtype=bool, count=len(shard))
    ids = tuple(i for i, k in zip(shard.ids, keep, strict=True) if k)
    return Shard(ids, shard.keys[keep], shard.X[keep], shard.y[keep])


def _same_classes(model: Any, y: np.ndarray) -> bool:
    """Warm starts need the same label set (a classifier's coefficient shape depends on it)."""
    classes = getattr(model, "classes_", None)
    return classes is None or np.array_equal(classes, np.unique(y))


class _BaseSISA(BaseEstimator):
    """Shared sharding / bookkeeping logic; subclasses decide how a shard is trained."""

    def __init__(
        self, n_shards: int = 5, estimator: Any = None, random_state: int = 0, n_slices: int = 1
    ) -> None:
        self.n_shards = n_shards
        self.estimator = estimator
        self.random_state = random_state
        self.n_slices = n_slices

    # -- hooks ---------------------------------------------------------------
    def _default_estimator(self) -> Any:
        raise NotImplementedError

    def _check_y(self, y: Any, n: int) -> np.ndarray:
        raise NotImplementedError

    def _fit_rows(self, X: np.ndarray, y: np.ndarray, template: Any, previous: Any) -> Any:
        """Train on rows, warm-starting from ``previous`` when the estimator supports it."""
        if len(y) == 0:
            return None
        if previous is not None and "warm_start" in template.get_params():
            model = copy.deepcopy(previous)
            if hasattr(model, "set_params") and _same_classes(model, y):
                return model.set_params(warm_start=True).fit(X, y)
        return clone(template).fit(X, y)

    def _train_slices(
        self, shard: Shard, template: Any, checkpoints: list, start: int
    ) -> list[Any]:
        """Checkpoints of a shard: reuse those before ``start``, retrain the rest in order."""
        n_slices = len(checkpoints) if checkpoints else self._n_slices
        slice_of = (shard.keys // np.uint64(self._n_shards)) % np.uint64(n_slices)
        out = list(checkpoints[:start])
        for j in range(start, n_slices):
            rows = slice_of <= np.uint64(j)
            previous = out[j - 1] if j > 0 else None
            out.append(self._fit_rows(shard.X[rows], shard.y[rows], template, previous))
        return out

    def _first_slice(self, keys: np.ndarray) -> int:
        """The earliest slice holding any of these rows: retraining restarts there."""
        return int(((keys // np.uint64(self._n_shards)) % np.uint64(self._n_slices)).min())

    def _derived_state(self, shards: list[Shard]) -> dict[str, Any]:
        """Learned attributes computed from the full set of held rows (e.g. classes_)."""
        return {}

    # -- public API ----------------------------------------------------------
    def fit(self, X: Any, y: Any, ids: Any = None) -> _BaseSISA:
        """Shard the rows by id hash and train one estimator per shard.

        ``ids`` default to ``range(n)``; they must be unique ints or strings and are
        what :meth:`forget` refers to later.
        """
        n_shards = check_int_param("n_shards", self.n_shards, minimum=1)
        seed = check_int_param("random_state", self.random_state)
        X = check_X(X)
        n = X.shape[0]
        if n == 0:
            raise ValueError("cannot fit on 0 rows")
        y = self._check_y(y, n)
        ids = normalize_ids(ids, n)
        shards = _build_shards(ids, id_keys(ids, seed), X, y, n_shards)
        derived = self._derived_state(shards)
        # Snapshot the estimator so later set_params() cannot make shards inconsistent.
        template = clone(
            self.estimator if self.estimator is not None else self._default_estimator()
        )
        self._n_shards = n_shards
        self._n_slices = check_int_param("n_slices", self.n_slices, minimum=1)
        checkpoints = [self._train_slices(s, template, [], 0) for s in shards]
        for name, value in derived.items():
            setattr(self, name, value)
        self.n_features_in_ = X.shape[1]
        self.shards_ = shards
        self.checkpoints_ = checkpoints
        self.estimators_ = [c[-1] for c in checkpoints]
        self.shard_of_ = {i: k for k, s in enumerate(shards) for i in s.ids}
        # forget()/insert() use the seed and estimator of the fit, even after set_params()
        self._seed = seed
        self._template = template
        self.n_samples_ = n
        return self

    def forget(self, ids: Any) -> dict[str, Any]:
        """Remove rows by id and retrain only the shards that held them.

        Returns ``{"shards_retrained": [...], "seconds": float}``.  Unknown ids raise
        ``KeyError``; empty or duplicated requests, or forgetting every row, raise
        ``ValueError``.  On any error the model is left unchanged: all new state is
        built first and only then swapped in.
        """
        check_is_fitted(self)
        t0 = time.perf_counter()
        req = check_forget_request(ids, self.shard_of_)
        if len(req) >= self.n_samples_:
            raise ValueError("cannot forget every row; fit a new model instead")
        by_shard: dict[int, set[RowId]] = {}
        for i in req:
            by_shard.setdefault(self.shard_of_[i], set()).add(i)
        affected = sorted(by_shard)
        shards = list(self.shards_)
        checkpoints = list(self.checkpoints_)
        retrained = 0
        for k in affected:
            gone = np.fromiter((i in by_shard[k] for i in shards[k].ids), dtype=bool)
            start = self._first_slice(shards[k].keys[gone])
            shards[k] = _drop(shards[k], by_shard[k])
            checkpoints[k] = self._train_slices(shards[k], self._template, checkpoints[k], start)
            retrained += self._n_slices - start
        self._commit(shards, checkpoints)
        for i in req:
            del self.shard_of_[i]
        self.n_samples_ -= len(req)
        return {
            "shards_retrained": affected,
            "slices_retrained": retrained,
            "seconds": time.perf_counter() - t0,
        }

    def insert(self, X: Any, y: Any, ids: Any) -> dict[str, Any]:
        """Add rows (with new, unique ids) and retrain only the shards receiving them.

        ``fit(D); insert(E)`` is identical to ``fit(D + E)``.  Returns the same dict
        as :meth:`forget`.
        """
        check_is_fitted(self)
        t0 = time.perf_counter()
        X = check_X(X, self.n_features_in_, type(self).__name__)
        n = X.shape[0]
        if n == 0:
            raise ValueError("insert() needs at least one row")
        y = self._check_y(y, n)
        if y.shape[1:] != self.shards_[0].y.shape[1:]:
            raise ValueError(
                f"y rows have shape {y.shape[1:]}, but the model was fit with "
                f"{self.shards_[0].y.shape[1:]}"
            )
        self._check_insert_labels(y)
        new_ids = check_new_ids(ids, n, self.shard_of_)
        keys = id_keys(new_ids, self._seed)
        target = (keys % np.uint64(len(self.shards_))).astype(np.intp)
        affected = sorted(set(target.tolist()))
        shards = list(self.shards_)
        checkpoints = list(self.checkpoints_)
        for k in affected:
            rows = np.flatnonzero(target == k)
            shards[k] = _merge(
                shards[k], [new_ids[r] for r in rows.tolist()], keys[rows], X[rows], y[rows]
            )
            start = self._first_slice(keys[rows])
            checkpoints[k] = self._train_slices(shards[k], self._template, checkpoints[k], start)
        self._commit(shards, checkpoints)
        self.shard_of_.update((i, int(k)) for i, k in zip(new_ids, target.tolist(), strict=True))
        self.n_samples_ += n
        return {"shards_retrained": affected, "seconds": time.perf_counter() - t0}

    def _commit(self, shards: list[Shard], checkpoints: list[list[Any]]) -> None:
        """Swap in new shards and checkpoints (built completely before, so errors change
        nothing) and the attributes derived from them."""
        derived = self._derived_state(shards)
        for name, value in derived.items():
            setattr(self, name, value)
        self.shards_ = shards
        self.checkpoints_ = checkpoints
        self.estimators_ = [c[-1] for c in checkpoints]

    def _check_insert_labels(self, y: np.ndarray) -> None:
        return None

    def _active(self) -> list[Any]:
        return [m for m in self.estimators_ if m is not None]


class SISAClassifier(ClassifierMixin, _BaseSISA):
    """SISA ensemble classifier with exact, history-independent unlearning.

    Parameters
    ----------
    n_shards : int, default=5
        Number of disjoint shards (one model each).  Shards may end up empty when
        ``n_shards`` is large relative to the data; empty shards are skipped.
    estimator : sklearn classifier, default=None
        Cloned for each shard.  ``None`` means ``LogisticRegression(max_iter=1000)``.
        Estimators without ``predict_proba`` vote with one-hot predictions.
    random_state : int, default=0
        Salt of the id hash that assigns rows to shards and orders them.
    n_slices : int, default=1
        Slices per shard. Checkpoint j is trained on slices 1..j, warm-started from
        checkpoint j−1; a deletion in slice j retrains from checkpoint j−1 on.

    Attributes
    ----------
    classes_ : ndarray
        Sorted labels among the rows currently held.
    estimators_ : list
        Per-shard fitted model; ``None`` for an empty shard.
    shards_ : list of Shard
        Per-shard training rows (ids, hash keys, X, y) in canonical order.
    shard_of_ : dict
        Id -> shard index for every row held.
    checkpoints_ : list of lists
        Per shard, the model after each slice; the last one is the shard's model.
    n_samples_, n_features_in_ : int
    """

    def _default_estimator(self) -> Any:
        return LogisticRegression(max_iter=1000)

    def _check_y(self, y: Any, n: int) -> np.ndarray:
        return check_labels(y, n)

    def _fit_rows(self, X: np.ndarray, y: np.ndarray, template: Any, previous: Any) -> Any:
        if len(y) and np.unique(y).size == 1:
            return _SingleClassModel(y[0])
        if isinstance(previous, _SingleClassModel):
            previous = None
        return super()._fit_rows(X, y, template, previous)

    def _derived_state(self, shards: list[Shard]) -> dict[str, Any]:
        return {"classes_": np.unique(np.concatenate([s.y for s in shards]))}

    def _check_insert_labels(self, y: np.ndarray) -> None:
        check_known_labels(y, self.classes_)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Mean of the non-empty shards' class probabilities over ``classes_``.

        A shard that never saw a class contributes 0 for it.  Shards are summed in
        index order so the floating-point result is reproducible.
        """
        check_is_fitted(self)
        X = check_X(X, self.n_features_in_, type(self).__name__)
        out = np.zeros((X.shape[0], self.classes_.size))
        models = self._active()
        for m in models:
            cols = np.searchsorted(self.classes_, m.classes_)
            if hasattr(m, "predict_proba"):
                out[:, cols] += m.predict_proba(X)
            else:  # hard vote
                pred = np.searchsorted(self.classes_, m.predict(X))
                out[np.arange(X.shape[0]), pred] += 1.0
        out /= len(models)
        return out

    def predict(self, X: Any) -> np.ndarray:
        """Label with the highest mean probability (ties: the smallest label)."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


class SISARegressor(RegressorMixin, _BaseSISA):
    """SISA ensemble regressor: mean of per-shard predictions.

    Parameters are those of :class:`SISAClassifier`; the default estimator is
    ``Ridge(alpha=1.0)``.  ``y`` may be 1-D or 2-D (multi-output).
    """

    def _default_estimator(self) -> Any:
        return Ridge(alpha=1.0)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _check_y(self, y: Any, n: int) -> np.ndarray:
        return check_targets(y, n)

    def predict(self, X: Any) -> np.ndarray:
        """Mean of the non-empty shards' predictions, summed in shard order."""
        check_is_fitted(self)
        X = check_X(X, self.n_features_in_, type(self).__name__)
        models = self._active()
        out = np.asarray(models[0].predict(X), dtype=np.float64).copy()
        for m in models[1:]:
            out += m.predict(X)
        out /= len(models)
        return out
