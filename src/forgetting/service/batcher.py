"""Micro-batching of concurrent prediction requests into one model call."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..store.errors import StoreError


class _Job:
    __slots__ = ("X", "result", "error", "finished")

    def __init__(self, X: np.ndarray):
        self.X = X
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = False


class PredictBatcher:
    """Runs concurrent prediction requests as one model call.

    Why: a model call pays a fixed cost whatever its rows (the p instances, each evaluating
    rows in fixed-shape blocks so that a row's bits do not depend on its batch), so one call
    for many requests costs little more than one for a single request. Under concurrent load,
    requests that arrive while a call runs are queued and the next call serves all of them;
    with no load a request runs at once (no added wait).

    Exactness and freshness are kept: each row's output does not depend on the other rows of
    the call, and a call starts only after every request in it arrived, so it reflects every
    forget acknowledged before any of them was sent. There is no dedicated thread: one of the
    waiting request threads runs the call (the "leader"), the others wait on a condition.
    """

    def __init__(self, fn: Callable[[np.ndarray], tuple], max_rows: int):
        self._fn = fn
        self._max_rows = max(1, max_rows)
        self._cond = threading.Condition()
        self._pending: list[_Job] = []
        self._busy = False
        self.calls = 0  # model calls made
        self.requests = 0  # prediction requests served (calls < requests: batching worked)

    def __call__(self, X: np.ndarray) -> tuple:
        job = _Job(X)
        with self._cond:
            self.requests += 1
            self._pending.append(job)
            while not job.finished:
                if self._busy:
                    self._cond.wait()
                    continue
                self._busy = True
                batch = self._take()
                self._cond.release()
                try:
                    self._run(batch)
                finally:
                    self._cond.acquire()
                    self._busy = False
                    self._cond.notify_all()
        if job.error is not None:
            raise job.error
        return job.result

    def _take(self) -> list[_Job]:
        """FIFO jobs up to ``max_rows`` rows (always at least one job)."""
        batch, rows = [], 0
        while self._pending and (not batch or rows + len(self._pending[0].X) <= self._max_rows):
            job = self._pending.pop(0)
            batch.append(job)
            rows += len(job.X)
        return batch

    def _run(self, batch: list[_Job]) -> None:
        self.calls += 1
        try:
            if len(batch) == 1:
                batch[0].result = self._fn(batch[0].X)
                return
            bounds = np.cumsum([0] + [len(job.X) for job in batch])
            joined = self._fn(np.concatenate([job.X for job in batch]))
            for job, a, b in zip(batch, bounds[:-1], bounds[1:], strict=True):
                job.result = tuple(None if part is None else part[a:b] for part in joined)
        except StoreError as err:
            # The store failed, not somebody's rows: every job gets the error (running each
            # one alone would only ask a failing store again).
            for job in batch:
                job.error = err
        except Exception as err:
            if len(batch) == 1:
                batch[0].error = err
                return
            for job in batch:  # find out whose rows fail: run each job alone
                try:
                    job.result = self._fn(job.X)
                except Exception as own:
                    job.error = own
        finally:
            for job in batch:
                job.finished = True
