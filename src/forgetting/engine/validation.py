"""A snapshot checked whole before an engine is restored from it: the one place for the rules.

Snapshots come back from model files and stores, which whoever can write to them may have
edited (a checksum is no defence: it is recomputed). Decoding restores only plain data of
allowlisted types, but that data can still disagree with itself, and the restore would act on
it: an instance list shorter than ``n_instances`` leaves instances that nothing rebuilds (so
``wait_for_rebuilds`` never returns); a label index outside the classes, a NaN feature, a
residual of the wrong width or a duplicate id corrupts every sum built on it; a cell code or a
partition index out of range is read by compiled kernels that check no bounds; a size field
(a head's width, a table's depth) makes the restore allocate far more than the file holds.

Every rule below is a property of each snapshot the library writes, so a valid model loads
exactly as before; a snapshot that breaks one is refused with one
:class:`~forgetting.snapshots.SnapshotError` line naming the field, before anything is
allocated for it or run on it. The checks run in an order that keeps that promise: types and
counts first, then sizes against :func:`~forgetting.snapshots.memory_budget`, then each
schema on one zero row, and only then the restore.
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any

import numpy as np

from ..content.accumulators import (
    CLASSIFICATION_SCALE_BITS,
    MAX_ABS_RESIDUAL,
    REGRESSION_SCALE_BITS,
    level_pairs,
)
from ..labels import UNLABELED
from ..privacy.ledger import check_ledger_state
from ..schema import Schema, head_kind
from ..schema.base_model import BaseModel
from ..schema.codebook import Codebook
from ..schema.partitions import MAX_TABLE_ENTRIES, ExactLinear, ThresholdPartition
from ..schema.preprocess import Preprocessor
from ..schema.random_features import RF_MAX
from ..snapshots import (
    EngineSnapshot,
    InstanceSnapshot,
    RowsSnapshot,
    SnapshotError,
    memory_budget,
)
from .config import EngineConfig

MAX_CELL_BITS = 32
"""A flat partition's cells are uint32 at most (``ThresholdPartition.cell_dtype``)."""
MAX_LEVELS = 16
MAX_CENTROIDS = 1 << 16
"""The codebook's bounds (the estimators' ``n_levels`` / ``n_centroids`` constraints; codes
are uint16 at most)."""
MAX_SHIFT = 2048
"""An exact stage's output shift: far beyond any float64 exponent, so never a real one."""
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_ID_INDEX_BYTES = 96
"""A row's share of the id index and its Python id object (a floor, not a measurement)."""


def _fail(field: str, problem: str) -> SnapshotError:
    return SnapshotError(f"{field}: {problem}")


def _array(value: Any, field: str, ndim: int, kinds: str) -> np.ndarray:
    """``value`` as an ndarray of ``ndim`` dimensions and a dtype kind in ``kinds``."""
    if not isinstance(value, np.ndarray) or value.ndim != ndim or value.dtype.kind not in kinds:
        found = (
            f"a {value.ndim}-d {value.dtype} array"
            if isinstance(value, np.ndarray)
            else type(value).__name__
        )
        raise _fail(field, f"expected a {ndim}-d array of kind {kinds!r}, found {found}")
    return value


