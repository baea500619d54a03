"""The request gate: what is refused before the app reads a request's body.

A pure ASGI middleware (not Starlette's ``BaseHTTPMiddleware``, which wraps ``receive`` in
ways that hide how much of the body was read). For every HTTP request, in this order:

1. **Declared size.** A ``Content-Length`` above the limit is a 413 before any byte is read.
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
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from fastapi import HTTPException, Request, status
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .auth import check_request
from .errors import store_error_response
from .recovery import ModelUnavailable, Recovery


class _CountedBody:
    """One request's ``receive``/``send`` pair, cut off once the body passes ``limit`` bytes."""

    def __init__(self, scope: Scope, receive: Receive, send: Send, limit: int):
        self._scope = scope
        self._receive = receive
        self._send = send
        self.limit = limit
        self.received = 0  # body bytes handed to the app
        self.refused = False  # the gate answered 413: the app's own answer is dropped
        self.response_started = False

    async def receive(self) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        self.received += len(message.get("body", b""))
        if self.received <= self.limit:
            return message
        self.refused = True
        if not self.response_started:
            response = JSONResponse(
                {"detail": f"request body exceeds {self.limit} bytes: split it"},
                status_code=status.HTTP_413_CONTENT_TOO_LARGE,
                headers={"Connection": "close"},
            )
            await response(self._scope, self._receive, self._send)
        # To the app the client is gone: it stops reading and its answer goes nowhere.
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.response_started = True
        await self._send(message)


class RequestGate:
    """Refuses oversized, unauthenticated or untimely requests before the app reads them.

    ``needs_token(method, path)`` says whether a route needs a bearer token; ``always_open``
    are paths answered even while the model is unavailable (the API docs).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body: int,
        tokens: tuple[str, ...],
        needs_token: Callable[[str, str], bool],
        recovery: Recovery,
        always_open: Collection[str] = (),
    ):
        self.app = app
        self.max_body = max_body
        self.tokens = tokens
        self.needs_token = needs_token
        self.recovery = recovery
        self.always_open = frozenset(always_open)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        body = _CountedBody(scope, receive, send, self.max_body)
        try:
            await self.app(scope, body.receive, body.send)
        except Exception:
            if body.refused:
                return  # the app failed because its body was cut off; the 413 is sent
            raise

    def _refusal(self, scope: Scope) -> JSONResponse | None:
        """The answer to give without running the app, or None to run it."""
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            return JSONResponse(
                {"detail": f"request body of {declared} bytes exceeds {self.max_body}: split it"},
                status_code=status.HTTP_413_CONTENT_TOO_LARGE,
                headers={"Connection": "close"},
            )
        method, path = scope["method"], scope["path"]
        if self.needs_token(method, path):
            try:
                check_request(Request(scope), self.tokens)
            except HTTPException as err:
                return JSONResponse(
                    {"detail": err.detail}, status_code=err.status_code, headers=err.headers
                )
        if path not in self.always_open:
            try:
                self.recovery.require_available()
            except ModelUnavailable as err:
                return store_error_response(err)
        return None
