"""The engine's state: p redundant instances over one row store, and the lock that orders
every change, rebuild and prediction.

Every instance accumulates every row; instance r's schema is trained on its own D°_r. A
deletion subtracts the row from every instance whose D°_r does not hold it and invalidates the
others (design.md §4). Invalid instances rebuild from a snapshot of the rows, in a background
thread or synchronously; when a background rebuild finishes it reconciles with the rows
present *now* (serials tell which rows changed meanwhile): rows removed or added since the
snapshot are subtracted or added, and if any of them belongs to the new D°_r the rebuild
starts over, because its schema is stale. Predictions come from the valid instances and
block only while none is valid.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np

from .. import _clock as clock
from .._parallel import PARALLEL_ROWS, map_instances, serial_map
from .._rebuilds import RebuildJobs
from .._rowwise import SERVE_BLOCK_ROWS, one_blas_thread
from ..content.fingerprint import Contributions
from ..content.heads import GramCache, solve_stacked
from ..content.tables import FlatContent
from ..instance import (
    Instance,
    RowData,
    contributions_for,
    contributions_with_features,
    schema_rows,
)
from ..privacy import PrivacyLedger, public_state_digest
from ..receipts import Receipt
from ..rows import RowStore
from ..schema.membership import draws as keyed_draws
from ..schema.membership import (
    key_fingerprint,
    receipt_hashes,
)
from ..schema.selection import schema_problem
from .builds import RowWork, computed_by, matches_rows
from .certified import CertifiedLabels
from .config import EngineConfig, RebuildError
from .rebuilding import Rebuilding
from .restore import EngineSnapshots
from .serving import combine, contents_in_jobs, encode_served, privatizer, serves_head

STATE_FORMAT = b"forgetting-state-v1"
REBUILD_THREAD_PREFIX = "qss-rebuild-"
"""Name prefix of a background rebuild's thread (instance index appended)."""
REMOTE_INSERT_ROWS = 4096
"""An insert of at least this many labeled rows into a model fitted on a cluster
(``row_work`` with ``remote``: forgetting.distributed) computes its rows' contributions on the
workers; below it, shipping the schema and the rows costs more than computing them here."""


