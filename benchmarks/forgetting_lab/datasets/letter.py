"""UCI Letter Recognition (26 classes) from Debian's ``r-cran-mlbench``, read without R.

Why this set: the paper's QSS fails on many classes (−15.6 pp on ImageNet, −10.7 on
Covertype), and a k ≥ 20 classification set is where a partition's cell purity shows. UCI
Letter (20 000 rows, 16 integer features of a character image, 26 capital letters) ships in
the mlbench R package, which Debian packages as ``r-cran-mlbench`` (files under
``/usr/lib/R/site-library/mlbench/data``), so it installs from a registry like the other
sets; nothing is downloaded at run time.

Why a reader of our own: the data are an R ``.rda`` file (xz-compressed XDR serialization of a
data frame). Reading it needs only a few of R's serialization types (pairlists, symbols,
integer/double/character vectors, lists, attributes), which a ~100-line decoder covers; it
runs no code from the file and adds no dependency (the Python readers pull in xarray or a
compiled librdata).

Split: the UCI documentation's own — the first 16 000 rows train, the last 4 000 test.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from .base import Dataset, DatasetUnavailableError, as_features, subsample_train

LETTER_INSTALL = "apt-get update && apt-get install -y --no-install-recommends r-cran-mlbench"
_ENV = "FORGETTING_MLBENCH_DIR"
_DEFAULT_DIR = Path("/usr/lib/R/site-library/mlbench/data")
_FILE = "LetterRecognition.rda"
N_TRAIN = 16000
N_ROWS = 20000
LETTER_CLASSES = tuple(chr(ord("A") + i) for i in range(26))


def locate_letter() -> Path:
    """Path of ``LetterRecognition.rda`` (``$FORGETTING_MLBENCH_DIR`` overrides the Debian
    location, e.g. with the files of ``apt-get download r-cran-mlbench`` unpacked by hand)."""
    override = os.environ.get(_ENV)
    directory = Path(override) if override else _DEFAULT_DIR
    path = directory / _FILE
    if not path.is_file():
        raise DatasetUnavailableError(
            f"UCI Letter is not available: {path} is missing. Install Debian's mlbench "
            f"package with: {LETTER_INSTALL}  (or set {_ENV} to a directory holding {_FILE})"
        )
    return path


# --------------------------------------------------------------------------- R's XDR format


class _RReader:
    """Decode the subset of R's serialization (format 2 or 3, XDR) a data frame needs."""

    _NIL, _REF, _SYM, _LIST, _CHAR, _LGL, _INT, _REAL, _STR, _VEC = (
        254, 255, 1, 2, 9, 10, 13, 14, 16, 19
    )  # fmt: skip
    _SPECIAL = {242, 241, 253, 251, 247}  # empty/base/global env, missing arg, base namespace

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.refs: list[Any] = []

    def _int(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def _length(self) -> int:
        n = self._int()
        if n == -1:
            hi, lo = self._int(), self._int()
            n = (hi << 32) + lo
        if n < 0 or n > len(self.data):
            raise ValueError(f"bad vector length {n}")
        return n

    def header(self) -> None:
        if bytes(self.data[:2]) != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.pos = 2
        version = self._int()
        self._int()  # writer's R version
        self._int()  # minimal reader version
        if version == 3:
            self.pos += self._int()  # native encoding name
        elif version != 2:
            raise ValueError(f"unsupported R serialization version {version}")

    def item(self) -> Any:
        flags = self._int()
        kind = flags & 0xFF
        has_attr, has_tag = bool(flags & (1 << 9)), bool(flags & (1 << 10))
        if kind == self._NIL or kind in self._SPECIAL:
            return None
        if kind == self._REF:
            index = flags >> 8
            return self.refs[(index or self._int()) - 1]
        if kind == self._SYM:
            name = self.item()
            self.refs.append(name)
            return name
        if kind == self._LIST:
            out: dict[str, Any] = {}
            while True:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else f"_{len(out)}"
                out[str(tag)] = self.item()
                flags = self._int()
                kind = flags & 0xFF
                if kind == self._NIL:
                    return out
                if kind != self._LIST:
                    raise ValueError(f"unsupported pairlist tail of type {kind}")
                has_attr, has_tag = bool(flags & (1 << 9)), bool(flags & (1 << 10))
        if kind == self._CHAR:
            n = self._int()
            if n == -1:
                return None
            text = bytes(self.data[self.pos : self.pos + n]).decode("utf-8", "replace")
            self.pos += n
            return text
        if kind in (self._LGL, self._INT, self._REAL):
            n = self._length()
            dtype, size = (">f8", 8) if kind == self._REAL else (">i4", 4)
            values = np.frombuffer(self.data, dtype=dtype, count=n, offset=self.pos).copy()
            self.pos += n * size
            value: Any = values.astype(np.float64 if kind == self._REAL else np.int64)
        elif kind == self._STR:
            value = [self.item() for _ in range(self._length())]
        elif kind == self._VEC:
            value = [self.item() for _ in range(self._length())]
        else:
            raise ValueError(f"unsupported R object type {kind}")
        attrs = self.item() if has_attr else {}
        return _RObject(value, attrs or {})


class _RObject:
    """An R vector with its attributes (names, levels, class, ...)."""

    def __init__(self, value: Any, attrs: dict[str, Any]) -> None:
        self.value = value
        self.attrs = attrs

    def attr(self, name: str) -> Any:
        a = self.attrs.get(name)
        return a.value if isinstance(a, _RObject) else a


def read_rda(path: Path) -> dict[str, Any]:
    """The objects of an ``.rda`` file by name (gzip, bzip2 or xz compressed)."""
    raw = path.read_bytes()
    for opener in (lzma.decompress, bz2.decompress, gzip.decompress):
        try:
            raw = opener(raw)
            break
        except (lzma.LZMAError, OSError, ValueError):
            continue
    if not raw.startswith((b"RDX2\n", b"RDX3\n")):
        raise ValueError(f"{path}: not an R data file")
    reader = _RReader(raw[5:])
    reader.header()
    objects = reader.item()
    if not isinstance(objects, dict):
        raise ValueError(f"{path}: no named objects")
    return objects


# --------------------------------------------------------------------------- the dataset


def _letter_arrays(path: Path) -> tuple[np.ndarray, np.ndarray]:
    frame = read_rda(path).get("LetterRecognition")
    if not isinstance(frame, _RObject) or not isinstance(frame.value, list):
        raise ValueError(f"{path}: LetterRecognition is not a data frame")
    names = frame.attr("names")
    columns = dict(zip(names, frame.value, strict=True))
    label = columns.pop("lettr")
    levels = label.attr("levels")
    if list(levels) != list(LETTER_CLASSES):
        raise ValueError(f"{path}: unexpected letter levels {levels}")
    y = label.value - 1  # R factors count from 1
    X = np.column_stack([np.asarray(c.value, dtype=np.float64) for c in columns.values()])
    if X.shape != (N_ROWS, 16) or y.shape != (N_ROWS,):
        raise ValueError(f"{path}: expected {N_ROWS} rows × 16 features, got {X.shape}")
    return X, y.astype(np.int64)


def load_letter(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """UCI Letter Recognition: 16 integer features (0..15) of a letter's image, 26 classes.

    Features are scaled to [0, 1] (divided by 15); the split is the documented one (first
    16 000 rows train, last 4 000 test); ``n_train`` subsamples the train split as elsewhere.

    Raises:
        DatasetUnavailableError: the Debian package is missing (the message says what to
            install).
    """
    path = locate_letter()
    X, y = _letter_arrays(path)
    X = X / 15.0
    X_train, y_train = subsample_train(X[:N_TRAIN], y[:N_TRAIN], n_train, subsample_seed)
    return Dataset(
        name="letter",
        task="classification",
        X_train=as_features(X_train),
        y_train=y_train,
        X_test=as_features(X[N_TRAIN:]),
        y_test=y[N_TRAIN:],
        feature_description=(
            "16 features: integer statistics (0..15) of a character image (box, edges, "
            "moments), scaled to [0, 1]"
        ),
        source=f"Debian r-cran-mlbench (mlbench::LetterRecognition, UCI): {path}",
        class_names=LETTER_CLASSES,
    )
