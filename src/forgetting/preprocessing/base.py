"""The protocol of exact steps, and the steps that hold others: Chain, Passthrough, Frozen.

An exact step's fitted state is a pure function of (the multiset of its input rows, which of
them are the pipeline's schema rows D°), by one of three rules (SPEC §5 decision 11), which its
``_uses`` names:

* ``"all"`` — integer sums or counts over every row (``Moments``, ``ValueCounts``): a change
  adds or subtracts the changed rows' terms;
* ``"schema"`` — fitted on the D° rows only: it changes only when D° changes, and is then
  refitted from the D° rows;
* ``"none"`` — no state that depends on rows (a constant fill, given categories, passthrough).

The pipeline drives a change through :meth:`ExactStep.update_rows` with the changed rows
(``delta``), the step as it was before (``old``), whether D° changed, and ``current``: a
function giving the step's input for every row held after the change (or only the D° rows),
computed only when asked. Each step answers whether its output *for the rows that stay*
changed — compared bit for bit when its transform's parameters (``fingerprint``) moved — so a
pipeline refits its estimator only when the estimator's input for some remaining row really
changed, and otherwise forgets in the estimator.

Rows handed to a step's fit come in one canonical order (the pipeline sorts them by keyed
draw), so a step whose fit depends on row order (``OnSchemaRows`` around a scikit-learn
transformer) still gets the same bits from the same set of rows.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, clone

from .._rowwise import one_blas_thread, rowwise
from .statistics import digest_values, new_hash
from .table import Table, columns_of, n_columns, read_input, take, to_matrix

ROWS = ("schema", "all")
BLOCK_ROWS = 64
"""Rows per call of a wrapped transformer's ``transform`` (:func:`forgetting._rowwise.rowwise`):
every row is computed in a block of this height, whatever the batch, so its bits are the same
in a fit, an insert and a one-row prediction."""


@dataclass(frozen=True)
class Rows:
    """Input rows of a step: ``X`` (matrix or Table), labels ``y`` (or None) and the mask of
    the pipeline's schema rows D° (None: every row is a schema row, as in a standalone fit)."""

    X: Any
    y: np.ndarray | None = None
    schema: np.ndarray | None = None

    def schema_rows(self) -> Rows:
        if self.schema is None:
            return self
        y = None if self.y is None else self.y[self.schema]
        return Rows(take(self.X, self.schema), y, None)


Current = Callable[[str], Rows]
"""``current(which)``: the step's input for the rows held after the change — ``"all"`` of
them (with the D° mask), only the D° rows (``"schema"``), or only the rows held both before
and after (``"staying"``: what the estimator already holds, whose input must not change)."""


def as_input(X: Any) -> Any:
    """A matrix or Table as is; anything else read at the edge (DataFrame, list, int array)."""
    if isinstance(X, Table) or (
        isinstance(X, np.ndarray) and X.ndim == 2 and X.dtype == np.float64
    ):
        return X
    return read_input(X)[0]


def same_output(a: Any, b: Any) -> bool:
    """Bitwise equality of two step outputs (matrices or tables), NaN equal to NaN."""
    if isinstance(a, np.ndarray) != isinstance(b, np.ndarray) or n_columns(a) != n_columns(b):
        return False
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and _bits_equal(a, b)
    for ca, cb in zip(columns_of(a), columns_of(b), strict=True):
        if ca.dtype != cb.dtype:
            return False
        if ca.dtype == object:
            if ca.tolist() != cb.tolist():
                return False
        elif not _bits_equal(ca, cb):
            return False
    return True


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype:
        return False
    if a.dtype == np.float64:
        return np.array_equal(a.view(np.uint64), b.view(np.uint64))
    return np.array_equal(a, b)


