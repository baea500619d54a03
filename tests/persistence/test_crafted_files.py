"""Crafted model files and stores are refused fast, whole, in one line (issue 40: M2, M3, M4
and the low findings on files).

Each case edits a real model the way someone with write access could: the file is decoded,
one field of its snapshot changed, and encoded again with a valid checksum (a checksum stops
no one who can recompute it); a store's entry is rewritten in place. The restore must refuse
it with one ``ModelFileError`` / ``StoreCorrupt`` line naming the field — never load it,
hang on it, allocate by it or answer with a raw numpy error. Cases that could hang run under
a timeout, and the memory bombs in a child process limited to 4 GiB of address space.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import FAST, classification_data, regression_data, user_ids

from forgetting import ModelFileError, QSSClassifier, QSSRegressor, persistence
from forgetting.io import model_format
from forgetting.store import DurableModel
from forgetting.store.errors import StoreCorrupt

TREES = {**FAST, "partition": "trees", "n_levels": None, "n_centroids": None}
"""Flat partition with the default "shared-rf" head: the schema fields with sizes."""
WAIT_S = 30
"""A restored model's rebuilds land well within this; past it, the case hangs."""


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert text and "\n" not in text and "Traceback" not in text, f"not one line: {text!r}"
    return text


# -- model files -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Saved models (bytes) to edit: codebook and flat-partition classifiers, a regressor."""
    out = {}
    X, y = classification_data()
    ids = [f"u{i}" for i in range(len(y))]
    out["rq"] = _saved_bytes(tmp_path_factory, QSSClassifier(**FAST).fit(X, y, ids))
    out["trees"] = _saved_bytes(tmp_path_factory, QSSClassifier(**TREES).fit(X, y, ids))
    Xr, yr = regression_data()
    out["reg"] = _saved_bytes(tmp_path_factory, QSSRegressor(**FAST).fit(Xr, yr))
    return out


def _saved_bytes(tmp_path_factory, model) -> bytes:
    path = tmp_path_factory.mktemp("saved") / "m.qss"
    model.save(path)
    return path.read_bytes()


def _crafted(tmp_path: Path, data: bytes, edit) -> Path:
    """A copy of the saved model whose snapshot ``edit(snapshot)`` replaced, re-encoded with a
    valid checksum."""
    state = model_format.loads(data, persistence.FILE_KIND)
    state["snapshot"] = edit(state["snapshot"])
    path = tmp_path / "crafted.qss"
    path.write_bytes(model_format.dumps(state, persistence.FILE_KIND))
    return path


def _rows(snap, **changes):
    engine = snap.engine
    return dataclasses.replace(
        snap, engine=dataclasses.replace(engine, rows=dataclasses.replace(engine.rows, **changes))
    )


def _instance(snap, r: int, **changes):
    instances = list(snap.engine.instances)
    instances[r] = dataclasses.replace(instances[r], **changes)
    return dataclasses.replace(snap, engine=dataclasses.replace(snap.engine, instances=instances))


def _schema(snap, r: int, **changes):
    schema = dataclasses.replace(snap.engine.instances[r].schema, **changes)
    return _instance(snap, r, schema=schema)


def _partition(snap, r: int, **changes):
    part = dataclasses.replace(snap.engine.instances[r].schema.partition, **changes)
    return _schema(snap, r, partition=part)


def _targets(snap, index: int, value):
    targets = snap.engine.rows.targets.copy()
    targets[index] = value
    return _rows(snap, targets=targets)


def _features(snap, value):
    X = snap.engine.rows.X.copy()
    X[0, 0] = value
    return _rows(snap, X=X)


def _ids(snap):
    ids = list(snap.engine.rows.ids)
    ids[1] = ids[0]
    return _rows(snap, ids=ids)


def _params(snap, **changes):
    return dataclasses.replace(snap, params={**snap.params, **changes})


def _fitted(snap, **changes):
    return dataclasses.replace(snap, fitted={**snap.fitted, **changes})


def _codes(snap, value):
    inst = snap.engine.instances[0]
    codes = inst.codes.copy()
    codes[0, 0] = value
    return _instance(snap, 0, codes=codes)


def _features_index(snap, value):
    features = snap.engine.instances[0].schema.partition.features.copy()
    features[0, 0] = value
    return _partition(snap, 0, features=features)


