"""Row identifiers, stable hashing and edge validation shared by the baselines.

Unlearning is requested by *row id*, not by position, because positions shift as
rows come and go.  Every baseline therefore needs the same three things, kept here
so they behave identically:

* normalising user-supplied ids into plain ``int`` / ``str`` values (numpy scalars
  are unwrapped so ``np.int64(3)`` and ``3`` are the same row);
* a hash of ``(random_state, id)`` that is reproducible across processes and
  Python versions (the builtin ``hash`` is salted per process for ``str``), and a
  canonical row order derived from it so that a model never depends on the order
  in which rows were handed over;
* validation of ``X`` / ``y`` at the public edge, so that bad input fails with a
  clear ``ValueError`` before any state is touched.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from numbers import Integral
from typing import Any

import numpy as np
from scipy import sparse

from forgetting.ids import RowId, listing, normalize_ids

_MASK64 = (1 << 64) - 1


def check_forget_request(ids: Iterable[Any], known: dict[RowId, Any]) -> list[RowId]:
    """Validate a forget request against the ids currently held.

    Empty requests and duplicates raise ``ValueError`` (a duplicate usually means
    the caller's bookkeeping is off, and silently de-duplicating would hide it);
    ids that are not held raise ``KeyError`` naming them.
    """
    req = normalize_ids(ids)
    if not req:
        raise ValueError("forget() needs at least one id")
    unknown = [i for i in req if i not in known]
    if unknown:
        raise KeyError(f"unknown ids (not in the model): {listing(unknown)}")
    return req


def check_new_ids(ids: Iterable[Any], n: int, known: dict[RowId, Any]) -> list[RowId]:
    """Validate ids for ``insert``: unique, right length, and not already held."""
    new = normalize_ids(ids, n)
    clash = [i for i in new if i in known]
    if clash:
        raise ValueError(f"ids already present in the model: {listing(clash)}")
    return new


# ---------------------------------------------------------------------------
# Stable hashing and canonical order
# ---------------------------------------------------------------------------


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on a uint64 array: a fast bijective 64-bit mixer."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _seed_word(random_state: int) -> np.uint64:
    return _splitmix64(np.array([int(random_state) & _MASK64], dtype=np.uint64))[0]


def id_keys(ids: Sequence[RowId], random_state: int) -> np.ndarray:
    """64-bit hash of ``(random_state, id)`` for each id, as a ``uint64`` array.

    Integer ids use a vectorised SplitMix64 (a bijection, so distinct ints never
    collide); string ids use keyed BLAKE2b.  Both are deterministic across runs and
    machines, which is what makes shard assignment and row order reproducible.
    """
    n = len(ids)
    keys = np.empty(n, dtype=np.uint64)
    if n == 0:
        return keys
    seed = _seed_word(random_state)
    is_int = np.fromiter((type(v) is int for v in ids), dtype=bool, count=n)
    if is_int.any():
        vals = np.array([v for v, b in zip(ids, is_int, strict=True) if b], dtype=np.int64)
        keys[is_int] = _splitmix64(_splitmix64(vals.view(np.uint64)) ^ seed)
    if not is_int.all():
        salt = int(seed).to_bytes(8, "little")
        idx = np.flatnonzero(~is_int)
        keys[idx] = [
            int.from_bytes(
                hashlib.blake2b(
                    str(ids[i]).encode("utf-8", "surrogatepass"), digest_size=8, key=salt
                ).digest(),
                "little",
            )
            for i in idx
        ]
    return keys


def canonical_order(keys: np.ndarray, ids: Sequence[RowId]) -> np.ndarray:
    """Permutation sorting rows by hash key, ties broken by the id itself.

    The result depends only on the *set* of ids, never on input order, which is
    what lets a model trained on the sorted rows be history independent.  Hash
    ties are astronomically rare but are still resolved deterministically.
    """
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    if sk.size > 1 and np.any(sk[1:] == sk[:-1]):
        order = np.array(
            sorted(
                range(len(ids)),
                key=lambda i: (int(keys[i]), isinstance(ids[i], str), ids[i]),
            ),
            dtype=np.intp,
        )
    return order


# ---------------------------------------------------------------------------
# Edge validation
# ---------------------------------------------------------------------------


def check_X(X: Any, n_features: int | None = None, owner: str = "the model") -> np.ndarray:
    """Return ``X`` as a finite, C-contiguous 2-D float64 array or raise ``ValueError``.

    Complex input is refused rather than silently truncated to its real part.
    """
    if sparse.issparse(X):
        raise ValueError("sparse X is not supported; pass a dense array")
    if X is None:
        raise ValueError("X is None")
    raw = np.asarray(X)
    if raw.dtype.kind == "c":
        raise ValueError("Complex data not supported")
    try:
        arr = raw.astype(np.float64, copy=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"X must be numeric: {exc}") from exc
    if arr.ndim != 2:
        raise ValueError(
            f"X must be 2-dimensional, got shape {arr.shape}. Reshape your data with "
            "X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a single row."
        )
    if arr.shape[1] == 0:
        raise ValueError(
            f"Found array with 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required."
        )
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(
            f"X has {arr.shape[1]} features, but {owner} is expecting {n_features} "
            "features as input"
        )
    if not np.isfinite(arr).all():
        raise ValueError("X contains NaN or infinity")
    return np.ascontiguousarray(arr)


def check_labels(y: Any, n: int) -> np.ndarray:
    """Validate classification labels: 1-D, length ``n``, discrete, no NaN."""
    if y is None:
        raise ValueError("this estimator requires y to be passed, but the target y is None")
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-dimensional for classification, got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"y has {arr.shape[0]} entries but X has {n} rows")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError("y contains NaN or infinity")
    if arr.dtype.kind == "O" and any(v is None for v in arr):
        raise ValueError("y contains None")
    if arr.dtype.kind == "f" and np.any(arr != np.round(arr)):
        raise ValueError(
            "Unknown label type: continuous. Classification needs discrete labels; "
            "use a regressor for continuous targets"
        )
    return arr


def check_targets(y: Any, n: int) -> np.ndarray:
    """Validate regression targets: numeric, finite, 1-D or 2-D, length ``n``."""
    if y is None:
        raise ValueError("this estimator requires y to be passed, but the target y is None")
    if np.asarray(y).dtype.kind == "c":
        raise ValueError("complex targets are not supported")
    try:
        arr = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"y must be numeric: {exc}") from exc
    if arr.ndim not in (1, 2):
        raise ValueError(f"y must be 1- or 2-dimensional, got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"y has {arr.shape[0]} entries but X has {n} rows")
    if not np.isfinite(arr).all():
        raise ValueError("y contains NaN or infinity")
    return np.ascontiguousarray(arr)


def check_known_labels(y: np.ndarray, classes: np.ndarray) -> None:
    """Raise ``ValueError`` if ``y`` holds labels outside ``classes``."""
    unseen = np.setdiff1d(np.unique(y), classes)
    if unseen.size:
        raise ValueError(
            f"labels not seen during fit: {listing(unseen.tolist())}; "
            f"known classes are {listing(classes.tolist())}"
        )


def check_int_param(name: str, value: Any, minimum: int | None = None) -> int:
    """Validate an integer hyper-parameter (bool rejected)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)
