"""The exact forest deployed: its model file and its durable store, beside the same forgets
in memory.

Run ``python -m forgetting_lab.bench.forest_store``. On each tabular set (the paper
benchmark's features and training split), an :class:`~forgetting.ExactForestClassifier`
with the configuration ``--config`` names (default: what validation chose in forest.md) is

1. saved to a file and loaded back (a load grows the forest from the saved rows: one fit),
   the loaded forest checked equal to the saved one (structure digest);
2. written to a new :class:`~forgetting.store.DurableForest` store (SQLite in a temporary
   folder), then ``--forgets`` one-row forgets of random ids outside D° are timed, each with
   a one-row ``predict_proba`` after it, through the store (a forget returns once committed
   and the write-ahead log purged) and, on the same ids, on an in-memory copy; then one
   ``forget`` of ``--batch`` further ids through the store; the store is closed, reopened
   (one fit) and checked equal to the live forest, and ``verify`` grows a forest from the
   stored rows alone.
"""

from __future__ import annotations

import argparse
import copy
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from forgetting import ExactForestClassifier
from forgetting.store import DurableForest

from .paper.data import load_data
from .report import write_results

EXPECTED_DURATION = "about 1 min on 2 cores (adult)"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

CONFIGS = {"adult": (120, 44, 5), "letter": (120, 16, 1), "credit": (30, 6, 5)}
"""(n_estimators, max_features, min_samples_leaf) validation chose in forest.md."""
FILE_COLUMNS = [
    "dataset", "n", "trees", "fit s", "save s", "file MB", "load s", "load = saved",
]  # fmt: skip
STORE_COLUMNS = [
    "dataset", "n", "create s", "store MB", "forgets", "store p50 ms", "store p90 ms",
    "memory p50 ms", "memory p90 ms", "batch ids", "batch forget s", "open s",
    "reopened = live", "verify s", "verify ok",
]  # fmt: skip


def parse_configs(text: str) -> dict[str, tuple[int, int, int]]:
    """:data:`CONFIGS` with the sets ``text`` names (``name=trees:features:leaf``,
    ';'-separated) replaced."""
    configs = dict(CONFIGS)
    for part in filter(None, text.split(";")):
        name, spec = part.split("=")
        configs[name] = tuple(int(v) for v in spec.split(":"))
    return configs


def _ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(values) * 1e3, q)), 3)


def _timed(call):
    started = time.perf_counter()
    out = call()
    return out, time.perf_counter() - started


def run(name: str, config: tuple[int, int, int], forgets: int, batch: int, seed: int, tmp: Path):
    data = load_data(name, None)
    X, y = data.X_train, data.y_train
    ids = [f"row-{i}" for i in range(len(y))]
    trees, features, leaf = config
    params = dict(n_estimators=trees, max_features=min(features, X.shape[1]),
                  min_samples_leaf=leaf, random_state=seed)  # fmt: skip
    model, fit_s = _timed(lambda: ExactForestClassifier(**params).fit(X, y, ids))
    path = tmp / f"{name}.forest"
    _, save_s = _timed(lambda: model.save(path))
    loaded, load_s = _timed(lambda: ExactForestClassifier.load(path))
    file_row = {
        "dataset": name, "n": len(y), "trees": trees, "fit s": round(fit_s, 2),
        "save s": round(save_s, 3), "file MB": round(path.stat().st_size / 1e6, 1),
        "load s": round(load_s, 2),
        "load = saved": loaded.structure_digest() == model.structure_digest(),
    }  # fmt: skip
    del loaded
    location = tmp / f"{name}.db"
    store, create_s = _timed(
        lambda: DurableForest.create(location, ExactForestClassifier(**params), X, y, ids)
    )
    memory = copy.deepcopy(store.estimator)
    pool = set(memory.pool_ids_)
    rng = np.random.default_rng(seed)
    order = [ids[i] for i in rng.permutation(len(ids)) if ids[i] not in pool]
    victims, batch_ids = order[:forgets], order[forgets : forgets + batch]
    probe = np.ascontiguousarray(data.X_test[:1])
    through_store, in_memory = [], []
    for victim in victims:
        started = time.perf_counter()
        store.forget([victim])
        store.predict_proba(probe)
        through_store.append(time.perf_counter() - started)
        started = time.perf_counter()
        memory.forget([victim])
        memory.predict_proba(probe)
        in_memory.append(time.perf_counter() - started)
    _, batch_s = _timed(lambda: store.forget(batch_ids))
    live = store.estimator.structure_digest()
    store.close()
    store_mb = sum(f.stat().st_size for f in tmp.glob(f"{name}.db*")) / 1e6
    reopened, open_s = _timed(lambda: DurableForest.open(location))
    verified, verify_s = _timed(reopened.verify)
    store_row = {
        "dataset": name, "n": len(y), "create s": round(create_s, 2),
        "store MB": round(store_mb, 1), "forgets": len(victims),
        "store p50 ms": _ms(through_store, 50), "store p90 ms": _ms(through_store, 90),
        "memory p50 ms": _ms(in_memory, 50), "memory p90 ms": _ms(in_memory, 90),
        "batch ids": len(batch_ids), "batch forget s": round(batch_s, 3),
        "open s": round(open_s, 2),
        "reopened = live": reopened.estimator.structure_digest() == live,
        "verify s": round(verify_s, 2), "verify ok": bool(verified["ok"]),
    }  # fmt: skip
    reopened.close()
    return file_row, store_row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="forgetting bench forest_store", description=__doc__)
    parser.add_argument("--datasets", default="adult")
    parser.add_argument(
        "--config",
        default="",
        help="name=trees:features:leaf per set, ';'-separated (default: forest.md's choices)",
    )
    parser.add_argument("--forgets", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--name", default="forest-store")
    parser.add_argument("--why", default="", help="a note under the tables")
    args = parser.parse_args(argv)
    command = "python -m forgetting_lab.bench.forest_store " + shlex.join(argv or sys.argv[1:])
    configs = parse_configs(args.config)
    files, stores = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets.split(","):
            file_row, store_row = run(
                name, configs[name], args.forgets, args.batch, args.seed, Path(tmp)
            )
            print(file_row, store_row, flush=True)
            files.append(file_row)
            stores.append(store_row)
    tables = {
        "Model file: save, and load (a fit from the saved rows)": (files, FILE_COLUMNS),
        "Durable store (SQLite): forget + first predict through it and in memory": (
            stores,
            STORE_COLUMNS,
        ),
    }
    write_results(args.out, args.name, command, tables, notes=args.why)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
