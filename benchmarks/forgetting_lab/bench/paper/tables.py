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

from forgetting_lab.bench.anchors import ANCHOR_MODELS, FULL_DATA_MODELS, best_full_data, gap
from forgetting_lab.bench.report import write_results

from .data import (
    EXACT_GAP_HIGH_K_PP,
    EXACT_GAP_LOW_K_PP,
    FAST_P50_MS,
    FAST_VS_SHARD,
    HIGH_K,
    LGBM_SUFFIX,
    LOW_K,
    N_SHARDS,
    PAPER_RHO,
    PAPER_SPEEDUP,
    STAGES,
    Data,
)
from .prose import notes_text
from .stages import Results

MODELS = ("g-only", "QSS-E", "QSS-L", "SISA", "exact ridge")
ANCHOR_GAP_PP = 1.0
ANCHOR_RMSE_PCT = 2.0
"""The accuracy goal against the best full-data model (SPEC §5, decision 10)."""
ALL_MODELS = (*MODELS, *ANCHOR_MODELS)


def mean_std(values: Sequence[float], digits: int = 4) -> str:
    """``"0.9032 ± 0.0012"`` (sample std over seeds; ``± 0`` for one seed)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return "–"
    std = float(values.std(ddof=1)) if values.size > 1 else 0.0
    return f"{values.mean():.{digits}f} ± {std:.{digits}f}"


def _four_figures(runs: list[dict], metric: str) -> int:
    """Decimals that show a metric's mean to 4 significant figures (RMSE 57.67, 0.1928)."""
    mean = abs(float(np.mean([r[metric] for r in runs]))) if runs else 0.0
    return max(0, 3 - int(np.floor(np.log10(mean)))) if mean > 0 else 4


def metric_mean(runs: list[dict], key: str, model: str, metric: str) -> float:
    vals = [r[metric] for r in runs if r["dataset"] == key and r["model"] == model]
    return float(np.mean(vals)) if vals else float("nan")


def _signed(value: float, digits: int = 2) -> str:
    return "–" if not np.isfinite(value) else f"{value:+.{digits}f}"


def best_model(runs: list[dict], data: Data) -> tuple[str, float]:
    """The best full-data model of a set (mean over seeds): highest accuracy, lowest RMSE."""
    metric = "accuracy" if data.classification else "rmse"
    means = {m: metric_mean(runs, data.key, m, metric) for m in FULL_DATA_MODELS}
    return best_full_data(means, data.classification)


