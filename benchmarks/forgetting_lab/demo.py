"""End-to-end demo: fit on MNIST, forget 100 rows, prove the result equals a refit.

Run with ``python -m forgetting_lab.demo`` (or ``make demo``). It prints accuracy, per-deletion
latency of the fast path and of rebuilds (reported separately, never hidden), the time a full
retrain takes for the same deletions, and the bitwise comparison with a model refitted from
scratch without the forgotten rows.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from tqdm import tqdm

from forgetting import QSSClassifier

from .datasets import load_dataset


class _Steps:
    """Numbered progress lines ("[2/4] fitting ..."), flushed at once: each step that takes
    seconds says so before it starts."""

    def __init__(self, total: int):
        self.total, self.done = total, 0

    def __call__(self, what: str) -> None:
        self.done += 1
        print(f"[{self.done}/{self.total}] {what} ...", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m forgetting_lab.demo",
        description="Fit QSS on a real dataset, forget rows one by one, and verify that the "
        "model is bit-for-bit the one a refit without those rows gives.",
    )
    parser.add_argument("--dataset", default="mnist", help="mnist, fashion_mnist or digits")
    parser.add_argument("--n-forget", type=int, default=100, help="rows to forget (default 100)")
    parser.add_argument("--rho", type=float, default=None, help="schema fraction ρ")
    parser.add_argument("--mode", default="exact", choices=["exact", "label"])
    args = parser.parse_args(argv)

    step = _Steps(4)
    step(f"loading {args.dataset}")
    data = load_dataset(args.dataset)
    X, y = data.X_train, data.y_train
    rho = args.rho if args.rho is not None else (0.005 if len(y) >= 20_000 else 0.05)
    ids = [f"{args.dataset}-{i}" for i in range(len(y))]
    params = dict(mode=args.mode, rho=rho, random_state=0)
    print(
        f"dataset {data.name}: {len(y)} train rows, {X.shape[1]} features, "
        f"{data.n_classes} classes; mode={args.mode}, rho={rho}"
    )

    step(f"fitting QSSClassifier on {len(y)} rows (seconds)")
    started = time.perf_counter()
    model = QSSClassifier(**params).fit(X, y, ids)
    fit_seconds = time.perf_counter() - started
    print(f"fit: {fit_seconds:.2f} s; test accuracy {model.score(data.X_test, data.y_test):.4f}")

    rng = np.random.default_rng(0)
    victims = [ids[i] for i in rng.choice(len(ids), size=args.n_forget, replace=False)]
    # What a caller waits for: the forget *and* the first prediction after it, which pays any
    # re-materialization the deletion left (design.md §5.9).
    fast, forget_only, rebuilds = [], [], []
    probe = data.X_test[:1]
    step(f"forgetting {len(victims)} rows one at a time, a prediction after each")
    for victim in tqdm(victims, desc="forget", unit="row"):
        started = time.perf_counter()
        receipt = model.forget([victim])
        model.predict(probe)
        waited = time.perf_counter() - started
        if receipt.rebuild_started:
            rebuilds.append(waited)
        else:
            fast.append(waited)
            forget_only.append(receipt.seconds)
    started = time.perf_counter()
    model.wait_for_rebuilds()
    drain = time.perf_counter() - started
    step("refitting from scratch without those rows, to compare bit for bit (seconds)")

    gone = set(victims)
    keep = [i for i, row_id in enumerate(ids) if row_id not in gone]
    started = time.perf_counter()
    refit = QSSClassifier(**params).fit(X[keep], y[keep], [ids[i] for i in keep])
    retrain_seconds = time.perf_counter() - started

    same_proba = np.array_equal(model.predict_proba(data.X_test), refit.predict_proba(data.X_test))
    same_digest = model.state_digest() == refit.state_digest()
    p50 = float(np.median(fast)) if fast else float("nan")
    print(
        f"forgot {len(victims)} rows one at a time: {len(fast)} fast-path, "
        f"{len(rebuilds)} hit D° and started a background rebuild"
    )
    print(
        f"  forget + first predict p50 {p50 * 1e3:.2f} ms, p99 "
        f"{np.percentile(fast, 99) * 1e3:.2f} ms (the forget call alone: p50 "
        f"{np.median(forget_only) * 1e3:.3f} ms)"
        if fast
        else "  no fast-path deletions"
    )
    print(
        f"  rebuilds: {len(model.engine_.rebuild_seconds) - model.n_instances} built in "
        f"the background; waiting for the last took {drain:.2f} s"
    )
    print(
        f"retrain from scratch without the rows: {retrain_seconds:.2f} s "
        f"= {retrain_seconds / p50:,.0f}x the forget + first predict p50"
    )
    print(f"bitwise equal predict_proba on {len(data.y_test)} test rows: {same_proba}")
    print(f"equal state digest: {same_digest} ({model.state_digest()[:16]}…)")
    print(f"test accuracy after forgetting: {model.score(data.X_test, data.y_test):.4f}")
    return 0 if same_proba and same_digest else 1


if __name__ == "__main__":
    raise SystemExit(main())
