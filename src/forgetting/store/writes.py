"""Group commit: concurrent forgets and inserts applied in memory in order, committed together.

A caller queues its request (:class:`WriteQueue`); one caller at a time leads: under the
model's lock it applies every queued request in memory, in order (each with its own receipt,
exactly as if called alone), writes them all in one transaction, answers each caller and
hands the lead to the first request queued meanwhile (handed on, not raced for: Python's
locks are not fair). A durable commit — an fsync of the log, and on SQLite the checkpoint
that erases the old page images — costs more than a one-row change in memory, so under
concurrent requests the store's cost is paid once per group instead of once per request
(benchmarks/results/store.md, concurrent one-id forgets). A request that fails its own checks
(an unknown id, say) raises for its caller alone; if the shared transaction fails, every
request in it raises and memory is restored from the store, as for a single request.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable

from ..ids import listing
from ..labels import is_labeled
from ..schema.membership import canonical_id, id_bytes
from .encode import records
from .mirror import Mirror

GROUP_REQUESTS = 256
"""Most write requests one group commit takes (DurableModel.forget / insert): bounds how
long the first of them waits for the others' in-memory changes."""


class WriteRequest:
    """One caller's forget or insert, queued for the next group commit, and its answer."""

    __slots__ = ("kind", "args", "notes", "done", "leads", "_receipt", "_error", "_event")

    def __init__(self, kind: str, args: tuple, notes: dict[str, str] | None = None):
        self.kind = kind  # "forget": (ids, erase_inputs); "insert": (X, y, ids)
        self.args = args
        self.notes = dict(notes or {})  # operator and reason, checked (receipts.attribution)
        self.done = False
        self.leads = False
        self._receipt: dict | None = None
        self._error: BaseException | None = None
        self._event = threading.Event()

    def answer(self, receipt: dict) -> None:
        self._receipt, self.done = receipt, True
        self._event.set()

    def fail(self, err: BaseException) -> None:
        self._error, self.done = err, True
        self._event.set()

    def lead(self) -> None:
        """Make this request's caller commit the next group."""
        self.leads = True
        self._event.set()

    def wait(self) -> None:
        self._event.wait()

    def outcome(self) -> dict:
        """The receipt, or the request's error raised in the caller's thread (a copy when
        the error was the group's: one exception object is not raised in two threads)."""
        if self._error is not None:
            err = self._error
            if err.__traceback__ is not None:  # raised already, in the committing thread
                with contextlib.suppress(Exception):  # an error that cannot be copied: as is
                    err = copy.copy(err)
                    err.__cause__ = self._error
            raise err
        return self._receipt  # type: ignore[return-value]