def _probe_codes(snap, value):
    probes = snap.engine.instances[0].schema.probe_codes.copy()
    probes[0, 0] = value
    return _schema(snap, 0, probe_codes=probes)


# (name, model, edit, what the refusal names)
CRAFTED = [
    # M2: instances that nothing would rebuild
    ("instance list shorter", "rq", lambda s: dataclasses.replace(
        s, engine=dataclasses.replace(s.engine, instances=s.engine.instances[:2])), "n_instances"),
    ("n_instances above the instances", "rq", lambda s: _params(s, n_instances=4), "n_instances"),
    # M3: rows the store refuses
    ("label index 99", "rq", lambda s: _targets(s, 0, 99), "label index 99"),
    ("label index -5", "rq", lambda s: _targets(s, 0, -5), "label index -5"),
    ("NaN feature", "rq", lambda s: _features(s, np.nan), "rows.X"),
    ("infinite feature", "reg", lambda s: _features(s, np.inf), "rows.X"),
    ("infinite regression target", "reg", lambda s: _targets(s, 0, np.inf), "rows.targets"),
    ("residuals one column wide", "rq", lambda s: _instance(
        s, 0, residuals=s.engine.instances[0].residuals[:, :1].copy()), "residuals"),
    ("duplicate ids", "rq", _ids, "duplicate id 'u0'"),
    ("codes of another dtype", "rq", lambda s: _instance(
        s, 0, codes=s.engine.instances[0].codes.astype(np.int64)), "codes"),
    ("a cell code beyond the cells", "trees", lambda s: _codes(s, 60000), "cell code"),
    # low: fitted attributes, parameters, partition indices
    ("fitted shadows predict", "rq", lambda s: _fitted(s, predict=1), "predict"),
    ("fitted classes_ unsorted", "rq", lambda s: _fitted(
        s, classes_=s.fitted["classes_"][::-1].copy()), "classes_"),
    ("fitted width not the rows'", "rq", lambda s: _fitted(s, n_features_in_=7), "n_features_in_"),
    ("rho = 2.0", "rq", lambda s: _params(s, rho=2.0), "rho"),
    ("an unknown parameter", "rq", lambda s: _params(s, colour="red"), "params"),
    ("negative partition index", "trees", lambda s: _features_index(s, -5), "partition.features"),
    ("probe cell beyond the cells", "trees", lambda s: _probe_codes(s, 1 << 15), "probe_codes"),
    # M4: a size field far from what the schema computes
    ("head n_features = 30000", "trees", lambda s: _schema(s, 0, n_features=30000), "n_features"),
]  # fmt: skip


@pytest.mark.parametrize("case", [c[0] for c in CRAFTED])
def test_a_crafted_model_file_is_refused_in_one_line(tmp_path, files, case):
    _, model, edit, expected = next(c for c in CRAFTED if c[0] == case)
    path = _crafted(tmp_path, files[model], edit)
    cls = QSSRegressor if model == "reg" else QSSClassifier
    with pytest.raises(ModelFileError) as info:
        # loading at all is the failure; the timeout is a hang guard, not a timing claim
        cls.load(path).wait_for_rebuilds(timeout=WAIT_S)
    assert expected in _one_line(info.value)


def test_a_file_with_duplicate_ids_could_not_forget_one_of_them(tmp_path, files):
    """Why duplicates matter (M3): loaded, ``forget(["u0"])`` left the second u0 row, and a
    re-saved file still held u0. Refused now, so nothing can be forgotten halfway."""
    path = _crafted(tmp_path, files["rq"], _ids)
    with pytest.raises(ModelFileError, match="duplicate id"):
        QSSClassifier.load(path)


_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
kind, location = sys.argv[1], sys.argv[2]
from forgetting import ModelFileError, QSSClassifier
from forgetting.store import DurableModel
from forgetting.store.errors import StoreCorrupt
try:
    if kind == "file":
        QSSClassifier.load(location).wait_for_rebuilds(timeout=30)
    else:
        DurableModel.open(location).wait_for_rebuilds(timeout=30)
except (ModelFileError, StoreCorrupt) as err:
    print("REFUSED", err)
    sys.exit(0)
print("LOADED")
sys.exit(3)
"""


def _refused_under_4_gib(kind: str, location: str) -> str:
    """Open ``location`` in a child limited to 4 GiB of address space; its refusal line."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, location],
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("REFUSED"), done.stdout
    return lines[0]


