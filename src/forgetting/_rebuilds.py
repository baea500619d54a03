"""Background rebuilds of a model's instances: the one instance manager of every family.

Why: every family keeps p instances, each with its own keyed D°, and a change that moves an
instance's D° makes that instance stale while the others serve. Both families rebuild it
the same way (docs/design.md §4): on a thread, from a copy of the rows; once built, the
instance is reconciled with the rows present *then* — the rows that left and came since
the copy, told apart by serial — unless one of them moved its new D°, and then it starts
over from a fresh copy; a newer job for the instance, or a refit of the whole model,
supersedes it. What differs is a family's own: how the rows are copied, how an instance is
built and reconciled. This module holds what is the same — the jobs, their threads and
supersession, one fit at a time where a family asks for it, errors and waiting — and
:class:`RebuildJobs` runs a family's :class:`RebuildSteps`: QSS's engine
(:mod:`forgetting.engine.rebuilding`) and the forest's instances
(:mod:`forgetting.forest.instances`).

Locking: the family's lock (``changed``, a :class:`threading.Condition` over it) orders
every change, landing and prediction; :meth:`RebuildJobs.start`, ``supersede`` and the
queries are called with it held; a job's thread takes it only to land (and the family's
steps where they say so). With ``one_at_a_time``, jobs fit in turn, each on every core: under
a burst of hits the first lands in its own fit's time rather than all of them late.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class Superseded(Exception):
    """A job's work stopped because a newer job, or a refit, made it useless."""


@dataclass
class RebuildJob:
    """One pending rebuild of one instance."""

    instance: int
    started: float = field(default_factory=time.perf_counter)
    """When the change that made the instance stale came (kept across restarts)."""
    thread: threading.Thread | None = None
    error: BaseException | None = None
    superseded: bool = False


class RebuildSteps(Protocol):
    """A family's part of a rebuild (called by the job's thread)."""

    def copy(self, job: RebuildJob) -> Any:
        """A private copy of the rows to build from (without the lock held: the family
        takes it as it needs), or None when the job was superseded meanwhile."""

    def build(self, job: RebuildJob, copy: Any) -> Any:
        """The instance built from ``copy`` (may raise :class:`Superseded` between steps)."""

    def land(self, job: RebuildJob, copy: Any, built: Any) -> bool:
        """With the lock held and the job current: reconcile ``built`` with the rows present
        now and serve it (True), or say that a row changed since the copy moved its D°
        (False: the job starts over from a fresh copy)."""


class RebuildJobs:
    """The pending rebuilds of p instances (module docstring)."""

    def __init__(self, changed: threading.Condition, thread_prefix: str, *, one_at_a_time=False):
        self._changed = changed
        self._jobs: dict[int, RebuildJob] = {}
        self._prefix = thread_prefix
        self._turn = threading.Lock() if one_at_a_time else None
        """Held by the job that fits (``one_at_a_time``): taken before the lock, never while
        holding it, and kept until the instance has landed."""

    # -- queries (call with the lock) ----------------------------------------------------
    def pending(self) -> list[int]:
        """Instances with a job."""
        return sorted(self._jobs)

    def job(self, r: int) -> RebuildJob | None:
        """Instance r's pending job, if any."""
        return self._jobs.get(r)

    def running(self, r: int) -> bool:
        """Whether instance r has a job whose thread still works (it will see any change
        when it lands)."""
        job = self._jobs.get(r)
        return (
            job is not None
            and job.error is None
            and job.thread is not None
            and job.thread.is_alive()
        )

    def current(self, job: RebuildJob) -> bool:
        """Whether ``job`` is still the one its instance waits for."""
        return not job.superseded and self._jobs.get(job.instance) is job

    def failed(self) -> list[RebuildJob]:
        """The jobs whose thread stopped on an error, by instance."""
        return [job for _, job in sorted(self._jobs.items()) if job.error is not None]

    # -- changes (call with the lock) ----------------------------------------------------
    def start(self, r: int, steps: RebuildSteps) -> RebuildJob:
        """A new job for instance r on a thread of its own; a job it supersedes hands on
        when its change came (``started``)."""
        old = self.supersede(r)
        job = RebuildJob(r)
        if old is not None:
            job.started = old.started
        self._jobs[r] = job
        job.thread = threading.Thread(
            target=self._run, args=(job, steps), name=f"{self._prefix}{r}", daemon=True
        )
        job.thread.start()
        return job

    def supersede(self, r: int) -> RebuildJob | None:
        """Drop instance r's job (its thread ends without landing); returns it."""
        job = self._jobs.pop(r, None)
        if job is not None:
            job.superseded = True
            self._changed.notify_all()
        return job

    def supersede_all(self) -> None:
        """Drop every job (the model was refitted, or replaced)."""
        for r in list(self._jobs):
            self.supersede(r)

    def landed(self, job: RebuildJob) -> float:
        """Instance ``job.instance`` serves again: the job ends; returns the seconds since
        the change that started it."""
        del self._jobs[job.instance]
        self._changed.notify_all()
        return time.perf_counter() - job.started

    def wait(self, timeout: float | None, on_failed: Callable[[RebuildJob], None]) -> None:
        """Block until no job is left (``timeout`` seconds at most: TimeoutError). A failed
        job is handed to ``on_failed`` (which raises its error, or runs it again here)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._jobs:
            failed = self.failed()
            if failed:
                on_failed(failed[0])
                continue
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"rebuilds of instances {self.pending()} pending")
            self._changed.wait(remaining)

    # -- a job's thread --------------------------------------------------------------------
    def _run(self, job: RebuildJob, steps: RebuildSteps) -> None:
        """Copy, build, land; over again while a change moved the new D° meanwhile."""
        turn = self._turn if self._turn is not None else contextlib.nullcontext()
        try:
            with turn:
                while True:
                    with self._changed:
                        if not self.current(job):
                            return
                    copy = steps.copy(job)
                    if copy is None:
                        return
                    built = steps.build(job, copy)
                    with self._changed:
                        if not self.current(job):
                            return
                        if steps.land(job, copy, built):
                            return
        except Superseded:
            return
        except BaseException as err:  # kept for wait() and the next request
            with self._changed:
                if self.current(job):
                    job.error = err
                    self._changed.notify_all()
