"""How ``forgetting serve`` runs the app under uvicorn: a bounded number of connections, slow
clients closed, and a log that names each cause once per interval.

Why: uvicorn accepts every connection it can, and keeps one that never sends a request for
ever (its keep-alive timeout starts only after a response). Slow or idle clients therefore
use up the process's open files; then every ``accept()`` fails with EMFILE, asyncio logs a
traceback for each failure (up to ``backlog`` of them per loop iteration), and a normal request
waits in the kernel's queue until a file is free. Measured by the red team of issue 40: 1,100
slow connections under ``ulimit -n 1024`` made a ``/predict`` take 16.6 s and the log grow by
75 MB in 20 s. So, here:

* **A cap on connections** below the open-file limit (:func:`connection_cap`), leaving room
  for the files the process already holds (the store's), the files the store and the
  server may still open, and the connections one loop iteration can accept before any of
  them is counted (the accept ``backlog``, kept below that room).
* **Slow clients are closed.** A connection waiting on its client gets
  :data:`REQUEST_TIMEOUT` seconds to send a whole request head, and may pause at most as
  long within a body; idle keep-alive connections close after :data:`KEEP_ALIVE` seconds
  (uvicorn's own timer).
* **At the cap, the client waiting longest goes.** A new connection closes the connection
  that has waited longest on its client (idle, or sending slowly); a connection whose
  request the app is working on is never closed. Only when every connection is busy is the
  new one answered 503 and closed. So a flood of slow connections cannot keep a client that
  sends its request at once from being served.
* **One log line per cause** (:class:`RepeatFilter`): the first record of each cause passes,
  then at most one per :data:`LOG_INTERVAL` seconds, saying how many were held back; an
  accept() that failed for want of files or memory is one line, without its traceback.

uvicorn's ``limit_concurrency`` is not used: it counts idle connections too, so under a flood
of slow ones it would answer the normal requests 503, which is what the cap above avoids.

The connection guard subclasses uvicorn's h11 protocol (``uvicorn==0.54.0`` is pinned by the
``service`` extra) and reads only its request cycle's public-looking state (``cycle``,
``response_complete``, ``response_started``, ``more_body``); tests/service/test_service_hardening.py
runs it in a real server.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from .config import ConfigError

log = logging.getLogger("forgetting.service")

#: Seconds a client gets to send a request head, and may pause within a body.
REQUEST_TIMEOUT = 10.0
#: Seconds an idle keep-alive connection stays open after a response.
KEEP_ALIVE = 5
#: Seconds between two log lines of the same cause.
LOG_INTERVAL = 10.0
#: Open files kept free of connections at least (the store's database, its journal and lock,
#: the files a rebuild or a reload opens); more under a larger limit (:func:`connection_cap`).
RESERVED_FILES = 64
#: Fewest connections worth serving with: an open-file limit leaving fewer is refused.
MIN_CONNECTIONS = 16
#: The accept backlog at most (uvicorn's default).
MAX_BACKLOG = 2048
#: Seconds between two sweeps for slow clients.
SWEEP_SECONDS = 1.0

#: What an ``accept()`` fails with when the process or machine is out of files or memory.
_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

_BUSY = b"too many connections; retry in 1 s\n"
_OVERLOADED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BUSY), _BUSY)
)


def open_files() -> int:
    """How many files this process holds open now (Linux; else a small guess)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 16


