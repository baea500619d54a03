"""Core benchmark: deletion latency, throughput and accuracy against the baselines.

Run ``python -m forgetting.bench.core`` (``make bench``). Speed rows use synthetic clustered
data (k = 10 classes, d = 128) at growing n with ℓ = 4, b = 256, p = 3; every timing is taken
in the same run as the thing it is compared with (ratios, not absolute times, are the point).
Accuracy rows use real data: sklearn's digits and MNIST, QSS against g-only and SISA.
Results go to ``benchmarks/results/core.md`` and CSV files beside it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from .. import QSSClassifier
from ..baselines import SISAClassifier
from ..datasets import load_dataset
from .report import write_results

DELETION_COLUMNS = [
    "n", "rho", "forget_p50_ms", "forget_p99_ms", "forget_then_predict_p50_ms",
    "batch_forget_rows_per_s", "d0_hits", "d0_forget_call_ms", "rebuild_s", "retrain_s",
    "speedup_vs_retrain", "exact_vs_refit",
]  # fmt: skip
THROUGHPUT_COLUMNS = [
    "n", "fit_s", "build_per_instance_s", "fit_rows_per_s_per_instance",
    "faiss_encode_rows_per_s", "fit_vs_faiss", "exact_encode_rows_per_s", "encode_vs_faiss",
    "predict_rows_per_s", "accumulator_mb", "row_store_mb",
]  # fmt: skip
ACCURACY_COLUMNS = ["dataset", "n_train", "rho", "model", "test_accuracy", "fit_s"]


def clustered_data(n: int, d: int = 128, k: int = 10, seed: int = 0):
    """A Gaussian mixture: 4 sub-clusters per class, classes overlapping a little."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k * 4, d)).astype(np.float32)
    component = rng.integers(0, k * 4, size=n)
    X = centers[component] + rng.normal(scale=1.2, size=(n, d)).astype(np.float32)
    return X, (component % k).astype(np.int64)


def _encode_rates(model: QSSClassifier, X: np.ndarray) -> tuple[float, float]:
    """Rows/s of faiss's own RQ encoder (beam 1, same ℓ, b) and of our exact encoder, on the
    same preprocessed rows, timed back to back."""
    schema = model.engine_.instances[0].schema
    Z = np.ascontiguousarray(schema.preprocessor.transform(X), dtype=np.float32)
    cb = schema.codebook
    rq = faiss.ResidualQuantizer(Z.shape[1], cb.n_levels, int(cb.n_centroids).bit_length() - 1)
    rq.max_beam_size = 1
    rq.train_type = faiss.ResidualQuantizer.Train_default
    rq.train(Z[np.random.default_rng(0).permutation(len(Z))[: 40 * cb.n_centroids]])
    started = time.perf_counter()
    rq.compute_codes(Z)
    faiss_rate = len(Z) / (time.perf_counter() - started)
    started = time.perf_counter()
    cb.encode(Z)
    return faiss_rate, len(Z) / (time.perf_counter() - started)


def speed_row(n: int, n_single: int, batch: int, n_levels: int, n_centroids: int) -> dict:
    X, y = clustered_data(n)
    rho = max(0.005, round(2.4 * n_centroids / n, 4))  # ≥ b schema rows per instance
    params = dict(
        rho=rho, n_levels=n_levels, n_centroids=n_centroids, n_instances=3, random_state=0
    )
    ids = np.arange(n)
    started = time.perf_counter()
    model = QSSClassifier(**params).fit(X, y, ids)
    fit_s = time.perf_counter() - started
    build = float(np.mean(model.engine_.rebuild_seconds))
    faiss_rate, exact_rate = _encode_rates(model, X)
    rows = model.engine_.rows
    in_schema = np.zeros(rows.size, dtype=bool)
    for r in range(model.n_instances):
        in_schema |= rows.members(r)
    outside = np.array(rows.ids)[~in_schema]
    inside = np.array(rows.ids)[in_schema]
    rng = np.random.default_rng(1)
    victims = rng.choice(outside, size=n_single + batch, replace=False)
    latencies, then_predict = [], []
    for v in tqdm(victims[:n_single], desc=f"n={n} forget", unit="id", leave=False):
        t0 = time.perf_counter()
        model.forget([int(v)])
        t1 = time.perf_counter()
        model.predict(X[:1])
        t2 = time.perf_counter()
        latencies.append(t1 - t0)
        then_predict.append(t2 - t0)
    t0 = time.perf_counter()
    model.forget(victims[n_single:].tolist())
    batch_rate = batch / (time.perf_counter() - t0)
    hits = rng.choice(inside, size=min(2, len(inside)), replace=False)
    d0_calls = []
    rebuild_before = len(model.engine_.rebuild_seconds)
    for v in hits:
        t0 = time.perf_counter()
        model.forget([int(v)])
        d0_calls.append(time.perf_counter() - t0)
        model.wait_for_rebuilds()
    rebuild_s = float(np.mean(model.engine_.rebuild_seconds[rebuild_before:]))
    t0 = time.perf_counter()
    model.predict(X[:20_000])
    predict_rate = min(n, 20_000) / (time.perf_counter() - t0)
    acc_bytes = sum(
        i.accumulators.sums.nbytes
        + i.accumulators.counts.nbytes
        + i.accumulators.pair_counts.nbytes
        for i in model.engine_.instances
    )
    store = model.engine_.rows
    store_bytes = store.X.nbytes + sum(c.nbytes for c in store.codes + store.residuals)
    gone = set(victims.tolist()) | set(hits.tolist())
    keep = np.array([i for i in ids if i not in gone])
    t0 = time.perf_counter()
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    retrain_s = time.perf_counter() - t0
    exact = refit.state_digest() == model.state_digest()
    p50 = float(np.median(latencies))
    return {
        "n": n,
        "rho": rho,
        "fit_s": fit_s,
        "build_per_instance_s": build,
        "fit_rows_per_s_per_instance": n / (fit_s / model.n_instances),
        "faiss_encode_rows_per_s": faiss_rate,
        "fit_vs_faiss": (n / (fit_s / model.n_instances)) / faiss_rate,
        "exact_encode_rows_per_s": exact_rate,
        "encode_vs_faiss": exact_rate / faiss_rate,
        "forget_p50_ms": p50 * 1e3,
        "forget_p99_ms": float(np.percentile(latencies, 99)) * 1e3,
        "forget_then_predict_p50_ms": float(np.median(then_predict)) * 1e3,
        "batch_forget_rows_per_s": batch_rate,
        "d0_hits": len(hits),
        "d0_forget_call_ms": float(np.mean(d0_calls)) * 1e3,
        "rebuild_s": rebuild_s,
        "predict_rows_per_s": predict_rate,
        "accumulator_mb": acc_bytes / 2**20,
        "row_store_mb": store_bytes / 2**20,
        "retrain_s": retrain_s,
        "speedup_vs_retrain": retrain_s / p50,
        "exact_vs_refit": exact,
    }


