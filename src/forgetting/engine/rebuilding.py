"""Building instances and rebuilding them in the background: the engine's instance lifecycle.

Why apart: a fit builds every instance (sharing what instances with an input head have in
common); a D° hit invalidates an instance and rebuilds it — in the call (``rebuild="sync"``)
or on a thread from a copy of the rows taken in pieces, superseded by a newer generation and
reconciled with the rows present when it lands (:mod:`.rebuilds`). :class:`Rebuilding` holds
those steps for :class:`~.core.QSSEngine` (a mixin of it), on the engine's lock and state.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._rebuilds import RebuildJob
from ..instance import (
    RowData,
)
from . import rebuilds
from .builds import build_instance, build_instances


class Rebuilding:
    """Builds and background rebuilds of :class:`~.core.QSSEngine`'s instances."""

    def _sibling_gram(
        self, r: int, stale: Sequence[int] = ()
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """A copy of a valid sibling's head Gram sums and fold counts, when its head takes the
        input as given (the same integers every instance holds over the current rows): what a
        rebuild of instance ``r`` started now adopts instead of recomputing. ``stale``: the
        instances the change being handled hit — not yet cleared, and not updated by it, so
        their sums are not over the current rows. Under the lock."""
        for s, inst in enumerate(self.instances):
            if s != r and s not in stale and inst is not None and inst.input_head:
                return inst.head.gram.copy(), inst.head.counts.copy()
        return None

    def _build_all(self, data: RowData, each) -> list:
        """Build every instance on ``data`` (a fit): :meth:`_build`'s results, bit for bit,
        with the work that instances sharing an input head have in common — the head's
        features and their Gram sums over every row — done once
        (:func:`.builds.build_instances`). Each instance's seconds (its own
        work and its share of the common work) go to ``rebuild_seconds``."""
        seconds: list[float] = []
        built = build_instances(
            self.config.schema,
            data,
            range(self.config.n_instances),
            self.config.random_state,
            self.config.label_mode,
            work=self._row_work,
            each=each,
            seconds=seconds,
        )

        def refresh(i: int) -> None:
            started = time.perf_counter()
            built[i][0].refresh()  # here, not in the first prediction after the fit
            seconds[i] += time.perf_counter() - started

        each(refresh, range(len(built)))
        self.rebuild_seconds.extend(seconds)
        return built

    def _build(self, r: int, data: RowData, head_gram=None):
        """Build instance ``r`` on ``data``: its schema from D°_r (small, trained here), then
        every labeled row's contribution in chunks, reduced exactly.

        The chunks run through the row work when one is set (:meth:`set_row_work`;
        forgetting.distributed sets a dask one: fit and rebuilds then run on the workers) and
        in this process otherwise,
        one chunk at a time, so a build's transient memory is one chunk's. Chunks start at
        multiples of the float block size, so the result equals
        :func:`forgetting.instance.build_instance` bit for bit
        (tests/distributed/test_distributed.py).
        """
        started = time.perf_counter()
        result = build_instance(
            self.config.schema,
            data,
            r,
            self.config.random_state,
            self.config.label_mode,
            work=self._row_work,
            head_gram=head_gram,
        )
        result[0].refresh()  # here (a fit, or a rebuild's thread), not in the next prediction
        self.rebuild_seconds.append(time.perf_counter() - started)
        return result

    # -- rebuilds ------------------------------------------------------------------------
    def _start_rebuilds(self, hit: Sequence[int]) -> None:
        for r in hit:
            if self.instances[r] is None and self._jobs.running(r):
                # A rebuild is in flight: when it lands it sees that rows of its D° changed
                # and starts over from a fresh snapshot. Starting a second one would only
                # compete with it for the CPU.
                continue
            self.instances[r] = None
            self._gram_cache.release(r)  # its head leaves the stacked solve until rebuilt
            if self.config.rebuild == "sync":
                self._jobs.supersede(r)
                self._rebuild_now(r, hit)
            else:
                # The rows are copied by the rebuild's thread, in pieces (_snapshot): a copy
                # of every row here would hold the caller, and every prediction, for as long
                # as copying all the features takes.
                self._jobs.start(r, _Steps(self, r))

    def _rebuild_now(self, r: int, stale: Sequence[int] = ()) -> None:
        data = self._row_data(copy=False)
        self._install(r, *self._build(r, data, self._sibling_gram(r, stale)))

    def _snapshot(self, job: RebuildJob) -> tuple[RowData, Any, int | None] | None:
        """A private copy of the rows for a background rebuild of instance ``r``, a current
        sibling's Gram sums when they are over exactly the copied rows (else None: the build
        computes its own), and the row store's change count the copy is the state of (None
        when rows changed during the copy). None when the rebuild was superseded meanwhile.

        The copy is made in pieces with the lock released between them
        (:func:`~.rebuilds.copy_in_pieces`), so forgets and predictions proceed meanwhile.
        When nothing changed during the copy (the row store's change count) it is the state
        of one moment, the one the sibling's Gram sums were taken at. Features on disk are
        copied as one file, under the lock."""
        r = job.instance
        with self._lock:
            rows = self.rows
            if not self._jobs.current(job):
                return None
            if not isinstance(rows.X, np.ndarray) or rows.size <= rebuilds.SNAPSHOT_CHUNK_ROWS:
                return self._row_data(copy=True), self._sibling_gram(r), rows.changes
            changes, n = rows.changes, rows.size
            gram = self._sibling_gram(r)
            columns = [
                np.empty((n,) + column.shape[1:], dtype=column.dtype)
                for column in rows.primary_columns()
            ]
        copied = rebuilds.copy_in_pieces(
            self._lock, lambda: self.rows, lambda: not self._jobs.current(job), columns
        )
        if copied is None:
            return None
        with self._lock:
            consistent = self.rows.changes == changes
        if copied < n:
            columns = [column[:copied] for column in columns]
        if not consistent:
            return RowData(*columns), None, None
        return RowData(*columns), gram, changes

    def retire(self) -> None:
        """Abandon pending rebuilds (the estimator was refitted): their results are dropped."""
        with self._lock:
            self._jobs.supersede_all()

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self.pending_rebuilds():
                self._raise_errors()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"rebuilds still pending: {self.pending_rebuilds()}")
                self._changed.wait(remaining)


