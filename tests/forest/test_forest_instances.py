"""A forest split into instances with their own D° (forgetting.forest.instances).

A forget or insert that moves one instance's D° rebuilds it on a thread while the others
serve; the changes made meanwhile reach the rebuilt instance; once no rebuild is pending the
model is a fit on the rows held, bit for bit (predictions, structure and state digests). The
rebuild threads are held at a gate where a test needs to look at the model mid-rebuild.
"""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.utils._param_validation import InvalidParameterError

from forgetting import ExactForestClassifier, ExactForestRegressor
from forgetting.forest import core as forest_core
from forgetting.schema.membership import draws, id_bytes

PARAMS = {"n_estimators": 9, "n_instances": 3, "min_bin_rows": 40, "max_features": 3}


def _threshold_with(model, r, new_draws):
    """Instance r's D° threshold once a row with ``new_draws`` is in (the rule a fit uses)."""
    from forgetting.schema.membership import MembershipRule

    table, forest = model.engine_.table, model.engine_.instance(r)
    held = table.draws[table.live(), r]
    rule = MembershipRule(forest.config.rho, forest.config.min_bin_rows)
    return rule.threshold(np.concatenate([held, new_draws[:, r]]))


def _data(n=1500, seed=0):
    X, y = make_classification(n, 8, n_informative=5, n_classes=3, random_state=seed)
    return X.astype(np.float32), y, [f"u{i}" for i in range(n)]


def _pools(model) -> list[set]:
    """Each instance's D° ids."""
    return [set(model.engine_.instance(r).pool_ids()) for r in range(model.n_instances)]


def _outside(model, ids) -> list:
    """Ids in no instance's D°."""
    every = set().union(*_pools(model))
    return [i for i in ids if i not in every]


def _only_in(model, r: int) -> list:
    """Ids in instance r's D° and no other's."""
    pools = _pools(model)
    others = set().union(*(p for s, p in enumerate(pools) if s != r))
    return sorted(pools[r] - others, key=str)


def _refit(model, X_all, y_all, ids_all):
    """A fit with the same parameters on the rows ``model`` holds (looked up by id)."""
    where = {i: p for p, i in enumerate(ids_all)}
    held = model.engine_.ids()
    pos = [where[i] for i in held]
    return type(model)(**model.get_params()).fit(X_all[pos], y_all[pos], held)


def _assert_refit(model, X_all, y_all, ids_all) -> None:
    model.wait_for_rebuilds(timeout=60)
    ref = _refit(model, X_all, y_all, ids_all)
    assert np.array_equal(model.predict_proba(X_all), ref.predict_proba(X_all))
    assert model.structure_digest() == ref.structure_digest()
    assert model.state_digest() == ref.state_digest()


class Gate:
    """Holds every rebuild thread's fit until opened; counts the fits rebuild threads ran."""

    def __init__(self, monkeypatch, *, fail: int = 0):
        self.opened = threading.Event()
        self.entered = threading.Event()
        self.fits = 0
        self.fail = fail
        real = forest_core.ExactForest.grow
        gate = self

        def grow(forest, *args, **kwargs):
            if threading.current_thread().name.startswith("forest-rebuild"):
                gate.fits += 1
                gate.entered.set()
                assert gate.opened.wait(60)
                if gate.fail:
                    gate.fail -= 1
                    raise MemoryError("no room for the rebuild")
            return real(forest, *args, **kwargs)

        monkeypatch.setattr(forest_core.ExactForest, "grow", grow)

    def reached(self) -> None:
        assert self.entered.wait(60)
        self.entered.clear()

    def open(self) -> None:
        self.opened.set()


def test_a_d_pool_hit_rebuilds_in_the_background_while_the_others_serve(monkeypatch):
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    gate = Gate(monkeypatch)
    row = _only_in(model, 1)[0]
    receipt = model.forget([row])
    assert receipt.instances_hit == (1,) and receipt.rebuild_started
    gate.reached()
    assert model.engine_.rebuilding == [1]
    # served meanwhile: the mean over instances 0 and 2, each exactly a refit's instance
    ref = _refit(model, X, y, ids)
    trees = [i["trees"] for i in ref.engine_.instance_stats()]
    expected = sum(trees[r] * ref.engine_.instance(r).predict_proba(X) for r in (0, 2))
    assert np.array_equal(model.predict_proba(X), expected / (trees[0] + trees[2]))
    assert model.state_digest() != ref.state_digest()  # instance 1 is not there yet
    stats = model.engine_.instance_stats()
    assert [s["valid"] for s in stats] == [True, False, True]
    gate.open()
    _assert_refit(model, X, y, ids)
    assert gate.fits == 1 and len(model.engine_.rebuild_seconds) == 1