def accuracy_rows(name: str, rho: float, n_train: int | None) -> list[dict]:
    data = load_dataset(name, n_train=n_train)
    models = {
        "g-only": QSSClassifier(rho=rho, alpha=0.0),
        "QSS-E": QSSClassifier(rho=rho),
        "QSS-L": QSSClassifier(rho=rho, mode="label"),
        "SISA (5 shards)": SISAClassifier(n_shards=5),
    }
    rows = []
    for label, model in tqdm(models.items(), desc=f"{name} accuracy", leave=False):
        t0 = time.perf_counter()
        model.fit(data.X_train, data.y_train)
        fit_s = time.perf_counter() - t0
        rows.append(
            {
                "dataset": name,
                "n_train": len(data.y_train),
                "rho": rho,
                "model": label,
                "test_accuracy": float(model.score(data.X_test, data.y_test)),
                "fit_s": fit_s,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m forgetting.bench.core",
        description="Deletion latency/throughput at growing n and accuracy vs g-only and "
        "SISA; prints Markdown tables and writes them (plus CSV) to --out.",
    )
    parser.add_argument(
        "--sizes", default="10000,100000,300000", help="comma-separated n for the speed table"
    )
    parser.add_argument("--single", type=int, default=200, help="single-id forgets per n")
    parser.add_argument("--batch", type=int, default=10_000, help="ids in the batch forget")
    parser.add_argument(
        "--accuracy",
        default="digits:0.05,mnist:0.005",
        help="dataset:rho pairs for the accuracy table ('' to skip)",
    )
    parser.add_argument("--n-train", type=int, default=None, help="subsample training rows")
    parser.add_argument("--n-levels", type=int, default=4, help="ℓ for the speed table")
    parser.add_argument("--n-centroids", type=int, default=256, help="b for the speed table")
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--name", default="core", help="results file name")
    args = parser.parse_args(argv)

    speed = [
        speed_row(
            int(n), args.single, min(args.batch, int(n) // 5), args.n_levels, args.n_centroids
        )
        for n in args.sizes.split(",")
        if n
    ]
    accuracy = []
    for item in filter(None, args.accuracy.split(",")):
        name, rho = item.split(":")
        accuracy += accuracy_rows(name, float(rho), args.n_train)
    tables = {
        f"Deletion: synthetic k=10, d=128, l={args.n_levels}, b={args.n_centroids}, p=3": (
            speed,
            DELETION_COLUMNS,
        ),
        "Fit, predict, memory: same runs": (speed, THROUGHPUT_COLUMNS),
        "Accuracy: test split, hyperparameters never tuned on it": (accuracy, ACCURACY_COLUMNS),
    }
    notes = (
        "forget_p50/p99: wall time of `forget([id])` for ids outside every D° (fast path). "
        "forget_then_predict: the same plus the first `predict` after it, which materializes "
        "the content of all p instances. D° hits are timed separately: the call itself "
        "(d0_forget_call_ms) and the background rebuild (rebuild_s). speedup_vs_retrain = "
        "retrain_s / forget_p50. fit_vs_faiss compares fit rows/s per instance (everything: "
        "validation, hashing, schema training, φ, g, encoding, accumulation) with faiss's own "
        "RQ encoder (beam 1) on the same preprocessed rows; encode_vs_faiss compares our exact "
        "encoder alone with it. exact_vs_refit: state digest "
        "after all deletions equals a refit without the rows."
    )
    argv = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m forgetting.bench.core", *argv])
    md = write_results(Path(args.out), args.name, command, tables, notes)
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
