"""The request and response schemas of the HTTP API; they are its OpenAPI documentation.

Why strict types: ``"1.5"`` or ``true`` where a number is expected is a client bug, and
converting it silently would train on or forget something the client did not mean. Every
model forbids unknown fields for the same reason (a misspelt ``erase_inputs`` must not be
ignored).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    model_validator,
)

#: A finite number. Strict: ``"1.5"`` or ``true`` are type errors, not silently converted.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
#: A row's value: a finite number; for a model fitted on a raw table (categories or missing
#: values) also a string (a category) or null (a missing value). A model of numeric rows
#: refuses strings and null by position (service.convert).
Value = Number | Annotated[str, StringConstraints(strict=True, max_length=1024)] | None
#: A row id: an integer or a non-empty string, the caller's own stable key, kept as sent.
RowId = StrictInt | Annotated[str, StringConstraints(strict=True, min_length=1, max_length=512)]
#: A label: a class (integer or string, of the classifier's class type: ``1.0`` is not the
#: class ``1``) or a regression target.
Label = StrictInt | Annotated[str, StringConstraints(strict=True, min_length=1)] | Number


class PredictRequest(BaseModel):
    """Rows to predict, one of: ``X``, a list of rows, each a list of ``n_features`` finite
    numbers in the model's column order; or ``rows``, named records (``{"column": value}``)
    matched by name against the columns the model was fitted on, every column given and no
    other. A model fitted on a raw table also takes strings (categories) and null (missing
    values)."""

    model_config = ConfigDict(extra="forbid")
    X: list[list[Value]] | None = Field(default=None, min_length=1, examples=[[[0.1, -1.2, 0.5]]])
    rows: list[dict[str, Value]] | None = Field(
        default=None, min_length=1, examples=[[{"age": 41.0, "income": 52000.0}]]
    )

    @model_validator(mode="after")
    def _one_form(self) -> PredictRequest:
        if (self.X is None) == (self.rows is None):
            raise ValueError("send exactly one of X (arrays) or rows (named records)")
        return self


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
    reason: Annotated[str, StringConstraints(strict=True, max_length=500)] | None = Field(
        default=None,
        description="Why (at most 500 characters), recorded in the receipt with the operator "
        "whose token made the request.",
        examples=["GDPR art. 17 request #1234"],
    )


class InsertRequest(BaseModel):
    """Labeled rows to learn: ``X`` (rows, in the model's column order; strings and null only
    for a model fitted on a raw table), ``y`` (one label per row), new unique ``ids``, and
    optionally a ``reason`` (at most 500 characters) the receipt records."""

    model_config = ConfigDict(extra="forbid")
    X: list[list[Value]] = Field(min_length=1)
    y: list[Label] = Field(min_length=1)
    ids: list[RowId] = Field(min_length=1)
    reason: str | None = Field(default=None, max_length=500)


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


class ModelOutcome(BaseModel):
    """One model's part in a deletion sent to every model: ``forgotten`` (with its
    ``receipt``), ``not_held`` (no id was ever in it) or ``failed`` (``error`` says why;
    ``code`` is the status it would have answered alone). A failure leaves the other
    models' deletions durable."""

    model: str
    status: Literal["forgotten", "not_held", "failed"]
    receipt: ReceiptResponse | None = None
    error: str | None = None
    code: int | None = None


class ForgetEverywhereResponse(BaseModel):
    """``POST /forget`` without ``?model=`` when the service serves several models: each
    model's outcome in order, and the models' names by outcome."""

    models: list[ModelOutcome]
    forgotten_in: list[str]
    not_held_in: list[str]
    failed_in: list[str]


class LookupResponse(BaseModel):
    """What the store knows of one raw id: its keyed ``id_hash``, ``status`` (forgotten,
    present: held and not forgotten, never_seen, absent), an ``explanation`` of it,
    ``rebuild_pending`` (an instance its deletion hit is still rebuilding) and every
    receipt naming it, oldest first."""

    id_hash: str
    status: Literal["forgotten", "present", "never_seen", "absent"]
    explanation: str
    rebuild_pending: bool
    receipts: list[ReceiptResponse]


class ReceiptPage(BaseModel):
    """A page of the receipt log, oldest first (each receipt with its ``seq``), and the
    cursor of the next page: null at the end of the log."""

    receipts: list[ReceiptResponse]
    next_cursor: int | None


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
    models: dict[str, dict] | None = Field(
        default=None, description="With several models and no `?model=`: each one's health."
    )


class ErrorResponse(BaseModel):
    """An error: ``detail`` says what was wrong and what to do; for invalid input,
    ``errors`` lists each problem with its location in the request."""

    detail: str
    errors: list[dict[str, Any]] | None = None


#: Error responses shared by the routes, for the OpenAPI docs.
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Missing or invalid bearer token."},
    413: {
        "model": ErrorResponse,
        "description": "More rows or ids than `max_batch`, or a larger body than they need.",
    },
    422: {"model": ErrorResponse, "description": "Malformed or invalid input; nothing changed."},
    503: {
        "model": ErrorResponse,
        "description": (
            "The store failed or another writer holds it; nothing changed. Also answered while "
            "the model reloads from the store after a store error. Retry after `Retry-After`."
        ),
    },
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "Unknown ids; nothing changed."}
}
DAMAGED: dict[str, Any] = {
    "model": ErrorResponse,
    "description": (
        "The receipt the store holds for this id hash is damaged (altered or corrupted in the "
        "database); nothing changed. Restore the store from a backup."
    ),
}
