"""Fit throughput per instance against faiss's own encoder, on the same rows, in one run.

Run ``python -m forgetting_lab.bench.throughput`` (issue 14, item 4: fit ≥ 0.9× faiss's encoder
per instance at n = 300k). A fit of p instances computes, for every row and every instance,
φ, g, the cells, the residual and the digests, and adds them up; so its *per-instance* rate is
n·p / fit seconds. The yardstick is what faiss does for one instance's rows: encoding them
with its own residual quantizer (beam 1) of the shape the library would choose for a
codebook at this n (``choose_n_centroids``/``choose_n_levels``), on the same preprocessed rows
φ(X) as :func:`forgetting_lab.bench.core._encode_rates` uses, and — for context — on the raw rows.

Everything is timed in one process, repeats interleaved (fit, fit with the hashlib loop,
faiss, …) so that other jobs on a shared machine slow all of them alike; medians are
reported. BLAS, OpenMP and the library's per-instance threads are limited to ``--threads``
(default 1: one instance at a time, one core).
The hashlib fit (``FORGETTING_HASH_BACKEND=hashlib``: one ``hashlib`` call per row, the
package before the compiled hasher) is the "before" figure, and its state digest must equal
the compiled fit's: the hashing change is bit for bit.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting.content import blake2, kernels
from forgetting.content.fingerprint import digest_rows, digest_rows_reference
from forgetting.schema.membership import draws, ids_bytes
from forgetting.schema.selection import choose_n_centroids, choose_n_levels

from .core import clustered_data
from .report import write_results

EXPECTED_DURATION = "not recorded"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

COLUMNS = [
    "n", "d", "p", "partition", "hash_backend", "fit_s", "fit_rows_per_s",
    "fit_instance_rows_per_s", "faiss_rows_per_s", "fit_vs_faiss", "faiss_raw_rows_per_s",
    "fit_vs_faiss_raw", "rq_shape", "same_digest",
]  # fmt: skip


HASH_COLUMNS = ["stage", "rows", "per_row_loop_s", "batched_s", "speedup", "equal"]


def hashing_rows(model: QSSClassifier, repeats: int) -> list[dict]:
    """The fit's hashing stages redone alone on the fitted model's own rows: the per-row
    ``hashlib`` loop (what a fit ran before the compiled hasher) against the batched call
    that fit uses now, best of ``repeats``, outputs compared."""
    rows_ = model.engine_.rows
    n = rows_.size
    id_raw = ids_bytes(rows_.ids)
    framed = np.array([len(b).to_bytes(4, "little") + b for b in id_raw], dtype=object)
    key = model.engine_._key
    p = model.n_instances
    row_columns = (framed, rows_.targets[:n], rows_.in_pool[:n], rows_.X[:n])
    stages = {
        "row digests (id, target, pool flag, features)": (
            lambda: digest_rows_reference(*row_columns, person=b"qss-row"),
            lambda: digest_rows(*row_columns, person=b"qss-row"),
        ),
        "membership draws (keyed, per id)": (
            lambda: _draws_loop(key, id_raw, p),
            lambda: draws(key, id_raw, p),
        ),
    }
    for r in range(p):
        contrib = (rows_.row_hash[:n], rows_.codes[r][:n], rows_.residuals[r][:n])
        stages[f"content digests, instance {r} (row hash, codes, residuals)"] = (
            lambda c=contrib: digest_rows_reference(*c, person=b"qss-content"),
            lambda c=contrib: digest_rows(*c, person=b"qss-content"),
        )
    out = []
    for stage, (loop, batched) in stages.items():
        t_loop = min(_timed(loop)[0] for _ in range(repeats))
        t_batched = min(_timed(batched)[0] for _ in range(repeats))
        out.append(
            {
                "stage": stage,
                "rows": n,
                "per_row_loop_s": t_loop,
                "batched_s": t_batched,
                "speedup": t_loop / t_batched,
                "equal": bool(np.array_equal(loop(), batched())),
            }
        )
    return out


def _draws_loop(key: bytes, id_raw: list[bytes], n_instances: int) -> np.ndarray:
    """``membership.draws`` as it was: one keyed ``hashlib`` call per id."""
    width = 8 * (n_instances + 1)
    raw = b"".join(
        hashlib.blake2b(b, key=key, digest_size=width, person=b"qss-member").digest()
        for b in id_raw
    )
    return np.frombuffer(raw, dtype="<u8").reshape(-1, n_instances + 1) / float(2**64)


def _faiss_encoder(Z: np.ndarray, n_levels: int, n_centroids: int, seed: int):
    """faiss's RQ (beam 1) of shape (ℓ, b), trained on 40·b of the rows."""
    import faiss

    rq = faiss.ResidualQuantizer(Z.shape[1], n_levels, n_centroids.bit_length() - 1)
    rq.max_beam_size = 1
    rq.train_type = faiss.ResidualQuantizer.Train_default
    sample = np.random.default_rng(seed).permutation(len(Z))[: 40 * n_centroids]
    rq.train(np.ascontiguousarray(Z[sample]))
    return rq


