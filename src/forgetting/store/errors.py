"""The errors a durable store raises, so callers (CLI, service) can answer each one clearly.

Every one of them means: the change that was asked for was **not** acknowledged, and the
in-memory model is not ahead of the store (it was never changed, or it is reloaded from the
store before it serves again).
"""

from __future__ import annotations


class StoreError(RuntimeError):
    """A store operation failed (I/O error, full disk, lost connection); retry later."""


class StoreBusy(StoreError):
    """Another writer holds the store (a running server, another CLI command, a lock)."""


class StoreKindError(StoreError):
    """The store holds the other kind of model — an exact forest (DurableForest) or a QSS
    model (DurableModel); :func:`forgetting.store.open_store` opens either."""


class StoreCorrupt(StoreError, ValueError):
    """The store's contents are unreadable or fail their integrity checks (tampered?)."""


class StoreTampered(StoreCorrupt):
    """The database holds objects the library never writes — a trigger, view, rule, policy,
    extra table, column, index or meta entry, a table defined otherwise — or, in
    PostgreSQL, the store's schema holds objects of its own: refused before any table is
    read, since such an object acts on its own (a trigger keeping forgotten rows, a view that
    never returns)."""


class ReceiptCorrupt(StoreCorrupt):
    """A stored receipt is unreadable: the rows and model may be sound, but the evidence of
    a past change was altered (the service answers 409 rather than "retry later")."""


class StoreUnusable(StoreError):
    """The location cannot be this store as given (a directory, a read-only file system or
    no write permission for a writer, a hard-linked database file): retrying does not help;
    the message says what to change."""
