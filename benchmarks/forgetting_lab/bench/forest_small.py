"""How small can the forest's D° be on a small table? ρ_eff against validation accuracy.

Run ``python -m forgetting_lab.bench.forest_small [--quick]``. Issue 69: on a 3.7k-row table
the exact forest's effective ρ — the probability that one more deletion hits some instance's
D° and starts a rebuild — is about 15 %, because each of the 3 instances keeps at least
``min_bin_rows`` = 200 rows in D° whatever ρ says. The goal is ρ_eff ≤ 2 % on a 4k-row table
at the defaults *with no accuracy loss*. D° only fixes the bin grid (docs/forest.md), so the
question is what a grid from fewer D° rows costs.

For each table (the benchmark's small ones, larger ones subsampled to about 4,000 training
rows, and three mlbench tables no bench used before this issue's DP study) and each floor in
:data:`FLOORS`, it fits ``ExactForestClassifier(min_bin_rows=floor)`` (every other parameter
at its default) on 80 % of the training rows and scores the other 20 % — validation only, the
test rows are never read — over :data:`SEEDS` seeds (random_state, key and split), and
records the fitted model's ``effective_rho_``. It does not change a default: it says which
floor meets the goal and what it costs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .privacy_forest_dp import load_table, table_sizes
from .report import write_results

EXPECTED_DURATION = "about 3 min on 2 cores (--quick: 5 s)"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

FLOORS = (200, 100, 50, 25)
"""``min_bin_rows`` values measured (200 is the default)."""
SEEDS = 3
KEY = "forest-small-bench-key"
TABLES = {
    "credit": None,
    "satellite": None,
    "dna": None,
    "vehicle": None,
    "vowel": None,
    "adult": 4000,
    "letter": 4000,
    "shuttle": 4000,
    "flights": 4000,
}
"""Table → training rows kept (None: all of its training split)."""
QUICK = {"vehicle": None}
RESULTS = Path(__file__).resolve().parents[2] / "results"
"""benchmarks/results, wherever the command runs."""


def one(X: np.ndarray, y: np.ndarray, floor: int, seed: int) -> tuple[float, float, int]:
    """(validation accuracy, effective ρ, D° rows per instance) of the default forest with
    ``min_bin_rows=floor`` on an 80/20 split of the training rows (seed ``seed``)."""
    from sklearn.model_selection import train_test_split

    from forgetting import ExactForestClassifier

    counts = np.bincount(y)
    strata = y if counts[counts > 0].min() >= 2 else None  # a class of one row: plain split
    Xa, Xv, ya, yv = train_test_split(X, y, test_size=0.2, random_state=seed, stratify=strata)
    model = ExactForestClassifier(
        min_bin_rows=floor, random_state=seed, secret_key=f"{KEY}-{seed}"
    ).fit(Xa, ya)
    accuracy = float(np.mean(model.predict(Xv) == yv))
    rho = float(model.effective_rho_)
    per_instance = max(floor, int(np.ceil(model.rho * len(ya))))
    return accuracy, rho, per_instance


def run(tables: dict, floors: Sequence[int], seeds: int) -> tuple[list[dict], list[dict]]:
    per_seed, summary = [], []
    for name, n_train in tables.items():
        X, y, _, _ = load_table(name, n_train)  # the test rows are dropped unread
        base = None
        for floor in floors:
            runs = [one(X, y, floor, seed) for seed in range(seeds)]
            for seed, (accuracy, rho, _) in enumerate(runs):
                per_seed.append(
                    {
                        "table": name,
                        "min_bin_rows": floor,
                        "seed": seed,
                        "validation accuracy": round(accuracy, 4),
                        "effective rho": round(rho, 4),
                    }
                )
            accuracy = float(np.mean([r[0] for r in runs]))
            base = accuracy if base is None else base
            summary.append(
                {
                    "table": name,
                    "training rows (80 %)": int(round(0.8 * len(y))),
                    "min_bin_rows": floor,
                    "D° rows per instance": runs[0][2],
                    "effective rho": round(float(np.mean([r[1] for r in runs])), 4),
                    "validation accuracy": round(accuracy, 4),
                    "vs min_bin_rows=200 (pp)": round(100 * (accuracy - base), 2),
                    "seed spread (pp)": round(
                        100 * (max(r[0] for r in runs) - min(r[0] for r in runs)), 2
                    ),
                }
            )
            print(summary[-1], file=sys.stderr, flush=True)
    return summary, per_seed


def per_floor(summary: list[dict]) -> list[dict]:
    """Per floor: the mean effective ρ over tables of at least 2,800 training rows, the
    worst validation change against the default floor, and the tables losing over 0.5 pp."""
    rows = []
    for floor in dict.fromkeys(r["min_bin_rows"] for r in summary):
        at = [r for r in summary if r["min_bin_rows"] == floor]
        big = [r["effective rho"] for r in at if r["training rows (80 %)"] >= 2800]
        losers = [r["table"] for r in at if r["vs min_bin_rows=200 (pp)"] < -0.5]
        worst = min(at, key=lambda r: r["vs min_bin_rows=200 (pp)"])
        rows.append(
            {
                "min_bin_rows": floor,
                "mean effective rho (tables of 2,800+ rows)": round(float(np.mean(big)), 4)
                if big
                else float("nan"),
                "worst change (pp)": worst["vs min_bin_rows=200 (pp)"],
                "worst table": worst["table"],
                "tables losing > 0.5 pp": ", ".join(losers) or "none",
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forgetting_lab.bench.forest_small")
    parser.add_argument("--quick", action="store_true", help="one small table, one seed")
    parser.add_argument("--tables", default=None, help="name[=n_train],... (default: all)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--name", default="forest-small")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    tables = table_sizes(args.tables) if args.tables else (QUICK if args.quick else TABLES)
    seeds = 1 if args.quick else SEEDS
    summary, per_seed = run(tables, FLOORS, seeds)
    command = " ".join(
        ["python -m forgetting_lab.bench.forest_small", *(sys.argv[1:] if argv is None else argv)]
    )
    sizes = ", ".join(f"{t} {'all' if n is None else n}" for t, n in tables.items())
    notes = (
        f"Training rows per table before the 80/20 validation split: {sizes} (a number: a "
        "seeded subsample of its training split). Every parameter but min_bin_rows at the "
        f"library's default (30 trees, ρ 0.005, 3 instances); means over {seeds} seeds "
        "(random_state, key and split). effective rho: the fitted model's effective_rho_, the "
        "probability that one more single-row deletion is in some instance's D° and starts a "
        "rebuild. The test rows are never read. Wall time "
        f"{time.perf_counter() - started:.0f} s.\n"
    )
    verdict = per_floor(summary)
    write_results(
        Path(args.out),
        args.name,
        command,
        {
            "Per floor: what a smaller D° costs across the tables": (verdict, list(verdict[0])),
            "D° floor against validation accuracy": (summary, list(summary[0])),
            "Per seed": (per_seed, list(per_seed[0])),
        },
        notes,
    )
    print(f"wrote {args.out}/{args.name}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
