"""The estimators' raw-table path: a model fitted on a pandas DataFrame with categories or
missing values (forgetting.preprocessing.frames encodes it exactly).

A mixin of :class:`~forgetting.estimators._QSSBase`: the estimator keeps the table encoding
(``table_``, with the raw rows), sends forgets and inserts through it, and refits the engine on
every row held when a change moves the encoding (a D° hit of the table, a category's last row,
a column's last missing value); otherwise the engine's own fast path runs. The digest of a
table model covers the encoding's state and the engine's.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np

from .. import _clock as clock
from ..ids import listing, normalize_ids
from ..preprocessing.frames import FrameEncoding
from ..receipts import Receipt
from ..rows.hashing import canonical_floats
from ..schema.membership import derive_key
from ..snapshots import SnapshotError


class RawTables:
    """Fit, forget, insert and restore for a model fitted on a raw DataFrame (``table_``)."""

    def _fit_frame(self, X: Any, y: Any, ids: Any, after: tuple | None = None) -> Any:
        """Fit on a raw DataFrame: encode it exactly, fit the engine on the encoding, keep
        the raw rows (a forget that changes the encoding refits from them). ``after``: a
        refit's change (``_fit_engine``)."""
        if self.mode == "label":
            raise ValueError(
                "a raw DataFrame (categories or missing values) needs mode='exact' or 'dp': "
                "label mode keeps a forgotten row's input; encode the table first"
            )
        table, layout = FrameEncoding.read_new(X)
        targets, n_outputs = self._fit_targets(y, table.n_rows)
        id_list = normalize_ids(ids, table.n_rows)
        key = derive_key(self.secret_key, self._seed())
        frame, encoded = FrameEncoding.fit(
            table, layout, self._row_labels(y), id_list, key, float(self.rho)
        )
        self._fit_engine(id_list, _float32(encoded), targets, n_outputs, after)
        self.table_ = frame
        self.n_features_in_ = len(frame.layout.names)
        self.feature_names_in_ = np.array(frame.layout.names, dtype=object)
        return self

    def _refit_rows(self, X, y, ids, operation: str, id_raw, started: float) -> Receipt:
        """Refit the engine on every row held after a change that re-encoded some of them
        (what a fit on those rows builds, the model's history continued: ``_fit_engine``);
        nothing changes if it fails."""
        after = (id_raw, []) if operation == "forget" else ([], id_raw)

        def run():
            targets, n_outputs = self._fit_targets(y, len(ids))
            return self._fit_engine(ids, _float32(X), targets, n_outputs, after)

        self._fit_atomically(run)
        hit = list(range(self.n_instances))
        return self.engine_.receipt(operation, "instance", id_raw, hit, started)

    def _forget_frame(self, id_list: list, id_raw: list) -> Receipt:
        started = clock.start()
        try:
            change = self.table_.plan_forget(id_list)
        except KeyError as err:
            raise KeyError(
                f"unknown ids (never inserted, or already forgotten): {listing(err.args[0])}"
            ) from None
        if change.changed:
            X, y, ids = change.rows()
            receipt = self._refit_rows(X, y, ids, "forget", id_raw, started)
        else:
            receipt = self._forget_checked(id_list, id_raw, False)
        change.commit()
        return self._frame_receipt(receipt)

    def _insert_frame(self, X: Any, y: Any, ids: Any) -> Receipt:
        started = clock.start()
        self._check_fitted()
        table = self.table_.read(X)
        targets = self._encode_targets(y, table.n_rows)
        id_list, id_raw = self._check_ids(ids, table.n_rows)
        known = [i for i in id_list if i in self.table_.position]
        if known:
            raise ValueError(f"ids already present: {listing(known)}; forget them first")
        change = self.table_.plan_insert(table, self._row_labels(y), id_list)
        if change.changed:
            X_all, y_all, ids_all = change.rows()
            receipt = self._refit_rows(X_all, y_all, ids_all, "insert", id_raw, started)
        else:
            X_new = _float32(change.encode(table))
            receipt = self.engine_.insert(id_list, id_raw, X_new, targets)
        change.commit()
        return self._frame_receipt(receipt)

    def _frame_receipt(self, receipt: Receipt) -> Receipt:
        return dataclasses.replace(receipt, state_digest=self._frame_digest(receipt.state_digest))

    def _frame_digest(self, engine_digest: str) -> str:
        """A table model's digest: the table encoding's state and the engine's."""
        h = hashlib.sha256(b"forgetting-frame-model/1")
        self.table_.digest_into(h)
        h.update(engine_digest.encode())
        return h.hexdigest()

    def _restored_table(self, stored: Any, rows: Any, key: bytes) -> tuple[FrameEncoding, Any]:
        """A table model's encoding, refitted from the raw rows a snapshot holds, and the
        encoded rows (float32). Where the snapshot holds encoded rows too (a model file) they
        must be that encoding, bit for bit; a store keeps the raw rows only (``rows.X`` None)."""
        if not isinstance(stored, dict) or set(stored) != {"names", "kinds", "columns"}:
            raise SnapshotError("fitted: table_ is not a stored table")
        targets = rows.targets
        if hasattr(self, "classes_"):
            if not (targets.dtype.kind == "i" and targets.size and targets.min() >= 0):
                raise SnapshotError("fitted: a table model's rows are all labeled")
            y = self.classes_[targets]
        else:
            y = targets
        try:
            frame, encoded = FrameEncoding.restore(stored, y, list(rows.ids), key, float(self.rho))
        except ValueError as err:
            raise SnapshotError(f"fitted: {err}") from None
        if list(self.feature_names_in_) != list(frame.layout.names):
            raise SnapshotError("fitted: feature_names_in_ is not the table's columns")
        X = _float32(encoded)
        if rows.X is not None and (X.shape != rows.X.shape or not np.array_equal(X, rows.X)):
            raise SnapshotError("fitted: the rows held are not the encoding of the stored table")
        return frame, X


def _float32(X: np.ndarray) -> np.ndarray:
    """An encoded table as the engine stores rows: float32, finite, every zero +0.0."""
    X32 = canonical_floats(np.asarray(X, dtype=np.float32))
    if not np.all(np.isfinite(X32)):
        raise ValueError("X has values beyond float32 range")
    return X32