def test_changes_during_a_rebuild_reach_the_rebuilt_instance(monkeypatch):
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X[:1400], y[:1400], ids[:1400])
    outside = _outside(model, ids[:1400])  # (helpers that read D° wait for rebuilds)
    new = [i for i in range(1400, 1500) if not _joins_a_pool(model, ids[i])][:6]
    hit = _only_in(model, 1)[0]
    gate = Gate(monkeypatch)
    model.forget([hit])
    gate.reached()
    model.forget(outside[:10])
    model.forget([outside[10]])
    model.insert(X[new], y[new], [ids[i] for i in new])
    model.forget([ids[new[0]]])
    assert model.engine_.rebuilding == [1]
    gate.open()
    _assert_refit(model, X, y, ids)


def _joins_a_pool(model, row_id) -> bool:
    p = model.n_instances
    d = draws(model.engine_.membership_key, [id_bytes(row_id)], p)[0]
    return any(d[r] < model.engine_.instance(r).pool_threshold for r in range(p))


def test_a_second_hit_on_a_rebuilding_instance_starts_it_over(monkeypatch):
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    gate = Gate(monkeypatch)
    first, second = _only_in(model, 1)[:2]
    model.forget([first])
    gate.reached()
    old_job = model.engine_.jobs.job(1)
    receipt = model.forget([second])  # in the rebuilding instance's D°: it starts over
    assert receipt.instances_hit == () and not receipt.rebuild_started
    assert old_job.superseded and model.engine_.jobs.job(1) is not old_job
    gate.open()
    _assert_refit(model, X, y, ids)
    assert gate.fits == 2 and len(model.engine_.rebuild_seconds) == 1
    old_job.thread.join(60)
    assert not old_job.thread.is_alive()  # its fit stopped between trees, nothing landed


def test_a_rebuild_whose_snapshot_a_later_change_outdates_starts_over_when_it_lands(
    monkeypatch,
):
    """A change the early check misses (the D° threshold moved with the rows) is caught
    when the rebuild replays it."""
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    first, second = _only_in(model, 1)[:2]
    gate = Gate(monkeypatch)
    model.forget([first])
    gate.reached()
    model.engine_._thresholds[1] = 0.0  # blind the early check
    model.forget([second])
    gate.open()
    _assert_refit(model, X, y, ids)
    assert gate.fits == 2


def test_a_hit_on_the_last_serving_instance_refits_it_in_the_call(monkeypatch):
    """Issue 69: with every other instance rebuilding, a hit on the last one serving used to
    send it away too, and the next request waited for a rebuild to land. Now that instance
    takes the change in the call (a refit of it alone): requests are served at once, by
    an instance that is exactly a refit's, while the others' fits are held at the gate."""
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    gate = Gate(monkeypatch)
    a, b, c = (_only_in(model, r)[0] for r in (1, 2, 0))
    assert model.forget([a]).rebuild_started
    assert model.forget([b]).rebuild_started
    receipt = model.forget([c])  # the last serving instance: it refits in the call
    assert receipt.instances_hit == (0,)
    assert model.engine_.rebuilding == [1, 2]
    assert [s["valid"] for s in model.engine_.instance_stats()] == [True, False, False]
    assert model.engine_.kept_serving == 1
    served = []
    reader = threading.Thread(target=lambda: served.append(model.predict_proba(X)))
    reader.start()
    reader.join(60)  # the gate is still closed: a wait for a rebuild would hang here
    assert not reader.is_alive() and model.engine_.serve_waits == 0
    ref = _refit(model, X, y, ids)
    assert np.array_equal(served[0], ref.engine_.instance(0).predict_proba(X))
    assert gate.fits == 1  # only the first rebuild reached its fit (one at a time)
    gate.open()
    _assert_refit(model, X, y, ids)
    assert model.engine_.serve_waits == 0