class ExactStep(TransformerMixin, BaseEstimator):
    """Base of the exact steps (see the module docstring for the protocol).

    Standalone, ``fit(X, y)`` fits on every row given (each one a schema row), like the
    scikit-learn transformer it mirrors; in a pipeline the pipeline calls the protocol.
    """

    _uses: str = "none"
    _cached_fingerprint: bool = True
    """Leaves keep their fingerprint until their state changes (:meth:`_changed`); a step
    holding others computes it from theirs each time."""

    # -- scikit-learn surface ----------------------------------------------------------------
    def fit(self, X: Any, y: Any = None) -> ExactStep:
        X = as_input(X)
        self.fit_rows(Rows(X, None if y is None else np.asarray(y)))
        return self

    def transform(self, X: Any) -> Any:
        raise NotImplementedError

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.string = True
        return tags

    # -- the protocol ------------------------------------------------------------------------
    @property
    def uses(self) -> str:
        """Which rows the fitted state depends on: "all", "schema" or "none"."""
        return self._uses

    def fit_rows(self, rows: Rows) -> None:
        """Fit from ``rows`` (the rows :attr:`uses` names: all of them, or the D° ones)."""
        self._changed()
        self.__dict__.pop("_params_cache", None)
        self.n_features_in_ = n_columns(rows.X)

    def _changed(self) -> None:
        """Forget the cached fingerprint: the state is about to change."""
        self.__dict__.pop("_fingerprint_cache", None)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_fingerprint_cache", None)
        state.pop("_params_cache", None)
        return state

    def __deepcopy__(self, memo: dict) -> ExactStep:
        """A copy that shares nothing mutable: arrays are copied (element references of
        text arrays are shared: strings do not change), other attributes deep-copied."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if isinstance(value, np.ndarray):
                new.__dict__[key] = value.copy()
            elif isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value):
                new.__dict__[key] = [v.copy() for v in value]
            else:
                new.__dict__[key] = copy.deepcopy(value, memo)
        return new

    def _add_rows(self, delta: Rows, sign: int) -> bool:
        """Add (+1) or subtract (-1) ``delta``'s terms; False: recompute from the rows. Where
        the parameters change, the step calls :meth:`_changed` (its ``_derive`` does)."""
        return False

    def _check_rows(self, delta: Rows) -> None:
        """Refuse rows a fit could not take (e.g. a category outside given categories)."""

    def update_rows(
        self, old: ExactStep, delta: Rows, sign: int, schema_changed: bool, current: Current
    ) -> bool:
        """Follow a change of the rows; returns whether the output for the rows held after
        the change differs from what ``old`` gives them."""
        if sign > 0:
            self._check_rows(delta)
        if self.uses == "none":
            return False
        if self.uses == "schema":
            if not schema_changed:
                return False
            self.fit_rows(current("schema"))
        elif not self._add_rows(delta, sign):
            self.fit_rows(current("all"))
        return self._output_changed(old, current)

    def _output_changed(self, old: ExactStep, current: Current) -> bool:
        if old.fingerprint() == self.fingerprint():
            return False
        X = current("staying").X
        return not same_output(old.transform(X), self.transform(X))

    def _transform_params(self) -> Any:
        """What ``transform`` computes from (compared by :meth:`fingerprint`)."""
        return None

    def fingerprint(self) -> bytes:
        """SHA-256 of :meth:`_transform_params`: equal fingerprints, equal transforms."""
        cached = self.__dict__.get("_fingerprint_cache")
        if cached is not None:
            return cached
        h = new_hash()
        digest_values(h, self._transform_params())
        fingerprint = h.digest()
        if self._cached_fingerprint:
            self._fingerprint_cache = fingerprint
        return fingerprint

    def _stats_into(self, h: Any) -> None:
        """Feed the integer statistics behind the parameters to ``h`` (default: none)."""

    def digest_into(self, h: Any) -> None:
        """Feed this step's class, parameters and fitted state to the hash ``h``."""
        h.update(self._params_digest())
        h.update(self.fingerprint())
        self._stats_into(h)

    def _params_digest(self) -> bytes:
        """The class and parameters (steps held are hashed by their own digest), computed
        once per fit: reading them (``get_params``) is slow next to a one-row forget."""
        cached = self.__dict__.get("_params_cache")
        if cached is not None:
            return cached
        h = new_hash()
        h.update(type(self).__qualname__.encode())
        for name, value in sorted(self.get_params(deep=False).items()):
            h.update(name.encode())
            if isinstance(value, BaseEstimator):
                h.update(type(value).__qualname__.encode())
            elif not isinstance(value, list | tuple) or not any(
                isinstance(v, tuple) for v in value
            ):
                digest_values(h, value)
        self._params_cache = h.digest()
        return self._params_cache

    def _check_width(self, X: Any) -> None:
        width = getattr(self, "n_features_in_", None)
        if width is None:
            raise ValueError(f"{type(self).__name__} is not fitted; call fit first")
        if n_columns(X) != width:
            raise ValueError(
                f"{type(self).__name__}: X has {n_columns(X)} columns, fitted on {width}"
            )


def combined_uses(steps: list[Any]) -> str:
    uses = {s.uses for s in steps}
    if "all" in uses:
        return "all"
    return "schema" if "schema" in uses else "none"


class Passthrough(ExactStep):
    """The identity (scikit-learn's ``"passthrough"``): no state."""

    def transform(self, X: Any) -> Any:
        return as_input(X)


