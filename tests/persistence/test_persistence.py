"""save/load: bitwise round trips, refusal of damaged files, and no residue of forgotten rows."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FAST, assert_same_model, classification_data, regression_data

from forgetting import ModelFileError, QSSClassifier, QSSRegressor, persistence
from forgetting.io import atomic


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

    monkeypatch.setattr(atomic.os, "fsync", boom)
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


# -- the pickle-free format ---------------------------------------------------------------
def test_a_model_file_holds_no_pickle_and_no_key(tmp_path):
    """Nothing in the file is a pickle (no protocol-2+ pickle header), and neither a derived
    nor a user key is written unless asked."""
    X, y = classification_data()
    for secret in (None, "a user secret key, 32 bytes long!"):
        model = QSSClassifier(**FAST, secret_key=secret).fit(X, y)
        path = tmp_path / "m.qss"
        model.save(path)
        blob = path.read_bytes()
        assert b"\x80\x04\x95" not in blob and b"\x80\x05\x95" not in blob
        assert b"secret key" not in blob
        assert model.engine_.snapshot().rows.X.tobytes() in blob  # arrays are stored raw


def test_a_secret_key_must_be_given_again_and_must_match(tmp_path):
    X, y = classification_data()
    key = "a user secret key, 32 bytes long!"
    model = QSSClassifier(**FAST, secret_key=key).fit(X, y)
    path = tmp_path / "m.qss"
    model.save(path)
    with pytest.raises(ValueError, match="secret key"):
        persistence.load_model(QSSClassifier, path)
    with pytest.raises(ValueError, match="does not match"):
        persistence.load_model(QSSClassifier, path, secret_key="another key")
    loaded = persistence.load_model(QSSClassifier, path, secret_key=key)
    assert_same_model(model, loaded, X)
    persistence.save_model(model, path, store_key=True)  # asked for: the file holds the key
    assert key.encode() in path.read_bytes()
    assert_same_model(model, persistence.load_model(QSSClassifier, path), X)


@pytest.mark.parametrize("mode", ["exact", "label"])
def test_string_labels_round_trip_bitwise(tmp_path, mode):
    X, y = classification_data()
    labels = np.array(["cat", "dog", "eel"], dtype=object)[y]
    ids = [f"u{i}" for i in range(len(y))]
    model = QSSClassifier(**FAST, mode=mode).fit(X, labels, ids)
    model.forget(ids[:7])
    model.save(tmp_path / "m.qss")
    loaded = QSSClassifier.load(tmp_path / "m.qss")
    assert_same_model(model, loaded, X)
    assert loaded.classes_.tolist() == ["cat", "dog", "eel"]
    assert set(loaded.predict(X)) <= {"cat", "dog", "eel"}


def test_learned_lightgbm_encoder_round_trips_bitwise(tmp_path):
    from forgetting.encoders import LightGBMLeafContrib

    X, y = classification_data()
    model = QSSClassifier(**FAST, encoder=LightGBMLeafContrib(n_estimators=4, n_classes=3))
    model.fit(X, y)
    model.save(tmp_path / "m.qss")
    assert_same_model(model, QSSClassifier.load(tmp_path / "m.qss"), X)


def test_user_estimators_outside_the_allowlist_are_refused_until_registered(tmp_path):
    from sklearn.naive_bayes import GaussianNB

    from forgetting.io import model_format

    X, y = classification_data()
    model = QSSClassifier(**FAST, base_model=GaussianNB()).fit(X, y)
    with pytest.raises(TypeError, match="register_object"):
        model.save(tmp_path / "m.qss")
    assert not (tmp_path / "m.qss").exists()
    model_format.register_object(GaussianNB)  # the user trusts it, on both sides
    model.save(tmp_path / "m.qss")
    assert_same_model(model, QSSClassifier.load(tmp_path / "m.qss"), X)


def test_the_codec_registry_takes_a_frozen_dataclass_in_one_line():
    from dataclasses import dataclass

    from forgetting.io import model_format

    @dataclass(frozen=True)
    class Cells:
        thresholds: np.ndarray
        depth: int
        names: tuple

    model_format.register_dataclass(Cells, "tests.Cells")
    value = Cells(np.arange(6, dtype=np.float32).reshape(2, 3).T, 3, ("a", 1))
    back = model_format.loads(model_format.dumps({"p": [value, None]}, "t"), "t")["p"][0]
    assert back.depth == 3 and back.names == ("a", 1)
    assert back.thresholds.dtype == np.float32 and back.thresholds.flags.f_contiguous
    assert np.array_equal(back.thresholds, value.thresholds)
    with pytest.raises(ModelFileError, match="kind"):
        model_format.loads(model_format.dumps(value, "t"), "other kind")


def test_values_keep_their_exact_types_and_bits():
    from forgetting.io import model_format

    value = {
        1: (np.float64(0.1), 0.1, float("nan"), float("-inf"), np.int32(-3), True, None),
        "s": [b"\x00\xff", np.array(["ab", "c"]), np.array([1.5, np.nan], dtype=">f8")],
        "o": np.array(["x", 3], dtype=object),
    }
    back = model_format.loads(model_format.dumps(value, "t"), "t")
    first = back[1]
    assert type(first[0]) is np.float64 and first[0] == value[1][0]
    assert type(first[1]) is float and np.isnan(first[2]) and first[3] == float("-inf")
    assert type(first[4]) is np.int32 and first[5] is True and first[6] is None
    assert back["s"][0] == b"\x00\xff" and back["s"][1].dtype == np.dtype("<U2")
    assert back["s"][2].dtype == np.dtype(">f8")
    assert back["s"][2].tobytes() == value["s"][2].tobytes()
    assert back["o"].dtype == object and back["o"].tolist() == ["x", 3]


def test_a_well_formed_but_edited_schema_is_refused_on_load(saved):
    from forgetting.io import model_format

    state = model_format.loads(saved.read_bytes(), persistence.FILE_KIND)
    state["snapshot"].engine.instances[1].schema.base_model.estimator.coef_ = np.zeros((3, 99))
    saved.write_bytes(model_format.dumps(state, persistence.FILE_KIND))
    with pytest.raises(ModelFileError, match="instance 1"):
        QSSClassifier.load(saved)