def test_requests_wait_for_a_rebuild_only_when_none_serves(monkeypatch):
    """A model whose every instance was sent away (here by hand: no change does that any
    more) waits for the first rebuild to land, and counts the wait."""
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    engine = model.engine_
    gate = Gate(monkeypatch)
    with engine.locked():
        for r in range(3):
            engine._forests[r] = None
            engine._start_rebuild(r)
    served = []
    reader = threading.Thread(target=lambda: served.append(model.predict_proba(X[:3])))
    reader.start()
    gate.reached()
    assert not served
    gate.open()
    reader.join(60)
    assert len(served) == 1 and engine.serve_waits == 1
    _assert_refit(model, X, y, ids)


def test_a_batch_hitting_every_instance_rebuilds_them_all():
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    batch = [_only_in(model, r)[0] for r in range(3)]
    receipt = model.forget(batch)
    assert receipt.instances_hit == (0, 1, 2) and receipt.rebuild_started
    _assert_refit(model, X, y, ids)
    new = list(range(1400, 1500))
    model.forget([ids[i] for i in new])
    model.insert(X[new], y[new], [ids[i] for i in new])  # joins every D°: all rebuild
    _assert_refit(model, X, y, ids)


def test_rebuilds_fit_one_at_a_time_and_the_first_lands_first(monkeypatch):
    """Three hits at once: the rebuild threads take turns (each fit on every core), so the
    first lands in its own fit's time rather than all three late together."""
    X, y, ids = _data()
    model = ExactForestClassifier(**{**PARAMS, "n_instances": 4}).fit(X, y, ids)
    real = forest_core.ExactForest.grow
    running, most, landed = [0], [0], []
    count = threading.Lock()

    def fit(forest, *args, **kwargs):
        rebuild = threading.current_thread().name.startswith("forest-rebuild")
        if rebuild:
            with count:
                running[0] += 1
                most[0] = max(most[0], running[0])
                landed.append(len(model.engine_.rebuild_seconds))
        try:
            return real(forest, *args, **kwargs)
        finally:
            if rebuild:
                with count:
                    running[0] -= 1

    monkeypatch.setattr(forest_core.ExactForest, "grow", fit)
    for r in (1, 2, 3):  # instance 0 serves meanwhile
        assert model.forget([_only_in(model, r)[0]]).rebuild_started
    _assert_refit(model, X, y, ids)
    assert most[0] == 1 and len(landed) == 3
    assert landed == [0, 1, 2]  # each fit began after the one before had landed its instance


def test_one_instance_refits_in_the_call_as_before():
    X, y, ids = _data()
    model = ExactForestClassifier(**{**PARAMS, "n_instances": 1}).fit(X, y, ids)
    receipt = model.forget([model.pool_ids_[0]])
    assert receipt.instances_hit == (0,) and not receipt.rebuild_started
    assert model.engine_.rebuilding == []
    _assert_refit(model, X, y, ids)


def test_an_insert_joining_a_d_pool_rebuilds_that_instance(monkeypatch):
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X[:1000], y[:1000], ids[:1000])
    p = model.n_instances
    joins = [
        i
        for i in range(1000, 1500)
        if sum(
            draws(model.engine_.membership_key, [id_bytes(ids[i])], p)[0, r]
            < _threshold_with(model, r, draws(model.engine_.membership_key, [id_bytes(ids[i])], p))
            for r in range(p)
        )
        == 1
    ]
    gate = Gate(monkeypatch)
    receipt = model.insert(X[joins[:1]], y[joins[:1]], [ids[joins[0]]])
    assert len(receipt.instances_hit) == 1 and receipt.rebuild_started
    gate.reached()
    gate.open()
    _assert_refit(model, X, y, ids)


def test_random_forgets_and_hits_equal_a_refit_with_predictions_meanwhile():
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    errors: list = []
    done = threading.Event()

    def predict_until_done():
        try:
            while not done.is_set():
                model.predict_proba(X[:20])
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    reader = threading.Thread(target=predict_until_done)
    reader.start()
    rng = np.random.default_rng(5)
    outside = _outside(model, ids)
    only = [_only_in(model, r) for r in range(3)]
    hits = [only[2][1], only[0][1], only[1][1], only[2][2]]
    order = list(rng.choice(outside, 30, replace=False))
    for k, hit in enumerate(hits):
        order.insert(7 * k + 3, hit)
    try:
        for row in order:
            model.forget([row])
    finally:
        done.set()
        reader.join()
    assert not errors
    _assert_refit(model, X, y, ids)


def test_a_failed_rebuild_runs_again_on_wait(monkeypatch):
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    gate = Gate(monkeypatch, fail=1)
    model.forget([_only_in(model, 2)[0]])
    gate.reached()
    gate.open()
    _assert_refit(model, X, y, ids)  # wait_for_rebuilds ran it again here


