"""Durable storage: the rows, schemas and receipts of a model in a database (SQLite by default,
PostgreSQL for production), and :class:`DurableModel`, which keeps it in step with the
in-memory estimator so that an acknowledged deletion survives any crash; and
:class:`DurableForest`, the same for an exact forest."""

from .durable import DurableModel
from .forest import DurableForest
from .kinds import open_store

__all__ = ["DurableForest", "DurableModel", "open_store"]
