"""save/load: bitwise round trips, refusal of damaged files, and no residue of forgotten rows."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FAST, assert_same_model, classification_data, regression_data

from forgetting import ModelFileError, QSSClassifier, QSSRegressor, persistence


@pytest.mark.parametrize(
    "cls,data", [(QSSClassifier, classification_data), (QSSRegressor, regression_data)]
)
def test_round_trip_is_bitwise_and_keeps_forgetting(tmp_path, cls, data):
    X, y = data()
    ids = [f"u{i}" for i in range(len(y))]
    model = cls(**FAST).fit(X, y, ids)
    model.forget(ids[:10])
    path = tmp_path / "model.qss"
    model.save(path)
    loaded = cls.load(path)
    assert_same_model(model, loaded, X)
    for m in (model, loaded):
        m.forget(ids[10:40])
        m.insert(X[:5], y[:5], ids[:5])
    assert_same_model(model, loaded, X)
    assert loaded.audit_content()
    assert loaded.get_params() == model.get_params()


def test_saving_waits_for_background_rebuilds(tmp_path):
    X, y = classification_data(n=600)
    model = QSSClassifier(**{**FAST, "rebuild": "background"}).fit(X, y)
    rows = model.engine_.rows
    victim = rows.ids[int(np.flatnonzero(rows.members(0))[0])]
    model.forget([victim])
    model.save(tmp_path / "m.qss")
    loaded = QSSClassifier.load(tmp_path / "m.qss")
    assert loaded.engine_.pending_rebuilds() == []
    assert_same_model(model, loaded, X)


@pytest.fixture
def saved(tmp_path):
    X, y = classification_data()
    model = QSSClassifier(**FAST).fit(X, y)
    path = tmp_path / "m.qss"
    model.save(path)
    return path


@pytest.mark.parametrize(
    "damage,match",
    [
        (lambda b: b[:20], "too short|expected"),
        (lambda b: b[:-100], "expected"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "checksum"),
        (lambda b: b[:200] + bytes([b[200] ^ 0xFF]) + b[201:], "checksum"),
        (lambda b: b"NOTAMODL" + b[8:], "not a forgetting model"),
        (lambda b: b[:8] + (99).to_bytes(4, "little") + b[12:], "format version 99"),
        (lambda b: b"", "too short"),
    ],
)
def test_damaged_files_are_refused(saved, damage, match):
    saved.write_bytes(damage(saved.read_bytes()))
    with pytest.raises(ModelFileError, match=match):
        QSSClassifier.load(saved)


def test_other_estimator_class_is_refused(saved):
    with pytest.raises(ModelFileError, match="QSSClassifier"):
        QSSRegressor.load(saved)


def test_library_version_mismatch_is_refused_unless_allowed(saved, monkeypatch):
    real = persistence.library_versions()
    monkeypatch.setattr(persistence, "library_versions", lambda: {**real, "numpy": "0.0"})
    with pytest.raises(ModelFileError, match="same versions"):
        QSSClassifier.load(saved)
    assert QSSClassifier.load(saved, allow_version_mismatch=True).n_rows_ > 0


def test_a_failed_save_leaves_the_old_file(saved, monkeypatch):
    before = saved.read_bytes()
    X, y = classification_data(seed=3)
    model = QSSClassifier(**FAST).fit(X, y)

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(persistence.os, "fsync", boom)
    with pytest.raises(OSError):
        model.save(saved)
    assert saved.read_bytes() == before
    assert [p.name for p in saved.parent.iterdir()] == [saved.name]


def _row_fingerprints(model, row_id):
    """Byte strings that only the row's own data would produce."""
    rows = model.engine_.rows
    p = rows.position[row_id]
    return {
        "features": rows.X[p].tobytes(),
        "row_hash": rows.row_hash[p].tobytes(),
        "residuals": [rows.residuals[r][p].tobytes() for r in range(model.n_instances)],
    }


@pytest.mark.parametrize("mode", ["exact", "label"])
def test_no_residue_in_memory_or_on_disk(tmp_path, mode):
    X, y = classification_data(d=12)
    rng = np.random.default_rng(1)
    X = X + rng.normal(scale=1e-3, size=X.shape)
    ids = [f"user-{i:04d}-secret" for i in range(len(y))]
    model = QSSClassifier(**{**FAST, "mode": mode}).fit(X, y, ids)
    victim = ids[17]
    prints = _row_fingerprints(model, victim)
    if mode == "label":
        model.forget([victim], erase_inputs=True)
    else:
        model.forget([victim])
    rows = model.engine_.rows
    whole = rows.X.tobytes()
    assert prints["features"] not in whole
    assert prints["row_hash"] not in rows.row_hash.tobytes()
    assert victim not in rows.position and victim not in rows.ids
    path = tmp_path / "m.qss"
    model.save(path)
    blob = path.read_bytes()
    assert victim.encode() not in blob
    assert prints["features"] not in blob
    assert prints["row_hash"] not in blob
    for res in prints["residuals"]:
        assert res not in blob


def test_label_forget_purges_label_and_residuals(tmp_path):
    X, y = classification_data()
    model = QSSClassifier(**{**FAST, "mode": "label"}).fit(X, y)
    model.forget([5])
    rows = model.engine_.rows
    p = rows.position[5]
    assert rows.targets[p] == -1
    for r in range(model.n_instances):
        assert not rows.residuals[r][p].any()
