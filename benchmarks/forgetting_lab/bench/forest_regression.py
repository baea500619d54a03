"""The exact regression forest on a raw mixed table, beside the model a user would deploy.

Run ``python -m forgetting_lab.bench.forest_regression``. On ggplot2's diamonds as the
pipeline-tables benchmark builds it (:func:`forgetting_lab.bench.pipeline_tables.load_table`:
30,000 training and 10,000 test rows, 5 % of every column's values set missing, three
pandas ``category`` columns), target log price:

1. carve a validation split (:data:`VALIDATION_FRACTION`, seeded) from the *training* rows,
   fit :class:`~forgetting.ExactForestRegressor` on the rest for each point of the grid
   (``min_samples_leaf`` × ``max_features``, then ``min_bin_rows`` — how many D° rows fix the
   bin edges — with the best pair, then ``n_estimators``) and keep the lowest validation RMSE
   — the test rows are never read to choose;
2. refit the chosen forest on every training row and score it on the test rows, beside a
   full-data ``HistGradientBoostingRegressor(categorical_features="from_dtype")`` and today's
   ``QSSRegressor`` default on the same raw DataFrame, all fitted in this run;
3. forget single rows (random ones plus two of D°, which refit), each followed by a one-row
   prediction (what a caller waits for), then compare with a fit from scratch on the rows
   left: test predictions and the state digest.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from .pipeline_tables import load_table
from .report import write_results

EXPECTED_DURATION = "about 15 min on 2 cores"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

VALIDATION_FRACTION = 0.2
LEAVES = (1, 3, 5)
CANDIDATES = ("sqrt", 9, 36, 64)
TREES = (30, 60, 120)
BIN_ROWS = (200, 500, 1000, 2000)
"""D° sizes tried (``min_bin_rows``): more D° rows give finer bin edges, and make a forget
hit D° (a refit) more often — the share is reported beside the choice."""
SECRET_KEY = b"forest-regression-benchmark-key!"

GRID_COLUMNS = [
    "min_samples_leaf", "max_features", "min_bin_rows", "n_estimators", "val_rmse", "fit_s",
]  # fmt: skip
QUALITY_COLUMNS = ["model", "test_rmse", "vs_HGB", "fit_s", "MB"]
FORGET_COLUMNS = [
    "forgets", "D° hits", "p50_ms", "p90_ms", "max_ms", "refit_s", "same_predictions",
    "same_digest",
]  # fmt: skip


def rmse(pred, y) -> float:
    return float(np.sqrt(np.mean((np.asarray(pred) - y) ** 2)))


def forest(leaf, features, bin_rows, trees, seed):
    from forgetting import ExactForestRegressor

    return ExactForestRegressor(
        n_estimators=trees,
        max_features=features,
        min_samples_leaf=leaf,
        min_bin_rows=bin_rows,
        random_state=seed,
        secret_key=SECRET_KEY,
    )


def timed_fit(model, X, y):
    started = time.perf_counter()
    model.fit(X, y)
    return model, time.perf_counter() - started


def choose(
    Xtr, ytr, seed, grid_rows, leaves=LEAVES, candidates=CANDIDATES, bin_rows=BIN_ROWS,
    trees=TREES,
):  # fmt: skip
    """The (leaf, features, bin rows, trees) with the lowest validation RMSE, each stage at
    the best of the ones before."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(ytr))
    cut = int(VALIDATION_FRACTION * len(ytr))
    val, fit = order[:cut], order[cut:]
    Xf, yf, Xv, yv = Xtr.iloc[fit], ytr[fit], Xtr.iloc[val], ytr[val]

    def score(leaf, features, rows, trees):
        model, secs = timed_fit(forest(leaf, features, rows, trees, seed), Xf, yf)
        value = rmse(model.predict(Xv), yv)
        point = (leaf, features, rows, trees, value, secs)
        grid_rows.append(dict(zip(GRID_COLUMNS, point, strict=True)))
        where = dict(zip(GRID_COLUMNS[:4], point[:4], strict=True))
        print(f"  {where}: val {value:.4f}", flush=True)
        return value

    first = bin_rows[0]
    pairs = {(leaf, f): score(leaf, f, first, trees[0]) for leaf in leaves for f in candidates}
    leaf, features = min(pairs, key=pairs.get)
    by_rows = {first: pairs[(leaf, features)]}
    by_rows.update({r: score(leaf, features, r, trees[0]) for r in bin_rows[1:]})
    rows = min(by_rows, key=by_rows.get)
    by_trees = {trees[0]: by_rows[rows]}
    by_trees.update({t: score(leaf, features, rows, t) for t in trees[1:]})
    return leaf, features, rows, min(by_trees, key=by_trees.get)


