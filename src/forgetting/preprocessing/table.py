"""Raw rows as the exact preprocessing steps see them: numeric and text columns.

A step's input is either a 2-D float64 **matrix** (every column numeric, NaN = missing) or a
:class:`Table`: a tuple of 1-D columns, each float64 (numeric, NaN = missing) or object
(strings, None = missing), with column names when the rows came from a DataFrame. Why two
kinds and not one: most steps after the first see only numbers, and a matrix keeps their
arithmetic one numpy call; a table keeps strings as strings until an encoder turns them into
numbers, and keeps the names a column transformer selects by.

What enters at the edge (:func:`read_input`) is checked once, against the layout recorded at
fit (:class:`Layout`: names and kinds): a pandas DataFrame (numeric, boolean, categorical,
string or object columns; columns matched by name, so their order may differ), a numpy array
or a list of rows. Every problem is one ``ValueError`` naming the column and what to do:
unknown or missing columns, a column that mixes strings and numbers, text where numbers were
fitted, infinity, no rows.

:class:`RowBuffer` keeps the rows a pipeline was fitted on, with their ids, so a forget can
recompute what a step would be without them; removing rows moves the last rows into the holes
(O(rows removed), not O(rows held)) and clears the vacated slots, so no copy of a forgotten
row stays behind in the buffer's spare capacity.
"""

from __future__ import annotations

import datetime
import math
import sys
from dataclasses import dataclass
from numbers import Number
from typing import Any

import numpy as np

NUM = "num"
TEXT = "text"
_DATES = (datetime.date, datetime.time, datetime.timedelta, np.datetime64, np.timedelta64)
"""Values that are dates or times (pandas' Timestamp and Timedelta are among them)."""


@dataclass(frozen=True)
class Table:
    """Columns of equal length: float64 (numeric, NaN = missing) or object (str / None)."""

    columns: tuple[np.ndarray, ...]
    names: tuple[str, ...] | None = None

    @property
    def n_rows(self) -> int:
        return len(self.columns[0]) if self.columns else 0


def n_rows(X: Any) -> int:
    return X.shape[0] if isinstance(X, np.ndarray) else X.n_rows


def n_columns(X: Any) -> int:
    return X.shape[1] if isinstance(X, np.ndarray) else len(X.columns)


def names_of(X: Any) -> tuple[str, ...] | None:
    return None if isinstance(X, np.ndarray) else X.names


def columns_of(X: Any) -> list[np.ndarray]:
    """The 1-D columns of a matrix or table."""
    if isinstance(X, np.ndarray):
        return [X[:, j] for j in range(X.shape[1])]
    return list(X.columns)


def is_text(column: np.ndarray) -> bool:
    return column.dtype == object


