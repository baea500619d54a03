"""Pipeline files: a model file (no pickles) whose payload holds every step's state.

The container is :mod:`forgetting.io.model_format`'s, of its own kind
(``"forgetting-pipeline-file"``, so a pipeline file given to ``QSSClassifier.load`` is refused
by kind, and the other way round). The payload is a :class:`PipelineSnapshot`: the step names,
the fitted exact steps, the pipeline's parameters and input layout, the raw rows (values,
labels, ids) and the estimator's :class:`~forgetting.snapshots.ModelSnapshot` — never the
membership key unless ``store_key=True``. The step and statistic classes are added to the
codec's allowlist here (``register_object`` / ``register_dataclass``, the designed extension
point), so nothing outside it is ever restored.

Loading checks the file against itself before it serves: the steps are refitted from the raw
rows and must give the stored state's digest, and the estimator must hold exactly the
transformed rows; a tampered or inconsistent file is refused with one
:class:`~forgetting.io.model_format.ModelFileError` line, as a model file is.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..estimators import estimator_classes
from ..ids import normalize_ids
from ..io.atomic import atomic_write
from ..io.model_format import (
    ModelFileError,
    digest,
    dumps,
    loads,
    register_dataclass,
    register_object,
)
from ..persistence import (
    HEX64,
    SNAPSHOT_KIND,
    TEXTS,
    check_entries,
    checked_header,
    library_versions,
    restored,
)
from ..preprocessing import (
    Chain,
    ColumnTransformer,
    Frozen,
    MinMaxScaler,
    MissingIndicator,
    OneHotEncoder,
    OnSchemaRows,
    OrdinalEncoder,
    Passthrough,
    SimpleImputer,
    StandardScaler,
)
from ..preprocessing.base import Rows
from ..preprocessing.statistics import Moments, ValueCounts, new_hash
from ..preprocessing.table import (
    NUM,
    TEXT,
    Layout,
    RowBuffer,
    Table,
    canonical_order,
    take,
    to_matrix,
)
from ..schema.membership import draws, id_bytes
from ..snapshots import ModelSnapshot

FILE_KIND = "forgetting-pipeline-file"


@dataclass(frozen=True)
class PipelineSnapshot:
    """A fitted pipeline as plain data (what a pipeline file holds)."""

    names: list[str]
    """Every step's name, the estimator's last."""
    steps: list[Any]
    """The fitted exact preprocessing steps, in order."""
    params: dict[str, Any]
    """``rho`` and ``min_schema_rows``."""
    layout: Layout
    """The input's column names (or None), kinds, and whether it was a numeric array."""
    rows: dict[str, np.ndarray]
    """Raw values (``x``: the matrix, or ``c0``, ``c1``, …: the columns) and labels ``y``."""
    ids: list
    estimator: ModelSnapshot


def _allow_pipeline_types() -> None:
    register_dataclass(PipelineSnapshot, "forgetting.PipelineSnapshot")
    register_dataclass(Layout, "forgetting.preprocessing.Layout")
    for cls in (
        Chain,
        ColumnTransformer,
        Frozen,
        MinMaxScaler,
        MissingIndicator,
        OneHotEncoder,
        OnSchemaRows,
        OrdinalEncoder,
        Passthrough,
        SimpleImputer,
        StandardScaler,
        Moments,
        ValueCounts,
    ):
        register_object(cls, f"forgetting.preprocessing.{cls.__qualname__}")


_allow_pipeline_types()


ENTRIES = {
    "class": str,
    "libraries": TEXTS,
    "snapshot": PipelineSnapshot,
    "secret_key": (type(None), str, bytes),
    "snapshot_digest": HEX64,
}
"""A pipeline file's entries, every one and nothing else (``persistence.check_entries``);
``snapshot_digest`` is the digest of its snapshot's encoding, which the loaded pipeline must
give again: an edit anywhere (the estimator's classes, a step's state) is refused."""


