"""The receipt log over HTTP: find one person's receipts by raw id, list, export.

Why every route here needs a token, even when receipt reads by hash are open: each answers
ids' keyed hashes (the lookup computes one from a raw id, the listing and export carry every
receipt's), and a hash lets whoever holds it follow that person through any later receipt.

Why a lookup with no receipt is a 404 that still says what is knowable: "never present in
this store" and "present and not forgotten" are different answers to a deletion request, and
the server can tell them apart (whether the model holds the row now).

Several models (:mod:`.fleet`): a lookup by raw id without ``?model=`` asks every model and
answers each one's status and receipts (200, whatever they hold); the listing and the export
are one store's, and need ``?model=NAME``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import JSONResponse, StreamingResponse

from ..io.table_ids import parse_id
from ..store.errors import StoreCorrupt
from ..store.receipt_log import ReceiptFilter, csv_lines, json_chunks, parse_time
from .convert import DamagedReceipt, finite, stored_receipt
from .errors import unprocessable
from .fleet import Fleet, lookup_everywhere
from .recovery import one_line
from .schemas import DAMAGED, ERRORS, ErrorResponse, LookupResponse, ReceiptPage

#: The most receipts one listing page answers.
MAX_PAGE = 1000

Since = Annotated[
    str | None,
    Query(description="Receipts at or after this ISO 8601 date or time (UTC without a zone)."),
]
Until = Annotated[
    str | None,
    Query(description="Receipts before this time; a date alone includes that whole day."),
]
Operation = Annotated[Literal["forget", "insert"] | None, Query()]
Scope = Annotated[
    Literal["instance", "label"] | None,
    Query(description="instance: rows erased; label: labels removed (label mode)."),
]
ModelName = Annotated[
    str | None,
    Query(
        alias="model",
        max_length=200,
        description="The model (its store's file stem) when the service serves several.",
    ),
]
Instance = Annotated[
    int | None, Query(ge=0, description="Receipts whose change hit this instance's D°.")
]


def _filter(since, until, operation, scope, instance) -> ReceiptFilter:
    """The listing's filter, or a 422 naming the bad parameter."""
    try:
        return ReceiptFilter(
            since=None if since is None else parse_time(since),
            until=None if until is None else parse_time(until, end=True),
            operation=operation,
            scope=scope,
            instance=instance,
        )
    except ValueError as err:
        raise unprocessable(str(err)) from None


def _damaged(err: BaseException) -> HTTPException:
    """The 409 for a log holding a receipt that cannot be read (see .errors)."""
    return HTTPException(
        status.HTTP_409_CONFLICT,
        f"the store's receipt log holds a damaged receipt ({one_line(err, 200)}); nothing was "
        "changed. Restore the store from a backup (`forgetting verify` checks its rows)",
    )


