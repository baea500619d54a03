"""Saving and loading models: one file, versioned, checksummed, written atomically.

Layout: ``MAGIC`` (8 bytes) | format version (u32) | payload length (u64) | SHA-256 of the
payload (32 bytes) | payload (a pickle of plain data and the fitted schema objects). A file
whose magic, version, length or checksum does not match is refused before anything is
unpickled. Library versions are recorded: a model is only bit-for-bit reproducible with the
same numpy / scikit-learn / faiss, so a mismatch is refused unless explicitly allowed.
The file holds the membership key: treat it like any other secret, and load only files you
wrote (unpickling runs code).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import struct
import tempfile
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import sklearn

from .ensemble import QSSEngine

MAGIC = b"FRGTQSS\x00"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQ32s")


class ModelFileError(ValueError):
    """The file is not a model this version can load (corrupt, truncated, incompatible)."""


def library_versions() -> dict[str, str]:
    return {
        "numpy": np.__version__,
        "scikit-learn": sklearn.__version__,
        "faiss": faiss.__version__,
    }


def save_model(estimator, path: str | Path) -> None:
    engine = estimator.engine_
    payload = pickle.dumps(
        {
            "class": type(estimator).__name__,
            "params": estimator.get_params(deep=False),
            "fitted": {
                k: v for k, v in vars(estimator).items() if k.endswith("_") and k != "engine_"
            },
            "libraries": library_versions(),
            "n_outputs": engine.config.schema.n_outputs,
            "engine": engine.export_state(),
        },
        protocol=5,
    )
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, len(payload), hashlib.sha256(payload).digest())
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_model(cls, path: str | Path, allow_version_mismatch: bool = False):
    data = Path(path).read_bytes()
    if len(data) < _HEADER.size:
        raise ModelFileError(f"{path}: too short to be a forgetting model (truncated?)")
    magic, version, length, checksum = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ModelFileError(f"{path}: not a forgetting model file")
    if version != FORMAT_VERSION:
        raise ModelFileError(
            f"{path}: format version {version}, this library reads version {FORMAT_VERSION}"
        )
    payload = data[_HEADER.size :]
    if len(payload) != length:
        raise ModelFileError(f"{path}: expected {length} payload bytes, found {len(payload)}")
    if hashlib.sha256(payload).digest() != checksum:
        raise ModelFileError(f"{path}: checksum mismatch; the file is corrupted")
    state: dict[str, Any] = pickle.loads(payload)
    if state["class"] != cls.__name__:
        raise ModelFileError(f"{path}: holds a {state['class']}, not a {cls.__name__}")
    if state["libraries"] != library_versions() and not allow_version_mismatch:
        raise ModelFileError(
            f"{path}: written with {state['libraries']}, running {library_versions()}; "
            "bitwise exactness is only guaranteed with the same versions"
        )
    estimator = cls(**state["params"])
    for name, value in state["fitted"].items():
        setattr(estimator, name, value)
    config = estimator._config(state["n_outputs"])
    target_dtype = state["engine"]["targets"].dtype
    estimator.engine_ = QSSEngine.from_state(config, state["engine"], target_dtype)
    return estimator