def _timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def _fit(X, y, ids, params, backend: str):
    with kernels.using(hashing=backend):
        return _timed(lambda: QSSClassifier(**params).fit(X, y, ids))


def measure(
    n: int, d: int, repeats: int, hashlib_fit: bool, seed: int = 0
) -> tuple[list[dict], list[dict]]:
    """Median timings of fit (compiled hasher, and optionally the hashlib loop) and of faiss's
    encoder on the same rows, one row per fit variant; and the hashing stages alone."""
    X, y = clustered_data(n, d=d, seed=seed)
    ids = np.arange(n)
    params = dict(random_state=0)
    # Warm-up at a small n: loads (and on a fresh install compiles) the hasher, imports
    # faiss and sklearn's solvers, so that no timed fit pays a one-off cost.
    _fit(X[:30_000], y[:30_000], ids[:30_000], params, "numba")
    _, model = _fit(X, y, ids, params, "numba")
    p = model.n_instances
    schema = model.engine_.instances[0].schema
    Z = np.ascontiguousarray(schema.preprocessor.transform(X), dtype=np.float32)
    n_schema = int(round(model.rho * n))
    b = choose_n_centroids(n_schema, n_schema, model.rho)
    ell = choose_n_levels(b)
    encoders = {"phi": _faiss_encoder(Z, ell, b, seed), "raw": _faiss_encoder(X, ell, b, seed)}
    variants = ["numba"] + (["hashlib"] if hashlib_fit else [])
    fit_s: dict[str, list[float]] = {v: [] for v in variants}
    digests: dict[str, set[str]] = {v: set() for v in variants}
    enc_s: dict[str, list[float]] = {k: [] for k in encoders}
    for _ in tqdm(range(repeats), desc=f"n={n} repeats", unit="rep"):
        for v in variants:
            seconds, fitted = _fit(X, y, ids, params, v)
            fit_s[v].append(seconds)
            digests[v].add(fitted.state_digest())
            del fitted
        enc_s["phi"].append(_timed(lambda: encoders["phi"].compute_codes(Z))[0])
        enc_s["raw"].append(_timed(lambda: encoders["raw"].compute_codes(X))[0])
    faiss_rate = n / float(np.median(enc_s["phi"]))
    faiss_raw_rate = n / float(np.median(enc_s["raw"]))
    same = len(set().union(*digests.values())) == 1
    rows = []
    for v in variants:
        t = float(np.median(fit_s[v]))
        rows.append(
            {
                "n": n,
                "d": d,
                "p": p,
                "partition": model._partition(),
                "hash_backend": v,
                "fit_s": t,
                "fit_rows_per_s": n / t,
                "fit_instance_rows_per_s": n * p / t,
                "faiss_rows_per_s": faiss_rate,
                "fit_vs_faiss": n * p / t / faiss_rate,
                "faiss_raw_rows_per_s": faiss_raw_rate,
                "fit_vs_faiss_raw": n * p / t / faiss_raw_rate,
                "rq_shape": f"l={ell}, b={b}",
                "same_digest": same,
            }
        )
    return rows, hashing_rows(model, repeats)


