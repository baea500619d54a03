"""The operator's web console at ``/``: sign in, find a person, the request log, deletions,
model health and verify, as server-rendered pages.

Why server-rendered pages and a session cookie rather than the JSON API from a script: an
operator answering deletion requests may have a browser and nothing else, on a machine
without internet; every asset (templates, stylesheet) ships in the package.

Security, and why:

* **Sign-in** takes one of the service's bearer tokens and opens a server-side session: the
  cookie holds only a random session id (``HttpOnly``: no script reads it; ``SameSite=Strict``:
  no other site's page sends it; ``Secure`` over HTTPS). The id is replaced at sign-in, so a
  session id planted before it is worth nothing. Before it nothing is kept on the server:
  the sign-in form is stateless and failed sign-ins are rate-limited (:mod:`.signin`), so no
  number of anonymous visits can expire an operator's pending sign-in.
* **CSRF.** Every form that changes state (sign-in, sign-out, deletion, verify) carries a
  token in a hidden field, compared in constant time: the session's random one, or for
  sign-in one signed for the browser's cookie; a POST without it changes nothing (403).
* **Hashes** of ids are shown only to a signed-in session, like the API's receipt log.
* **Escaping.** Templates are Jinja2 with autoescaping on: an id or a CSV cell is text, never
  markup.

The console calls the model's public methods (``lookup``, ``receipts``, ``iter_receipts``,
``forget``, ``stats``, ``verify``) under the same write lock and availability check as the
API, so a deletion from the console is the deletion ``POST /forget`` does.
"""

from __future__ import annotations

import csv
import hmac
import io
import math
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Form, Request, UploadFile, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.templating import Jinja2Templates

from ..io.table_ids import parse_id
from ..store.errors import StoreCorrupt, StoreError
from ..store.receipt_log import ReceiptFilter, csv_lines, json_chunks, parse_time
from .auth import token_matches
from .config import ServiceConfig
from .convert import DamagedReceipt, stored_receipt
from .errors import clipped, error_message
from .model import ServableModel
from .recovery import Recovery, one_line
from .signin import SignInForms, SignInLimiter, new_binding

#: The session cookie's name.
COOKIE = "forgetting_console"
#: How long a signed-in session lasts without use, in seconds.
SESSION_IDLE = 8 * 3600
#: The most signed-in sessions held at once (the one used longest ago is dropped first; only
#: a correct token opens one).
MAX_SESSIONS = 512
#: Rows per page of the request log.
PAGE = 50
#: Where the console's stylesheet is served.
CSS_PATH = "/console/assets/console.css"
#: A cookie value a sign-in form may be tied to (what :func:`.signin.new_binding` makes).
_BINDING = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass
class Session:
    """One browser's session: its CSRF token, whether it signed in, when it was last used."""

    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    signed_in: bool = False
    seen: float = field(default_factory=time.monotonic)


class Sessions:
    """Signed-in sessions by random id, bounded in number and idle time (an anonymous visitor
    has none: :mod:`.signin`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        with self._lock:
            session = self._by_id.get(sid)
            if session is None:
                return None
            if time.monotonic() - session.seen > SESSION_IDLE:
                del self._by_id[sid]
                return None
            session.seen = time.monotonic()
            return session

    def new(self) -> tuple[str, Session]:
        """Open a signed-in session."""
        sid = secrets.token_urlsafe(32)
        session = Session(signed_in=True)
        with self._lock:
            if len(self._by_id) >= MAX_SESSIONS:
                oldest = min(self._by_id, key=lambda k: self._by_id[k].seen)
                del self._by_id[oldest]
            self._by_id[sid] = session
        return sid, session

    def drop(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)


@dataclass
class ConsoleState:
    """What the console keeps, on ``app.state.console``: the signed-in sessions, the
    sign-in forms and the limit on failed sign-ins."""

    sessions: Sessions
    forms: SignInForms
    limiter: SignInLimiter


class VerifyJob:
    """The store's verify, run in a background thread, one at a time; keeps the last result."""

    def __init__(self, model: ServableModel):
        self._model = model
        self._lock = threading.Lock()
        self.running = False
        self.started: str | None = None
        self.result: dict | None = None
        self.error: str | None = None

    def start(self) -> bool:
        """Start a verify unless one runs; whether one was started."""
        verify = getattr(self._model, "verify", None)
        if not callable(verify):
            self.error = "this model has no verify"
            return False
        with self._lock:
            if self.running:
                return False
            self.running, self.error = True, None
            self.started = _now()
        threading.Thread(target=self._run, args=(verify,), daemon=True).start()
        return True

    def _run(self, verify) -> None:
        try:
            result, error = verify(), None
        except Exception as err:  # noqa: BLE001 - shown to the operator, one line
            result, error = None, one_line(err, 300)
        with self._lock:
            self.result, self.error, self.running = result, error, False


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _templates() -> Jinja2Templates:
    folder = Path(str(resources.files(__package__).joinpath("templates")))
    templates = Jinja2Templates(directory=folder)
    # every template autoescaped, whatever its name: ids and CSV cells are text
    templates.env.autoescape = True
    return templates


