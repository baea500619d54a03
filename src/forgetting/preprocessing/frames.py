"""A raw DataFrame as a QSS estimator's input, encoded by exact steps (SPEC §5 decision 11).

``QSSClassifier``/``QSSRegressor`` take a pandas DataFrame with numeric, boolean, categorical
and string columns and missing values, as scikit-learn's HistGradientBoosting does. The
estimator's numeric input is this module's fixed encoding of the table, built from the exact
steps of this package, each a function of the current set of rows:

* a numeric or boolean column: the mean imputer and the standard scaler, both fitted on the
  table's own schema rows D° (integer sums; the estimator's head works on L2-normalized
  input, so unscaled columns would drown each other), and — for every column with a missing
  value among the rows — a 0/1 indicator (:class:`~.impute.MissingIndicator`: counts);
* a categorical or string column: one 0/1 column per category present among the rows, a
  missing value its own category (:class:`~.encoding.OneHotEncoder`: counts per category); a
  category unseen at fit is refused at prediction, naming the column, as scikit-learn's
  encoder does by default.

The table's D° is a pipeline's: a keyed draw per id (a key derived from the estimator's
membership key), the rows below ``rho``, at least :data:`MIN_SCHEMA_ROWS`. A forget changes
the encoding only when it hits that D°, removes a category's last row or a column's last
missing value (an insert: when it lands in D° or brings a new one). :class:`FrameEncoding`
keeps the raw rows with their ids, labels and draws, plans a forget or insert on a copy of the
encoder, and says whether the encoding of any row that stays changed — then the estimator
refits on the re-encoded rows, otherwise it forgets or inserts on its own fast path.
``forgetting.pipeline`` runs the same steps for a user's own preprocessing.
"""

from __future__ import annotations

import copy
import hashlib
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..schema.membership import MembershipRule, draws, id_bytes
from .base import Chain, Rows
from .compose import ColumnTransformer
from .encoding import OneHotEncoder
from .impute import MissingIndicator, SimpleImputer
from .scaling import StandardScaler
from .table import (
    NUM,
    TEXT,
    Layout,
    RowBuffer,
    Table,
    concat_rows,
    is_dataframe,
    read_input,
    take,
    to_matrix,
)

MIN_SCHEMA_ROWS = 200
"""The table's D° keeps at least this many rows (all rows on smaller tables), as a pipeline's
does by default: enough for a mean and a scale."""


MAX_CATEGORIES = 1000
"""The most categories one column may hold in the built-in encoding: one dense 0/1 column
each, for every row (benchmarks/results/pipeline-tables.md: 148 columns in all on flights).
A column past it is refused before the encoding is allocated, naming it (a 100k-category
column of 100k rows would need 74.5 GiB)."""


def schema_key(key: bytes) -> bytes:
    """The key of the table's D° draw, from the estimator's membership key (as secret) and
    apart from every instance's draw."""
    return hashlib.blake2b(b"forgetting-table-schema", key=key, digest_size=32).digest()


def schema_rule(rho: float) -> MembershipRule:
    return MembershipRule(float(rho), MIN_SCHEMA_ROWS)


def wants_encoding(X: Any) -> bool:
    """Whether ``X`` is a DataFrame the plain numeric path cannot take: a column that is not
    numeric or boolean (categorical, string, object), or a missing value anywhere."""
    if not is_dataframe(X):
        return False
    if 0 in X.shape:  # refused by the table reader, naming what is missing
        return True
    pd = sys.modules["pandas"]
    for name in X.columns:
        dtype = X[name].dtype
        if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)):
            return True
    return bool(X.isna().to_numpy().any())


def _encoder(layout: Layout) -> ColumnTransformer:
    numbers = [j for j, k in enumerate(layout.kinds) if k == NUM]
    text = [j for j, k in enumerate(layout.kinds) if k == TEXT]
    parts: list[tuple[str, Any, list[int]]] = []
    if numbers:
        scaled = Chain(
            [
                ("impute", SimpleImputer(keep_empty_features=True)),
                ("scale", StandardScaler()),
            ]
        )
        parts += [("numbers", scaled, numbers), ("missing", MissingIndicator(), numbers)]
    if text:
        parts.append(("categories", OneHotEncoder(handle_unknown="error"), text))
    return ColumnTransformer(parts)


