"""ForestInstances: a forest split into p instances with their own D°, rebuilt in the background.

One D° means a forget that hits it (or an insert that joins it) refits the whole forest
before the call returns. Here, as for the QSS estimators (SPEC §4, docs/design.md §4), the
trees are split into p instances, each an :class:`~.core.ExactForest` over *all* rows with its
own D°_r (column r of the keyed draws) and so its own bin grid. The rows are held once, in a
:class:`~forgetting.rows.slots.SlotRows` every instance reads; an instance keeps only its own
structures (bin codes, trees, row hashes), by slot. A change that moves D°_r marks instance r
invalid and rebuilds it on a thread from a copy of the rows; the others take the change at
once and keep serving. The rebuild is QSS's (:mod:`forgetting.engine.rebuilding`): when it
lands it is reconciled with the rows present *now* — the rows' serials say which left and
which came since the copy (:meth:`~forgetting.rows.slots.SlotRows.diff`), and the rebuilt
instance forgets and inserts them as any instance would — unless one of them moves its new
D°_r: then it starts over from a fresh copy. A newer change of the instance cancels the fit
between trees. Rebuilds fit one at a time, each on every core (and copy the rows only once
it is their turn). A change that would send the last serving instance away refits that one in
the call instead, so a request always finds an exact instance serving and never waits for
a rebuild (it waits only after a rebuild failed, or a model discarded its rebuilds); the
rows' own queries never wait.

Predictions average the serving instances' trees; once no rebuild is pending the model is a
fit on the rows held, bit for bit (each instance is, and the average runs in instance order).
With p = 1 this is exactly one :class:`~.core.ExactForest` and its synchronous refits.
"""

from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import replace

import numpy as np

from .._parallel import PARALLEL_ROWS, map_instances, serial_map
from .._rebuilds import RebuildJob, RebuildJobs
from ..rows.slots import SlotRows
from .core import ExactForest, ForestConfig

INSTANCES_FORMAT = b"forgetting-forest-instances-1"
REBUILD_THREAD_PREFIX = "forest-rebuild-"
"""Name prefix of a background rebuild's thread (instance index appended): what tells a
rebuild's work apart from the caller's, for tests and CPU accounting."""
PARALLEL_WALK_WORK = 4_000
"""A one-row change runs the instances on the machine's cores from this much walk work per
instance (:meth:`ForestInstances._walk_work`); below it the hand-off to a thread costs more
than the instance's walk (measured on sets on both sides of it: CHANGELOG.md)."""


