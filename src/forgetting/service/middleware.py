"""The request gate: what is refused before the app reads a request's body.

A pure ASGI middleware (not Starlette's ``BaseHTTPMiddleware``, which wraps ``receive`` in
ways that hide how much of the body was read). For every HTTP request, in this order:

1. **Declared size.** A ``Content-Length`` above the request's limit is a 413 before any byte
   is read. The limit depends on the route and on who asks (``body_limit``): rows for
   ``/predict`` and ``/insert`` may need a body as wide as the model, other routes only ids;
   a request without a valid bearer token (an open read) gets at most the configuration's
   ``max_open_body``, whatever the model's width.
2. **Authentication.** A route that needs a token answers 401 without one, before its body is
   parsed: an anonymous client learns nothing from validation messages and cannot make the
   server parse large bodies.
3. **Availability.** While the model may be out of step with its store, every request
   answers 503 (and the reload is started; see :mod:`.recovery`). The API docs stay up.
4. **Streamed size.** The body is counted as it arrives from the server, chunked or not
   (a ``Content-Length`` can be absent, and a client can send more than it declared). The
   moment the count crosses the limit the gate answers 413 with ``Connection: close`` and
   tells the app the client went away: the rest is never read, buffered or parsed. So the
   app holds at most the limit plus one chunk of the server's, whatever the client sends.
5. **Anonymous bodies in flight.** The bodies of requests without a valid token share one
   budget (``open_budget`` bytes, counted as they arrive and returned when the answer is
   sent): a request whose body would overdraw it answers 503 with ``Retry-After``. With the
   app's parse bounded by a small multiple of the body (:mod:`.body`), the memory anonymous
   clients can make the server hold at once is bounded, however many connections they open.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from fastapi import HTTPException, Request, status
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .auth import bearer_token, check_request, token_matches
from .errors import RETRY_AFTER, store_error_response
from .recovery import ModelUnavailable, Recovery


class OpenBudget:
    """The bytes of anonymous request bodies the server holds at once, and their limit (used
    on the event loop only: no lock)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.held = 0
        self.refused = 0  # requests answered 503 for want of budget

    def take(self, n: int) -> bool:
        if self.held + n > self.limit:
            self.refused += 1
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        self.held -= n


class _CountedBody:
    """One request's ``receive``/``send`` pair, cut off once the body passes ``limit`` bytes
    (or overdraws ``budget``, for an anonymous request)."""

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        limit: int,
        budget: OpenBudget | None = None,
        anonymous_limit: bool = False,
    ):
        self._scope = scope
        self._receive = receive
        self._send = send
        self.limit = limit
        self.budget = budget
        self.anonymous_limit = anonymous_limit
        self.received = 0  # body bytes handed to the app
        self.taken = 0  # of them, bytes taken from the budget
        self.refused = False  # the gate answered: the app's own answer is dropped
        self.response_started = False

    async def receive(self) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        size = len(message.get("body", b""))
        self.received += size
        if self.received > self.limit:
            without = " without a token" if self.anonymous_limit else ""
            return await self._refuse(
                JSONResponse(
                    {"detail": f"request body exceeds {self.limit} bytes{without}: split it"},
                    status_code=status.HTTP_413_CONTENT_TOO_LARGE,
                    headers={"Connection": "close"},
                )
            )
        if self.budget is not None and size:
            if not self.budget.take(size):
                return await self._refuse(
                    JSONResponse(
                        {
                            "detail": "too many large requests without a token at once; "
                            f"retry in {RETRY_AFTER} s, or send a token"
                        },
                        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
                        headers={"Connection": "close", "Retry-After": str(RETRY_AFTER)},
                    )
                )
            self.taken += size
        return message

    async def _refuse(self, response: JSONResponse) -> Message:
        self.refused = True
        if not self.response_started:
            await response(self._scope, self._receive, self._send)
        # To the app the client is gone: it stops reading and its answer goes nowhere.
        return {"type": "http.disconnect"}

    def release(self) -> None:
        """Return the bytes taken from the budget (the request is answered)."""
        if self.budget is not None and self.taken:
            self.budget.give(self.taken)
            self.taken = 0

    async def send(self, message: Message) -> None:
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.response_started = True
        await self._send(message)


class RequestGate:
    """Refuses oversized, unauthenticated or untimely requests before the app reads them.

    ``body_limit(method, path, authenticated)`` is a request's largest body;
    ``needs_token(method, path)`` says whether a route needs a bearer token; ``open_budget``
    bounds the bytes of anonymous bodies held at once (module docstring); ``always_open``
    are paths answered even while the model is unavailable (the API docs).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        body_limit: Callable[[str, str, bool], int],
        tokens: tuple[str, ...],
        needs_token: Callable[[str, str], bool],
        recovery: Recovery,
        open_budget: int | None = None,
        always_open: Collection[str] = (),
    ):
        self.app = app
        self.body_limit = body_limit
        self.tokens = tokens
        self.needs_token = needs_token
        self.recovery = recovery
        self.budget = None if open_budget is None else OpenBudget(open_budget)
        self.always_open = frozenset(always_open)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal, authenticated, limit = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        budget = None if authenticated else self.budget
        body = _CountedBody(scope, receive, send, limit, budget, not authenticated)
        try:
            await self.app(scope, body.receive, body.send)
        except Exception:
            if body.refused:
                return  # the app failed because its body was cut off; the answer is sent
            raise
        finally:
            body.release()

    def _refusal(self, scope: Scope) -> tuple[JSONResponse | None, bool, int]:
        """(the answer to give without running the app, or None to run it; whether the
        request carries a valid token; its body limit)."""
        method, path = scope["method"], scope["path"]
        request = Request(scope)
        if self.needs_token(method, path):
            try:
                check_request(request, self.tokens)
            except HTTPException as err:
                response = JSONResponse(
                    {"detail": err.detail}, status_code=err.status_code, headers=err.headers
                )
                return response, False, 0
            authenticated = True
        else:
            presented = bearer_token(request)
            authenticated = presented is not None and token_matches(presented, self.tokens)
        limit = self.body_limit(method, path, authenticated)
        oversized = self._oversized(scope, method, path, authenticated)
        if oversized is not None:
            return oversized, authenticated, limit
        if path not in self.always_open:
            try:
                self.recovery.require_available()
            except ModelUnavailable as err:
                return store_error_response(err), authenticated, limit
        return None, authenticated, limit

    def _oversized(
        self, scope: Scope, method: str, path: str, authenticated: bool
    ) -> JSONResponse | None:
        """The 413 for a declared ``Content-Length`` above the limit, or None."""
        declared = Headers(scope=scope).get("content-length", "")
        limit = self.body_limit(method, path, authenticated)
        if not (declared.isdigit() and int(declared) > limit):
            return None
        without = " without a token" if not authenticated else ""
        return JSONResponse(
            {"detail": f"request body of {declared} bytes exceeds {limit}{without}: split it"},
            status_code=status.HTTP_413_CONTENT_TOO_LARGE,
            headers={"Connection": "close"},
        )
