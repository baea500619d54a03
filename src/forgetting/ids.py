"""External row ids: one normalization for every model, baseline, the CLI and the store.

Rows are addressed by stable external ids, never positions (positions shift as rows come and
go). An id is a Python ``int`` (fitting in int64) or a ``str``; numpy scalars are unwrapped so
``np.int64(3)`` and ``3`` are the same row, while ``1`` and ``"1"`` are different rows. Bools
and floats are refused: ``True == 1`` and ``1.0 == 1`` would silently alias rows. Strings are
taken exactly as given — never stripped or case-folded — so ``" u5 "`` and ``"u5"`` are two
rows everywhere (Python API, CLI, HTTP).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from numbers import Integral
from typing import Any

import numpy as np

RowId = int | str

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_MAX_LISTED = 10
#: Longest rendering of one item in an error message: ids are the caller's, of any length,
#: and one error line must stay a line.
_MAX_SHOWN = 60


def shown(value: Any) -> str:
    """One item for an error message: its repr, a long string cut to its first characters
    and its length."""
    if isinstance(value, str) and len(value) > _MAX_SHOWN:
        return f"{value[: _MAX_SHOWN - 20]!r}...({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else f"{text[: _MAX_SHOWN - 3]}..."


def listing(items: Sequence[Any]) -> str:
    """Render at most ``_MAX_LISTED`` items for an error message (each as :func:`shown`), with
    a count of the rest."""
    shown_items = ", ".join(shown(v) for v in items[:_MAX_LISTED])
    extra = len(items) - _MAX_LISTED
    return f"[{shown_items}{f', ... ({extra} more)' if extra > 0 else ''}]"


def normalize_id(value: Any) -> RowId:
    # bool is an int subclass; True == 1 would silently alias row 1, so refuse it.
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"ids must be ints or strings, got bool {shown(value)}")
    if isinstance(value, str):  # includes np.str_
        return str(value)
    if isinstance(value, Integral):  # includes numpy integers
        iv = int(value)
        if not _INT64_MIN <= iv <= _INT64_MAX:
            raise ValueError(f"integer ids must fit in int64, got {iv}")
        return iv
    raise TypeError(f"ids must be ints or strings, got {type(value).__name__} {shown(value)}")


def normalize_ids(ids: Iterable[Any] | None, n: int | None = None) -> list[RowId]:
    """Return ``ids`` as a list of unique plain ``int``/``str`` values.

    ``ids=None`` means ``range(n)`` (only allowed when ``n`` is given).  A bare
    string or integer is rejected rather than iterated, because ``forget("abc")``
    meaning ``forget(["a", "b", "c"])`` would be a nasty surprise.  When ``n`` is
    given the length must match.  Duplicates raise ``ValueError``.
    """
    if ids is None:
        if n is None:
            raise ValueError("ids must be given")
        return list(range(n))
    if isinstance(ids, str | bytes | Integral):
        raise TypeError(f"ids must be a sequence of ids, not a single {type(ids).__name__}")
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise ValueError(f"ids must be one-dimensional, got shape {ids.shape}")
        if ids.dtype.kind in "iu":
            out = ids.tolist()  # fast path: already plain ints
            if ids.dtype.kind == "u" and out and max(out) > _INT64_MAX:
                raise ValueError("integer ids must fit in int64")
        else:
            out = [normalize_id(v) for v in ids.tolist()]
    else:
        out = list(ids)
        # plain ints (the common case): one C-level pass over the types, not a Python test
        # per id
        if set(map(type, out)) <= {int}:
            if out and (min(out) < _INT64_MIN or max(out) > _INT64_MAX):
                bad = next(v for v in out if not _INT64_MIN <= v <= _INT64_MAX)
                raise ValueError(f"integer ids must fit in int64, got {bad}")
        else:
            out = [normalize_id(v) for v in out]
    if n is not None and len(out) != n:
        raise ValueError(f"ids has {len(out)} entries but X has {n} rows")
    if len(set(out)) != len(out):
        dups = [v for v, c in Counter(out).items() if c > 1]
        raise ValueError(f"ids must be unique; duplicated: {listing(dups)}")
    return out
