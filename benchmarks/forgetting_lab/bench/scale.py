"""Scale: fit, forgets and a rebuild at millions of rows on a dask LocalCluster of 1 and 2 workers.

Run ``python -m forgetting_lab.bench.scale`` (issue 14, item 3). Synthetic data — the clustered
Gaussian classes of :func:`forgetting_lab.bench.core.clustered_data`, generated chunk by chunk *on
the workers* (each chunk from its own seed, so the coordinator never holds the raw data) — is
fitted with :func:`forgetting.distributed.fit_distributed` at the library's defaults (exact
mode, random trees, p = 3 instances). For each worker count the run reports:

* fit seconds and rows/s, per worker, and per worker and instance (n·p / s / workers), next to
  faiss's own RQ encoder (beam 1, one thread) on the same preprocessed rows φ(X) — the
  yardstick :mod:`forgetting_lab.bench.throughput` uses for one instance's rows;
* peak resident memory of the coordinator and of the coordinator plus its workers (sampled
  every 0.2 s from /proc through psutil);
* forget + first predict: random rows forgotten one at a time, each followed by a one-row
  prediction (what a caller waits for, design.md §5.9); p50 and p95, and how many hit a D°
  (those start a background rebuild on the cluster while the next forgets go on);
* rebuild: the seconds of the rebuild after a D° hit of instance 0 (schema on the coordinator,
  row work on the workers).

With ``--rows-dir`` the coordinator keeps the features in a file there (DiskRows) instead of
RAM. A machine shared with other jobs slows everything; the load average is written down.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .report import write_results

EXPECTED_DURATION = "not recorded"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

COLUMNS = [
    "workers", "n", "d", "k", "p", "fit_s", "fit_rows_per_s", "rows_per_s_per_worker",
    "instance_rows_per_s_per_worker", "faiss_rows_per_s", "vs_faiss", "peak_rss_coordinator_gb",
    "peak_rss_total_gb", "schema_rows", "forgets", "forget_predict_p50_ms",
    "forget_predict_p95_ms", "forget_p50_ms", "first_predict_p50_ms", "forget_d0_hits",
    "hit_forget_predict_max_ms", "forgets_during_rebuild", "quiet_forget_predict_p50_ms",
    "rebuild_s", "load_avg",
]  # fmt: skip


def _chunk(index: int, rows: int, d: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One chunk of clustered data: the same centres for every chunk, rows from the chunk's
    own generator (so any worker can make any chunk, and a rerun makes the same rows)."""
    centers = np.random.default_rng(seed).normal(size=(k * 4, d)).astype(np.float32)
    rng = np.random.default_rng([seed, index])
    component = rng.integers(0, k * 4, size=rows)
    X = centers[component] + rng.normal(scale=1.2, size=(rows, d)).astype(np.float32)
    return X.astype(np.float32), (component % k).astype(np.int64)


def synthetic(n: int, d: int, k: int, chunk_rows: int, seed: int = 0):
    """(X, y) as dask arrays whose chunks are generated where they are computed."""
    import dask
    import dask.array as da

    X_parts, y_parts = [], []
    for i, start in enumerate(range(0, n, chunk_rows)):
        rows = min(chunk_rows, n - start)
        pair = dask.delayed(_chunk, pure=True)(i, rows, d, k, seed)
        X_parts.append(da.from_delayed(pair[0], shape=(rows, d), dtype=np.float32))
        y_parts.append(da.from_delayed(pair[1], shape=(rows,), dtype=np.int64))
    return da.concatenate(X_parts), da.concatenate(y_parts)