def main(
    argv: list[str] | None = None, prog: str = "python -m forgetting_lab.bench.throughput"
) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Fit rows/s per instance (n·p / fit seconds, default parameters) against "
        "faiss's own residual-quantizer encoder (beam 1, the library's codebook shape for "
        "this n) on the same rows, timed side by side in one process; with the compiled "
        "BLAKE2b hasher and with the per-row hashlib loop (state digests must agree). "
        "Writes Markdown and CSV to --out.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--sizes", default="300000", help="comma-separated n")
    parser.add_argument("--d", type=int, default=64, help="features of the synthetic rows")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (medians)")
    parser.add_argument(
        "--threads", type=int, default=1, help="BLAS/OpenMP threads for fit and faiss alike"
    )
    parser.add_argument(
        "--no-hashlib-fit",
        action="store_true",
        help="skip the fits with FORGETTING_HASH_BACKEND=hashlib (the before figure)",
    )
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--name", default="throughput", help="results file name")
    args = parser.parse_args(argv)

    import faiss

    faiss.omp_set_num_threads(args.threads)
    # the library's per-instance threads (forgetting._parallel) get the same limit
    os.environ["FORGETTING_THREADS"] = str(args.threads)
    rows, hashing = [], []
    with threadpool_limits(limits=args.threads):
        for n in filter(None, args.sizes.split(",")):
            fit_rows, hash_rows = measure(int(n), args.d, args.repeats, not args.no_hashlib_fit)
            rows += fit_rows
            hashing += hash_rows
    notes = (
        "Synthetic clustered rows (`forgetting_lab.bench.core.clustered_data`: k = 10 classes, "
        f"{args.d} features), `QSSClassifier(random_state=0)` with default parameters "
        "(exact mode, partition 'auto', p = 3, ρ = 0.005). fit_instance_rows_per_s = n·p / "
        "fit_s: a fit computes every row's contribution once per instance. faiss_rows_per_s "
        "= faiss.ResidualQuantizer (beam 1) of the shape the library chooses for a codebook "
        "at this n (rq_shape), encoding instance 0's preprocessed rows φ(X) (as "
        "`bench.core` does); faiss_raw_rows_per_s the same encoder trained on and encoding "
        "the raw rows. fit_vs_faiss = fit_instance_rows_per_s / faiss_rows_per_s (the "
        "target is ≥ 0.9). hash_backend numba = the compiled batched BLAKE2b "
        "(`forgetting.content.blake2`); hashlib = FORGETTING_HASH_BACKEND=hashlib, one "
        "hashlib call per row as before it. same_digest: every timed fit of both variants "
        f"gave one state digest. {args.repeats} repeats, interleaved, medians; "
        f"{args.threads} BLAS/OpenMP thread(s) for everything; warm-up fit at n = 30,000 "
        f"first; process niceness {os.nice(0)}. Hash kernel backend: {blake2.backend()}. "
        "The second table times each hashing stage of a fit on its own, on the largest "
        "n's fitted rows (best of the repeats): per_row_loop_s = one hashlib call per row "
        "(`digest_rows_reference`, and the keyed draws as a hashlib loop), batched_s = the "
        "call fit makes now; equal = identical output."
    )
    argv = sys.argv[1:] if argv is None else argv
    command = " ".join([prog, *argv])
    md = write_results(
        Path(args.out),
        args.name,
        command,
        {
            "Fit per instance vs faiss's encoder: same rows, one run": (rows, COLUMNS),
            "Hashing stages alone: the fitted model's rows": (hashing, HASH_COLUMNS),
        },
        notes,
    )
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
