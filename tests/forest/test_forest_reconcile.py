"""A forest instance rebuilt in the background is reconciled with the rows present when it
lands, by the rows' serials (forgetting.rows.slots.SlotRows.diff), as QSS's instances are:
rows forgotten and inserted meanwhile — a slot freed and reused among them — reach it, and
the model then equals a refit bit for bit. The rebuild's fit is held at a gate."""

from __future__ import annotations

import threading

import numpy as np

from forgetting import ExactForestClassifier, ExactForestRegressor
from forgetting.forest import core as forest_core
from forgetting.rows.slots import SlotRows
from forgetting.schema.membership import draws, id_bytes

PARAMS = {"n_estimators": 6, "n_instances": 3, "rho": 0.05, "min_bin_rows": 0, "random_state": 2}
"""D° is exactly the rows drawing below rho (no minimum of rows), so which new rows join it
is known from their draws."""


def _data(n=700, seed=0, regression=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5)).astype(np.float32)
    X[rng.random(X.shape) < 0.04] = np.nan
    signal = np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 1])
    y = signal if regression else (signal > 0).astype(int) + (signal > 1).astype(int)
    return X, y, [f"u{i}" for i in range(n)]


def _gate(monkeypatch):
    """Every rebuild thread's grow waits until the returned event is set; ``entered`` is set
    when one is waiting."""
    opened, entered = threading.Event(), threading.Event()
    real = forest_core.ExactForest.grow

    def grow(forest, *args, **kwargs):
        if threading.current_thread().name.startswith("forest-rebuild"):
            entered.set()
            assert opened.wait(60)
        return real(forest, *args, **kwargs)

    monkeypatch.setattr(forest_core.ExactForest, "grow", grow)
    return opened, entered


def test_serials_say_which_rows_left_and_came():
    X, y, ids = _data(10)
    table = SlotRows(5, 2, b"k" * 16, np.int64)
    table.reset(ids[:6], [i.encode() for i in ids[:6]], X[:6], y[:6])
    copy = table.copy()
    table.remove(table.slots_of(["u1", "u4"]))
    slots = table.add(ids[6:9], [i.encode() for i in ids[6:9]], X[6:9], y[6:9])
    gone, came = copy.diff(table)
    assert sorted(copy.ids_at(gone)) == ["u1", "u4"]
    assert sorted(table.ids_at(came)) == ["u6", "u7", "u8"]
    assert set(slots.tolist()) & set(gone.tolist())  # freed slots were reused
    assert copy.diff(copy)[0].size == copy.diff(copy)[1].size == 0


def _refit_equal(model, X, y, ids):
    model.wait_for_rebuilds(timeout=60)
    where = {row_id: p for p, row_id in enumerate(ids)}
    held = model.ids_
    pos = [where[i] for i in held]
    ref = type(model)(**model.get_params()).fit(X[pos], y[pos], held)
    if hasattr(model, "predict_proba"):
        assert np.array_equal(model.predict_proba(X), ref.predict_proba(X))
    assert np.array_equal(model.predict(X), ref.predict(X))
    assert model.state_digest() == ref.state_digest()
    assert model.structure_digest() == ref.structure_digest()


def test_a_rebuild_reconciles_a_slot_freed_and_reused_meanwhile(monkeypatch):
    for regression in (False, True):
        Model = ExactForestRegressor if regression else ExactForestClassifier
        X, y, ids = _data(regression=regression)
        model = Model(**PARAMS).fit(X[:600], y[:600], ids[:600])
        engine = model.engine_
        pools = [set(engine.instance(r).pool_ids()) for r in range(3)]
        hit = sorted(pools[1] - pools[0] - pools[2])[0]
        outside = [i for i in ids[:600] if not any(i in p for p in pools)]
        opened, entered = _gate(monkeypatch)
        receipt = model.forget([hit])
        assert receipt.instances_hit == (1,) and receipt.rebuild_started
        assert entered.wait(60)
        slot = engine.table.slots_of([outside[0]])[0]
        model.forget([outside[0]])  # frees a slot ...
        # new rows that join no D° (one that did would restart a rebuild: another test's)
        keyed = draws(engine.membership_key, [id_bytes(i) for i in ids[600:]], 3)[:, :3]
        new = [600 + k for k in np.flatnonzero((keyed >= PARAMS["rho"]).all(axis=1))]
        model.insert(X[new[:1]], y[new[:1]], [ids[new[0]]])
        assert engine.table.slots_of([ids[new[0]]])[0] == slot  # ... which an insert reuses
        model.insert(X[new[1:40]], y[new[1:40]], [ids[i] for i in new[1:40]])  # new slots
        model.forget(outside[1:4])
        assert engine.rebuilding == [1]
        opened.set()
        monkeypatch.undo()
        _refit_equal(model, X, y, ids)