def test_a_huge_head_width_in_a_file_is_refused_under_4_gib(tmp_path, files):
    """M4: n_features = 30000 asked the head for (30001²) int64 sums per fold: 13.4 GiB."""
    path = _crafted(tmp_path, files["trees"], lambda s: _schema(s, 0, n_features=30000))
    assert "n_features" in _refused_under_4_gib("file", str(path))


def _with_header(data: bytes, edit) -> bytes:
    """``data`` with its codec header (JSON) edited by ``edit(header)``, checksum redone."""
    import hashlib
    import json
    import struct

    payload = data[model_format._HEADER.size :]
    (length,) = struct.unpack_from("<Q", payload)
    header = json.loads(payload[8 : 8 + length])
    edit(header)
    text = json.dumps(header, separators=(",", ":")).encode()
    payload = struct.pack("<Q", len(text)) + text + payload[8 + length :]
    digest = hashlib.sha256(payload).digest()
    head = model_format._HEADER.pack(
        model_format.MAGIC, model_format.FORMAT_VERSION, len(payload), digest
    )
    return head + payload


def test_a_zero_size_dtype_with_a_huge_shape_is_refused(tmp_path, files):
    """M4: dtype S0 of shape [2^40, 2^40] declared 0 bytes and passed the size check, then
    numpy raised OverflowError."""

    def bomb(header):
        header["arrays"][0].update(dtype="|S0", shape=[2**40, 2**40], nbytes=0)

    path = tmp_path / "s0.qss"
    path.write_bytes(_with_header(files["rq"], bomb))
    with pytest.raises(ModelFileError, match="zero-size dtype") as info:
        QSSClassifier.load(path)
    _one_line(info.value)


def test_arrays_declared_over_one_region_many_times_are_refused(tmp_path, files):
    """Every array of a file must be its own bytes: a thousand entries over one region would
    make the decoder copy it a thousand times."""

    def overlap(header):
        big = max(range(len(header["arrays"])), key=lambda i: header["arrays"][i]["nbytes"])
        header["arrays"] = [header["arrays"][big]] * 1000
        header["value"] = {"$tuple": [{"$array": i} for i in range(1000)]}

    path = tmp_path / "overlap.qss"
    path.write_bytes(_with_header(files["rq"], overlap))
    with pytest.raises(ModelFileError, match="does not fit the file"):
        model_format.loads(path.read_bytes(), persistence.FILE_KIND)


@pytest.mark.parametrize("where", ["/dev/zero", "fifo", "directory"])
def test_a_model_path_that_is_not_a_regular_file_is_refused(tmp_path, where):
    """/dev/zero was read without limit; opening a FIFO blocks until a writer comes (in a
    child limited to 4 GiB: a regression fails instead of taking the machine's memory)."""
    if where == "fifo":
        path = tmp_path / "model.qss"
        os.mkfifo(path)
    elif where == "directory":
        path = tmp_path
    else:
        path = Path(where)
        if not path.exists():
            pytest.skip("no /dev/zero here")
    assert "not a regular file" in _refused_under_4_gib("file", str(path))


def test_a_file_longer_than_its_header_declares_is_refused_before_it_is_read(tmp_path, files):
    path = tmp_path / "m.qss"
    path.write_bytes(files["rq"] + b"\0" * 1000)
    with pytest.raises(ModelFileError, match="expected .* payload bytes"):
        QSSClassifier.load(path)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"partition": "hyperplanes"},
        {"head": "shared-ridge"},
        {"head": "ridge"},
        {"head": "newton"},
        {"mode": "label"},
        {"rebuild": "background"},
    ],
    ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "trees",
)
def test_valid_models_of_every_kind_still_load_bit_for_bit(tmp_path, params):
    X, y = classification_data()
    model = QSSClassifier(**{**TREES, **params}).fit(X, y)
    model.forget([3, 4])
    model.save(tmp_path / "m.qss")
    loaded = QSSClassifier.load(tmp_path / "m.qss")
    loaded.wait_for_rebuilds()
    assert loaded.state_digest() == model.state_digest()
    assert np.array_equal(loaded.predict_proba(X), model.predict_proba(X))


# -- stores ----------------------------------------------------------------------------------
META_KIND = "forgetting-store-meta"
SCHEMA_KIND = "forgetting-schema"


