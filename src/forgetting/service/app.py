"""The app factory: puts the service's parts together around one model, or several.

The parts, one job each: :mod:`.schemas` (the API's types and docs), :mod:`.routes` (the
endpoints), :mod:`.body` (rows read into numpy, memory bounded by the body),
:mod:`.middleware` (what is refused before a body is read), :mod:`.auth` (bearer tokens),
:mod:`.batcher` (micro-batching of predictions), :mod:`.recovery` (503 and reload after a
store error), :mod:`.errors` (failures as HTTP answers), :mod:`.convert` (JSON in and out),
:mod:`.receipt_log` (receipts by raw id, listing, export), :mod:`.docs` (``/docs`` from
bundled assets), :mod:`.tokens` (weak tokens refused), :mod:`.console` (the operator's web
console at ``/``; its sign-in in :mod:`.signin`), :mod:`.fleet` (several models: which one a
request means, one deletion for all). How ``forgetting serve`` runs the app
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
from collections.abc import AsyncIterator, Callable, Mapping
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
from .fleet import Fleet, Served, as_fleet
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
    # several models: n_features is the widest one's
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


def _predictor(model: ServableModel) -> Callable[[np.ndarray], tuple]:
    """What the batcher calls: labels (and probabilities for a classifier) of rows."""
    classification = model.task == "classification"

    def predict_rows(X: np.ndarray) -> tuple:
        if not classification:
            return np.asarray(model.predict(as_model_input(model, X))), None
        proba = np.asarray(model.predict_proba(as_model_input(model, X)))
        ties = lambda rows: model.predict(as_model_input(model, X[rows]))  # noqa: E731
        return labels_from_proba(proba, model.classes, ties), proba

    return predict_rows


def _served(config: ServiceConfig) -> Callable[[str, ServableModel], Served]:
    def make(name: str, model: ServableModel) -> Served:
        lock = threading.Lock()
        served = Served(
            name=name,
            model=model,
            recovery=Recovery(model, lock),
            mutation_lock=lock,
            write_lock=contextlib.nullcontext() if groups_writes(model) else lock,
        )
        served.extras["batcher"] = PredictBatcher(
            _predictor(model), max_rows=max(config.max_batch, 1024)
        )
        return served

    return make


def create_app(
    models: ServableModel | Mapping[str, ServableModel], config: ServiceConfig
) -> FastAPI:
    """Build the FastAPI app serving ``models`` (a fitted DurableModel, or names to several)
    under ``config``.

    Raises :class:`ConfigError` if ``config`` opens receipt reads while a model's
    membership key is derived (public).
    """
    fleet = as_fleet(models, _served(config))
    derived = any(key_is_derived(s.model) for s in fleet)
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
    model, recovery = fleet.first.model, fleet.first.recovery

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        fleet.close()

    access = Access(open_reads=config.open_reads, open_receipts=config.open_receipts)
    app = FastAPI(
        title="forgetting",
        version=__version__,
        summary="Exact machine unlearning: predict, forget with receipts, insert.",
        description=(
            _family(fleet) + " whose deletions are exact and durable: once `/forget` answers, the "
            "served model is bit for bit a model trained without those rows, and the change "
            "survives a crash. "
            + _several(fleet)
            + "Mutations need `Authorization: Bearer <token>`; each receipt names the "
            "operator whose token made the change, and the request's `reason`. Receipt "
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
    app.add_exception_handler(StoreError, store_error_handler(fleet))
    app.state.model = model
    app.state.config = config
    app.state.recovery = recovery
    app.state.fleet = fleet
    app.state.predict_batcher = fleet.first.extras["batcher"]

    app.include_router(build_router(fleet, config, access))
    add_console(app, fleet, config)
    docs = add_docs(app) | {app.openapi_url}
    _document_bodies(app, PredictRequest, InsertRequest)
    app.add_middleware(
        RequestGate,
        body_limit=body_limits(config, max(s.model.n_features for s in fleet)),
        open_budget=OPEN_BUDGET_BODIES * config.max_open_body,
        tokens=config.tokens,
        needs_token=access.needs_token,
        recovery=fleet,
        always_open={path for path in docs if path},
    )
    return app


def _family(fleet: Fleet) -> str:
    """The served models' family, named for /docs: a QSS model, an exact random forest."""
    kinds = []
    for served in fleet:
        estimator = getattr(served.model, "estimator", None)
        forest = "Forest" in (type(estimator).__name__ if estimator is not None else "")
        kind = "exact random forest" if forest else "QSS model"
        if kind not in kinds:
            kinds.append(kind)
    if fleet.several:
        return f"{len(fleet)} models ({', '.join(kinds)})"
    return ("An " if kinds[0].startswith("exact") else "A ") + kinds[0]


def _several(fleet: Fleet) -> str:
    if not fleet.several:
        return ""
    return (
        f"This service serves {len(fleet)} models: {fleet.listing()}. Routes about one model "
        "take `?model=NAME`; `POST /forget` without it forgets the ids in every model that "
        "holds them, and `GET /receipts?id=` asks every model. "
    )
