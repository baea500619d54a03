"""Reading a store back: every table decoded and checked, then the estimator restored.

Every field is checked (id tag, feature length and finiteness, label range, pool flag,
contribution length, cell codes, schema output width), so a damaged or edited store gives
one :class:`StoreCorrupt` line naming the table and row or instance, never a traceback. An
instance whose schema or any contribution is missing is rebuilt on restore.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ..engine.validation import check_schema, code_layout
from ..estimators import restore_estimator
from ..io.model_format import ModelFileError, loads
from ..labels import UNLABELED, is_labeled
from ..persistence import version_mismatch
from ..preprocessing.table import NUM, TEXT
from ..schema import Schema
from ..schema.membership import derive_key, key_fingerprint
from ..snapshots import (
    EngineSnapshot,
    InstanceSnapshot,
    ModelSnapshot,
    RowsSnapshot,
    SnapshotError,
)
from .connection import describe
from .encode import KEY_KIND, META_KIND, PRIVACY_KIND, SCHEMA_KIND
from .errors import StoreCorrupt, StoreKindError
from .sql import FORMAT_V2, SQLStore, contrib_table

FOREST_CLASSES = ("ExactForestClassifier", "ExactForestRegressor")
"""Estimators whose stores are :class:`~forgetting.store.forest.DurableForest`'s."""


def _decode_id(key: bytes) -> int | str:
    kind, value = key[:2], key[2:].decode("utf-8")
    if kind == b"i:":
        number = int(value)
        if str(number) != value:
            raise ValueError("non-canonical integer id")
        return number
    if kind == b"s:":
        return value
    raise ValueError("unknown id type tag")


def _corrupt(location: str, where: str, problem: Any) -> StoreCorrupt:
    text = " ".join(str(problem).split())
    return StoreCorrupt(
        f"{describe(location)}: {where}: {text}; the store is damaged or was tampered with — "
        "restore it from a backup or refit (`forgetting fit --overwrite`)"
    )


class Loaded:
    """What :func:`read_model` reads from a store: the estimator and the persisted bookkeeping."""

    def __init__(
        self,
        estimator,
        info: dict,
        persisted: list,
        next_seq: int,
        rows: RowsSnapshot | None,
        columns: list[np.ndarray] | None = None,
    ):
        self.estimator = estimator
        self.info = info
        self.persisted = persisted
        self.next_seq = next_seq
        self.rows = rows
        """The stored rows the estimator was restored from (None after a fresh fit)."""
        self.columns = columns
        """A table model's raw columns read with ``rows`` (None otherwise)."""


def model_snapshot(
    info: dict, engine: EngineSnapshot, columns: list[np.ndarray] | None = None
) -> ModelSnapshot:
    """The model a store's meta ``info`` describes, over ``engine`` (its rows and instances);
    a table model's raw ``columns`` (read from the rows by :func:`read_rows`) join the
    table's names and kinds."""
    fitted = info["fitted"]
    if columns is not None:
        fitted = {**fitted, "table_": {**fitted["table_"], "columns": columns}}
    return ModelSnapshot(
        estimator=info["estimator"],
        params=info["params"],
        fitted=fitted,
        key_fingerprint=info["key_fingerprint"],
        key_derived=info["key_derived"],
        engine=engine,
    )


def read_model(store: SQLStore, secret_key: bytes | str | None) -> Loaded:
    """Read and check every table, then restore the estimator from the snapshot."""
    loc = store.location
    meta, records, bodies = store.read_all()
    if "model" not in meta:
        raise _corrupt(loc, "table meta", "the model entry is missing")
    try:
        info = loads(meta["model"], META_KIND, "model entry")
        if isinstance(info, dict) and info.get("estimator") in FOREST_CLASSES:
            raise StoreKindError(
                f"{describe(loc)} holds an {info['estimator']}, not a QSS model: open it "
                "with forgetting.store.DurableModel"
            )
        _check_info(info, store.n_instances)
    except (ModelFileError, ValueError, TypeError, KeyError) as err:
        raise _corrupt(loc, "table meta", err) from None
    mismatch = version_mismatch(info["libraries"])
    if mismatch:
        raise ValueError(
            f"{describe(loc)}: {mismatch}: bitwise exactness needs the same library versions"
        )
    if secret_key is None and "secret_key" in meta:
        try:
            secret_key = loads(meta["secret_key"], KEY_KIND, "secret key entry")
        except ModelFileError as err:
            raise _corrupt(loc, "table meta", err) from None
    _check_key(loc, info, secret_key)
    privacy = None
    if "privacy" in meta:
        try:
            privacy = loads(meta["privacy"], PRIVACY_KIND, "privacy ledger")
            if not isinstance(privacy, dict):
                raise ValueError("the privacy ledger is not a mapping")
        except (ModelFileError, ValueError) as err:
            raise _corrupt(loc, "table meta", err) from None
    info = {**info, "privacy": privacy}
    rows, columns = read_rows(loc, info, records)
    n_outputs = len(info["fitted"]["classes_"]) if "classes_" in info["fitted"] else 1
    instances = _read_instances(loc, bodies, records, rows, n_outputs, store.format == FORMAT_V2)
    snapshot = model_snapshot(info, EngineSnapshot(rows, instances, privacy), columns)
    try:
        estimator = restore_estimator(snapshot, secret_key=secret_key)
    except SnapshotError as err:
        raise _corrupt(loc, "the stored model", err) from None
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as err:
        raise _corrupt(loc, "restoring the model", f"{type(err).__name__}: {err}") from None
    persisted = [None if inst is None else inst.schema for inst in instances]
    engine = estimator.engine_
    persisted = [s if engine.schema_of(r) is s else None for r, s in enumerate(persisted)]
    next_seq = max((int(rec[1]) for rec in records), default=-1) + 1
    return Loaded(estimator, info, persisted, next_seq, rows, columns)