def connection_cap(requested: int | None = None) -> tuple[int, int]:
    """(most connections, accept backlog) under this process's open-file limit.

    The connections get what the limit leaves after the files held now and a reserve
    (:data:`RESERVED_FILES`, or an eighth of the limit if more); the backlog, how many
    connections one loop iteration may accept before they are counted, is half the reserve.
    ``requested`` (``--max-connections``) may ask for fewer, never for more: a
    :class:`ConfigError` says to raise the limit (``ulimit -n``) instead.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    reserve = max(RESERVED_FILES, soft // 8)
    available = soft - open_files() - reserve
    backlog = min(MAX_BACKLOG, reserve // 2)
    if requested is not None:
        if requested > available:
            raise ConfigError(
                f"--max-connections {requested} does not fit the open-file limit of {soft} "
                f"(it leaves room for {max(available, 0)} connections): raise the limit "
                "(ulimit -n) or ask for fewer"
            )
        return requested, backlog
    if available < MIN_CONNECTIONS:
        raise ConfigError(
            f"the open-file limit of {soft} leaves room for {max(available, 0)} connections; "
            f"raise it (ulimit -n {soft + MIN_CONNECTIONS + reserve} or more)"
        )
    return available, backlog


class RepeatFilter(logging.Filter):
    """Lets the first record of each cause through, then at most one per ``interval``
    seconds, which says how many like it were held back. An accept() that failed for want of
    files or memory becomes one line without its traceback.

    The cause of a record is its logger, the first line of its message template and the type
    (and errno) of its exception. At most ``max_causes`` causes are remembered; past that,
    those whose interval is over are forgotten.
    """

    def __init__(
        self,
        interval: float = LOG_INTERVAL,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_causes: int = 1000,
    ):
        super().__init__()
        self.interval = interval
        self.clock = clock
        self.max_causes = max_causes
        self._causes: dict[tuple, list] = {}  # cause -> [time it may log again, held back]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        cause = (
            record.name,
            str(record.msg).split("\n", 1)[0],
            type(error).__name__ if error is not None else None,
            getattr(error, "errno", None),
        )
        now = self.clock()
        with self._lock:
            entry = self._causes.get(cause)
            if entry is not None and now < entry[0]:
                entry[1] += 1
                return False
            held = entry[1] if entry is not None else 0
            if len(self._causes) >= self.max_causes:
                self._causes = {k: v for k, v in self._causes.items() if now < v[0]}
            self._causes[cause] = [now + self.interval, 0]
        if isinstance(error, OSError) and error.errno in _RESOURCE_ERRNOS:
            record.msg = (
                f"{cause[1]}: {error.strerror or error} ({errno.errorcode.get(error.errno)}); "
                "new connections wait until files (or memory) are free again: raise the "
                "open-file limit (ulimit -n) or lower --max-connections"
            )
            record.args, record.exc_info, record.exc_text = (), None, None
        if held:
            record.msg = (
                f"{record.getMessage()} [{held} more like it in the last {self.interval:g} s]"
            )
            record.args = ()
        return True


#: The loggers a flood of connections can fill: asyncio's accept errors, uvicorn's protocol
#: warnings, and the service's own (the guard's lines).
FILTERED_LOGGERS = ("asyncio", "uvicorn.error", "forgetting.service")


@contextlib.contextmanager
def log_filters(interval: float = LOG_INTERVAL) -> Iterator[None]:
    """A :class:`RepeatFilter` on each of :data:`FILTERED_LOGGERS` while the server runs
    (uvicorn's logging setup keeps a logger's filters), removed after it."""
    added = []
    for name in FILTERED_LOGGERS:
        logger = logging.getLogger(name)
        repeat = RepeatFilter(interval)
        logger.addFilter(repeat)
        added.append((logger, repeat))
    try:
        yield
    finally:
        for logger, repeat in added:
            logger.removeFilter(repeat)


class ConnectionGuard:
    """The open connections of one server, their cap, and the sweep closing slow clients."""

    def __init__(
        self,
        cap: int,
        *,
        request_timeout: float = REQUEST_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.cap = cap
        self.request_timeout = request_timeout
        self.clock = clock
        self.open: dict[GuardedProtocol, None] = {}  # in order of arrival
        self.closed_slow = 0  # connections closed for a slow or idle client
        self.refused = 0  # new connections answered 503: every connection was busy
        self._sweep: asyncio.TimerHandle | None = None

    def admit(self, connection: GuardedProtocol) -> None:
        """Count a new connection; at the cap, close the client waiting longest or, if every
        connection is busy, this one."""
        self.open[connection] = None
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(SWEEP_SECONDS, self.sweep)
        if len(self.open) <= self.cap:
            return
        now = self.clock()
        waiting = [(c.waited(now), c) for c in self.open if c is not connection]
        waiting = [(w, c) for w, c in waiting if w is not None]
        if waiting:
            _, slowest = max(waiting, key=lambda pair: pair[0])
            self.closed_slow += 1
            log.warning(
                "at the cap of %d connections: closing the client that waited longest for "
                "a new one (slow or idle clients; see --max-connections)",
                self.cap,
            )
            self.release(slowest)  # closing: no longer one of the cap's
            slowest.close_slow()
            return
        self.refused += 1
        log.warning(
            "at the cap of %d connections, all busy: answering new ones 503 (see "
            "--max-connections)",
            self.cap,
        )
        self.release(connection)
        connection.refuse()

    def release(self, connection: GuardedProtocol) -> None:
        self.open.pop(connection, None)

    def sweep(self) -> None:
        """Close every connection whose client has been slower than the timeout; runs every
        :data:`SWEEP_SECONDS` while connections are open."""
        self._sweep = None
        now = self.clock()
        for connection in list(self.open):
            waited = connection.waited(now)
            if waited is not None and waited > self.request_timeout:
                self.closed_slow += 1
                self.release(connection)
                connection.close_slow()
        if self.open:
            self._sweep = asyncio.get_running_loop().call_later(SWEEP_SECONDS, self.sweep)


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol, counted by a :class:`ConnectionGuard` (set by
    :func:`guarded_protocol`) and timed while it waits on its client."""

    guard: ConnectionGuard

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._since = self._last_data = self.guard.clock()
        self.guard.admit(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.release(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._last_data = self.guard.clock()
        super().data_received(data)

    def on_response_complete(self) -> None:
        self._since = self.guard.clock()  # now waiting for the next request head
        super().on_response_complete()

    def waited(self, now: float) -> float | None:
        """Seconds this connection has waited on its client: for a request head since the
        connection or the last response, within a body since its last bytes; None while the
        app works on its request (or answers it)."""
        if self.transport.is_closing():
            return None
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return now - self._since
        if cycle.more_body and not cycle.response_started:
            return now - self._last_data
        return None

    def close_slow(self) -> None:
        """Close a connection whose client is slow or idle (nothing is in flight for it)."""
        self.transport.close()

    def refuse(self) -> None:
        """Answer a new connection 503 and close it (every connection is busy)."""
        self.transport.write(_OVERLOADED)
        self.transport.close()


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedProtocol]:
    """The protocol class for uvicorn's ``http=``, counted by ``guard``."""
    return type("GuardedH11Protocol", (GuardedProtocol,), {"guard": guard})


def server_options(max_connections: int | None = None) -> dict[str, Any]:
    """uvicorn's options for the service (module docstring): the guarded protocol, the accept
    backlog and the keep-alive timeout. Raises :class:`ConfigError` if the open-file limit
    leaves too little room, or ``max_connections`` asks for more than it does. Call it once
    the store is open: the files it holds count."""
    cap, backlog = connection_cap(max_connections)
    return {
        "http": guarded_protocol(ConnectionGuard(cap)),
        "backlog": backlog,
        "timeout_keep_alive": KEEP_ALIVE,
    }
