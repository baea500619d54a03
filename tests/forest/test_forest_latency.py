"""The forget path's bounds (issue 69): what a one-row prediction builds after a forget.

A forget that flips a node high in a tree leaves its subtree stale (its rows); the next
one-row prediction builds a stale node whole only when it holds at most
``WHOLE_REBUILD_ROWS`` rows, and a bigger one one node at a time along the row's paths —
so it never waits for a whole big subtree, and what it leaves stale is built by later reads,
with the bits of a refit. (That a request never waits for a rebuild while an exact instance
can serve is in test_forest_instances.py.)
"""

from __future__ import annotations

import numpy as np

from forgetting import ExactForestClassifier
from forgetting.forest import core as forest_core

PARAMS = dict(n_estimators=4, max_features=3, min_bin_rows=60, n_instances=1, cache_min_rows=10**6)


def _data(n=1200, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(scale=0.5, size=n) > 0).astype(np.int64)
    return X, y


def _refit(X, y, keep, **params):
    return ExactForestClassifier(**{**PARAMS, **params}).fit(X[keep], y[keep], ids=keep)


def test_a_big_stale_subtree_is_built_along_the_path_only(monkeypatch):
    """With no node cached (``cache_min_rows`` above the rows), a forget leaves every
    tree's root stale with all rows. Even with the whole-rebuild budget at every row
    (``WHOLE_REBUILD_SHARE`` = 1: the root of one tree used to be rebuilt whole), a one-row
    prediction builds nodes of more than ``WHOLE_REBUILD_ROWS`` rows one at a time: the
    siblings off its paths stay stale."""
    monkeypatch.setattr(forest_core, "WHOLE_REBUILD_SHARE", 1)
    monkeypatch.setattr(forest_core, "WHOLE_REBUILD_ROWS", 100, raising=False)
    X, y = _data()
    model = ExactForestClassifier(**{**PARAMS, "n_estimators": 1}).fit(X, y, list(range(len(y))))
    pool = set(model.pool_ids_)
    victims = [i for i in range(len(y)) if i not in pool][:3]
    model.forget(victims[:1])
    assert model.engine_.n_stale == 1  # the root, all its rows
    keep = [i for i in range(len(y)) if i not in victims[:1]]
    ref = _refit(X, y, keep, n_estimators=1)
    assert np.array_equal(model.predict_proba(X[:1]), ref.predict_proba(X[:1]))
    assert model.engine_.n_stale > 1  # expanded: the siblings off the path left stale
    # later reads and forgets walk into what was left stale, with a refit's bits
    model.forget(victims[1:])
    keep = [i for i in range(len(y)) if i not in victims]
    ref = _refit(X, y, keep, n_estimators=1)
    for j in range(0, len(y), 151):
        assert np.array_equal(model.predict_proba(X[j : j + 1]), ref.predict_proba(X[j : j + 1]))
    assert np.array_equal(model.predict_proba(X), ref.predict_proba(X))
    assert model.structure_digest() == ref.structure_digest()
    assert model.state_digest() == ref.state_digest()


def test_small_stale_subtrees_are_still_built_whole(monkeypatch):
    """Below ``WHOLE_REBUILD_ROWS`` (and within the budget: one tree's rows here) a stale
    node on the path is built whole: nothing stays stale under it for later forgets to
    scan."""
    monkeypatch.setattr(forest_core, "WHOLE_REBUILD_SHARE", 1)
    monkeypatch.setattr(forest_core, "WHOLE_REBUILD_ROWS", 10**6, raising=False)
    X, y = _data()
    model = ExactForestClassifier(**{**PARAMS, "n_estimators": 1}).fit(X, y, list(range(len(y))))
    victim = next(i for i in range(len(y)) if i not in set(model.pool_ids_))
    model.forget([victim])
    model.predict_proba(X[:1])
    assert model.engine_.n_stale == 0
    keep = [i for i in range(len(y)) if i != victim]
    assert model.structure_digest() == _refit(X, y, keep, n_estimators=1).structure_digest()
