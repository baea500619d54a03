"""The exact forest's forget path on one table: one-row forget + next predict, a 1 % batch,
beside a full-data HistGradientBoosting fit in the same run (issue 69).

Run ``python -m forgetting_lab.bench.forest_latency`` (``--quick``: a 20,000-row sample of
the same table, 100 forgets). On the flight table (the paper benchmark's features and
training split, :func:`forgetting_lab.bench.paper.data.load_data`):

1. fit a full-data ``HistGradientBoostingClassifier`` (defaults, ``random_state`` = seed) and
   the library's default :class:`~forgetting.ExactForestClassifier` (30 trees, 3 instances),
   each timed, with the process's resident memory sampled every 5 ms during the fit (peak
   over the RSS before it);
2. ``--forgets`` one-row forgets of random training ids (after one untimed forget and
   prediction, so that no kernel loads inside the timed calls), back to back, each followed by
   ``predict_proba`` of one test row — wall time per pair, D° hits, and how many of those
   predictions waited for a rebuild (``serve_waits``, where the library counts them);
3. every rebuild waited for, then the model compared with a fit on the rows it holds
   (``numpy.array_equal`` of the test set's probabilities, structure digests);
4. one ``forget`` of ``--batch-fraction`` of the rows (random ids: D° rows among them at
   their natural rate), timed with the first one-row ``predict_proba`` after it, then until
   every rebuild has landed; compared with a fit on the rows left again.

Before/after in one run: run it twice, once with ``PYTHONPATH`` naming an earlier commit's
``src`` (a git worktree) and ``--label``, ``--name`` telling the runs apart.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import threading
import time
from pathlib import Path

import numpy as np

EXPECTED_DURATION = "about 6 min on 2 cores (flights, 500 forgets); --quick about 30 s"

LATENCY_COLUMNS = [
    "library", "n", "forgets", "D° hits", "serve waits", "p50 ms", "p95 ms", "p99 ms",
    "max ms", "> 5 ms", "hit mean ms", "non-hit p99 ms", "effective rho", "= refit",
]  # fmt: skip
BATCH_COLUMNS = [
    "library", "n", "batch", "instances hit", "forget + first predict s", "all landed s",
    "HGB fit s", "first predict / HGB", "all landed / HGB", "= refit",
]  # fmt: skip
FIT_COLUMNS = [
    "library", "n", "d", "forest fit s", "HGB fit s", "forest peak MB", "HGB peak MB",
    "forest / HGB memory", "data MB",
]  # fmt: skip


class PeakRSS:
    """The process's resident set sampled on a thread: peak over the value at start (MB)."""

    def __init__(self, every: float = 0.005):
        self._every, self._stop = every, threading.Event()
        self.base = self.peak = _rss()

    def __enter__(self) -> PeakRSS:
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(self._every):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def mb(self) -> float:
        return (self.peak - self.base) / 2**20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _forest(seed: int):
    from forgetting import ExactForestClassifier

    return ExactForestClassifier(random_state=seed)


def _equal_refit(model, X, y, ids, X_test, seed: int) -> bool:
    """The model equals a fit on the rows it holds: probabilities and structure digest."""
    held = set(model.ids_)
    keep = np.array([i in held for i in ids])
    fresh = _forest(seed).fit(X[keep], y[keep], [i for i, k in zip(ids, keep, strict=True) if k])
    fresh.wait_for_rebuilds()
    same = np.array_equal(model.predict_proba(X_test), fresh.predict_proba(X_test))
    return bool(same and model.structure_digest() == fresh.structure_digest())


