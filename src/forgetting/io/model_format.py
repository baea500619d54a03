"""The safe model codec: arrays plus a JSON manifest, never pickles.

Why not pickle: unpickling runs whatever code the bytes name, so a model file or a store row
that someone could write to would be a way to run code on whoever loads it (a checksum does
not help: an attacker recomputes it). This codec reads only data. A value is turned into a
JSON *manifest* (plain JSON for None/bool/int/float/str/list, tagged objects for the rest)
plus a list of numeric arrays stored as raw bytes; objects are restored only for the types in
an explicit **allowlist** (:func:`register_dataclass`, :func:`register_object`,
:func:`register_codec`), and restoring one only sets its attributes to decoded data: no name
from the file is ever imported or called.

Container layout (one blob, used for model files and for every structured value in a store)::

    MAGIC (8) | version u32 | payload length u64 | SHA-256(payload) (32) | payload
    payload = header length u64 | header (UTF-8 JSON) | array bytes
    header  = {"kind": str, "value": manifest, "arrays": [{"dtype", "shape", "order",
               "offset", "nbytes"}, ...]}

Arrays keep their dtype (byte order included), shape and memory order, so a restored model
computes with exactly the same bits; numeric arrays and fixed-width strings only (no object
arrays: those are encoded element by element in the manifest). Floats are stored exactly
(JSON's shortest round-trip repr, or ``float.hex`` for non-finite values). Which dtype each
field of a model must have is the snapshot checks' to say (``forgetting.engine.validation``).

Sizes are checked before anything is allocated, so crafted bytes are refused, not obeyed: an
array's declared byte count must be its dtype's item size times its shape (exact integer
arithmetic, however large the shape; a zero-size dtype only for an empty array) and lie in the
file, the decoded arrays together never take more than the file holds, and :func:`read_blob`
reads a regular file no further than its header declares.

Other modules register their plain types in one line, e.g. a frozen dataclass of arrays::

    from forgetting.io.model_format import register_dataclass
    register_dataclass(MyPartition)

A user-supplied scikit-learn estimator that is not in the allowlist is refused at save time
with a message saying how to trust it (``register_object(SVC)``, on both the saving and the
loading side) -- the same model as ``skops``' trusted types.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import os
import stat
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ..snapshots import memory_budget

MAGIC = b"FRGTQSS\x00"
FORMAT_VERSION = 2
"""Version 1 is the pickle-based format; it is refused (it could run code)."""
_HEADER = struct.Struct("<8sIQ32s")
_LEN = struct.Struct("<Q")
_MAX_DEPTH = 64
_ARRAY_KINDS = frozenset("biufcUS")
"""bool, signed/unsigned int, float, complex, fixed-width unicode and bytes: plain data."""


class ModelFileError(ValueError):
    """The bytes are not a model this version can read (corrupt, truncated, incompatible,
    or holding a type outside the allowlist)."""


class UnsupportedTypeError(TypeError):
    """A value to be saved holds a type the codec does not know (not in the allowlist)."""


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    cls: type
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


_BY_NAME: dict[str, _Entry] = {}
_BY_TYPE: dict[type, _Entry] = {}


def register_codec(
    cls: type, encode: Callable[[Any], Any], decode: Callable[[Any], Any], name: str | None = None
) -> type:
    """Allow ``cls``: ``encode(obj)`` gives an encodable value, ``decode(value)`` the object.

    ``name`` (default ``module.qualname``) is what the file records; it is looked up in this
    registry only, never imported.
    """
    name = name or f"{cls.__module__}.{cls.__qualname__}"
    existing = _BY_NAME.get(name)
    if existing is not None and existing.cls is not cls:
        raise ValueError(f"{name} is already registered for {existing.cls!r}")
    entry = _Entry(name, cls, encode, decode)
    _BY_NAME[name] = entry
    _BY_TYPE[cls] = entry
    return cls


def register_dataclass(cls: type, name: str | None = None) -> type:
    """Allow a dataclass: saved as its fields, restored by calling ``cls(**fields)``."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    names = [f.name for f in dataclasses.fields(cls) if f.init]

    def encode(obj: Any) -> dict[str, Any]:
        return {n: getattr(obj, n) for n in names}

    def decode(state: Any) -> Any:
        if not isinstance(state, dict) or set(state) - set(names):
            raise ModelFileError(f"fields of {cls.__qualname__} do not match the file")
        return cls(**state)

    return register_codec(cls, encode, decode, name)


