"""The endpoints: predictions, deletions with receipts, insertions, and their audit trail.

Why plain ``def`` endpoints: FastAPI runs them in worker threads, so a forget that waits on the
disk (fsync) or a blocked prediction (all instances rebuilding) never stalls the event loop,
and a prediction issued after a forget was acknowledged runs after that forget returned, so it
reflects it.

Why one lock for mutations: ``forget`` and ``insert`` are serialized here even if the store
serializes them too: the order of acknowledged changes is then the order of the lock, and a
receipt's ``state_digest`` is the state right after *its* change. Predictions do not take it.
Writes skip it when the model orders them itself and commits concurrent ones together
(:class:`~forgetting.store.DurableModel`'s group commit, where each receipt's digest is still
the state right after its own change): serialized here, they would each pay a commit.

Several models: a route about one model takes ``?model=NAME`` (needed when the service serves
several), and ``POST /forget`` without it goes to every model (:mod:`.fleet`). Who made a
change is the operator whose token the request carries (:class:`.config.ServiceConfig`); why,
the request's optional ``reason``: both go to the store, which records them in the receipt.

Store errors (:class:`~forgetting.store.errors.StoreError`) are not caught here: they pass to
the app's handler, which answers 503. They are re-raised before the ``ValueError`` clauses
because ``StoreCorrupt`` is also a ``ValueError`` and must not read as the client's mistake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Depends, HTTPException, Path, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from .. import __version__
from ..store.errors import ReceiptCorrupt, StoreCorrupt, StoreError
from .auth import bearer_token, token_dependency
from .body import parse_rows, read_body
from .config import ServiceConfig
from .convert import (
    DamagedReceipt,
    check_batch,
    check_labels,
    finite,
    jsonable,
    stored_receipt,
)
from .errors import damaged_receipt, error_message, unprocessable
from .fleet import (
    Fleet,
    Served,
    attributed,
    check_reason,
    combined_answer,
    combined_status,
    forget_everywhere,
)
from .model import ServableModel, as_model_input, feature_names, takes_tables
from .receipt_log import ModelName, add_receipt_log
from .schemas import (
    DAMAGED,
    ERRORS,
    NOT_FOUND,
    ErrorResponse,
    ForgetEverywhereResponse,
    ForgetRequest,
    HealthResponse,
    InsertRequest,
    PredictRequest,
    PredictResponse,
    ReceiptResponse,
    StatsResponse,
)


@dataclass(frozen=True)
class Access:
    """Which routes need a token, from the configuration (shared by the routes' dependencies,
    which document it in OpenAPI, and by the request gate, which enforces it first)."""

    open_reads: bool
    open_receipts: bool

    def needs_token(self, method: str, path: str) -> bool:
        """Whether ``method path`` needs a bearer token."""
        if (method, path) in {("POST", "/forget"), ("POST", "/insert")}:
            return True
        if path in {"/receipts", "/receipts/export"}:
            return True  # they answer ids' hashes (.receipt_log): a token, always
        if path.startswith("/receipts/"):
            return not self.open_receipts
        return not self.open_reads and (method, path) in {("POST", "/predict"), ("GET", "/stats")}


def _valid_instances(model: ServableModel) -> tuple[int | None, int | None]:
    """(valid, total) instances from the live engine; (None, None) if it cannot tell."""
    try:
        engine = model.estimator.engine_
        return len(engine.valid_instances()), len(engine.instances)
    except Exception:  # noqa: BLE001 - health must answer even if internals change
        return None, None


@dataclass(frozen=True)
class _Routes:
    """What the route groups share: the models, the settings and the service's parts."""

    fleet: Fleet
    config: ServiceConfig
    access: Access
    token: list
    """The dependency that checks a bearer token (one list, shared by every route needing it)."""

    @property
    def reads(self) -> list:
        """Dependencies of the read routes (/predict, /stats): none when reads are open."""
        return [] if self.access.open_reads else self.token


def operator_of(request: Request, config: ServiceConfig) -> str | None:
    """The name of the operator whose token the request carries."""
    return config.operator_of(bearer_token(request))


