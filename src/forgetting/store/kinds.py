"""Opening a store as the kind of model it holds: :meth:`DurableModel.open` does it for any
store; :func:`open_store` is the same call, kept for the callers that name it."""

from __future__ import annotations

from .durable import DurableModel


def open_store(
    location: str, *, read_only: bool = False, secret_key: bytes | str | None = None
) -> DurableModel:
    """Open the store at ``location`` as the model it holds (:meth:`DurableModel.open`)."""
    return DurableModel.open(location, read_only=read_only, secret_key=secret_key)
