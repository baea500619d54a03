"""Can a boosted model be forgotten exactly AND cheaply? A lazy-cascade booster study (issue 68).

Run ``python -m forgetting_lab.bench.boosting_lazy [--quick]``. The boosting study
(boosting_study.py) made every quantity of a 31-leaf, 100-stage booster an integer sum and found
that a deletion changes some stage by the ~10th and moves most rows, so "refit from the first
changed stage" is a refit. This module combines two levers it did not:

1. *stability by construction*: level-wise stages of depth ``depth`` (≤ 8 leaves), a fixed
   ``min_leaf``, a coarse score quantum ``q`` for leaf values, gradients and hessians rounded to
   integers at a coarse scale ``S`` (a row whose score moves by one quantum often keeps its
   integer gradient), split candidates either every bin of every feature (``cands=0``, HGB's
   splitter) or ``cands`` random (feature, threshold) pairs per node drawn from a key of
   (seed, stage, node) — the node's path — so they never depend on the data or build order;
2. *a lazy exact cascade* (:func:`forget`): a deletion subtracts the row's (g, h, 1) from the
   node sums and split statistics on its path in every stage; where a leaf value changes, the
   alive rows of that leaf join a *moved set* (old and new score tracked); in every later stage
   each moved row's old quantized terms are replaced by its new ones on its path (integer
   updates), only the touched nodes' split choices are re-evaluated from the stored statistics,
   and a touched leaf's value is recomputed. Where a re-evaluated choice differs (the stage's
   structure changes), that stage alone is refitted from the rows and the moved set becomes
   every row whose score after it differs. Every stage is a function of integer sums, so the
   result is bitwise the refit; :func:`same_model` checks that (structures, values, sums,
   statistics and every row's score).

Kernels take named bundles (``Data``, ``Model``, ``Cfg``, ``Geo``, ``Moved``). Binary log loss.
Only the training rows are read: a stratified 20 % of them is the validation split.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from forgetting.forest.binning import bin_edges, encode, n_bins

from .boosting_lazy_cascade import (
    C_FLIP_ROWS,
    C_LEAF_CHANGES,
    C_MOVED_MAX,
    C_MOVED_SUM,
    C_NODES,
    C_REFITS,
    C_STAGES,
    C_UPDATES,
    Cfg,
    Data,
    Geo,
    Model,
    fit,
    forget,
    make_geo,
    new_moved,
    ns_per_update,
    predict_one,
    same_model,
)  # fmt: skip
from .paper.data import load_data
from .report import write_results

EXPECTED_DURATION = "about 25 min on one core (--quick: about 2 min)"
"""How long a run at the defaults takes (`forgetting bench` lists it)."""

VALIDATION_FRACTION = 0.2


DESIGNS = {
    # name: (depth, cands, min leaf as a share of n (at least 20), lr, stages, q, gradient scale)
    "d3 all-bins lr.3 T200 q1/16 S64": (3, 0, 0.0, 0.3, 200, 1 / 16, 64.0),
    "d3 all-bins lr.1 T200 q1/64 S4096": (3, 0, 0.0, 0.1, 200, 1 / 64, 4096.0),
    "d3 K=20 lr.3 T200 q1/16 S64": (3, 20, 0.0, 0.3, 200, 1 / 16, 64.0),
    "d3 all-bins lr.3 T200 q1/8 S16 leaf.5%": (3, 0, 0.005, 0.3, 200, 1 / 8, 16.0),
}
TABLES = {"adult": (None, 200, 3), "flights": (30000, 100, 2)}
"""Per table: fitting rows kept (a seeded subsample; None: all), deletions, refits checked."""
QUICK = {"adult": (4000, 30, 3)}
QUICK_DESIGNS = ("d3 all-bins lr.3 T200 q1/16 S64", "d3 K=20 lr.3 T200 q1/16 S64")
METRICS = (
    ("forget ms", None), ("forget + predict ms", None), ("stages touched", C_STAGES),
    ("rows moved (largest set)", C_MOVED_MAX), ("rows moved × stages", C_MOVED_SUM),
    ("integer updates", C_UPDATES), ("nodes re-evaluated", C_NODES),
    ("leaf values changed", C_LEAF_CHANGES), ("stages refitted", C_REFITS),
    ("rows under flipped nodes", C_FLIP_ROWS),
    ("est. ms (updates × ns)", None),
)  # fmt: skip


def _memory(model: Model, geo: Geo, n: int, d: int) -> dict:
    """Bytes a node must keep to re-decide without the data, and the model's total (int32
    order lists and int64 sums/statistics as a shipped layout would hold them)."""
    cands = geo.cand.shape[2] if model.stats.shape[2] == geo.cand.shape[2] else 0
    per_node = model.stats.shape[2] * 3 * 8 + 3 * 8 + 3 * 8
    nodes = model.feat.size
    stats = model.stats.size * 8
    return {
        "bytes / splittable node": per_node,
        "stats MB": round(stats / 1e6, 1),
        "row lists MB": round(model.order.size * 4 / 1e6, 1),
        "codes MB": round(n * d / 1e6, 1),
        "model MB": round((stats + model.sums.size * 8 + nodes * 24 + model.order.size * 4
                           + n * d + (cands * 0)) / 1e6, 1),
    }  # fmt: skip


def study(name: str, keep: int | None, deletions: int, checks: int, designs, seed: int):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.model_selection import train_test_split
    from threadpoolctl import threadpool_limits

    data_ = load_data(name, None)
    X, y = np.asarray(data_.X_train, dtype=np.float64), np.asarray(data_.y_train)
    fit_rows, val = train_test_split(
        np.arange(len(y)), test_size=VALIDATION_FRACTION, random_state=seed, stratify=y
    )
    if keep is not None and keep < len(fit_rows):
        fit_rows = np.sort(np.random.default_rng(seed).choice(fit_rows, keep, replace=False))
    Xf, yf, Xv, yv = X[fit_rows], y[fit_rows].astype(np.int64), X[val], y[val]
    with threadpool_limits(1):
        started = time.perf_counter()
        hgb = HistGradientBoostingClassifier(random_state=seed).fit(Xf, yf)
        hgb_s = time.perf_counter() - started
    val_hgb = float(np.mean(hgb.predict(Xv) == yv))
    hgb_mb = len(pickle.dumps(hgb)) / 1e6
    n = len(yf)
    rng = np.random.default_rng(seed)
    edges = bin_edges(Xf[rng.choice(n, min(2000, n), replace=False)], 255)
    codes, codes_v = encode(Xf, edges), encode(Xv, edges)
    nbins = n_bins(edges).astype(np.int64)
    ns = ns_per_update()
    rows, costs = [], []
    for label in designs:
        depth, cands, share, lr, stages, q, scale = DESIGNS[label]
        cfg = Cfg(depth, cands, max(20, int(share * n)), 1.0, lr, q, scale)
        geo = make_geo(nbins, cfg, stages, seed)
        data = Data(codes, yf, np.ones(n, bool))
        fit(Data(codes[:50], yf[:50], np.ones(50, bool)), cfg, geo)  # compile
        started = time.perf_counter()
        model = fit(data, cfg, geo)
        fit_s = time.perf_counter() - started
        kv = np.array([predict_one(model, codes_v, i) for i in range(len(yv))])
        acc = float(np.mean((kv > 0) == yv))
        mv = new_moved(n)
        victims = rng.choice(n, deletions, replace=False)
        per = {m: [] for m, _ in METRICS}
        verified = 0
        for i, r in enumerate(victims):
            started = time.perf_counter()
            cnt = forget(data, model, int(r), cfg, geo, mv)
            mid = time.perf_counter()
            predict_one(model, codes_v, i % len(yv))
            end = time.perf_counter()
            per["forget ms"].append(1e3 * (mid - started))
            per["forget + predict ms"].append(1e3 * (end - started))
            per["est. ms (updates × ns)"].append(cnt[C_UPDATES] * ns / 1e6)
            for m, c in METRICS:
                if c is not None:
                    per[m].append(int(cnt[c]))
            if i < checks:
                verified += same_model(
                    model, fit(Data(codes, yf, data.alive.copy()), cfg, geo), data
                )
        untouched = sum(
            a == 0 and b == 0
            for a, b in zip(per["leaf values changed"], per["stages refitted"], strict=True)
        )
        rows.append({
            "dataset": name, "n": n, "design": label, "min leaf": cfg.min_leaf,
            "val": round(acc, 4), "val HGB": round(val_hgb, 4),
            "gap (pp)": round(100 * (acc - val_hgb), 2), "fit s": round(fit_s, 2),
            "HGB fit s": round(hgb_s, 2), "fit / HGB": round(fit_s / hgb_s, 1),
            **_memory(model, geo, n, codes.shape[1]), "HGB pickle MB": round(hgb_mb, 2),
            "deletions": deletions, "no leaf or split changed": untouched,
            "refit-checked": f"{verified}/{min(checks, deletions)}",
        })  # fmt: skip
        print(rows[-1], flush=True)
        for m, _ in METRICS:
            v = np.asarray(per[m], dtype=np.float64)
            p50, p90, p99 = np.percentile(v, [50, 90, 99])
            costs.append({
                "dataset": name, "design": label, "metric": m, "p50": round(p50, 3),
                "p90": round(p90, 3), "p99": round(p99, 3), "max": round(float(v.max()), 3),
                "mean": round(float(v.mean()), 3),
            })  # fmt: skip
    return rows, costs, ns


NOTES = (
    "Validation split (stratified 20 %) of the training rows only; the test rows are never "
    "read. One seed. Bins: 255 per feature, edges from 2,000 seeded fitting rows. Deletions "
    "are applied one after another (each on the model the previous left); the first "
    '"refit-checked" of them are compared with a from-scratch fit without every forgotten row '
    "(structures, leaf values, node sums, statistics, base score, every row's score: "
    'array_equal). "no leaf or split changed": deletions that only subtracted the row\'s own '
    'terms. "stages touched": stages with a changed leaf value or a moved row. "rows moved": '
    "rows whose score differs between the old and the new model while the cascade runs. "
    '"integer updates": int64 adds into node sums and statistics (3 per slot). "est. ms": '
    "updates × the measured ns per scattered int64 add. Timings: one thread (numba kernels, "
    "HGB under threadpool_limits(1)); forget + predict = the forget plus one row's score. "
    "Memory: a splittable node keeps its (G, H, N) and, per candidate (K designs) or per bin "
    "of every feature (all-bins), the left (G, H, N) sums, int64; row lists: each stage's "
    "rows grouped by leaf (int32), needed to find a changed leaf's rows; codes: the rows' "
    "uint8 bin codes (the data a partial refit reads). HGB pickle: its whole fitted model."
)


def conclusion(rows: list[dict], costs: list[dict], ns: float) -> str:
    """The findings paragraph, every figure from this run's tables."""
    out = [f"Measured cost of one scattered int64 add: {ns:.2f} ns."]
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == name]
        best = max(mine, key=lambda r: r["val"])
        c = {
            x["metric"]: x for x in costs if x["dataset"] == name and x["design"] == best["design"]
        }
        fp = c["forget + predict ms"]
        out.append(
            f"**{name}** (n = {best['n']:,}): the validation-best design, {best['design']}, "
            f"scores {best['val']} vs HGB {best['val HGB']} ({best['gap (pp)']:+.2f} pp); fit "
            f"{best['fit s']} s = {best['fit / HGB']}× HGB's {best['HGB fit s']} s on one thread. "
            f"Per deletion ({best['deletions']}; {best['no leaf or split changed']} changed no "
            f"leaf or split; refit-checked {best['refit-checked']}): forget + predict p50 "
            f"{fp['p50']} / p90 {fp['p90']} / p99 {fp['p99']} / max {fp['max']} ms; stages "
            f"refitted p50 {c['stages refitted']['p50']} / p99 {c['stages refitted']['p99']}; "
            f"rows moved (largest set) p50 {c['rows moved (largest set)']['p50']} / p99 "
            f"{c['rows moved (largest set)']['p99']}; integer updates p50 "
            f"{c['integer updates']['p50']:,.0f} (est. {c['est. ms (updates × ns)']['p50']} ms). "
            f"Memory: {best['bytes / splittable node']:,} bytes a splittable node, model "
            f"{best['model MB']} MB (statistics {best['stats MB']} MB, row lists "
            f"{best['row lists MB']} MB, codes {best['codes MB']} MB) against HGB's "
            f"{best['HGB pickle MB']} MB pickle. Bounds (forget + predict p50 ≤ 2 ms, fit ≤ 2× "
            f"HGB): p50 {'met' if fp['p50'] <= 2 else 'missed'}, fit "
            f"{'met' if best['fit / HGB'] <= 2 else 'missed'} at this n."
        )
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m forgetting_lab.bench.boosting_lazy", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="adult, 4,000 rows, 2 designs")
    parser.add_argument("--datasets", default=None, help="comma list (default: adult,flights)")
    parser.add_argument("--designs", default=None, help="comma list of DESIGNS' names")
    parser.add_argument("--deletions", type=int, default=None, help="override per table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    tables = QUICK if args.quick else TABLES
    if args.datasets:
        tables = {d: tables.get(d, TABLES.get(d, (None, 100, 3))) for d in args.datasets.split(",")}
    designs = (
        args.designs.split(",") if args.designs else (QUICK_DESIGNS if args.quick else DESIGNS)
    )
    unknown = [d for d in designs if d not in DESIGNS]
    if unknown:
        parser.error(f"unknown design {unknown[0]!r}; choose from {', '.join(DESIGNS)}")
    rows, costs, ns = [], [], 0.0
    if args.deletions is not None:
        tables = {k: (v[0], args.deletions, min(v[2], args.deletions)) for k, v in tables.items()}
    for name, (keep, deletions, checks) in tables.items():
        r, c, ns = study(name, keep, deletions, checks, designs, args.seed)
        rows, costs = rows + r, costs + c
    command = "python -m forgetting_lab.bench.boosting_lazy " + shlex.join(
        a for a in (argv if argv is not None else sys.argv[1:])
    )
    scaled = "; ".join(
        f"{k}: {'all' if v[0] is None else f'{v[0]:,} seeded'} fitting rows, {v[1]} deletions, "
        f"{v[2]} refit-checked"
        for k, v in tables.items()
    )
    notes = NOTES + f" Scale: {scaled}. FORGETTING_THREADS={os.environ.get('FORGETTING_THREADS')}."
    notes += "\n\n## Conclusion\n\n" + conclusion(rows, costs, ns)
    design_cols = list(rows[0]) if rows else []
    cost_cols = ["dataset", "design", "metric", "p50", "p90", "p99", "max", "mean"]
    name = args.name or ("boosting-lazy-quick" if args.quick else "boosting-lazy")
    write_results(
        args.out, name, command.strip(),
        {"Designs": (rows, design_cols), "Per-deletion cost": (costs, cost_cols)}, notes,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
