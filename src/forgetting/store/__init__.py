"""Durable storage: the rows, schemas and receipts of a model in a database (SQLite by default,
PostgreSQL for production), and :class:`DurableModel`, which keeps it in step with the
in-memory estimator so that an acknowledged deletion survives any crash."""

from .durable import DurableModel

__all__ = ["DurableModel"]