@dataclass
class Change:
    """A planned forget or insert: the updated encoder, whether any row that stays is encoded
    differently (``changed``: the estimator must refit), the rows after the change
    (``rows()``: encoded matrix, labels, ids — only needed to refit) and ``commit``."""

    encoder: ColumnTransformer
    changed: bool
    rows: Callable[[], tuple[np.ndarray, np.ndarray, list]]
    commit: Callable[[], None]

    def encode(self, table: Table) -> np.ndarray:
        """Rows ``table`` as the updated encoder encodes them, float64."""
        return _encoded(self.encoder, table)


class FrameEncoding:
    """The raw rows an estimator was fitted on (by id), the table's layout and its fitted
    encoder (see the module docstring). ``lock``: the estimator holds it from a change's plan
    to its commit and while it encodes and predicts, so a prediction never pairs one state's
    encoding with another's engine."""

    def __init__(
        self,
        layout: Layout,
        encoder: ColumnTransformer,
        buffer: RowBuffer,
        key: bytes,
        rule: MembershipRule,
    ):
        self.layout = layout
        self.encoder = encoder
        self.buffer = buffer
        self.key = key
        self.rule = rule
        self.position = {i: p for p, i in enumerate(buffer.get("ids").tolist())}
        self.lock = threading.RLock()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("lock", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.lock = threading.RLock()

    # -- fit ---------------------------------------------------------------------------------
    @staticmethod
    def read_new(X: Any) -> tuple[Table, Layout]:
        """DataFrame ``X`` as a table to fit on; ValueError naming the column for a table it
        cannot take (mixed types, unsupported dtypes, infinity, a column without values)."""
        table, layout = read_input(X)
        for name, column in zip(layout.names or (), table.columns, strict=True):
            present = (
                [v is not None for v in column.tolist()]
                if column.dtype == object
                else ~np.isnan(column)
            )
            if not np.any(present):
                raise ValueError(f"column {name!r} has no values (all missing); drop it or fill it")
        return table, layout

    @classmethod
    def fit(
        cls, table: Table, layout: Layout, y: np.ndarray, ids: list, key: bytes, rho: float
    ) -> tuple[FrameEncoding, np.ndarray]:
        """The encoding fitted on ``table`` (:meth:`read_new`; rows with labels ``y`` and
        ``ids``) and the encoded rows, float64. ``key`` (the estimator's membership key) and
        ``rho`` choose the table's D°: the rows the scaler and the imputer are fitted on."""
        key, rule = schema_key(key), schema_rule(rho)
        parts = _parts(table, y, ids, key)
        parts["member"] = rule.members(parts["draws"], np.ones(len(ids), dtype=bool))
        encoder = _encoder(layout)
        encoder.fit_rows(Rows(table, None, parts["member"]))
        _check_categories(encoder, layout, len(ids))
        frame = cls(layout, encoder, RowBuffer(parts), key, rule)
        return frame, _encoded(encoder, table)

    @classmethod
    def restore(cls, stored: Any, y: np.ndarray, ids: list, key: bytes, rho: float):
        """The encoding of stored rows (a model file: :meth:`stored`), refitted from them: the
        encoder is a function of the rows, the key and rho, so nothing else is stored.
        Raises ValueError when they are not a table this module wrote."""
        names, kinds, columns = stored["names"], stored["kinds"], stored["columns"]
        if not (
            isinstance(names, list)
            and isinstance(kinds, list)
            and isinstance(columns, list)
            and len(names) == len(kinds) == len(columns) > 0
            and all(type(n) is str for n in names)
            and len(set(names)) == len(names)
            and all(k in (NUM, TEXT) for k in kinds)
        ):
            raise ValueError("table: names, kinds and columns do not match")
        cols = []
        for name, kind, column in zip(names, kinds, columns, strict=True):
            if not isinstance(column, np.ndarray) or column.shape != (len(ids),):
                raise ValueError(f"table: column {name!r} is not one value per row")
            if kind == NUM and (column.dtype != np.float64 or np.isinf(column).any()):
                raise ValueError(f"table: column {name!r} is not finite float64 (or NaN)")
            if kind == TEXT and not (
                column.dtype == object and all(v is None or type(v) is str for v in column)
            ):
                raise ValueError(f"table: column {name!r} does not hold text")
            cols.append(column)
        layout = Layout(tuple(names), tuple(kinds), False)
        return cls.fit(Table(tuple(cols), layout.names), layout, y, ids, key, rho)

    def stored(self, ids: list) -> dict[str, list]:
        """Names, kinds and raw columns of the rows ``ids``, in that order (a model file)."""
        table = self.rows_at(self.positions(ids))
        return {
            "names": list(self.layout.names),
            "kinds": list(self.layout.kinds),
            "columns": [c.copy() for c in table.columns],
        }

    # -- the rows held ---------------------------------------------------------------------
    def rows_at(self, pos: np.ndarray) -> Table:
        buf = self.buffer
        width = len(self.layout.kinds)
        return Table(tuple(buf.get(f"c{j}")[pos] for j in range(width)), self.layout.names)

    def positions(self, ids: list) -> np.ndarray:
        """Buffer positions of ``ids``; KeyError (the unknown ids) if one is not held."""
        missing = [i for i in ids if i not in self.position]
        if missing:
            raise KeyError(missing)
        return np.array([self.position[i] for i in ids], dtype=np.int64)

    @property
    def n(self) -> int:
        return self.buffer.n

    # -- input at the edge ------------------------------------------------------------------
    def read(self, X: Any) -> Table:
        """Rows to predict or insert, checked against the fitted table: a DataFrame with the
        fitted columns in the fitted order (scikit-learn's rule), each of the fitted kind."""
        if not is_dataframe(X):
            raise ValueError(
                f"this model was fitted on a DataFrame with columns "
                f"{list(self.layout.names)[:10]}; pass a DataFrame with those columns"
            )
        names = list(X.columns)
        fitted = list(self.layout.names)
        if set(map(str, names)) == set(fitted) and len(names) == len(fitted) and names != fitted:
            j = next(j for j, (a, b) in enumerate(zip(names, fitted, strict=True)) if a != b)
            raise ValueError(
                f"X's columns are in another order than at fit (column {names[j]!r} at "
                f"position {j}, fitted {fitted[j]!r}); reorder them: X[model.feature_names_in_]"
            )
        table, _ = read_input(X, self.layout)
        return table

    def encode(self, X: Any) -> np.ndarray:
        """The estimator's input for DataFrame ``X``, float64. A category no row held has is
        refused (scikit-learn's encoder default), naming the column and the value."""
        table = self.read(X)
        try:
            return _encoded(self.encoder, table)
        except ValueError as err:
            if not str(err).startswith("Found unknown categories"):
                raise
            found = str(err).split(" during transform")[0]
            raise ValueError(
                f"{found}: the model holds no row with it; insert rows with it (or refit), "
                "or encode the table yourself with forgetting.pipeline.make_pipeline("
                "OneHotEncoder(handle_unknown='ignore'), ...)"
            ) from None

    # -- changes -----------------------------------------------------------------------------
    def plan_forget(self, ids: list) -> Change:
        """The encoder without rows ``ids`` (held: KeyError otherwise), nothing changed yet."""
        pos = self.positions(ids)
        keep = np.ones(self.n, dtype=bool)
        keep[pos] = False
        kept = np.flatnonzero(keep)
        buf = self.buffer
        members = buf.get("member")[: self.n]
        schema_changed = bool(members[pos].any())
        if schema_changed:  # rows outside D° leave its threshold, and D°, as they were
            after = self.rule.members(buf.get("draws")[kept], np.ones(kept.size, dtype=bool))
        else:
            after = members[kept]
        current = _Current(lambda: self.rows_at(kept), after)
        encoder = copy.deepcopy(self.encoder)
        delta = Rows(self.rows_at(pos), None, members[pos])
        changed = encoder.update_rows(self.encoder, delta, -1, schema_changed, current)
        staying = current.table

        def rows() -> tuple[np.ndarray, np.ndarray, list]:
            X = _encoded(encoder, staying())
            return X, buf.get("y")[kept], buf.get("ids")[kept].tolist()

        def commit() -> None:
            self.encoder = encoder
            gone = buf.get("ids")[pos].tolist()
            _, holes = buf.remove(pos)
            for i in gone:
                del self.position[i]
            held = buf.get("ids")
            for p in holes.tolist():
                self.position[held[p]] = p
            if schema_changed:  # otherwise each row's flag moved with it
                buf.get("member")[:] = self._members()

        return Change(encoder, changed, rows, commit)

    def _members(self) -> np.ndarray:
        draws_held = self.buffer.get("draws")[: self.n]
        return self.rule.members(draws_held, np.ones(self.n, dtype=bool))

    def plan_insert(self, table: Table, y: np.ndarray, ids: list) -> Change:
        """The encoder with new rows ``table`` (labels ``y``, new ``ids``) added."""
        buf = self.buffer
        n = self.n
        old = self.rows_at(np.arange(n))
        new = _parts(table, y, ids, self.key)
        all_draws = np.concatenate([buf.get("draws")[:n], new["draws"]])
        after = self.rule.members(all_draws, np.ones(all_draws.size, dtype=bool))
        schema_changed = bool(after[n:].any()) or not np.array_equal(
            buf.get("member")[:n], after[:n]
        )
        new["member"] = after[n:]
        current = _Current(lambda: concat_rows([old, table]), after, old, after[:n])
        encoder = copy.deepcopy(self.encoder)
        changed = encoder.update_rows(
            self.encoder, Rows(table, None, after[n:]), +1, schema_changed, current
        )
        _check_categories(encoder, self.layout, after.size)
        every = current.table

        def rows() -> tuple[np.ndarray, np.ndarray, list]:
            labels = np.concatenate([buf.get("y")[: self.n], y])
            return _encoded(encoder, every()), labels, buf.get("ids")[: self.n].tolist() + ids

        def commit() -> None:
            self.encoder = encoder
            start = buf.n
            buf.append(new)
            for p, i in enumerate(ids):
                self.position[i] = start + p
            buf.get("member")[:] = after

        return Change(encoder, changed, rows, commit)

    def __deepcopy__(self, memo: dict) -> FrameEncoding:
        new = FrameEncoding.__new__(FrameEncoding)
        memo[id(self)] = new
        new.layout = self.layout
        new.encoder = copy.deepcopy(self.encoder, memo)
        new.buffer = RowBuffer(self.buffer.state())
        new.position = dict(self.position)
        new.key = self.key
        new.rule = self.rule
        new.lock = threading.RLock()
        return new

    def digest_into(self, h: Any) -> None:
        """The layout and the encoder's parameters and counts (a function of the rows)."""
        h.update(b"forgetting-frame-encoding/1")
        h.update(repr((self.layout.names, self.layout.kinds)).encode())
        h.update(repr((self.rule.rho, self.rule.min_rows)).encode())
        self.encoder.digest_into(h)


class _Current:
    """The preprocessing's view of the rows held after a change (``current(which)``, see
    :mod:`.base`): all of them with the D° mask, the D° rows, or those held before too."""

    def __init__(self, rows, members, staying=None, staying_members=None):
        self._rows = rows
        self._members = members
        self._staying = staying
        self._staying_members = staying_members
        self._table: Table | None = None

    def table(self) -> Table:
        if self._table is None:
            self._table = self._rows()
        return self._table

    def __call__(self, which: str) -> Rows:
        if which == "staying" and self._staying is not None:
            return Rows(self._staying, None, self._staying_members)
        if which == "schema":
            return Rows(take(self.table(), self._members), None, None)
        return Rows(self.table(), None, self._members)


def _check_categories(encoder: ColumnTransformer, layout: Layout, n: int) -> None:
    """Refuse a column past :data:`MAX_CATEGORIES` (before anything is encoded)."""
    for name, part, cols in encoder.transformers_:
        if name != "categories":
            continue
        for j, categories in zip(cols, part.categories_, strict=True):
            k = len(categories)
            if k > MAX_CATEGORIES:
                raise ValueError(
                    f"column {layout.names[j]!r:.60} has {k:,} categories, more than the "
                    f"{MAX_CATEGORIES:,} the built-in encoding takes (a dense 0/1 column each: "
                    f"{n:,} rows × {k:,} = {n * k * 8 / 2**30:.1f} GiB); group rare ones, "
                    "encode it yourself (an ordinal code, a hash), or use ExactForestClassifier "
                    "/ ExactForestRegressor with a pandas category dtype"
                )


def _parts(table: Table, y: np.ndarray, ids: list, key: bytes) -> dict[str, np.ndarray]:
    parts = {f"c{j}": c for j, c in enumerate(table.columns)}
    id_array = np.empty(len(ids), dtype=object)
    id_array[:] = ids
    row_draws = draws(key, [id_bytes(i) for i in ids], 0)[:, 0]
    parts.update(y=np.asarray(y), ids=id_array, draws=row_draws)
    return parts


def _encoded(encoder: ColumnTransformer, table: Table) -> np.ndarray:
    return np.ascontiguousarray(to_matrix(encoder.transform(table), "the table's encoding"))
