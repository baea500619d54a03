"""Forest files: the exact forests save and load as every model does (forgetting.persistence).

A loaded forest is the saved one bit for bit (predictions, state and structure digests) and
stays exact under later forgets; a damaged, foreign, crafted or edited file is refused with
one ModelFileError line (a ValueError for a missing or wrong secret key), never loaded.
Files of the forest's first format (kind "forgetting-forest-file": its rows and parameters as
a mapping, forgetting.persistence.forest_state) still load, and are checked the same way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forgetting import (
    ExactForestClassifier,
    ExactForestRegressor,
    ModelFileError,
    QSSClassifier,
    persistence,
)
from forgetting.io import model_format
from forgetting.persistence.forest_state import LEGACY_FOREST_KIND, forest_state


def _data(n=1500, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = (np.nan_to_num(X[:, 0]) + 0.5 * np.nan_to_num(X[:, 1]) > rng.normal(size=n)).astype(int)
    y[rng.random(n) < 0.1] = 2
    return X, y


def _one_line(err) -> str:
    text = str(err.value)
    assert text and "\n" not in text, text
    return text


def _same(a, b, X) -> None:
    if hasattr(a, "predict_proba"):
        assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    else:
        assert np.array_equal(a.predict(X), b.predict(X))
    assert a.state_digest() == b.state_digest()
    assert a.structure_digest() == b.structure_digest()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A classifier saved after forgets (stale subtrees among them), and its bytes."""
    X, y = _data()
    ids = [f"u{i}" for i in range(len(y))]
    model = ExactForestClassifier(n_estimators=8, random_state=4).fit(X, y, ids)
    model.forget(["u3", "u40", "u41"])
    path = tmp_path_factory.mktemp("forest") / "m.forest"
    model.save(path)
    return model, path, path.read_bytes(), X


def test_load_is_the_saved_model_and_stays_exact(saved):
    model, path, _, X = saved
    loaded = ExactForestClassifier.load(path)
    _same(model, loaded, X)
    assert loaded.get_params() == model.get_params()
    assert loaded.ids_ == model.ids_
    # a live model: the same forgets on both, then a refit without those rows
    loaded.forget(["u7", "u8"])
    loaded.wait_for_rebuilds()  # should either row be in an instance's D°
    ids, _, Xh, yh = loaded.engine_.rows()
    refit = ExactForestClassifier(**model.get_params()).fit(Xh, loaded.classes_[yh], ids)
    _same(loaded, refit, X)


def test_regressor_round_trip(tmp_path):
    X, _ = _data()
    target = np.nan_to_num(X[:, 2]) * 3.0 + 1.0
    model = ExactForestRegressor(n_estimators=5, min_samples_leaf=3).fit(X, target)
    model.forget([1, 2, 3])
    model.save(tmp_path / "r.forest")
    _same(model, ExactForestRegressor.load(tmp_path / "r.forest"), X)
    with pytest.raises(ModelFileError, match="not a ExactForestClassifier"):
        ExactForestClassifier.load(tmp_path / "r.forest")


def test_dataframe_with_categories_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    n = 800
    frame = pd.DataFrame(
        {
            "age": rng.normal(40, 10, n),
            "city": pd.Categorical(rng.choice(["a", "b", "c"], n), categories=["a", "b", "c"]),
            "score": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)),
        }
    )
    y = np.where(frame["city"].to_numpy() == "b", "yes", "no")
    model = ExactForestClassifier(n_estimators=6).fit(frame, y)
    model.save(tmp_path / "df.forest")
    loaded = ExactForestClassifier.load(tmp_path / "df.forest")
    assert list(loaded.feature_names_in_) == ["age", "city", "score"]
    assert loaded.categories_ == {"city": ["a", "b", "c"]}
    assert np.array_equal(model.predict_proba(frame), loaded.predict_proba(frame))
    assert loaded.classes_.tolist() == ["no", "yes"]
    with pytest.raises(ValueError, match="feature names|columns"):
        loaded.predict(frame[["score", "age", "city"]])


