"""The app factory: puts the service's parts together around one model.

The parts, one job each: :mod:`.schemas` (the API's types and docs), :mod:`.routes` (the
endpoints), :mod:`.body` (rows read into numpy, memory bounded by the body),
:mod:`.middleware` (what is refused before a body is read), :mod:`.auth` (bearer tokens),
:mod:`.batcher` (micro-batching of predictions), :mod:`.recovery` (503 and reload after a
store error), :mod:`.errors` (failures as HTTP answers), :mod:`.convert` (JSON in and out),
:mod:`.receipt_log` (receipts by raw id, listing, export), :mod:`.docs` (``/docs`` from
bundled assets), :mod:`.tokens` (weak tokens refused), :mod:`.console` (the operator's web
console at ``/``; its sign-in in :mod:`.signin`). How ``forgetting serve`` runs the app
under uvicorn (connections bounded under the open-file limit, slow clients closed, repeated
log lines collapsed) is :mod:`.server`'s.

Decided here, at start-up, and why:

* **Receipt reads and the membership key.** Under a derived (public) key anyone can compute
  the hash of any id, so an open ``/receipts/{hash}`` would tell whether and when a person
  was forgotten. The app refuses to start with open receipt reads under such a key, and logs
  one warning line whenever it serves one.
* **The body limits** (:func:`body_limits`) are the largest body a request within
  ``max_batch`` can need, plus slack: rows as wide as the model for ``/predict`` and
  ``/insert``, ids for the rest. A request without a valid token (an open read) gets at most
  ``max_open_body`` whatever the width, and such bodies share a budget of
  :data:`OPEN_BUDGET_BODIES` times that in flight; the request gate enforces both while the
  body streams in, and the routes parse rows in memory bounded by a small multiple of the
  body (:mod:`.body`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from .. import __version__
from ..store.errors import StoreError
from .batcher import PredictBatcher
from .config import ConfigError, ServiceConfig
from .console import add_console
from .convert import labels_from_proba
from .docs import add_docs
from .errors import invalid_request, store_error_handler
from .middleware import RequestGate
from .model import ServableModel, as_model_input, groups_writes, key_is_derived
from .recovery import Recovery
from .routes import Access, build_router
from .schemas import InsertRequest, PredictRequest

log = logging.getLogger("forgetting.service")

#: Slack added to the computed body limit (JSON whitespace, long number literals).
BODY_SLACK = 1 << 20


#: How many bodies of ``max_open_body`` bytes requests without a token may hold at once.
OPEN_BUDGET_BODIES = 4

#: Routes whose body holds rows (as wide as the model); the others' hold ids.
ROW_ROUTES = frozenset({"/predict", "/insert"})


def max_body_bytes(config: ServiceConfig, n_features: int) -> int:
    """The largest body a request of rows within ``max_batch`` can need (numbers as long JSON
    literals, ids up to 512 characters), plus slack."""
    return max(config.max_batch * (n_features + 2) * 32, config.max_batch * 600) + BODY_SLACK


def body_limits(config: ServiceConfig, n_features: int) -> Callable[[str, str, bool], int]:
    """``limit(method, path, authenticated)``: the largest body of a request (module
    docstring)."""
    rows = max_body_bytes(config, n_features)
    ids = config.max_batch * 600 + BODY_SLACK

    def limit(method: str, path: str, authenticated: bool) -> int:
        largest = rows if path in ROW_ROUTES else ids
        return largest if authenticated else min(largest, config.max_open_body)

    return limit


def _document_bodies(app: FastAPI, *models: type[BaseModel]) -> None:
    """Add ``models`` (bodies the routes read themselves, :mod:`.body`) to the OpenAPI
    schema's components, where the routes' ``requestBody`` refers to them."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in models:
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            components.setdefault(model.__name__, body)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(model: ServableModel, config: ServiceConfig) -> FastAPI:
    """Build the FastAPI app serving ``model`` (a fitted DurableModel) under ``config``.

    Raises :class:`ConfigError` if ``config`` opens receipt reads while the model's
    membership key is derived (public).
    """
    derived = key_is_derived(model)
    if config.open_receipts and derived:
        raise ConfigError(
            "open receipt reads need a secret membership key: with a key derived from "
            "random_state anyone can compute an id's hash and learn whether and when it was "
            "forgotten; fit the store with a secret key (`forgetting fit --secret-key-file`), "
            "or keep receipt reads behind a token"
        )
    if derived:
        log.warning(
            "the membership key is derived from random_state (public): anyone can compute "
            "an id's hash and D° membership; receipts need a token. Fit with a secret key "
            "(`forgetting fit --secret-key-file`) to keep them private."
        )

    mutation_lock = threading.Lock()
    recovery = Recovery(model, mutation_lock)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        recovery.close()

    access = Access(open_reads=config.open_reads, open_receipts=config.open_receipts)
    app = FastAPI(
        title="forgetting",
        version=__version__,
        summary="Exact machine unlearning: predict, forget with receipts, insert.",
        description=(
            "A QSS model whose deletions are exact and durable: once `/forget` answers, the "
            "served model is bit for bit a model trained without those rows, and the change "
            "survives a crash. Mutations need `Authorization: Bearer <token>`; receipt "
            "lookups "
            + ("are open" if config.open_receipts else "need one too")
            + "; predictions and stats "
            + ("are open." if config.open_reads else "need one too.")
        ),
        lifespan=lifespan,
        docs_url=None,  # served from the package's own assets (.docs), not a CDN
        redoc_url=None,
    )
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StoreError, store_error_handler(recovery))
    app.state.model = model
    app.state.config = config
    app.state.recovery = recovery

    classification = model.task == "classification"

    def predict_rows(X: np.ndarray) -> tuple:
        if not classification:
            return np.asarray(model.predict(as_model_input(model, X))), None
        proba = np.asarray(model.predict_proba(as_model_input(model, X)))
        ties = lambda rows: model.predict(as_model_input(model, X[rows]))  # noqa: E731
        return labels_from_proba(proba, model.classes, ties), proba

    batcher = PredictBatcher(predict_rows, max_rows=max(config.max_batch, 1024))
    app.state.predict_batcher = batcher

    app.include_router(build_router(model, config, access, batcher, recovery, mutation_lock))
    write_lock = contextlib.nullcontext() if groups_writes(model) else mutation_lock
    add_console(app, model, config, recovery, write_lock)
    docs = add_docs(app) | {app.openapi_url}
    _document_bodies(app, PredictRequest, InsertRequest)
    app.add_middleware(
        RequestGate,
        body_limit=body_limits(config, model.n_features),
        open_budget=OPEN_BUDGET_BODIES * config.max_open_body,
        tokens=config.tokens,
        needs_token=access.needs_token,
        recovery=recovery,
        always_open={path for path in docs if path},
    )
    return app
