"""Core benchmark: what a deletion costs the caller, throughput and accuracy against baselines.

Run ``python -m forgetting_lab.bench.core`` (``make bench``). Speed rows use synthetic clustered
data (k = 10 classes, d = 128) at growing n with p = 3 and the library's default partition
(``--n-levels``/``--n-centroids`` force an RQ codebook of that shape); every timing is taken
in the same run as the thing it is compared with (ratios, not absolute times, are the point).
Accuracy rows use real data: sklearn's digits and MNIST, the exact models (QSS, the exact forest)
against g-only, SISA and the full-data models a user would deploy instead (HGB, LR).
Results go to ``benchmarks/results/core.md`` and CSV files beside it.

Why the cost is measured the way it is: a user waits for ``forget`` *and* for the first
prediction after it (which pays any re-materialization the deletion left behind), and a
deletion that hits some instance's D° (probability q = 1 − (1 − ρ)^p with p instances) starts a
rebuild. So the fast-path cost t_fast is forget + first predict, the expected compute per
deletion is (1 − q)·t_fast + q·t_rebuild, and every time it is divided into (a full retrain, a
SISA shard retrain) is a fit measured in the same run. The deletion timings use only the public
estimator API (``fit``, ``forget`` and its receipt, ``predict``, ``wait_for_rebuilds``), so they
measure whatever partition and serving path the defaults select.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting._rowwise import one_blas_thread
from forgetting_lab.baselines import SISAClassifier
from forgetting_lab.datasets import load_dataset

from .costs import array_bytes, expected_cost, forget_and_predict, rebuild_rate, schema_rank
from .report import write_results

EXPECTED_DURATION = "not recorded"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

DELETION_COLUMNS = [
    "n", "rho", "p", "q_rebuild", "forget_p50_ms", "t_fast_p50_ms", "t_fast_p99_ms",
    "predict_1row_ms", "d0_hits", "d0_forget_predict_ms", "t_rebuild_s", "expected_ms",
    "retrain_s", "speedup_vs_retrain", "sisa_shard_retrain_s", "speedup_vs_sisa_shard",
    "t_fast_vs_sisa_shard", "batch_forget_rows_per_s", "random_batch_first_predict_s",
    "random_batch_rebuilt_s", "exact_vs_refit",
]  # fmt: skip
THROUGHPUT_COLUMNS = [
    "n", "fit_s", "fit_rows_per_s", "faiss_encode_rows_per_s", "exact_encode_rows_per_s",
    "encode_vs_faiss", "predict_rows_per_s", "sisa_fit_s", "model_state_mb", "row_store_mb",
]  # fmt: skip
ACCURACY_COLUMNS = [
    "dataset",
    "n_train",
    "rho",
    "model",
    "test_accuracy",
    "best full-data",
    "gap_to_best_pp",
    "fit_s",
]
SECRET_KEY = "forgetting-bench-core"
"""The benchmark's own membership key: with it the benchmark can find D° rows (as the key
holder can, :func:`~forgetting_lab.bench.costs.schema_rank`), to time D° hits on purpose."""


def clustered_data(n: int, d: int = 128, k: int = 10, seed: int = 0):
    """A Gaussian mixture: 4 sub-clusters per class, classes overlapping a little."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k * 4, d)).astype(np.float32)
    component = rng.integers(0, k * 4, size=n)
    X = centers[component] + rng.normal(scale=1.2, size=(n, d)).astype(np.float32)
    return X, (component % k).astype(np.int64)


def _encode_rates(model: QSSClassifier, X: np.ndarray) -> tuple[float, float]:
    """Rows/s of faiss's own RQ encoder (beam 1, same ℓ, b) and of our exact encoder, on the
    same preprocessed rows, timed back to back. NaN when the model's partition is not an RQ
    codebook (nothing to compare with)."""
    import faiss

    try:
        schema = model.engine_.instances[0].schema
        cb = schema.codebook
        Z = np.ascontiguousarray(schema.preprocessor.transform(X), dtype=np.float32)
        n_levels, b = int(cb.n_levels), int(cb.n_centroids)
    except AttributeError:
        return float("nan"), float("nan")
    rq = faiss.ResidualQuantizer(Z.shape[1], n_levels, b.bit_length() - 1)
    rq.max_beam_size = 1
    rq.train_type = faiss.ResidualQuantizer.Train_default
    rq.train(Z[np.random.default_rng(0).permutation(len(Z))[: 40 * b]])
    started = time.perf_counter()
    rq.compute_codes(Z)
    faiss_rate = len(Z) / (time.perf_counter() - started)
    started = time.perf_counter()
    cb.encode(Z)
    return faiss_rate, len(Z) / (time.perf_counter() - started)