def test_secret_key_is_not_saved_unless_asked(tmp_path):
    X, y = _data(600)
    model = ExactForestClassifier(n_estimators=4, secret_key=b"k" * 32).fit(X, y)
    model.save(tmp_path / "k.forest")
    assert b"k" * 32 not in (tmp_path / "k.forest").read_bytes()
    with pytest.raises(ValueError, match="pass it as secret_key") as err:
        ExactForestClassifier.load(tmp_path / "k.forest")
    _one_line(err)
    with pytest.raises(ValueError, match="secret_key does not match"):
        ExactForestClassifier.load(tmp_path / "k.forest", secret_key=b"x" * 32)
    _same(model, ExactForestClassifier.load(tmp_path / "k.forest", secret_key=b"k" * 32), X)
    model.save(tmp_path / "kept.forest", store_key=True)
    _same(model, ExactForestClassifier.load(tmp_path / "kept.forest"), X)


def test_damaged_and_foreign_files_are_refused(saved, tmp_path):
    _, _, data, _ = saved
    bad = tmp_path / "bad.forest"
    for blob, needle in [
        (data[: len(data) // 2], "payload bytes"),
        (data[:-1] + bytes([data[-1] ^ 1]), "checksum"),
        (b"not a model at all", "too short|magic|not a forgetting"),
    ]:
        bad.write_bytes(blob)
        with pytest.raises(ModelFileError, match=needle) as err:
            ExactForestClassifier.load(bad)
        _one_line(err)
    X, y = _data(400)
    QSSClassifier(n_instances=2, random_state=0).fit(np.nan_to_num(X), y).save(tmp_path / "q.qss")
    with pytest.raises(ModelFileError, match="holds a QSSClassifier, not a ExactForest"):
        ExactForestClassifier.load(tmp_path / "q.qss")
    with pytest.raises(ModelFileError):
        QSSClassifier.load(saved[1])


def test_other_library_versions_are_refused_unless_allowed(saved, monkeypatch):
    model, path, _, X = saved
    real = persistence.library_versions()
    monkeypatch.setattr(persistence, "library_versions", lambda: {**real, "numpy": "0.0"})
    with pytest.raises(ModelFileError, match="same versions"):
        ExactForestClassifier.load(path)
    _same(model, ExactForestClassifier.load(path, allow_version_mismatch=True), X)


def _legacy(model) -> bytes:
    """``model`` as the forest's first file format held it: a mapping of its class,
    parameters, fitted attributes, key fingerprint, rows and structure digest."""
    ids, _, X, y = model.engine_.rows()
    state = {
        **forest_state(model),
        "libraries": persistence.library_versions(),
        "environment": persistence.environment(),
        "rows": {"ids": ids, "X": X, "y": y},
        "structure_digest": model.structure_digest(),
        "secret_key": None,
    }
    state["fitted"].pop("random_state_")
    return model_format.dumps(state, LEGACY_FOREST_KIND)


def _edited(data: bytes, edit, kind: str = LEGACY_FOREST_KIND) -> bytes:
    """The file with its state changed by ``edit`` and a valid checksum again."""
    state = model_format.loads(data, kind)
    edit(state)
    return model_format.dumps(state, kind)


def test_a_file_of_the_first_format_loads_as_the_saved_model(saved, tmp_path):
    model, _, _, X = saved
    path = tmp_path / "first.forest"
    path.write_bytes(_legacy(model))
    loaded = ExactForestClassifier.load(path)
    _same(model, loaded, X)
    with pytest.raises(ModelFileError, match="not a QSSClassifier"):
        QSSClassifier.load(path)


def _set(*keys, value):
    def edit(state):
        target = state
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value(target[keys[-1]]) if callable(value) else value

    return edit


def _x_with(value):
    def edit(X):
        X = X.copy()
        X[0, 0] = value
        return X

    return edit


CRAFTED = [
    (_set("class", value="QSSClassifier"), "not a ExactForestClassifier"),
    (_set("params", value=lambda p: {**p, "bogus": 1}), "params: expected"),
    (_set("params", "max_bins", value=999), "params: .*max_bins"),
    (_set("params", "n_estimators", value=10**12), "more than this process may hold"),
    (_set("params", "n_instances", value=0), "params: .*n_instances"),
    (_set("params", "n_instances", value=1), "not give the model that was saved"),
    (_set("key_derived", value="yes"), "key_derived"),
    (_set("key_fingerprint", value="00"), "key_fingerprint"),
    (_set("fitted", "n_features_in_", value=-1), "n_features_in_"),
    (_set("fitted", "n_features_in_", value=7), "n_features_in_ 7, but the rows have 6"),
    (_set("fitted", "classes_", value=np.array([1, 0, 2])), "classes_"),
    (_set("fitted", "classes_", value=np.array([0, 1, 2, 3])), "has no row"),
    (_set("fitted", "feature_names_in_", value=["a"] * 6), "feature_names_in_"),
    (_set("fitted", "bogus_", value=1), "not a fitted estimator's"),
    (_set("rows", "X", value=lambda X: X.astype(np.float64)), "float32"),
    (_set("rows", "X", value=_x_with(np.inf)), "infinity"),
    (_set("rows", "X", value=_x_with(123.0)), "not give the model that was saved"),
    (_set("rows", "y", value=lambda y: y + 5), "label index"),
    (_set("rows", "y", value=lambda y: y[:-1]), r"\d+ entries for \d+ ids"),
    (_set("rows", "ids", value=lambda ids: [ids[1], *ids[1:]]), "rows.ids"),
    (_set("rows", value={"ids": []}), "exactly ids, X and y"),
    (_set("structure_digest", value="0" * 64), "not give the model that was saved"),
]


@pytest.mark.parametrize(("edit", "needle"), CRAFTED)
def test_crafted_files_of_the_first_format_are_refused_in_one_line(saved, tmp_path, edit, needle):
    path = tmp_path / "crafted.forest"
    path.write_bytes(_edited(_legacy(saved[0]), edit))
    with pytest.raises(ModelFileError, match=needle) as err:
        ExactForestClassifier.load(path)
    _one_line(err)


def _snapshot_set(*keys, value):
    """An edit of a model file's snapshot (a frozen dataclass tree) at ``keys``."""
    import dataclasses

    def edit(state):
        def replaced(obj, path):
            if not path:
                return value(obj) if callable(value) else value
            head, *rest = path
            if isinstance(obj, dict):
                return {**obj, head: replaced(obj[head], rest)}
            return dataclasses.replace(obj, **{head: replaced(getattr(obj, head), rest)})

        state["snapshot"] = replaced(state["snapshot"], list(keys))

    return edit


MODEL_FILE_CRAFTED = [
    (_snapshot_set("estimator", value="QSSClassifier"), "not a ExactForestClassifier"),
    (_snapshot_set("params", "n_estimators", value=7), "not give the model that was saved"),
    (_snapshot_set("fitted", "classes_", value=np.array([0, 1, 2, 3])), "has no row"),
    (_snapshot_set("engine", "rows", "X", value=_x_with(np.inf)), "infinity"),
    (_snapshot_set("engine", "rows", "X", value=_x_with(5.0)), "not give the model that was"),
    (_snapshot_set("engine", "rows", "in_pool", value=lambda p: ~p), "in_pool"),
    (_snapshot_set("engine", "instances", value=[None]), "instances"),
    (_snapshot_set("engine", "privacy", value={"epsilon": 1.0}), "instances"),
    (_set("state_digest", value="0" * 64), "not give the model that was saved"),
]


@pytest.mark.parametrize(("edit", "needle"), MODEL_FILE_CRAFTED)
def test_crafted_model_files_are_refused_in_one_line(saved, tmp_path, edit, needle):
    path = tmp_path / "crafted.model"
    path.write_bytes(_edited(saved[2], edit, persistence.FILE_KIND))
    with pytest.raises(ModelFileError, match=needle) as err:
        ExactForestClassifier.load(path)
    _one_line(err)


def test_a_file_written_before_n_instances_loads_as_one_instance(tmp_path):
    X, y = _data()
    model = ExactForestClassifier(n_estimators=8, n_instances=1, random_state=4).fit(X, y)

    def drop(state):
        del state["params"]["n_instances"]

    path = tmp_path / "older.forest"
    path.write_bytes(_edited(_legacy(model), drop))
    loaded = ExactForestClassifier.load(path)
    assert loaded.n_instances == 1
    _same(model, loaded, X)


def test_unfitted_model_cannot_be_saved(tmp_path):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        ExactForestClassifier().save(tmp_path / "x.forest")
    assert not (tmp_path / "x.forest").exists()
