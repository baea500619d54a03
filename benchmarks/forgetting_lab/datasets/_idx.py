"""Read the IDX files (optionally gzipped) that MNIST-style datasets are distributed in.

Debian's ``dataset-fashion-mnist`` installs the upstream ``*-idx?-ubyte.gz`` files unchanged.
The format is a 4-byte magic (two zero bytes, a type code, the number of dimensions), then one
big-endian uint32 per dimension, then the data in C order.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

_IDX_TYPES: dict[int, str] = {
    0x08: "u1",
    0x09: "i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}


def parse_idx(data: bytes, where: str = "<idx>") -> np.ndarray:
    """Parse an (uncompressed) IDX byte string into a native-endian array."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise ValueError(f"{where}: not an IDX file (bad magic {data[:4].hex()})")
    dtype = np.dtype(_IDX_TYPES[data[2]])
    ndim = data[3]
    header = 4 + 4 * ndim
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = header + dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    if len(data) != expected:
        raise ValueError(f"{where}: expected {expected} bytes for shape {shape}, got {len(data)}")
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file, gunzipping it first when the name ends in ``.gz``."""
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return parse_idx(raw, str(path))