class PeakMemory:
    """Peak RSS of this process and of this process plus its descendants, sampled."""

    def __init__(self, interval: float = 0.2):
        import psutil

        self._me = psutil.Process()
        self.interval = interval
        self.coordinator = self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        mine = self._me.memory_info().rss
        total = mine
        for child in self._me.children(recursive=True):
            try:
                total += child.memory_info().rss
            except Exception:  # a worker that just exited
                continue
        self.coordinator = max(self.coordinator, mine)
        self.total = max(self.total, total)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def faiss_rate(model, X_sample: np.ndarray, seed: int = 0) -> float:
    """Rows/s of faiss's RQ encoder (beam 1, one thread) on φ of ``X_sample``, with the shape
    the library would choose for a codebook at this n (what one instance's rows would cost
    faiss to encode)."""
    import faiss
    from threadpoolctl import threadpool_limits

    from forgetting.schema.selection import choose_n_centroids, choose_n_levels

    schema = model.engine_.instances[0].schema
    Z = np.ascontiguousarray(schema.preprocessor.transform(X_sample), dtype=np.float32)
    n_schema = int(round(model.rho * model.n_rows_))
    b = choose_n_centroids(n_schema, n_schema, model.rho)
    rq = faiss.ResidualQuantizer(Z.shape[1], choose_n_levels(b), b.bit_length() - 1)
    rq.max_beam_size = 1
    rq.train_type = faiss.ResidualQuantizer.Train_default
    with threadpool_limits(1):
        faiss.omp_set_num_threads(1)
        rq.train(Z[np.random.default_rng(seed).permutation(len(Z))[: 40 * b]])
        started = time.perf_counter()
        rq.compute_codes(Z)
        return len(Z) / (time.perf_counter() - started)