class ForestInstances:
    """``n_instances`` exact forests sharing the trees of ``config`` (instance r holds a
    contiguous share) and the rows (:attr:`table`), each with its own D°; the surface of
    :class:`~.core.ExactForest` plus :meth:`wait_for_rebuilds`."""

    def __init__(
        self,
        config: ForestConfig,
        key: bytes,
        n_features: int,
        n_classes: int | None,
        n_instances: int = 1,
    ):
        if not 1 <= n_instances <= config.n_trees:
            raise ValueError(
                f"n_instances must be between 1 and the number of trees ({config.n_trees}), "
                f"got {n_instances}"
            )
        self.config = config
        self.n_instances = n_instances
        self.regression = n_classes is None
        self._make = (key, n_features, n_classes)
        bounds = [config.n_trees * r // n_instances for r in range(n_instances + 1)]
        self._trees = [bounds[r + 1] - bounds[r] for r in range(n_instances)]
        self._first = bounds[:-1]
        self.table: SlotRows | None = None
        """The rows every instance reads (set by :meth:`fit`)."""
        self._forests: list[ExactForest | None] = [None] * n_instances
        self._rho = [0.0] * n_instances  # ρ_r of an instance when its rebuild started
        self._thresholds = [0.0] * n_instances  # and its D° threshold
        self.rebuild_seconds: list[float] = []
        """Seconds from the change that started each landed background rebuild to its swap."""
        self.serve_waits = 0
        """Requests that found no instance serving and waited for a rebuild to land."""
        self.kept_serving = 0
        """Changes that hit every serving instance, so one of them refitted in the call
        (:meth:`_change`) rather than leave none to serve."""
        self._cond = threading.Condition(threading.RLock())
        self._jobs = self._new_jobs()

    def _new_jobs(self) -> RebuildJobs:
        """The background rebuilds (forgetting._rebuilds), one fit at a time, on every core:
        under a burst of hits the first lands in its own fit's time (three at once would
        share the cores and land together, late, while requests wait for the first)."""
        return RebuildJobs(self._cond, REBUILD_THREAD_PREFIX, one_at_a_time=True)

    def _new(self, r: int, rows: SlotRows) -> ExactForest:
        key, d, k = self._make
        config = replace(self.config, n_trees=self._trees[r])
        return ExactForest(
            config,
            key,
            d,
            k,
            instance=r,
            n_instances=self.n_instances,
            first_tree=self._first[r],
            rows=rows,
        )

    # -- instances -------------------------------------------------------------------------
    def instance(self, r: int) -> ExactForest:
        """Instance r (after its pending rebuild, if any)."""
        self.wait_for_rebuilds()
        return self._forests[r]

    def _serving(self) -> list[int]:
        """Indices of the valid instances, waiting while there are none (counted in
        :attr:`serve_waits`; a change never leaves none: :meth:`_change`). Call with the
        lock."""
        valid = [r for r, f in enumerate(self._forests) if f is not None]
        if valid:
            return valid
        self.serve_waits += 1
        while True:
            self._wait_one()
            valid = [r for r, f in enumerate(self._forests) if f is not None]
            if valid:
                return valid

    def _wait_one(self) -> None:
        """Wait for a rebuild to land (or fail: then it runs here). Call with the lock."""
        failed = self._jobs.failed()
        if failed:
            self._rebuild_here(failed[0])
            return
        self._cond.wait(timeout=1.0)

    def instance_stats(self) -> list[dict]:
        """Per instance: its index, whether it serves (else it rebuilds), its trees and
        (when valid) its D° rows."""
        with self._cond:
            out = []
            for r, forest in enumerate(self._forests):
                info = {"instance": r, "valid": forest is not None, "trees": self._trees[r]}
                if forest is not None:
                    info["pool_rows"] = forest.n_pool
                out.append(info)
            return out

    @property
    def jobs(self) -> RebuildJobs:
        """The background rebuilds (read them; they change under the lock only)."""
        return self._jobs

    @property
    def rebuilding(self) -> list[int]:
        """Instances with a rebuild pending."""
        with self._cond:
            return self._jobs.pending()

    def wait_for_rebuilds(self, timeout: float | None = None) -> None:
        """Block until no rebuild is pending (a failed one is run here and its error raised
        if it fails again). ``timeout`` in seconds: TimeoutError when it passes."""
        with self._cond:
            self._jobs.wait(timeout, self._rebuild_here)

    def discard_rebuilds(self) -> None:
        """Let the rebuilds in flight end without landing (for a model being replaced: a
        refit or a class that vanished). Only for an object no longer served."""
        with self._cond:
            self._jobs.supersede_all()

    # -- fit -------------------------------------------------------------------------------
    def fit(self, id_list: list, id_raw: list, X: np.ndarray, y: np.ndarray) -> None:
        with self._cond:
            self._jobs.supersede_all()  # they end without landing
            key, d, k = self._make
            table = SlotRows(d, self.n_instances, key, np.int64 if k else np.float64)
            table.reset(id_list, id_raw, X, y)
            forests = []
            for r in range(self.n_instances):
                forest = self._new(r, table)
                forest.grow()
                forests.append(forest)
            self.table = table
            self._forests = forests
            self._cond.notify_all()

    # -- forget / insert -------------------------------------------------------------------
    def forget(self, id_list: list) -> tuple[tuple[int, ...], bool]:
        """Remove rows by id (all known: KeyError before anything changes otherwise).
        Returns the instances whose D° held one of them (or all, for a batch large enough
        to refit), and whether they rebuild in the background (with p > 1 they do; a single
        instance refits in the call)."""
        with self._cond:
            slots = self.table.slots_of(id_list)
            valid = self._serving()
            hit = [r for r in valid if self._forests[r].forget_refits(slots)]
            return self._change(valid, hit, ("forget", id_list), slots)

    def insert(
        self, id_list: list, id_raw: list, X: np.ndarray, y: np.ndarray
    ) -> tuple[tuple[int, ...], bool]:
        """Add rows (ids all new). Returns the instances whose D° one of them joined and
        whether they rebuild in the background, as :meth:`forget`."""
        with self._cond:
            valid = self._serving()
            slots = self.table.add(id_list, id_raw, X, y)
            hit = [r for r in valid if self._forests[r].insert_refits(slots)]
            return self._change(valid, hit, ("insert", id_list, id_raw, X, y), slots)

    def _change(
        self, valid: list[int], hit: list[int], change: tuple, slots: np.ndarray
    ) -> tuple[tuple[int, ...], bool]:
        """Apply ``change`` (its rows at ``slots``) to the valid instances it does not hit
        and to the rows, start the rebuilds of those it hits, and restart the rebuilds in
        flight whose D° it moves (the old fit is cancelled between trees; the others see it
        when they reconcile). A change that hits every serving instance leaves the first of
        them serving: it refits in the call, so the next request is served at once by an
        exact instance and waits for no rebuild. A forget reaches the instances while its
        rows are in the table, an insert after they are. Call with the lock."""
        background = bool(hit) and self.n_instances > 1
        restart = self._moved_while_rebuilding(slots)
        away = set(hit) if background else set()
        if background and away.issuperset(valid):
            # never leave none serving: the first one hit takes the change in the call (a
            # refit of that instance alone), the others rebuild in the background
            away.discard(hit[0])
            self.kept_serving += 1
        take = [(r, self._forests[r]) for r in valid if r not in away]
        for r in valid:
            if r in away:
                self._rho[r] = self._forests[r].effective_rho
                self._thresholds[r] = self._forests[r].pool_threshold
                self._forests[r] = None
        apply = (  # whether a forget refits an instance was judged once, above
            (lambda rf: rf[1].forget_slots(slots, rf[0] in hit))
            if change[0] == "forget"
            else (lambda rf: rf[1].insert_slots(slots))
        )
        if take:
            self._each(len(slots), change=True)(apply, take)
        if change[0] == "forget":
            self.table.remove(slots)
        for r in restart:  # the superseded fit stops between trees
            self._start_rebuild(r)
        for r in sorted(away):
            self._start_rebuild(r)
        return tuple(hit), background

    def _each(self, n_rows: int, change: bool):
        """How the instances take a change or a prediction of ``n_rows`` rows (they share
        nothing, so the bits do not depend on the schedule). A small change runs them on the
        machine's cores when each instance's compiled walk, which releases the GIL, is long
        enough to pay for the hand-off (:data:`PARALLEL_WALK_WORK`); a large one runs them one
        after the other, as each instance's batch kernels use the cores themselves. A
        prediction of a few rows costs an instance tens of microseconds, less than handing it
        to a thread; many rows are worth spreading. Call with the lock."""
        if self.n_instances == 1:
            return serial_map
        if not change:
            return map_instances if n_rows >= PARALLEL_ROWS else serial_map
        if n_rows >= PARALLEL_ROWS:
            return serial_map
        return map_instances if self._walk_work() >= PARALLEL_WALK_WORK else serial_map

    def _walk_work(self) -> float:
        """What one row's change re-evaluates in the largest instance: its trees × the
        candidates per node × log2 of the rows (a path's length, up to a constant). Never
        waits for an instance to serve. Call with the lock."""
        d = self._make[1]
        candidates = max(1, min(self.config.n_candidates, 16 * d))
        return max(self._trees) * candidates * math.log2(max(self.table.n_rows, 2))

    def _moved_while_rebuilding(self, slots: np.ndarray) -> list[int]:
        """The rebuilding instances whose D° a change of the rows at ``slots`` moves, judged
        by the rows' keyed draws against the instance's D° threshold before its rebuild (a
        guess: a rebuild that lands still checks every change it replays). Call with the
        lock (an insert's rows are in the table already, a forget's still are)."""
        if not self._jobs.pending():
            return []
        own = self.table.draws[slots]
        return [r for r in self._jobs.pending() if np.any(own[:, r] < self._thresholds[r])]

    def _start_rebuild(self, r: int) -> None:
        """Rebuild instance r on a thread (forgetting._rebuilds runs :class:`_Steps`). Call
        with the lock."""
        self._jobs.start(r, _Steps(self, r))

    def _reconcile(self, forest: ExactForest, rows: SlotRows) -> bool:
        """Bring ``forest``, grown from the copy ``rows``, up to the live rows: it forgets
        the rows that left since the copy (while the copy still holds them), then reads the
        live rows and inserts the rows that came. False — nothing to serve — when one of
        them moves its D° (a full refit, which is the caller's to run off the lock). Call
        with the lock."""
        gone, came = rows.diff(self.table)
        if len(gone):
            if forest.forget_refits(gone):
                return False
            forest.forget_slots(gone)
        forest.rows = self.table
        if len(came):
            if forest.insert_refits(came):
                return False
            forest.insert_slots(came)
        return True

    def _land(self, job: RebuildJob, forest: ExactForest) -> None:
        """Swap the reconciled instance in. Call with the lock."""
        r = job.instance
        self._forests[r] = forest
        self._thresholds[r] = forest.pool_threshold
        self.rebuild_seconds.append(self._jobs.landed(job))

    def _rebuild_here(self, job: RebuildJob) -> None:
        """Run a failed rebuild in this thread (its error raised if it fails again). Call
        with the lock: no change lands meanwhile, so it reconciles at once."""
        rows = self.table.copy()
        forest = self._new(job.instance, rows)
        try:
            forest.grow()
        except BaseException as err:
            job.error = err
            raise
        job.error = None
        if not self._reconcile(forest, rows):  # pragma: no cover - nothing changed
            raise RuntimeError(f"instance {job.instance}: rows changed under the lock")
        self._land(job, forest)

    # -- rows ------------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        with self._cond:
            return self.table.n_rows

    def ids(self) -> list:
        with self._cond:
            return self.table.ids()

    def rows(self) -> tuple[list, list, np.ndarray, np.ndarray]:
        """(ids, id bytes, X, y) of the rows held, in storage order."""
        with self._cond:
            return self.table.rows()

    def unknown_ids(self, id_list: list) -> list:
        with self._cond:
            return self.table.unknown_ids(id_list)

    def known_ids(self, id_list: list) -> list:
        with self._cond:
            return self.table.known_ids(id_list)

    def class_counts_without(self, id_list: list) -> np.ndarray:
        with self._cond:
            return self.table.class_counts_without(id_list, self._make[2])

    def pool_ids(self) -> list:
        """Ids in any instance's D° (forgetting one rebuilds that instance), in storage
        order."""
        self.wait_for_rebuilds()
        with self._cond:
            pools = set()
            for forest in self._forests:
                pools.update(forest.pool_ids())
            return [i for i in self.table.ids() if i in pools]

    @property
    def effective_rho(self) -> float:
        """The probability that forgetting a random row rebuilds an instance, 1 − Π(1 − ρ_r)
        over the instances' shares ρ_r of rows in D°_r (independent keyed draws; a rebuilding
        instance counts with its share before the rebuild). Computed without waiting."""
        with self._cond:
            if self.n_instances == 1:
                return self._forests[self._serving()[0]].effective_rho
            keep = 1.0
            for r, forest in enumerate(self._forests):
                keep *= 1.0 - (forest.effective_rho if forest is not None else self._rho[r])
            return 1.0 - keep

    # -- serving ---------------------------------------------------------------------------
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        with self._cond:
            valid = self._valid()
            out = self._each(len(X), change=False)(lambda rf: rf[1].predict_proba(X), valid)
            return self._average([(r, values) for (r, _), values in zip(valid, out, strict=True)])

    def predict_values(self, X: np.ndarray) -> np.ndarray:
        with self._cond:
            valid = self._valid()
            out = self._each(len(X), change=False)(lambda rf: rf[1].predict_values(X), valid)
            return self._average([(r, values) for (r, _), values in zip(valid, out, strict=True)])

    def _valid(self) -> list[tuple[int, ExactForest]]:
        return [(r, self._forests[r]) for r in self._serving()]

    def _average(self, parts: list[tuple[int, np.ndarray]]) -> np.ndarray:
        """The mean over the serving instances' trees, in instance order (a fixed float
        function of which instances serve: with all of them, a refit's bits)."""
        if self.n_instances == 1:
            return parts[0][1]
        total = np.zeros_like(parts[0][1])
        for r, values in parts:
            total += self._trees[r] * values
        return total / sum(self._trees[r] for r, _ in parts)

    def flush(self) -> None:
        with self._cond:
            for _, forest in self._valid():
                forest.flush()

    @property
    def n_stale(self) -> int:
        with self._cond:
            return sum(f.n_stale for _, f in self._valid())

    def state_digest(self) -> str:
        """The instance's digest with p = 1; else SHA-256 over every instance's digest in
        order (``invalid`` for one rebuilding: the digest equals a refit's once it lands)."""
        with self._cond:
            if self.n_instances == 1:
                return self._forests[self._serving()[0]].state_digest()
            h = hashlib.sha256(INSTANCES_FORMAT)
            for forest in self._forests:
                h.update(b"invalid" if forest is None else forest.state_digest().encode())
            return h.hexdigest()

    def structure_digest(self) -> str:
        """As :meth:`state_digest`, over the instances' structure digests (after the pending
        rebuilds)."""
        self.wait_for_rebuilds()
        with self._cond:
            if self.n_instances == 1:
                return self._forests[0].structure_digest()
            h = hashlib.sha256(INSTANCES_FORMAT)
            for forest in self._forests:
                h.update(forest.structure_digest().encode())
            return h.hexdigest()

    def structure(self, tree: int) -> np.ndarray:
        """Tree ``tree`` of the whole forest in preorder (after the pending rebuilds)."""
        r = int(np.searchsorted(self._first, tree, side="right")) - 1
        return self.instance(r).structure(tree - self._first[r])

    def nbytes(self) -> int:
        """Bytes of the rows (held once) and of every serving instance's own arrays."""
        with self._cond:
            return self.table.nbytes() + sum(f.nbytes() for _, f in self._valid())

    def __getstate__(self) -> dict:
        """Pickled after the pending rebuilds, without the lock."""
        self.wait_for_rebuilds()
        with self._cond:
            skip = ("_cond", "_jobs")
            return {k: v for k, v in self.__dict__.items() if k not in skip}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("serve_waits", 0)  # pickled before they were counted
        self.__dict__.setdefault("kept_serving", 0)
        self._cond = threading.Condition(threading.RLock())
        self._jobs = self._new_jobs()


class _Steps:
    """A forest instance's part of a background rebuild (forgetting._rebuilds.RebuildSteps):
    a copy of the table, an instance grown from it, reconciled with the live rows."""

    def __init__(self, instances: ForestInstances, r: int):
        self._owner, self._r = instances, r

    def copy(self, job: RebuildJob) -> SlotRows | None:
        with self._owner._cond:
            return self._owner.table.copy() if not job.superseded else None

    def build(self, job: RebuildJob, rows: SlotRows) -> ExactForest:
        forest = self._owner._new(self._r, rows)
        forest.grow(cancelled=lambda: job.superseded)
        return forest

    def land(self, job: RebuildJob, rows: SlotRows, forest: ExactForest) -> bool:
        if not self._owner._reconcile(forest, rows):
            return False
        self._owner._land(job, forest)
        return True
