"""Run one job per instance on the machine's cores: the p instances of a model are independent.

Why: every change and every first prediction after it does the same work once per instance —
subtract the rows' contributions from that instance's sums, then re-solve its head and re-pick
its (α, λ) — and the instances share nothing but the read-only row store. Done one after the
other, p instances cost p times one on a machine with idle cores. The heavy parts release the
GIL (LAPACK/BLAS, the compiled table kernels, numpy on large arrays), so threads are enough.

Why this is still exact: each instance's arithmetic is the same sequence of operations on its
own arrays whichever thread runs it, and BLAS stays on one thread per call (the process-wide
pin of :func:`forgetting._rowwise.one_blas_thread`, held by the caller while workers run), so
the bits do not depend on the schedule. Results come back in the order of the items.

The caller works too (it drains the same queue as the pool's threads), so a pool with fewer
threads than items never leaves the caller idle; a call from inside a worker (nested) runs
inline, so nesting can never wait on a thread that is itself waiting.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_IN_WORKER = threading.local()


PARALLEL_ROWS = 256
"""Changes and predictions of fewer rows run their instances one after the other: the work per
instance is then small, and waking a thread and handing it the GIL-bound Python parts costs
about as much as it saves (a one-row forget and predict is slower with the hand-off). From a
few hundred rows the per-instance work is mostly BLAS and compiled kernels that release the
GIL."""


def serial_map(function: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``map_instances``'s signature, one item after the other in the calling thread."""
    return [function(item) for item in items]


def worker_count() -> int:
    """Threads besides the caller: one fewer than the cores this process may use (0 on one
    core: then everything runs inline). ``FORGETTING_THREADS`` caps the total (1 = inline)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    cap = os.environ.get("FORGETTING_THREADS")
    if cap is not None and cap.strip().isdigit() and int(cap) > 0:
        cores = min(cores, int(cap))
    return max(cores - 1, 0)


def _forget_pool_in_child() -> None:
    """A forked child inherits the pool object but none of its threads: it would queue work
    that no thread runs. The child starts its own pool on first use instead."""
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qss-instance")
        return _POOL


def map_instances(function: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[function(item) for item in items]``, the items shared between the caller and the
    pool's threads; the first exception raised is re-raised after every started item ends."""
    items = list(items)
    workers = min(worker_count(), len(items) - 1)
    if workers <= 0 or getattr(_IN_WORKER, "active", False):
        return [function(item) for item in items]
    results: list = [None] * len(items)
    errors: list[BaseException] = []
    queue = iter(range(len(items)))
    queue_lock = threading.Lock()

    def drain() -> None:
        _IN_WORKER.active = True
        try:
            while True:
                with queue_lock:
                    i = next(queue, None)
                    if i is None or errors:
                        return
                try:
                    results[i] = function(items[i])
                except BaseException as err:  # re-raised by the caller below
                    with queue_lock:
                        errors.append(err)
                    return
        finally:
            _IN_WORKER.active = False

    pool = _pool(max(worker_count(), 1))
    futures = [pool.submit(drain) for _ in range(workers)]
    drain()
    for future in futures:
        # one not started yet sits behind other work on the pool (a background rebuild's
        # fit): the caller has drained the queue, so it is cancelled, not waited for
        if not future.cancel():
            future.result()
    if errors:
        raise errors[0]
    return results
