"""One forest or p instances: what a forget that hits D° costs the caller, and what p costs.

Run ``python -m forgetting_lab.bench.forest_instances``. On each tabular set (the paper
benchmark's features, training and test split) an :class:`~forgetting.ExactForestClassifier`
with the configuration forest.md's validation chose is fitted with ``n_instances`` 1 and 3 (the
same trees in all; with 3, each instance holds a third of them on its own D° and grid), beside a
full-data HistGradientBoosting (defaults). Each model then takes the same ``--forgets``
one-row forgets of random training ids (D° rows among them at their natural rate: each
model's own D°, so p = 3, with three D°, is hit about three times as often), each followed by
a one-row ``predict_proba`` and ``--interval`` seconds apart (a paced stream of requests, not
a burst). Timed is the forget + first predict as the caller waits for it — with
p = 1 a hit refits the forest in the call; with p = 3 it starts a background rebuild and the
forgets and predictions meanwhile share the cores with it. Afterwards the pending rebuilds are
waited for and the model is compared with a fit on the rows it holds (structure digest and
test-set probabilities, ``numpy.array_equal``); that fit's time ("refit s") is what a forget
that hits D° waits for with p = 1.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier

from forgetting import ExactForestClassifier

from .forest_store import parse_configs
from .paper.data import load_data
from .report import write_results

EXPECTED_DURATION = "about 3 min on 2 cores (adult)"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

COLUMNS = [
    "dataset", "n", "instances", "test acc", "HGB acc", "fit s", "D° rows", "forgets",
    "hits", "p50 ms", "p90 ms", "p99 ms", "max ms", "hit max ms", "> 100 ms", "rebuilds",
    "mean rebuild s", "wait s", "= refit", "refit s",
]  # fmt: skip


def _ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(values) * 1e3, q)), 2)


def run(name: str, config: tuple, forgets: int, interval: float, seed: int) -> list[dict]:
    data = load_data(name, None)
    X, y, X_test = data.X_train, data.y_train, data.X_test
    ids = [f"row-{i}" for i in range(len(y))]
    trees, features, leaf = config
    hgb = HistGradientBoostingClassifier(random_state=seed).fit(X, y)
    hgb_acc = float(np.mean(hgb.predict(X_test) == data.y_test))
    probe = np.ascontiguousarray(X_test[:1])
    rows = []
    for p in (1, 3):
        params = dict(n_estimators=trees, max_features=min(features, X.shape[1]),
                      min_samples_leaf=leaf, n_instances=p, random_state=seed)  # fmt: skip
        started = time.perf_counter()
        model = ExactForestClassifier(**params).fit(X, y, ids)
        fit_s = time.perf_counter() - started
        acc = float(np.mean(model.predict(X_test) == data.y_test))
        pools = set(model.pool_ids_)
        order = [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))[:forgets]]
        times, hit_times = [], []
        for row in order:
            started = time.perf_counter()
            model.forget([row])
            model.predict_proba(probe)
            elapsed = time.perf_counter() - started
            times.append(elapsed)
            if row in pools:
                hit_times.append(elapsed)
            time.sleep(interval)
        started = time.perf_counter()
        model.wait_for_rebuilds()
        wait_s = time.perf_counter() - started
        held = set(model.ids_)
        keep = np.array([i in held for i in ids])
        started = time.perf_counter()
        refit = ExactForestClassifier(**params).fit(
            X[keep], y[keep], [i for i, k in zip(ids, keep, strict=True) if k]
        )
        refit_s = time.perf_counter() - started
        same = refit.structure_digest() == model.structure_digest() and np.array_equal(
            refit.predict_proba(X_test), model.predict_proba(X_test)
        )
        seconds = model.engine_.rebuild_seconds
        row = {
            "dataset": name, "n": len(y), "instances": p, "test acc": round(acc, 4),
            "HGB acc": round(hgb_acc, 4), "fit s": round(fit_s, 2),
            "D° rows": len(model.pool_ids_), "forgets": len(order), "hits": len(hit_times),
            "p50 ms": _ms(times, 50), "p90 ms": _ms(times, 90), "p99 ms": _ms(times, 99),
            "max ms": _ms(times, 100), "hit max ms": _ms(hit_times, 100) if hit_times else None,
            "> 100 ms": int(np.sum(np.array(times) > 0.1)),
            "rebuilds": len(seconds),
            "mean rebuild s": round(float(np.mean(seconds)), 2) if seconds else None,
            "wait s": round(wait_s, 3), "= refit": bool(same), "refit s": round(refit_s, 2),
        }  # fmt: skip
        print(row, flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="forgetting bench forest_instances", description=__doc__)
    parser.add_argument("--datasets", default="adult")
    parser.add_argument(
        "--config",
        default="",
        help="name=trees:features:leaf per set, ';'-separated (default: forest.md's choices)",
    )
    parser.add_argument("--forgets", type=int, default=600)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between forgets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--name", default="forest-instances")
    parser.add_argument("--why", default="", help="a note under the table")
    args = parser.parse_args(argv)
    command = "python -m forgetting_lab.bench.forest_instances " + shlex.join(argv or sys.argv[1:])
    configs = parse_configs(args.config)
    rows = []
    for name in args.datasets.split(","):
        rows += run(name, configs[name], args.forgets, args.interval, args.seed)
    tables = {"One forest or three instances: forget + first predict, D° hits included": (
        rows, COLUMNS)}  # fmt: skip
    write_results(args.out, args.name, command, tables, notes=args.why)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
