"""The HTTP API: predictions, deletions with receipts, insertions, and their audit trail.

Design choices, and why:

* **Synchronous model calls in the thread pool.** Endpoints are plain ``def`` functions, so
  FastAPI runs them in worker threads: a forget that waits on the disk (fsync) or a blocked
  prediction (all instances rebuilding) never stalls the event loop, and a prediction issued
  after a forget was acknowledged runs after that forget returned, so it reflects it.
* **One lock for mutations.** ``forget`` and ``insert`` are serialized in the app even if the
  store serializes them too: the order of acknowledged changes is then the order of the lock,
  and a receipt's ``state_digest`` is the state right after *its* change. Predictions do not
  take the lock.
* **Validate everything before touching the model.** Widths, batch sizes, NaN, types are
  checked here (and again by the model, which raises before changing anything), so every 4xx
  leaves the model exactly as it was.
* **Authentication before the body is read.** A middleware answers 401 to an unauthenticated
  mutation before its JSON is parsed, so an anonymous client learns nothing from validation
  messages and cannot make the server parse large bodies.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, Protocol

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Path, Request, Response, Security, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StringConstraints

from .. import __version__
from .auth import check_request
from .config import ServiceConfig

# -- the model interface the app relies on -------------------------------------------------


class ServableModel(Protocol):
    """What the app needs from :class:`forgetting.store.durable.DurableModel`."""

    estimator: Any
    task: str
    n_features: int
    classes: list | None

    def predict(self, X: Any) -> np.ndarray: ...
    def predict_proba(self, X: Any) -> np.ndarray: ...
    def forget(self, ids: Any, *, erase_inputs: bool = False) -> dict: ...
    def insert(self, X: Any, y: Any, ids: Any) -> dict: ...
    def receipt(self, id_hash: str) -> dict | None: ...
    def stats(self) -> dict: ...
    def state_digest(self) -> str: ...


# -- request and response schemas (they are the OpenAPI docs) ------------------------------

#: A finite number. Strict: ``"1.5"`` or ``true`` are type errors, not silently converted.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
#: A row id: an integer or a non-empty string (ids are stable external keys, SPEC §5.6).
RowId = StrictInt | Annotated[str, StringConstraints(strict=True, min_length=1, max_length=512)]
#: A label: a class (integer or string) or a regression target.
Label = StrictInt | Annotated[str, StringConstraints(strict=True, min_length=1)] | Number


class PredictRequest(BaseModel):
    """Rows to predict: a list of rows, each a list of ``n_features`` finite numbers."""

    model_config = ConfigDict(extra="forbid")
    X: list[list[Number]] = Field(min_length=1, examples=[[[0.1, -1.2, 0.5]]])


class PredictResponse(BaseModel):
    """One prediction per row; for classifiers also class probabilities (columns in the
    order of ``classes``)."""

    predictions: list[Label]
    probabilities: list[list[float | None]] | None = None
    classes: list[Label] | None = None


class ForgetRequest(BaseModel):
    """Ids to forget. ``erase_inputs`` (label mode only) erases the rows' inputs as well as
    their labels, at the cost of rebuilding every instance."""

    model_config = ConfigDict(extra="forbid")
    ids: list[RowId] = Field(min_length=1, examples=[["user-123", 42]])
    erase_inputs: StrictBool = False


class InsertRequest(BaseModel):
    """Labeled rows to learn: ``X`` (rows), ``y`` (one label per row), new unique ``ids``."""

    model_config = ConfigDict(extra="forbid")
    X: list[list[Number]] = Field(min_length=1)
    y: list[Label] = Field(min_length=1)
    ids: list[RowId] = Field(min_length=1)


class ReceiptResponse(BaseModel):
    """What a forget or insert did. ``id_hashes`` are keyed hashes of the ids (the ids
    themselves are not kept); ``state_digest`` is the model's SHA-256 right after the call;
    ``already_forgotten`` marks the stored receipt returned for a retried deletion."""

    model_config = ConfigDict(extra="allow")
    operation: str
    scope: str
    n_rows: int
    id_hashes: list[str]
    instances_hit: list[int]
    rebuild_started: bool
    state_digest: str
    timestamp: str
    seconds: float
    already_forgotten: bool = False


class InstanceStats(BaseModel):
    """One schema instance: ``valid`` is False while it rebuilds (the others serve)."""

    model_config = ConfigDict(extra="allow")
    instance: int
    valid: bool
    schema_rows: int | None = None
    n_levels: int | None = None
    n_centroids: int | None = None


class StatsResponse(BaseModel):
    """The store's statistics: rows, task and mode, per-instance validity, rebuild counts
    and the state digest. Further keys reported by the store are passed through."""

    model_config = ConfigDict(extra="allow")
    n_rows: int
    mode: str
    task: str | None = None
    n_features: int | None = None
    classes: list[Label] | None = None
    instances: list[InstanceStats] = []
    pending_rebuilds: list[int] = []
    rebuilds_run: int | None = None
    mean_rebuild_seconds: float | None = None
    state_digest: str | None = None
    backend: str | None = None


class HealthResponse(BaseModel):
    """Liveness, and whether predictions are served without waiting: ``serving`` is False
    only while every instance is rebuilding (requests then block until one lands)."""

    status: Literal["ok", "degraded"]
    serving: bool
    valid_instances: int | None
    n_instances: int | None
    version: str


class ErrorResponse(BaseModel):
    """An error: ``detail`` says what was wrong and what to do; for invalid input,
    ``errors`` lists each problem with its location in the request."""

    detail: str
    errors: list[dict[str, Any]] | None = None


#: Declares the bearer scheme in the OpenAPI docs ("Authorize" in /docs); checking is ours.
_BEARER = HTTPBearer(auto_error=False, description="A token from the service configuration.")

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Missing or invalid bearer token."},
    413: {"model": ErrorResponse, "description": "More rows or ids than `max_batch`."},
    422: {"model": ErrorResponse, "description": "Malformed or invalid input; nothing changed."},
}
_NOT_FOUND = {404: {"model": ErrorResponse, "description": "Unknown ids; nothing changed."}}


# -- helpers --------------------------------------------------------------------------------


def _unprocessable(message: str) -> HTTPException:
    return HTTPException(status_code=status.HTTP_422_UNPROCESSABLE_CONTENT, detail=message)


def _location(loc: tuple | list) -> str:
    """('body', 'X', 0, 3) -> 'X[0][3]'."""
    text = ""
    for part in loc:
        if part == "body" and not text:
            continue
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "body"


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """422 with a readable summary. Unlike FastAPI's default it does not echo the input
    (which may be huge, or NaN, which JSON cannot carry)."""
    problems = getattr(exc, "errors", lambda: [])()
    errors = []
    for e in problems[:20]:
        kind, msg, loc = e.get("type", ""), e.get("msg", ""), _location(e.get("loc", ()))
        if kind == "json_invalid":
            loc, msg = "body", f"malformed JSON: {e.get('ctx', {}).get('error', msg)}"
        errors.append({"loc": loc, "msg": msg, "type": kind})
    summary = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors[:5]) or "invalid request"
    if len(problems) > 5:
        summary += f"; and {len(problems) - 5} more"
    return JSONResponse(
        {"detail": f"invalid request: {summary}", "errors": errors},
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
    )


def _error_message(err: BaseException) -> str:
    """The message of a model error (KeyError's str() would add quotes around it)."""
    if isinstance(err, KeyError) and err.args:
        return str(err.args[0])
    return str(err) or type(err).__name__


def _check_batch(n: int, what: str, limit: int) -> None:
    if n > limit:
        raise HTTPException(
            status_code=status.HTTP_413_CONTENT_TOO_LARGE,
            detail=f"{n} {what} in one request; the limit is {limit}: split the request",
        )


def _check_matrix(X: list[list[float]], n_features: int) -> np.ndarray:
    for i, row in enumerate(X):
        if len(row) != n_features:
            raise _unprocessable(
                f"X[{i}] has {len(row)} values; the model expects {n_features} features per row"
            )
    return np.asarray(X, dtype=np.float64).reshape(len(X), n_features)


def _jsonable(values: Any) -> list:
    """numpy array -> plain Python list (numpy scalars are not JSON serializable, and an
    object array's ``tolist`` keeps them as they are)."""
    return _finite(np.asarray(values).tolist())


def labels_from_proba(
    proba: np.ndarray, classes: list | None, predict: Callable[[np.ndarray], Any]
) -> np.ndarray:
    """Predicted classes from probabilities, without a second model call where that is exact.

    ``predict`` is the argmax of the model's outputs and ``predict_proba`` a per-row
    non-decreasing map of them (clip at 0, divide by the row total). If a row's largest
    probability is attained by one class only, that class is also the strict argmax of the
    outputs (a larger-or-equal output elsewhere would give a larger-or-equal probability), so
    the label is exactly ``predict``'s. Rows with a tie or a non-finite value (rare) are
    asked to ``predict(rows)`` itself.
    """
    if classes is None or proba.ndim != 2 or proba.shape[1] != len(classes):
        return np.asarray(predict(np.arange(len(proba))))
    top = np.argmax(proba, axis=1)
    best = proba[np.arange(len(proba)), top]
    unique = np.isfinite(best) & ((proba == best[:, None]).sum(axis=1) == 1)
    labels = np.asarray(classes)[top]
    if not np.all(unique):
        rows = np.flatnonzero(~unique)
        labels = labels.astype(object)
        labels[rows] = list(np.asarray(predict(rows)))
    return labels


def _valid_instances(model: ServableModel) -> tuple[int | None, int | None]:
    """(valid, total) instances from the live engine; (None, None) if it cannot tell."""
    try:
        engine = model.estimator.engine_
        return len(engine.valid_instances()), len(engine.instances)
    except Exception:  # noqa: BLE001 - health must answer even if internals change
        return None, None


# -- micro-batching of predictions ----------------------------------------------------------


class _Job:
    __slots__ = ("X", "result", "error", "finished")

    def __init__(self, X: np.ndarray):
        self.X = X
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = False


class PredictBatcher:
    """Runs concurrent prediction requests as one model call.

    Why: the model evaluates rows in fixed-shape blocks (of 1024 rows, so that a row's bits do
    not depend on its batch), which makes a 1-row call cost as much as a 1000-row one. Under
    concurrent load, requests that arrive while a call runs are queued and the next call
    serves all of them; with no load a request runs at once (no added wait).

    Exactness and freshness are kept: each row's output does not depend on the other rows of
    the call, and a call starts only after every request in it arrived, so it reflects every
    forget acknowledged before any of them was sent. There is no dedicated thread: one of the
    waiting request threads runs the call (the "leader"), the others wait on a condition.
    """

    def __init__(self, fn: Callable[[np.ndarray], tuple], max_rows: int):
        self._fn = fn
        self._max_rows = max(1, max_rows)
        self._cond = threading.Condition()
        self._pending: list[_Job] = []
        self._busy = False
        self.calls = 0  # model calls made
        self.requests = 0  # prediction requests served (calls < requests: batching worked)

    def __call__(self, X: np.ndarray) -> tuple:
        job = _Job(X)
        with self._cond:
            self.requests += 1
            self._pending.append(job)
            while not job.finished:
                if self._busy:
                    self._cond.wait()
                    continue
                self._busy = True
                batch = self._take()
                self._cond.release()
                try:
                    self._run(batch)
                finally:
                    self._cond.acquire()
                    self._busy = False
                    self._cond.notify_all()
        if job.error is not None:
            raise job.error
        return job.result

    def _take(self) -> list[_Job]:
        """FIFO jobs up to ``max_rows`` rows (always at least one job)."""
        batch, rows = [], 0
        while self._pending and (not batch or rows + len(self._pending[0].X) <= self._max_rows):
            job = self._pending.pop(0)
            batch.append(job)
            rows += len(job.X)
        return batch

    def _run(self, batch: list[_Job]) -> None:
        self.calls += 1
        try:
            if len(batch) == 1:
                batch[0].result = self._fn(batch[0].X)
                return
            bounds = np.cumsum([0] + [len(job.X) for job in batch])
            joined = self._fn(np.concatenate([job.X for job in batch]))
            for job, a, b in zip(batch, bounds[:-1], bounds[1:], strict=True):
                job.result = tuple(None if part is None else part[a:b] for part in joined)
        except Exception as err:
            if len(batch) == 1:
                batch[0].error = err
                return
            for job in batch:  # find out whose rows fail: run each job alone
                try:
                    job.result = self._fn(job.X)
                except Exception as own:
                    job.error = own
        finally:
            for job in batch:
                job.finished = True


# -- the app --------------------------------------------------------------------------------


def create_app(model: ServableModel, config: ServiceConfig) -> FastAPI:
    """Build the FastAPI app serving ``model`` (a fitted DurableModel) under ``config``."""
    app = FastAPI(
        title="forgetting",
        version=__version__,
        summary="Exact machine unlearning: predict, forget with receipts, insert.",
        description=(
            "A QSS model whose deletions are exact and durable: once `/forget` answers, the "
            "served model is bit for bit a model trained without those rows, and the change "
            "survives a crash. Mutations need `Authorization: Bearer <token>`; reads are "
            + ("open." if config.open_reads else "authenticated too.")
        ),
    )
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.state.model = model
    app.state.config = config
    mutation_lock = threading.Lock()
    classification = model.task == "classification"

    def predict_rows(X: np.ndarray) -> tuple:
        if not classification:
            return np.asarray(model.predict(X)), None
        proba = np.asarray(model.predict_proba(X))
        return labels_from_proba(proba, model.classes, lambda rows: model.predict(X[rows])), proba

    batcher = PredictBatcher(predict_rows, max_rows=max(config.max_batch, 1024))
    app.state.predict_batcher = batcher

    def require_token(
        request: Request,
        _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
    ) -> None:
        """Enforced again here (the middleware already did) so a route can never be reached
        without it, and so the OpenAPI docs show which routes need a token."""
        check_request(request, config.tokens)

    writes = [Depends(require_token)]
    reads = [] if config.open_reads else [Depends(require_token)]
    protected = {("POST", "/forget"), ("POST", "/insert")}
    if not config.open_reads:
        protected |= {("POST", "/predict"), ("GET", "/stats")}

    # The largest body a request within max_batch can need (numbers as long JSON literals,
    # ids up to 512 characters), plus slack: anything larger is refused before it is read.
    max_body = max(config.max_batch * (model.n_features + 2) * 32, config.max_batch * 600)
    max_body += 1 << 20

    @app.middleware("http")
    async def authenticate_first(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """401 before the body is parsed, for routes that need a token; 413 for a declared
        body size no request within ``max_batch`` could need."""
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > max_body:
            return JSONResponse(
                {"detail": f"request body of {length} bytes exceeds {max_body}: split it"},
                status_code=status.HTTP_413_CONTENT_TOO_LARGE,
            )
        path = request.url.path
        needs_token = (request.method, path) in protected or (
            not config.open_reads and path.startswith("/receipts/")
        )
        if needs_token:
            try:
                check_request(request, config.tokens)
            except HTTPException as err:
                return JSONResponse(
                    {"detail": err.detail}, status_code=err.status_code, headers=err.headers
                )
        return await call_next(request)

    @app.get("/health", response_model=HealthResponse, tags=["service"])
    def health() -> HealthResponse:
        """Liveness (always 200 while the process serves) and whether any instance is valid."""
        valid, total = _valid_instances(model)
        serving = valid is None or valid > 0
        return HealthResponse(
            status="ok" if serving else "degraded",
            serving=serving,
            valid_instances=valid,
            n_instances=total,
            version=__version__,
        )

    @app.post(
        "/predict",
        response_model=PredictResponse,
        response_model_exclude_none=True,
        dependencies=reads,
        responses={k: v for k, v in _ERRORS.items() if k != 401 or not config.open_reads},
        tags=["model"],
    )
    def predict(body: PredictRequest) -> PredictResponse:
        """Predict rows. Reflects every forget and insert acknowledged before this request."""
        _check_batch(len(body.X), "rows", config.max_batch)
        X = _check_matrix(body.X, model.n_features)
        try:
            labels, proba = batcher(X)
        except (ValueError, TypeError) as err:
            raise _unprocessable(_error_message(err)) from None
        if proba is None:
            return PredictResponse(predictions=_jsonable(labels))
        return PredictResponse(
            predictions=_jsonable(labels),
            probabilities=_jsonable(proba),
            classes=_jsonable(model.classes) if model.classes is not None else None,
        )

    @app.post(
        "/forget",
        response_model=ReceiptResponse,
        dependencies=writes,
        responses={**_ERRORS, **_NOT_FOUND},
        tags=["model"],
    )
    def forget(body: ForgetRequest) -> dict:
        """Forget rows by id; the receipt is returned once the deletion is durable.

        Retrying a deletion that already succeeded returns its stored receipt with
        ``already_forgotten: true``. Unknown ids: 404 naming them, nothing changed.
        """
        _check_batch(len(body.ids), "ids", config.max_batch)
        try:
            with mutation_lock:
                return model.forget(list(body.ids), erase_inputs=body.erase_inputs)
        except KeyError as err:
            raise HTTPException(status.HTTP_404_NOT_FOUND, _error_message(err)) from None
        except (ValueError, TypeError) as err:
            raise _unprocessable(_error_message(err)) from None

    @app.post(
        "/insert",
        response_model=ReceiptResponse,
        dependencies=writes,
        responses=_ERRORS,
        tags=["model"],
    )
    def insert(body: InsertRequest) -> dict:
        """Learn new labeled rows (ids must be new); the receipt is returned once durable."""
        n = len(body.X)
        _check_batch(max(n, len(body.y), len(body.ids)), "rows", config.max_batch)
        if not (n == len(body.y) == len(body.ids)):
            raise _unprocessable(
                f"X has {n} rows, y has {len(body.y)} labels and ids has {len(body.ids)} "
                "entries; they must match"
            )
        X = _check_matrix(body.X, model.n_features)
        y: Any = list(body.y)
        if not classification:
            if not all(isinstance(v, int | float) for v in y):
                raise _unprocessable("regression targets must be numbers")
            y = np.asarray(y, dtype=np.float64)
            if not np.all(np.isfinite(y)):
                raise _unprocessable("y contains NaN or infinity")
        try:
            with mutation_lock:
                return model.insert(X, y, list(body.ids))
        except (ValueError, TypeError, KeyError) as err:
            raise _unprocessable(_error_message(err)) from None

    @app.get(
        "/receipts/{id_hash}",
        response_model=ReceiptResponse,
        dependencies=reads,
        responses={
            404: {"model": ErrorResponse, "description": "No receipt for this id hash."},
            **({} if config.open_reads else {401: _ERRORS[401]}),
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
    ) -> dict:
        """The receipt of the last change that touched the row with this keyed id hash."""
        found = model.receipt(id_hash.lower())
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no receipt for id hash {id_hash}")
        return found

    @app.get(
        "/stats",
        response_model=StatsResponse,
        dependencies=reads,
        responses={} if config.open_reads else {401: _ERRORS[401]},
        tags=["audit"],
    )
    def stats() -> dict:
        """Rows, mode, instances (validity, rebuilding), rebuild counts and the state digest;
        ``service`` counts prediction requests and the model calls that served them."""
        service = {"predict_requests": batcher.requests, "predict_model_calls": batcher.calls}
        return _finite({**model.stats(), "service": service})

    return app


def _finite(value: Any) -> Any:
    """Replace non-finite floats (not representable in JSON) with None, recursively."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