def _count(value: Any, field: str, low: int, high: int) -> int:
    """An integer field (not a bool) within [low, high]."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, Integral):
        raise _fail(field, f"expected an integer, found {type(value).__name__}")
    if not low <= int(value) <= high:
        raise _fail(field, f"{int(value)} is outside {low}..{high}")
    return int(value)


# -- the whole snapshot ----------------------------------------------------------------------
def check_snapshot(config: EngineConfig, snapshot: Any) -> None:
    """Refuse a snapshot the engine of ``config`` could not have written (SnapshotError)."""
    if not isinstance(snapshot, EngineSnapshot):
        raise _fail("engine", f"expected an engine snapshot, found {type(snapshot).__name__}")
    task, k, p = config.schema.task, config.schema.n_outputs, config.n_instances
    n, d, n_labeled = check_rows(snapshot.rows, task, k)
    instances = snapshot.instances
    if not isinstance(instances, list) or len(instances) != p:
        found = len(instances) if isinstance(instances, list) else type(instances).__name__
        raise _fail("instances", f"{found} entries, but n_instances is {p}")
    need = _rows_bytes(n, d, p)
    _within_budget(need, "rows")
    for r, inst in enumerate(instances):
        if inst is None:
            continue
        where = f"instance {r}"
        if not isinstance(inst, InstanceSnapshot):
            raise _fail(where, f"expected an instance snapshot, found {type(inst).__name__}")
        _check_matches_config(where, inst.schema, config)
        need += check_schema(inst.schema, d, k, where=where, already=need)
        need += _check_contributions(where, inst, n_labeled, k, task)
        _within_budget(need, f"{where}: its contributions")
    _check_privacy(config, snapshot.privacy)


def _check_privacy(config: EngineConfig, privacy: Any) -> None:
    """mode="dp": the ledger as the library writes it (``check_ledger_state``), of the
    mechanism the parameters give (ε, δ, task, clip, p); any other mode keeps none."""
    if not config.private:
        if privacy is not None:
            raise _fail("privacy", "a model outside mode='dp' keeps no privacy ledger")
        return
    if privacy is None:
        raise _fail("privacy", "a mode='dp' model's snapshot holds its privacy ledger")
    try:
        check_ledger_state(privacy)
    except ValueError as err:
        raise _fail("privacy", str(err)) from None
    wanted = (config.epsilon, config.delta, config.schema.task, config.schema.residual_clip)
    found = tuple(privacy[k] for k in ("epsilon", "delta", "task", "clip"))
    if found != wanted or privacy["n_instances"] != config.n_instances:
        raise _fail("privacy", "the ledger's epsilon, delta, clip or instances are not the model's")


def check_rows(
    rows: Any, task: str, n_outputs: int, *, missing: bool = False
) -> tuple[int, int, int]:
    """The rows' count, width and labeled count, once every column agrees: unique canonical
    ids, finite float32 features (``missing``: NaN marks a missing value, infinity is still
    refused), class indices in [-1, k) (classification) or finite-or-NaN floats
    (regression), boolean pool flags."""
    if not isinstance(rows, RowsSnapshot):
        raise _fail("rows", f"expected a rows snapshot, found {type(rows).__name__}")
    ids = rows.ids
    if not isinstance(ids, list):
        raise _fail("rows.ids", f"expected a list, found {type(ids).__name__}")
    n = len(ids)
    _check_ids(ids)
    X = _array(rows.X, "rows.X", 2, "f")
    if X.dtype != np.float32 or X.shape[0] != n or X.shape[1] < 1:
        raise _fail("rows.X", f"{X.dtype} of shape {X.shape}, expected float32 of ({n}, d ≥ 1)")
    if missing:
        if np.isinf(X).any():
            raise _fail("rows.X", "features hold infinity (NaN marks a missing value)")
    elif n and not np.isfinite(X.sum(dtype=np.float64)):  # NaN and ±inf survive the sum
        raise _fail("rows.X", "features hold NaN or infinity")
    targets = _array(rows.targets, "rows.targets", 1, "if")
    if targets.shape[0] != n:
        raise _fail("rows.targets", f"{targets.shape[0]} entries for {n} ids")
    if task == "classification":
        if targets.dtype != np.int64:
            raise _fail("rows.targets", f"class indices must be int64, found {targets.dtype}")
        if n and not (UNLABELED <= int(targets.min()) and int(targets.max()) < n_outputs):
            bad = targets[(targets < UNLABELED) | (targets >= n_outputs)][0]
            raise _fail("rows.targets", f"label index {int(bad)} outside -1..{n_outputs - 1}")
        labeled = targets != UNLABELED
    else:
        if targets.dtype != np.float64:
            raise _fail("rows.targets", f"targets must be float64, found {targets.dtype}")
        if np.isinf(targets).any():
            raise _fail("rows.targets", "a target is infinite (NaN marks an unlabeled row)")
        labeled = ~np.isnan(targets)
    in_pool = _array(rows.in_pool, "rows.in_pool", 1, "b")
    if in_pool.shape[0] != n:
        raise _fail("rows.in_pool", f"{in_pool.shape[0]} entries for {n} ids")
    return n, int(X.shape[1]), int(np.count_nonzero(labeled))


def _check_ids(ids: list) -> None:
    """Plain ints in int64 and strs (what the row store holds), UTF-8 encodable, unique."""
    kinds = set(map(type, ids))
    if not kinds <= {int, str}:
        odd = next(i for i in ids if type(i) not in (int, str))
        raise _fail("rows.ids", f"ids must be ints or strings, found a {type(odd).__name__}")
    if int in kinds:
        ints = [i for i in ids if type(i) is int]
        if min(ints) < _INT64_MIN or max(ints) > _INT64_MAX:
            raise _fail("rows.ids", "an integer id does not fit in int64")
    if str in kinds:
        for i in ids:
            if type(i) is str and not i.isascii():
                try:
                    i.encode("utf-8")
                except UnicodeEncodeError:
                    raise _fail("rows.ids", "an id is not valid UTF-8 text") from None
    if len(set(ids)) != len(ids):
        seen: set = set()
        dup = next(i for i in ids if i in seen or seen.add(i))
        raise _fail("rows.ids", f"duplicate id {str(dup)[:40]!r}")


def _check_matches_config(where: str, schema: Any, config: EngineConfig) -> None:
    """The schema is of the kind the parameters make: partition, head, encoder, clip, task."""
    if not isinstance(schema, Schema):
        raise _fail(f"{where}: schema", f"expected a schema, found {type(schema).__name__}")
    wanted = config.schema
    if (schema.partition is None) != (wanted.partition == "rq"):
        raise _fail(f"{where}: schema", f"its partition is not the parameters' {wanted.partition}")
    try:
        kind = head_kind(schema.head)
    except (ValueError, TypeError) as err:
        raise _fail(f"{where}: schema.head", str(err)) from None
    if kind != head_kind(wanted.head):
        raise _fail(f"{where}: schema.head", f"{kind!r}, but the parameters give {wanted.head!r}")
    if (schema.encoder is None) != (wanted.encoder is None):
        raise _fail(f"{where}: schema.encoder", "does not match the parameters' encoder")
    if schema.residual_clip != wanted.residual_clip:
        raise _fail(f"{where}: schema.residual_clip", "does not match the parameters' clip")
    if not isinstance(schema.base_model, BaseModel) or schema.base_model.task != wanted.task:
        raise _fail(f"{where}: schema.base_model", f"is not a {wanted.task} model")


def _check_contributions(where: str, inst: InstanceSnapshot, n_labeled: int, k: int, task: str):
    """Codes (one per group, within the cells, the layout's dtype) and int64 residuals (k
    wide, within the bound that keeps every sum exact) of each labeled row; returns their
    bytes."""
    code_dtype, n_groups, n_cells = code_layout(inst.schema)
    codes = _array(inst.codes, f"{where}: codes", 2, "iu")
    if codes.dtype != code_dtype or codes.shape != (n_labeled, n_groups):
        raise _fail(
            f"{where}: codes",
            f"{codes.dtype} of shape {codes.shape}, expected {code_dtype} of "
            f"({n_labeled} labeled rows, {n_groups})",
        )
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= n_cells):
        raise _fail(f"{where}: codes", f"a cell code is outside 0..{n_cells - 1}")
    residuals = _array(inst.residuals, f"{where}: residuals", 2, "i")
    if residuals.dtype != np.int64 or residuals.shape != (n_labeled, k):
        raise _fail(
            f"{where}: residuals",
            f"{residuals.dtype} of shape {residuals.shape}, expected int64 of "
            f"({n_labeled} labeled rows, {k} outputs)",
        )
    bits = CLASSIFICATION_SCALE_BITS if task == "classification" else REGRESSION_SCALE_BITS
    limit = int(MAX_ABS_RESIDUAL) << bits
    if residuals.size and (int(residuals.min()) < -limit or int(residuals.max()) > limit):
        raise _fail(f"{where}: residuals", "a residual is beyond the bound of exact sums")
    return n_labeled * (codes.itemsize * n_groups + 8 * k + 32)  # + the rows' digests


def code_layout(schema: Any) -> tuple[np.dtype, int, int]:
    """(code dtype, codes per row, number of cells) of a schema's partition: the paper's RQ
    codebook, or a flat partition of many tables."""
    if getattr(schema, "partition", None) is not None:
        part = schema.partition
        return np.dtype(part.cell_dtype), part.n_tables, part.n_cells
    cb = schema.codebook
    return np.dtype(cb.code_dtype), cb.n_levels, cb.n_centroids


# -- one schema ------------------------------------------------------------------------------
def check_schema(
    schema: Any, n_features: int, n_outputs: int, *, where: str = "", already: int = 0
) -> int:
    """Check a decoded schema's parts against each other, ``n_features`` inputs and
    ``n_outputs`` outputs, then run it once on a zero row and check what it returns.

    Returns the bytes its instance's content will take (tables or accumulators, head sums);
    with ``already`` bytes spoken for, more than :func:`memory_budget` is refused before any
    of it is allocated. Raises SnapshotError naming ``where`` and the field."""
    where = f"{where}: schema" if where else "schema"
    if not isinstance(schema, Schema):
        raise _fail(where, f"expected a schema, found {type(schema).__name__}")
    _check_base_model(where, schema.base_model, n_outputs)
    need = _check_layout(where, schema, n_outputs) + _check_head_fields(where, schema)
    # the zero-row run below draws the random features' R (d · E float64) and little else
    _within_budget(already + 8 * n_features * (int(schema.rf_width) + 2), where)
    width = _check_inputs(where, schema, n_features, n_outputs)
    _check_against_width(where, schema, width)
    zero = np.zeros((1, n_features), dtype=np.float32)
    try:
        codes, g = schema.transform(zero)
        head_width = None if schema.head_kind is None else schema.head_inputs(zero).shape[1]
    except Exception as err:  # noqa: BLE001 - any failure of decoded parts is the snapshot's
        raise _fail(where, f"unusable ({type(err).__name__}: {err})") from None
    _, n_groups, _ = code_layout(schema)
    if g.shape != (1, n_outputs) or codes.shape != (1, n_groups):
        raise _fail(where, f"gives outputs of shape {g.shape}, codes {codes.shape}")
    if head_width is not None and head_width != schema.n_features:
        raise _fail(
            f"{where}.n_features",
            f"{schema.n_features}, but its head computes {head_width} features",
        )
    _within_budget(already + need, f"{where}'s content")
    return need


def _check_base_model(where: str, g: Any, n_outputs: int) -> None:
    """g's output bookkeeping: k outputs, columns within them (checked before g runs, since
    its first prediction allocates by them)."""
    field = f"{where}.base_model"
    if not isinstance(g, BaseModel):
        raise _fail(field, f"expected a base model, found {type(g).__name__}")
    if g.task not in ("classification", "regression"):
        raise _fail(field, f"unknown task {str(g.task)[:40]!r}")
    _count(g.n_outputs, f"{field}.n_outputs", n_outputs, n_outputs)
    columns = _array(g.columns, f"{field}.columns", 1, "iu")
    if columns.size and (int(columns.min()) < 0 or int(columns.max()) >= n_outputs):
        raise _fail(f"{field}.columns", f"a column is outside 0..{n_outputs - 1}")
    constant = _array(g.constant, f"{field}.constant", 1, "f")
    if constant.shape[0] not in (1, n_outputs):
        raise _fail(f"{field}.constant", f"{constant.shape[0]} values for {n_outputs} outputs")


def _check_layout(where: str, schema: Schema, k: int) -> int:
    """The codebook or the flat partition (exactly one), its shapes and index ranges that do
    not depend on the input width; returns the bytes of the content it implies."""
    part, codebook = schema.partition, schema.codebook
    if (part is None) == (codebook is None):
        raise _fail(where, "has either a codebook or a flat partition")
    if codebook is not None:
        field = f"{where}.codebook"
        if not isinstance(codebook, Codebook):
            raise _fail(field, f"expected a codebook, found {type(codebook).__name__}")
        C = _array(codebook.centroids, f"{field}.centroids", 3, "f")
        levels, b = C.shape[0], C.shape[1]
        _count(levels, f"{field} levels", 1, MAX_LEVELS)
        _count(b, f"{field} centroids", 2, MAX_CENTROIDS)
        if not np.isfinite(C).all():
            raise _fail(f"{field}.centroids", "hold NaN or infinity")
        if schema.probe_codes is not None or schema.probe_folds is not None:
            raise _fail(where, "a codebook has no probes")
        return 16 * levels * b * (k + 1) + 16 * len(level_pairs(levels)) * b * b
    field = f"{where}.partition"
    if not isinstance(part, ThresholdPartition):
        raise _fail(field, f"expected a flat partition, found {type(part).__name__}")
    features = _array(part.features, f"{field}.features", 2, "iu")
    T, depth = features.shape
    _count(T, f"{field} tables", 1, _INT64_MAX)
    _count(depth, f"{field} depth", 1, MAX_CELL_BITS)
    entries = T * (1 << depth) * k
    if entries > max(MAX_TABLE_ENTRIES, 2 * T * k):  # what partition_depth ever gives
        raise _fail(field, f"{T} tables of depth {depth} exceed the library's table size")
    thresholds = _array(part.thresholds, f"{field}.thresholds", 2, "f")
    if thresholds.shape != features.shape or not np.isfinite(thresholds).all():
        raise _fail(f"{field}.thresholds", "do not match the tests (shape, or non-finite)")
    if features.size and int(features.min()) < 0:
        raise _fail(f"{field}.features", "a tested coordinate is negative")
    _check_stages(field, part)
    _check_probes(where, schema, T, depth)
    return 16 * entries + 16 * T * (1 << depth)


def _check_stages(field: str, part: ThresholdPartition) -> None:
    """Each exact stage's weights, center and shift; a stage's input is the previous one's
    output (the first stage's input width is checked once it is known)."""
    previous = None
    for name in ("stage1", "stage2"):
        stage = getattr(part, name)
        if stage is None:
            continue
        at = f"{field}.{name}"
        if not isinstance(stage, ExactLinear):
            raise _fail(at, f"expected an exact linear stage, found {type(stage).__name__}")
        W = _array(stage.weights, f"{at}.weights", 2, "f")
        center = _array(stage.center, f"{at}.center", 1, "f")
        if center.shape[0] != W.shape[1] or W.shape[0] < 1:
            raise _fail(at, f"weights {W.shape} and center {center.shape} do not match")
        if previous is not None and W.shape[1] != previous:
            raise _fail(at, f"takes {W.shape[1]} inputs, the stage before gives {previous}")
        if not (np.isfinite(W).all() and np.isfinite(center).all()):
            raise _fail(at, "holds NaN or infinity")
        _count(stage.shift, f"{at}.shift", 0, MAX_SHIFT)
        previous = W.shape[0]
    if previous is not None and part.features.size and int(part.features.max()) >= previous:
        raise _fail(f"{field}.features", f"a tested coordinate is beyond the {previous} outputs")


def _check_probes(where: str, schema: Schema, T: int, depth: int) -> None:
    codes, folds = schema.probe_codes, schema.probe_folds
    if codes is None and folds is None:
        return
    codes = _array(codes, f"{where}.probe_codes", 2, "iu")
    folds = _array(folds, f"{where}.probe_folds", 1, "iu")
    if codes.shape[1] != T or folds.shape[0] != codes.shape[0]:
        raise _fail(f"{where}.probe_codes", f"shape {codes.shape} for {T} tables")
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= 1 << depth):
        raise _fail(f"{where}.probe_codes", f"a cell is outside 0..{(1 << depth) - 1}")
    if folds.size and (int(folds.min()) < 0 or int(folds.max()) > 1):
        raise _fail(f"{where}.probe_folds", "a fold is not 0 or 1")