class _Steps:
    """A QSS instance's part of a background rebuild (forgetting._rebuilds.RebuildSteps):
    the rows copied in pieces, the instance built from them with a sibling's Gram sums, and
    reconciled with the rows present when it lands (:func:`.rebuilds.reconcile`)."""

    def __init__(self, engine: Rebuilding, r: int):
        self._engine, self._r = engine, r

    def copy(self, job: RebuildJob) -> tuple[RowData, Any, int | None] | None:
        return self._engine._snapshot(job)

    def build(self, job: RebuildJob, copy: tuple) -> tuple:
        engine = self._engine
        data, head_gram, copied_at = copy
        built = engine._build(self._r, data, head_gram)
        # matching rows by serial needs the snapshot's serials sorted: done here, not under
        # the lock, when rows changed since the copy (a peek; decided when it lands)
        order = None if engine.rows.changes == copied_at else np.argsort(data.serial)
        return built, order

    def land(self, job: RebuildJob, copy: tuple, built_order: tuple) -> bool:
        engine, r = self._engine, self._r
        data, _, copied_at = copy
        built, order = built_order
        if engine.rows.changes == copied_at:  # the rows are the copy's, row for row
            engine._install(r, *built)  # nothing to reconcile
        elif rebuilds.reconcile(
            engine.rows, r, engine.config.label_mode, data, *built, order=order
        ):
            engine._activate(r, built[0])
        else:
            return False
        engine._jobs.landed(job)
        return True
