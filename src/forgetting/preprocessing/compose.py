"""ColumnTransformer made exact: exact steps on chosen columns, side by side.

Each part follows a change of the rows on its own columns (:meth:`ExactStep.update_rows`); the
output for the remaining rows changed if any part's did. Columns are chosen by name (needs a
DataFrame), position, slice or boolean mask, once at fit; a callable selector (scikit-learn's
``make_column_selector``) is refused — name the columns instead.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

import numpy as np
from sklearn.base import clone

from .base import Current, ExactStep, Passthrough, Rows, as_input, combined_uses
from .table import hstack, n_columns, n_rows, names_of, select


def _resolve(spec: Any, X: Any, where: str) -> list[int]:
    """Column positions that ``spec`` names in ``X``."""
    d = n_columns(X)
    names = names_of(X)
    if callable(spec):
        raise ValueError(
            f"{where}: a callable column selector chooses columns from the data; give the "
            "column names or positions"
        )
    if isinstance(spec, str):
        spec = [spec]
    elif isinstance(spec, Integral):
        spec = [int(spec)]
    elif isinstance(spec, slice):
        if not all(isinstance(v, Integral | None) for v in (spec.start, spec.stop, spec.step)):
            raise ValueError(f"{where}: slice columns by position (or list the names)")
        return list(range(d))[spec]
    values = list(spec)
    if values and all(isinstance(v, bool | np.bool_) for v in values):
        if len(values) != d:
            raise ValueError(f"{where}: a boolean mask of {len(values)} for {d} columns")
        return [j for j, v in enumerate(values) if v]
    out = []
    for v in values:
        if isinstance(v, str):
            if names is None:
                raise ValueError(
                    f"{where}: column {v!r} chosen by name, but X has no column names; pass a "
                    "DataFrame or choose columns by position"
                )
            if v not in names:
                raise ValueError(f"{where}: column {v!r} is not in X (columns: {list(names)[:20]})")
            out.append(names.index(v))
        elif isinstance(v, Integral) and not isinstance(v, bool | np.bool_):
            j = int(v)
            if not -d <= j < d:
                raise ValueError(f"{where}: column {j} is out of range for {d} columns")
            out.append(j % d)
        else:
            raise ValueError(f"{where}: columns are names, positions, a slice or a mask; got {v!r}")
    return out


def _part(transformer: Any, where: str) -> Any:
    if isinstance(transformer, str):
        if transformer == "passthrough":
            return Passthrough()
        if transformer == "drop":
            return "drop"
        raise ValueError(f"{where}: transformer must be a step, 'passthrough' or 'drop'")
    if not isinstance(transformer, ExactStep):
        raise ValueError(
            f"{where}: {type(transformer).__name__} is not an exact step; build the pipeline "
            "with forgetting.pipeline.make_pipeline, which translates scikit-learn's steps "
            "(or refuses them by name)"
        )
    return clone(transformer)


class ColumnTransformer(ExactStep):
    """``transformers``: list of (name, exact step | "passthrough" | "drop", columns);
    ``remainder``: "drop" (default), "passthrough" or an exact step for the columns no
    transformer names. Output: the parts' columns side by side, then the remainder's
    (dense; text columns stay text until encoded)."""

    _cached_fingerprint = False

    def __init__(self, transformers: list[tuple[str, Any, Any]], *, remainder: Any = "drop"):
        self.transformers = transformers
        self.remainder = remainder

    def get_params(self, deep: bool = True) -> dict:
        out = {"transformers": self.transformers, "remainder": self.remainder}
        if deep:
            for name, step, _ in self.transformers:
                out[name] = step
                if hasattr(step, "get_params"):
                    for key, value in step.get_params(deep=True).items():
                        out[f"{name}__{key}"] = value
        return out

    @property
    def uses(self) -> str:
        parts = [p for _, p, _ in getattr(self, "transformers_", []) if p != "drop"]
        if not parts:
            parts = [p for _, p, _ in self.transformers if isinstance(p, ExactStep)] + (
                [self.remainder] if isinstance(self.remainder, ExactStep) else []
            )
        return combined_uses(parts)

    def fit_rows(self, rows: Rows) -> None:
        super().fit_rows(rows)
        X = rows.X
        used: set[int] = set()
        parts = []
        seen = set()
        for name, transformer, spec in self.transformers:
            where = f"ColumnTransformer part {name!r}"
            if name in seen:
                raise ValueError(f"{where}: names must be unique")
            seen.add(name)
            cols = _resolve(spec, X, where)
            used.update(cols)
            parts.append((name, _part(transformer, where), cols))
        rest = [j for j in range(n_columns(X)) if j not in used]
        remainder = _part(self.remainder, "ColumnTransformer remainder")
        if rest:
            parts.append(("remainder", remainder, rest))
        for _, part, cols in parts:
            if part != "drop":
                part.fit_rows(Rows(select(X, cols), rows.y, rows.schema))
        self.transformers_ = parts

    def transform(self, X: Any) -> Any:
        X = as_input(X)
        self._check_width(X)
        outputs = [
            part.transform(select(X, cols))
            for _, part, cols in self.transformers_
            if part != "drop"
        ]
        return hstack(outputs, n_rows(X))

    def _check_rows(self, delta: Rows) -> None:
        for _, part, cols in self.transformers_:
            if part != "drop":
                part._check_rows(Rows(select(delta.X, cols), delta.y, delta.schema))

    def update_rows(
        self, old: ExactStep, delta: Rows, sign: int, schema_changed: bool, current: Current
    ) -> bool:
        changed = False
        for (_, part, cols), (_, before, _) in zip(
            self.transformers_, old.transformers_, strict=True
        ):
            if part == "drop":
                continue

            def part_rows(which: str, cols: list[int] = cols) -> Rows:
                r = current(which)
                return Rows(select(r.X, cols), r.y, r.schema)

            part_delta = Rows(select(delta.X, cols), delta.y, delta.schema)
            changed |= part.update_rows(before, part_delta, sign, schema_changed, part_rows)
        return changed

    def _transform_params(self) -> Any:
        return [
            (name, cols, part if part == "drop" else part.fingerprint())
            for name, part, cols in self.transformers_
        ]

    def digest_into(self, h: Any) -> None:
        h.update(b"ColumnTransformer")
        for name, part, cols in self.transformers_:
            h.update(name.encode() + repr(cols).encode())
            if part == "drop":
                h.update(b"drop")
            else:
                part.digest_into(h)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        out: list[str] = []
        for name, part, cols in self.transformers_:
            if part == "drop":
                continue
            names = getattr(part, "get_feature_names_out", None)
            if names is not None and not isinstance(part, Passthrough):
                out += [f"{name}__{n}" for n in names()]
            else:
                out += [f"{name}__x{j}" for j in cols]
        return np.array(out, dtype=object)
