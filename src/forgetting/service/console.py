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
API, so a deletion from the console is the deletion ``POST /forget`` does: it names the
operator who signed in (the name of their token) and the reason typed on the confirmation
page. With several models (:mod:`.fleet`), "Find a person" asks every model and a deletion
goes to every model that holds the ids (or to the one chosen); the log, the export and the
health page show one model at a time (``?model=``, the first by default). Times show in UTC
or in the server's local time zone, as the operator chose (remembered in a cookie).
"""

from __future__ import annotations

import hmac
import math
import re
from importlib import resources
from typing import Annotated, Any

from fastapi import FastAPI, Form, Request, UploadFile, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from ..io.table_ids import parse_id
from ..store.errors import StoreCorrupt
from ..store.receipt_log import ReceiptFilter, csv_lines, json_chunks, parse_time
from .auth import token_matches
from .config import ServiceConfig
from .console_state import (
    MAX_SESSIONS,
    SESSION_IDLE,
    ZONE_COOKIE,
    ConsoleState,
    LastRebuild,
    Session,
    Sessions,
    VerifyJob,
    _templates,
    ids_from_csv,
    shown_time,
)
from .convert import DamagedReceipt, stored_receipt
from .errors import clipped
from .fleet import (
    Fleet,
    Served,
    check_reason,
    combined_status,
    forget_everywhere,
    forget_in,
    lookup_in,
)
from .receipt_log import exported
from .recovery import one_line
from .signin import SignInForms, SignInLimiter, new_binding

__all__ = ["COOKIE", "MAX_SESSIONS", "SESSION_IDLE", "add_console", "ids_from_csv"]

#: The session cookie's name.
COOKIE = "forgetting_console"
#: Rows per page of the request log.
PAGE = 50
#: Where the console's stylesheet is served.
CSS_PATH = "/console/assets/console.css"
#: The longest reason the confirmation page's field takes (the service's limit).
MAX_REASON_FORM = 500
#: A cookie value a sign-in form may be tied to (what :func:`.signin.new_binding` makes).
_BINDING = re.compile(r"[A-Za-z0-9_-]{43}")


def _instances(hit: Any) -> str:
    """A receipt's instances hit, as instance numbers (``#0, #3``) or ``none``."""
    return ", ".join(f"#{i}" for i in hit) if hit else "none"


