"""MUNKEY smoke tests: forget deletes keys + exemplars only, leaves no residue, and is
deterministic; save/load round-trips bit for bit; bad input raises once and changes nothing.

A tiny model (width 16, depth 1, 2 epochs) on scikit-learn's 8×8 digits (the lab's loader)
keeps this fast. MUNKEY's parts on their own: tests/munkey/test_munkey.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from forgetting import ModelFileError, MUNKEYClassifier
from forgetting.munkey import AGGREGATIONS
from forgetting_lab.datasets import load_dataset

TINY = dict(
    width=16, depth=1, heads=2, patch=4, exemplar_dim=8, epochs=2, batch_size=32, k=4, retrieval_k=3
)


@pytest.fixture(scope="module")
def data():
    ds = load_dataset("digits")
    X = ds.X_train[:160].reshape(-1, 8, 8)
    return X, ds.y_train[:160], ds.X_test[:60].reshape(-1, 8, 8), ds.y_test[:60]


@pytest.fixture(scope="module")
def fitted(data):
    X, y, _, _ = data
    ids = [f"user-{i:04d}-secret" for i in range(len(y))]
    return MUNKEYClassifier(**TINY, random_state=3).fit(X, y, ids), ids


def _fresh(data):
    X, y, _, _ = data
    ids = [f"user-{i:04d}-secret" for i in range(len(y))]
    return MUNKEYClassifier(**TINY, random_state=3).fit(X, y, ids), ids


def _state_bytes(model) -> bytes:
    return b"".join(v.numpy().tobytes() for v in model.net_.state_dict().values())


def test_fit_predict_surface(data, fitted):
    X, y, Xt, yt = data
    model, _ = fitted
    proba = model.predict_proba(Xt)
    assert proba.shape == (len(Xt), 10)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    assert set(model.predict(Xt)) <= set(model.classes_)
    assert 0.0 <= model.score(Xt, yt) <= 1.0
    for agg in AGGREGATIONS:
        assert model.predict(Xt, aggregation=agg).shape == (len(Xt),)
    ps = model.pathway_sensitivity(Xt, yt)
    assert set(ps) == {"A_both", "A_img", "A_tok", "P_s"} and ps["P_s"] >= 0
    # (n, H, W, C) input works too
    rgb = MUNKEYClassifier(**TINY).fit(np.repeat(X[..., None], 3, axis=3), y)
    assert rgb.predict(np.repeat(Xt[..., None], 3, axis=3)).shape == (len(Xt),)


def test_runs_are_bit_identical(data, fitted):
    X, y, Xt, _ = data
    model, ids = fitted
    again = MUNKEYClassifier(**TINY, random_state=3).fit(X, y, ids)
    assert _state_bytes(again) == _state_bytes(model)
    assert np.array_equal(again.predict_proba(Xt), model.predict_proba(Xt))
    other = MUNKEYClassifier(**TINY, random_state=4).fit(X, y, ids)
    assert _state_bytes(other) != _state_bytes(model)
    # fitting leaves the caller's torch state alone
    assert torch.get_num_threads() >= 1 and not torch.are_deterministic_algorithms_enabled()


def test_forget_deletes_memory_rows_only(data):
    X, y, Xt, _ = data
    model, ids = _fresh(data)
    victim = 17
    assert model.retrieve(X[victim : victim + 1], k=1)[0][0] == ids[victim]  # own key, sim 1
    before = _state_bytes(model)
    receipt = model.forget([ids[victim], ids[3]])
    assert receipt.n_removed == 2 and receipt.n_remaining == len(ids) - 2
    assert not receipt.parameters_changed and len(receipt.id_hashes) == 2
    assert receipt.seconds < 0.5  # microseconds per id; slack for a loaded CI machine
    assert _state_bytes(model) == before  # no parameter changed
    assert model.n_rows_ == len(ids) - 2 and ids[victim] not in model.ids_
    everything = model.retrieve(X[victim : victim + 1], k=len(ids))[0]
    assert ids[victim] not in everything and len(everything) == len(ids) - 2
    # a repeated forget is reported, not counted again
    again = model.forget([ids[victim]])
    assert again.n_removed == 0 and again.already_forgotten == (receipt.id_hashes[0],)
    # an unknown id raises, naming it, and changes nothing
    snapshot = model.memory_.keys.clone(), list(model.ids_)
    with pytest.raises(KeyError, match="nobody"):
        model.forget([ids[5], "nobody"])
    many = [f"nobody-{i}" for i in range(13)]
    with pytest.raises(KeyError) as err:
        model.forget([ids[5], *many])
    listed = ", ".join(repr(v) for v in many[:10])
    assert err.value.args[0] == f"unknown ids (never fitted): [{listed}, ... (3 more)]"
    assert torch.equal(model.memory_.keys, snapshot[0]) and model.ids_ == snapshot[1]
    with pytest.raises(ValueError, match="duplicate"):
        model.forget([ids[5], ids[5]])
    assert model.n_rows_ == len(ids) - 2
    assert model.predict_proba(Xt).shape == (len(Xt), 10)


def test_forget_everything_falls_back_to_the_null_exemplar(data):
    X, _, Xt, _ = data
    model, ids = _fresh(data)
    model.forget(ids)
    assert model.n_rows_ == 0 and model.retrieve(Xt[:2]) == [[], []]
    assert model.predict(Xt).shape == (len(Xt),)


def test_no_residue_in_memory_or_on_disk(tmp_path, data):
    model, ids = _fresh(data)
    victim = ids[42]
    p = model.memory_.position[victim]
    key = model.memory_.keys[p].numpy().tobytes()
    exemplar = model.memory_.exemplars[p].numpy().tobytes()
    model.forget([victim])
    memory = model.memory_
    assert key not in memory._keys.numpy().tobytes()
    assert exemplar not in memory._exemplars.numpy().tobytes()
    assert victim not in memory.position and victim not in memory.ids
    path = tmp_path / "m.munkey"
    model.save(path)
    blob = path.read_bytes()
    assert victim.encode() not in blob
    assert key not in blob and exemplar not in blob
    assert ids[43].encode() in blob  # the search itself can find what is there


def test_save_load_round_trip_is_bitwise(tmp_path, data):
    X, _, Xt, yt = data
    model, ids = _fresh(data)
    model.forget(ids[:10])
    path = tmp_path / "m.munkey"
    model.save(path)
    assert path.read_bytes()[8:9] == b"{"  # a safetensors header, not a pickle
    loaded = MUNKEYClassifier.load(path)
    assert np.array_equal(loaded.predict_proba(Xt), model.predict_proba(Xt))
    assert loaded.ids_ == model.ids_ and loaded.get_params() == model.get_params()
    assert loaded.forget([ids[0]]).n_removed == 0  # tombstones survive
    for m in (model, loaded):
        m.forget(ids[10:20])
    assert np.array_equal(loaded.predict_proba(Xt), model.predict_proba(Xt))
    assert loaded.pathway_sensitivity(Xt, yt) == model.pathway_sensitivity(Xt, yt)
    with pytest.raises(ModelFileError, match="secret_key"):
        MUNKEYClassifier.load(path, secret_key="other")


@pytest.mark.parametrize(
    "damage,match",
    [
        (lambda b: b[:4], "too short"),
        (lambda b: b[:-100], "not a readable|checksum"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "checksum"),
        (lambda b: b[:40] + bytes([b[40] ^ 0x01]) + b[41:], "not a readable|checksum"),
        (lambda b: (10**9).to_bytes(8, "little") + b[8:], "truncated"),
        (lambda b: b"", "too short"),
    ],
)
def test_damaged_files_are_refused(tmp_path, fitted, damage, match):
    model, _ = fitted
    path = tmp_path / "m.munkey"
    model.save(path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ModelFileError, match=match):
        MUNKEYClassifier.load(path)


@pytest.mark.parametrize(
    "bad,match",
    [
        (lambda X: np.where(X == X.max(), np.nan, X), "NaN"),
        (lambda X: X.reshape(len(X), -1), "shaped"),
        (lambda X: X * 2.0, r"\[0, 1\]"),
        (lambda X: X[:, :4, :4], "fitted on"),
    ],
)
def test_bad_input_raises_and_changes_nothing(data, fitted, bad, match):
    X, y, Xt, _ = data
    model, ids = fitted
    before = model.predict_proba(Xt), _state_bytes(model), list(model.ids_)
    with pytest.raises(ValueError, match=match):
        model.predict(bad(Xt))
    if match != "fitted on":
        with pytest.raises(ValueError, match=match):
            model.fit(bad(X), y, ids)
    assert np.array_equal(model.predict_proba(Xt), before[0])
    assert _state_bytes(model) == before[1] and model.ids_ == before[2]


def test_parameter_and_label_errors(data):
    X, y, _, _ = data
    with pytest.raises(ValueError, match="aggregation"):
        MUNKEYClassifier(**{**TINY, "aggregation": "vote"}).fit(X, y)
    with pytest.raises(ValueError, match="2 classes"):
        MUNKEYClassifier(**TINY).fit(X, np.zeros(len(y), dtype=int))
    with pytest.raises(ValueError, match="duplicate"):
        MUNKEYClassifier(**TINY).fit(X, y, [0] * len(y))


def test_default_patch_adapts_to_the_image_and_survives_save_load(tmp_path, data):
    X, y, Xt, _ = data  # 8×8 digits: the old fixed default (7) refused them
    tiny = {k: v for k, v in TINY.items() if k != "patch"}
    model = MUNKEYClassifier(**tiny, random_state=3).fit(X, y)
    assert model.patch == "auto" and model.patch_ == 2
    model.save(tmp_path / "m.munkey")
    loaded = MUNKEYClassifier.load(tmp_path / "m.munkey")
    assert loaded.patch_ == 2 and np.array_equal(loaded.predict_proba(Xt), model.predict_proba(Xt))
    with pytest.raises(ValueError, match="patch=3 must divide the image side 8"):
        MUNKEYClassifier(**{**tiny, "patch": 3}).fit(X, y)
    with pytest.raises(ValueError, match='positive int or "auto"'):
        MUNKEYClassifier(**{**tiny, "patch": "big"}).fit(X, y)


def test_conv_stem_model_forgets_and_survives_save_load(tmp_path, data):
    X, y, Xt, _ = data
    ids = [f"row-{i}" for i in range(len(y))]
    model = MUNKEYClassifier(**{**TINY, "patch": 2}, stem="conv", random_state=3).fit(X, y, ids)
    assert model.net_.config.stem == "conv" and model.net_.config.n_patches == 16
    twin = MUNKEYClassifier(**{**TINY, "patch": 2}, stem="conv", random_state=3).fit(X, y, ids)
    assert np.array_equal(model.predict_proba(Xt), twin.predict_proba(Xt))  # deterministic
    model.forget(ids[:5])
    model.save(tmp_path / "conv.munkey")
    loaded = MUNKEYClassifier.load(tmp_path / "conv.munkey")
    assert loaded.stem == "conv" and loaded.net_.config == model.net_.config
    assert np.array_equal(loaded.predict_proba(Xt), model.predict_proba(Xt))
    with pytest.raises(ValueError, match="stem must be one of"):
        MUNKEYClassifier(**TINY, stem="resnet").fit(X, y)


def test_hflip_augments_training_deterministically(data):
    X, y, Xt, _ = data
    plain = MUNKEYClassifier(**TINY, random_state=3).fit(X, y)
    flipped = MUNKEYClassifier(**TINY, hflip=True, random_state=3).fit(X, y)
    twin = MUNKEYClassifier(**TINY, hflip=True, random_state=3).fit(X, y)
    assert np.array_equal(flipped.predict_proba(Xt), twin.predict_proba(Xt))
    assert not np.array_equal(flipped.predict_proba(Xt), plain.predict_proba(Xt))
    assert np.array_equal(flipped.memory_.keys, plain.memory_.keys)  # keys: unflipped images
    with pytest.raises(ValueError, match="hflip must be True or False"):
        MUNKEYClassifier(**TINY, hflip="yes").fit(X, y)


class _PixelKeys:
    """A frozen custom key encoder: the flattened image itself."""

    learned = False

    def transform(self, images):
        return np.asarray(images, dtype=np.float32).reshape(len(images), -1) + 1e-3


def test_pluggable_encoder_and_its_persistence(tmp_path, data):
    X, y, Xt, _ = data
    model = MUNKEYClassifier(**TINY, encoder=_PixelKeys()).fit(X, y)
    assert model.retrieve(X[:1], k=1) == [[0]]
    path = tmp_path / "m.munkey"
    model.save(path)
    with pytest.raises(ModelFileError, match="custom key encoder"):
        MUNKEYClassifier.load(path)
    loaded = MUNKEYClassifier.load(path, encoder=_PixelKeys())
    assert np.array_equal(loaded.predict_proba(Xt), model.predict_proba(Xt))

    class Learned(_PixelKeys):
        learned = True

    with pytest.raises(ValueError, match="frozen"):
        MUNKEYClassifier(**TINY, encoder=Learned()).fit(X, y)