def build_router(fleet: Fleet, config: ServiceConfig, access: Access) -> APIRouter:
    """The API's routes for the models of ``fleet`` under ``config``.

    One function per group registers its routes, in the order OpenAPI lists them: health,
    predict, the writes (forget, insert), the audit trail (receipts, stats)."""
    router = APIRouter()
    routes = _Routes(
        fleet=fleet,
        config=config,
        access=access,
        token=[Depends(token_dependency(config.tokens))],
    )
    _add_health(router, routes)
    _add_predict(router, routes)
    _add_writes(router, routes)
    add_receipt_log(router, fleet, routes.token)  # before /receipts/{id_hash}: "export"
    _add_audit(router, routes)
    return router


def _health_of(model: ServableModel) -> HealthResponse:
    valid, total = _valid_instances(model)
    serving = valid is None or valid > 0
    return HealthResponse(
        status="ok" if serving else "degraded",
        serving=serving,
        valid_instances=valid,
        n_instances=total,
        version=__version__,
    )


def _add_health(router: APIRouter, routes: _Routes) -> None:
    """GET /health."""
    fleet = routes.fleet

    @router.get(
        "/health",
        response_model=HealthResponse,
        response_model_exclude_unset=True,
        responses={
            404: {"model": ErrorResponse, "description": "No model of this name."},
            503: ERRORS[503],
        },
        tags=["service"],
    )
    def health(model_name: ModelName = None) -> HealthResponse:
        """Liveness (200 while the model serves; 503 while it reloads from the store) and
        whether any instance is valid. With several models and no ``?model=``: ``ok`` when
        every model serves, the instances summed, and each model's health in ``models``."""
        if model_name or not fleet.several:
            return _health_of(fleet.pick(model_name, "health").model)
        each = {}
        for served in fleet:
            served.recovery.require_available()
            each[served.name] = _health_of(served.model)
        valid = [h.valid_instances for h in each.values()]
        total = [h.n_instances for h in each.values()]
        serving = all(h.serving for h in each.values())
        return HealthResponse(
            status="ok" if serving else "degraded",
            serving=serving,
            valid_instances=None if None in valid else sum(v or 0 for v in valid),
            n_instances=None if None in total else sum(t or 0 for t in total),
            version=__version__,
            models={name: h.model_dump() for name, h in each.items()},
        )