class QSSEngine(Rebuilding, CertifiedLabels, EngineSnapshots):
    """The stateful core behind QSSClassifier and QSSRegressor (no scikit-learn surface)."""

    def __init__(self, config: EngineConfig, key: bytes, n_features: int, target_dtype):
        self.config = config
        self._key = key
        p = config.n_instances
        self.rows = RowStore(n_features, p, config.schema.membership, target_dtype)
        self.instances: list[Instance | None] = [None] * p
        self._bulk_change = False
        """A change of ≥ PARALLEL_ROWS rows left work for the next read (see _predict_outputs)."""
        self.privacy: PrivacyLedger | None = None
        """mode="dp": the calibrated mechanism and the record of releases."""
        if config.private:
            self.privacy = PrivacyLedger(
                config.epsilon,
                config.delta,
                task=config.schema.task,
                n_instances=p,
                clip=config.schema.residual_clip,
            )
        self.rebuild_seconds: list[float] = []
        self._gram_cache = GramCache()
        """The factorization of the head Gram sums last solved (content.heads.GramCache)."""
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._jobs = RebuildJobs(self._changed, REBUILD_THREAD_PREFIX)
        """The background rebuilds (forgetting._rebuilds: the one instance manager)."""
        self._digest_prefix = hashlib.sha256(STATE_FORMAT)
        """The state digest's hash over what never changes (the configuration and the key's
        fingerprint), copied by every :meth:`state_digest` (every receipt has one) rather than
        hashed again."""
        self._digest_prefix.update(config.public_params.encode())
        self._digest_prefix.update(key_fingerprint(key).encode())
        self._on_install: Callable[[int], None] | None = None
        """Called (under the engine lock) whenever an instance is (re)built and installed
        (:meth:`set_install_hook`)."""
        self._row_work: RowWork | None = None
        """Where builds compute their rows' contributions (None: here, in one pass)."""

    # -- hooks -----------------------------------------------------------------------------
    def set_row_work(self, work: RowWork | None) -> None:
        """Compute every build's rows in chunks through ``work`` (forgetting.distributed: on
        a dask cluster, or streamed from disk); None computes them here in one pass. The
        bits are the same either way."""
        self._row_work = work

    @property
    def row_work(self) -> RowWork | None:
        """The row work set by :meth:`set_row_work` (None: local, one pass)."""
        return self._row_work

    @property
    def membership_key(self) -> bytes:
        """The membership key, for row work that computes the keyed draws elsewhere
        (forgetting.distributed sends it to its workers). Secret: never log or store it."""
        return self._key

    def spill_rows(self, rows_dir: str | os.PathLike) -> None:
        """Keep the rows' features in a file in ``rows_dir`` instead of RAM (see
        ``RowStore.spill``); call under :meth:`locked`."""
        self.rows.spill(rows_dir)

    # -- row data ------------------------------------------------------------------------
    def _draws(self, id_bytes: Sequence[bytes]) -> np.ndarray:
        return keyed_draws(self._key, id_bytes, self.config.n_instances)

    def _row_data(self, copy: bool) -> RowData:
        """The rows' columns, as views or as a private copy (a background rebuild's snapshot).

        With the features on disk (``RowStore.spill``) X is a file view, or a copy of the file:
        a build streams it in chunks (:meth:`set_row_work`), so its memory is one chunk's.
        """
        n = self.rows.size
        take = (lambda a: a[:n].copy()) if copy else (lambda a: a[:n])
        others = self.rows.primary_columns()[1:]  # RowData's order, as _snapshot copies them
        return RowData(self.rows.features(n, copy=copy), *(take(a) for a in others))

    def _problem(self, data: RowData, instance: int) -> str | None:
        members, pool = schema_rows(
            data, instance, self.config.schema.membership, self.config.label_mode
        )
        n_codebook = len(members) if pool is None else len(pool)
        problem = schema_problem(len(members), n_codebook, self.config.schema.n_centroids)
        return None if problem is None else f"instance {instance}: {problem}"

    def check_trainable(self, data: RowData, instances: Sequence[int]) -> None:
        """Raise ValueError if any of ``instances`` could not train a schema on ``data``."""
        self._raise_problems([p for r in instances if (p := self._problem(data, r))])

    def _raise_problems(self, problems: list[str]) -> None:
        if problems:
            raise ValueError(
                "too few rows to train a schema: "
                + "; ".join(problems)
                + f" (rho={self.config.schema.rho}); raise rho or provide more rows"
            )

    # -- fit -----------------------------------------------------------------------------
    def fit(self, ids, id_bytes, X, targets, *, draws=None, row_hash=None, rows_dir=None) -> None:
        """Replace every row and build every instance on them.

        ``draws`` and ``row_hash`` (keyed draws and identity hashes of the rows) may come
        precomputed — :mod:`forgetting.distributed` computes them on the workers next to the
        rows, and then passes ``id_bytes=None``; they are pure per-row functions, so the state
        is the same either way. With ``rows_dir`` the features are kept in a file there
        instead of RAM (``X`` may then be a :class:`~forgetting.rows.DiskRows` itself).
        """
        with self._lock:
            if draws is None:
                draws = self._draws(id_bytes)
            candidate = RowStore(
                self.rows.n_features,
                self.config.n_instances,
                self.config.schema.membership,
                self.rows.target_dtype,
                rows_dir=rows_dir,
            )
            candidate.append(
                ids,
                id_bytes,
                X,
                targets,
                draws,
                in_pool=self.config.label_mode,
                row_hash=row_hash,
            )
            self.rows, previous = candidate, self.rows
            try:
                data = self._row_data(copy=False)
                self.check_trainable(data, range(self.config.n_instances))
                self._jobs.supersede_all()  # a rebuild in flight ends without landing
                # The builds' tasks (schemas, chunks) run one per core here; with a dask
                # ``row_work`` the workers already share every build's chunks, so they go
                # one at a time.
                local = self._row_work is None and self.rows.size >= PARALLEL_ROWS
                each = map_instances if local else serial_map
                built = self._build_all(data, each)
            except BaseException:
                self.rows = previous
                raise
            for r, result in enumerate(built):
                self._install(r, *result)

    def _install(self, r: int, instance: Instance, pos, contrib: Contributions) -> None:
        # _install only receives _build results nothing else holds (a fit, a sync rebuild):
        # the store keeps their arrays instead of copying them (a second copy of every row)
        self.rows.set_instance_rows(r, pos, contrib, adopt=True)
        self._activate(r, instance)

    def _share(self, r: int, instance: Instance) -> None:
        """Give instance ``r``'s head the engine's Gram cache: heads with equal Gram sums factor
        them once per change. A "shared-ridge" head on the features as given (the same Gram
        in every instance) is also placed in slot r of the stacked solve (design.md §5.13)."""
        if instance.head is None:
            return
        slot = (r, self.config.n_instances) if instance.input_head else None
        instance.head.share_solves(self._gram_cache, slot)

    def _solve_heads(self, instances: Sequence[Instance]) -> None:
        """Solve the stacked heads of ``instances`` changed since their last solve, together
        (content.heads.solve_stacked: three LAPACK/BLAS calls for all of them) — unless the
        gain filter tracks them (content.heads.gain_filter): then where it is certain the tables
        serve, nothing is solved, and the first head it is unsure of solves all p."""
        heads = [inst.head for inst in instances if inst.head is not None and inst.content is None]
        stacked = [inst.head for inst in self.instances if inst is not None and inst.input_head]
        if heads and self._gram_cache.filter_engaged(stacked):
            return  # the gain filter decides first; a head it cannot decide for solves all
        solve_stacked(heads, self._gram_cache)

    def _activate(self, r: int, instance: Instance) -> None:
        """Make a fully built instance serve, and tell the listener."""
        self._share(r, instance)
        self.instances[r] = instance
        self._changed.notify_all()
        if self._on_install is not None:
            self._on_install(r)

    # -- queries -------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        return self.rows.size

    @property
    def n_instances(self) -> int:
        return self.config.n_instances

    def has_id(self, row_id) -> bool:
        return row_id in self.rows.position

    def unknown_ids(self, ids: Sequence) -> list:
        """The ids of ``ids`` that no row holds (one vectorized lookup: RowStore.unknown_ids)."""
        return self.rows.unknown_ids(ids)

    def known_ids(self, ids: Sequence) -> list:
        """The ids of ``ids`` that a row holds, in order (one vectorized lookup)."""
        return [ids[i] for i in np.flatnonzero(self.rows.lookup(ids) >= 0).tolist()]

    def ids(self) -> list:
        with self._lock:
            return list(self.rows.ids)

    def effective_rho(self) -> float:
        """Mean over instances of |D°_r| / labeled rows (see RowStore.effective_rho)."""
        with self._lock:
            return self.rows.mean_effective_rho()

    def class_counts_without(self, ids: Sequence) -> np.ndarray:
        """Labeled rows per class if the rows ``ids`` lost their labels (classification)."""
        with self._lock:
            return self.rows.class_counts_without(self.rows.positions_of(ids))

    def valid_instances(self) -> list[int]:
        return [r for r, inst in enumerate(self.instances) if inst is not None]

    def pending_rebuilds(self) -> list[int]:
        return [r for r, inst in enumerate(self.instances) if inst is None]

    def _serving(self) -> list[Instance]:
        """The valid instances, waiting while there are none (all p rebuilding)."""
        with self._changed:
            while True:
                valid = [inst for inst in self.instances if inst is not None]
                if valid:
                    return valid
                self._raise_errors()
                self._changed.wait()

    def corrections(self) -> list[str | None]:
        """What each instance adds to g when serving: "head" (the exact ridge head), "tables"
        (flat partition), "codebook" (RQ), or None while it rebuilds."""
        with self._lock:
            if self.privacy is None:
                self._solve_heads([inst for inst in self.instances if inst is not None])
            kinds: list[str | None] = []
            for inst in self.instances:
                if inst is None:
                    kinds.append(None)
                    continue
                content = self._content(inst)
                if isinstance(content, FlatContent):
                    kinds.append("head" if content.head is not None else "tables")
                else:
                    kinds.append("codebook")
            return kinds

    def _raise_errors(self) -> None:
        for job in self._jobs.failed():
            raise RebuildError(
                f"background rebuild of instance {job.instance} failed: {job.error}"
            ) from job.error

    def predict_outputs(self, X: np.ndarray, instance: int | None = None) -> np.ndarray:
        """Mean over valid instances (or the one asked for) of g(x) + α Σ_m μ_m[c_m(x)].

        Each valid instance is exactly the instance a refit would build, so the mean over the
        valid ones is exact too; once no rebuild is pending it is the mean over all p.
        """
        with one_blas_thread():
            return self._predict_outputs(X, instance)

    def _predict_outputs(self, X: np.ndarray, instance: int | None) -> np.ndarray:
        with self._changed:
            if instance is None:
                served = self._serving()
            else:
                if self.instances[instance] is None:
                    raise RuntimeError(f"instance {instance} is rebuilding")
                served = [self.instances[instance]]
            # After a bulk change each instance's content (deferred table totals, probe terms,
            # its head solve) is milliseconds of work: each on its own core (_parallel). After
            # a few rows it is a fraction of a millisecond, less than a thread hand-off costs
            # — except where it is re-materialized whatever changed (the RQ codebook's).
            if self.privacy is None:  # mode="dp" serves no head
                self._solve_heads(served)
            costly = sum(inst.content_is_costly for inst in served) > 1
            if costly and self.privacy is None:
                alpha, shrinkage = self.config.alpha, self.config.shrinkage
                contents = contents_in_jobs(served, alpha, shrinkage)
            else:
                each = map_instances if self._bulk_change or costly else serial_map
                contents = each(self._content, served)
            self._bulk_change = False
            # with whether each serves its head: only then does it read the head's inputs
            parts = [
                (inst, inst.schema, c, serves_head(c))
                for inst, c in zip(served, contents, strict=True)
            ]
        # φ, g and the cells depend on the (immutable) schema only: computed without the lock,
        # by the serving route (schema.serving: each row's bits its own, whatever the batch or
        # the instances served); a head's inputs only where an instance serves its head
        schemas = [part[1] for part in parts]
        encoded, normalized, each = encode_served(schemas, X, [part[3] for part in parts])

        def outputs_of(item):
            (inst, schema, content, head), (codes, g, Z) = item
            if isinstance(content, FlatContent):
                content = self._content(inst)
                if serves_head(content) and not head:
                    # a change landed between the choice above and this lock, and the head
                    # serves now: its inputs after all (φ, which encode returned, may not be)
                    Z = schema.served_inputs(Z, X, SERVE_BLOCK_ROWS, normalized)
            return combine(schema, content, codes, g, Z)

        with self._lock:
            # Flat tables are read in place (nothing is materialized), so their cells are
            # gathered under the lock, with the (α, λ) of the very state they hold — by the
            # pool's threads too for many rows (they only read; the caller holds the lock,
            # and the gather is a compiled kernel that releases the GIL)
            outs = each(outputs_of, list(zip(parts, encoded, strict=True)))
        total = outs[0]
        for out in outs[1:]:  # summed in instance order, whoever computed them
            total = total + out
        return total / len(parts)

    def _content(self, inst: Instance):
        """The instance's served content; in mode="dp" materialized from noised fold sums."""
        if self.privacy is None:
            return inst.content_for(self.config.alpha, self.config.shrinkage)
        privatize = privatizer(self.privacy, self._key, inst, self.instances.index(inst))
        return inst.content_for(self.config.alpha, self.config.shrinkage, privatize)

    # -- forget --------------------------------------------------------------------------
    def forget(self, ids: Sequence, id_bytes: Sequence[bytes], erase_inputs: bool) -> Receipt:
        """Remove rows (exact mode, or label mode with ``erase_inputs``) or their labels."""
        started = clock.start()
        with one_blas_thread(), self._lock:
            pos = self.rows.positions_of(ids)
            label_only = self.config.label_mode and not erase_inputs
            if label_only and not np.all(self.rows.labeled(pos)):
                unlabeled = [ids[i] for i in np.flatnonzero(~self.rows.labeled(pos))[:5]]
                raise KeyError(f"rows have no label left to forget: {unlabeled}")
            holding = self.rows.instances_holding(pos)
            hit = self._hits(pos, self.config.label_mode and erase_inputs, holding)
            self._check_after_removal(pos, hit, label_only)
            kept = [r for r, inst in enumerate(self.instances) if inst is not None and r not in hit]
            labeled = pos[self.rows.labeled(pos)]
            # one folds array for every instance: the gain filter knows it by identity
            folds = self.rows.folds(labeled)
            features = self._input_head_features(kept, labeled, folds)
            each = map_instances if len(pos) >= PARALLEL_ROWS else serial_map
            each(lambda r: self._subtract(r, self.instances[r], labeled, folds, features), kept)
            self._bulk_change = self._bulk_change or len(pos) >= PARALLEL_ROWS
            if label_only:
                self.rows.unlabel(pos, id_bytes, holding)
            else:
                self.rows.remove(pos, holding)
            if self.privacy is not None:
                self.privacy.record_forgotten(self._key, id_bytes)
            self._start_rebuilds(hit)
            return self.receipt(
                "forget", "label" if label_only else "instance", id_bytes, hit, started
            )

    def _hits(
        self, pos: np.ndarray, pool_changes: bool, holding: np.ndarray | None = None
    ) -> list[int]:
        """Instances whose schema depends on any of the rows at ``pos`` (``holding``: the
        row store's instances_holding(pos), when the caller has it)."""
        if pool_changes and np.any(self.rows.in_pool[pos]):
            return list(range(self.config.n_instances))
        if holding is None:
            holding = self.rows.instances_holding(pos)
        return holding.tolist()

    def _check_after_removal(self, pos: np.ndarray, hit: list[int], label_only: bool) -> None:
        """Raise as check_trainable would if a hit instance could not train a schema once the
        rows at ``pos`` are removed (or, ``label_only``, unlabeled). Counted by the row store
        from those rows alone (RowStore.schema_sizes_after): no O(n) copy of any column per
        D° hit."""
        if not hit:
            return
        schema = self.config.schema
        label_mode = self.config.label_mode
        # schema_problem only tells sizes apart below 2 (D°) and below the centroids (the
        # codebook's rows: D° itself outside label mode, the pool in label mode)
        cap = 2 if label_mode else max(2, schema.n_centroids or 2)
        sizes, pool = self.rows.schema_sizes_after(pos, hit, unlabel=label_only, cap=cap)
        problems = []
        for r, n_schema in zip(hit, sizes, strict=True):
            problem = schema_problem(n_schema, pool if label_mode else n_schema, schema.n_centroids)
            if problem is not None:
                problems.append(f"instance {r}: {problem}")
        self._raise_problems(problems)

    def _contributions(self, inst: Instance, pos: np.ndarray) -> Contributions:
        """What the stored rows at ``pos`` contribute under ``inst``'s schema."""
        rows = self.rows
        return contributions_for(inst.schema, rows.X[pos], rows.targets[pos], rows.row_hash[pos])

    def _input_head_features(
        self, kept: list[int], labeled: np.ndarray, folds: np.ndarray
    ) -> np.ndarray | None:
        """The leaving labeled rows' head features (rows at ``labeled``, in ``folds``),
        computed once when every instance in ``kept`` has a head on the input itself
        (Instance.input_head: the same numbers in each), else None (each instance computes
        its own). Read-only, so the Gram cache may know them by identity; a batch's fold
        Grams are computed here too, both folds at once (GramCache.prepare)."""
        if len(kept) < 2 or not all(self.instances[r].input_head for r in kept):
            return None
        features = self.instances[kept[0]].head_inputs(self.rows.features_at(labeled))
        features.flags.writeable = False
        self._gram_cache.prepare(features, folds)
        return features

    def _subtract(
        self, r: int, inst: Instance, labeled: np.ndarray, folds: np.ndarray, features=None
    ) -> None:
        """Subtract the labeled rows at ``labeled`` (their ``folds``) from instance r."""
        inst.subtract_rows(
            self.rows.contributions(r, labeled),
            folds,
            self.rows.features_at(labeled) if features is None else None,
            features,
        )

    # -- insert --------------------------------------------------------------------------
    def insert(self, ids, id_bytes, X, targets) -> Receipt:
        started = clock.start()
        with self._lock:
            if self.privacy is not None:
                self.privacy.check_insert(self._key, id_bytes)
            draws = self._draws(id_bytes)
            pos = self.rows.append(ids, id_bytes, X, targets, draws)
            hit = self._hits(pos, pool_changes=False)
            labeled = pos[self.rows.labeled(pos)]
            folds = self.rows.folds(labeled)
            kept = [r for r, inst in enumerate(self.instances) if inst is not None and r not in hit]
            each = map_instances if len(labeled) >= PARALLEL_ROWS else serial_map
            work = self._row_work
            remote = getattr(work, "remote", False) and len(labeled) >= REMOTE_INSERT_ROWS
            rows = self.rows
            X_new, targets, hashes = rows.X[labeled], rows.targets[labeled], rows.row_hash[labeled]

            def encode(r: int):
                """(contributions, the head's part): head sums from the cluster's workers
                (one instance after the other; the workers share its chunks), or head
                features computed here with the contributions (one φ pass per instance)."""
                if remote:
                    schema = self.instances[r].schema
                    return computed_by(work, self.config.schema, schema, rows, labeled)
                schema = self.instances[r].schema
                return contributions_with_features(schema, X_new, targets, hashes)

            try:
                computed = (serial_map if remote else each)(encode, kept)
                for r, (contrib, _) in zip(kept, computed, strict=True):
                    rows.set_instance_rows(r, labeled, contrib)
            except BaseException:
                rows.remove(pos)
                raise

            def add(item) -> None:
                inst, (contrib, head_part) = item
                (inst.add_computed if remote else inst.add_encoded)(contrib, folds, head_part)

            each(add, list(zip((self.instances[r] for r in kept), computed, strict=True)))
            self._bulk_change = self._bulk_change or len(labeled) >= PARALLEL_ROWS
            self._start_rebuilds(hit)
            return self.receipt("insert", "instance", id_bytes, hit, started)

    # -- digests and receipts ------------------------------------------------------------
    def state_digest(self) -> str:
        """SHA-256 over configuration, key fingerprint, row multiset and every schema.

        The integer content of a valid instance is a deterministic function of its schema and
        the row multiset, so committing to both commits to the content; ``audit_content``
        checks that function against the live accumulators.
        """
        with self._lock:
            h = self._digest_prefix.copy()  # STATE_FORMAT, the parameters, the fingerprint
            h.update(self.rows.size.to_bytes(8, "little"))
            h.update(self.rows.multiset_hash.to_bytes(32, "little"))
            for inst in self.instances:
                h.update(b"invalid" if inst is None else inst.digest())
            if self.privacy is not None:
                # The plain digest is an unkeyed function of the labels: publish a keyed one.
                return public_state_digest(self._key, h.hexdigest())
            return h.hexdigest()

    def audit_content(self) -> bool:
        """Recompute every valid instance's contributions from the stored rows and compare
        them with the stored ones, the accumulators and the content fingerprint."""
        with self._lock:
            return all(
                matches_rows(self.config.schema, inst, self.rows, r)
                for r, inst in enumerate(self.instances)
                if inst is not None
            )

    def receipt(self, operation, scope, id_bytes, hit, started, background=None) -> Receipt:
        """The receipt of a change that hit the instances ``hit``; ``background``: whether
        they rebuild in the background (None: they do when there are any), else they were
        rebuilt in the call (a refit)."""
        return Receipt(
            operation=operation,
            scope=scope,
            n_rows=len(id_bytes),
            id_hashes=tuple(receipt_hashes(self._key, id_bytes)),
            instances_hit=tuple(hit),
            rebuild_started=bool(hit) if background is None else bool(background and hit),
            state_digest=self.state_digest(),
            timestamp=datetime.now(UTC).isoformat(timespec="microseconds"),
            seconds=clock.elapsed(started),
            effective_rho=self.rows.mean_effective_rho(),
        )