def test_a_rebuild_that_fails_again_raises_on_wait_and_others_serve(monkeypatch):
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    real = forest_core.ExactForest.grow
    gate = Gate(monkeypatch, fail=1)
    model.forget([_only_in(model, 2)[0]])
    gate.reached()
    gate.open()

    def fails(forest, *args, **kwargs):
        raise MemoryError("still no room")

    monkeypatch.setattr(forest_core.ExactForest, "grow", fails)
    with pytest.raises(MemoryError, match="still no room"):
        model.wait_for_rebuilds(timeout=60)
    model.predict_proba(X[:3])  # instances 0 and 1 serve
    monkeypatch.setattr(forest_core.ExactForest, "grow", real)
    _assert_refit(model, X, y, ids)


def test_pickles_and_files_hold_the_model_after_its_rebuilds(monkeypatch, tmp_path):
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    gate = Gate(monkeypatch)
    model.forget([_only_in(model, 0)[0]])
    gate.reached()
    threading.Timer(0.2, gate.open).start()
    copy = pickle.loads(pickle.dumps(model))  # waits for the rebuild
    assert copy.engine_.rebuilding == []
    _assert_refit(copy, X, y, ids)
    copy.forget([_only_in(copy, 1)[0]])  # the copy's instances rebuild too
    _assert_refit(copy, X, y, ids)
    model.save(tmp_path / "m.forest")
    loaded = ExactForestClassifier.load(tmp_path / "m.forest")
    assert loaded.n_instances == 3
    assert loaded.structure_digest() == model.structure_digest()


def test_regressor_instances_equal_a_refit(monkeypatch):
    X, _, ids = _data()
    target = X[:, 0] * 2.0 + np.sin(X[:, 1])
    model = ExactForestRegressor(**{**PARAMS, "n_instances": 2, "n_estimators": 5}).fit(
        X, target, ids
    )
    hit, outside = _only_in(model, 1)[0], _outside(model, ids)[:5]
    gate = Gate(monkeypatch)
    model.forget([hit])
    gate.reached()
    model.forget(outside)
    gate.open()
    model.wait_for_rebuilds(timeout=60)
    held = model.engine_.ids()
    where = {i: p for p, i in enumerate(ids)}
    pos = [where[i] for i in held]
    ref = ExactForestRegressor(**model.get_params()).fit(X[pos], target[pos], held)
    assert np.array_equal(model.predict(X), ref.predict(X))
    assert model.structure_digest() == ref.structure_digest()


def test_instances_split_the_trees_and_differ_in_their_grids():
    X, y, ids = _data()
    model = ExactForestClassifier(**{**PARAMS, "n_estimators": 10}).fit(X, y, ids)
    assert [s["trees"] for s in model.engine_.instance_stats()] == [3, 3, 4]
    pools = _pools(model)
    assert pools[0] != pools[1] and pools[1] != pools[2]
    assert set(model.pool_ids_) == set().union(*pools)
    shares = [len(pool) / len(ids) for pool in pools]
    assert model.effective_rho_ == pytest.approx(1 - np.prod([1 - s for s in shares]))
    # tree t of the whole forest is tree t of a one-instance forest's seeds, on its own grid
    assert model.engine_.structure(9).size > 0


def test_parameters_are_checked():
    X, y, ids = _data(n=300)
    # at most one instance per tree (the default 3 with n_estimators=2 gives two)
    four = ExactForestClassifier(n_estimators=3, n_instances=4).fit(X, y, ids)
    assert four.engine_.n_instances == 3
    assert ExactForestClassifier(n_estimators=2).fit(X, y, ids).engine_.n_instances == 2
    assert ExactForestClassifier(n_estimators=2).n_instances == 3
    with pytest.raises(InvalidParameterError):
        ExactForestClassifier(n_instances=0).fit(X, y, ids)


def test_a_refit_discards_the_rebuilds_of_the_forest_it_replaces(monkeypatch):
    X, y, ids = _data()
    model = ExactForestClassifier(**PARAMS).fit(X, y, ids)
    gate = Gate(monkeypatch)
    model.forget([_only_in(model, 1)[0]])
    gate.reached()
    old = model.engine_
    model.fit(X[:1000], y[:1000], ids[:1000])
    assert old.rebuilding == [] and model.engine_.rebuilding == []
    gate.open()
    _assert_refit(model, X, y, ids)
