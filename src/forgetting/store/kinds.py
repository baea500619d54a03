"""Opening a store as the kind of model it holds.

A store holds either a QSS model (:class:`~.durable.DurableModel`: rows, schemas and
contributions) or an exact forest (:class:`~.forest.DurableForest`: rows only); each class
refuses the other's store with :class:`~.errors.StoreKindError`. Callers that take any store
(the CLI, ``forgetting serve``) open it through :func:`open_store`.
"""

from __future__ import annotations

from .durable import DurableModel
from .errors import StoreKindError
from .forest import DurableForest


def open_store(
    location: str, *, read_only: bool = False, secret_key: bytes | str | None = None
) -> DurableModel | DurableForest:
    """Open the store at ``location`` as the model it holds (the arguments are
    :meth:`DurableModel.open`'s). A forest store is read once by the QSS reader before it is
    told apart; its open is a fit anyway."""
    try:
        return DurableModel.open(location, read_only=read_only, secret_key=secret_key)
    except StoreKindError:
        return DurableForest.open(location, read_only=read_only, secret_key=secret_key)