def speed_row(
    n: int,
    n_single: int,
    batch: int,
    n_levels: int | None,
    n_centroids: int | None,
    sisa: bool = True,
) -> dict:
    """Fit at size n, then time single deletions (forget + first predict), D° hits with their
    rebuilds, a batch forget, a full refit and (``sisa``) one SISA shard retrain, all in one
    process; finally check the deleted model's digest against the refit's."""
    X, y = clustered_data(n)
    # ≥ b schema rows per instance for a forced codebook; the library's own rule otherwise
    rho = 0.005 if n_centroids is None else max(0.005, round(2.4 * n_centroids / n, 4))
    params = dict(rho=rho, n_instances=3, random_state=0, secret_key=SECRET_KEY)
    if n_levels is not None or n_centroids is not None:
        params.update(n_levels=n_levels, n_centroids=n_centroids)
    p = params["n_instances"]
    ids = np.arange(n)
    started = time.perf_counter()
    model = QSSClassifier(**params).fit(X, y, ids)
    fit_s = time.perf_counter() - started
    faiss_rate, exact_rate = _encode_rates(model, X)
    q = rebuild_rate(rho, p)
    order = np.argsort(schema_rank(ids.tolist(), p, 0, SECRET_KEY))
    likely_d0 = order[: int(np.ceil(2 * q * n)) + 4]  # every D° row, with a margin
    rng = np.random.default_rng(1)
    pool = np.setdiff1d(ids, likely_d0)
    victims = rng.choice(pool, size=n_single + batch, replace=False)
    x1 = X[:1]
    predict_only = []
    for _ in range(20):
        t0 = time.perf_counter()
        model.predict(x1)
        predict_only.append(time.perf_counter() - t0)
    forget_s, fast_s, hit_s, rebuild_s = [], [], [], []
    for v in tqdm(victims[:n_single], desc=f"n={n} forget+predict", unit="id", leave=False):
        call, total, receipt = forget_and_predict(model, [int(v)], x1)
        if receipt.instances_hit:  # a D° row after all: timed as a hit, not as fast path
            t_hit = time.perf_counter()
            model.wait_for_rebuilds()
            hit_s.append(total)
            rebuild_s.append(time.perf_counter() - t_hit + total)
            continue
        forget_s.append(call)
        fast_s.append(total)
    t0 = time.perf_counter()
    model.forget(victims[n_single:].tolist())
    model.predict(x1)  # timed too: a bulk change defers the tables' totals to the next read
    batch_rate = batch / (time.perf_counter() - t0)
    hits = []
    for v in likely_d0:
        if len(hits) >= 2:
            break
        started = time.perf_counter()
        _, total, receipt = forget_and_predict(model, [int(v)], x1)
        model.wait_for_rebuilds()
        hits.append(int(v))
        if receipt.instances_hit:
            hit_s.append(total)
            rebuild_s.append(time.perf_counter() - started)
    # A batch drawn at random from the remaining rows, D° rows included: at ρ = 0.5 % a
    # 20k-id batch holds ~100 D° rows of every instance, so it starts p rebuilds, and the
    # first prediction waits until one instance is back. Timed as the caller sees it.
    remaining = np.setdiff1d(ids, np.concatenate([victims, np.array(hits, dtype=np.int64)]))
    random_batch = rng.choice(remaining, size=min(batch, len(remaining) // 4), replace=False)
    t0 = time.perf_counter()
    model.forget(random_batch.tolist())
    model.predict(x1)
    random_first_s = time.perf_counter() - t0
    model.wait_for_rebuilds()
    random_rebuilt_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.predict(X[:20_000])
    predict_rate = min(n, 20_000) / (time.perf_counter() - t0)
    state_bytes = array_bytes(model.engine_.instances)
    store_bytes = array_bytes(model.engine_.rows)
    gone = np.concatenate([victims, np.array(hits, dtype=np.int64), random_batch])
    keep = np.setdiff1d(ids, gone)
    t0 = time.perf_counter()
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    retrain_s = time.perf_counter() - t0
    exact = refit.state_digest() == model.state_digest()
    del refit
    sisa_fit_s = sisa_shard_s = float("nan")
    if sisa:
        baseline = SISAClassifier(n_shards=5, random_state=0)
        # the courtesy QSS takes: one BLAS thread (on a busy 2-core machine OpenBLAS's
        # threads contend — measured: SISA's fit 30× slower without the pin)
        with one_blas_thread():
            t0 = time.perf_counter()
            baseline.fit(X[keep], y[keep], keep)
            sisa_fit_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            baseline.forget([int(keep[0])])
            sisa_shard_s = time.perf_counter() - t0
    t_fast = float(np.median(fast_s))
    t_rebuild = float(np.median(rebuild_s)) if rebuild_s else float("nan")
    expected = expected_cost(t_fast, t_rebuild, rho, p)
    return {
        "n": n,
        "rho": rho,
        "p": p,
        "q_rebuild": q,
        "fit_s": fit_s,
        "fit_rows_per_s": n / fit_s,
        "faiss_encode_rows_per_s": faiss_rate,
        "exact_encode_rows_per_s": exact_rate,
        "encode_vs_faiss": exact_rate / faiss_rate,
        "forget_p50_ms": float(np.median(forget_s)) * 1e3,
        "t_fast_p50_ms": t_fast * 1e3,
        "t_fast_p99_ms": float(np.percentile(fast_s, 99)) * 1e3,
        "predict_1row_ms": float(np.median(predict_only)) * 1e3,
        "d0_hits": len(hit_s),
        "d0_forget_predict_ms": float(np.median(hit_s)) * 1e3 if hit_s else float("nan"),
        "t_rebuild_s": t_rebuild,
        "expected_ms": expected * 1e3,
        "retrain_s": retrain_s,
        "speedup_vs_retrain": retrain_s / expected,
        "sisa_fit_s": sisa_fit_s,
        "sisa_shard_retrain_s": sisa_shard_s,
        "speedup_vs_sisa_shard": sisa_shard_s / expected,
        "t_fast_vs_sisa_shard": sisa_shard_s / t_fast,
        "batch_forget_rows_per_s": batch_rate,
        "random_batch_first_predict_s": random_first_s,
        "random_batch_rebuilt_s": random_rebuilt_s,
        "predict_rows_per_s": predict_rate,
        "model_state_mb": state_bytes / 2**20,
        "row_store_mb": store_bytes / 2**20,
        "exact_vs_refit": exact,
    }


def accuracy_rows(name: str, rho: float, n_train: int | None) -> list[dict]:
    """Test accuracy of the exact models (QSS at its defaults and the exact forest at its
    defaults) beside g-only, SISA over the paper's shards and the anchors a user would deploy
    (:mod:`forgetting_lab.bench.anchors`: HGB, LR, SISA over HGB shards), all fitted here on
    the same split; ``gap_to_best_pp`` is each model's distance to the best full-data one."""
    from forgetting import ExactForestClassifier

    from .anchors import anchor_builders, best_full_data, fit_anchor, gap

    data = load_dataset(name, n_train=n_train)
    models = {
        "g-only": QSSClassifier(rho=rho, alpha=0.0),
        "QSS-E": QSSClassifier(rho=rho),
        "QSS-L": QSSClassifier(rho=rho, mode="label"),
        "exact forest (defaults)": ExactForestClassifier(rho=rho),
        "SISA (5 shards)": SISAClassifier(n_shards=5),
    }
    models.update(
        {label: build(0) for label, (build, _) in anchor_builders(name, True, raw=False).items()}
    )
    rows = []
    for label, model in tqdm(models.items(), desc=f"{name} accuracy", leave=False):
        rows.append(
            {
                "dataset": name,
                "n_train": len(data.y_train),
                "rho": rho,
                "model": label,
                "fit_s": fit_anchor(model, data.X_train, data.y_train),
                "test_accuracy": float(model.score(data.X_test, data.y_test)),
            }
        )
    best, score = best_full_data({r["model"]: r["test_accuracy"] for r in rows}, True)
    for row in rows:
        row["gap_to_best_pp"] = round(gap(row["test_accuracy"], score, True), 2)
        row["best full-data"] = best
    return rows


def main(argv: list[str] | None = None, prog: str = "python -m forgetting_lab.bench.core") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="What a deletion costs the caller (forget + first predict, D° hits with "
        "their rebuilds, the expected cost at the rebuild rate 1 − (1 − ρ)^p) at growing n, "
        "against a full retrain and a SISA shard retrain measured in the same run; fit, "
        "predict and memory; accuracy vs g-only, SISA and full-data HGB and LR. Prints Markdown "
        "tables and writes "
        "them (plus CSV) to --out.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--sizes", default="10000,100000,300000", help="comma-separated n for the speed table"
    )
    parser.add_argument(
        "--single", type=int, default=200, help="single-id forget + predict calls per n"
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=20_000,
        help="ids in the batch forget, timed with the first prediction after it (default 20,000)",
    )
    parser.add_argument(
        "--no-sisa", action="store_true", help="skip the SISA fit and shard retrain per n"
    )
    parser.add_argument(
        "--accuracy",
        default="digits:0.05,mnist:0.005",
        help="dataset:rho pairs for the accuracy table ('' to skip)",
    )
    parser.add_argument("--n-train", type=int, default=None, help="subsample training rows")
    parser.add_argument(
        "--n-levels",
        type=int,
        default=None,
        help="ℓ for the speed table (forces the RQ codebook); default: the library's defaults",
    )
    parser.add_argument(
        "--n-centroids",
        type=int,
        default=None,
        help="b for the speed table (forces the RQ codebook); default: the library's defaults",
    )
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--name", default="core", help="results file name")
    args = parser.parse_args(argv)

    speed = [
        speed_row(
            int(n),
            args.single,
            min(args.batch, int(n) // 5),
            args.n_levels,
            args.n_centroids,
            sisa=not args.no_sisa,
        )
        for n in tqdm(args.sizes.split(","), desc="sizes", unit="n")
        if n
    ]
    accuracy = []
    for item in filter(None, args.accuracy.split(",")):
        name, rho = item.split(":")
        accuracy += accuracy_rows(name, float(rho), args.n_train)
    p = speed[0]["p"] if speed else 3
    forced = args.n_levels is not None or args.n_centroids is not None
    shape = (
        f"RQ codebook l={args.n_levels}, b={args.n_centroids}"
        if forced
        else "library defaults (exact mode)"
    )
    tables = {
        f"Deletion: synthetic k=10, d=128, p={p}, {shape}": (
            speed,
            DELETION_COLUMNS,
        ),
        "Fit, predict, memory: same runs": (speed, THROUGHPUT_COLUMNS),
        "Accuracy: test split, hyperparameters never tuned on it": (accuracy, ACCURACY_COLUMNS),
    }
    notes = (
        "**What a deletion costs.** t_fast = wall time of `forget([id])` *and* the first "
        "`predict` (one row) after it, for ids outside every D° (the first prediction pays "
        "whatever re-materialization the deletion left); p50/p99 over the single-id calls. "
        "forget_p50_ms is the `forget` call alone and predict_1row_ms a prediction when "
        "nothing changed, for reference. D° hits are chosen with the benchmark's own "
        "membership key (`forgetting.schema.membership`) and confirmed by the receipt's "
        "`instances_hit`: d0_forget_predict_ms is what the caller waits at a hit (the rebuild "
        "runs in the background), t_rebuild_s the wall time until `wait_for_rebuilds` returns. "
        "q_rebuild = 1 − (1 − ρ)^p is the chance a deletion starts a rebuild; expected_ms = "
        "(1 − q)·t_fast + q·t_rebuild, the compute per deletion. retrain_s = a full QSS fit "
        "without the deleted rows, in the same run (also the exactness check: "
        "exact_vs_refit = equal state digests); speedup_vs_retrain = retrain_s / expected. "
        "sisa_shard_retrain_s = one `SISAClassifier(n_shards=5).forget` (retrains one shard) "
        "fitted on the same rows in the same run, on one BLAS thread as QSS runs (on a busy "
        "machine OpenBLAS's threads contend: unpinned, SISA's fit ran 30× slower); "
        "speedup_vs_sisa_shard divides it by the expected cost, t_fast_vs_sisa_shard by "
        "t_fast. **Blocking is not compared here**: "
        "our SISA blocks for its shard retrain, while a SISA that serves from its S − 1 "
        "untouched shards during the retrain would answer at once (with S − 1 shards' "
        "accuracy) — so compare compute, as these columns do, not waiting time. "
        "batch_forget_rows_per_s = ids / the wall time of one `forget` of `--batch` ids "
        "outside every D° together with the first prediction after it (a bulk change leaves "
        "the tables' totals to the next read, so the prediction is part of the cost). "
        "random_batch_first_predict_s: a `forget` of `--batch` ids drawn at random from the "
        "remaining rows (D° rows included: at ρ = 0.5 % every instance is hit, p rebuilds "
        "start) and the first prediction after it, which waits for the first rebuilt "
        "instance; random_batch_rebuilt_s: until every rebuild has landed. "
        "model_state_mb = bytes of every array of the p instances (schemas + statistics), "
        "row_store_mb of the stored rows (inputs, codes, residuals). encode_vs_faiss compares "
        "our exact encoder with faiss's own RQ encoder (beam 1) on the same preprocessed rows "
        "(– when the partition is not an RQ codebook)."
    )
    argv = sys.argv[1:] if argv is None else argv
    command = " ".join([prog, *argv])
    md = write_results(Path(args.out), args.name, command, tables, notes)
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
