"""The paper benchmark's tables: summaries over seeds, the targets checked on the measured
numbers, the column schema of every CSV, and the writer.

Why apart from the stages: a table is a view of what the stages measured; keeping the views
here means a new column never changes a measurement, and the tests pin each CSV's columns.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..report import write_results
from .data import LGBM_SUFFIX, PAPER_SPEEDUP, Data
from .prose import notes_text
from .stages import Results

MODELS = ("g-only", "QSS-E", "QSS-L", "SISA", "exact ridge")


def mean_std(values: Sequence[float], digits: int = 4) -> str:
    """``"0.9032 ± 0.0012"`` (sample std over seeds; ``± 0`` for one seed)."""
    values = np.asarray(values, dtype=np.float64)
    std = float(values.std(ddof=1)) if values.size > 1 else 0.0
    return f"{values.mean():.{digits}f} ± {std:.{digits}f}"


def _four_figures(runs: list[dict], metric: str) -> int:
    """Decimals that show a metric's mean to 4 significant figures (RMSE 57.67, 0.1928)."""
    mean = abs(float(np.mean([r[metric] for r in runs]))) if runs else 0.0
    return max(0, 3 - int(np.floor(np.log10(mean)))) if mean > 0 else 4


def metric_mean(runs: list[dict], key: str, model: str, metric: str) -> float:
    vals = [r[metric] for r in runs if r["dataset"] == key and r["model"] == model]
    return float(np.mean(vals)) if vals else float("nan")