def register_object(cls: type, name: str | None = None) -> type:
    """Allow a plain Python object (e.g. a fitted scikit-learn estimator): saved as its
    ``__getstate__()`` dict, restored as pickle would -- ``cls.__new__(cls)`` and then
    ``__setstate__(state)`` (or ``__dict__.update``) with the decoded data. Register only
    types whose methods treat their attributes as data (no callables, paths or code)."""

    def encode(obj: Any) -> dict[str, Any]:
        state = obj.__getstate__()
        if not isinstance(state, dict):
            raise UnsupportedTypeError(
                f"{cls.__qualname__} has no plain attribute dict; register a codec for it"
            )
        return state

    def decode(state: Any) -> Any:
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise ModelFileError(f"state of {cls.__qualname__} is not an attribute dict")
        obj = cls.__new__(cls)
        setter = getattr(obj, "__setstate__", None)
        if setter is not None:
            setter(dict(state))
        else:
            obj.__dict__.update(state)
        return obj

    return register_codec(cls, encode, decode, name)


# -- encoding -------------------------------------------------------------------------------
class _Encoder:
    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self._memo: dict[int, int] = {}
        self._keep: list[Any] = []  # keeps memoized objects alive, so ids stay unique

    def value(self, v: Any, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise UnsupportedTypeError("value nested too deeply to save")
        if v is None or isinstance(v, bool | str):
            return v
        if isinstance(v, int) and type(v) is int:
            return v
        if type(v) is float:
            return v if math.isfinite(v) else {"$float": v.hex()}
        if isinstance(v, np.ndarray):
            return self._array(v, depth)
        if isinstance(v, np.generic):
            if v.dtype.kind not in _ARRAY_KINDS:
                raise UnsupportedTypeError(f"numpy scalar of dtype {v.dtype} cannot be saved")
            return {"$scalar": v.dtype.str, "hex": v.tobytes().hex()}
        if isinstance(v, np.dtype):
            if v.kind not in _ARRAY_KINDS:
                raise UnsupportedTypeError(f"dtype {v} cannot be saved")
            return {"$dtype": v.str}
        if type(v) is list:
            return [self.value(x, depth + 1) for x in v]
        if type(v) is tuple:
            return {"$tuple": [self.value(x, depth + 1) for x in v]}
        if type(v) is dict:
            items = [[self.value(k, depth + 1), self.value(x, depth + 1)] for k, x in v.items()]
            return {"$dict": items}
        if type(v) is bytes:
            return {"$bytes": base64.b64encode(v).decode("ascii")}
        entry = _BY_TYPE.get(type(v))
        if entry is None:
            raise UnsupportedTypeError(
                f"cannot save a {type(v).__module__}.{type(v).__qualname__}: the model format "
                "stores only allowlisted types; if you trust it, call "
                "forgetting.io.model_format.register_object(<its class>) before save and load"
            )
        return {"$obj": entry.name, "state": self.value(entry.encode(v), depth + 1)}

    def _array(self, a: np.ndarray, depth: int) -> Any:
        if a.dtype.kind == "O":
            return {
                "$objects": [int(s) for s in a.shape],
                "items": [self.value(x, depth + 1) for x in a.ravel().tolist()],
            }
        if a.dtype.kind not in _ARRAY_KINDS or a.dtype.fields is not None:
            raise UnsupportedTypeError(f"arrays of dtype {a.dtype} cannot be saved")
        known = self._memo.get(id(a))
        if known is None:
            known = len(self.arrays)
            self._memo[id(a)] = known
            self._keep.append(a)
            self.arrays.append(a)
        return {"$array": known}


def _layout(value: Any, kind: str) -> tuple[bytes, list[tuple[np.ndarray, str]]]:
    """The header :func:`dumps` writes for ``value`` and its arrays with their memory order."""
    enc = _Encoder()
    manifest = enc.value(value)
    specs, arrays, offset = [], [], 0
    for a in enc.arrays:
        order = "F" if (a.flags.f_contiguous and not a.flags.c_contiguous) else "C"
        specs.append(
            {
                "dtype": a.dtype.str,
                "shape": [int(s) for s in a.shape],
                "order": order,
                "offset": offset,
                "nbytes": a.nbytes,  # what tobytes gives, in either order
            }
        )
        arrays.append((a, order))
        offset += a.nbytes
    header = json.dumps(
        {"kind": kind, "value": manifest, "arrays": specs},
        allow_nan=False,
        ensure_ascii=True,
        separators=(",", ":"),
    ).encode("ascii")
    return header, arrays


def dumps(value: Any, kind: str) -> bytes:
    """Encode ``value`` as one self-checking blob (``kind`` names what it holds)."""
    header, arrays = _layout(value, kind)
    chunks = [a.tobytes(order=order) for a, order in arrays]
    payload = b"".join([_LEN.pack(len(header)), header, *chunks])
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(payload), hashlib.sha256(payload).digest()) + (
        payload
    )