def accuracy_summary(datas: list[Data], runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """Classification rows (accuracy ± std; the headline: Δ to the best full-data model in pp;
    Δ vs SISA beside it) and regression rows."""
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
            for model in ALL_MODELS:
                row[model] = mean_std([r["accuracy"] for r in mine if r["model"] == model])
            best, best_score = best_model(runs, data)
            row["best full-data"] = best or "–"
            sisa = metric_mean(runs, data.key, "SISA", "accuracy")
            for mode in ("QSS-E", "QSS-L"):
                acc = metric_mean(runs, data.key, mode, "accuracy")
                row[f"Δ({mode}−best) pp"] = _signed(100 * (acc - best_score))
                row[f"Δ({mode}−SISA) pp"] = _signed(100 * (acc - sisa))
            row["note"] = "; ".join(data.notes)
            cls_rows.append(row)
        else:
            for model in ALL_MODELS:
                sel = [r for r in mine if r["model"] == model]
                if not sel:
                    continue
                reg_rows.append(
                    {
                        "dataset": data.key,
                        "n_train": data.n_train,
                        "rho": data.rho,
                        "model": model,
                        "pearson_r": mean_std([r["pearson_r"] for r in sel]),
                        "rmse": mean_std([r["rmse"] for r in sel], _four_figures(sel, "rmse")),
                        "RMSE vs best full-data %": _signed(
                            gap(
                                metric_mean(runs, data.key, model, "rmse"),
                                best_model(runs, data)[1],
                                False,
                            )
                        ),
                        "note": "; ".join(data.notes),
                    }
                )
    return cls_rows, reg_rows


ANCHOR_FIT_MODELS = ("QSS-E", "HGB", "HGB raw", "LR", "MLP", "SISA", "SISA-HGB")


def anchor_rows(datas: list[Data], runs: list[dict]) -> list[dict]:
    """The headline table: QSS-E's gap to the best full-data model per set (pp of accuracy, or
    RMSE excess in %), every anchor's score, and the fit seconds side by side (means over
    seeds). Encoder variants (Adult+lgbm) are rows of their own."""
    out = []
    for data in datas:
        metric = "accuracy" if data.classification else "rmse"
        if not any(r["dataset"] == data.key for r in runs):
            continue
        best, best_score = best_model(runs, data)
        qsse = metric_mean(runs, data.key, "QSS-E", metric)
        row: dict = {
            "dataset": data.key,
            "k": data.n_classes if data.classification else "–",
            "n_train": data.n_train,
            "metric": metric,
            "QSS-E": qsse,
            "best full-data": best or "–",
            "best": best_score,
            "gap (pp; RMSE %)": _signed(gap(qsse, best_score, data.classification)),
        }
        for model in ("HGB", "HGB raw", "LR", "MLP", "exact ridge", "SISA", "SISA-HGB"):
            row[model] = metric_mean(runs, data.key, model, metric)
        for model in ANCHOR_FIT_MODELS:
            row[f"fit_s {model}"] = metric_mean(runs, data.key, model, "fit_s")
        out.append(row)
    return out


def anchor_target(datas: list[Data], runs: list[dict]) -> dict:
    """QSS-E within :data:`ANCHOR_GAP_PP` pp of the best full-data model on every
    classification set, RMSE within :data:`ANCHOR_RMSE_PCT` % of the best on every regression
    set (encoder variants listed, not judged)."""
    judged, extra, failed = [], [], []
    for d in datas:
        best, best_score = best_model(runs, d)
        metric = "accuracy" if d.classification else "rmse"
        value = gap(metric_mean(runs, d.key, "QSS-E", metric), best_score, d.classification)
        if not np.isfinite(value):
            continue
        unit = "pp" if d.classification else "% RMSE"
        text = f"{d.key} {value:+.2f} {unit} vs {best}"
        if d.learned_encoder:
            extra.append(text)
            continue
        judged.append(text)
        if (d.classification and value < -ANCHOR_GAP_PP) or (
            not d.classification and value > ANCHOR_RMSE_PCT
        ):
            failed.append(d.key)
    evidence = "; ".join(judged) if judged else "no set with QSS-E and an anchor in this run"
    if extra:
        evidence += "; not judged: " + "; ".join(extra)
    if failed:
        evidence = f"missed on {', '.join(failed)}: " + evidence
    return {
        "target": f"QSS-E within {ANCHOR_GAP_PP:g} pp of the best full-data model (HGB, HGB "
        f"raw, LR, MLP, exact ridge) on every classification set, RMSE within "
        f"{ANCHOR_RMSE_PCT:g} % of the best on every regression set (means over seeds)",
        "met": bool(judged) and not failed,
        "evidence": evidence,
    }


def target_rows(
    datas: list[Data],
    runs: list[dict],
    deletion: list[dict],
    exact: list[dict],
    sweep: Sequence[dict] = (),
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
            "evidence": "all datasets and every mode run"
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
    low = [
        d
        for d in datas
        if d.classification
        and d.n_classes <= LOW_K
        and not d.learned_encoder
        and np.isfinite(metric_mean(runs, d.key, "QSS-L", "accuracy"))
    ]
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
            f"(k ≤ {LOW_K}) datasets",
            "met": (share >= 0.8) if within else "not measured",
            "evidence": f"{sum(within)}/{len(within)} = {share:.0%} ({', '.join(detail)}; "
            "primary features only, encoder variants are extra rows)"
            if within
            else f"no low-k (k ≤ {LOW_K}) classification set with QSS-L in this run",
        }
    )
    rows.append(exact_mode_target(datas, runs, sweep))
    rows.append(anchor_target(datas, runs))
    if deletion:
        rows.append(fast_path_target(deletion))
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