class WriteQueue:
    """The requests waiting for a group commit, and who leads the next one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: list[WriteRequest] = []
        self._leading = False  # a caller is committing a group (and will hand over the lead)

    def __len__(self) -> int:
        with self._lock:
            return len(self._queued)

    def submit(self, request: WriteRequest, commit: Callable[[], None]) -> dict:
        """Queue a write and return its receipt once its group is committed: this caller
        runs ``commit`` (which takes the group: :meth:`take`) when it leads, else it waits
        to be answered or handed the lead."""
        with self._lock:
            self._queued.append(request)
            request.leads = not self._leading
            self._leading = True
        if not request.leads:
            request.wait()  # until answered, or handed the lead
        if request.leads:
            try:
                commit()  # its group starts with this request
            finally:
                self._hand_over()
        return request.outcome()

    def take(self) -> list[WriteRequest]:
        """The next group: the first :data:`GROUP_REQUESTS` requests queued."""
        with self._lock:
            group = self._queued[:GROUP_REQUESTS]
            del self._queued[:GROUP_REQUESTS]
        return group

    def _hand_over(self) -> None:
        """The group is answered: the first request still queued leads the next one (its
        caller wakes and commits), or nobody leads until a request comes."""
        with self._lock:
            if self._queued:
                self._queued[0].lead()
            else:
                self._leading = False


class GroupCommit:
    """Applies a group of writes to the live model and commits them in one transaction.

    ``recover(err)`` restores memory from the store after a change in memory that cannot be
    committed (DurableModel's reload); it is called under the engine lock, so no prediction
    serves the lost change meanwhile.
    """

    def __init__(self, mirror: Mirror, recover: Callable[[BaseException], None]):
        self._mirror = mirror
        self._recover = recover

    def run(self, group: list[WriteRequest]) -> None:
        """Apply ``group`` in memory, in order, and commit it (callers hold the model's
        lock); every request is answered, by a receipt or an error."""
        est = self._mirror.estimator
        engine_before = est.engine_
        uncommitted: dict[str, dict] = {}  # receipt hash → this group's receipt naming it
        # (request, receipt to store, its rows' keys or records, reply to the caller)
        applied: list[tuple[WriteRequest, dict, list, dict]] = []
        answered: list[tuple[WriteRequest, dict]] = []
        try:
            # the engine lock from the first change to the commit: a prediction serves no
            # change of the group before the store has it (the same lock is held again
            # inside, for the commit, on the engine a refit may have put in its place)
            with engine_before.locked():
                for request in group:
                    before = est.state_digest()
                    try:
                        if request.kind == "insert":
                            outcome = self._insert_in_memory(*request.args, request.notes)
                        else:
                            outcome = self._forget_in_memory(
                                *request.args, uncommitted, request.notes
                            )
                    except Exception as err:
                        if est.state_digest() != before:  # it failed after changing memory:
                            self._recover(err)  # the store is the truth (the group is lost)
                            raise
                        request.fail(err)  # its checks failed: nothing of it changed memory
                        continue
                    if isinstance(outcome, dict):
                        answered.append((request, outcome))
                    else:
                        applied.append((request, *outcome))
                if applied:
                    self._commit(engine_before, applied)
            purged = self._purge_after(group)
        except BaseException as err:
            for request in group:
                if not request.done:
                    request.fail(err)
            if not isinstance(err, Exception):
                raise
            return
        for request, _receipt, _rows, reply in applied:
            if purged is None or request.kind == "insert":
                request.answer(reply)
            else:  # committed, but the old page images are still on disk: retry to purge
                request.fail(purged)
        for request, receipt in answered:  # all forgets whose rows were gone already
            if purged is None:
                request.answer(receipt)
            else:
                request.fail(purged)

    def _purge_after(self, group: list[WriteRequest]) -> Exception | None:
        """After a group with forgets (committed, or found done earlier), purge the old page
        images of removed rows from the log (SQLStore.purge_logs; a retry after a busy
        checkpoint finishes it here too); inserts leave nothing to erase. The error, when
        the purge failed: the group is committed, memory agrees with the store, and the
        forgets' callers are told to retry (idempotent) while the inserts' are answered."""
        if not any(request.kind == "forget" for request in group):
            return None
        try:
            self._mirror.store.purge_logs()
        except Exception as err:  # noqa: BLE001 - handed to the forgets' callers
            return err
        return None

    def _forget_in_memory(
        self, ids, erase_inputs: bool, uncommitted: dict[str, dict], notes: dict[str, str]
    ):
        """One request's checks and in-memory forget: (receipt to store, row keys, reply to
        the caller) when rows were removed, or the earlier receipt (a dict) when every id was
        already forgotten — found in the store or among ``uncommitted``, this group's
        receipts (updated here). ``notes``: the operator and reason the receipt records."""
        est = self._mirror.estimator
        if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
            raise TypeError("ids must be a sequence of ints or strings")
        wanted = [canonical_id(i) for i in ids]
        if not wanted:
            raise ValueError("no ids given")
        if len(set(wanted)) != len(wanted):
            raise ValueError("duplicate ids in the request")
        engine = est.engine_
        found = engine.present(wanted)
        present = [i for i, f in zip(wanted, found.tolist(), strict=True) if f]
        candidates = [i for i, f in zip(wanted, found.tolist(), strict=True) if not f]
        if present and est.mode == "label" and not erase_inputs:
            targets = engine.snapshot(ids=present, instances=[]).rows.targets
            done = ~is_labeled(targets)
            candidates += [i for i, d in zip(present, done, strict=True) if d]
            present = [i for i, d in zip(present, done, strict=True) if not d]
        earlier, unknown = [], []
        for row_id in candidates:
            id_hash = engine.receipt_hash(row_id)
            found = [uncommitted[id_hash]] if id_hash in uncommitted else []
            found = found or self._mirror.store.receipts_for(id_hash)
            if found and found[-1].get("operation") == "forget":
                earlier.append(found[-1])
            else:
                unknown.append(row_id)
        if unknown:
            raise KeyError(
                f"unknown ids (never inserted, or with no label left): {listing(unknown)}"
            )
        if not present:
            return {**earlier[-1], "already_forgotten": True}
        receipt = {**est.forget(present, erase_inputs=erase_inputs).to_dict(), **notes}
        for id_hash in receipt["id_hashes"]:  # present's keyed hashes, made by the forget
            uncommitted[id_hash] = receipt
        reply = {**receipt, "already_forgotten_ids": len(earlier)} if earlier else receipt
        return receipt, [id_bytes(i) for i in present], reply

    def _insert_in_memory(self, X, y, ids, notes: dict[str, str]) -> tuple[dict, list, dict]:
        """One insert in memory: (receipt, the new rows' records for the store, reply). The
        records carry the contributions of the instances whose stored schema is current;
        the others are written whole by the commit (Mirror.sync_instances)."""
        mirror = self._mirror
        receipt = {**mirror.estimator.insert(X, y, ids).to_dict(), **notes}
        new_ids = [canonical_id(i) for i in ids]
        engine = mirror.estimator.engine_
        with engine.locked():
            current = mirror.current_instances()
            snap = engine.snapshot(ids=new_ids, instances=current)
        rows = records(snap, mirror.next_seq, current, mirror.raw_rows_of(new_ids))
        mirror.next_seq += len(new_ids)  # a failed commit reloads it from the store
        return receipt, rows, receipt

    def _commit(self, engine_before, applied) -> None:
        """One transaction for a group's in-memory changes (``applied``: request, receipt,
        row keys or records, reply), in their order: their rows, the instances they
        invalidated, their receipts and the ledger; on failure memory is restored from the
        store before the error is raised."""
        mirror = self._mirror
        store = mirror.store
        est = mirror.estimator
        kinds = {request.kind for request, *_ in applied}
        doing = {"forget": "forgetting rows", "insert": "inserting rows"}.get(
            kinds.pop() if len(kinds) == 1 else "", "writing forgets and inserts"
        )
        try:
            with est.engine_.locked(), store.transaction(doing) as cur:
                if est.engine_ is not engine_before:
                    updates = mirror.rewrite(cur)  # the estimator refitted (mirror.rewrite)
                else:
                    for request, receipt, rows, _reply in applied:
                        if request.kind == "insert":
                            store.insert_rows(cur, rows)
                        elif receipt["scope"] == "label":
                            store.unlabel_rows(cur, rows)
                        else:
                            store.delete_rows(cur, rows)
                    updates = mirror.sync_instances(cur)
                for _request, receipt, _rows, _reply in applied:
                    store.add_receipt(cur, receipt)
                mirror.write_ledger(cur)
        except BaseException as err:
            self._recover(err)
            raise
        mirror.record(updates)
