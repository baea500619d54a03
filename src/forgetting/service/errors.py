"""How failures become HTTP answers: one readable line each, never a traceback or an echo.

* Every message made from a client's input or a model error is :func:`clipped`: a value in
  it (a run of more than :data:`MAX_ECHO` characters without a space or punctuation, such as
  a 4,000-digit id) is cut to its first :data:`MAX_ECHO` characters and ``…``.

* Invalid input -> 422 with a summary and each problem's location in the request (FastAPI's
  default would echo the input, which may be huge, or NaN, which JSON cannot carry).
* A store error -> 503 with ``Retry-After``: nothing was changed and retrying later is right.
  ``StoreBusy`` says that another writer holds the store. If the error left the model out of
  step with the store, the reload starts here (see :mod:`.recovery`).
* A damaged receipt -> 409: the receipt the store holds for this id hash is unreadable or
  fails its checks (altered in the database). Not a 503: retrying cannot help, and the rest
  of the store still serves; not a 500: it is no bug of the server's, and the answer is one
  line saying what to do. 409 because the request is fine but the resource's stored state
  conflicts with what a receipt is.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import HTTPException, Request, status
from fastapi.responses import JSONResponse

from ..store.errors import StoreBusy
from .recovery import ModelUnavailable, Recovery, one_line

#: ``Retry-After`` (seconds) when another writer holds the store ...
BUSY_RETRY_AFTER = 2
#: ... and after any other store error, or while the model reloads.
RETRY_AFTER = 1


#: The most characters of one value an error message repeats.
MAX_ECHO = 40
_VALUE = re.compile(r"[^\s,;()\[\]{}'\"]{" + str(MAX_ECHO + 1) + ",}")


def clipped(message: str) -> str:
    """``message`` with each value longer than :data:`MAX_ECHO` characters cut (module
    docstring)."""
    return _VALUE.sub(lambda m: m.group()[:MAX_ECHO] + "…", message)


def unprocessable(message: str) -> HTTPException:
    """A 422: the input is invalid and nothing was changed."""
    return HTTPException(status_code=status.HTTP_422_UNPROCESSABLE_CONTENT, detail=clipped(message))


def damaged_receipt(id_hash: str, why: Any) -> HTTPException:
    """The 409 for a receipt the store holds but that fails its checks (module docstring)."""
    return HTTPException(
        status_code=status.HTTP_409_CONFLICT,
        detail=(
            f"the stored receipt for id hash {id_hash} is damaged ({one_line(why, 200)}): the "
            "store's receipts were altered or corrupted; nothing was changed. Restore the "
            "store from a backup (`forgetting verify` checks its rows and model)"
        ),
    )


def _location(loc: tuple | list) -> str:
    """('body', 'X', 0, 3) -> 'X[0][3]'."""
    text = ""
    for part in loc:
        if part == "body" and not text:
            continue
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "body"


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """422 with a readable summary. Unlike FastAPI's default it does not echo the input
    (which may be huge, or NaN, which JSON cannot carry)."""
    problems = getattr(exc, "errors", lambda: [])()
    errors = []
    for e in problems[:20]:
        kind, msg, loc = e.get("type", ""), e.get("msg", ""), _location(e.get("loc", ()))
        if kind == "json_invalid":
            loc, msg = "body", f"malformed JSON: {e.get('ctx', {}).get('error', msg)}"
        errors.append({"loc": loc, "msg": msg, "type": kind})
    for e in errors:
        e["loc"], e["msg"] = clipped(e["loc"]), clipped(e["msg"])
    summary = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors[:5]) or "invalid request"
    if len(problems) > 5:
        summary += f"; and {len(problems) - 5} more"
    return JSONResponse(
        {"detail": f"invalid request: {summary}", "errors": errors},
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
    )


def error_message(err: BaseException) -> str:
    """The message of a model error (KeyError's str() would add quotes around it),
    :func:`clipped`."""
    if isinstance(err, KeyError) and err.args:
        return clipped(str(err.args[0]))
    return clipped(str(err) or type(err).__name__)


def store_error_response(err: BaseException) -> JSONResponse:
    """The 503 for a store error (a :class:`StoreError`), with a one-line message."""
    retry = RETRY_AFTER
    if isinstance(err, StoreBusy):
        retry = BUSY_RETRY_AFTER
        detail = f"another writer holds the store; nothing was changed, retry in {retry} s"
    elif isinstance(err, ModelUnavailable):
        detail = one_line(err)
    else:
        detail = f"store error: {one_line(err)}; nothing was changed, retry later"
    return JSONResponse(
        {"detail": detail},
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(retry)},
    )


def store_error_handler(
    models: Recovery | Any,
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    """The app's handler for :class:`StoreError`: a 503, and a reload of every model that
    needs one. ``models``: one model's :class:`Recovery`, or the app's models
    (:class:`.fleet.Fleet`, whose ``start_reloads`` starts each one's)."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(models, Recovery):
            if not models.available:
                models.start_reload()
        else:
            models.start_reloads()
        return store_error_response(exc)

    return handle