def digest(value: Any, kind: str) -> str:
    """SHA-256 (hex) of the payload :func:`dumps` would write for ``value``, one array at a
    time (no blob is built): values that encode alike — the same types, dtypes, byte order,
    shapes and bits — and only those, digest alike. A model file records its snapshot's, and
    a loaded model must give it again (:mod:`forgetting.persistence`)."""
    header, arrays = _layout(value, kind)
    h = hashlib.sha256(_LEN.pack(len(header)))
    h.update(header)
    for a, order in arrays:
        h.update(a.tobytes(order=order))
    return h.hexdigest()


# -- decoding -------------------------------------------------------------------------------
def _no_constant(name: str) -> Any:
    raise ModelFileError(f"non-standard JSON constant {name}")


class _Decoder:
    def __init__(self, buffer: memoryview, specs: Any) -> None:
        if not isinstance(specs, list):
            raise ModelFileError("array table is not a list")
        self._buffer = buffer
        self._specs = specs
        self._arrays: dict[int, np.ndarray] = {}
        self._taken = 0
        """Bytes of the arrays decoded so far: never more than the file holds (arrays do not
        overlap in a file :func:`dumps` writes, so one region cannot be copied many times)."""

    def array(self, index: Any) -> np.ndarray:
        if type(index) is not int or not 0 <= index < len(self._specs):
            raise ModelFileError(f"bad array reference {index!r}")
        if index in self._arrays:
            return self._arrays[index]
        spec = self._specs[index]
        try:
            dtype = np.dtype(str(spec["dtype"]))
            shape = _sizes(spec["shape"])
            offset, nbytes, order = _size(spec["offset"]), _size(spec["nbytes"]), spec["order"]
        except (KeyError, TypeError, ValueError) as err:
            raise ModelFileError(f"bad array entry {index}: {err}") from err
        if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None or dtype.hasobject:
            raise ModelFileError(f"array {index} has a non-data dtype {dtype}")
        if order not in ("C", "F"):
            raise ModelFileError(f"array {index} has a bad order")
        # Python integers: the declared size is exact however large, and must be the bytes
        # the file holds for it (a zero-size dtype holds none: only an empty array has one).
        count = math.prod(shape)
        if dtype.itemsize == 0 and count:
            raise ModelFileError(f"array {index}: {count} elements of the zero-size dtype {dtype}")
        self._taken += nbytes
        if (
            count * dtype.itemsize != nbytes
            or offset + nbytes > len(self._buffer)
            or self._taken > len(self._buffer)
        ):
            raise ModelFileError(f"array {index} does not fit the file (truncated or tampered?)")
        flat = np.frombuffer(self._buffer[offset : offset + nbytes], dtype=dtype, count=count)
        arr = flat.reshape(shape, order=order).copy(order=order)
        self._arrays[index] = arr
        return arr

    def value(self, v: Any, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise ModelFileError("value nested too deeply")
        if v is None or isinstance(v, bool | int | float | str):
            return v
        if isinstance(v, list):
            return [self.value(x, depth + 1) for x in v]
        if not isinstance(v, dict) or not v:
            raise ModelFileError(f"unexpected manifest node {type(v).__name__}")
        tag = next(iter(v))
        try:
            return self._tagged(tag, v, depth)
        except ModelFileError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            raise ModelFileError(f"bad {tag} entry: {type(err).__name__}: {err}") from err

    def _tagged(self, tag: str, v: dict, depth: int) -> Any:
        if tag == "$array":
            return self.array(v["$array"])
        if tag == "$float":
            return float.fromhex(str(v["$float"]))
        if tag == "$scalar":
            dtype = np.dtype(str(v["$scalar"]))
            if dtype.kind not in _ARRAY_KINDS or dtype.hasobject:
                raise ModelFileError(f"scalar of non-data dtype {dtype}")
            raw = bytes.fromhex(str(v["hex"]))
            if len(raw) != dtype.itemsize:
                raise ModelFileError("scalar has the wrong size")
            return np.frombuffer(raw, dtype=dtype)[0]
        if tag == "$dtype":
            dtype = np.dtype(str(v["$dtype"]))
            if dtype.kind not in _ARRAY_KINDS or dtype.hasobject:
                raise ModelFileError(f"non-data dtype {dtype}")
            return dtype
        if tag == "$tuple":
            return tuple(self.value(x, depth + 1) for x in _list(v["$tuple"]))
        if tag == "$dict":
            out = {}
            for pair in _list(v["$dict"]):
                key, item = _list(pair)
                key = self.value(key, depth + 1)
                if not isinstance(key, str | int | float | tuple | bool | type(None)):
                    raise ModelFileError("unhashable dict key")
                out[key] = self.value(item, depth + 1)
            return out
        if tag == "$bytes":
            return base64.b64decode(str(v["$bytes"]), validate=True)
        if tag == "$objects":
            shape = _sizes(v["$objects"])
            items = [self.value(x, depth + 1) for x in _list(v["items"])]
            if len(items) != math.prod(shape):
                raise ModelFileError("object array has the wrong number of items")
            out = np.empty(len(items), dtype=object)
            out[:] = items if items else []
            return out.reshape(shape)
        if tag == "$obj":
            entry = _BY_NAME.get(str(v["$obj"]))
            if entry is None:
                raise ModelFileError(
                    f"the file holds a {str(v['$obj'])[:80]!r}, which is not in the allowlist "
                    "of types this library loads"
                )
            return entry.decode(self.value(v["state"], depth + 1))
        raise ModelFileError(f"unknown manifest tag {tag[:40]!r}")


def _list(v: Any) -> list:
    if not isinstance(v, list):
        raise ModelFileError("expected a list in the manifest")
    return v


def _size(v: Any) -> int:
    """A size or offset from the manifest: a JSON integer ≥ 0 (not a bool, float or string)."""
    if type(v) is not int or v < 0:
        raise ModelFileError(f"expected a size, found {str(v)[:40]!r}")
    return v


def _sizes(v: Any) -> tuple[int, ...]:
    """A shape from the manifest: at most 32 sizes (numpy's limit)."""
    dims = _list(v)
    if len(dims) > 32:
        raise ModelFileError(f"a shape of {len(dims)} dimensions")
    return tuple(_size(s) for s in dims)


def _check_header(data: bytes, what: str) -> None:
    """Magic and version of a container's header (``data`` holds at least the header)."""
    magic, version, _, _ = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ModelFileError(f"{what}: not a forgetting model file")
    if version != FORMAT_VERSION:
        hint = " (the old pickle format, refused because loading it could run code)"
        raise ModelFileError(
            f"{what}: format version {version}, this library reads version {FORMAT_VERSION}"
            + (hint if version == 1 else "")
        )


def check_container(data: bytes, what: str = "data") -> bytes:
    """Check magic, version, length and checksum; return the payload (nothing decoded)."""
    if len(data) < _HEADER.size:
        raise ModelFileError(f"{what}: too short to be a forgetting model (truncated?)")
    _check_header(data, what)
    length, checksum = _HEADER.unpack_from(data)[2:]
    payload = data[_HEADER.size :]
    if len(payload) != length:
        raise ModelFileError(f"{what}: expected {length} payload bytes, found {len(payload)}")
    if hashlib.sha256(payload).digest() != checksum:
        raise ModelFileError(f"{what}: checksum mismatch; the file is corrupted")
    return payload


def read_blob(path: str | os.PathLike, what: str = "data") -> bytes:
    """The bytes of a container file, read no further than its header declares.

    Only a regular file is read (a device such as /dev/zero, a FIFO or a directory is
    refused: opened without blocking, checked with ``fstat``); its size must be the header's
    declared payload length plus the header, and no more than this process may allocate
    (:func:`~forgetting.snapshots.memory_budget`), all before the payload is read.
    Raises ModelFileError, or OSError when the file cannot be opened at all.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ModelFileError(f"{what}: not a regular file")
    with os.fdopen(fd, "rb") as f:
        head = f.read(_HEADER.size)
        if len(head) < _HEADER.size:
            raise ModelFileError(f"{what}: too short to be a forgetting model (truncated?)")
        _check_header(head, what)
        length = _HEADER.unpack_from(head)[2]
        found = info.st_size - _HEADER.size
        if found != length:
            raise ModelFileError(f"{what}: expected {length} payload bytes, found {found}")
        if info.st_size > memory_budget():
            raise ModelFileError(f"{what}: {info.st_size} bytes, more than this process may hold")
        payload = f.read(length + 1)  # one more: a file that grew meanwhile is not this one
    if len(payload) != length:
        raise ModelFileError(f"{what}: expected {length} payload bytes, found {len(payload)}")
    return head + payload


def kind_of(data: bytes, what: str = "data") -> str | None:
    """The ``kind`` a checked container declares (what it holds), nothing else decoded;
    None when its header names none. A defect raises :class:`ModelFileError`."""
    payload = memoryview(check_container(bytes(data), what))
    try:
        (hlen,) = _LEN.unpack_from(payload)
        header = json.loads(
            bytes(payload[_LEN.size : _LEN.size + hlen]).decode("utf-8"),
            parse_constant=_no_constant,
        )
    except (ValueError, TypeError, KeyError, RecursionError, UnicodeDecodeError, struct.error):
        raise ModelFileError(f"{what}: unreadable header") from None
    kind = header.get("kind") if isinstance(header, dict) else None
    return kind if isinstance(kind, str) else None


def loads(data: bytes, kind: str, what: str = "data") -> Any:
    """Decode a blob written by :func:`dumps`; any defect raises :class:`ModelFileError`."""
    payload = memoryview(check_container(bytes(data), what))
    try:
        if len(payload) < _LEN.size:
            raise ModelFileError("payload too short")
        (hlen,) = _LEN.unpack_from(payload)
        if hlen > len(payload) - _LEN.size:
            raise ModelFileError("header longer than the payload")
        header = json.loads(
            bytes(payload[_LEN.size : _LEN.size + hlen]).decode("utf-8"),
            parse_constant=_no_constant,
        )
        if not isinstance(header, dict) or header.get("kind") != kind:
            found = header.get("kind") if isinstance(header, dict) else None
            raise ModelFileError(f"holds {str(found)[:40]!r}, expected {kind!r}")
        decoder = _Decoder(payload[_LEN.size + hlen :], header.get("arrays"))
        return decoder.value(header.get("value"))
    except ModelFileError as err:
        raise ModelFileError(f"{what}: {err}") from None
    except (ValueError, TypeError, KeyError, RecursionError, UnicodeDecodeError) as err:
        raise ModelFileError(f"{what}: unreadable ({type(err).__name__}: {err})") from None
