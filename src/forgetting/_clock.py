"""The seconds an operation took, without the seconds numba spent compiling meanwhile.

Why: a receipt says how long its forget or insert took ("took" in the receipt log and the
console). On a machine that has never run the kernels, the first call compiles them — once
minutes — and its receipt kept that for ever ("took: 218581.3 ms"), though the operation is
milliseconds. :func:`start` notes the time and this thread's compile seconds so far;
:func:`elapsed` is the wall time since, less the compilations this thread ran meanwhile
(numba's ``numba:compile`` events, outermost ones only: a kernel compiling its callees is one
compilation). Loading a compiled kernel from numba's cache is not a compilation, and counts.
Compilations in other threads (a background rebuild's) are theirs. Without numba nothing is
compiled and the wall time is the answer. ``forgetting warmup`` compiles ahead of time.
"""

from __future__ import annotations

import threading
import time

_local = threading.local()
_install_lock = threading.Lock()
_installed = False


def _install() -> None:
    """Listen to numba's compile events, once per process."""
    global _installed
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        try:
            from numba.core import event
        except ImportError:  # pragma: no cover - numba is a dependency
            _installed = True
            return

        class _CompileClock(event.Listener):
            def on_start(self, event_) -> None:
                depth = getattr(_local, "depth", 0)
                if depth == 0:
                    _local.since = time.perf_counter()
                _local.depth = depth + 1

            def on_end(self, event_) -> None:
                _local.depth -= 1
                if _local.depth == 0:
                    spent = time.perf_counter() - _local.since
                    _local.total = getattr(_local, "total", 0.0) + spent

        event.register("numba:compile", _CompileClock())
        _installed = True


def compiling_seconds() -> float:
    """Seconds this thread has spent compiling numba kernels so far."""
    _install()
    return getattr(_local, "total", 0.0)


def start() -> tuple[float, float]:
    """The start of an operation: (wall clock, this thread's compile seconds)."""
    return time.perf_counter(), compiling_seconds()


def elapsed(started: tuple[float, float] | float) -> float:
    """Seconds since :func:`start`, less what this thread spent compiling meanwhile (a plain
    ``time.perf_counter()`` start: the wall time)."""
    now = time.perf_counter()
    if isinstance(started, tuple):
        wall, compiled = started
        return max(0.0, now - wall - (compiling_seconds() - compiled))
    return now - started
