"""Pipelines that forget exactly: preprocessing steps and an estimator of any family (QSS, the
exact forest), forgotten as one.

``make_pipeline(StandardScaler(), OneHotEncoder(...), ExactForestClassifier())`` mirrors
scikit-learn's, and adds the contract of the estimators (SPEC §5 decisions 1 and 11):
``pipeline.fit(D).forget(R)`` equals ``pipeline.fit(D \\ R)`` bit for bit — predictions and
``state_digest()`` — through every step, once ``wait_for_rebuilds()`` returns.

How: every preprocessing step is an exact step (:mod:`forgetting.preprocessing`; scikit-learn's
own are translated, or refused by name), whose state a change of rows updates exactly. The
pipeline keeps each row's raw values, label and id (:class:`~.preprocessing.table.RowBuffer`),
and its own schema rows D°: a keyed draw per id, independent of the estimator's instances
(the key is derived from the estimator's, so it is as secret), below ``rho`` with at least
``min_schema_rows`` rows — the rows steps with ``rows="schema"`` are fitted on. A forget

1. updates the steps (subtracting the rows' terms, refitting a D°-fitted step if D° changed,
   recomputing categories if a category's last row left),
2. asks whether the estimator's input for any *remaining* row changed (bit for bit), and
3. if not, forgets the rows in the estimator (milliseconds, the estimator's own contract); if
   so, refits it on the remaining rows' new inputs (what a refit of the pipeline builds, by
   construction; its history, mode="dp"'s ledger, goes on). The receipt says which.

An insert goes the same way. docs/pipelines.md says which steps change how often, and why the
scalers fit on D° by default.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.utils import get_tags
from sklearn.utils.metaestimators import _BaseComposition

from .. import _clock as clock
from ..ids import listing, normalize_ids
from ..preprocessing import Chain, ExactStep, exact
from ..preprocessing.base import Rows
from ..preprocessing.table import (
    RowBuffer,
    canonical_order,
    n_rows,
    read_input,
    take,
    to_matrix,
)
from ..receipts import Receipt
from ..schema.membership import MembershipRule, derive_key, draws, id_bytes
from .rows import Current, buffer_rows, labels, object_array, rows_hash, x_parts

STATE_FORMAT = b"forgetting-pipeline-state/1"


@dataclass(frozen=True)
class PipelineReceipt(Receipt):
    """A :class:`~forgetting.receipts.Receipt` of a pipeline's forget or insert.

    ``state_digest`` is the pipeline's (every step and the estimator). ``refitted``: a step's
    output for the remaining rows changed, so the estimator was refitted on them (all its
    instances: ``instances_hit``); ``steps_changed`` names the steps whose parameters moved.
    ``schema_rho`` is the probability that forgetting one more random row hits the pipeline's
    D° (|D°| / rows).
    """

    refitted: bool = False
    steps_changed: tuple[str, ...] = ()
    schema_rho: float = 0.0


def _is_forgetting_estimator(est: Any) -> bool:
    return all(hasattr(est, m) for m in ("forget", "insert", "refit", "state_digest", "snapshot"))


class ForgettingPipeline(_BaseComposition):
    """Exact preprocessing steps and an estimator of any family that forget as one (see the
    module docstring).

    Parameters
    ----------
    steps : list of (name, step)
        Preprocessing steps — exact steps of :mod:`forgetting.preprocessing`, or scikit-learn
        steps that translate to one (:func:`forgetting.preprocessing.exact`; others are
        refused by name at fit) — and last a forgetting estimator (``ExactForestClassifier``,
        ``ExactForestRegressor``, or ``QSSClassifier``/``QSSRegressor`` with
        ``mode="exact"`` or ``"dp"``), fitted in place as scikit-learn's pipeline does.
    rho : float or "auto"
        Fraction of rows (by keyed hash of the id) in the pipeline's schema rows D°, the rows
        ``rows="schema"`` steps are fitted on; "auto": the estimator's ``rho``.
    min_schema_rows : int
        D° keeps at least this many rows (all rows on smaller data): enough for stable
        statistics; the price is a higher chance that a forget refits (``schema_rho_``).
    """

    def __init__(
        self, steps: list[tuple[str, Any]], *, rho: float | str = "auto", min_schema_rows: int = 200
    ):
        self.steps = steps
        self.rho = rho
        self.min_schema_rows = min_schema_rows

    @classmethod
    def from_sklearn(
        cls, pipeline: Any, *, rho: float | str = "auto", min_schema_rows: int = 200
    ) -> ForgettingPipeline:
        """The exact pipeline of a scikit-learn ``Pipeline`` whose last step is a forgetting
        estimator: the same step names, the preprocessing translated (or refused by name),
        the estimator cloned (unfitted: fit the result). The way out of the trap
        docs/pipelines.md describes: a scikit-learn pipeline forgets exactly in its
        estimator only."""
        named = list(pipeline.steps)
        steps = [(name, exact(step, name)) for name, step in named[:-1]]
        out = cls(
            [*steps, (named[-1][0], clone(named[-1][1]))], rho=rho, min_schema_rows=min_schema_rows
        )
        out._translated()
        return out

    # -- scikit-learn's composition surface --------------------------------------------------
    def get_params(self, deep: bool = True) -> dict:
        return self._get_params("steps", deep=deep)

    def set_params(self, **params: Any) -> ForgettingPipeline:
        self._set_params("steps", **params)
        return self

    @property
    def named_steps(self) -> dict[str, Any]:
        """The steps by name: the fitted exact steps once fitted, else those given."""
        if "chain_" in self.__dict__:
            out = dict(self.chain_.steps)
            out[self.steps[-1][0]] = self.steps[-1][1]
            return out
        return dict(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self.named_steps[key]
        name = self.steps[key][0]
        return self.named_steps[name]

    @property
    def _final_estimator(self) -> Any:
        return self.steps[-1][1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        try:
            last = get_tags(self._final_estimator)
        except (AttributeError, IndexError, TypeError, ValueError):
            return tags
        tags.estimator_type = last.estimator_type
        tags.classifier_tags = copy.deepcopy(last.classifier_tags)
        tags.regressor_tags = copy.deepcopy(last.regressor_tags)
        tags.target_tags = copy.deepcopy(last.target_tags)
        tags.input_tags.allow_nan = True
        tags.input_tags.string = True
        tags.non_deterministic = False
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return "chain_" in self.__dict__

    # -- validation --------------------------------------------------------------------------
    def _translated(self) -> Chain:
        """The preprocessing as a chain of exact steps (raises NotExactError by name)."""
        if not isinstance(self.steps, list | tuple) or not self.steps:
            raise ValueError("steps must be a non-empty list of (name, step)")
        names = [name for name, _ in self.steps]
        if len(set(names)) != len(names) or any("__" in n for n in names):
            raise ValueError(f"step names must be unique and free of '__': {names}")
        est = self._final_estimator
        if not _is_forgetting_estimator(est):
            raise ValueError(
                f"the last step ({names[-1]!r}, {type(est).__name__}) must be a forgetting "
                "estimator (ExactForestClassifier, ExactForestRegressor, QSSClassifier or "
                "QSSRegressor)"
            )
        if getattr(est, "mode", "exact") == "label":
            raise ValueError(
                "a pipeline forgets whole rows; mode='label' keeps a forgotten row's input "
                "in the codebook: use mode='exact' (or 'dp')"
            )
        return Chain([(name, exact(step, name)) for name, step in self.steps[:-1]])

    def _rule(self, est: Any) -> MembershipRule:
        rho = est.rho if self.rho == "auto" else self.rho
        if not isinstance(rho, float | int) or not 0.0 < float(rho) <= 1.0:
            raise ValueError(f"rho must be in (0, 1] or 'auto', got {self.rho!r}")
        if not isinstance(self.min_schema_rows, int) or self.min_schema_rows < 1:
            raise ValueError(
                f"min_schema_rows must be a positive int, got {self.min_schema_rows!r}"
            )
        return MembershipRule(float(rho), int(self.min_schema_rows))

    @staticmethod
    def _pipeline_key(est: Any) -> bytes:
        """The key of the pipeline's D° draw: derived from the estimator's membership key (so
        it is secret when that is) and separate from every instance's draw."""
        if est.random_state is None:
            raise ValueError(
                "a ForgettingPipeline keys its D° draw by its estimator's random_state: give "
                "the estimator an integer random_state (None draws a seed only for a bare "
                "estimator)"
            )
        key = derive_key(est.secret_key, int(est.random_state))
        return hashlib.blake2b(b"forgetting-pipeline-schema", key=key, digest_size=32).digest()

    # -- fit ---------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None = None) -> ForgettingPipeline:
        """Fit every step and the estimator on rows ``X`` (an array or a DataFrame with
        numeric, boolean, categorical or string columns), labels ``y`` and unique ``ids``
        (default ``range(n)``). On any error the pipeline stays as it was (the steps are
        fitted as copies, and installed once the estimator's fit succeeded)."""
        chain = copy.deepcopy(self._translated())
        est = self._final_estimator
        rule = self._rule(est)
        Xr, layout = read_input(X)
        n = n_rows(Xr)
        y_arr = labels(y, n)
        id_list = normalize_ids(ids, n)
        id_raw = [id_bytes(i) for i in id_list]
        key = self._pipeline_key(est)
        row_draws = draws(key, id_raw, 0)[:, 0]
        members = rule.members(row_draws, np.ones(n, dtype=bool))
        order = canonical_order(row_draws, id_raw)
        X_sorted = take(Xr, order)
        rows = Rows(X_sorted, y_arr[order], members[order])
        chain.fit_rows(rows)
        Xt = to_matrix(chain.transform(X_sorted), "the pipeline's steps")
        id_array = object_array(id_list)
        est.fit(Xt, y_arr[order], ids=id_array[order].tolist())
        self._warn_all_rows(chain)
        parts = x_parts(Xr)
        parts.update(y=y_arr, ids=id_array, id_raw=object_array(id_raw), draws=row_draws)
        parts["member"] = members
        self._install(chain)
        self.layout_ = layout
        self.n_features_in_ = len(layout.kinds)
        if layout.names is not None:
            self.feature_names_in_ = np.array(layout.names, dtype=object)
        elif "feature_names_in_" in self.__dict__:
            del self.feature_names_in_
        self._set_rows(RowBuffer(parts), key, rule, est)
        return self

    def _install(self, chain: Chain) -> None:
        """Serve ``chain``; exact steps given in ``steps`` are replaced by their live (fitted)
        versions there too, as scikit-learn's pipeline keeps its fitted steps in ``steps``."""
        self.chain_ = chain
        live = dict(chain.steps)
        self.steps = [
            (name, live[name] if isinstance(step, ExactStep) and name in live else step)
            for name, step in self.steps
        ]

    def _set_rows(self, buffer: RowBuffer, key: bytes, rule: MembershipRule, est: Any) -> None:
        self._rows = buffer
        self._key = key
        self._rule_ = rule
        self._position = {i: p for p, i in enumerate(buffer.get("ids").tolist())}
        self._recount_members()
        self._rows_hash = rows_hash(buffer, 0, buffer.n)
        self._engine = est.engine_
        self._lock = threading.RLock()

    @staticmethod
    def _warn_all_rows(chain: Chain) -> None:
        moving = [
            name
            for name, step in _leaves(chain)
            if getattr(step, "rows", None) == "all"
            and getattr(step, "strategy", "mean") != "constant"
        ]
        if moving:
            warnings.warn(
                f"step(s) {moving} fit their statistics on all rows (rows='all'): a forget or "
                "insert moves them, and then the estimator is refitted on every remaining row "
                "(seconds, not milliseconds); rows='schema' (the default) refits only when a "
                "forget hits the pipeline's D° (docs/pipelines.md)",
                UserWarning,
                stacklevel=3,
            )

    # -- the unlearning surface --------------------------------------------------------------
    def _check_fitted(self) -> None:
        if "chain_" not in self.__dict__:
            raise ValueError(
                "this ForgettingPipeline is not fitted yet; call fit with the rows first"
            )
        engine = getattr(self._final_estimator, "engine_", None)
        if engine is not self._engine or engine.n_rows != self._rows.n:
            raise ValueError(
                "the pipeline's estimator was changed outside the pipeline (fit, forget or "
                "insert called on the step itself); forget and insert through the pipeline, "
                "or refit it"
            )

    def _positions(self, id_list: list) -> np.ndarray:
        missing = [i for i in id_list if i not in self._position]
        if missing:
            raise KeyError(
                f"unknown ids (never inserted, or already forgotten): {listing(missing)}"
            )
        return np.array([self._position[i] for i in id_list], dtype=np.int64)

    def forget(self, ids: Sequence[Hashable]) -> PipelineReceipt:
        """Forget rows by id through every step; returns a :class:`PipelineReceipt`.

        Unknown ids raise KeyError, duplicates ValueError; on any error nothing changes.
        """
        with self._lock:
            self._check_fitted()
            started = clock.start()
            id_list = normalize_ids(ids)
            if not id_list:
                raise ValueError("no ids given")
            pos = self._positions(id_list)
            buf = self._rows
            keep = np.ones(buf.n, dtype=bool)
            keep[pos] = False
            kept = np.flatnonzero(keep)
            schema_changed = bool(self._members[pos].any())
            if schema_changed:
                after = self._rule_.members(buf.get("draws")[kept], np.ones(kept.size, bool))
            else:  # rows outside D° leave its threshold, so D°, as it was (MembershipRule)
                after = self._members[kept]
            current = Current(self._rows, self.layout_, kept, after, None)
            delta = Rows(buffer_rows(buf, self.layout_, pos), buf.get("y")[pos], None)
            return self._change(
                "forget",
                id_list,
                delta,
                -1,
                schema_changed,
                current,
                started,
                commit=lambda: self._remove(pos, schema_changed),
            )

    def insert(self, X: Any, y: Any, ids: Sequence[Hashable]) -> PipelineReceipt:
        """Add labeled rows through every step (same guarantee as a fit on all rows).

        Ids must be new; a classifier refuses labels it does not know (refit to add a class).
        """
        with self._lock:
            self._check_fitted()
            started = clock.start()
            if ids is None:
                raise ValueError("ids are required")
            Xr, _ = read_input(X, self.layout_)
            n = n_rows(Xr)
            y_arr = labels(y, n)
            id_list = normalize_ids(ids, n)
            known = [i for i in id_list if i in self._position]
            if known:
                raise ValueError(f"ids already present: {listing(known)}; forget them first")
            classes = getattr(self._final_estimator, "classes_", None)
            if classes is not None:
                unseen = ~np.isin(y_arr, classes)
                if unseen.any():
                    raise ValueError(
                        f"unseen labels {np.unique(y_arr[unseen])[:5].tolist()}; known classes "
                        f"are {classes.tolist()} — refit to add a class"
                    )
            id_raw = [id_bytes(i) for i in id_list]
            new_draws = draws(self._key, id_raw, 0)[:, 0]
            buf = self._rows
            all_draws = np.concatenate([buf.get("draws"), new_draws])
            after = self._rule_.members(all_draws, np.ones(all_draws.size, dtype=bool))
            schema_changed = bool(after[buf.n :].any()) or not np.array_equal(
                self._members, after[: buf.n]
            )
            new = {
                "X": Xr,
                "y": y_arr,
                "ids": object_array(id_list),
                "id_raw": object_array(id_raw),
                "draws": new_draws,
            }
            current = Current(buf, self.layout_, np.arange(buf.n), after, new)
            delta = Rows(Xr, y_arr, None)
            return self._change(
                "insert",
                id_list,
                delta,
                +1,
                schema_changed,
                current,
                started,
                commit=lambda: self._append(new, after),
            )

    def _change(
        self,
        operation: str,
        id_list: list,
        delta: Rows,
        sign: int,
        schema_changed: bool,
        current: Current,
        started: float,
        commit,
    ) -> PipelineReceipt:
        """Update a copy of the steps, then the estimator, then commit: all or nothing."""
        est = self._final_estimator
        chain = copy.deepcopy(self.chain_)
        changed = chain.update_rows(self.chain_, delta, sign, schema_changed, current)
        id_raw = [id_bytes(i) for i in id_list]
        if changed:
            rows = current("all")
            Xt = to_matrix(chain.transform(rows.X), "the pipeline's steps")
            change = {"forgotten" if sign < 0 else "inserted": id_list}  # its history goes on
            est.refit(Xt, rows.y, current.ids().tolist(), **change)
            every = list(range(est.engine_.n_instances))
            receipt = est.engine_.receipt(operation, "instance", id_raw, every, started, False)
        elif sign < 0:
            receipt = est.forget(id_list)
        else:
            Xt = to_matrix(chain.transform(delta.X), "the pipeline's steps")
            receipt = est.insert(Xt, delta.y, id_list)
        moved = [
            name
            for (name, a), (_, b) in zip(self.chain_.steps, chain.steps, strict=True)
            if a.fingerprint() != b.fingerprint()
        ]
        self._install(chain)
        commit()
        self._engine = est.engine_
        values = {f.name: getattr(receipt, f.name) for f in fields(Receipt)}
        values.update(
            operation=operation,
            state_digest=self._digest(receipt.state_digest),
            seconds=clock.elapsed(started),
        )
        return PipelineReceipt(
            **values, refitted=changed, steps_changed=tuple(moved), schema_rho=self.schema_rho_
        )

    @property
    def _members(self) -> np.ndarray:
        """Mask of the rows held (buffer order) in the pipeline's D°."""
        return self._rows.get("member")

    def _recount_members(self) -> None:
        buf = self._rows
        buf.get("member")[:] = self._rule_.members(buf.get("draws"), np.ones(buf.n, dtype=bool))

    def _remove(self, pos: np.ndarray, schema_changed: bool) -> None:
        buf = self._rows
        gone = buf.get("ids")[pos].tolist()
        self._rows_hash = (self._rows_hash - rows_hash(buf, pos)) % (1 << 256)
        movers, holes = buf.remove(pos)
        for i in gone:
            del self._position[i]
        ids = buf.get("ids")
        for p in holes.tolist():
            self._position[ids[p]] = p
        if schema_changed:
            self._recount_members()

    def _append(self, new: dict[str, Any], members: np.ndarray) -> None:
        parts = x_parts(new["X"])
        parts.update({k: v for k, v in new.items() if k != "X"})
        parts["member"] = members[self._rows.n :]
        buf = self._rows
        start = buf.n
        buf.append(parts)
        for p, i in enumerate(new["ids"].tolist()):
            self._position[i] = start + p
        self._rows_hash = (self._rows_hash + rows_hash(buf, np.arange(start, buf.n))) % (1 << 256)
        buf.get("member")[:] = members

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Block until the estimator's background rebuilds have landed."""
        self._final_estimator.wait_for_rebuilds(timeout)

    # -- predictions -------------------------------------------------------------------------
    def preprocess(self, X: Any) -> np.ndarray:
        """The estimator's input for rows ``X``: every preprocessing step applied."""
        if "chain_" not in self.__dict__:
            self._check_fitted()
        Xr, _ = read_input(X, self.layout_)
        return to_matrix(self.chain_.transform(Xr), "the pipeline's steps")

    def predict(self, X: Any) -> np.ndarray:
        with self._locked():
            return self._final_estimator.predict(self.preprocess(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        with self._locked():
            return self._final_estimator.predict_proba(self.preprocess(X))

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        with self._locked():
            return self._final_estimator.score(self.preprocess(X), y, sample_weight=sample_weight)

    def _locked(self):
        if "chain_" not in self.__dict__:
            self._check_fitted()
        return self._lock

    @property
    def classes_(self) -> np.ndarray:
        return self._final_estimator.classes_

    @property
    def n_rows_(self) -> int:
        """Rows currently held."""
        self._check_fitted()
        return self._rows.n

    @property
    def ids_(self) -> list:
        """Ids of the rows currently held."""
        self._check_fitted()
        return self._rows.get("ids").tolist()

    @property
    def schema_rho_(self) -> float:
        """|D°| / rows: the probability that forgetting a random row changes the pipeline's
        schema rows (and so refits the estimator when a step is fitted on them)."""
        return float(self._members.mean()) if self._rows.n else 0.0

    # -- digest ------------------------------------------------------------------------------
    def state_digest(self) -> str:
        """SHA-256 over the configuration, every step's parameters and fitted state, the
        multiset of raw rows held, and the estimator's digest."""
        self._check_fitted()
        return self._digest(self._final_estimator.state_digest())

    def _digest(self, estimator_digest: str) -> str:
        with self._lock:
            h = hashlib.sha256(STATE_FORMAT)
            h.update(repr((self._rule_.rho, self._rule_.min_rows)).encode())
            h.update(repr((self.layout_.names, self.layout_.kinds, self.layout_.matrix)).encode())
            h.update(self._rows.n.to_bytes(8, "little"))
            h.update(self._rows_hash.to_bytes(32, "little"))
            for name, step in self.chain_.steps:
                h.update(name.encode())
                step.digest_into(h)
            h.update(self.steps[-1][0].encode())
            h.update(estimator_digest.encode())
            return h.hexdigest()

    # -- pickling: the lock is rebuilt ------------------------------------------------------
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        state.pop("_engine", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "chain_" in state:
            self._lock = threading.RLock()
            self._engine = self._final_estimator.engine_

    # -- files -------------------------------------------------------------------------------
    def save(self, path: Any, *, store_key: bool = False) -> None:
        """Write the pipeline atomically to ``path``: a model file (no pickles) whose payload
        holds every step's state, the raw rows and the estimator's snapshot. The secret key
        is written only with ``store_key=True``."""
        from .files import save_pipeline

        save_pipeline(self, path, store_key=store_key)

    @classmethod
    def load(
        cls,
        path: Any,
        *,
        allow_version_mismatch: bool = False,
        secret_key: bytes | str | None = None,
    ) -> ForgettingPipeline:
        """Read a pipeline written by :meth:`save`; a damaged, foreign or inconsistent file
        raises :class:`~forgetting.io.model_format.ModelFileError`."""
        from .files import load_pipeline

        return load_pipeline(cls, path, allow_version_mismatch, secret_key=secret_key)


# -- helpers ----------------------------------------------------------------------------------
def _leaves(step: Any) -> list[tuple[str, Any]]:
    out = []
    for name, sub in getattr(step, "steps", []) or []:
        out += _leaves(sub) or [(name, sub)]
    for name, sub, _ in getattr(step, "transformers_", []) or []:
        if not isinstance(sub, str):
            out += _leaves(sub) or [(name, sub)]
    return out
