"""The persister: a background thread (``qss-db``) that writes rebuilt instances to the store.

A background rebuild lands in memory under the engine lock; the engine then calls its install
hook, which only wakes this thread (the engine lock is held: no store write may happen
there). The thread takes the model's lock, then copies what changed under the engine lock, and
writes it after releasing that: predictions go on while a rebuilt instance's contributions
(every labeled row's) are written (benchmarks/results/store.md, predict_max_ms). A failed
write is retried shortly: the store still says "rebuilding" for that instance, which a reopen
rebuilds, so nothing is lost meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .mirror import Mirror

RETRY_S = 1.0
"""Seconds before a failed write of rebuilt instances is tried again."""


class Persister:
    """Writes rebuilt (or cleared) instances of ``mirror``'s model to its store, from a
    thread of its own, whenever :meth:`wake` is called. ``lock`` is the model's lock;
    ``available()`` says whether memory agrees with the store (no writes while it does not)."""

    def __init__(self, lock: threading.RLock, mirror: Mirror, available: Callable[[], bool]):
        self._lock = lock
        self._mirror = mirror
        self._available = available
        self._wake = threading.Event()
        self._stopped = False
        self.error: BaseException | None = None
        """The last write's error while it is being retried (None once one succeeded)."""
        self._thread = threading.Thread(target=self._loop, daemon=True, name="qss-db")

    def start(self) -> None:
        self._thread.start()
        self._wake.set()

    def wake(self) -> None:
        """Look for instances to write (an instance was installed, the model reloaded)."""
        self._wake.set()

    def stop(self) -> None:
        """Make the thread end (callers hold the model's lock); :meth:`join` waits for it."""
        self._stopped = True
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout=timeout)

    def persist_now(self) -> None:
        """Write rebuilt (or cleared) instances to the store. Callers hold the model's lock,
        so no forget or insert changes the rows meanwhile: the copies are taken under the
        engine lock, the store written after it is released, so predictions do not wait
        for the write."""
        mirror = self._mirror
        with mirror.estimator.engine_.locked():
            changed, snap = mirror.instances_to_write()
        if not changed:
            return
        with mirror.store.transaction("writing a rebuilt instance") as cur:
            updates = mirror.write_instances(cur, changed, snap)
            mirror.write_ledger(cur)
        mirror.record(updates)

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                if self._stopped:
                    return
                if not self._available():
                    continue
                try:
                    self.persist_now()
                    self.error = None
                except Exception as err:  # noqa: BLE001 - retried; the store stays consistent
                    # The store still says "rebuilding" for that instance, which a reopen
                    # rebuilds: nothing is lost, so retry shortly instead of failing requests.
                    self.error = err
                    timer = threading.Timer(RETRY_S, self._wake.set)
                    timer.daemon = True
                    timer.start()