def _connect(location: str):
    if location.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(location, autocommit=True)
    return sqlite3.connect(location, isolation_level=None)


def _read(location: str, query: str, params: tuple = ()):
    conn = _connect(location)
    try:
        if location.startswith("postgresql://"):
            query = query.replace("?", "%s")
        return bytes(conn.execute(query, params).fetchone()[0])
    finally:
        conn.close()


def _write(location: str, statement: str, params: tuple) -> None:
    conn = _connect(location)
    try:
        if location.startswith("postgresql://"):
            statement = statement.replace("?", "%s")
        conn.execute(statement, params)
    finally:
        conn.close()


def _edit_meta_model(location: str, edit) -> None:
    query = "SELECT value FROM meta WHERE name = 'model'"
    info = model_format.loads(_read(location, query), META_KIND)
    edit(info)
    body = model_format.dumps(info, META_KIND)
    _write(location, "UPDATE meta SET value = ? WHERE name = 'model'", (body,))


def _edit_schema(location: str, instance: int, **changes) -> None:
    query = f"SELECT body FROM schemas WHERE instance = {instance}"
    schema = dataclasses.replace(model_format.loads(_read(location, query), SCHEMA_KIND), **changes)
    body = model_format.dumps(schema, SCHEMA_KIND)
    _write(location, "UPDATE schemas SET body = ? WHERE instance = ?", (body, instance))


@pytest.fixture(scope="module")
def store_template(tmp_path_factory):
    """A SQLite store of a flat-partition classifier, copied per test (a fit per test is slow)."""
    path = tmp_path_factory.mktemp("store") / "model.db"
    X, y = classification_data(n=200)
    params = {**TREES, "rebuild": "background"}
    DurableModel.create(str(path), QSSClassifier(**params), X, y, user_ids(200)).close()
    return path


def _store(location: str, store_template) -> str:
    if location.startswith("postgresql://"):
        X, y = classification_data(n=200)
        params = {**TREES, "rebuild": "background"}
        model = QSSClassifier(**params)
        DurableModel.create(location, model, X, y, user_ids(200), overwrite=True).close()
    else:
        shutil.copy(store_template, location)
    return location


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "forgetting", *args],
        capture_output=True,
        text=True,
        timeout=120,  # the hang of M2 fails here instead of blocking the suite
    )


def test_a_store_whose_model_claims_more_instances_is_refused(db, store_template):
    """M2: the model entry says n_instances = 4 over the store's 3 instances; the fourth was
    never rebuilt, so wait_for_rebuilds, `forgetting forget` and `forgetting verify` never
    returned."""
    location = _store(db, store_template)
    _edit_meta_model(location, lambda info: info["params"].update(n_instances=4))
    with pytest.raises(StoreCorrupt, match="n_instances") as info:
        with DurableModel.open(location) as model:
            model.wait_for_rebuilds(timeout=WAIT_S)  # opening at all is the failure
    _one_line(info.value)
    for command in (
        ["verify", "--store", location],
        ["forget", "--store", location, "--ids", user_ids(1)[0]],
    ):
        done = _cli(*command)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "n_instances" in lines[0], done.stderr


def test_a_store_whose_model_claims_fewer_instances_is_refused(db, store_template):
    location = _store(db, store_template)
    _edit_meta_model(location, lambda info: info["params"].update(n_instances=2))
    with pytest.raises(StoreCorrupt, match="n_instances") as info:
        DurableModel.open(location)
    _one_line(info.value)


def test_a_huge_head_width_in_a_store_is_refused_under_4_gib(db, store_template):
    """M4: a schema with n_features = 30000 gave a raw numpy MemoryError (13.4 GiB)."""
    location = _store(db, store_template)
    _edit_schema(location, 0, n_features=30000)
    assert "n_features" in _refused_under_4_gib("store", location)


def test_a_store_schema_with_a_negative_partition_index_is_refused(db, store_template):
    location = _store(db, store_template)
    query = "SELECT body FROM schemas WHERE instance = 1"
    schema = model_format.loads(_read(location, query), SCHEMA_KIND)
    features = schema.partition.features.copy()
    features[0, 0] = -5
    _edit_schema(location, 1, partition=dataclasses.replace(schema.partition, features=features))
    with pytest.raises(StoreCorrupt, match="instance 1.*partition.features") as info:
        DurableModel.open(location)
    _one_line(info.value)
