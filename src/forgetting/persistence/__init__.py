"""Saving and loading models: one file, versioned, checksummed, written atomically, no pickles.

The file is a :mod:`forgetting.io.model_format` container: ``MAGIC`` | format version |
payload length | SHA-256 of the payload | payload (a JSON manifest plus raw numeric arrays).
Only a regular file is read, and no further than the length its header declares; a file whose
magic, version, length or checksum does not match is refused before anything is decoded, and
decoding restores only allowlisted types from plain data, so a crafted file can at worst be
refused: loading never runs code from it. The decoded snapshot is then checked whole — counts,
shapes, label ranges, finite values, unique ids, index ranges, sizes against the memory this
process may use, the fitted attributes and the parameters (the estimator's ``from_snapshot``
and ``forgetting.engine.validation``) — before anything is restored from it, so an edited file
is one :class:`ModelFileError` line naming the field, never a hang or a raw numpy error.

What is saved is the estimator's :class:`~forgetting.snapshots.ModelSnapshot` (rows, schemas,
contributions; everything derived is recomputed on load) — never the membership key. A derived
key is recomputed from ``random_state``; a user's ``secret_key`` must be passed to
:func:`load_model` again, unless the model was saved with ``store_key=True`` (then the file
holds the key: protect it like the key itself). Library versions are recorded: a model is
only bit-for-bit reproducible with the same numpy / scipy / scikit-learn / faiss, so a
mismatch is refused unless explicitly allowed (:func:`library_versions` says why those four).
"""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import scipy
import sklearn

from ..encoders.tabular import LightGBMLeafContrib
from ..io.atomic import atomic_write
from ..io.model_format import (
    ModelFileError,
    digest,
    dumps,
    kind_of,
    loads,
    read_blob,
    register_codec,
    register_dataclass,
    register_object,
)
from ..schema import Schema
from ..schema.base_model import BaseModel
from ..schema.codebook import Codebook
from ..schema.partitions import ExactLinear, ThresholdPartition
from ..schema.preprocess import Preprocessor
from ..snapshots import (
    EngineSnapshot,
    InstanceSnapshot,
    ModelSnapshot,
    RowsSnapshot,
    SnapshotError,
)
from .forest_state import LEGACY_FOREST_KIND, legacy_forest_state

FILE_KIND = "forgetting-model-file"
SNAPSHOT_KIND = "forgetting-model-snapshot"
"""What :func:`~forgetting.io.model_format.digest` encodes a snapshot as (``snapshot_digest``)."""
DIGESTS = ("state_digest", "structure_digest", "snapshot_digest")
"""Digests a file may record of the model it holds; each is compared after the restore."""
HEX64 = "64 hex digits"
TEXTS = "a mapping of strings to strings"
FILE_ENTRIES = {
    FILE_KIND: {
        "class": str,
        "libraries": TEXTS,
        "environment": TEXTS,
        "snapshot": ModelSnapshot,
        "secret_key": (type(None), str, bytes),
        "state_digest": HEX64,
        "snapshot_digest": HEX64,
    },
    LEGACY_FOREST_KIND: {
        "class": str,
        "params": dict,
        "fitted": dict,
        "key_derived": bool,
        "key_fingerprint": str,
        "libraries": TEXTS,
        "environment": TEXTS,
        "rows": dict,
        "structure_digest": HEX64,
        "secret_key": (type(None), str, bytes),
    },
}
"""Per file format, the entries a file holds — every one, nothing else — and their types.
A model file's ``state_digest`` is the model's (``state_digest()``), its ``snapshot_digest``
the digest of its snapshot's encoding: every field the restore reads, dtypes and byte order
included, so a field the model's digest does not cover (``classes_``, a forest's
categories, the DP ledger) cannot be edited either without the file saying so."""

__all__ = [
    "ModelFileError",
    "environment",
    "library_versions",
    "load_model",
    "save_model",
    "version_mismatch",
]


def library_versions() -> dict[str, str]:
    """The versions a model's bits depend on: recorded in every model file and store, and a
    file or store written under other versions is refused (unless explicitly allowed).

    numpy and scipy bring the BLAS and LAPACK builds their wheels bundle (g, φ, the heads'
    solves), scikit-learn the solvers of g and LDA, faiss the codebook's k-means: any release
    of one may change a float's last bit. numba is not among them: its kernels compute exactly
    what the numpy route beside them computes (tests compare the two), and without numba that
    route runs, so a model restores the same bits under any numba or none; its version is
    recorded for information only (:func:`environment`).
    """
    return {
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "scikit-learn": sklearn.__version__,
        "faiss": faiss.__version__,
    }