class Chain(ExactStep):
    """Steps applied one after another (a scikit-learn ``Pipeline`` inside a column
    transformer, or a pipeline's preprocessing). ``steps``: list of (name, exact step)."""

    _cached_fingerprint = False

    def __init__(self, steps: list[tuple[str, Any]]):
        self.steps = steps

    @property
    def uses(self) -> str:
        return combined_uses([s for _, s in self.steps])

    def get_params(self, deep: bool = True) -> dict:
        out = {"steps": self.steps}
        if deep:
            for name, step in self.steps:
                out[name] = step
                for key, value in step.get_params(deep=True).items():
                    out[f"{name}__{key}"] = value
        return out

    def fit_rows(self, rows: Rows) -> None:
        super().fit_rows(rows)
        X = rows.X
        for _, step in self.steps:
            step.fit_rows(Rows(X, rows.y, rows.schema))
            X = step.transform(X)

    def transform(self, X: Any) -> Any:
        X = as_input(X)
        for _, step in self.steps:
            X = step.transform(X)
        return X

    def _check_rows(self, delta: Rows) -> None:
        if self.steps:
            self.steps[0][1]._check_rows(delta)

    def update_rows(
        self, old: ExactStep, delta: Rows, sign: int, schema_changed: bool, current: Current
    ) -> bool:
        inputs: list[Current] = [current]
        cache: dict[tuple[int, str], Rows] = {}

        def after(i: int) -> Current:
            def rows(which: str) -> Rows:
                key = (i, which)
                if key not in cache:
                    r = inputs[i](which)
                    cache[key] = Rows(self.steps[i][1].transform(r.X), r.y, r.schema)
                return cache[key]

            return rows

        x = delta.X
        changed = False
        for i, ((_, step), (_, before)) in enumerate(zip(self.steps, old.steps, strict=True)):
            if changed:
                step.fit_rows(inputs[i]("all" if step.uses == "all" else "schema"))
            else:
                changed = step.update_rows(
                    before, Rows(x, delta.y, delta.schema), sign, schema_changed, inputs[i]
                )
            x = (before if sign < 0 else step).transform(x)
            inputs.append(after(i))
        return changed

    def _transform_params(self) -> Any:
        return [step.fingerprint() for _, step in self.steps]

    def digest_into(self, h: Any) -> None:
        h.update(b"Chain")
        for name, step in self.steps:
            h.update(name.encode())
            step.digest_into(h)


class OnSchemaRows(ExactStep):
    """Any transformer, fitted on the pipeline's schema rows D° only (and refitted, from the
    D° rows in canonical order, whenever D° changes: a forget that hits D°).

    For steps that cannot be made exact from sums — PCA, a learned encoder, a supervised
    feature selection (it gets the D° rows' labels) — exactly as the estimator's own schema
    is trained on D° (SPEC §5 decision 4). The transformer must be deterministic given its
    rows and parameters (set its ``random_state``); it is fitted with BLAS on one thread and
    applied in fixed blocks of rows, so its output for a row has the same bits in a fit, an
    insert and a prediction. Numeric input only. To save a pipeline holding it, register the
    transformer's class (``forgetting.io.model_format.register_object``), as for a custom
    ``base_model``.
    """

    _uses = "schema"

    def __init__(self, transformer: Any):
        self.transformer = transformer

    def fit_rows(self, rows: Rows) -> None:
        super().fit_rows(rows)
        rows = rows.schema_rows()
        X = to_matrix(rows.X, f"OnSchemaRows({type(self.transformer).__name__})")
        est = clone(self.transformer)
        with one_blas_thread():
            est.fit(X, rows.y) if rows.y is not None else est.fit(X)
        self.transformer_ = est

    def transform(self, X: Any) -> np.ndarray:
        X = as_input(X)
        self._check_width(X)
        M = to_matrix(X, f"OnSchemaRows({type(self.transformer).__name__})")
        est = self.transformer_

        def block(b: np.ndarray) -> np.ndarray:
            return np.asarray(est.transform(b), dtype=np.float64)

        return np.ascontiguousarray(rowwise(block, M, BLOCK_ROWS))

    def _transform_params(self) -> Any:
        return pickle.dumps(self.transformer_, protocol=5)


class Frozen(ExactStep):
    """A transformer that is never fitted on the rows (a pretrained encoder, a fixed
    function): exact because nothing in it depends on them. The pipeline never calls its
    ``fit``; it must be usable as given. Applied in fixed blocks of rows (see OnSchemaRows)."""

    def __init__(self, transformer: Any):
        self.transformer = transformer

    def transform(self, X: Any) -> np.ndarray:
        X = as_input(X)
        self._check_width(X)
        M = to_matrix(X, f"Frozen({type(self.transformer).__name__})")
        t = self.transformer

        def block(b: np.ndarray) -> np.ndarray:
            return np.asarray(t.transform(b), dtype=np.float64)

        return np.ascontiguousarray(rowwise(block, M, BLOCK_ROWS))

    def _transform_params(self) -> Any:
        return pickle.dumps(self.transformer, protocol=5)