def _check_head_fields(where: str, schema: Schema) -> int:
    """The head's declared sizes (its width is compared with what it computes later); returns
    the bytes of its sums."""
    kind = schema.head_kind
    _count(schema.rf_width, f"{where}.rf_width", 0, RF_MAX if kind == "shared-rf" else 0)
    if kind is None:
        return 0
    if schema.partition is None:
        raise _fail(f"{where}.head", "a head needs a flat partition")
    if kind == "shared-rf" and schema.rf_width < 1:
        raise _fail(f"{where}.rf_width", "a shared-rf head has random features")
    D = _count(schema.n_features, f"{where}.n_features", 1, _INT64_MAX) + 1
    return 2 * 8 * D * D  # the two folds' Gram sums (a Newton head keeps more)


def _check_inputs(where: str, schema: Schema, n_features: int, n_outputs: int) -> int:
    """The encoder's and φ's input widths, then φ on a zero row: returns its output width."""
    width = n_features
    encoder = schema.encoder
    if encoder is not None:
        seen = getattr(encoder, "n_features_in_", n_features)
        if seen != n_features:
            raise _fail(f"{where}.encoder", f"fitted on {seen} features, not {n_features}")
        outputs = getattr(encoder, "n_outputs_", None)
        if outputs is not None:
            _count(outputs, f"{where}.encoder.n_outputs_", 1, max(n_outputs, 1))
        try:
            width = int(encoder.output_dim)
        except Exception as err:  # noqa: BLE001 - a broken encoder is the snapshot's defect
            raise _fail(f"{where}.encoder", f"unusable ({err})") from None
    pre = schema.preprocessor
    if not isinstance(pre, Preprocessor):
        raise _fail(f"{where}.preprocessor", f"found {type(pre).__name__}")
    if pre.lda is not None:
        seen = getattr(pre.lda, "n_features_in_", width)
        if seen != width:
            raise _fail(f"{where}.preprocessor", f"fitted on {seen} inputs, not {width}")
        if pre.projection is not None:
            P = _array(pre.projection, f"{where}.preprocessor.projection", 2, "f")
            if P.shape[0] != width:
                raise _fail(f"{where}.preprocessor.projection", f"shape {P.shape}")
    try:
        Z = schema.features(np.zeros((1, n_features), dtype=np.float32))
    except Exception as err:  # noqa: BLE001 - any failure of decoded parts is the snapshot's
        raise _fail(where, f"unusable ({type(err).__name__}: {err})") from None
    if Z.ndim != 2 or Z.shape[0] != 1:
        raise _fail(f"{where}.preprocessor", f"gives rows of shape {Z.shape}")
    return int(Z.shape[1])