def ids_from_csv(data: bytes) -> list[str]:
    """The ids of an uploaded CSV: the first column of each non-empty row; a first row
    whose first cell is ``id`` (any case) is a header."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError("the CSV file is not UTF-8 text") from None
    ids = [row[0].strip() for row in csv.reader(io.StringIO(text)) if row and row[0].strip()]
    if ids and ids[0].lower() == "id":
        ids = ids[1:]
    return ids


def add_console(
    app: FastAPI,
    model: ServableModel,
    config: ServiceConfig,
    recovery: Recovery,
    write_lock: Any,
) -> None:
    """Serve the console's pages on ``app`` (none in the OpenAPI schema)."""
    templates = _templates()
    sessions = Sessions()
    forms = SignInForms()
    limiter = SignInLimiter()
    app.state.console = ConsoleState(sessions, forms, limiter)
    verify_job = VerifyJob(model)
    last_rebuild = LastRebuild(model)
    css = resources.files(__package__).joinpath("static", "console.css").read_bytes()

    def secure(request: Request) -> bool:
        return request.url.scheme == "https"

    def set_cookie(response: Response, request: Request, sid: str) -> None:
        response.set_cookie(
            COOKIE,
            sid,
            httponly=True,
            samesite="strict",
            secure=secure(request),
            path="/",
        )

    def current(request: Request) -> tuple[str | None, Session | None]:
        sid = request.cookies.get(COOKIE)
        return sid, sessions.get(sid)

    def page(request: Request, name: str, session: Session, code: int = 200, **context):
        response = templates.TemplateResponse(
            request,
            name,
            {"csrf": session.csrf, "signed_in": session.signed_in, "css": CSS_PATH, **context},
            status_code=code,
        )
        response.headers["Cache-Control"] = "no-store"
        response.headers["Content-Security-Policy"] = (
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
            "frame-ancestors 'none'; base-uri 'none'"
        )
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    def to_sign_in() -> RedirectResponse:
        return RedirectResponse("/", status_code=status.HTTP_303_SEE_OTHER)

    def signed_in(request: Request) -> Session | None:
        _, session = current(request)
        return session if session is not None and session.signed_in else None

    def csrf_ok(session: Session | None, presented: str) -> bool:
        if session is None or not presented:
            return False
        return hmac.compare_digest(session.csrf.encode(), presented.encode("utf-8", "replace"))

    def refused(request: Request, session: Session | None) -> HTMLResponse:
        session = session or Session()  # rendered only, not kept
        return page(
            request,
            "error.html",
            session,
            code=status.HTTP_403_FORBIDDEN,
            message="This form has expired or did not come from this console; nothing was "
            "changed. Reload the page and try again.",
        )

    def sign_in_page(
        request: Request, binding: str, code: int = 200, error: str | None = None
    ) -> HTMLResponse:
        form = Session(csrf=forms.issue(binding))  # rendered only, not kept
        return page(request, "login.html", form, code=code, error=error)

    @app.get("/", include_in_schema=False)
    def home(request: Request) -> Response:
        sid, session = current(request)
        if session is not None and session.signed_in:
            return RedirectResponse("/console/find", status_code=status.HTTP_303_SEE_OTHER)
        binding = sid if sid and _BINDING.fullmatch(sid) else new_binding()
        response = sign_in_page(request, binding)
        set_cookie(response, request, binding)
        return response

    @app.post("/console/login", include_in_schema=False)
    def login(request: Request, token: str = Form(""), csrf: str = Form("")) -> Response:
        binding = request.cookies.get(COOKIE)
        if not forms.valid(binding, csrf):
            return refused(request, None)
        address = request.client.host if request.client else "unknown"
        held = limiter.wait(address)
        if held is not None:
            seconds, whose = held
            retry = max(1, math.ceil(seconds))
            where = "from this address" if whose == "address" else "on this service"
            response = sign_in_page(
                request,
                binding,
                code=status.HTTP_429_TOO_MANY_REQUESTS,
                error=f"Too many failed sign-ins {where}: try again in {retry} s.",
            )
            response.headers["Retry-After"] = str(retry)
            return response
        if not token or not token_matches(token, config.tokens):
            limiter.failed(address)
            return sign_in_page(
                request,
                binding,
                code=status.HTTP_401_UNAUTHORIZED,
                error="That token is not one of the service's tokens.",
            )
        sessions.drop(binding)  # a fresh id at sign-in: a planted one is worthless
        new_sid, _ = sessions.new()
        response = RedirectResponse("/console/find", status_code=status.HTTP_303_SEE_OTHER)
        set_cookie(response, request, new_sid)
        return response

    @app.post("/console/logout", include_in_schema=False)
    def logout(request: Request, csrf: str = Form("")) -> Response:
        sid, session = current(request)
        if not csrf_ok(session, csrf):
            return refused(request, session)
        sessions.drop(sid)
        response = to_sign_in()
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    @app.get("/console/find", include_in_schema=False)
    def find(request: Request, id: str = "", id_type: str = "auto") -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        context: dict[str, Any] = {"query": id, "id_type": id_type, "active": "find"}
        if id:
            if id_type not in ("auto", "str", "int") or len(id) > 512:
                context["error"] = "An id is at most 512 characters; its type auto, str or int."
            else:
                try:
                    found = model.lookup(parse_id(id, id_type))
                    receipts = [stored_receipt(r, found["id_hash"]) for r in found["receipts"]]
                    context["found"] = {**found, "receipts": receipts}
                except (StoreCorrupt, DamagedReceipt, RecursionError) as err:
                    context["error"] = f"A receipt of this id is damaged: {one_line(err, 200)}"
                except (TypeError, ValueError) as err:
                    context["error"] = f"id: {clipped(one_line(err, 200))}"
        return page(request, "find.html", session, **context)

    def log_filter(query: dict[str, str]) -> ReceiptFilter:
        instance = query.get("instance") or None
        if instance is not None and not instance.isdigit():
            raise ValueError("instance: a whole number (an instance's index)")
        scope = query.get("scope") or None
        if scope not in (None, "instance", "label"):
            raise ValueError("scope: instance or label")
        operation = query.get("operation") or None
        if operation not in (None, "forget", "insert"):
            raise ValueError("operation: forget or insert")
        since, until = query.get("since") or None, query.get("until") or None
        return ReceiptFilter(
            since=None if since is None else parse_time(since),
            until=None if until is None else parse_time(until, end=True),
            operation=operation,
            scope=scope,
            instance=None if instance is None else int(instance),
        )

    FILTERS = ("since", "until", "operation", "scope", "instance")

    @app.get("/console/log", include_in_schema=False)
    def request_log(request: Request) -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        query = {k: request.query_params.get(k, "") for k in FILTERS}
        cursor_text = request.query_params.get("cursor", "0")
        context: dict[str, Any] = {"filters": query, "active": "log", "receipts": []}
        try:
            keep = log_filter(query)
            cursor = int(cursor_text) if cursor_text.isdigit() else 0
            items, after = model.receipts(keep, after=cursor, limit=PAGE)
            context["receipts"] = [stored_receipt(r) for r in items]
            context["next_cursor"] = after
            context["cursor"] = cursor
        except (StoreCorrupt, DamagedReceipt, RecursionError) as err:
            context["error"] = f"The log holds a damaged receipt: {one_line(err, 200)}"
        except ValueError as err:
            context["error"] = one_line(err, 200)
        context["query"] = {k: v for k, v in query.items() if v}
        return page(request, "log.html", session, **context)

    @app.get("/console/export", include_in_schema=False)
    def export(request: Request) -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        fmt = request.query_params.get("format", "csv")
        query = {k: request.query_params.get(k, "") for k in FILTERS}
        try:
            if fmt not in ("csv", "json"):
                raise ValueError("format: csv or json")
            keep = log_filter(query)
            receipts = model.iter_receipts(keep)
            first = next(receipts, None)
        except (StoreCorrupt, RecursionError) as err:
            return page(request, "error.html", session, code=409, message=one_line(err, 200))
        except ValueError as err:
            return page(request, "error.html", session, code=422, message=one_line(err, 200))

        def chained():
            if first is not None:
                yield first
                yield from receipts

        body = csv_lines(chained()) if fmt == "csv" else json_chunks(chained())
        media = "text/csv; charset=utf-8" if fmt == "csv" else "application/json"
        return StreamingResponse(
            body,
            media_type=media,
            headers={
                "Content-Disposition": f'attachment; filename="receipts.{fmt}"',
                "Cache-Control": "no-store",
            },
        )

    @app.get("/console/forget", include_in_schema=False)
    def forget_form(request: Request) -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        return page(request, "forget.html", session, active="forget")

    @app.post("/console/forget/confirm", include_in_schema=False)
    async def forget_confirm(
        request: Request,
        csrf: str = Form(""),
        id: str = Form(""),
        id_type: str = Form("auto"),
        file: UploadFile | None = None,
    ) -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        if not csrf_ok(session, csrf):
            return refused(request, session)
        ids: list[str] = [id.strip()] if id.strip() else []
        try:
            if file is not None and file.filename:
                ids += ids_from_csv(await file.read())
            if not ids:
                raise ValueError("give an id, or a CSV file of ids (one a line)")
            if len(ids) > config.max_batch:
                raise ValueError(
                    f"{len(ids)} ids: at most {config.max_batch} at once (the service's "
                    "max_batch); split the file"
                )
            if id_type not in ("auto", "str", "int"):
                raise ValueError("id type: auto, str or int")
            for raw in ids:
                parse_id(raw, id_type)
        except (TypeError, ValueError) as err:
            return page(
                request, "forget.html", session, code=422, active="forget", error=clipped(str(err))
            )
        return page(request, "confirm.html", session, active="forget", ids=ids, id_type=id_type)

    @app.post("/console/forget", include_in_schema=False)
    def forget(
        request: Request,
        csrf: str = Form(""),
        ids: Annotated[list[str] | None, Form()] = None,
        id_type: str = Form("auto"),
    ) -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        if not csrf_ok(session, csrf):
            return refused(request, session)
        try:
            if not ids or len(ids) > config.max_batch:
                raise ValueError("nothing to forget: start again from the deletion form")
            ids = list(ids)
            parsed = [parse_id(v, id_type) for v in ids]
        except (TypeError, ValueError) as err:
            return page(
                request, "forget.html", session, code=422, active="forget", error=clipped(str(err))
            )
        try:
            with write_lock:
                recovery.require_available()
                reply = model.forget(parsed)
            receipt = stored_receipt(reply.to_dict())
        except StoreError:
            raise  # the app's handler answers 503 and starts the reload
        except KeyError as err:
            return page(
                request,
                "forget.html",
                session,
                code=404,
                active="forget",
                error=f"Nothing was forgotten: {error_message(err)}",
            )
        except (ValueError, TypeError, DamagedReceipt) as err:
            return page(
                request, "forget.html", session, code=422, active="forget", error=clipped(str(err))
            )
        return page(request, "receipt.html", session, active="forget", receipt=receipt, ids=ids)

    @app.get("/console/health", include_in_schema=False)
    def health(request: Request) -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        stats = model.stats()
        instances = stats.get("instances", [])
        valid = sum(1 for i in instances if i.get("valid"))
        estimator = model.estimator
        rho = getattr(estimator, "effective_rho_", None)
        try:
            privacy = estimator.privacy_ if stats.get("mode") == "dp" else None
        except AttributeError:
            privacy = None
        return page(
            request,
            "health.html",
            session,
            active="health",
            stats=stats,
            valid=valid,
            total=len(instances),
            rho=rho,
            privacy=privacy,
            last_rebuild=last_rebuild(),
            refresh=bool(stats.get("pending_rebuilds")) or verify_job.running,
            verify=verify_job,
        )

    @app.post("/console/verify", include_in_schema=False)
    def verify(request: Request, csrf: str = Form("")) -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        if not csrf_ok(session, csrf):
            return refused(request, session)
        verify_job.start()
        return RedirectResponse("/console/health", status_code=status.HTTP_303_SEE_OTHER)

    @app.get(CSS_PATH, include_in_schema=False)
    def stylesheet() -> Response:
        return Response(css, media_type="text/css; charset=utf-8")


class LastRebuild:
    """The time of the latest receipt that started a rebuild (the store records no other
    rebuild time), read incrementally: each call reads only the receipts appended since."""

    def __init__(self, model: ServableModel):
        self._model = model
        self._lock = threading.Lock()
        self._cursor = 0
        self._latest: str | None = None

    def __call__(self) -> str | None:
        keep = ReceiptFilter(operation="forget")
        with self._lock:
            try:
                while True:
                    items, after = self._model.receipts(keep, after=self._cursor, limit=1000)
                    for receipt in items:
                        self._cursor = max(self._cursor, int(receipt["seq"]))
                        if receipt.get("rebuild_started"):
                            self._latest = receipt.get("timestamp")
                    if after is None:
                        break
                    self._cursor = max(self._cursor, after)
            except (StoreCorrupt, RecursionError):
                pass  # the log page says so; health still answers
            return self._latest
