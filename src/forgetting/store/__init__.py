"""Durable storage: a model's rows (and what a family keeps besides) and its receipts in a
database (SQLite by default, PostgreSQL for production), and :class:`DurableModel`, the one
facade that keeps any fitted model in step with its store so that an acknowledged deletion
survives any crash. ``DurableModel.create`` and ``DurableModel.open`` give the store of the
model's family: :class:`QSSDurable` (QSS) or :class:`DurableForest` (the exact forest)."""

from .durable import DurableModel
from .forest import DurableForest
from .kinds import open_store
from .qss_store import QSSDurable

__all__ = ["DurableForest", "DurableModel", "QSSDurable", "open_store"]
