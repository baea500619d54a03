"""The exact forest beside the models a user would deploy: accuracy, fit time, memory, and
forget + first predict latency.

Run ``python -m forgetting_lab.bench.forest``. Per tabular set (the paper benchmark's
features and splits, :func:`forgetting_lab.bench.paper.data.load_data`):

1. carve a validation split (:data:`VALIDATION_FRACTION`, stratified, seeded) from the
   *training* split, fit :class:`~forgetting.ExactForestClassifier` for each point of
   the grid (``min_samples_leaf`` × ``max_features``, then ``n_estimators``) on the rest and
   keep the most accurate on validation — the test split is never read to choose;
2. refit the chosen forest on the whole training split and score it on the test split, beside
   a full-data ``HistGradientBoostingClassifier`` (defaults, ``random_state`` = seed) and
   today's ``QSSClassifier`` default (ρ as the paper benchmark resolves it), all fitted in the
   same run;
3. time one-row forgets of random victims, each with the ``predict_proba`` of one test row
   after it (what a user waits for, SPEC §5.9); a victim in D° refits the forest and is
   counted apart;
4. forget a batch of ids outside D° (5 % of the rows, at most ``--batch``) in one call,
   timed with the one-row ``predict_proba`` after it, the next one, and the rebuild of all
   that is still stale; checked against a refit without them (structure digests); then a
   random batch of the same size (D° rows among it: a refit);
5. on binary sets, where it is importable (``--no-dare`` leaves it out), DaRE-RF — the
   exact-deletion random forest — chosen on the same validation split, scored on the test
   split and timed on the same victims (:mod:`forgetting_lab.baselines.dare`).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
import time
from pathlib import Path

import numpy as np

from ..baselines import dare
from .paper.data import load_data, parse_mapping
from .report import write_results

EXPECTED_DURATION = "about 5 min on 2 cores for six sets; flights alone about 15 min"
"""How long a run took (`forgetting bench` lists it)."""

DEFAULT_SETS = "digits,letter,satellite,shuttle,credit,adult,flights"
VALIDATION_FRACTION = 0.2
LEAVES = (1, 5, 20)
"""``min_samples_leaf`` values tried on validation."""
FEATURE_FACTORS = (1, 2, 4, 8, 16)
"""``max_features`` tried: this many times ceil(sqrt(d)) candidates per node (a candidate is
a (feature, threshold) pair, so there may be more than d; at most 16·d, as the library)."""
TREES = (30, 60, 120)
"""``n_estimators`` tried with the best leaf size and candidate count."""
N_FORGETS = 200
BATCH_FRACTION = 0.05
"""A batch forget takes this share of the training rows ..."""
MAX_BATCH = 20_000
"""... and at most this many (``--batch``; the QSS core's batch measure uses 20,000)."""

ACCURACY_COLUMNS = [
    "dataset", "k", "n_train", "d", "forest", "HGB", "QSS-E", "gap to HGB (pp)",
    "min_samples_leaf", "max_features", "n_estimators", "val forest", "fit_s forest",
    "fit_s HGB", "fit_s QSS-E", "forest MB", "note",
]  # fmt: skip
LATENCY_COLUMNS = [
    "dataset", "n", "forgets", "D° hits", "p50 ms", "p90 ms", "p99 ms", "max ms", "CPU forgets",
    "CPU p50 ms",
    "CPU p90 ms",
    "D° hit mean ms", "effective rho",
]  # fmt: skip
BATCH_COLUMNS = [
    "dataset", "n", "batch", "forget s", "first predict s", "rows/s", "next predict ms",
    "rest rebuilt s", "refit s", "= refit", "random batch D° rows", "random batch s",
]  # fmt: skip
GRID_COLUMNS = ["dataset", "min_samples_leaf", "max_features", "n_estimators", "val", "fit_s"]
DARE_COLUMNS = [
    "dataset", "n_estimators", "max_depth", "k", "val DaRE", "DaRE", "fit_s DaRE", "forgets",
    "DaRE p50 ms", "DaRE p90 ms", "DaRE p99 ms", "forest p50 ms", "forest p90 ms",
    "forest p99 ms",
]  # fmt: skip


def _split(y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    return train_test_split(idx, test_size=VALIDATION_FRACTION, stratify=y, random_state=seed)


def _forest(leaf: int, features: int, trees: int, seed: int):
    from forgetting import ExactForestClassifier

    return ExactForestClassifier(
        n_estimators=trees, min_samples_leaf=leaf, max_features=features, random_state=seed
    )


def _timed_fit(model, X, y):
    started = time.perf_counter()
    model.fit(X, y)
    return model, time.perf_counter() - started


def choose(data, seed: int, grid_rows: list[dict], grid: dict) -> tuple[dict, float]:
    """The grid point most accurate on a validation split of the training rows: every
    ``leaves`` × ``factors`` point at the first of ``trees``, then the best of those at each
    further tree count."""
    leaves, factors, tree_counts = grid["leaves"], grid["factors"], grid["trees"]
    fit_idx, val_idx = _split(data.y_train, seed)
    X, y = data.X_train, data.y_train
    base = int(np.ceil(np.sqrt(X.shape[1])))
    scores = {}
    first = tree_counts[0]
    for leaf in leaves:
        for factor in factors:
            features = min(16 * X.shape[1], factor * base)  # the library's own bound
            if (leaf, features, first) in scores:
                continue
            model, secs = _timed_fit(_forest(leaf, features, first, seed), X[fit_idx], y[fit_idx])
            scores[(leaf, features, first)] = model.score(X[val_idx], y[val_idx])
            grid_rows.append(_grid_row(data, leaf, features, first, scores, secs))
            print(grid_rows[-1], flush=True)
    leaf, features, _ = max(scores, key=lambda p: (scores[p], -p[2]))
    for trees in tree_counts[1:]:
        model, secs = _timed_fit(_forest(leaf, features, trees, seed), X[fit_idx], y[fit_idx])
        scores[(leaf, features, trees)] = model.score(X[val_idx], y[val_idx])
        grid_rows.append(_grid_row(data, leaf, features, trees, scores, secs))
        print(grid_rows[-1], flush=True)
    # ties go to the smaller forest (listed first by -trees)
    best = max(scores, key=lambda p: (scores[p], -p[2]))
    return {"leaf": best[0], "features": best[1], "trees": best[2]}, scores[best]


def _grid_row(data, leaf, features, trees, scores, secs) -> dict:
    return {
        "dataset": data.key,
        "min_samples_leaf": leaf,
        "max_features": features,
        "n_estimators": trees,
        "val": round(float(scores[(leaf, features, trees)]), 4),
        "fit_s": round(secs, 2),
    }


def victim_positions(n: int, n_forgets: int, seed: int) -> np.ndarray:
    """The training rows (positions) whose one-row forgets are timed: random, seeded."""
    rng = np.random.default_rng(seed)
    return rng.choice(n, size=min(n_forgets, n // 4), replace=False)


def latency(model, data, n_forgets: int, seed: int) -> dict:
    """One-row forgets of random victims, each timed with the next one-row predict_proba:
    wall time, and the process's CPU time (the instances take a one-row change on the
    machine's cores) over the forgets during which no background rebuild ran."""
    ids = model.ids_
    victims = [ids[i] for i in victim_positions(len(ids), n_forgets, seed)]
    x = np.ascontiguousarray(data.X_test[:1])
    model.predict_proba(x)
    fast, hits, cpu_ms = [], [], []
    for v in victims:
        if np.count_nonzero(model.engine_.class_counts_without([v])) < model.classes_.size:
            continue
        quiet = not _rebuild_threads()
        started, cpu = time.perf_counter(), time.process_time()
        receipt = model.forget([v])
        model.predict_proba(x)
        took = time.perf_counter() - started
        cpu_took = time.process_time() - cpu
        (hits if receipt.instances_hit else fast).append(took)
        if quiet and not _rebuild_threads():  # else a rebuild's CPU would count too
            cpu_ms.append(cpu_took * 1e3)
    ms = np.array(fast + hits) * 1e3
    model.wait_for_rebuilds()  # a hit rebuilt its instance in the background meanwhile
    return {
        "dataset": data.key,
        "n": len(ids),
        "forgets": len(ms),
        "D° hits": len(hits),
        "p50 ms": round(float(np.percentile(ms, 50)), 3),
        "p90 ms": round(float(np.percentile(ms, 90)), 3),
        "p99 ms": round(float(np.percentile(ms, 99)), 3),
        "max ms": round(float(ms.max()), 1),
        "CPU forgets": len(cpu_ms),
        "CPU p50 ms": round(float(np.percentile(cpu_ms, 50)), 3) if cpu_ms else float("nan"),
        "CPU p90 ms": round(float(np.percentile(cpu_ms, 90)), 3) if cpu_ms else float("nan"),
        "D° hit mean ms": round(1e3 * float(np.mean(hits)), 1) if hits else float("nan"),
        "effective rho": round(model.effective_rho_, 4),
    }


def _rebuild_threads() -> bool:
    """Whether a background rebuild thread is alive (pending, or cancelled and not yet at
    its next tree: it still burns CPU)."""
    from forgetting.forest.instances import REBUILD_THREAD_PREFIX

    return any(t.name.startswith(REBUILD_THREAD_PREFIX) for t in threading.enumerate())


def batch(model, data, size: int, seed: int) -> dict:
    """One ``forget`` of ``size`` random ids outside D° with the one-row ``predict_proba``
    after it (what the next caller waits for: it builds the stale nodes on its paths), the
    next one-row prediction, and the rebuild of everything still stale; the result's
    structure digest against a refit without the batch. Then a random batch of the same size
    (D° rows among it: the forest is refitted) with its first prediction."""
    from forgetting import ExactForestClassifier

    rng = np.random.default_rng(seed + 1)
    pool = set(model.pool_ids_)
    ids = model.ids_
    outside = [i for i in ids if i not in pool]
    victims = [outside[i] for i in sorted(rng.choice(len(outside), size, replace=False))]
    x = np.ascontiguousarray(data.X_test[:2])
    started = time.perf_counter()
    model.forget(victims)
    forgot = time.perf_counter()
    model.predict_proba(x[:1])
    first = time.perf_counter()
    model.predict_proba(x[1:])
    second = time.perf_counter()
    model.engine_.flush()
    rebuilt = time.perf_counter() - second
    gone = set(victims)
    keep = [i for i in ids if i not in gone]  # ids are the training rows' positions
    refit_started = time.perf_counter()
    refit = ExactForestClassifier(**model.get_params())
    refit.fit(data.X_train[keep], data.y_train[keep], keep)
    refit_s = time.perf_counter() - refit_started
    exact = refit.structure_digest() == model.structure_digest()
    remaining = model.ids_
    drawn = [remaining[i] for i in sorted(rng.choice(len(remaining), size, replace=False))]
    hits = len(set(drawn) & set(model.pool_ids_))
    began = time.perf_counter()
    model.forget(drawn)
    model.predict_proba(x[:1])
    random_s = time.perf_counter() - began
    return {
        "dataset": data.key,
        "n": len(ids),
        "batch": size,
        "forget s": round(forgot - started, 3),
        "first predict s": round(first - forgot, 3),
        "rows/s": round(size / (first - started)),
        "next predict ms": round(1e3 * (second - first), 2),
        "rest rebuilt s": round(rebuilt, 2),
        "refit s": round(refit_s, 2),
        "= refit": exact,
        "random batch D° rows": hits,
        "random batch s": round(random_s, 2),
    }


TRADEOFF_COLUMNS = [
    "dataset", "n_estimators", "max_features", "min_samples_leaf", "val", "fit_s", "forest MB",
    "CPU p50 ms", "CPU p90 ms", "p50 ms", "p90 ms",
]  # fmt: skip


def tradeoff(name: str, configs: list[tuple[int, int, int]], seed: int, n_forgets: int):
    """Validation accuracy against forget cost for (trees, candidates, leaf) configurations,
    on the training split only: fit on 80 %, score the 20 %, time one-row forgets (victims
    outside D°, so every one is a walk and no refit) each with a one-row predict."""
    data = load_data(name, None)
    fit_idx, val_idx = _split(data.y_train, seed)
    X, y = data.X_train, data.y_train
    rows = []
    for trees, features, leaf in configs:
        model, secs = _timed_fit(_forest(leaf, features, trees, seed), X[fit_idx], y[fit_idx])
        val = model.score(X[val_idx], y[val_idx])
        forest = model.engine_
        rng = np.random.default_rng(seed)
        ids = model.ids_
        order = rng.permutation(len(ids))
        pool = set(model.pool_ids_)
        victims = [ids[i] for i in order if ids[i] not in pool]
        x = np.ascontiguousarray(X[val_idx[:1]])
        wall, cpu = [], []
        for v in victims[:n_forgets]:
            started, c = time.perf_counter(), time.process_time()
            model.forget([v])
            model.predict_proba(x)
            wall.append((time.perf_counter() - started) * 1e3)
            cpu.append((time.process_time() - c) * 1e3)
        row = {
            "dataset": name,
            "n_estimators": trees,
            "max_features": features,
            "min_samples_leaf": leaf,
            "val": round(val, 4),
            "fit_s": round(secs, 2),
            "forest MB": round(forest.nbytes() / 1e6, 1),
            "CPU p50 ms": round(float(np.percentile(cpu, 50)), 3),
            "CPU p90 ms": round(float(np.percentile(cpu, 90)), 3),
            "p50 ms": round(float(np.percentile(wall, 50)), 3),
            "p90 ms": round(float(np.percentile(wall, 90)), 3),
        }
        print(row, flush=True)
        rows.append(row)
    return rows


def run_dataset(
    name: str,
    n_train: int | None,
    seed: int,
    grid_rows,
    n_forgets: int,
    grid,
    with_dare: bool = False,
    max_batch: int = MAX_BATCH,
):
    from sklearn.ensemble import HistGradientBoostingClassifier

    from forgetting import QSSClassifier

    data = load_data(name, n_train)
    params, val = choose(data, seed, grid_rows, grid)
    X, y = data.X_train, data.y_train
    forest, fit_forest = _timed_fit(
        _forest(params["leaf"], params["features"], params["trees"], seed), X, y
    )
    acc_forest = forest.score(data.X_test, data.y_test)
    hgb, fit_hgb = _timed_fit(HistGradientBoostingClassifier(random_state=seed), X, y)
    acc_hgb = hgb.score(data.X_test, data.y_test)
    qss, fit_qss = _timed_fit(QSSClassifier(rho=data.rho, random_state=seed), X, y)
    acc_qss = qss.score(data.X_test, data.y_test)
    row = {
        "dataset": data.key,
        "k": data.n_classes,
        "n_train": data.n_train,
        "d": X.shape[1],
        "forest": round(acc_forest, 4),
        "HGB": round(acc_hgb, 4),
        "QSS-E": round(acc_qss, 4),
        "gap to HGB (pp)": round(100 * (acc_forest - acc_hgb), 2),
        "min_samples_leaf": params["leaf"],
        "max_features": params["features"],
        "n_estimators": params["trees"],
        "val forest": round(val, 4),
        "fit_s forest": round(fit_forest, 2),
        "fit_s HGB": round(fit_hgb, 2),
        "fit_s QSS-E": round(fit_qss, 2),
        "forest MB": round(forest.engine_.nbytes() / 1e6, 1),
        "note": "; ".join(data.notes),
    }
    print(row, flush=True)
    lat = latency(forest, data, n_forgets, seed)
    print(lat, flush=True)
    size = min(max_batch, int(BATCH_FRACTION * len(forest.ids_)))
    bat = batch(forest, data, size, seed) if size > 1 else None
    print(bat, flush=True)
    peer = None
    if with_dare and data.n_classes == 2:
        peer = dare_peer(data, params["trees"], seed, n_forgets, lat)
    return row, lat, bat, peer


def dare_peer(data, trees: int, seed: int, n_forgets: int, ours: dict) -> dict:
    """DaRE-RF on the same data: chosen on the same validation split (its paper's grid, our
    forest's tree count), fitted on the training split, scored on the test split, and timed
    on the same victims (each delete with a one-row predict_proba) — beside our forest's
    latency row ``ours``."""
    X, y = data.X_train, data.y_train
    fit_idx, val_idx = _split(y, seed)
    params, val, _ = dare.choose(X, y, fit_idx, val_idx, trees, seed)
    model, secs = dare.fit(X, y, params["max_depth"], params["k"], trees, seed)
    test = dare.accuracy(model, data.X_test, data.y_test)
    ms = dare.latency(model, victim_positions(len(y), n_forgets, seed), data.X_test[:1])
    row = {
        "dataset": data.key,
        "n_estimators": trees,
        "max_depth": params["max_depth"],
        "k": params["k"],
        "val DaRE": round(val, 4),
        "DaRE": round(test, 4),
        "fit_s DaRE": round(secs, 2),
        "forgets": len(ms),
        "DaRE p50 ms": round(float(np.percentile(ms, 50)), 3),
        "DaRE p90 ms": round(float(np.percentile(ms, 90)), 3),
        "DaRE p99 ms": round(float(np.percentile(ms, 99)), 3),
        "forest p50 ms": ours["p50 ms"],
        "forest p90 ms": ours["p90 ms"],
        "forest p99 ms": ours["p99 ms"],
    }
    print(row, flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="forgetting bench forest", description=__doc__)
    parser.add_argument("--datasets", default=DEFAULT_SETS)
    parser.add_argument("--n-train", default="", help="e.g. flights=100000 (subsample)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--forgets", type=int, default=N_FORGETS)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--name", default="forest")
    parser.add_argument("--why", default="", help="a note under the tables")
    parser.add_argument("--leaves", default=",".join(map(str, LEAVES)))
    parser.add_argument("--factors", default=",".join(map(str, FEATURE_FACTORS)))
    parser.add_argument("--trees", default=",".join(map(str, TREES)))
    parser.add_argument(
        "--tradeoff",
        default="",
        help="instead: validation accuracy vs forget cost, e.g. letter=30:4:1,120:16:1 "
        "(trees:candidates:leaf; datasets separated by ';')",
    )
    parser.add_argument(
        "--no-dare", action="store_true", help="leave DaRE-RF out even where it is importable"
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=MAX_BATCH,
        help=f"largest batch forget timed (default {MAX_BATCH:,}; 0 leaves the step out)",
    )
    args = parser.parse_args(argv)
    command = "python -m forgetting_lab.bench.forest " + shlex.join(argv or sys.argv[1:])
    if args.tradeoff:
        rows = []
        for part in args.tradeoff.split(";"):
            name, spec = part.split("=")
            configs = [tuple(int(v) for v in c.split(":")) for c in spec.split(",")]
            rows += tradeoff(name, configs, args.seed, min(args.forgets, 100))
        title = "Validation accuracy vs forget + first predict (training split only)"
        write_results(args.out, args.name, command, {title: (rows, TRADEOFF_COLUMNS)}, args.why)
        return 0
    grid = {
        key: tuple(int(v) for v in getattr(args, key).split(","))
        for key in ("leaves", "factors", "trees")
    }
    n_train = parse_mapping(args.n_train)
    with_dare = not args.no_dare and dare.available()
    if not args.no_dare and not with_dare:
        print("DaRE-RF is not importable here: its rows are left out (see baselines/dare.py)")
    rows, lats, batches, peers, grid_rows = [], [], [], [], []
    for name in args.datasets.split(","):
        row, lat, bat, peer = run_dataset(
            name, n_train.get(name), args.seed, grid_rows, args.forgets, grid, with_dare,
            args.batch,
        )  # fmt: skip
        rows.append(row)
        lats.append(lat)
        if bat is not None:
            batches.append(bat)
        if peer is not None:
            peers.append(peer)
    tables = {
        "Accuracy: test split, forest chosen on validation, anchors fitted in the same run": (
            rows,
            ACCURACY_COLUMNS,
        ),
        "Forget + first predict: one-row forgets of random victims": (lats, LATENCY_COLUMNS),
    }
    if batches:
        tables["Batch forget: ids outside D° in one call, then the first predict"] = (
            batches,
            BATCH_COLUMNS,
        )
    if peers:
        tables["DaRE-RF, the exact-deletion peer, on the binary sets: same run, same victims"] = (
            peers,
            DARE_COLUMNS,
        )
    tables["Validation grid: training split only"] = (grid_rows, GRID_COLUMNS)
    notes = args.why
    if peers:
        notes += (
            " DaRE-RF: built from jjbrophy47/dare_rf (commit bd9e730; its PyPI sdists do not "
            "build), topd = 0 (exact G-DaRE), max_depth and k chosen on the same validation "
            f"split over {dare.GRID}, as many trees as our forest chose; its latency is a "
            "delete and a one-row predict_proba, on the same victims as ours (D° hits "
            "included in ours)."
        )
    write_results(args.out, args.name, command, tables, notes=notes.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
