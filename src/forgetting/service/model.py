"""The model interface the service relies on, and how it reads the parts a store may lack.

Why a Protocol rather than the concrete class: the app is tested against a small fake that
fails on demand (store errors, reloads), and the store may change its internals freely as long
as it keeps these members. :class:`forgetting.store.DurableModel` — the one facade, whatever
family the store holds — implements it.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class ServableModel(Protocol):
    """What the app needs from :class:`forgetting.store.durable.DurableModel`.

    ``available`` is False after a store error left the in-memory model possibly out of step
    with the store; ``reload()`` rebuilds it from the store (raising a ``StoreError`` if it
    cannot yet) and makes it available again. ``key_is_derived`` is True when the membership
    key is derived from ``random_state`` (public), so anyone can recompute an id's hash.
    """

    estimator: Any
    task: str
    n_features: int
    classes: list | None
    available: bool
    key_is_derived: bool

    def predict(self, X: Any) -> np.ndarray: ...
    def predict_proba(self, X: Any) -> np.ndarray: ...
    def forget(self, ids: Any, *, erase_inputs: bool = False) -> dict: ...
    def insert(self, X: Any, y: Any, ids: Any) -> dict: ...
    def receipt(self, id_hash: str) -> dict | None: ...
    def lookup(self, row_id: Any) -> dict: ...
    def receipts(self, keep: Any = None, *, after: int = 0, limit: int = 100) -> tuple: ...
    def iter_receipts(self, keep: Any = None) -> Any: ...
    def stats(self) -> dict: ...
    def state_digest(self) -> str: ...
    def reload(self) -> None: ...


def key_is_derived(model: ServableModel) -> bool:
    """Whether the model's membership key is public. A model that cannot tell is assumed to
    have a derived key: wrongly closing receipt reads costs a token, wrongly opening them
    leaks who was forgotten."""
    return bool(getattr(model, "key_is_derived", True))


def is_available(model: ServableModel) -> bool:
    """Whether the model may serve. A model without the attribute never marks itself stale
    (it predates the contract), so it is always available."""
    return bool(getattr(model, "available", True))


def groups_writes(model: ServableModel) -> bool:
    """Whether the model orders concurrent forgets and inserts itself and commits them
    together (DurableModel's group commit): the app then lets them reach it at once instead
    of one by one. A model that does not say so gets them one at a time."""
    return bool(getattr(model, "groups_writes", False))


def can_reload(model: ServableModel) -> bool:
    """Whether the model can rebuild itself from its store after a store error."""
    return callable(getattr(model, "reload", None))


def feature_names(model: ServableModel) -> list[str] | None:
    """The column names the model was fitted on, in order (None when fitted on arrays)."""
    names = getattr(model, "feature_names", None)
    if names is None:
        names = getattr(getattr(model, "estimator", None), "feature_names_in_", None)
    return None if names is None else [str(n) for n in names]


def takes_tables(model: ServableModel) -> bool:
    """Whether the model was fitted on a raw table: its rows may hold strings (categories)
    and null (missing values), sent as a DataFrame in the fitted column order."""
    return getattr(getattr(model, "estimator", None), "table_", None) is not None


def as_model_input(model: ServableModel, X: np.ndarray):
    """Checked rows as the model takes them: a table model's object rows as a DataFrame with
    the fitted column names (pandas reads each column's kind), other rows as they are."""
    if X.dtype != object:
        return X
    import pandas as pd

    return pd.DataFrame(X, columns=feature_names(model))