def take(X: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` (indices or a mask) of a matrix or table, of the same kind."""
    if isinstance(X, np.ndarray):
        return X[rows]
    return Table(tuple(c[rows] for c in X.columns), X.names)


def select(X: Any, cols: list[int]) -> Any:
    """Columns ``cols`` of a matrix or table, of the same kind (names kept)."""
    if isinstance(X, np.ndarray):
        return X[:, cols]
    names = None if X.names is None else tuple(X.names[j] for j in cols)
    return Table(tuple(X.columns[j] for j in cols), names)


def to_matrix(X: Any, step: str = "the steps") -> np.ndarray:
    """A float64 matrix of ``X``; text columns are refused (they need an encoder first)."""
    if isinstance(X, np.ndarray):
        return X
    for j, c in enumerate(X.columns):
        if is_text(c):
            raise ValueError(
                f"{step}: column {column_label(X, j)} holds text; encode it first "
                "(OneHotEncoder or OrdinalEncoder, in a ColumnTransformer for some columns)"
            )
    if not X.columns:
        return np.empty((0, 0), dtype=np.float64)
    return np.column_stack(X.columns).astype(np.float64, copy=False)


def hstack(parts: list[Any], n: int) -> Any:
    """Columns of ``parts`` side by side: a matrix when every column is numeric, else a table
    (without names)."""
    if all(isinstance(p, np.ndarray) for p in parts):
        if not parts:
            return np.empty((n, 0), dtype=np.float64)
        return np.hstack(parts) if len(parts) > 1 else parts[0]
    columns: list[np.ndarray] = []
    for p in parts:
        columns.extend(columns_of(p))
    if not any(is_text(c) for c in columns):
        return np.column_stack(columns) if columns else np.empty((n, 0), dtype=np.float64)
    return Table(tuple(columns))


def column_label(X: Any, j: int) -> str:
    names = names_of(X)
    return repr(names[j]) if names is not None else str(j)


def concat_rows(parts: list[Any]) -> Any:
    """Rows of ``parts`` one after the other (all of one kind and width)."""
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts, axis=0)
    width = len(parts[0].columns)
    return Table(
        tuple(np.concatenate([p.columns[j] for p in parts]) for j in range(width)),
        parts[0].names,
    )


# -- the edge: what a user passes -----------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """What a pipeline was fitted on: column names (a DataFrame's, or None) and kinds."""

    names: tuple[str, ...] | None
    kinds: tuple[str, ...]
    matrix: bool
    """The fit input was a numeric array: inputs are handed to the steps as a matrix."""


def _pandas():
    return sys.modules.get("pandas")


def is_dataframe(X: Any) -> bool:
    pd = _pandas()
    return pd is not None and isinstance(X, pd.DataFrame)


def _missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, float | np.floating):
        return math.isnan(v)
    pd = _pandas()
    return pd is not None and (v is pd.NA or v is pd.NaT)


COMPLEX_FIX = (
    "features are real numbers: split it into its real and imaginary parts (two columns), or "
    "keep its modulus"
)
DATES_FIX = (
    "dates and times are not numbers: convert it to numbers first (e.g. seconds since an "
    "epoch, or the year, month and day as columns)"
)
TEXT_FIX = "the exact forest takes text as a pandas category dtype: X[{name!r}].astype('category')"


def refuse_unreadable(X: Any, *, text: bool = True) -> None:
    """Refuse, in one ValueError line naming the column, what no model takes, before any
    conversion: a repeated column name, complex numbers (a cast to float would drop their
    imaginary part in silence), dates and times (not numbers) — and, with ``text=False``
    (the exact forest, which reads text as a pandas ``category`` dtype), a column of
    strings. A DataFrame is checked column by column (an object column value by value), a
    numpy array by its dtype; anything else passes to the checks that follow."""
    if isinstance(X, np.ndarray):
        if X.dtype.kind == "c":
            raise ValueError(  # scikit-learn's words first: its estimator checks match them
                f"Complex data not supported: X has dtype {X.dtype}; "
                + COMPLEX_FIX.replace("split it", "split each column")
            )
        if X.dtype.kind in "mM":
            raise ValueError(
                f"X has dtype {X.dtype}; {DATES_FIX.replace('convert it', 'convert X')}"
            )
        return
    if not is_dataframe(X):
        return
    pd = _pandas()
    repeated = X.columns[X.columns.duplicated()]
    if len(repeated):
        name = repeated[0]
        count = int((X.columns == name).sum())
        raise ValueError(
            f"column name {name!r:.60} appears {count} times in X; give every column its own name"
        )
    dtypes = X.dtypes.tolist()
    if all(isinstance(t, np.dtype) and t.kind in "biuf" for t in dtypes):
        return  # plain numbers: nothing to look at (the common case, once per prediction)
    for j, name in enumerate(X.columns):
        dtype = dtypes[j]
        label = f"column {name!r:.60}"
        if isinstance(dtype, pd.CategoricalDtype):
            continue
        if pd.api.types.is_complex_dtype(dtype):
            raise ValueError(f"{label} holds complex numbers ({dtype}); {COMPLEX_FIX}")
        if (
            pd.api.types.is_datetime64_any_dtype(dtype)
            or pd.api.types.is_timedelta64_dtype(dtype)
            or isinstance(dtype, pd.PeriodDtype)
        ):
            raise ValueError(f"{label} has dtype {dtype}; {DATES_FIX}")
        if pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype):
            _refuse_values(X.iloc[:, j], label, text, name)


def _refuse_values(column: Any, label: str, text: bool, name: Any) -> None:
    """An object or string column's values: complex numbers and dates refused (and strings
    with ``text=False``), by the first one found."""
    for v in column.tolist():
        if isinstance(v, complex | np.complexfloating):
            raise ValueError(f"{label} holds complex numbers (e.g. {v!r:.40}); {COMPLEX_FIX}")
        if isinstance(v, _DATES) or (_pandas() is not None and isinstance(v, _pandas().Period)):
            raise ValueError(f"{label} holds {type(v).__name__} values; {DATES_FIX}")
        if isinstance(v, str) and not text:
            raise ValueError(f"{label} holds text ({v!r:.30}); {TEXT_FIX.format(name=name)}")


def _text_or_numbers(values: np.ndarray, label: str, kind: str | None) -> np.ndarray:
    """An object column as float64 (all numbers) or object (all strings, None = missing)."""
    flat = values.tolist()
    missing = [_missing(v) for v in flat]
    present = [v for v, m in zip(flat, missing, strict=True) if not m]
    strings = [v for v in present if isinstance(v, str)]
    numbers = [v for v in present if isinstance(v, Number) and not isinstance(v, str | complex)]
    if len(strings) + len(numbers) != len(present):
        other = next(v for v in present if not isinstance(v, str | Number))
        raise ValueError(
            f"column {label} holds a {type(other).__name__} ({other!r:.40}); "
            "columns hold numbers or strings"
        )
    if strings and numbers:
        raise ValueError(
            f"column {label} mixes strings and numbers (e.g. {strings[0]!r:.30} and "
            f"{numbers[0]!r:.30}); make it one type (e.g. astype(str))"
        )
    if strings or (kind == TEXT and not numbers):
        out = np.empty(len(flat), dtype=object)
        out[:] = [None if m else str(v) for v, m in zip(flat, missing, strict=True)]
        return out
    out = np.array([np.nan if m else float(v) for v, m in zip(flat, missing, strict=True)])
    return out.astype(np.float64)


def _column(values: Any, label: str, kind: str | None) -> np.ndarray:
    """One column as float64 or object (see :class:`Table`), checked against ``kind``."""
    pd = _pandas()
    if pd is not None and isinstance(values, pd.Series):
        dtype = values.dtype
        text = isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(dtype)
        if text or pd.api.types.is_object_dtype(dtype):
            values = values.to_numpy(dtype=object)
        elif pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype):
            values = values.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            raise ValueError(
                f"column {label} has dtype {dtype}; columns hold numbers, booleans, "
                "categories or strings (convert dates to numbers first)"
            )
    values = np.asarray(values)
    if values.dtype.kind in "biuf":
        col = values.astype(np.float64)
    elif values.dtype.kind in "OUS":
        col = _text_or_numbers(values.astype(object), label, kind)
    else:
        raise ValueError(f"column {label} has dtype {values.dtype}; use numbers or strings")
    if col.dtype == np.float64:
        if np.isinf(col).any():
            raise ValueError(f"column {label} holds infinity; only finite numbers or NaN")
        if kind == TEXT:
            if not np.isnan(col).all():
                raise ValueError(
                    f"column {label} holds numbers but was fitted on text; pass strings"
                )
            col = np.full(len(col), None, dtype=object)
    elif kind == NUM:
        raise ValueError(f"column {label} holds text but was fitted on numbers")
    return col


def read_input(X: Any, layout: Layout | None = None) -> tuple[Any, Layout]:
    """``X`` as a matrix or :class:`Table` (see the module docstring), and its layout.

    With ``layout`` (a fitted pipeline), columns are matched to it: by name for a DataFrame
    (order free, unknown and missing names refused), by position otherwise (width checked);
    each column must be of the fitted kind. Raises ValueError naming the column.
    """
    refuse_unreadable(X)
    if is_dataframe(X):
        return _read_frame(X, layout)
    if hasattr(X, "__dataframe__") or hasattr(X, "to_pandas"):
        raise ValueError("pass a pandas DataFrame or a numpy array (convert other frames)")
    arr = np.asarray(X) if not isinstance(X, np.ndarray) else X
    if arr.ndim != 2:
        raise ValueError(
            f"expected a 2-D array or DataFrame, got {arr.ndim} dimension(s); "
            "reshape a single row with X.reshape(1, -1)"
        )
    if arr.shape[0] == 0:
        raise ValueError("X has no rows")
    if layout is not None:
        if layout.names is not None:
            raise ValueError(
                f"the pipeline was fitted on a DataFrame with columns {list(layout.names)[:10]}; "
                "pass a DataFrame with those columns"
            )
        if arr.shape[1] != len(layout.kinds):
            raise ValueError(
                f"X has {arr.shape[1]} columns, the pipeline was fitted on {len(layout.kinds)}"
            )
    if arr.dtype.kind in "biuf" and (layout is None or layout.matrix):
        if arr.shape[1] == 0:
            raise ValueError("X has no columns")
        M = np.array(arr, dtype=np.float64, copy=True)
        if np.isinf(M).any():
            j = int(np.flatnonzero(np.isinf(M).any(axis=0))[0])
            raise ValueError(f"column {j} holds infinity; only finite numbers or NaN")
        return M, Layout(None, (NUM,) * M.shape[1], True)
    kinds = layout.kinds if layout is not None else (None,) * arr.shape[1]
    cols = tuple(_column(arr[:, j], str(j), kinds[j]) for j in range(arr.shape[1]))
    return _finish(Table(cols), layout)


def _read_frame(X: Any, layout: Layout | None) -> tuple[Any, Layout]:
    names = [c if isinstance(c, str) else None for c in X.columns]
    if any(n is None for n in names):
        bad = next(c for c in X.columns if not isinstance(c, str))
        raise ValueError(f"DataFrame column names must be strings; found {bad!r}")
    if X.shape[0] == 0:
        raise ValueError("X has no rows")
    if layout is None:
        if not names:
            raise ValueError("X has no columns")
        order = names
        kinds: tuple = (None,) * len(names)
    else:
        if layout.names is None:
            raise ValueError(
                "the pipeline was fitted on an array without column names; pass an array "
                "(X.to_numpy()) in the fitted column order"
            )
        unknown = [n for n in names if n not in set(layout.names)]
        missing = [n for n in layout.names if n not in set(names)]
        if missing:
            raise ValueError(f"X lacks the fitted columns {missing[:10]}; add them")
        if unknown:
            raise ValueError(f"X has columns not seen at fit: {unknown[:10]}; drop them or refit")
        order = list(layout.names)
        kinds = layout.kinds
    cols = tuple(
        _column(X[name], repr(name), kind) for name, kind in zip(order, kinds, strict=True)
    )
    return _finish(Table(cols, tuple(order)), layout)


def _finish(table: Table, layout: Layout | None) -> tuple[Any, Layout]:
    if layout is not None:
        return table, layout
    kinds = tuple(TEXT if is_text(c) else NUM for c in table.columns)
    return table, Layout(table.names, kinds, False)


def canonical_order(row_draws: np.ndarray, id_raw: list[bytes]) -> np.ndarray:
    """Row order by (keyed draw, id bytes): the same for the same set of rows, however they
    are held — the order every step is fitted in."""
    order = np.argsort(row_draws, kind="stable")
    d = row_draws[order]
    if d.size > 1 and (d[1:] == d[:-1]).any():
        order = np.array(sorted(range(len(id_raw)), key=lambda i: (row_draws[i], id_raw[i])))
    return order


# -- the rows a pipeline holds --------------------------------------------------------------
class RowBuffer:
    """Named arrays of equal length (leading axis = rows) with spare capacity.

    ``append`` grows by doubling; ``remove`` moves the last rows into the holes and clears the
    slots left behind (NaN, None or zero), so the buffer holds no copy of a removed row.
    """

    def __init__(self, parts: dict[str, np.ndarray]):
        sizes = {len(a) for a in parts.values()}
        if len(sizes) != 1:
            raise ValueError("parts of unequal length")
        self.n = sizes.pop()
        self._parts = {k: self._grown(a, max(self.n, 1)) for k, a in parts.items()}

    @staticmethod
    def _grown(a: np.ndarray, capacity: int) -> np.ndarray:
        out = np.empty((capacity, *a.shape[1:]), dtype=a.dtype)
        out[: len(a)] = a
        _clear(out[len(a) :])
        return out

    @property
    def names(self) -> list[str]:
        return list(self._parts)

    def get(self, name: str) -> np.ndarray:
        """The live rows of one part (a view: do not keep it across changes)."""
        return self._parts[name][: self.n]

    def append(self, parts: dict[str, np.ndarray]) -> np.ndarray:
        """Add rows at the end; returns their positions. Dtypes widen where needed."""
        k = len(next(iter(parts.values())))
        start = self.n
        capacity = len(next(iter(self._parts.values())))
        if start + k > capacity:
            capacity = max(start + k, 2 * capacity)
            self._parts = {n: self._grown(a[:start], capacity) for n, a in self._parts.items()}
        for name, values in parts.items():
            target = self._parts[name]
            dtype = np.result_type(target.dtype, np.asarray(values).dtype)
            if dtype != target.dtype and target.dtype != object:
                self._parts[name] = target = self._grown(target[:start], capacity).astype(dtype)
            target[start : start + k] = values
        self.n = start + k
        return np.arange(start, start + k)

    def remove(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Remove rows at ``positions`` (unique); returns (from, to): the rows moved."""
        positions = np.asarray(positions, dtype=np.int64)
        new_n = self.n - positions.size
        gone = np.zeros(self.n, dtype=bool)
        gone[positions] = True
        holes = np.sort(positions[positions < new_n])
        movers = np.flatnonzero(~gone[new_n:]) + new_n
        for a in self._parts.values():
            a[holes] = a[movers]
            _clear(a[new_n : self.n])
        self.n = new_n
        return movers, holes

    def state(self) -> dict[str, np.ndarray]:
        """Copies of the live rows of every part."""
        return {k: a[: self.n].copy() for k, a in self._parts.items()}


def _clear(a: np.ndarray) -> None:
    if a.dtype == object:
        a[...] = None
    elif a.dtype.kind == "f":
        a[...] = np.nan
    else:
        a[...] = 0