def add_receipt_log(router: APIRouter, fleet: Fleet, token: list) -> None:
    """GET /receipts (lookup by ``id``, or a filtered page) and GET /receipts/export."""
    errors = {401: ERRORS[401], 409: DAMAGED, 422: ERRORS[422]}

    @router.get(
        "/receipts/export",
        dependencies=token,
        responses={
            **errors,
            200: {"content": {"text/csv": {}, "application/json": {}}},
        },
        tags=["audit"],
    )
    def export_receipts(
        format: Annotated[Literal["csv", "json"], Query()] = "csv",
        since: Since = None,
        until: Until = None,
        operation: Operation = None,
        scope: Scope = None,
        instance: Instance = None,
        model_name: ModelName = None,
    ) -> StreamingResponse:
        """Every receipt the filters keep, oldest first, streamed: CSV (one line per
        receipt; hashes and instances space-separated; cells that would start a formula
        prefixed with ``'``) or one JSON array. The evidence an auditor asks for. Each
        receipt carries the ``operator`` who made the change and its ``reason`` when set;
        in JSON also its ``seq``, ``prev_hash`` and ``signature``, so that an unfiltered
        export verifies offline (``forgetting receipts verify-log --export FILE
        --public-key KEY``)."""
        keep = _filter(since, until, operation, scope, instance)
        model = fleet.pick(model_name, "export").model
        receipts = exported(model, format)(keep)
        try:  # the first batch here: a damaged log answers 409, not a cut stream
            first = next(receipts, None)
        except (StoreCorrupt, RecursionError) as err:
            raise _damaged(err) from None
        chained = _chain(first, receipts)
        if format == "csv":
            body, media = csv_lines(chained), "text/csv; charset=utf-8"
        else:
            body, media = json_chunks(chained), "application/json"
        return StreamingResponse(
            body,
            media_type=media,
            headers={"Content-Disposition": f'attachment; filename="receipts.{format}"'},
        )

    @router.get(
        "/receipts",
        dependencies=token,
        response_model=LookupResponse | ReceiptPage,
        response_model_exclude_unset=True,  # receipts as stored, no defaults added
        responses={
            **errors,
            404: {"model": ErrorResponse, "description": "No receipt names this id."},
        },
        tags=["audit"],
    )
    def receipts(
        id: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=512,
                description="A raw row id: the server hashes it with the store's key and "
                "answers its receipts and status. Without it, a page of the log.",
            ),
        ] = None,
        id_type: Annotated[
            Literal["auto", "str", "int"],
            Query(description="auto: a canonical decimal integer is an integer id."),
        ] = "auto",
        cursor: Annotated[int, Query(ge=0, description="`next_cursor` of the last page.")] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
        since: Since = None,
        until: Until = None,
        operation: Operation = None,
        scope: Scope = None,
        instance: Instance = None,
        model_name: ModelName = None,
    ):
        """With ``id``: that id's receipts (oldest first), its ``status`` (forgotten,
        present, never_seen) and whether a rebuild its deletion started is pending; 404
        when no receipt names it, saying whether it was never present or is present and
        not forgotten. Without: a page of the log, oldest first, each receipt with its
        ``seq``; follow ``next_cursor`` until it is null (a page may be short).

        With several models: ``id`` without ``?model=`` asks every model and answers
        ``{"id_type": ..., "models": [...]}``, one entry per model (its ``model`` name and
        lookup, or an ``error``); the page of the log needs ``?model=``."""
        if id is not None:
            if fleet.several and not model_name:
                return _lookup_everywhere(fleet, id, id_type)
            return _lookup(fleet.pick(model_name, "a lookup").model, id, id_type)
        keep = _filter(since, until, operation, scope, instance)
        model = fleet.pick(model_name, "the receipt log").model
        try:
            items, after = model.receipts(keep, after=cursor, limit=limit)
            checked = [stored_receipt(r) for r in items]
        except (StoreCorrupt, DamagedReceipt, RecursionError) as err:
            raise _damaged(err) from None
        return finite({"receipts": checked, "next_cursor": after})


def _chain(first, rest):
    if first is not None:
        yield first
        yield from rest


def _lookup_everywhere(fleet: Fleet, raw: str, id_type: str):
    """GET /receipts?id=... with several models: every model's answer (module docstring)."""
    try:
        row_id = parse_id(raw, id_type)
        answers = lookup_everywhere(fleet, row_id)
    except (TypeError, ValueError) as err:
        raise unprocessable(f"id: {one_line(err, 200)}") from None
    return JSONResponse(finite({"models": answers}))


def _lookup(model, raw: str, id_type: str):
    """GET /receipts?id=...: the id's receipts and status, or a 404 saying what is known."""
    try:
        row_id = parse_id(raw, id_type)
    except (TypeError, ValueError) as err:
        raise unprocessable(f"id: {one_line(err, 200)}") from None
    try:
        found = model.lookup(row_id)
        checked = [stored_receipt(r, found["id_hash"]) for r in found["receipts"]]
    except (StoreCorrupt, DamagedReceipt, RecursionError) as err:
        raise _damaged(err) from None
    except (TypeError, ValueError) as err:
        raise unprocessable(f"id: {one_line(err, 200)}") from None
    if not checked:
        return JSONResponse(
            {
                "detail": f"no receipt for this id: {found['explanation']}",
                "status": found["status"],
                "id_hash": found["id_hash"],
            },
            status_code=status.HTTP_404_NOT_FOUND,
        )
    return finite({**found, "receipts": checked})


def exported(model, format: str):
    """How an export reads a model's receipts: in JSON, the store's verifiable log (each
    receipt with its ``seq``, ``prev_hash`` and ``signature``) when the model keeps one; in
    CSV, or for a model without a log, the receipts alone."""
    if format == "json" and hasattr(model, "iter_log"):
        return model.iter_log
    return model.iter_receipts