def exact_mode_target(datas: list[Data], runs: list[dict], sweep: Sequence[dict] = ()) -> dict:
    """Exact mode within 1 pp of SISA on every low-k classification set, within 3 pp on every
    k ≥ 20 set, and never below g-only (means over seeds).

    Judged on each set's primary features (an encoder variant such as Adult+lgbm is an extra
    row, listed but not judged). The target is stated at ρ = 0.5 %; a row whose ρ the
    training-size rule raised is judged at its own ρ and says so, quoting the ρ sweep's
    seed-0 point at ρ = 0.5 % (D° topped up to the library's minimum) beside it.
    """
    at_paper_rho = {
        r["dataset"]: r
        for r in sweep
        if r["mode"] == "QSS-E" and r["rho"] == PAPER_RHO and "accuracy" in r
    }
    judged, extra, failed = [], [], []
    for d in datas:
        if not d.classification:
            continue
        e = metric_mean(runs, d.key, "QSS-E", "accuracy")
        delta = 100 * (e - metric_mean(runs, d.key, "SISA", "accuracy"))
        above_g = e >= metric_mean(runs, d.key, "g-only", "accuracy")
        if d.n_classes >= HIGH_K:
            bound = EXACT_GAP_HIGH_K_PP
        elif d.n_classes <= LOW_K:
            bound = EXACT_GAP_LOW_K_PP
        else:
            extra.append(f"{d.key} (k = {d.n_classes}, between the bands) {delta:+.2f} pp")
            continue
        text = f"{d.key} (k = {d.n_classes}) {delta:+.2f} pp"
        if d.rho != PAPER_RHO:
            text += f" at ρ = {d.rho:g}"
            point = at_paper_rho.get(d.key)
            if point is not None:
                text += (
                    f" (at ρ = {PAPER_RHO:g}, D° of {point['schema_rows']} rows, seed 0: "
                    f"{point['gap_pp']:+.2f} pp)"
                )
        if not above_g:
            text += " (below g-only)"
        if d.learned_encoder:
            extra.append(text)
            continue
        judged.append(text)
        if delta < -bound or not above_g:
            failed.append(d.key)
    evidence = "; ".join(judged) if judged else "no classification set in this run"
    if extra:
        evidence += "; not judged: " + "; ".join(extra)
    if failed:
        evidence = f"missed on {', '.join(failed)}: " + evidence
    return {
        "target": f"QSS-E within {EXACT_GAP_LOW_K_PP:g} pp of SISA (S = {N_SHARDS}) on every "
        f"low-k (k ≤ {LOW_K}) classification set and within {EXACT_GAP_HIGH_K_PP:g} pp on every "
        f"k ≥ {HIGH_K} set, at ρ = {100 * PAPER_RHO:g} %, never below g-only (means over "
        "seeds; a set too small for that ρ is judged at its rule's ρ, its 0.5 % point quoted)",
        "met": bool(judged) and not failed,
        "evidence": evidence,
    }


def fast_path_target(deletion: list[dict]) -> dict:
    """Forget + first predict p50 ≤ 1 ms on every set (exact mode), and ≥ 1000× below one
    SISA shard retrain on the largest set (both measured in this run; at small n a shard
    retrain takes milliseconds, so the ratio is judged where retraining is expensive)."""
    exact_rows = [r for r in deletion if r["mode"] == "QSS-E"]
    slow = [r["dataset"] for r in exact_rows if r["t_fast_ms"] > FAST_P50_MS]
    largest = max(r["n_train"] for r in exact_rows)
    biggest = [r for r in exact_rows if r["n_train"] == largest and LGBM_SUFFIX not in r["dataset"]]
    short = [r["dataset"] for r in biggest if r["t_fast_vs_sisa_shard"] < FAST_VS_SHARD]
    evidence = "; ".join(
        f"{r['dataset']} p50 {r['t_fast_ms']:.3f} ms / p95 {r['t_fast_p95_ms']:.3f} ms, "
        f"shard retrain {r['sisa_s']:.3g} s = {r['t_fast_vs_sisa_shard']:,.0f}×"
        for r in exact_rows
    )
    misses = []
    if slow:
        misses.append(f"p50 > {FAST_P50_MS:g} ms on {', '.join(slow)}")
    if short:
        misses.append(f"< {FAST_VS_SHARD:,.0f}× on {', '.join(short)}")
    if misses:
        evidence = "missed: " + "; ".join(misses) + ". " + evidence
    return {
        "target": f"QSS-E forget + first predict p50 ≤ {FAST_P50_MS:g} ms on every set, and "
        f"≥ {FAST_VS_SHARD:,.0f}× faster than one SISA shard retrain on the largest set "
        f"(n = {largest:,})",
        "met": not slow and not short and bool(biggest),
        "evidence": evidence,
    }


