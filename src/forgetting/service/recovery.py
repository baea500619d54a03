"""Never serve a model that may differ from its store: refuse with 503 and reload it.

Why: the service promises that the live model equals a fit on the store's rows. A store error
(full disk, lost connection, a lock held too long) may leave the in-memory model out of step
with the store; the model then says so (``available`` is False). Answering from it would
serve rows the store no longer holds, or miss rows it does. So while the model is
unavailable every request is refused with 503, and one background thread rebuilds the model
from the store with ``reload()``, retrying with exponential backoff (the store may stay
locked or unreachable for a while). The reload runs under the app's mutation lock, so no
forget or insert can interleave with it.
"""

from __future__ import annotations

import logging
import threading

from ..store.errors import StoreError
from .model import ServableModel, can_reload, is_available

log = logging.getLogger("forgetting.service")

#: Seconds before the first retry of a failed reload; doubled after each failure ...
RELOAD_FIRST_DELAY = 0.5
#: ... up to this many seconds between attempts.
RELOAD_MAX_DELAY = 30.0


class ModelUnavailable(StoreError):
    """The model may be out of step with its store and is being reloaded; nothing was done."""


def one_line(err: BaseException, limit: int = 300) -> str:
    """An error's message on one line, for an HTTP answer or a log line."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Recovery:
    """Tracks whether the model may serve, and reloads it from the store when it may not.

    ``mutation_lock`` is the lock the app holds around every forget and insert; the reload
    holds it too. At most one reload thread runs at a time; :meth:`start_reload` is cheap and
    may be called on every refused request.
    """

    def __init__(
        self,
        model: ServableModel,
        mutation_lock: threading.Lock,
        *,
        first_delay: float | None = None,
        max_delay: float | None = None,
    ):
        self._model = model
        self._mutation_lock = mutation_lock
        self._first_delay = RELOAD_FIRST_DELAY if first_delay is None else first_delay
        self._max_delay = RELOAD_MAX_DELAY if max_delay is None else max_delay
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.reloads = 0  # successful reloads
        self.failed_attempts = 0  # reload attempts that raised
        self._warned_no_reload = False

    @property
    def available(self) -> bool:
        """Whether the model may serve right now."""
        return is_available(self._model)

    @property
    def reloading(self) -> bool:
        """Whether a reload thread is running."""
        with self._guard:
            return self._thread is not None

    def require_available(self) -> None:
        """Raise :class:`ModelUnavailable` (after starting a reload) unless the model may serve."""
        if not self.available:
            self.start_reload()
            raise ModelUnavailable(
                "the model is reloading from the store after a store error; retry shortly"
            )

    def start_reload(self) -> bool:
        """Start the background reload if the model needs one and none runs; returns whether
        a reload is running now."""
        with self._guard:
            if self._thread is not None:
                return True
            if self._stop.is_set() or self.available:
                return False
            if not can_reload(self._model):
                if not self._warned_no_reload:
                    self._warned_no_reload = True
                    log.error("the model is unavailable and cannot reload itself; restart")
                return False
            self._thread = threading.Thread(target=self._run, daemon=True, name="forgetting-reload")
            self._thread.start()
            return True

    def _run(self) -> None:
        delay = self._first_delay
        while not self._stop.is_set():
            try:
                with self._mutation_lock:
                    if not self.available:
                        self._model.reload()
            except Exception as err:  # noqa: BLE001 - any failure is retried, and logged
                self.failed_attempts += 1
                log.warning(
                    "reloading the model from the store failed (%s: %s); retrying in %.1f s",
                    type(err).__name__,
                    one_line(err),
                    delay,
                )
            else:
                with self._guard:
                    # Decided under the guard: a store error after this point finds no thread
                    # and starts a new one.
                    if self.available:
                        self._thread = None
                        self.reloads += 1
                        log.warning("the model was reloaded from the store; serving again")
                        return
            if self._stop.wait(delay):
                break
            delay = min(delay * 2, self._max_delay)
        with self._guard:
            self._thread = None

    def close(self, timeout: float = 5.0) -> None:
        """Stop retrying (at shutdown); waits up to ``timeout`` for a running reload attempt."""
        self._stop.set()
        with self._guard:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
