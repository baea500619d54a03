"""The console's sign-in: stateless sign-in forms, and a limit on failed sign-ins.

Why stateless forms: the console used to open a server-side session for every anonymous
visit, to hold the sign-in form's CSRF token, in a pool of 512. 520 anonymous ``GET /``
evicted an operator's pending sign-in, whose correct token then met "form expired" (issue
73). Now an anonymous visit keeps nothing on the server: the browser gets a random cookie,
and the form a token that is an HMAC, under a key drawn when the process starts, of that
cookie and the time it was issued. Signing in checks the MAC in constant time and the age
(:data:`FORM_LIFETIME`); the form is tied to the browser that loaded it (a page elsewhere
can neither read nor set a ``SameSite=Strict`` cookie), and nothing any other client does
can expire it. Only a correct token opens a server-side session.

Why a limit: tokens of 80 bits or more make guessing through the form hopeless, but each
guess still costs the server a response and a log line. Failed sign-ins are counted over a
sliding :data:`WINDOW` per client address and in all; past either limit the form answers 429
with ``Retry-After`` before looking at the token. The address is the connection's peer:
behind a reverse proxy every client shares the proxy's, and the per-address limit acts as a
second global one (``X-Forwarded-For`` is not trusted). A correct token is never counted,
but while the global limit holds it waits like any other: a flood of wrong guesses delays
the operator by at most one window.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable

#: Seconds a sign-in form stays valid after it was served.
FORM_LIFETIME = 3600.0
#: Seconds over which failed sign-ins are counted.
WINDOW = 60.0
#: Failed sign-ins allowed per client address, and in all, within a window.
PER_ADDRESS = 5
OVERALL = 50
#: Client addresses remembered at most (the ones idle longest are forgotten first).
MAX_ADDRESSES = 4096


def new_binding() -> str:
    """A random value for the browser's cookie, which a sign-in form is tied to."""
    return secrets.token_urlsafe(32)


class SignInForms:
    """Issues and checks sign-in form tokens (module docstring)."""

    def __init__(
        self, lifetime: float = FORM_LIFETIME, clock: Callable[[], float] = time.monotonic
    ):
        self.lifetime = lifetime
        self.clock = clock
        self._key = secrets.token_bytes(32)

    def _mac(self, binding: str, issued: int) -> str:
        message = f"sign-in\0{binding}\0{issued}".encode("utf-8", "surrogatepass")
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def issue(self, binding: str) -> str:
        """The form token for a browser whose cookie is ``binding``."""
        issued = math.floor(self.clock() * 1000)
        return f"{issued}.{self._mac(binding, issued)}"

    def valid(self, binding: str | None, token: str) -> bool:
        """Whether ``token`` was issued here for ``binding`` and is still within its
        lifetime."""
        issued_text, _, mac = token.partition(".")
        if not binding or not issued_text.isdigit() or len(issued_text) > 20:
            return False
        issued = int(issued_text)
        expected = self._mac(binding, issued)
        if not hmac.compare_digest(expected.encode(), mac.encode("utf-8", "replace")):
            return False
        age = self.clock() - issued / 1000
        return -1.0 <= age <= self.lifetime


class SignInLimiter:
    """Failed sign-ins per client address and in all over a sliding window (module
    docstring); thread-safe."""

    def __init__(
        self,
        *,
        per_address: int = PER_ADDRESS,
        overall: int = OVERALL,
        window: float = WINDOW,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.per_address = per_address
        self.overall = overall
        self.window = window
        self.max_addresses = max_addresses
        self.clock = clock
        self._lock = threading.Lock()
        self._all: deque[float] = deque()
        self._by_address: dict[str, deque[float]] = {}
        self.refused = 0  # attempts answered 429

    def _prune(self, times: deque[float], now: float) -> None:
        while times and times[0] <= now - self.window:
            times.popleft()

    def wait(self, address: str) -> tuple[float, str] | None:
        """(seconds until ``address`` may try again, whose limit holds it: "address" or
        "service"), or None when it may try now."""
        now = self.clock()
        with self._lock:
            self._prune(self._all, now)
            mine = self._by_address.get(address)
            if mine is not None:
                self._prune(mine, now)
                if len(mine) >= self.per_address:
                    self.refused += 1
                    return mine[0] + self.window - now, "address"
            if len(self._all) >= self.overall:
                self.refused += 1
                return self._all[0] + self.window - now, "service"
        return None

    def failed(self, address: str) -> None:
        """Count a failed sign-in from ``address``."""
        now = self.clock()
        with self._lock:
            self._all.append(now)
            mine = self._by_address.get(address)
            if mine is None:
                if len(self._by_address) >= self.max_addresses:
                    self._forget_idle(now)
                mine = self._by_address[address] = deque()
            mine.append(now)

    def _forget_idle(self, now: float) -> None:
        """Make room for one more address (under the lock): drop those with no failure in
        the window, else the one whose last failure is oldest."""
        for address, times in list(self._by_address.items()):
            self._prune(times, now)
            if not times:
                del self._by_address[address]
        if len(self._by_address) >= self.max_addresses:
            idle = min(self._by_address, key=lambda a: self._by_address[a][-1])
            del self._by_address[idle]
