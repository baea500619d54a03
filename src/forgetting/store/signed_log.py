"""The receipts table as a signed, hash-chained log: writing and reading it
(:class:`SignedLog`, a part of :class:`~.sql.SQLStore`); the cryptography and the checks are
:mod:`.signing`'s.

Every receipt a writer adds carries the hash of the receipt before it and its signature, and
``meta.log_head`` names the last one (signed), in the transaction that records the change. A
store made before the log was signed gets its key pair and the two columns at its first
writable open (:meth:`SignedLog.start_log`); its older receipts stay unsigned, and the chain
starts at the next receipt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from .connection import POSTGRES, describe
from .errors import StoreCorrupt, StoreError
from .signing import (
    GENESIS,
    HEAD,
    PUBLIC_KEY,
    LogEntry,
    Signer,
    SigningKeyError,
    load_public_key,
    new_keys,
)

_SET_HEAD = "UPDATE meta SET value = ? WHERE name = ?"
#: Log entries read per query.
LOG_BATCH = 1000


class SignedLog:
    """The receipt log's writes and reads (mixed into :class:`~.sql.SQLStore`)."""

    signer: Signer | None = None
    """The log's signer once :meth:`start_log` ran (writers only)."""
    unsigned_log = False
    """``receipts`` lacks the ``prev``/``signature`` columns (a store made before the log
    was signed, not yet opened writable); set by the catalogue check."""

    def start_log(self, membership_key: bytes) -> None:
        """Make this writer sign the receipts it adds: for a store made before the log was
        signed, add the two columns and a key pair first (one transaction); then decrypt the
        private key with ``membership_key``. A key that does not decrypt is one
        :class:`StoreCorrupt` line."""
        if self.read_only:
            return
        meta = self.meta()
        if self.unsigned_log or PUBLIC_KEY not in meta:
            with self.transaction("starting the signed receipt log") as cur:
                meta = self.meta(cur)
                if self.unsigned_log:
                    self.execute(cur, "ALTER TABLE receipts ADD COLUMN prev TEXT")
                    self.execute(cur, "ALTER TABLE receipts ADD COLUMN signature TEXT")
                if PUBLIC_KEY not in meta:
                    keys = new_keys(membership_key)
                    for name, value in keys.items():
                        self.set_meta(cur, name, value)
                    # the head names the last older (unsigned) receipt: any unsigned one
                    # after it, or fewer of them, is found (signing.verify_log)
                    last = self.execute(cur, "SELECT MAX(seq) FROM receipts").fetchone()[0]
                    head = Signer.unlock(keys, membership_key).head(int(last or 0), GENESIS)
                    self.set_meta(cur, HEAD, head)
            self.unsigned_log = False
            meta = self.meta()
        try:
            self.signer = Signer.unlock(meta, membership_key)
        except SigningKeyError as err:
            raise StoreCorrupt(
                f"{describe(self.location)}: {err}; the receipt log cannot be signed — "
                "restore the store's meta entries from a backup"
            ) from None

    def _append_receipt(self, cur, receipt: dict) -> int:
        """Insert one receipt, chained to the head and signed, and move the head; its seq."""
        body = json.dumps(receipt, sort_keys=True)
        if self.signer is None:
            raise StoreError(
                f"{describe(self.location)}: this writer has not started the signed receipt "
                "log (SQLStore.start_log); nothing was written"
            )
        prev = self._head(cur) or GENESIS  # GENESIS: the head names no signed receipt yet
        seq = self._next_seq(cur)
        digest, signature = self.signer.sign_entry(receipt, seq, prev)
        self.execute(
            cur,
            "INSERT INTO receipts (seq, body, prev, signature) VALUES (?, ?, ?, ?)",
            (seq, body, prev, signature),
        )
        head = self.signer.head(seq, digest)
        if self.execute(cur, _SET_HEAD, (head, HEAD)).rowcount != 1:
            self.set_meta(cur, HEAD, head)
        return seq

    def _next_seq(self, cur) -> int:
        """The sequence number the next receipt gets, as the column's own default would give
        it: PostgreSQL's sequence; SQLite's AUTOINCREMENT (above any number ever used)."""
        if self.dialect is POSTGRES:
            return int(self.execute(cur, "SELECT nextval('receipts_seq_seq')").fetchone()[0])
        used = self.execute(
            cur, "SELECT seq FROM sqlite_sequence WHERE name = 'receipts'"
        ).fetchone()
        last = self.execute(cur, "SELECT MAX(seq) FROM receipts").fetchone()[0]
        return max(int(used[0]) if used else 0, int(last or 0)) + 1

    def _head(self, cur) -> str | None:
        """The hash the log's head names (None before the first signed receipt)."""
        row = self.execute(cur, "SELECT value FROM meta WHERE name = ?", (HEAD,)).fetchone()
        if row is None:
            return None
        try:
            return str(json.loads(bytes(row[0]))["hash"])
        except (ValueError, TypeError, KeyError) as err:
            raise StoreCorrupt(
                f"{describe(self.location)}: the receipt log's head (meta.log_head) is "
                f"unreadable ({err}); run `forgetting receipts verify-log`"
            ) from None

    # -- reads ---------------------------------------------------------------------------
    def log_keys(self) -> tuple[bytes | None, bytes | None]:
        """(the log's public key as PEM, its signed head entry), None where absent."""
        meta = self.meta()
        return meta.get(PUBLIC_KEY), meta.get(HEAD)

    def public_key(self):
        """The log's public key (None for a store whose log was never signed)."""
        pem, _ = self.log_keys()
        return None if pem is None else load_public_key(pem, "the store's log public key")

    def log_after(self, after: int, limit: int = LOG_BATCH) -> list[LogEntry]:
        """Up to ``limit`` receipts with a sequence number above ``after``, oldest first,
        with their chain fields (keyset paging, as :meth:`~.sql.SQLStore.receipts_after`)."""
        columns = "seq, body, NULL, NULL" if self.unsigned_log else "seq, body, prev, signature"
        query = f"SELECT {columns} FROM receipts WHERE seq > ? ORDER BY seq LIMIT ?"
        rows = self.read(
            lambda cur: self.execute(cur, query, (int(after), int(limit))).fetchall(),
            "reading the receipt log",
        )
        return [_entry(int(seq), body, prev, sig) for seq, body, prev, sig in rows]

    def log_entries(self) -> Iterator[LogEntry]:
        """Every receipt with its chain fields, oldest first, a batch at a time."""
        after = -1
        while True:
            batch = self.log_after(after)
            yield from batch
            if len(batch) < LOG_BATCH:
                return
            after = batch[-1].seq


def _entry(seq: int, body, prev, signature) -> LogEntry:
    """One stored receipt as a log entry (its problem when the body is not a JSON object)."""
    try:
        receipt = json.loads(body)
        if not isinstance(receipt, dict):
            raise ValueError("not an object")
    except (TypeError, ValueError, RecursionError) as err:
        return LogEntry(seq, None, prev, signature, f"its body is not a readable receipt ({err})")
    text = (prev, signature)
    if not all(v is None or isinstance(v, str) for v in text):
        return LogEntry(seq, receipt, None, None, "its prev or signature is not text")
    return LogEntry(seq, receipt, prev, signature)
