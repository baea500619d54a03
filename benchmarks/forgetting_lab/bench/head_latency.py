"""Forget + first predict where the exact head serves: certified labels against the exact route.

Run ``python -m forgetting_lab.bench.head_latency``. A synthetic set where every instance
serves its ridge head (issue 47's shape: 60,000 rows, 520 features, 10 classes — Gaussian
classes whose means differ a little in every feature, so no cell of the tables sees them
apart and the head does), the library's default ``QSSClassifier``:

1. two copies of the model, fitted alike; one predicts as shipped (a label is served from the
   gain filter's tracked head weights when every row's winner is certain:
   ``QSSEngine.certified_labels``), the other with that route switched off (every prediction
   after a change solves the head: what the library did before);
2. single-id forgets of rows outside every D°, each followed by a one-row ``predict`` — what
   a caller waits for — the same ids for both, one model's run after the other's (taking
   turns, the exact route's factorization would evict the other's arrays from the cache
   between its forgets, which a service serving one model does not see); and batch forgets of
   ``--batch`` rows followed by a one-row predict;
3. forget ≡ refit: a fit from scratch on the rows left, compared on the test rows —
   ``predict`` (through the certified route, in 200-row calls, and in one call),
   ``predict_proba`` and the state digest — bit for bit.

``--table flights`` measures the tables path instead (issue 69): the default
``QSSClassifier`` on the flight table (all 269,421 training rows; the loader's 154 encoded
columns, and its 14 numeric columns alone), single-id forgets outside every D° each followed
by a one-row ``predict_proba``, one thread. ``--sources LABEL=SRC,...`` runs each library
source (a ``src`` folder, e.g. an older commit's worktree) in its own process, alternating
round by round, so that two codes are compared on the same machine at the same load; the
working tree's run also checks forget ≡ refit (``predict_proba`` on the test rows and the
state digest).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from .core import SECRET_KEY
from .paper.stages import in_any_schema
from .report import write_results

EXPECTED_DURATION = "about 2 min on 2 cores"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

ROUTE_COLUMNS = [
    "route", "forgets", "certified_share", "p50_ms", "p90_ms", "p99_ms", "forget_p50_ms",
    "batch_rows", "batch_forget_predict_ms",
]  # fmt: skip
EXACT_COLUMNS = ["check", "rows", "equal"]


def synthetic(n: int, n_test: int, d: int, k: int, seed: int):
    """Gaussian classes in ``d`` features whose means are N(0, 0.15²) apart per feature."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, d)) * 0.15
    y = rng.integers(0, k, n + n_test)
    X = centers[y] + rng.normal(size=(n + n_test, d))
    return X[:n], y[:n], X[n:], y[n:]