def _check_against_width(where: str, schema: Schema, width: int) -> None:
    """What reads φ's output: g, the codebook's centroids, the partition's first stage (or
    its tests, without stages) all take ``width`` inputs."""
    estimator = schema.base_model.estimator
    seen = getattr(estimator, "n_features_in_", width)
    if estimator is not None and seen != width:
        raise _fail(f"{where}.base_model", f"fitted on {seen} inputs, φ gives {width}")
    if schema.codebook is not None:
        if schema.codebook.centroids.shape[2] != width:
            raise _fail(
                f"{where}.codebook.centroids",
                f"of dimension {schema.codebook.centroids.shape[2]}, φ gives {width}",
            )
        return
    part = schema.partition
    first = part.stage1 if part.stage1 is not None else part.stage2
    if first is not None:
        if first.weights.shape[1] != width:
            raise _fail(f"{where}.partition", f"takes {first.weights.shape[1]} inputs")
    elif part.features.size and int(part.features.max()) >= width:
        raise _fail(f"{where}.partition.features", f"a coordinate is beyond {width}")


# -- memory ----------------------------------------------------------------------------------
def _rows_bytes(n: int, d: int, p: int) -> int:
    """The least the row store takes for n rows of d features over p instances (features,
    targets, serials, keyed draws, pool flags, row hashes, id index), plus a zero row."""
    return n * (4 * d + 8 + 8 + 8 * (p + 1) + 1 + 32 + _ID_INDEX_BYTES) + 8 * d


def _within_budget(need: int, what: str) -> None:
    budget = memory_budget()
    if need > budget:
        raise _fail(
            what,
            f"restoring needs at least {_gib(need)}, more than the {_gib(budget)} "
            "this process may allocate",
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n < 2**80 else f"2^{int(math.log2(n))} bytes"