def forget_and_compare(model, Xtr, ytr, Xte, n_forgets, seed, chosen):
    ids = list(range(len(ytr)))
    pool = model.pool_ids_
    rng = np.random.default_rng(seed + 1)
    rest = [i for i in rng.permutation(len(ytr)).tolist() if i not in set(pool)]
    victims = rest[: n_forgets - 2] + rng.choice(pool, 2, replace=False).tolist()
    victims = [int(v) for v in rng.permutation(victims)]
    waited, hits = [], 0
    x1 = Xte.iloc[:1]
    for v in victims:
        started = time.perf_counter()
        receipt = model.forget([v])
        model.predict(x1)
        waited.append(time.perf_counter() - started)
        hits += len(receipt.instances_hit) > 0
    model.wait_for_rebuilds()  # with n_instances > 1 a hit rebuilt its instance meanwhile
    keep = sorted(set(ids) - set(victims))
    started = time.perf_counter()
    refit = forest(*chosen, seed).fit(Xtr.iloc[keep], ytr[keep], ids=keep)
    refit_s = time.perf_counter() - started
    ms = 1e3 * np.array(waited)
    return {
        "forgets": len(victims),
        "D° hits": hits,
        "p50_ms": float(np.median(ms)),
        "p90_ms": float(np.percentile(ms, 90)),
        "max_ms": float(ms.max()),
        "refit_s": refit_s,
        "same_predictions": bool(np.array_equal(model.predict(Xte), refit.predict(Xte))),
        "same_digest": model.structure_digest() == refit.structure_digest(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m forgetting_lab.bench.forest_regression",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--max-train", type=int, default=30_000)
    parser.add_argument("--max-test", type=int, default=10_000)
    parser.add_argument("--forgets", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--name", default="forest-regression")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 1,500 rows, a 2-point grid, 5 trees"
    )
    args = parser.parse_args(argv)
    grid = {}
    if args.quick:
        args.max_train, args.max_test, args.forgets = 1500, 300, 6
        grid = dict(leaves=(3,), candidates=(9, 36), bin_rows=(200, 400), trees=(5,))

    from sklearn.ensemble import HistGradientBoostingRegressor

    from forgetting import QSSRegressor

    Xtr, ytr, Xte, yte, _, note = load_table("diamonds", args.max_train, args.max_test)
    print(f"diamonds: {note}", flush=True)
    grid_rows: list[dict] = []
    chosen = choose(Xtr, ytr, args.seed, grid_rows, **grid)
    print(f"chosen on validation: leaf, features, bin rows, trees = {chosen}", flush=True)
    hgb, hgb_s = timed_fit(
        HistGradientBoostingRegressor(categorical_features="from_dtype", random_state=args.seed),
        Xtr,
        ytr,
    )
    base = rmse(hgb.predict(Xte), yte)
    quality = [dict(model="HistGradientBoosting (from_dtype, full data)", test_rmse=base,
                    vs_HGB="—", fit_s=hgb_s, MB="")]  # fmt: skip
    qss, qss_s = timed_fit(QSSRegressor(secret_key=SECRET_KEY), Xtr, ytr)
    model, model_s = timed_fit(forest(*chosen, args.seed), Xtr, ytr)
    for label, m, secs, mb in (
        ("QSSRegressor default, raw DataFrame", qss, qss_s, ""),
        ("ExactForestRegressor (chosen on validation)", model, model_s,
         f"{model.engine_.nbytes() / 2**20:.0f}"),
    ):  # fmt: skip
        value = rmse(m.predict(Xte), yte)
        quality.append(dict(model=label, test_rmse=value, vs_HGB=f"{value / base - 1:+.1%}",
                            fit_s=secs, MB=mb))  # fmt: skip
        print(f"{label}: test RMSE {value:.4f} (HGB {base:.4f})", flush=True)
    forgets = [forget_and_compare(model, Xtr, ytr, Xte, args.forgets, args.seed, chosen)]
    leaf, features, bin_rows, trees = chosen
    share = len(model.pool_ids_) / len(ytr)
    notes = (
        f"diamonds: {note}; target log price. Chosen on the validation split "
        f"({VALIDATION_FRACTION:.0%} of the training rows): min_samples_leaf {leaf}, "
        f"max_features {features}, min_bin_rows {bin_rows} (D° holds {share:.1%} of the "
        f"training rows: that share of random one-row forgets refits the forest), "
        f"n_estimators {trees}; other parameters at their defaults (ρ 0.005, 255 bins). "
        "The category columns enter as the codes of their dtype's declared categories. "
        "Forget rows: random ones plus two of D° (each refits the forest); the latency is a "
        "forget and a one-row prediction after it. MB: the forest's arrays and rows."
    )
    command = "python -m forgetting_lab.bench.forest_regression " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    path = write_results(
        args.out,
        args.name,
        command.strip(),
        {
            "test RMSE": (quality, QUALITY_COLUMNS),
            "forget + first predict, and forget = refit": (forgets, FORGET_COLUMNS),
            "validation grid": (grid_rows, GRID_COLUMNS),
        },
        notes,
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