class CertifiedCounter:
    """Wraps an engine's ``certified_labels`` (``enabled`` False: always the exact route) and
    counts its calls and those that returned labels."""

    def __init__(self, engine, enabled: bool = True):
        self.engine, self.method = engine, engine.certified_labels
        self.enabled, self.calls, self.certified = enabled, 0, 0
        engine.certified_labels = self

    def __call__(self, X):
        self.calls += 1
        if not self.enabled:
            return None
        labels = self.method(X)
        self.certified += labels is not None
        return labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m forgetting_lab.bench.head_latency", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--test", type=int, default=2_000)
    parser.add_argument("--features", type=int, default=520)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--forgets", type=int, default=60)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--name", default="head-latency")
    parser.add_argument("--quick", action="store_true", help="smoke run: 3,000 rows, 64 features")
    parser.add_argument("--table", choices=["flights"], help="the tables path on a real table")
    parser.add_argument("--sources", default="", help="LABEL=SRC,... (with --table)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (--table)")
    parser.add_argument("--rows-limit", type=int, default=0, help="first N rows only (--table)")
    parser.add_argument("--table-forgets", type=int, default=200, help="timed forgets (--table)")
    args = parser.parse_args(argv)
    if args.table:
        from .head_latency_tables import tables_main

        return tables_main(args, argv)
    if args.quick:
        args.rows, args.test, args.features, args.forgets, args.batch = 3000, 300, 64, 8, 50

    from forgetting import QSSClassifier

    X, y, X_test, _ = synthetic(args.rows, args.test, args.features, args.classes, args.seed)
    ids = np.arange(len(y))
    params = dict(secret_key=SECRET_KEY, random_state=args.seed)
    models, counters = {}, {}
    for route, enabled in (("certified labels (shipped)", True), ("exact route", False)):
        started = time.perf_counter()
        model = QSSClassifier(**params).fit(X, y, ids)
        print(f"{route}: fit {time.perf_counter() - started:.1f} s, "
              f"corrections {model.corrections_}", flush=True)  # fmt: skip
        models[route] = model
        counters[route] = CertifiedCounter(model.engine_, enabled)
    first = next(iter(models.values()))
    corrections = "/".join(c or "-" for c in first.corrections_)
    outside = ids[~in_any_schema(first)[: len(ids)]]
    rng = np.random.default_rng(args.seed + 1)
    victims = rng.choice(outside, size=2 * args.forgets + args.batch, replace=False)
    singles, batch = victims[: args.forgets], victims[args.forgets : args.forgets + args.batch]
    proba_singles = victims[args.forgets + args.batch :]
    probe = X_test[:1]
    waited = {route: [] for route in models}
    forget_only = {route: [] for route in models}
    for model in models.values():
        model.predict(probe)
    for counter in counters.values():
        counter.calls = counter.certified = 0
    for route, model in models.items():  # one route after the other, as a service runs one
        for victim in singles:
            started = time.perf_counter()
            model.forget([int(victim)])
            between = time.perf_counter()
            model.predict(probe)
            waited[route].append(time.perf_counter() - started)
            forget_only[route].append(between - started)
    # probabilities after a forget: no certified route (a label's certainty says nothing of
    # the probabilities' bits), so every one solves the heads — the shipped model, other ids
    proba_ms, proba_forget = [], []
    shipped = next(iter(models.values()))
    for victim in proba_singles:
        started = time.perf_counter()
        shipped.forget([int(victim)])
        between = time.perf_counter()
        shipped.predict_proba(probe)
        proba_ms.append((time.perf_counter() - started) * 1e3)
        proba_forget.append((between - started) * 1e3)
    rows = []
    for route, model in models.items():
        counter = counters[route]
        share = counter.certified / max(counter.calls, 1)
        # both models at an exact solve first: the certified route leaves the single forgets'
        # Gram terms pending (nothing reads the sums), which the next exact solve would add
        model.predict_proba(probe)
        started = time.perf_counter()
        model.forget([int(v) for v in batch])
        model.predict(probe)
        batch_ms = (time.perf_counter() - started) * 1e3
        ms = np.asarray(waited[route]) * 1e3
        rows.append(dict(
            route=route, forgets=len(ms), certified_share=f"{share:.2f}",
            p50_ms=float(np.median(ms)), p90_ms=float(np.percentile(ms, 90)),
            p99_ms=float(np.percentile(ms, 99)),
            forget_p50_ms=float(np.median(forget_only[route]) * 1e3),
            batch_rows=len(batch), batch_forget_predict_ms=batch_ms,
        ))  # fmt: skip
        print(f"{route}: p50 {rows[-1]['p50_ms']:.2f} ms, p90 {rows[-1]['p90_ms']:.2f}, "
              f"certified {share:.0%}", flush=True)  # fmt: skip
    rows.append(dict(
        route="predict_proba (shipped)", forgets=len(proba_ms), certified_share="–",
        p50_ms=float(np.median(proba_ms)), p90_ms=float(np.percentile(proba_ms, 90)),
        p99_ms=float(np.percentile(proba_ms, 99)), forget_p50_ms=float(np.median(proba_forget)),
        batch_rows="–", batch_forget_predict_ms=float("nan"),
    ))  # fmt: skip
    print(f"predict_proba: p50 {rows[-1]['p50_ms']:.2f} ms", flush=True)

    keep = np.setdiff1d(ids, victims)
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    model = first
    calls = counters["certified labels (shipped)"]
    calls.calls = calls.certified = 0
    chunks = [X_test[i : i + 200] for i in range(0, len(X_test), 200)]
    chunked = np.concatenate([model.predict(chunk) for chunk in chunks])
    chunk_share = calls.certified / max(calls.calls, 1)
    expected = refit.predict(X_test)
    checks = [
        dict(check=f"predict, 200-row calls (certified share {chunk_share:.2f})",
             rows=len(X_test), equal=bool(np.array_equal(chunked, expected))),
        dict(check="predict, one call (exact route: above the certified rows)",
             rows=len(X_test), equal=bool(np.array_equal(model.predict(X_test), expected))),
        dict(check="predict_proba", rows=len(X_test),
             equal=bool(np.array_equal(model.predict_proba(X_test), refit.predict_proba(X_test)))),
        dict(check="state digest", rows=len(keep),
             equal=model.state_digest() == refit.state_digest()),
    ]  # fmt: skip
    for check in checks:
        print(f"{check['check']}: {check['equal']}", flush=True)
    notes = (
        f"{args.rows:,} training rows × {args.features} features, {args.classes} classes "
        f"(Gaussian, seed {args.seed}); corrections {corrections}; QSSClassifier defaults. "
        f"Single forgets: {args.forgets} ids outside every D°, each forget followed by a "
        "one-row predict, one model's run after the other's. certified_share: the predictions "
        "whose labels were certain from the tracked weights (the rest took the exact route). "
        "The first change after an exact solve builds the tracked state (A⁻¹ from the "
        "factor, O(D³)): that prediction is the slow tail. Batch: from an exact solve (a "
        "predict_proba: the certified route leaves the single forgets' Gram terms pending "
        "until one), one forget of batch_rows ids, then a one-row predict (a change of more "
        "than 16 rows is not tracked: the exact route). predict_proba (shipped): the shipped "
        "model, after its single forgets, forgets as many other ids outside every D°, each "
        "followed by a one-row predict_proba (probabilities are never certified: each "
        "solves the heads)."
    )
    command = "python -m forgetting_lab.bench.head_latency " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    path = write_results(
        args.out,
        args.name,
        command.strip(),
        {
            "forget + first predict by route": (rows, ROUTE_COLUMNS),
            "forget = refit": (checks, EXACT_COLUMNS),
        },
        notes,
    )
    print(f"wrote {path}")
    return 0 if all(check["equal"] for check in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