def add_console(app: FastAPI, fleet: Fleet, config: ServiceConfig) -> None:
    """Serve the console's pages on ``app`` for the models of ``fleet`` (none in the OpenAPI
    schema)."""
    templates = _templates()
    templates.env.filters["instances"] = _instances
    sessions = Sessions()
    forms = SignInForms()
    limiter = SignInLimiter()
    app.state.console = ConsoleState(sessions, forms, limiter)
    for served in fleet:
        served.extras["verify"] = VerifyJob(served.model)
        served.extras["last_rebuild"] = LastRebuild(served.model)
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
        zone = "local" if request.cookies.get(ZONE_COOKIE) == "local" else "utc"
        base = {
            "csrf": session.csrf,
            "signed_in": session.signed_in,
            "css": CSS_PATH,
            "operator": session.operator,
            "zone": zone,
            "when": lambda ts: shown_time(ts, zone),
            "here": request.url.path,
            "back": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            "models": fleet.names if fleet.several else [],
        }
        response = templates.TemplateResponse(request, name, {**base, **context}, status_code=code)
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

    def chosen(request: Request, session: Session) -> tuple[Served | None, Response | None]:
        """The model a one-model page shows (``?model=``, the first by default), or the
        error page naming the models."""
        name = request.query_params.get("model") or None
        served = fleet.first if name is None else fleet.get(name)
        if served is None:
            return None, page(
                request,
                "error.html",
                session,
                code=404,
                message=f"No model named {clipped(one_line(name or '', 80))}: this service "
                f"serves {fleet.listing()}.",
            )
        return served, None

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
        new_sid, _ = sessions.new(config.operator_of(token))
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
                    row_id = parse_id(id, id_type)
                    results = [lookup_in(served, row_id) for served in fleet]
                    if not fleet.several and "error" in results[0]:
                        error = results[0]["error"]
                        context["error"] = error[:1].upper() + error[1:]
                    else:
                        context["results"] = results
                        context["found"] = results[0] if "error" not in results[0] else None
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
        served, missing = chosen(request, session)
        if served is None:
            return missing
        query = {k: request.query_params.get(k, "") for k in FILTERS}
        cursor_text = request.query_params.get("cursor", "0")
        context: dict[str, Any] = {"filters": query, "active": "log", "receipts": []}
        try:
            keep = log_filter(query)
            cursor = int(cursor_text) if cursor_text.isdigit() else 0
            served.recovery.require_available()
            items, after = served.model.receipts(keep, after=cursor, limit=PAGE)
            context["receipts"] = [stored_receipt(r) for r in items]
            context["next_cursor"] = after
            context["cursor"] = cursor
        except (StoreCorrupt, DamagedReceipt, RecursionError) as err:
            context["error"] = f"The log holds a damaged receipt: {one_line(err, 200)}"
        except ValueError as err:
            context["error"] = one_line(err, 200)
        context["query"] = {k: v for k, v in query.items() if v}
        if fleet.several:
            context["query"]["model"] = served.name
        return page(request, "log.html", session, model=served.name, **context)

    @app.get("/console/export", include_in_schema=False)
    def export(request: Request) -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        served, missing = chosen(request, session)
        if served is None:
            return missing
        fmt = request.query_params.get("format", "csv")
        query = {k: request.query_params.get(k, "") for k in FILTERS}
        try:
            if fmt not in ("csv", "json"):
                raise ValueError("format: csv or json")
            keep = log_filter(query)
            served.recovery.require_available()
            receipts = exported(served.model, fmt)(keep)
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
        stem = f"receipts-{served.name}" if fleet.several else "receipts"
        return StreamingResponse(
            body,
            media_type=media,
            headers={
                "Content-Disposition": f'attachment; filename="{stem}.{fmt}"',
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
        return page(
            request,
            "confirm.html",
            session,
            active="forget",
            ids=ids,
            id_type=id_type,
            max_reason=MAX_REASON_FORM,
        )

    @app.post("/console/forget", include_in_schema=False)
    def forget(
        request: Request,
        csrf: str = Form(""),
        ids: Annotated[list[str] | None, Form()] = None,
        id_type: str = Form("auto"),
        reason: str = Form(""),
        model: str = Form(""),
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
            why = check_reason(reason)
            if model and fleet.get(model) is None:
                raise ValueError(f"no model named {model}: this service serves {fleet.listing()}")
        except (TypeError, ValueError) as err:
            return page(
                request, "forget.html", session, code=422, active="forget", error=clipped(str(err))
            )
        attributed = {"operator": session.operator, "reason": why}
        if fleet.several and not model:
            outcomes = forget_everywhere(fleet, parsed, erase_inputs=False, **attributed)
        else:
            served = fleet.get(model or None)
            assert served is not None
            outcomes = [forget_in(served, parsed, erase_inputs=False, partial=False, **attributed)]
        code = combined_status(outcomes)
        if not any(o.status == "forgotten" for o in outcomes):
            failed = [o for o in outcomes if o.status == "failed"]
            if failed:
                why_not = "; ".join(
                    f"{o.model}: {o.error}" if fleet.several else str(o.error) for o in failed
                )
            elif fleet.several and not model:
                why_not = "no model holds " + ("this id" if len(ids) == 1 else "these ids")
            else:
                why_not = outcomes[0].note or "this model never held these ids"
            response = page(
                request,
                "forget.html",
                session,
                code=code,
                active="forget",
                error=f"Nothing was forgotten: {clipped(why_not)}",
            )
            if code == 503:
                response.headers["Retry-After"] = "1"
            return response
        return page(
            request,
            "receipt.html",
            session,
            code=code,
            active="forget",
            outcomes=outcomes,
            ids=ids,
            rebuilding=any(o.receipt and o.receipt.get("rebuild_started") for o in outcomes),
        )

    @app.get("/console/times", include_in_schema=False)
    def times(request: Request, zone: str = "utc", back: str = "/console/find") -> Response:
        """Remember how the operator wants times shown (UTC or local), then go back."""
        if not re.fullmatch(r"/console/[a-z/]*(\?[^\s\\]*)?", back):
            back = "/console/find"
        response = RedirectResponse(back, status_code=status.HTTP_303_SEE_OTHER)
        response.set_cookie(
            ZONE_COOKIE,
            "local" if zone == "local" else "utc",
            max_age=365 * 86400,
            httponly=True,
            samesite="strict",
            secure=secure(request),
            path="/",
        )
        return response

    @app.get("/console/health", include_in_schema=False)
    def health(request: Request) -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        served, missing = chosen(request, session)
        if served is None:
            return missing
        served.recovery.require_available()
        model, verify_job = served.model, served.extras["verify"]
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
            model=served.name,
            stats=stats,
            forest=stats.get("mode") == "forest",
            valid=valid,
            total=len(instances),
            rho=rho,
            privacy=privacy,
            last_rebuild=served.extras["last_rebuild"](),
            refresh=bool(stats.get("pending_rebuilds")) or verify_job.running,
            verify=verify_job,
        )

    @app.post("/console/verify", include_in_schema=False)
    def verify(request: Request, csrf: str = Form(""), model: str = Form("")) -> Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in()
        if not csrf_ok(session, csrf):
            return refused(request, session)
        served = fleet.get(model or None) or fleet.first
        served.extras["verify"].start()
        where = f"?model={served.name}" if fleet.several else ""
        return RedirectResponse("/console/health" + where, status_code=status.HTTP_303_SEE_OTHER)

    @app.get(CSS_PATH, include_in_schema=False)
    def stylesheet() -> Response:
        return Response(css, media_type="text/css; charset=utf-8")
