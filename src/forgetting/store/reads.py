"""What both durable models answer alike: the estimator's task, width and classes, and the
reads of the receipt log.

:class:`~.durable.DurableModel` (QSS) and :class:`~.forest.DurableForest` differ in what
they store and how a change reaches the store, not in these. A class using this mixin
provides ``estimator`` (the live estimator), ``_store`` (its :class:`~.sql.SQLStore`) and
``_lock`` (held for every use of the store's connection).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..receipts import Receipt
from .errors import ReceiptCorrupt
from .receipt_log import ReceiptFilter
from .receipt_log import every as every_receipt
from .receipt_log import page as receipt_page


class StoreReads:
    """The estimator's facts and the receipt log's reads, shared by the durable models."""

    @property
    def task(self) -> str:
        return "classification" if hasattr(self.estimator, "classes_") else "regression"

    @property
    def n_features(self) -> int:
        return self.estimator.n_features_in_

    @property
    def classes(self) -> list | None:
        classes = getattr(self.estimator, "classes_", None)
        return None if classes is None else classes.tolist()

    def receipt(self, id_hash: str) -> dict | None:
        """The latest receipt naming this keyed id hash, or None."""
        with self._lock:
            found = self._store.receipts_for(id_hash)
        return found[-1] if found else None

    def receipts(
        self, keep: ReceiptFilter | None = None, *, after: int = 0, limit: int = 100
    ) -> tuple[list[dict], int | None]:
        """One page of the receipt log, oldest first (each receipt with its ``seq``), and
        the cursor of the next page, None at the end (:func:`.receipt_log.page`)."""
        return receipt_page(self._receipts_after, keep or ReceiptFilter(), after, limit)

    def iter_receipts(self, keep: ReceiptFilter | None = None) -> Iterator[dict]:
        """Every receipt ``keep`` matches, oldest first, a batch at a time (an export)."""
        return every_receipt(self._receipts_after, keep or ReceiptFilter())

    def _receipts_after(self, after: int, limit: int) -> list[tuple[int, dict]]:
        """One batch of the log, read under the model's lock like every use of the store's
        connection (:meth:`receipt`)."""
        with self._lock:
            return self._store.receipts_after(after, limit)


def as_receipt(reply: dict) -> Receipt:
    """A write's reply as a Receipt; a retried deletion's reply is the stored receipt, which
    the store may hold damaged (:class:`ReceiptCorrupt`, one line)."""
    try:
        return Receipt.from_dict(reply)
    except ValueError as err:
        raise ReceiptCorrupt(f"the stored receipt of these ids is damaged ({err})") from None
