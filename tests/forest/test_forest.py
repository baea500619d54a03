"""ExactForestClassifier is exact: after forget or insert its predictions, digest and every
tree's structure are bit for bit those of a fit on the rows held (SPEC §5.1), whatever the
history — random deletions, D° hits, inserts, adversarial deletions that flip a split."""

from __future__ import annotations

import numpy as np
import pytest

from forgetting import ExactForestClassifier


def _data(n=600, d=6, k=3, seed=0, nan=0.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    score = X[:, 0] + X[:, 1 % d] * X[:, 2 % d] + 0.5 * rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, k + 1)[1:-1]))
    if nan:
        X[rng.random(X.shape) < nan] = np.nan
    return X, y


def _refit(model, X, y, keep_ids):
    keep_ids = list(keep_ids)
    return ExactForestClassifier(**model.get_params()).fit(X[keep_ids], y[keep_ids], keep_ids)


def _assert_same(a, b, X):
    assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    assert a.state_digest() == b.state_digest()
    assert a.structure_digest() == b.structure_digest()
    for t in range(a.n_estimators):
        assert np.array_equal(a.engine_.structure(t), b.engine_.structure(t))


def _outside_pool(model, ids):
    pool = set(model.pool_ids_)
    return [i for i in ids if i not in pool]


PARAMS = dict(n_estimators=6, max_features=3, min_bin_rows=60, cache_min_rows=16, n_instances=1)
# one forest, one D°: a D° hit refits in the call (tests/forest/test_forest_instances.py covers the
# default n_instances=3, where it rebuilds one instance in the background)


def test_random_deletions_equal_a_refit():
    X, y = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y)
    rng = np.random.default_rng(1)
    victims = _outside_pool(model, rng.permutation(len(y)).tolist())[:60]
    for chunk in np.array_split(np.array(victims), 12):
        receipt = model.forget(chunk.tolist())
        assert receipt.instances_hit == ()
    refit = _refit(model, X, y, sorted(set(range(len(y))) - set(victims)))
    _assert_same(model, refit, X)


def test_deleting_a_pool_row_refits_to_the_same_bits():
    X, y = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y)
    pool = model.pool_ids_
    gone = pool[:2] + [i for i in range(10) if i not in pool][:2]
    receipt = model.forget(gone)
    assert receipt.instances_hit == (0,)
    _assert_same(model, _refit(model, X, y, sorted(set(range(len(y))) - set(gone))), X)


def test_inserts_equal_a_refit():
    X, y = _data(n=700)
    model = ExactForestClassifier(**PARAMS).fit(X[:500], y[:500])
    for lo in range(500, 700, 40):
        model.insert(X[lo : lo + 40], y[lo : lo + 40], list(range(lo, lo + 40)))
    _assert_same(model, _refit(model, X, y, range(700)), X)


def _gains(P, L, min_leaf):
    """Gini gains of the cached candidates (numpy twin of the kernel's rule)."""
    n = P.sum()
    base = float((P.astype(np.int64) ** 2).sum()) / n
    out = []
    for Lj in L.astype(np.int64):
        nl = Lj.sum()
        nr = n - nl
        if nl < min_leaf or nr < min_leaf:
            out.append(-np.inf)
            continue
        out.append((Lj**2).sum() / nl + ((P - Lj) ** 2).sum() / nr - base)
    return np.array(out)