def _snapshot(pipeline: Any) -> PipelineSnapshot:
    pipeline._check_fitted()
    est = pipeline._final_estimator
    est.wait_for_rebuilds()
    with pipeline._lock:
        buf = pipeline._rows
        derived = ("ids", "id_raw", "draws", "member")
        rows = {k: buf.get(k).copy() for k in buf.names if k not in derived}
        return PipelineSnapshot(
            names=[name for name, _ in pipeline.steps],
            steps=[step for _, step in pipeline.chain_.steps],
            params={"rho": pipeline.rho, "min_schema_rows": pipeline.min_schema_rows},
            layout=pipeline.layout_,
            rows=rows,
            ids=buf.get("ids").tolist(),
            estimator=est.snapshot(),
        )


def save_pipeline(pipeline: Any, path: str | Path, *, store_key: bool = False) -> None:
    """Write a fitted pipeline atomically (see the module docstring)."""
    snapshot = _snapshot(pipeline)
    est = pipeline._final_estimator
    state = {
        "class": type(pipeline).__name__,
        "libraries": library_versions(),
        "snapshot": snapshot,
        "secret_key": est.secret_key if store_key and est.secret_key is not None else None,
        "snapshot_digest": digest(snapshot, SNAPSHOT_KIND),
    }
    atomic_write(path, dumps(state, FILE_KIND))


def load_pipeline(
    cls: type,
    path: str | Path,
    allow_version_mismatch: bool = False,
    *,
    secret_key: bytes | str | None = None,
) -> Any:
    """Read a pipeline written by :func:`save_pipeline` as an instance of ``cls``."""
    what = str(path)
    state = loads(Path(path).read_bytes(), FILE_KIND, what)
    if not isinstance(state, dict) or not isinstance(state.get("snapshot"), PipelineSnapshot):
        raise ModelFileError(f"{what}: the file holds no pipeline snapshot")
    check_entries(state, FILE_KIND, what, ENTRIES)
    mismatch = checked_header(state, cls.__name__, what, allow_version_mismatch)
    snap: PipelineSnapshot = state["snapshot"]
    if secret_key is None:
        secret_key = state.get("secret_key")
    est = _restore_estimator(snap.estimator, secret_key, what)
    try:
        pipeline = _pipeline(cls, snap, est)
        problem = _inconsistency(pipeline, snap)  # a step missing a field fails its digest
    except ModelFileError:
        raise
    except Exception as err:  # noqa: BLE001 - any defect of decoded data is the file's
        raise ModelFileError(
            f"{what}: inconsistent pipeline ({type(err).__name__}: {err})"
        ) from None
    if problem:
        raise ModelFileError(f"{what}: {problem}")
    if not mismatch and digest(_snapshot(pipeline), SNAPSHOT_KIND) != state["snapshot_digest"]:
        raise ModelFileError(f"{what}: it does not give the pipeline that was saved (edited)")
    return pipeline


def _restore_estimator(snapshot: Any, secret_key: Any, what: str) -> Any:
    if not isinstance(snapshot, ModelSnapshot):
        raise ModelFileError(f"{what}: the pipeline holds no estimator snapshot")
    cls = estimator_classes().get(snapshot.estimator)
    if cls is None:
        raise ModelFileError(f"{what}: unknown estimator {str(snapshot.estimator)[:40]!r}")
    if not snapshot.key_derived and secret_key is None:
        raise ValueError(
            f"{what}: this pipeline was fitted with a secret key, which is not in the file; "
            "pass it as secret_key"
        )
    return restored(cls, snapshot, secret_key, what)