def _check_info(info: Any, n_instances: int) -> None:
    """The model entry's fields, and its ``n_instances`` parameter against the instances the
    store's tables hold (the meta ``n_instances``): instances beyond them would never be
    rebuilt."""
    if not isinstance(info, dict):
        raise ValueError("the model entry is not a mapping")
    for name, kind in (
        ("estimator", str),
        ("params", dict),
        ("fitted", dict),
        ("key_fingerprint", str),
        ("key_derived", bool),
        ("libraries", dict),
    ):
        if not isinstance(info.get(name), kind):
            raise ValueError(f"the model entry's {name} is missing or of the wrong type")
    p = info["params"].get("n_instances")
    if p != n_instances or type(p) is not int:
        raise ValueError(
            f"the model's n_instances is {str(p)[:20]}, the store holds {n_instances} instances"
        )
    fitted = info["fitted"]
    d = fitted.get("n_features_in_")
    if type(d) is not int or d < 1:
        raise ValueError("the model entry's n_features_in_ is not a positive int")
    if "classes_" in fitted and not isinstance(fitted["classes_"], np.ndarray):
        raise ValueError("the model entry's classes_ is not an array")
    names = info.get("feature_names")
    if names is not None and (
        not isinstance(names, list) or len(names) != d or not all(isinstance(n, str) for n in names)
    ):
        raise ValueError("the model entry's feature_names do not match the features")


def _check_key(location: str, info: dict, secret_key: bytes | str | None) -> None:
    """Refuse a missing or wrong key before anything is restored (it would silently move
    every row's D° membership)."""
    where = describe(location)
    if info["key_derived"]:
        if secret_key is not None:
            raise ValueError(
                f"{where}: this model's key is derived from random_state; do not pass a secret key"
            )
        return
    if secret_key is None:
        raise ValueError(
            f"{where}: this model was fitted with a secret key, which is not stored; pass it "
            "(secret_key=..., or --secret-key-file)"
        )
    try:
        key = derive_key(secret_key, 0)
    except TypeError as err:
        raise ValueError(f"{where}: {err}") from None
    if key_fingerprint(key) != info["key_fingerprint"]:
        raise ValueError(
            f"{where}: the secret key does not match the key this model was fitted with"
        )


def read_rows(
    loc: str, info: dict, records: list[tuple]
) -> tuple[RowsSnapshot, list[np.ndarray] | None]:
    """The store's rows as a snapshot, each field checked (one error line per defect), and a
    table model's raw columns (its rows' features are then None: the estimator encodes the
    columns on restore)."""
    fitted = info["fitted"]
    d = fitted["n_features_in_"]
    k = len(fitted["classes_"]) if "classes_" in fitted else None
    try:
        kinds = _table_kinds(fitted, d)
    except ValueError as err:
        raise _corrupt(loc, "table meta", err) from None
    ids, X_parts, targets, in_pool = [], [], [], []
    values: list[list] = []
    for rec in records:
        seq = rec[1]
        try:
            ids.append(_decode_id(bytes(rec[0])))
            raw = bytes(rec[2])
            if kinds is not None:
                values.append(_raw_row(raw, kinds))
            elif len(raw) != 4 * d:
                raise ValueError(f"{len(raw)} feature bytes, expected {4 * d}")
            X_parts.append(raw)
            target = rec[3]
            if target is None:
                targets.append(UNLABELED if k is not None else np.nan)
            else:
                value = float(target)
                if k is not None and not (value.is_integer() and 0 <= value < k):
                    raise ValueError(f"label index {value!r} outside 0..{k - 1}")
                if not np.isfinite(value):
                    raise ValueError("non-finite target")
                targets.append(int(value) if k is not None else value)
            if rec[4] not in (0, 1):
                raise ValueError(f"in_pool {rec[4]!r} is not 0 or 1")
            in_pool.append(bool(rec[4]))
        except (ValueError, TypeError, UnicodeDecodeError, IndexError) as err:
            raise _corrupt(loc, f"table rows, row seq {seq}", err) from None
    X, columns = None, None
    if kinds is None:
        X = np.frombuffer(b"".join(X_parts), dtype="<f4").reshape(len(records), d)
        X = X.astype(np.float32)
        if not np.all(np.isfinite(X)):
            raise _corrupt(loc, "table rows", "features hold NaN or infinity")
    else:
        columns = _raw_columns(values, kinds)
    if len(set(ids)) != len(ids):
        raise _corrupt(loc, "table rows", "duplicate ids")
    target_array = np.array(targets, dtype=np.int64 if k is not None else np.float64)
    rows = RowsSnapshot(ids=ids, X=X, targets=target_array, in_pool=np.array(in_pool, dtype=bool))
    return rows, columns