def test_adversarial_deletions_that_flip_the_root_split_equal_a_refit():
    X, y = _data(n=400, seed=3)
    model = ExactForestClassifier(**PARAMS).fit(X, y)
    forest = model.engine_.instance(0)
    A = forest.A
    root = int(A.roots[0])
    slot = int(A.slot[root])
    assert slot >= 0, "the root keeps cached candidate counts"
    before = forest.structure(0)
    chosen = int(A.choice[root])
    codes = A.codes
    feats, thrs = A.cfeat[slot], A.cthr[slot]
    alive = _outside_pool(model, list(range(len(y))))
    gone = []
    # greedy: delete the row that most narrows the chosen split's lead over the runner-up
    for _ in range(200):
        P = A.counts[root].astype(np.int64)
        L = A.cleft[slot].astype(np.int64)
        g = _gains(P, L, 1)
        if int(np.argmax(g)) != chosen:
            break
        best_row, best_margin = None, np.inf
        for r in alive[:: max(1, len(alive) // 120)]:
            p = forest.rows.slots_of([r])[0]
            Pr = P.copy()
            Pr[A.y[p]] -= 1
            Lr = L.copy()
            goes = codes[p, feats] <= thrs
            Lr[goes, A.y[p]] -= 1
            gr = _gains(Pr, Lr, 1)
            margin = gr[chosen] - np.max(np.delete(gr, chosen))
            if margin < best_margin:
                best_row, best_margin = r, margin
        model.forget([best_row])
        alive.remove(best_row)
        gone.append(best_row)
        A = model.engine_.instance(0).A
        if int(A.roots[0]) != root or int(A.feat[A.roots[0]]) != int(feats[chosen]):
            break
    after = model.engine_.structure(0)
    assert not np.array_equal(before[:2], after[:2]), "the deletions flipped the root split"
    _assert_same(model, _refit(model, X, y, sorted(set(range(len(y))) - set(gone))), X)


def test_history_independence():
    X, y = _data(n=500, seed=5)
    a = ExactForestClassifier(**PARAMS).fit(X, y)
    ids = _outside_pool(a, list(range(500)))
    gone = ids[:40]
    a.forget(gone[:20])
    a.forget(gone[20:])
    b = ExactForestClassifier(**PARAMS).fit(X, y)
    for i in reversed(gone):
        b.forget([i])
    c = ExactForestClassifier(**PARAMS).fit(X[ids[40:80]], y[ids[40:80]], ids[40:80])
    rest = sorted(set(range(500)) - set(gone) - set(ids[40:80]))
    c.insert(X[rest], y[rest], rest)
    _assert_same(a, b, X)
    _assert_same(a, c, X)


def test_missing_values_are_their_own_bin_and_stay_exact():
    X, y = _data(n=500, nan=0.2, seed=7)
    model = ExactForestClassifier(**PARAMS).fit(X, y)
    assert np.all(np.isfinite(model.predict_proba(X)))
    victims = _outside_pool(model, list(range(0, 500, 7)))
    model.forget(victims)
    _assert_same(model, _refit(model, X, y, sorted(set(range(500)) - set(victims))), X)


def test_cache_threshold_changes_speed_only():
    X, y = _data(n=500, seed=9)
    params = {**PARAMS, "cache_min_rows": 1}
    a = ExactForestClassifier(**params).fit(X, y)
    b = ExactForestClassifier(**{**params, "cache_min_rows": 10**6}).fit(X, y)
    victims = _outside_pool(a, list(range(0, 500, 5)))
    for i in victims:
        a.forget([i])
        b.forget([i])
    assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    assert [a.engine_.structure(t).tolist() for t in range(6)] == [
        b.engine_.structure(t).tolist() for t in range(6)
    ]


def test_random_configurations_with_interleaved_forgets_and_inserts():
    """Fuzz: random sizes, widths, classes, ρ, depth, leaf size, instances, seeds; forgets
    (D° hits included) and inserts interleaved; after every step (and its rebuilds) the
    model equals a refit."""
    rng = np.random.default_rng(2026)
    instances = set()
    for trial in range(8):
        n = int(rng.integers(60, 400))
        d = int(rng.integers(1, 9))
        k = int(rng.integers(2, 6))
        X, y = _data(n=n + 80, d=d, k=k, seed=trial, nan=float(rng.choice([0.0, 0.1])))
        params = dict(
            n_estimators=int(rng.integers(1, 5)),
            max_features=int(rng.integers(1, 2 * d + 1)),
            min_samples_leaf=int(rng.integers(1, 4)),
            max_depth=[None, 3, 8][int(rng.integers(3))],
            max_bins=int(rng.choice([4, 16, 255])),
            rho=float(rng.choice([0.02, 0.1, 0.3])),
            min_bin_rows=int(rng.choice([0, 20])),
            cache_min_rows=int(rng.choice([1, 8, 64])),
            random_state=int(rng.integers(0, 1000)),
        )
        params["n_instances"] = int(rng.integers(1, params["n_estimators"] + 1))
        instances.add(params["n_instances"])
        held = list(range(n))
        model = ExactForestClassifier(**params).fit(X[held], y[held], held)
        spare = list(range(n, n + 80))
        for _ in range(6):
            if rng.random() < 0.6 and len(held) > 20:
                victims = rng.choice(held, size=int(rng.integers(1, 6)), replace=False).tolist()
                left = np.bincount(y[sorted(set(held) - set(victims))], minlength=k)
                if np.count_nonzero(left) < 2:
                    continue
                model.forget(victims)
                held = [i for i in held if i not in set(victims)]
            elif spare:
                new = spare[: int(rng.integers(1, 6))]
                spare = spare[len(new) :]
                if not set(y[new]) <= set(model.classes_):
                    continue
                model.insert(X[new], y[new], new)
                held += new
            model.wait_for_rebuilds(timeout=60)
            _assert_same(model, _refit(model, X, y, held), X)
    assert max(instances) > 1


def test_compaction_keeps_the_bits():
    X, y = _data(n=900, seed=11)
    model = ExactForestClassifier(**{**PARAMS, "cache_min_rows": 400}).fit(X, y)
    victims = _outside_pool(model, list(range(900)))[:400]
    nodes_before = model.engine_.instance(0).A.top[0]
    for i in victims:
        model.forget([i])
    A = model.engine_.instance(0).A
    assert A.top[0] < nodes_before + 5 * A.top[3] + 10**6
    _assert_same(model, _refit(model, X, y, sorted(set(range(900)) - set(victims))), X)


# -- bad input: one clear error, nothing changed ------------------------------------------
@pytest.fixture()
def fitted():
    X, y = _data(n=300, seed=13)
    return ExactForestClassifier(**PARAMS).fit(X, y, [f"r{i}" for i in range(300)]), X, y


def _unchanged(model, X, call, exc, match):
    digest = model.structure_digest()
    proba = model.predict_proba(X)
    with pytest.raises(exc, match=match):
        call()
    assert model.structure_digest() == digest
    assert np.array_equal(model.predict_proba(X), proba)


def test_bad_requests_change_nothing(fitted):
    model, X, y = fitted
    _unchanged(model, X, lambda: model.forget(["r1", "nope"]), KeyError, "unknown ids")
    _unchanged(model, X, lambda: model.forget(["r1", "r1"]), ValueError, "unique")
    _unchanged(model, X, lambda: model.forget("r1"), TypeError, "sequence")
    _unchanged(model, X, lambda: model.insert(X[:1], y[:1], ["r2"]), ValueError, "present")
    _unchanged(model, X, lambda: model.insert(X[:1, :3], y[:1], ["n"]), ValueError, "features")
    bad = X[:1].copy()
    bad[0, 0] = np.inf
    _unchanged(model, X, lambda: model.insert(bad, y[:1], ["n"]), ValueError, "infinity|range")
    _unchanged(model, X, lambda: model.insert(X[:1], [99], ["n"]), ValueError, "unseen")
    every = [f"r{i}" for i in range(300) if y[i] != 0]
    _unchanged(model, X, lambda: model.forget(every), ValueError, "fewer than 2 classes")


def test_forgetting_a_whole_class_refits_without_it(fitted):
    model, X, y = fitted
    gone = [f"r{i}" for i in range(300) if y[i] == 0]
    model.forget(gone)
    assert model.classes_.tolist() == [1, 2]
    keep = [i for i in range(300) if y[i] != 0]
    refit = ExactForestClassifier(**PARAMS).fit(X[keep], y[keep], [f"r{i}" for i in keep])
    _assert_same(model, refit, X)


def test_compiled_encoding_equals_the_numpy_definition():
    from forgetting.forest.binning import encode

    X, y = _data(n=400, nan=0.1, seed=17)
    model = ExactForestClassifier(**{**PARAMS, "max_bins": 16}).fit(X, y)
    forest = model.engine_.instance(0)
    Z = np.vstack([X, X + 1e-3, np.array(forest.edges[0][:1].tolist() * X.shape[1])[None, :]])
    Z = Z.astype(np.float32)
    assert np.array_equal(forest._encode(Z), encode(Z, forest.edges))


def test_an_insert_that_joins_the_pool_refits_to_the_same_bits():
    from forgetting.schema.membership import draws, id_bytes

    X, y = _data(n=500, seed=19)
    model = ExactForestClassifier(**{**PARAMS, "min_bin_rows": 0, "rho": 0.1}).fit(X[:450], y[:450])
    member = next(
        i
        for i in range(450, 500)
        if draws(model.engine_.membership_key, [id_bytes(i)], 1)[0, 0] < 0.1
    )
    outsider = next(
        i
        for i in range(450, 500)
        if draws(model.engine_.membership_key, [id_bytes(i)], 1)[0, 0] >= 0.1
    )
    assert model.insert(X[[outsider]], y[[outsider]], [outsider]).instances_hit == ()
    assert model.insert(X[[member]], y[[member]], [member]).instances_hit == (0,)
    _assert_same(model, _refit(model, X, y, list(range(450)) + [outsider, member]), X)


def test_stale_subtrees_rebuilt_when_read_give_the_refits_bits():
    """A change leaves the subtree whose choice moved as its rows (a stale node); a one-row
    prediction rebuilds only the stale nodes on its paths, a structure digest or a pickle all.
    Every read between changes, and the end state, equal a fit on the rows held."""
    import pickle

    X, y = _data(n=800)
    model = ExactForestClassifier(**PARAMS).fit(X, y)
    rng = np.random.default_rng(3)
    victims = _outside_pool(model, rng.permutation(len(y)).tolist())[:120]
    seen_stale = partial = False
    for i, v in enumerate(victims):
        model.forget([v])
        seen_stale |= model.engine_.n_stale > 0
        if i % 3 == 0:
            model.predict_proba(X[i : i + 1])
            partial |= model.engine_.n_stale > 0  # others stay stale
        if i % 40 == 39:  # one-row reads against a refit, before anything rebuilds them all
            ref = _refit(model, X, y, sorted(set(range(len(y))) - set(victims[: i + 1])))
            for j in range(0, 800, 97):
                assert np.array_equal(
                    model.predict_proba(X[j : j + 1]), ref.predict_proba(X[j : j + 1])
                )
    assert seen_stale and partial
    assert model.engine_.n_stale > 0
    copy = pickle.loads(pickle.dumps(model))
    assert copy.engine_.n_stale == 0
    new = [int(i) for i in victims[:30]]
    model.insert(X[new], y[new], ids=new)  # rows come back, some into stale subtrees
    keep = sorted(set(range(len(y))) - set(victims[30:]))
    _assert_same(model, _refit(model, X, y, keep), X)
    assert model.engine_.n_stale == 0
    keep = sorted(set(range(len(y))) - set(victims))
    _assert_same(copy, _refit(model, X, y, keep), X)