ACCURACY_COLUMNS = [
    "dataset", "features", "k", "n_train", "rho", *ALL_MODELS, "best full-data",
    "Δ(QSS-E−best) pp", "Δ(QSS-L−best) pp", "Δ(QSS-E−SISA) pp", "Δ(QSS-L−SISA) pp", "note",
]  # fmt: skip
REGRESSION_COLUMNS = [
    "dataset", "n_train", "rho", "model", "pearson_r", "rmse", "RMSE vs best full-data %", "note",
]  # fmt: skip
ANCHOR_COLUMNS = [
    "dataset", "k", "n_train", "metric", "QSS-E", "best full-data", "best", "gap (pp; RMSE %)",
    "HGB", "HGB raw", "LR", "MLP", "exact ridge", "SISA", "SISA-HGB",
    *(f"fit_s {m}" for m in ANCHOR_FIT_MODELS),
]  # fmt: skip
RUN_COLUMNS = [
    "dataset", "seed", "model", "n_train", "rho", "accuracy", "brier", "pearson_r", "rmse",
    "fit_s",
]  # fmt: skip
DELETION_COLUMNS = [
    "dataset", "mode", "scope", "n_train", "rho", "effective_rho", "p", "q_rebuild", "b", "l",
    "forget_ms", "fast_forgets", "t_fast_ms", "t_fast_p95_ms", "t_fast_p99_ms", "d0_call_ms",
    "t_rebuild_s", "build_at_fit_s", "expected_ms", "retrain_s", "speedup_vs_retrain", "sisa_s",
    "speedup", "t_fast_vs_sisa_shard", "blocking_ms", "speedup_blocking_vs_blocking_sisa",
    "ridge_forget_ms", "rounds", "load_1min",
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
    "dataset", "mode", "partition", "b", "l", "occupied_cells", "level1_purity",
    "majority_class_share",
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
        "Anchors: QSS-E's gap to the best full-data model (mean over seeds), fit seconds": (
            anchor_rows(results.datas, results.runs),
            ANCHOR_COLUMNS,
        ),
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
        "Cell purity: training rows, mean over instances (RQ: level-1 cells; flat "
        "partitions: every table's cells, mean over tables), seed 0": (
            results.purity,
            PURITY_COLUMNS,
        ),
        "Targets: checked on the numbers above": (
            target_rows(
                results.datas, results.runs, results.deletion, results.exact, results.sweep
            ),
            TARGET_COLUMNS,
        ),
        "Runtime: seconds per stage (the total row is the whole command)": (
            runtime,
            RUNTIME_COLUMNS,
        ),
        "Accuracy per seed: every fit": (results.runs, RUN_COLUMNS),
    }
    stages = getattr(args, "stage_list", STAGES)
    skipped = {
        "exactness": "Exactness",
        "deletion": "Deletion cost",
        "sweep": "Rho sweep",
    }
    for stage, prefix in skipped.items():
        if stage not in stages:
            tables = {t: v for t, v in tables.items() if not t.startswith(prefix)}
    if not getattr(args, "width_depth_map", None):
        tables = {t: v for t, v in tables.items() if not t.startswith("Width vs depth")}
    notes = notes_text(args, results, figures)
    if partial:
        notes = f"**PARTIAL RESULTS — the run is still in progress ({partial}).**\n\n{notes}"
    return write_results(Path(args.out), args.name, command, tables, notes)