def _table_kinds(fitted: dict, d: int) -> list[str] | None:
    """A table model's column kinds from its model entry (None for a model of numeric rows);
    ValueError unless they are d kinds the raw-table path knows."""
    table = fitted.get("table_")
    if table is None:
        return None
    if not (
        isinstance(table, dict)
        and set(table) == {"names", "kinds"}
        and isinstance(table["kinds"], list)
        and len(table["kinds"]) == d
        and all(kind in (NUM, TEXT) for kind in table["kinds"])
    ):
        raise ValueError("the model entry's table_ is not a table's names and kinds")
    return table["kinds"]


def _raw_row(raw: bytes, kinds: list[str]) -> list:
    """One stored raw row (encode.raw_rows: a JSON array), each value checked against its
    column's kind: a finite number or null, a string or null."""
    try:
        row = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"raw row is not JSON: {type(err).__name__}") from None
    if not isinstance(row, list) or len(row) != len(kinds):
        raise ValueError(f"raw row is not an array of {len(kinds)} values")
    for j, (value, kind) in enumerate(zip(row, kinds, strict=True)):
        if value is None:
            continue
        if kind == NUM:
            if type(value) not in (int, float) or not math.isfinite(value):
                raise ValueError(f"raw row value {j} is not a finite number")
        elif type(value) is not str:
            raise ValueError(f"raw row value {j} is not text")
    return row


def _no_constant(name: str):
    raise ValueError(f"raw row holds {name}")


def _raw_columns(values: list[list], kinds: list[str]) -> list[np.ndarray]:
    """Rows of checked raw values as the table's columns (float64 with NaN, or object)."""
    columns = []
    for j, kind in enumerate(kinds):
        if kind == NUM:
            columns.append(
                np.array([np.nan if r[j] is None else float(r[j]) for r in values], np.float64)
            )
        else:
            column = np.empty(len(values), dtype=object)
            column[:] = [r[j] for r in values]
            columns.append(column)
    return columns


def _read_instances(
    loc: str,
    bodies: list,
    records: list[tuple],
    rows: RowsSnapshot,
    n_outputs: int,
    v2: bool = False,
) -> list:
    """Each instance's schema and the labeled rows' contributions; an instance whose schema
    or any contribution is missing is rebuilt on restore (None). ``v2``: a v2 store read
    as it is (contributions in columns of ``rows``), for error messages. A table model's
    schemas read encoded rows, known only once the estimator refits the encoding: the engine
    checks them then, on restore (engine.validation)."""
    labeled = is_labeled(rows.targets)
    out: list[InstanceSnapshot | None] = []
    for r, body in enumerate(bodies):
        if body is None:
            out.append(None)
            continue
        try:
            schema = loads(body, SCHEMA_KIND, f"schema of instance {r}")
            if rows.X is not None:
                check_schema(schema, rows.X.shape[1], n_outputs)
            elif not isinstance(schema, Schema):  # a table model: the engine checks it
                raise ValueError(f"expected a schema, found {type(schema).__name__}")
        except Exception as err:  # noqa: BLE001 - any defect of decoded data is the store's
            raise _corrupt(loc, f"table schemas, instance {r}", err) from None
        blobs = [rec[5 + r] for rec, lab in zip(records, labeled, strict=True) if lab]
        if any(b is None for b in blobs):
            out.append(None)
            continue
        try:
            codes, residuals = _decode_contributions(schema, blobs, n_outputs)
        except (ValueError, AttributeError, TypeError) as err:
            where = f"table rows, column c{r}" if v2 else f"table {contrib_table(r)}"
            raise _corrupt(loc, where, err) from None
        out.append(InstanceSnapshot(schema, codes, residuals))
    return out


def _decode_contributions(schema, blobs: list, n_outputs: int):
    """Codes and residuals from stored blobs (codes bytes, then int64 residuals), checked."""
    code_dtype, n_codes, n_cells = code_layout(schema)
    code_bytes = n_codes * code_dtype.itemsize
    width = code_bytes + 8 * n_outputs
    raw = b"".join(bytes(b) for b in blobs)
    if any(len(bytes(b)) != width for b in blobs):
        raise ValueError(f"a contribution is not {width} bytes long")
    table = np.frombuffer(raw, dtype=np.uint8).reshape(len(blobs), width)
    codes = np.ascontiguousarray(table[:, :code_bytes]).view(code_dtype)
    residuals = np.ascontiguousarray(table[:, code_bytes:]).view("<i8").astype(np.int64)
    codes = codes.reshape(len(blobs), n_codes)
    if codes.size and int(codes.max()) >= n_cells:
        raise ValueError(f"a cell code is ≥ {n_cells}, the number of cells")
    return codes, residuals.reshape(len(blobs), n_outputs)