def _check_rows(snap: PipelineSnapshot) -> dict[str, np.ndarray]:
    """The raw rows of the file, checked against its layout; raises ModelFileError."""
    layout, rows = snap.layout, snap.rows
    if not isinstance(layout, Layout) or not isinstance(rows, dict):
        raise ModelFileError("the rows or the layout are malformed")
    n = len(snap.ids)
    names = ["x"] if layout.matrix else [f"c{j}" for j in range(len(layout.kinds))]
    if set(rows) != {*names, "y"}:
        raise ModelFileError("the rows do not match the layout")
    for name in names:
        a = rows[name]
        kind = NUM if layout.matrix else layout.kinds[int(name[1:])]
        ok = isinstance(a, np.ndarray) and len(a) == n
        if ok and layout.matrix:
            ok = a.dtype == np.float64 and a.shape == (n, len(layout.kinds))
        elif ok and kind == NUM:
            ok = a.dtype == np.float64 and a.ndim == 1
        elif ok and kind == TEXT:
            ok = a.dtype == object and all(v is None or isinstance(v, str) for v in a.tolist())
        if not ok:
            raise ModelFileError(f"the raw column {name} is malformed")
    if not isinstance(rows["y"], np.ndarray) or rows["y"].shape != (n,):
        raise ModelFileError("the labels are malformed")
    return rows


def _pipeline(cls: type, snap: PipelineSnapshot, est: Any) -> Any:
    rows = _check_rows(snap)
    names = snap.names
    if not isinstance(names, list) or len(names) != len(snap.steps) + 1:
        raise ModelFileError("the step names do not match the steps")
    ids = normalize_ids(snap.ids)
    steps = list(zip(names[:-1], snap.steps, strict=True))
    pipeline = cls([*steps, (names[-1], est)], **snap.params)
    pipeline.chain_ = Chain(steps)
    pipeline.layout_ = snap.layout
    pipeline.n_features_in_ = len(snap.layout.kinds)
    if snap.layout.names is not None:
        pipeline.feature_names_in_ = np.array(snap.layout.names, dtype=object)
    key = pipeline._pipeline_key(est)
    id_raw = [id_bytes(i) for i in ids]
    id_array = np.empty(len(ids), dtype=object)
    id_array[:] = ids
    raw_array = np.empty(len(ids), dtype=object)
    raw_array[:] = id_raw
    parts = dict(rows)
    parts.update(ids=id_array, id_raw=raw_array, draws=draws(key, id_raw, 0)[:, 0])
    parts["member"] = np.zeros(len(ids), dtype=bool)  # set by _set_rows
    pipeline._set_rows(RowBuffer(parts), key, pipeline._rule(est), est)
    return pipeline


def _inconsistency(pipeline: Any, snap: PipelineSnapshot) -> str | None:
    """Why the file is not one pipeline (None if it is): the steps are refitted from the rows
    and compared with the stored state, and the estimator's rows with the transformed ones."""
    buf = pipeline._rows
    layout = pipeline.layout_
    if layout.matrix:
        X = buf.get("x")
    else:
        X = Table(tuple(buf.get(f"c{j}") for j in range(len(layout.kinds))), layout.names)
    row_draws = buf.get("draws")
    order = canonical_order(row_draws, buf.get("id_raw").tolist())
    members = pipeline._members
    refit = copy.deepcopy(pipeline.chain_)
    try:
        refit.fit_rows(Rows(take(X, order), buf.get("y")[order], members[order]))
    except Exception as err:  # noqa: BLE001 - a step that cannot refit from its rows
        return f"the steps cannot be refitted from the rows ({type(err).__name__}: {err})"
    h_file, h_rows = new_hash(), new_hash()
    pipeline.chain_.digest_into(h_file)
    refit.digest_into(h_rows)
    if h_file.digest() != h_rows.digest():
        return "the steps' stored state does not match the rows in the file (tampered?)"
    rows = snap.estimator.engine.rows
    est_ids = list(rows.ids)
    if sorted(map(id_bytes, est_ids)) != sorted(buf.get("id_raw").tolist()):
        return "the estimator holds other rows than the pipeline"
    pos = np.array([pipeline._position[i] for i in est_ids], dtype=np.int64)
    Xt = to_matrix(pipeline.chain_.transform(take(X, pos)), "the pipeline's steps")
    # equal_nan: a missing value the steps pass on is NaN in both (the forest reads it)
    if rows.X is None or not np.array_equal(Xt.astype(np.float32), rows.X, equal_nan=True):
        return "the estimator's rows are not the transformed rows of the pipeline"
    return None
