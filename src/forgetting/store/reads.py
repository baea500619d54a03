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
from .signed_log import LOG_BATCH
from .signing import LogReport, export_entry, load_public_key, public_pem, verify_log
from .sql import SQLStore


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

    def iter_log(self, keep: ReceiptFilter | None = None) -> Iterator[dict]:
        """Every receipt ``keep`` matches, oldest first, as a verifiable export writes it:
        with its ``seq``, ``prev_hash`` and ``signature`` (:func:`.signing.export_entry`;
        ``forgetting receipts verify-log --export`` checks an unfiltered one)."""
        keep = keep or ReceiptFilter()
        after = -1
        while True:
            with self._lock:
                batch = self._store.log_after(after)
            for entry in batch:
                receipt = entry.receipt if entry.receipt is not None else {}
                if entry.receipt is None or keep.matches(receipt):
                    yield export_entry({**receipt, "seq": entry.seq}, entry.prev, entry.signature)
            if not batch or len(batch) < LOG_BATCH:
                return
            after = batch[-1].seq

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


def verify_store_log(location: str, public_key: bytes | None = None) -> LogReport:
    """Check a store's receipt log (:func:`.signing.verify_log`), opened read-only: against
    ``public_key`` (PEM) when given — one kept apart from the store, so that a log re-signed
    with a key put in the store in place of its own fails — else the store's own key."""
    given = None if public_key is None else load_public_key(public_key, "--public-key")
    store = SQLStore(location, read_only=True)
    try:
        own_pem, head = store.log_keys()
        own = None if own_pem is None else load_public_key(own_pem, "the store's log key")
        report = verify_log(store.log_entries(), given or own, head)
    finally:
        store.close()
    if given is not None and own is not None and public_pem(given) != public_pem(own):
        report.notes.append("the store's own public key is not the one given")
    if own is None:
        report.notes.append("the store has no signing key yet (never opened by a writer since)")
    return report