def run_workers(args: argparse.Namespace, workers: int) -> dict:
    from distributed import Client, LocalCluster

    from forgetting import QSSClassifier
    from forgetting.distributed import fit_distributed

    rng = np.random.default_rng(args.seed)
    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            memory_limit=args.worker_memory,
        ) as cluster,
        Client(cluster) as client,
    ):
        # warm-up: imports (and the hasher's compiled kernels) on every worker
        Xw, yw = synthetic(workers * args.chunk_rows, args.d, args.k, args.chunk_rows, args.seed)
        fit_distributed(QSSClassifier(random_state=0), Xw, yw, client=client)
        X, y = synthetic(args.n, args.d, args.k, args.chunk_rows, args.seed)
        model = QSSClassifier(random_state=0, n_instances=args.instances)
        with PeakMemory() as peak:
            started = time.perf_counter()
            fit_distributed(
                model, X, y, client=client, chunk_rows=args.chunk_rows, rows_dir=args.rows_dir
            )
            fit_s = time.perf_counter() - started
        X_probe, _ = _chunk(10**6, 1, args.d, args.k, args.seed)
        sample, _ = _chunk(10**6 + 1, min(args.n, 200_000), args.d, args.k, args.seed)
        model.predict(X_probe)
        times, forget_times, predict_times, hits = [], [], [], 0
        hit_times, quiet_times, during_rebuild = [], [], 0
        for row_id in tqdm(rng.choice(args.n, size=args.forgets, replace=False), desc="forgets"):
            rebuilding = bool(model.engine_.pending_rebuilds())
            started = time.perf_counter()
            receipt = model.forget([int(row_id)])
            forgotten = time.perf_counter()
            model.predict(X_probe)
            done = time.perf_counter()
            times.append(done - started)
            forget_times.append(forgotten - started)
            predict_times.append(done - forgotten)
            hits += bool(receipt.instances_hit)
            during_rebuild += rebuilding
            if receipt.instances_hit:
                hit_times.append(done - started)
            elif not rebuilding:
                quiet_times.append(done - started)
        model.wait_for_rebuilds()
        members = model.engine_.rows.members(0)
        target = model.engine_.rows.ids[int(np.flatnonzero(members)[0])]
        before = len(model.engine_.rebuild_seconds)
        model.forget([target])
        model.wait_for_rebuilds()
        rebuild_s = float(model.engine_.rebuild_seconds[before])
        rate = args.n / fit_s
        p = model.n_instances
        faiss_rows = faiss_rate(model, sample)
        per_instance = rate * p / workers
        return {
            "workers": workers,
            "n": args.n,
            "d": args.d,
            "k": args.k,
            "p": p,
            "fit_s": fit_s,
            "fit_rows_per_s": rate,
            "rows_per_s_per_worker": rate / workers,
            "instance_rows_per_s_per_worker": per_instance,
            "faiss_rows_per_s": faiss_rows,
            "vs_faiss": per_instance / faiss_rows,
            "peak_rss_coordinator_gb": peak.coordinator / 2**30,
            "peak_rss_total_gb": peak.total / 2**30,
            "schema_rows": int(model.engine_.instances[0].schema.n_schema_rows),
            "forgets": args.forgets,
            "forget_predict_p50_ms": 1e3 * float(np.percentile(times, 50)),
            "forget_predict_p95_ms": 1e3 * float(np.percentile(times, 95)),
            "forget_p50_ms": 1e3 * float(np.percentile(forget_times, 50)),
            "first_predict_p50_ms": 1e3 * float(np.percentile(predict_times, 50)),
            "forget_d0_hits": hits,
            "hit_forget_predict_max_ms": 1e3 * max(hit_times) if hit_times else float("nan"),
            "forgets_during_rebuild": during_rebuild,
            "quiet_forget_predict_p50_ms": (
                1e3 * float(np.percentile(quiet_times, 50)) if quiet_times else float("nan")
            ),
            "rebuild_s": rebuild_s,
            "load_avg": os.getloadavg()[0],
        }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m forgetting_lab.bench.scale",
        description="Fit, forget and rebuild at n rows on a dask LocalCluster of 1 and 2 workers.",
    )
    parser.add_argument("--n", type=int, default=10_000_000, help="rows (default 10,000,000)")
    parser.add_argument("--d", type=int, default=8, help="features per row (default 8)")
    parser.add_argument("--k", type=int, default=2, help="classes (default 2)")
    parser.add_argument("--instances", type=int, default=3, help="p instances (default 3)")
    parser.add_argument(
        "--workers", default="1,2", help="comma-separated worker counts to run (default 1,2)"
    )
    parser.add_argument(
        "--chunk-rows", type=int, default=65_536, help="rows per chunk, a multiple of 1024"
    )
    parser.add_argument(
        "--worker-memory", default="6GiB", help="dask memory limit per worker (default 6GiB)"
    )
    parser.add_argument(
        "--rows-dir", default=None, help="keep the coordinator's features in a file here"
    )
    parser.add_argument("--forgets", type=int, default=40, help="rows forgotten one at a time")
    parser.add_argument("--seed", type=int, default=0, help="data and sampling seed")
    parser.add_argument("--out", default="benchmarks/results", help="output directory")
    parser.add_argument("--name", default="scale", help="output file stem")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    counts = [int(w) for w in args.workers.split(",") if w]
    command = "python -m forgetting_lab.bench.scale " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    notes = "\n\n".join(
        [
            "Synthetic clustered Gaussian data (the model of forgetting_lab.bench.core's "
            f"clustered_data: {4 * args.k} centres, k = {args.k} classes, d = {args.d}), "
            "generated chunk by chunk on the workers; QSSClassifier at defaults (exact mode, "
            f"random trees) with p = {args.instances}; chunks of {args.chunk_rows:,} rows; the "
            "coordinator keeps the features "
            + ("in a file (--rows-dir)." if args.rows_dir else "in RAM."),
            "instance_rows_per_s_per_worker = n·p / fit seconds / workers: one worker's rate "
            "per instance, the unit of faiss_rows_per_s (faiss's RQ encoder, beam 1, one "
            "thread, on 200k rows of φ(X), codebook shape the library would choose at this n). "
            "fit_s includes the coordinator's share (schema training, stores, reduction).",
            "Peak RSS is sampled every 0.2 s during the fit: the coordinator alone, and the "
            "coordinator plus its LocalCluster processes (scheduler in-process, nannies, "
            "workers).",
            "forget + first predict: random rows forgotten one at a time, each followed by a "
            "one-row predict; D° hits start a background rebuild on the cluster. "
            "forget_p50_ms and first_predict_p50_ms split the pair (the predict after a change "
            "re-derives each instance's served content: α and λ from the flat tables' totals "
            "and their D° probes). schema_rows: |D°| of instance 0 (≈ ρ·n); its tables keep "
            "min(|D°|, 4,096) of those rows as probes (forgetting.schema.probe_rows; every "
            "D° row before the cap). hit_forget_predict_max_ms: the slowest pair "
            "whose forget hit a D° (it returns after the rebuild's snapshot); "
            "forgets_during_rebuild: pairs started while a background rebuild was running "
            "(they share the coordinator with it); quiet_forget_predict_p50_ms: p50 of the "
            "pairs that neither hit a D° nor ran next to a rebuild. rebuild_s: "
            "the rebuild after forgetting one D° row of instance 0 (schema trained on the "
            "coordinator, row work on the workers).",
        ]
    )
    rows: list[dict] = []
    for workers in counts:
        print(f"n={args.n:,}: {workers} worker(s)", file=sys.stderr)
        rows.append(run_workers(args, workers))
        print(rows[-1], file=sys.stderr)
        write_results(
            Path(args.out),
            args.name,
            command,
            {"Fit, forget and rebuild on a dask LocalCluster": (rows, COLUMNS)},
            notes=notes,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