def environment() -> dict[str, str]:
    """Recorded beside :func:`library_versions`, never compared: Python, numba, the CPU
    architecture (bits also depend on the CPU and BLAS kernel, which no version names)."""
    try:
        numba = version("numba")
    except PackageNotFoundError:
        numba = "not installed"
    return {"python": platform.python_version(), "numba": numba, "machine": platform.machine()}


SCIPY_BEFORE_RECORDED = "1.17.1"
"""The scipy every file and store was written under before scipy's version was recorded:
releases until then required exactly this version (``scipy==1.17.1``), so a record without
scipy stands for it, and such a file or store still opens under the same versions."""


def version_mismatch(recorded: Any) -> str | None:
    """None when ``recorded`` (a file's or store's ``libraries``) equals this process's
    :func:`library_versions`, else one phrase naming each library that differs."""
    running = library_versions()
    if isinstance(recorded, dict) and "scipy" not in recorded:
        recorded = {**recorded, "scipy": SCIPY_BEFORE_RECORDED}
    if recorded == running:
        return None
    if not isinstance(recorded, dict):
        return f"no valid library versions recorded; running {running}"
    names = sorted(set(running) | {str(k) for k in recorded})
    differ = [
        f"{name} {str(recorded.get(name, 'not recorded'))[:40]} (running "
        f"{running.get(name, 'none')})"
        for name in names
        if recorded.get(name) != running.get(name)
    ]
    return "written with " + ", ".join(differ)


def save_model(estimator, path: str | Path, *, store_key: bool = False) -> None:
    """Write ``estimator`` atomically to ``path`` (temporary file, fsync, rename, fsync dir).

    The secret key is written only with ``store_key=True``.
    """
    snapshot = estimator.snapshot()
    state = {
        "class": type(estimator).__name__,
        "libraries": library_versions(),
        "environment": environment(),
        "snapshot": snapshot,
        "secret_key": estimator.secret_key if store_key and not snapshot.key_derived else None,
        "state_digest": estimator.state_digest(),
        "snapshot_digest": digest(snapshot, SNAPSHOT_KIND),
    }
    atomic_write(path, dumps(state, FILE_KIND))


def load_model(
    cls,
    path: str | Path,
    allow_version_mismatch: bool = False,
    *,
    secret_key: bytes | str | None = None,
):
    """Read a model written by :func:`save_model` as an instance of ``cls``, restored through
    ``cls.from_snapshot(snapshot, secret_key=...)`` (the estimator's own restore path).

    Raises :class:`ModelFileError` for a damaged, foreign, incompatible or tampered file, and
    ValueError when the model needs a secret key that is missing or wrong.
    """
    what = str(path)
    blob = read_blob(path, what)
    if kind_of(blob, what) == LEGACY_FOREST_KIND:
        legacy = loads(blob, LEGACY_FOREST_KIND, what)
        check_entries(legacy, LEGACY_FOREST_KIND, what)
        state = legacy_forest_state(cls, legacy, what)
    else:
        state = loads(blob, FILE_KIND, what)
        check_entries(state, FILE_KIND, what)
    if not isinstance(state, dict) or not isinstance(state.get("snapshot"), ModelSnapshot):
        raise ModelFileError(f"{path}: the file holds no model snapshot")
    mismatch = checked_header(state, cls.__name__, what, allow_version_mismatch)
    snapshot: ModelSnapshot = state["snapshot"]
    if secret_key is None:
        secret_key = state.get("secret_key")
    if not snapshot.key_derived and secret_key is None:
        raise ValueError(
            f"{path}: this model was fitted with a secret key, which is not in the file; "
            "pass it as secret_key"
        )
    estimator = restored(cls, snapshot, secret_key, what)
    # the digests the file recorded (a forest file of the first format: the trees')
    recorded = {k: state[k] for k in DIGESTS if state.get(k) is not None}
    if recorded and not mismatch:
        estimator.wait_for_rebuilds()
        if any(_digest_of(estimator, k) != v for k, v in recorded.items()):
            raise ModelFileError(
                f"{path}: its rows do not give the model that was saved (the file was edited, "
                "or written by another build of the libraries)"
            )
    return estimator


def _digest_of(estimator: Any, name: str) -> str:
    if name == "snapshot_digest":  # the restored model's snapshot encodes as the saved one
        return digest(estimator.snapshot(), SNAPSHOT_KIND)
    return getattr(estimator, name)()


