"""Accuracy of the exact forest's label-DP (``mode="dp"``: keyed randomized response) beside
the non-DP forest and QSS-DP at the same ε (issue 71, item 2).

    python -m forgetting_lab.bench.privacy_forest_dp            # ~15 min on one loaded core
    python -m forgetting_lab.bench.privacy_forest_dp --quick    # a smoke run (the test's)

Per table and ε ∈ {1, 8}: the training split is cut 80/20 (stratified, seed 0) into a fit part
and a *validation* part. On validation only: the DP forest's leaf-size factor f (the leaf floor
is f/(p − q)² rows, :func:`forgetting.privacy.randomized_response.dp_min_leaf`) over a grid,
and which DP model — the DP forest or QSS-DP — is better. *Test* accuracies (fit on the whole
training split, scored on the fixed test split) are reported for the non-DP forest, the DP
forest at the library's factor, the DP forest at the factor validation chose for the table,
and QSS-DP (δ = 1e-5, its defaults). The grid's winner over all tables (mean validation
accuracy) is what the library's ``LEAF_FACTOR`` should be; the file says whether it is.

Tables: the benchmark's adult, letter, shuttle, satellite and credit (large ones subsampled to
``n_train`` rows, as stated in the file), and three it has not
used, from Debian's r-cran-mlbench (``/usr/lib/R/site-library/mlbench/data``): DNA (3 186
rows, 180 binary features, 3 classes), Vehicle (846 rows, 18 numerics, 4 classes) and Vowel
(990 rows, 10 numerics, 11 classes), split 70/30 stratified with seed 0 (no documented split).
Every accuracy is the mean over 3 seeds (random_state and key: three draws of the randomized
labels).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import numpy as np

from .report import write_results

EXPECTED_DURATION = "about 3 min on 2 cores (--quick: 20 s)"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

EPSILONS = (1.0, 8.0)
FACTORS = (0.1, 0.25, 0.5, 1.0, 2.0)
DELTA = 1e-5
KEY = "privacy-forest-dp-bench-key"
TABLES = {
    "adult": 8000,
    "letter": 8000,
    "shuttle": 8000,
    "satellite": None,
    "credit": None,
    "flights": 8000,
    "dna": None,
    "vehicle": None,
    "vowel": None,
}
"""Table → training rows kept (None: all)."""
QUICK = {"credit": 600, "vehicle": None}
NEW_TABLES = {"dna": ("DNA", "Class"), "vehicle": ("Vehicle", "Class"), "vowel": ("Vowel", "Class")}
MLBENCH = Path("/usr/lib/R/site-library/mlbench/data")
RESULTS = Path(__file__).resolve().parents[2] / "results"
"""benchmarks/results, wherever the command runs."""


def load_new_table(name: str, n_train: int | None = None):
    """(X_train, y_train, X_test, y_test) of an mlbench table the benchmark had not used:
    every column but the label as floats (a factor by its code, NA as NaN — the forest's
    missing value; QSS gets NaN as 0 after standardizing), 70/30 stratified split, seed 0."""
    from sklearn.model_selection import train_test_split

    from ..datasets.letter import read_rda

    stem, label = NEW_TABLES[name]
    frame = read_rda(MLBENCH / f"{stem}.rda")[stem]
    columns = dict(zip(frame.attr("names"), frame.value, strict=True))
    y = np.asarray(columns.pop(label).value, dtype=np.int64) - 1
    X = np.column_stack([np.asarray(c.value, dtype=np.float64) for c in columns.values()])
    X[X < -2e9] = np.nan  # R's integer NA
    Xa, Xt, ya, yt = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    if n_train is not None and n_train < len(ya):
        keep = np.random.default_rng(0).permutation(len(ya))[:n_train]
        Xa, ya = Xa[keep], ya[keep]
    mean, std = np.nanmean(Xa, axis=0), np.nanstd(Xa, axis=0)
    std[std == 0] = 1.0
    return (Xa - mean) / std, ya, (Xt - mean) / std, yt


def table_sizes(text: str) -> dict[str, int | None]:
    """``--tables name[=n_train],...`` as {table: training rows kept (None: all)}."""
    return {t.split("=")[0]: (int(t.split("=")[1]) if "=" in t else None) for t in text.split(",")}


def load_table(name: str, n_train: int | None):
    if name in NEW_TABLES:
        return load_new_table(name, n_train)
    from ..datasets.loaders import load_dataset

    data = load_dataset(name, n_train=n_train)
    return data.X_train, data.y_train, data.X_test, data.y_test


@contextmanager
def leaf_factor(factor: float):
    """The library's leaf factor set to ``factor`` for the grid (put back after)."""
    from forgetting.privacy import randomized_response as rr

    saved = rr.LEAF_FACTOR
    rr.LEAF_FACTOR = float(factor)
    try:
        yield
    finally:
        rr.LEAF_FACTOR = saved


def forest(epsilon: float | None, seed: int = 0):
    from forgetting import ExactForestClassifier

    params = {"secret_key": f"{KEY}-{seed}", "random_state": seed}
    if epsilon is not None:
        params.update(mode="dp", epsilon=epsilon)
    return ExactForestClassifier(**params)


def qss_dp(epsilon: float, seed: int = 0):
    from forgetting import QSSClassifier

    return QSSClassifier(
        mode="dp",
        epsilon=epsilon,
        delta=DELTA,
        secret_key=f"{KEY}-{seed}",
        random_state=seed,
        rebuild="sync",
    )


SEEDS = 3