def run(args) -> tuple[list[dict], list[dict], list[dict]]:
    from sklearn.ensemble import HistGradientBoostingClassifier

    from .paper.data import load_data

    data = load_data(args.dataset, None)
    X, y, X_test = data.X_train, data.y_train, data.X_test
    if args.n_train and args.n_train < len(y):
        pick = np.sort(np.random.default_rng(args.seed).choice(len(y), args.n_train, False))
        X, y = X[pick], y[pick]
    X_test = np.ascontiguousarray(X_test[: args.test_rows])
    ids = [f"row-{i}" for i in range(len(y))]
    library = args.label
    with PeakRSS() as hgb_mem:
        started = time.perf_counter()
        HistGradientBoostingClassifier(random_state=args.seed).fit(X, y)
        hgb_s = time.perf_counter() - started
    with PeakRSS() as forest_mem:
        started = time.perf_counter()
        model = _forest(args.seed).fit(X, y, ids)
        fit_s = time.perf_counter() - started
    fit_row = {
        "library": library, "n": len(y), "d": X.shape[1], "forest fit s": round(fit_s, 2),
        "HGB fit s": round(hgb_s, 2), "forest peak MB": round(forest_mem.mb),
        "HGB peak MB": round(hgb_mem.mb),
        "forest / HGB memory": round(forest_mem.mb / max(hgb_mem.mb, 1.0), 2),
        "data MB": round(X.nbytes / 2**20),
    }  # fmt: skip
    print(fit_row, flush=True)

    engine = model.engine_
    x = np.ascontiguousarray(X_test[:1])
    model.predict_proba(x)
    rng = np.random.default_rng(args.seed)
    victims = [ids[i] for i in rng.choice(len(ids), args.forgets + 1, replace=False)]
    model.forget(victims[:1])  # untimed: the first change's kernels load from the cache
    model.predict_proba(x)
    victims = victims[1:]
    waits0 = getattr(engine, "serve_waits", 0)
    took, hit = [], []
    for v in victims:
        started = time.perf_counter()
        receipt = model.forget([v])
        model.predict_proba(x)
        took.append(time.perf_counter() - started)
        hit.append(bool(receipt.instances_hit))
    waits = getattr(engine, "serve_waits", 0) - waits0 if hasattr(engine, "serve_waits") else ""
    model.wait_for_rebuilds()
    ms, hit = np.array(took) * 1e3, np.array(hit)
    same = _equal_refit(model, X, y, ids, X_test, args.seed)
    latency_row = {
        "library": library, "n": len(y), "forgets": len(ms), "D° hits": int(hit.sum()),
        "serve waits": waits,
        "p50 ms": round(float(np.percentile(ms, 50)), 3),
        "p95 ms": round(float(np.percentile(ms, 95)), 3),
        "p99 ms": round(float(np.percentile(ms, 99)), 3),
        "max ms": round(float(ms.max()), 1), "> 5 ms": int(np.sum(ms > 5)),
        "hit mean ms": round(float(ms[hit].mean()), 2) if hit.any() else "",
        "non-hit p99 ms": round(float(np.percentile(ms[~hit], 99)), 3),
        "effective rho": round(model.effective_rho_, 4), "= refit": same,
    }  # fmt: skip
    print(latency_row, flush=True)

    held = model.ids_
    size = max(1, int(round(args.batch_fraction * len(held))))
    gone = [held[i] for i in rng.choice(len(held), size, replace=False)]
    started = time.perf_counter()
    receipt = model.forget(gone)
    model.predict_proba(x)
    first_s = time.perf_counter() - started
    model.wait_for_rebuilds()
    landed_s = time.perf_counter() - started
    same = _equal_refit(model, X, y, ids, X_test, args.seed)
    batch_row = {
        "library": library, "n": len(held), "batch": size,
        "instances hit": len(receipt.instances_hit),
        "forget + first predict s": round(first_s, 3), "all landed s": round(landed_s, 2),
        "HGB fit s": round(hgb_s, 2), "first predict / HGB": round(first_s / hgb_s, 3),
        "all landed / HGB": round(landed_s / hgb_s, 2), "= refit": same,
    }  # fmt: skip
    print(batch_row, flush=True)
    return [latency_row], [batch_row], [fit_row]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="flights")
    parser.add_argument("--n-train", type=int, default=0, help="subsample the training rows")
    parser.add_argument("--forgets", type=int, default=500)
    parser.add_argument("--batch-fraction", type=float, default=0.01)
    parser.add_argument("--test-rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 100 forgets")
    parser.add_argument("--label", default="this checkout", help="the library column")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--name", default="forest-latency")
    parser.add_argument("--why", default="", help="a note written under the tables")
    parser.add_argument("--no-write", action="store_true", help="print the rows only")
    args = parser.parse_args(argv)
    if args.quick:
        args.n_train, args.forgets = args.n_train or 20_000, min(args.forgets, 100)
    latency, batch, fit = run(args)
    if args.no_write:
        return 0
    from .report import write_results

    command = "python -m forgetting_lab.bench.forest_latency " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    notes = (
        "FORGETTING_THREADS=" + os.environ.get("FORGETTING_THREADS", "(unset)")
        + ". Forest: the library's defaults (30 trees, 3 instances). Memory: peak resident "
        "set over the value before each fit, sampled every 5 ms. " + args.why
    )  # fmt: skip
    write_results(
        Path(args.out),
        args.name,
        command,
        {
            "Forget + next predict_proba: one-row forgets back to back": (latency, LATENCY_COLUMNS),
            "Batch: one forget of the batch, first predict, all rebuilds landed": (
                batch,
                BATCH_COLUMNS,
            ),
            "Fit: time and peak memory beside HGB": (fit, FIT_COLUMNS),
        },
        notes,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