def _body_of(model_type: type) -> dict:
    """``openapi_extra`` documenting a body that the route reads itself (:mod:`.body`) as
    ``model_type`` (added to the schema's components by the app)."""
    ref = {"$ref": f"#/components/schemas/{model_type.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _add_predict(router: APIRouter, routes: _Routes) -> None:
    """POST /predict, through the micro-batcher."""
    fleet, config = routes.fleet, routes.config

    # (dependencies as defaults: under postponed annotations FastAPI resolves an annotation
    # in the module's globals, where these closures are not)
    async def rows(request: Request) -> tuple[np.ndarray, Served]:
        """The body's rows, read without a Python object per number (:mod:`.body`), and the
        model they are for."""
        served = fleet.pick(request.query_params.get("model"), "predict")
        model = served.model
        text = await read_body(request)
        X, _ = await run_in_threadpool(
            lambda: parse_rows(
                text,
                n_features=model.n_features,
                names=feature_names(model),
                table=takes_tables(model),
                max_batch=config.max_batch,
            )
        )
        return X, served

    @router.post(
        "/predict",
        response_model=PredictResponse,
        response_model_exclude_none=True,
        dependencies=routes.reads,
        responses={k: v for k, v in ERRORS.items() if k != 401 or not routes.access.open_reads},
        openapi_extra=_body_of(PredictRequest),
        tags=["model"],
    )
    def predict(
        body: tuple = Depends(rows),  # noqa: B008
        model_name: ModelName = None,
    ) -> PredictResponse:
        """Predict rows, sent as arrays (``X``) or as named records (``rows``, matched by
        column name). Reflects every forget and insert acknowledged before this request."""
        X, served = body
        model, batcher, recovery = served.model, served.extras["batcher"], served.recovery
        try:
            labels, proba = batcher(X)
        except StoreError:
            raise
        except (ValueError, TypeError) as err:
            raise unprocessable(error_message(err)) from None
        # A store error during the call may have left the model out of step: then this
        # answer may come from a diverged model, and is not given.
        recovery.require_available()
        if proba is None:
            return PredictResponse(predictions=jsonable(labels))
        return PredictResponse(
            predictions=jsonable(labels),
            probabilities=jsonable(proba),
            classes=jsonable(model.classes) if model.classes is not None else None,
        )


def _add_writes(router: APIRouter, routes: _Routes) -> None:
    """POST /forget and POST /insert: token only, serialized by the write lock."""
    fleet, config = routes.fleet, routes.config

    @router.post(
        "/forget",
        response_model=ReceiptResponse | ForgetEverywhereResponse,
        dependencies=routes.token,
        responses={**ERRORS, **NOT_FOUND, 409: DAMAGED},
        tags=["model"],
    )
    def forget(request: Request, body: ForgetRequest, model_name: ModelName = None):
        """Forget rows by id; the receipt is returned once the deletion is durable. It
        names the operator whose token made the request and the request's ``reason``.

        Retrying a deletion that already succeeded returns its stored receipt with
        ``already_forgotten: true``. Unknown ids: 404 naming them, nothing changed.

        With several models and no ``?model=``, every model that holds (or held) one of the
        ids forgets it: the answer lists each model's receipt, the models that never held
        one and those that failed. Each model's deletion is durable on its own: 200 when
        none failed, 404 when no model held any id (nothing changed), 503 with
        ``Retry-After`` when one failed (the others' deletions stand; retrying the same
        request is safe: they answer with their stored receipts).
        """
        check_batch(len(body.ids), "ids", config.max_batch)
        try:
            reason = check_reason(body.reason)
        except ValueError as err:
            raise unprocessable(str(err)) from None
        operator = operator_of(request, config)
        if fleet.several and not model_name:
            outcomes = forget_everywhere(
                fleet,
                list(body.ids),
                erase_inputs=body.erase_inputs,
                operator=operator,
                reason=reason,
            )
            code = combined_status(outcomes)
            headers = {"Retry-After": "1"} if code == 503 else None
            return JSONResponse(combined_answer(outcomes), status_code=code, headers=headers)
        served = fleet.pick(model_name, "forget", available=False)
        model, recovery = served.model, served.recovery
        try:
            extra = attributed(model.forget, operator, reason)
            with served.write_lock:
                recovery.require_available()
                reply = model.forget(list(body.ids), erase_inputs=body.erase_inputs, **extra)
        except ReceiptCorrupt as err:  # a retry whose stored receipt the store cannot read
            raise damaged_receipt("of these ids", err) from None
        except StoreError:
            raise
        except KeyError as err:
            raise HTTPException(status.HTTP_404_NOT_FOUND, error_message(err)) from None
        except (ValueError, TypeError) as err:
            raise unprocessable(error_message(err)) from None
        try:  # a retry answers with the stored receipt, which may be damaged
            return stored_receipt(reply.to_dict())
        except DamagedReceipt as err:
            shown = reply.id_hashes[0] if reply.id_hashes else "of these ids"
            raise damaged_receipt(str(shown)[:128], err) from None

    async def inserted(request: Request) -> tuple[np.ndarray, list, list, object, Served]:
        """The body's rows, labels, ids and reason, read without a Python object per number,
        and the model they are for."""
        served = fleet.pick(request.query_params.get("model"), "insert")
        model = served.model
        text = await read_body(request)
        X, fields = await run_in_threadpool(
            lambda: parse_rows(
                text,
                n_features=model.n_features,
                names=None,
                table=takes_tables(model),
                max_batch=config.max_batch,
                extra=("y", "ids"),
                scalars=("reason",),
            )
        )
        return X, fields["y"], fields["ids"], fields.get("reason"), served

    @router.post(
        "/insert",
        response_model=ReceiptResponse,
        dependencies=routes.token,
        responses=ERRORS,
        openapi_extra=_body_of(InsertRequest),
        tags=["model"],
    )
    def insert(
        request: Request,
        body: tuple = Depends(inserted),  # noqa: B008
        model_name: ModelName = None,
    ) -> dict:
        """Learn new labeled rows (ids must be new); the receipt is returned once durable,
        naming the operator and the optional ``reason``.

        A classifier's labels are sent as its classes: JSON integers for integer classes
        (``1.0`` is refused), strings for string classes."""
        X, y, ids, reason, served = body
        model = served.model
        if reason is not None and not isinstance(reason, str):
            raise unprocessable("reason: a string")
        try:
            reason = check_reason(reason)
        except ValueError as err:
            raise unprocessable(str(err)) from None
        n = len(X)
        if not (n == len(y) == len(ids)):
            raise unprocessable(
                f"X has {n} rows, y has {len(y)} labels and ids has {len(ids)} "
                "entries; they must match"
            )
        if model.task == "classification":
            check_labels(y, model.classes)
        else:
            if not all(isinstance(v, int | float) for v in y):
                raise unprocessable("regression targets must be numbers")
            y = np.asarray(y, dtype=np.float64)
            if not np.all(np.isfinite(y)):
                raise unprocessable("y contains NaN or infinity")
        try:
            extra = attributed(model.insert, operator_of(request, config), reason)
            with served.write_lock:
                served.recovery.require_available()
                return model.insert(as_model_input(model, X), y, list(ids), **extra).to_dict()
        except StoreError:
            raise
        except (ValueError, TypeError, KeyError) as err:
            raise unprocessable(error_message(err)) from None


def _add_audit(router: APIRouter, routes: _Routes) -> None:
    """GET /receipts/{id_hash} and GET /stats."""
    fleet, access = routes.fleet, routes.access
    unauthorized = {401: ERRORS[401]}
    unavailable = {503: ERRORS[503]}

    @router.get(
        "/receipts/{id_hash}",
        response_model=ReceiptResponse,
        dependencies=[] if access.open_receipts else routes.token,
        responses={
            404: {"model": ErrorResponse, "description": "No receipt for this id hash."},
            409: DAMAGED,
            **({} if access.open_receipts else unauthorized),
            **unavailable,
        },
        tags=["audit"],
    )
    def receipt(
        id_hash: Annotated[
            str,
            Path(
                pattern="^[0-9a-fA-F]{16,128}$",
                description="The keyed id hash from a receipt's `id_hashes` (hex).",
            ),
        ],
        model_name: ModelName = None,
    ) -> dict:
        """The receipt of the last change that touched the row with this keyed id hash.

        Needs a token unless the operator opened receipt reads, which the service allows only
        under a secret membership key: under a derived (public) key anyone can compute an
        id's hash and would learn whether and when that person was forgotten."""
        key = id_hash.lower()
        model = fleet.pick(model_name, "a receipt by hash").model
        try:
            found = model.receipt(key)
            if found is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"no receipt for id hash {id_hash}")
            return stored_receipt(found, key)
        # StoreCorrupt: the store could not parse it; RecursionError: a body nested past the
        # parser's limit, which the store's reader does not catch itself.
        except (DamagedReceipt, StoreCorrupt, RecursionError) as err:
            why = "nested too deeply to read" if isinstance(err, RecursionError) else err
            raise damaged_receipt(key, why) from None

    @router.get(
        "/stats",
        response_model=StatsResponse,
        dependencies=routes.reads,
        responses={**({} if access.open_reads else unauthorized), **unavailable},
        tags=["audit"],
    )
    def stats(model_name: ModelName = None) -> dict:
        """Rows, mode, instances (validity, rebuilding), rebuild counts and the state digest;
        ``service`` counts prediction requests and the model calls that served them, and the
        reloads from the store after store errors."""
        served = fleet.pick(model_name, "stats")
        model, batcher, recovery = served.model, served.extras["batcher"], served.recovery
        service = {
            "predict_requests": batcher.requests,
            "predict_model_calls": batcher.calls,
            "store_reloads": recovery.reloads,
        }
        return finite({**model.stats(), "service": service})
