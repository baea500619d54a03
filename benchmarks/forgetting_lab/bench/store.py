"""What a deletion costs a durable model: the store's transaction included.

Run ``python -m forgetting_lab.bench.store`` (issue 15: forget-and-serve as a service user waits
for it). A :class:`~forgetting.store.DurableModel` acknowledges a ``forget`` only once the
transaction that removes the row (and, at a D° hit, clears the hit instance's schema and every
row's contribution under it) has committed — and, on SQLite, once the write-ahead log holding
old page images has been purged. So its cost is the in-memory forget plus that transaction;
at a D° hit the transaction is most of it. Measured per size, in one process:

* ``forget_predict_p50_ms`` — ``forget([id])`` and the first ``predict`` of one row after it,
  for ids outside every D° (the durable t_fast);
* ``d0_forget_ms`` — the ``forget`` call alone at a D° hit (chosen with the benchmark's own
  membership key, confirmed by the receipt), median over the hits, and
  ``d0_forget_predict_ms`` the same call with the first one-row prediction after it (what a
  caller waits for);
* ``d0_landed_s`` — from that call until the rebuilt instance is in the store (the persister
  wrote its schema and contributions), median; ``predict_max_ms`` — the longest one-row
  prediction while that happened (predictions every millisecond from the hit on);
* ``store_mb`` — the database files' size after the run;
* concurrent forgets (``--threads``): one-id ``forget`` calls from that many threads at once,
  ids outside every D° — deletions per second and each call's latency. Concurrent calls share
  the store's commits (DurableModel's group commit), so this is where that shows.

``--backend postgres`` runs against ``FORGETTING_PG_DSN`` instead of a SQLite file in a
temporary folder.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting.store import DurableModel

from .core import SECRET_KEY, clustered_data
from .costs import schema_rank
from .report import write_results

EXPECTED_DURATION = "not recorded"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

COLUMNS = [
    "n", "backend", "format", "create_s", "forget_predict_p50_ms", "forget_predict_p99_ms",
    "d0_hits", "d0_forget_ms", "d0_forget_predict_ms", "d0_landed_s", "predict_max_ms", "store_mb",
]  # fmt: skip


def _files_mb(location: str) -> float:
    if location.startswith(("postgresql://", "postgres://")):
        return float("nan")
    return sum(
        os.path.getsize(location + s) for s in ("", "-wal") if os.path.exists(location + s)
    ) / (1 << 20)


def _persisted(model: DurableModel, instances) -> bool:
    """Whether each of ``instances`` is valid and its schema is in the store."""
    stats = model.stats()["instances"]
    return all(stats[r]["persisted"] for r in instances)


CONCURRENT_COLUMNS = [
    "n", "backend", "threads", "forgets", "rows_per_s", "latency_p50_ms", "latency_p99_ms",
]  # fmt: skip


def concurrent_forgets(model: DurableModel, victims: list[int], threads: int) -> dict:
    """Deletions per second, and each call's latency, of one-id ``forget`` calls of
    ``victims`` (outside every D°) from ``threads`` threads at once."""
    latencies: list[float] = []
    lock = threading.Lock()

    def work(chunk: list[int]) -> None:
        for v in chunk:
            t = time.perf_counter()
            receipt = model.forget([v])
            elapsed = time.perf_counter() - t
            if receipt["instances_hit"]:
                raise RuntimeError("a row outside every D° hit an instance")
            with lock:
                latencies.append(elapsed)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, [victims[k::threads] for k in range(threads)]))
    elapsed = time.perf_counter() - start
    ms = np.array(latencies) * 1e3
    return {
        "threads": threads,
        "forgets": len(victims),
        "rows_per_s": len(victims) / elapsed,
        "latency_p50_ms": float(np.median(ms)),
        "latency_p99_ms": float(np.percentile(ms, 99)),
    }


def measure(
    n: int,
    location: str,
    backend: str,
    fast: int,
    hits: int,
    threads: Sequence[int] = (),
    concurrent: int = 0,
) -> tuple[dict, list[dict]]:
    """One size's row of the main table, and its rows of the concurrent-forgets table
    (``concurrent`` forgets for each thread count of ``threads``)."""
    X, y = clustered_data(n)
    ids = list(range(n))
    t0 = time.perf_counter()
    model = DurableModel.create(
        location, QSSClassifier(random_state=0, secret_key=SECRET_KEY), X, y, ids
    )
    create_s = time.perf_counter() - t0
    try:
        x = X[:1]
        model.predict(x)
        p = model.estimator.n_instances
        # the key holder's view: rows in some D° first, rows in none last
        order = np.argsort(schema_rank(ids, p, 0, SECRET_KEY))
        times = []
        outside = order[-fast:].tolist()
        for v in tqdm(outside, desc=f"n={n} outside D°", leave=False):
            t = time.perf_counter()
            receipt = model.forget([int(v)])
            model.predict(x)
            elapsed = time.perf_counter() - t
            if receipt["instances_hit"]:
                raise RuntimeError("a row outside every D° hit an instance")
            times.append(elapsed)
        # before the hits: their rebuilds would run beside the concurrent forgets
        spare = order[-(fast + concurrent * len(threads)) : -fast].tolist()
        together = []
        for k, count in enumerate(tqdm(threads, desc=f"n={n} concurrent", leave=False)):
            chunk = [int(v) for v in spare[k * concurrent : (k + 1) * concurrent]]
            together.append({"n": n, "backend": backend, **concurrent_forgets(model, chunk, count)})
        forget_ms, waited_ms, landed_s, stalls = [], [], [], []
        for v in tqdm(order[:hits].tolist(), desc=f"n={n} D° hits", leave=False):
            t = time.perf_counter()
            receipt = model.forget([int(v)])
            forget_ms.append((time.perf_counter() - t) * 1e3)
            model.predict(x)
            waited_ms.append((time.perf_counter() - t) * 1e3)
            hit = receipt["instances_hit"]
            if not hit:
                raise RuntimeError("a D° row hit no instance")
            longest = 0.0
            deadline = t + 600.0
            while not _persisted(model, hit):
                if time.perf_counter() > deadline:
                    raise RuntimeError("a rebuilt instance did not reach the store in 10 min")
                a = time.perf_counter()
                model.predict(x)
                longest = max(longest, time.perf_counter() - a)
                time.sleep(0.001)
            landed_s.append(time.perf_counter() - t)
            stalls.append(longest * 1e3)
        fast_ms = np.array(times) * 1e3
        row = {
            "n": n,
            "backend": backend,
            "format": model.stats()["store_format"],
            "create_s": create_s,
            "forget_predict_p50_ms": float(np.median(fast_ms)),
            "forget_predict_p99_ms": float(np.percentile(fast_ms, 99)),
            "d0_hits": hits,
            "d0_forget_ms": float(np.median(forget_ms)),
            "d0_forget_predict_ms": float(np.median(waited_ms)),
            "d0_landed_s": float(np.median(landed_s)),
            "predict_max_ms": float(np.max(stalls)),
            "store_mb": _files_mb(location),
        }
        return row, together
    finally:
        model.close()


def main(argv: list[str] | None = None, prog: str = "python -m forgetting_lab.bench.store") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Durable forget-and-serve: the in-memory forget plus the store's "
        "transaction, outside D° and at D° hits. Writes Markdown and CSV to --out.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--sizes", default="100000", help="comma-separated n")
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="a SQLite file in a temporary folder, or the database at FORGETTING_PG_DSN",
    )
    parser.add_argument("--fast", type=int, default=200, help="deletions outside every D°")
    parser.add_argument("--hits", type=int, default=4, help="deletions at D° hits")
    parser.add_argument(
        "--threads",
        default="1,4,16",
        help="comma-separated thread counts for the concurrent one-id forgets ('' to skip)",
    )
    parser.add_argument(
        "--concurrent", type=int, default=400, help="one-id forgets per thread count"
    )
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--name", default="store", help="results file name")
    args = parser.parse_args(argv)
    rows, together = [], []
    threads = [int(t) for t in args.threads.split(",") if t]
    with threadpool_limits(limits=1), tempfile.TemporaryDirectory() as tmp:
        for n in filter(None, args.sizes.split(",")):
            if args.backend == "postgres":
                location = os.environ.get("FORGETTING_PG_DSN", "")
                if not location:
                    parser.error("--backend postgres needs FORGETTING_PG_DSN")
            else:
                location = str(Path(tmp) / f"bench-{n}.db")
            row, concurrent = measure(
                int(n), location, args.backend, args.fast, args.hits, threads, args.concurrent
            )
            rows.append(row)
            together += concurrent
    notes = (
        "Synthetic clustered rows (`forgetting_lab.bench.core.clustered_data`: k = 10, d = 128), "
        "`QSSClassifier(random_state=0)` with default parameters (exact mode, p = 3, "
        "ρ = 0.005, background rebuilds) in a `DurableModel`; one BLAS thread. "
        "forget_predict: `forget([id])` + the first one-row `predict`, for ids outside every "
        "D° (chosen with the benchmark's membership key; the receipt confirms no hit). "
        "d0_forget_ms: the `forget` call alone at a D° hit — its transaction removes the row, "
        "clears the hit instance's schema and contributions, records the receipt, commits "
        "(synchronous=FULL on SQLite) and purges the write-ahead log; d0_forget_predict_ms adds "
        "the first one-row `predict` after it. d0_landed_s: from that "
        "call until the rebuilt instance's schema and contributions are committed by the "
        "persister; predict_max_ms: the longest one-row prediction meanwhile (one per ms). "
        "format: the store format written (v3: one table of contributions per instance; v2: "
        "contributions as columns of `rows`). "
        "Concurrent forgets: `--concurrent` one-id `forget` calls (no predictions) for ids "
        "outside every D°, spread over that many threads; rows_per_s = calls / wall time, "
        "latency per call. Concurrent calls to one model are applied in memory one after the "
        "other and committed together (DurableModel's group commit: one transaction and one "
        "log purge for all that queued while the previous group committed)."
    )
    argv = sys.argv[1:] if argv is None else argv
    md = write_results(
        Path(args.out),
        args.name,
        " ".join([prog, *argv]),
        {
            "Durable deletion: the store's transaction included": (rows, COLUMNS),
            "Concurrent one-id forgets": (together, CONCURRENT_COLUMNS),
        },
        notes,
    )
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