def accuracy_summary(datas: list[Data], runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """Classification rows (accuracy ± std, Δ vs SISA in pp) and regression rows."""
    cls_rows, reg_rows = [], []
    for data in datas:
        mine = [r for r in runs if r["dataset"] == data.key]
        if not mine:
            continue
        if data.classification:
            row = {
                "dataset": data.key,
                "features": data.features,
                "k": data.n_classes,
                "n_train": data.n_train,
                "rho": data.rho,
            }
            for model in MODELS:
                row[model] = mean_std([r["accuracy"] for r in mine if r["model"] == model])
            sisa = metric_mean(runs, data.key, "SISA", "accuracy")
            for mode in ("QSS-L", "QSS-E"):
                delta = 100 * (metric_mean(runs, data.key, mode, "accuracy") - sisa)
                row[f"Δ({mode}−SISA) pp"] = f"{delta:+.2f}"
            row["note"] = "; ".join(data.notes)
            cls_rows.append(row)
        else:
            for model in MODELS:
                sel = [r for r in mine if r["model"] == model]
                reg_rows.append(
                    {
                        "dataset": data.key,
                        "n_train": data.n_train,
                        "rho": data.rho,
                        "model": model,
                        "pearson_r": mean_std([r["pearson_r"] for r in sel]),
                        "rmse": mean_std([r["rmse"] for r in sel], _four_figures(sel, "rmse")),
                        "note": "; ".join(data.notes),
                    }
                )
    return cls_rows, reg_rows


def target_rows(
    datas: list[Data], runs: list[dict], deletion: list[dict], exact: list[dict]
) -> list[dict]:
    """Check the benchmark's targets (the paper's claims and ours) on the measured numbers;
    say why when one is missed."""
    rows = []
    bad = []
    for data in datas:
        g_key = "accuracy" if data.classification else "rmse"
        g = metric_mean(runs, data.key, "g-only", g_key)
        for mode in ("QSS-E", "QSS-L"):
            q = metric_mean(runs, data.key, mode, g_key)
            worse = q < g if data.classification else q > g
            if worse:
                sd = [
                    np.std([r[g_key] for r in runs if r["dataset"] == data.key and r["model"] == m])
                    for m in (mode, "g-only")
                ]
                why = f"; seed std {sd[0]:.4g} / {sd[1]:.4g}"
                if data.classification:
                    bq = metric_mean(runs, data.key, mode, "brier")
                    bg = metric_mean(runs, data.key, "g-only", "brier")
                    why += f"; Brier {bq:.4f} vs {bg:.4f}"
                bad.append(f"{data.key} {mode} {q:.4f} vs g-only {g:.4f} ({g_key}{why})")
    rows.append(
        {
            "target": "QSS ≥ g-only everywhere (mean over seeds; RMSE for regression)",
            "met": not bad,
            "evidence": "all datasets and both modes"
            if not bad
            else "missed: "
            + "; ".join(bad)
            + ". Why: α is cross-fitted on the statistics' two folds (never on test rows) to "
            "minimize the squared error of the outputs (the Brier score for classes), so "
            "QSS ≥ g-only holds in expectation, not on every finite test split; a gap inside "
            "the seed std is noise, and for classes a lower Brier can coexist with a few "
            "argmaxes flipped the wrong way",
        }
    )
    low = [d for d in datas if d.classification and d.n_classes <= 10 and not d.learned_encoder]
    within, detail = [], []
    for d in low:
        delta = 100 * (
            metric_mean(runs, d.key, "QSS-L", "accuracy")
            - metric_mean(runs, d.key, "SISA", "accuracy")
        )
        within.append(delta >= -2.0)
        detail.append(f"{d.key} {delta:+.2f}")
    share = float(np.mean(within)) if within else float("nan")
    rows.append(
        {
            "target": "QSS-L within 2 pp of SISA (Δ ≥ −2 pp) on ≥ 80% of low-class-count "
            "(k ≤ 10) datasets",
            "met": bool(within) and share >= 0.8,
            "evidence": f"{sum(within)}/{len(within)} = {share:.0%} ({', '.join(detail)}; "
            "primary features only, encoder variants are extra rows)",
        }
    )
    if deletion:
        largest = max(r["n_train"] for r in deletion)
        # The primary features of the largest dataset (not the best of its encoder variants).
        biggest = [
            r for r in deletion if r["n_train"] == largest and LGBM_SUFFIX not in r["dataset"]
        ]
        # Every dataset of that size must clear the bar, not the best of them.
        exact_rows = [r for r in biggest if r["mode"] == "QSS-E"]
        label_txt = ", ".join(
            f"{r['dataset']} QSS-L {r['speedup']:,.0f}×" for r in biggest if r["mode"] == "QSS-L"
        )
        rows.append(
            {
                "target": f"expected-cost speedup over SISA > {PAPER_SPEEDUP:.0f}× on the "
                "largest dataset (instance deletion, QSS-E)",
                "met": all(r["speedup"] > PAPER_SPEEDUP for r in exact_rows),
                "evidence": f"n = {largest:,}: "
                + "; ".join(
                    f"{r['dataset']} QSS-E {r['speedup']:,.0f}× (SISA {r['sisa_s']:.2f} s vs "
                    f"expected {r['expected_ms']:.1f} ms)"
                    for r in exact_rows
                )
                + f"; {label_txt} (label deletion: its D° rebuild retrains the codebook on all "
                "inputs)",
            }
        )
    if exact:
        failed = [
            f"{r['dataset']} {r['mode']}"
            for r in exact
            if not (r["predictions_equal"] and r["digest_equal"])
        ]
        rows.append(
            {
                "target": "100 deletions bitwise equal to a refit (every dataset, both modes)",
                "met": not failed,
                "evidence": f"{len(exact) - len(failed)}/{len(exact)} checks equal"
                + (f"; failed: {', '.join(failed)}" if failed else ""),
            }
        )
    return rows


ACCURACY_COLUMNS = [
    "dataset", "features", "k", "n_train", "rho", *MODELS,
    "Δ(QSS-L−SISA) pp", "Δ(QSS-E−SISA) pp", "note",
]  # fmt: skip
REGRESSION_COLUMNS = ["dataset", "n_train", "rho", "model", "pearson_r", "rmse", "note"]
RUN_COLUMNS = [
    "dataset", "seed", "model", "n_train", "rho", "accuracy", "brier", "pearson_r", "rmse",
    "fit_s",
]  # fmt: skip
DELETION_COLUMNS = [
    "dataset", "mode", "scope", "n_train", "rho", "p", "q_rebuild", "b", "l", "forget_ms",
    "t_fast_ms", "t_fast_p99_ms", "d0_call_ms", "t_rebuild_s", "build_at_fit_s", "expected_ms",
    "retrain_s", "speedup_vs_retrain", "sisa_s", "speedup", "blocking_ms",
    "speedup_blocking_vs_blocking_sisa", "ridge_forget_ms", "rounds", "load_1min",
]  # fmt: skip
EXACT_COLUMNS = [
    "dataset", "mode", "scope", "deleted", "batches", "d0_rows", "instance_rebuilds",
    "predictions_equal", "digest_equal", "refit_s",
]  # fmt: skip
SWEEP_COLUMNS = [
    "dataset", "mode", "rho", "n_train", "schema_rows", "b", "l", "accuracy", "sisa_accuracy",
    "pearson_r", "sisa_pearson_r", "gap_pp", "t_fast_ms", "t_rebuild_s", "expected_ms", "speedup",
]  # fmt: skip
WIDTH_DEPTH_COLUMNS = ["dataset", "n_train", "rho", "b", "l", "accuracy", "level1_purity", "fit_s"]
PURITY_COLUMNS = [
    "dataset", "mode", "b", "l", "occupied_cells", "level1_purity", "majority_class_share",
]  # fmt: skip
TARGET_COLUMNS = ["target", "met", "evidence"]
RUNTIME_COLUMNS = ["dataset", "accuracy_s", "exactness_s", "deletion_s", "sweep_s", "total_s"]


def write_tables(
    args: argparse.Namespace,
    results: Results,
    command: str,
    elapsed: float,
    figures: dict[str, str],
    partial: str | None = None,
) -> Path:
    """Write ``<name>.md`` and one CSV per table (``partial``: a run still in progress)."""
    cls_rows, reg_rows = accuracy_summary(results.datas, results.runs)
    runtime = results.runtime + [
        {"dataset": "whole command (incl. loading, width × depth)", "total_s": elapsed}
    ]
    tables = {
        f"Accuracy: test accuracy, mean ± std over {args.seeds} seed(s)": (
            cls_rows,
            ACCURACY_COLUMNS,
        ),
        "Regression: Pearson r and RMSE on the test split": (reg_rows, REGRESSION_COLUMNS),
        "Deletion cost: seed 0, one process, timings side by side (paper Table 6)": (
            results.deletion,
            DELETION_COLUMNS,
        ),
        "Exactness: 100 deletions, then a refit without them": (results.exact, EXACT_COLUMNS),
        "Rho sweep: accuracy gap to SISA vs expected-cost speedup (seed 0)": (
            results.sweep,
            SWEEP_COLUMNS,
        ),
        "Width vs depth: label mode, p = 1, seed 0": (results.width_depth, WIDTH_DEPTH_COLUMNS),
        "Cell purity: level-1 cells of instance 0, training rows (seed 0)": (
            results.purity,
            PURITY_COLUMNS,
        ),
        "Targets: checked on the numbers above": (
            target_rows(results.datas, results.runs, results.deletion, results.exact),
            TARGET_COLUMNS,
        ),
        "Runtime: seconds per stage (the total row is the whole command)": (
            runtime,
            RUNTIME_COLUMNS,
        ),
        "Accuracy per seed: every fit": (results.runs, RUN_COLUMNS),
    }
    notes = notes_text(args, results, figures)
    if partial:
        notes = f"**PARTIAL RESULTS — the run is still in progress ({partial}).**\n\n{notes}"
    return write_results(Path(args.out), args.name, command, tables, notes)