def score(make, X, y, Xs, ys) -> float:
    """Mean accuracy over :data:`SEEDS` models ``make(seed)`` (seed = random_state and
    key: a new draw of the randomized labels and of the trees each)."""
    accuracies = []
    for seed in range(SEEDS):
        model = make(seed).fit(X, y)
        accuracies.append(float(np.mean(model.predict(Xs) == ys)))
    return float(np.mean(accuracies))


def finite(X: np.ndarray) -> np.ndarray:
    """QSS takes finite features: NaN (a missing value) as 0, the standardized mean."""
    return np.nan_to_num(X, nan=0.0)


def run(tables: dict, epsilons: Sequence[float], factors: Sequence[float]):
    """(summary rows, validation-grid rows)."""
    from sklearn.model_selection import train_test_split

    from forgetting.privacy import randomized_response as rr

    summary, grid = [], []
    for name, n_train in tables.items():
        X, y, Xs, ys = load_table(name, n_train)
        k = int(np.unique(y).size)
        Xa, Xv, ya, yv = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
        exact_test = score(partial(forest, None), X, y, Xs, ys)
        exact_val = score(partial(forest, None), Xa, ya, Xv, yv)
        for epsilon in epsilons:
            val = {}
            for f in factors:
                with leaf_factor(f):
                    val[f] = score(partial(forest, epsilon), Xa, ya, Xv, yv)
                grid.append(
                    {
                        "table": name,
                        "epsilon": epsilon,
                        "factor": f,
                        "leaf": rr.dp_min_leaf(epsilon, k, f),
                        "validation": round(val[f], 4),
                    }
                )
            chosen = max(factors, key=lambda f: (val[f], -f))
            with leaf_factor(chosen):
                chosen_test = score(partial(forest, epsilon), X, y, Xs, ys)
            default_test = score(partial(forest, epsilon), X, y, Xs, ys)
            qss_val = score(partial(qss_dp, epsilon), finite(Xa), ya, finite(Xv), yv)
            qss_test = score(partial(qss_dp, epsilon), finite(X), y, finite(Xs), ys)
            forest_val = max(val.values())
            row = {
                "table": name,
                "n_train": len(y),
                "classes": k,
                "epsilon": epsilon,
                "forest (no DP)": round(exact_test, 4),
                "DP forest, library factor": round(default_test, 4),
                "library − no DP (pp)": round(100 * (default_test - exact_test), 1),
                "leaf (library)": rr.dp_min_leaf(epsilon, k),
                "validation-chosen factor": chosen,
                "leaf (chosen)": rr.dp_min_leaf(epsilon, k, chosen),
                "DP forest, chosen factor": round(chosen_test, 4),
                "chosen − no DP (pp)": round(100 * (chosen_test - exact_test), 1),
                "QSS-DP": round(qss_test, 4),
                "better DP model (validation)": "forest" if forest_val >= qss_val else "QSS",
                "better DP model (test)": "forest" if chosen_test >= qss_test else "QSS",
                "forest validation (no DP)": round(exact_val, 4),
                "DP forest validation": round(forest_val, 4),
                "QSS-DP validation": round(qss_val, 4),
            }
            summary.append(row)
            print(row, flush=True)
    return summary, grid


def factor_choice(grid: list[dict]) -> list[dict]:
    """Mean validation accuracy of each factor over every table and ε (the rule for the
    library's single factor)."""
    factors = sorted({r["factor"] for r in grid})
    return [
        {
            "factor": f,
            "mean validation accuracy": round(
                float(np.mean([r["validation"] for r in grid if r["factor"] == f])), 4
            ),
        }
        for f in factors
    ]


def main(argv: Sequence[str] | None = None) -> int:
    from forgetting.privacy import randomized_response as rr

    parser = argparse.ArgumentParser(prog="python -m forgetting_lab.bench.privacy_forest_dp")
    parser.add_argument("--quick", action="store_true", help="two small tables, two factors")
    parser.add_argument("--tables", default=None, help="name[=n_train],... (default: all)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--name", default="privacy-forest-dp")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    tables = table_sizes(args.tables) if args.tables else (QUICK if args.quick else TABLES)
    factors = (0.5, 1.0) if args.quick else FACTORS
    global SEEDS
    SEEDS = 1 if args.quick else SEEDS
    summary, grid = run(tables, EPSILONS, factors)
    choice = factor_choice(grid)
    best = max(choice, key=lambda r: (r["mean validation accuracy"], -r["factor"]))["factor"]
    command = " ".join(
        [
            "python -m forgetting_lab.bench.privacy_forest_dp",
            *(sys.argv[1:] if argv is None else argv),
        ]
    )
    sizes = ", ".join(f"{t} {'all' if n is None else n} training rows" for t, n in tables.items())
    notes = (
        f"Tables: {sizes} (subsampled where a number is given). "
        "Validation = 20 % of the training split (stratified, seed 0); test = the fixed test "
        "split. The library's leaf factor when run: "
        f"{rr.LEAF_FACTOR}; the grid's best by mean validation accuracy: {best}"
        f"{' (the same)' if best == rr.LEAF_FACTOR else ' (differs: set LEAF_FACTOR and rerun)'}."
        f" Accuracies: means over {SEEDS} seeds (random_state and key). Wall time "
        f"{time.perf_counter() - started:.0f} s.\n"
    )
    columns = list(summary[0])
    write_results(
        Path(args.out),
        args.name,
        command,
        {
            "Test accuracy: the forest without DP, the DP forest, QSS-DP": (summary, columns),
            "Validation grid of the leaf factor": (grid, list(grid[0])),
            "Leaf factor: mean validation accuracy over tables and ε": (
                choice,
                ["factor", "mean validation accuracy"],
            ),
        },
        notes,
    )
    print(f"wrote {args.out}/{args.name}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