def check_entries(state: Any, kind: str, what: str, wanted: dict | None = None) -> None:
    """Refuse a file of format ``kind`` whose entries are not exactly :data:`FILE_ENTRIES`'
    (or ``wanted``: a pipeline file's) — one missing, one more, or one of another type — in
    one :class:`ModelFileError` line."""
    wanted = FILE_ENTRIES[kind] if wanted is None else wanted
    if not isinstance(state, dict):
        raise ModelFileError(f"{what}: the file holds no model")
    missing = sorted(set(wanted) - set(state))
    if missing:
        raise ModelFileError(
            f"{what}: lacks the entries {missing} every model file of this format holds (an "
            "edited file, or one written before they were recorded: refit and save again)"
        )
    extra = sorted(str(k)[:40] for k in set(state) - set(wanted))
    if extra:
        raise ModelFileError(f"{what}: holds entries no model file has: {extra[:5]}")
    for name, kind_ in wanted.items():
        value = state[name]
        if kind_ == HEX64:
            ok = isinstance(value, str) and len(value) == 64 and _is_hex(value)
        elif kind_ == TEXTS:
            ok = isinstance(value, dict) and all(
                type(k) is str and type(v) is str for k, v in value.items()
            )
        else:
            ok = isinstance(value, kind_) and not (kind_ is not bool and type(value) is bool)
        if not ok:
            expected = (
                kind_ if isinstance(kind_, str) else getattr(kind_, "__name__", "of its type")
            )
            raise ModelFileError(
                f"{what}: its entry {name!r} is a {type(value).__name__}, not {expected}"
            )


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def checked_header(state: dict, cls_name: str, what: str, allow_mismatch: bool) -> str | None:
    """A file's class and library versions checked: :class:`ModelFileError` for another
    class, or for other versions unless ``allow_mismatch``; returns the mismatch (None when
    the versions are this process's)."""
    if state.get("class") != cls_name:
        found = str(state.get("class"))[:40]
        raise ModelFileError(f"{what}: holds a {found}, not a {cls_name}")
    mismatch = version_mismatch(state.get("libraries"))
    if mismatch and not allow_mismatch:
        raise ModelFileError(
            f"{what}: {mismatch}; bitwise exactness is only guaranteed with the same versions "
            "(install those, or pass allow_version_mismatch=True)"
        )
    return mismatch


def restored(cls, snapshot: ModelSnapshot, secret_key: Any, what: str):
    """``cls.from_snapshot(snapshot)`` with its failures as one line naming ``what``: a
    :class:`ModelFileError` for an inconsistent snapshot, ValueError for a missing or wrong
    key."""
    try:
        return cls.from_snapshot(snapshot, secret_key=secret_key)
    except SnapshotError as err:
        raise ModelFileError(f"{what}: not a consistent model: {err}") from None
    except ValueError as err:
        if "key" in str(err):
            raise ValueError(f"{what}: {err}") from None
        raise ModelFileError(f"{what}: inconsistent model ({err})") from None
    except (TypeError, IndexError, KeyError, AttributeError) as err:
        raise ModelFileError(f"{what}: inconsistent model ({type(err).__name__}: {err})") from None


# -- the allowlist: the types a model file is made of ---------------------------------------
def _allow_model_types() -> None:
    """Register with the codec the types a QSS model is made of: snapshots, schema parts, the
    base models and LDA QSS trains itself, their helper objects, and the learned LightGBM
    encoder. Nothing else in a model file is ever restored."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    from sklearn.neural_network._stochastic_optimizers import AdamOptimizer, SGDOptimizer
    from sklearn.preprocessing import LabelBinarizer

    for cls in (
        ModelSnapshot,
        EngineSnapshot,
        RowsSnapshot,
        InstanceSnapshot,
        Schema,
        BaseModel,
        Codebook,
        Preprocessor,
        ThresholdPartition,
        ExactLinear,
    ):
        register_dataclass(cls, f"forgetting.{cls.__qualname__}")
    for cls in (
        LogisticRegression,
        Ridge,
        MLPClassifier,
        MLPRegressor,
        LinearDiscriminantAnalysis,
        LabelBinarizer,
        AdamOptimizer,
        SGDOptimizer,
    ):
        register_object(cls, f"sklearn.{cls.__qualname__}")
    register_object(LightGBMLeafContrib, "forgetting.LightGBMLeafContrib")

    def random_state_decode(state: Any) -> np.random.RandomState:
        if not (isinstance(state, tuple) and len(state) == 5 and state[0] == "MT19937"):
            raise ModelFileError("bad RandomState")
        rs = np.random.RandomState()
        rs.set_state(state)
        return rs

    register_codec(
        np.random.RandomState,
        lambda rs: rs.get_state(legacy=True),
        random_state_decode,
        "numpy.RandomState",
    )


_allow_model_types()
