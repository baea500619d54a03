"""The prose under the paper benchmark's tables: how each number was measured.

Why generated: prose that quotes a measurement goes stale the moment the benchmark reruns, so
every figure quoted here is read from the results it describes (this run's tables, or the
result file of the experiment it cites) or from the settings that produced them, never typed
in. The QSS paper's own figures are citations, kept in :data:`PAPER_ANCHORS`.
"""

from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

from forgetting import QSSClassifier
from forgetting_lab.bench.anchors import (
    EMBEDDING_SETS,
    FULL_DATA_MODELS,
    LR_MAX_ITER,
    MLP_PARAMS,
    best_full_data,
)
from forgetting_lab.bench.anchors import (
    N_SHARDS as ANCHOR_SHARDS,
)

from .data import (
    D0_BATCHES,
    DEFAULT_DATASETS,
    EXACT_GAP_HIGH_K_PP,
    EXACT_GAP_LOW_K_PP,
    EXACTNESS_BATCHES,
    FAST_FORGET_BUDGET_S,
    FAST_P50_MS,
    FAST_VS_SHARD,
    HIGH_K,
    LOW_K,
    MIN_SCHEMA_ROWS,
    N_FAST_FORGETS,
    N_SHARDS,
    N_TIMING_ROUNDS,
    PAPER_RHO,
    PAPER_SPEEDUP,
    QUICK_N_TRAIN,
    RHO_LADDER,
    STAGES,
    SWEEP_FAST_FORGETS,
)
from .stages import Results

PAPER_ANCHORS = (
    "QSS-L vs SISA at ρ = 0.5 %: MNIST 0.944 vs 0.921, Fashion-MNIST 0.825 vs 0.854, SST-2 "
    "0.854 vs 0.835; QSS-E a median 5.27 pp below QSS-L; speedups 4×–483×"
)
"""What the QSS paper reports (CLIP/MiniLM/LightGBM features on an A100, full data): quoted
from the paper, for orientation; nothing of this run."""
IMAGE_FEATURES_CSV = "image_features-image_features.csv"
"""The feature-selection experiment's table (``python -m forgetting_lab.image_features``)."""


def image_feature_evidence(out_dir: Path) -> str:
    """Validation accuracy of raw pixels vs the default HOG features, read from the
    image-feature experiment's CSV (beside this run's results, else in benchmarks/results);
    a pointer to the file when it is not there."""
    for folder in (out_dir, Path("benchmarks/results")):
        path = folder / IMAGE_FEATURES_CSV
        if not path.is_file():
            continue
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        raw = {r["dataset"]: r["val_accuracy"] for r in rows if r["features"].startswith("raw")}
        hog = {r["dataset"]: r["val_accuracy"] for r in rows if "(default)" in r["features"]}
        sets = [d for d in raw if d in hog]
        if sets:
            pairs = ", ".join(f"{d} raw pixels {raw[d]} vs HOG+pool {hog[d]}" for d in sets)
            return f"{path}: validation accuracy {pairs}"
    return "benchmarks/image_features.md"


def scaled_down(args: argparse.Namespace, results: Results) -> list[str]:
    """Bullets saying what this run scaled down from the QSS paper's setting, and why."""
    out = []
    if getattr(args, "quick", False):
        out.append(
            "* **`--quick`**: a smoke test, not evidence — at most "
            f"{QUICK_N_TRAIN} training rows per set, 1 seed, ρ raised by the rule to suit so few "
            "rows, a 2 × 2 width × depth grid on digits. It checks that every stage runs and "
            "every table fills; its accuracies and timings say nothing about the full sets."
        )
    widths = ", ".join(
        f"{name} ({'all' if n is None else f'{n:,}'} rows)"
        for name, n in getattr(args, "width_depth_map", {}).items()
    )
    stages = getattr(args, "stage_list", STAGES)
    modes = getattr(args, "mode_list", ["exact", "label"])
    if list(stages) != list(STAGES) or len(modes) < 2:
        left = [s for s in STAGES if s not in stages]
        out.append(
            f"* **Stages run**: {', '.join(stages)}; QSS modes: {', '.join(modes)}"
            + (f"; not run: {', '.join(left)} (their tables are left out)" if left else "")
            + "."
        )
    parts = [
        f"{os.cpu_count()} shared CPU cores and no accelerator, so features are frozen CPU "
        "encoders (HOG for the 28×28 images, MiniLM-L6 for sentences) instead of the paper's "
        "CLIP features on an A100",
        f"{args.seeds} seed(s)",
    ]
    if "deletion" in stages:
        parts.append(
            f"{N_TIMING_ROUNDS} timing rounds per set (each retrains a SISA shard and rebuilds a "
            "QSS instance per mode, the slow part)"
        )
    if "exactness" in stages:
        parts.append(f"{sum(EXACTNESS_BATCHES)} deletions per exactness check")
    if widths:
        parts.append(
            f"the width × depth grid on {widths} (it fits one label-mode model per (b, ℓ))"
        )
    ran = {d.dataset for d in results.datas}
    left_out = [n for n in DEFAULT_DATASETS.split(",") if n not in ran]
    if left_out:
        parts.append(f"sets of the full run not in this one: {', '.join(left_out)}")
    if getattr(args, "no_lgbm", False) and "adult" in ran:
        parts.append("no Adult+lgbm row (`--no-lgbm`)")
    out.append(
        "* **Scaled down, and why**: "
        + "; ".join(parts)
        + f". {len(results.datas)} set(s) ran at the sizes listed under Subsamples; the largest "
        "training set here is far below the paper's 1.4M rows, so the 300k-row latency target "
        "is the core benchmark's (`python -m forgetting_lab.bench.core`)."
    )
    why = getattr(args, "why", "")
    if why:
        out.append(f"* **Why this run is scaled down** (given with `--why`): {why}")
    return out


def anchors_text() -> str:
    """How the anchors were fitted (read from :mod:`forgetting_lab.bench.anchors`)."""
    mlp = ", ".join(f"{k}={v}" for k, v in MLP_PARAMS.items())
    return (
        "* **Anchors (the headline)**: the model a user would deploy without unlearning, "
        "fitted on the same training split in the same run, nothing tuned, nothing fitted on "
        "the test split. HGB = scikit-learn's `HistGradientBoostingClassifier`/`Regressor` "
        "with defaults on the same numeric features (random_state = the seed: its default "
        "early stopping above 10,000 rows holds out 10 % of the *training* rows); HGB raw = "
        'the same on the loader\'s raw DataFrame with `categorical_features="from_dtype"` '
        "(categories and missing values natively; sets whose raw table has a category or a "
        f"missing value); LR = `LogisticRegression` with defaults except max_iter = "
        f"{LR_MAX_ITER} (the default 100 lbfgs iterations stop short of convergence on the "
        "wide one-hot tables; classification only); MLP = `MLPClassifier` with fixed settings "
        f"({mlp}, random_state = the seed; early stopping holds out training rows) on the "
        f"frozen-embedding sets ({', '.join(EMBEDDING_SETS)}) only; SISA-HGB = SISA with "
        f"{ANCHOR_SHARDS} shards of default HistGradientBoosting. *Best full-data* = the best of "
        "HGB, HGB raw, LR, MLP and exact ridge (the full-data models; SISA is not one) by "
        "mean test accuracy, or lowest RMSE; the gap is QSS-E minus it in pp (negative = "
        "below), or QSS-E's RMSE excess over it in %. Fit times (fit_s columns) are wall "
        "seconds of each model's fit in this run, every library with its default threads."
    )


def findings(results: Results) -> list[str]:
    """Headline figures of this run, per classification set: exact mode against SISA and
    g-only, its cell purity, and forget + first predict."""
    if not results.datas:
        return []
    acc: dict[tuple[str, str], list[float]] = {}
    for r in results.runs:
        if "accuracy" in r:
            acc.setdefault((r["dataset"], r["model"]), []).append(r["accuracy"])

    def mean(key: str, model: str) -> float:
        vals = acc.get((key, model), [])
        return sum(vals) / len(vals) if vals else float("nan")

    purity = {(r["dataset"], r["mode"]): r for r in results.purity}
    fast = {(r["dataset"], r["mode"]): r for r in results.deletion}
    lines = ["## What this run measured", ""]
    for d in results.datas:
        if not d.classification:
            continue
        e, sisa, g = mean(d.key, "QSS-E"), mean(d.key, "SISA"), mean(d.key, "g-only")
        best, best_score = best_full_data(
            {m: mean(d.key, m) for m in FULL_DATA_MODELS}, classification=True
        )
        text = (
            f"* **{d.key}** (k = {d.n_classes}, {d.n_train:,} training rows, ρ = {d.rho:g}): "
            f"QSS-E {e:.4f} vs the best full-data model ({best or 'none'}) {best_score:.4f} "
            f"({100 * (e - best_score):+.2f} pp), SISA {sisa:.4f} ({100 * (e - sisa):+.2f} pp) "
            f"and g-only {g:.4f}"
        )
        pe = purity.get((d.key, "QSS-E"))
        if pe is not None:
            text += (
                f"; QSS-E cell purity {pe['level1_purity']:.3f} ({pe['partition']}, "
                f"majority class {pe['majority_class_share']:.3f})"
            )
        fe = fast.get((d.key, "QSS-E"))
        if fe is not None:
            text += (
                f"; forget + first predict p50 {fe['t_fast_ms']:.3f} ms, p95 "
                f"{fe['t_fast_p95_ms']:.3f} ms, one SISA shard retrain {fe['sisa_s']:.3g} s "
                f"({fe['t_fast_vs_sisa_shard']:,.0f}×), expected cost per deletion "
                f"{fe['expected_ms']:.3g} ms"
            )
        lines.append(text + ".")
    lines.append("")
    return lines


def notes_text(args: argparse.Namespace, results: Results, figures: dict[str, str]) -> str:
    """The prose under the tables: how each number was measured, and what was left out."""
    subsampled = [
        f"{d.key}: {d.n_train:,} of {d.full_train:,} training rows (the first of a fixed, "
        "seed-0 permutation)"
        for d in results.datas
        if d.n_train < d.full_train
    ]
    p = QSSClassifier().n_instances
    rho_pc = f"{100 * PAPER_RHO:g}"
    n_exact = sum(EXACTNESS_BATCHES)
    uniform_hits = n_exact * (1 - (1 - PAPER_RHO) ** p)
    lines = [
        "## How to read this",
        "",
        "* **Sets run**: "
        + (
            "; ".join(
                f"{d.key} ({d.task}, "
                + (f"k = {d.n_classes}, " if d.classification else "")
                + f"{d.n_train:,} training rows, ρ = {d.rho:g}; {d.features})"
                for d in results.datas
            )
            or "none"
        )
        + "."
        + (
            f" The k ≥ {HIGH_K} set is UCI Letter (26 capital letters), read offline from "
            "Debian's `r-cran-mlbench` with its documented split (first 16,000 rows train, "
            "last 4,000 test): many classes are where the paper's QSS fails."
            if any(d.dataset == "letter" for d in results.datas)
            else ""
        ),
        "* **Seeds**: a seed is the estimators' `random_state` (moves D° and SISA's shards). "
        "The test split and every training subsample are fixed. ± is the sample std over "
        f"{args.seeds} seed(s). Exact ridge is deterministic (± 0).",
        "* **Models**: g-only = QSS with α = 0 (the schema's base model alone; computed from the "
        "QSS-E fit's own schemas, bit-identical to `alpha=0.0`); QSS-E = `mode='exact'` with "
        "the library's default partition (named in the cell-purity table); "
        f"QSS-L = `mode='label'`; SISA = {N_SHARDS} shards of logistic regression (ridge for "
        "regression), g's model family, probabilities averaged; exact ridge = one-hot ridge "
        f"with rank-one downdates (not bitwise exact under deletion). p = {p} instances, b and "
        "ℓ chosen from D° (library defaults). Adult+lgbm passes `LightGBMLeafContrib` as "
        "`encoder=`, so each instance learns it on D° only; its SISA/ridge columns are the "
        "one-hot baselines.",
        f"* **ρ**: {rho_pc} % unless n·{rho_pc} % < max({MIN_SCHEMA_ROWS}, 5k) schema rows; then "
        "the next rung of "
        f"{list(RHO_LADDER)} (see each row's note). A rule on n and k, never on test results.",
        "* **Subsamples**: "
        + ("; ".join(subsampled) if subsampled else "none (full training splits)")
        + ". Test splits are always complete.",
        "* **Features**: MNIST and Fashion-MNIST go through the frozen `HOGEncoder` (HOG with "
        "7-pixel cells and 2×2 blocks, plus 2×2-pooled pixels; width in the features column), "
        "chosen by logistic-regression accuracy on a validation split of the *training* images "
        f"({image_feature_evidence(Path(args.out))}); every model of a row sees the same "
        "features. `--image-features pixels` gives raw pixels.",
        "* **The paper's numbers** (CLIP/MiniLM/LightGBM features on an A100, full data), for "
        f"orientation only: {PAPER_ANCHORS}. Our features differ (HOG instead of CLIP, "
        "one-hot, VADER sentences with MiniLM), so compare the direction and size of the gaps, "
        "not the values.",
        "* **Deletion cost**: every QSS time is what the caller waits: `forget` *and* the "
        "first `predict` after it (one test row), which pays any re-materialization the "
        f"deletion left. t_fast = p50 of up to {N_FAST_FORGETS} such single-id deletions of "
        f"rows outside every D° (fast_forgets says how many: sampling stops after "
        f"{FAST_FORGET_BUDGET_S:g} s of them, with at least {SWEEP_FAST_FORGETS}; "
        "t_fast_p95_ms, t_fast_p99_ms: their tails; forget_ms: the `forget` call alone, for "
        f"reference). Then {N_TIMING_ROUNDS} interleaved rounds, each timing "
        "one SISA forget (retraining one shard, a different shard each round), one exact-ridge "
        "forget and, per mode, one deletion of a row of instance 0's D°: d0_call_ms = forget + "
        "first predict at that hit, t_rebuild_s = wall time until `wait_for_rebuilds` "
        "returned; medians over the rounds, so load drifting on a shared machine hits both "
        "sides alike (load_1min: the 1-minute load average when the stage started). "
        "build_at_fit_s = the fit's own per-instance builds, the same work. q_rebuild = "
        "1 − (1 − ρ)^p, the chance that a deletion hits some instance's D° (p = "
        f"{p} independent keyed draws), with ρ = effective_rho, the measured |D°|/n "
        "(above the nominal ρ where D° keeps its minimum size); expected = (1 − q)·t_fast + "
        "q·t_rebuild, the compute per deletion; speedup = SISA's shard retrain (sisa_s) / "
        "expected; t_fast_vs_sisa_shard = sisa_s / t_fast; retrain_s = the seed-0 QSS fit of "
        "the same mode, timed in this run, and speedup_vs_retrain = retrain_s / expected. "
        "**Blocking latency** (what the caller waits while rebuilds run in the background): "
        "blocking_ms = (1 − q)·t_fast + q·d0_call. A call waits for a rebuild only when all "
        "p instances are rebuilding at once (≈ ρ^p per deletion burst). "
        "speedup_blocking_vs_blocking_sisa divides SISA's retrain by it, and **is not like "
        "for like**: the SISA measured here blocks for its shard retrain, while a SISA that "
        f"serves from its {N_SHARDS - 1} untouched shards during the retrain would answer at "
        f"once (with {N_SHARDS - 1} shards' accuracy) — QSS gets that treatment (its other "
        "instances serve during a rebuild), SISA does not. The compute comparisons (speedup, "
        "t_fast_vs_sisa_shard) are the fair ones. QSS-L's deletions remove labels (scope = "
        "label); its D° rebuild retrains the codebook on all inputs. RQ's b and ℓ are chosen "
        "from |D°|, so a rebuild after a D° deletion can pick a smaller b (the tables show "
        "the fit-time shape; for flat partitions b = cells per table, ℓ = tables). Compare "
        "ratios, not absolute times.",
        f"* **Exactness**: {n_exact} deletions in batches "
        f"{'+'.join(map(str, EXACTNESS_BATCHES))}, {len(D0_BATCHES)} of the rows forced into "
        f"some instance's D° (uniform sampling would hit D° ~{uniform_hits:.1f} times in "
        f"{n_exact} at ρ = {rho_pc} %); `wait_for_rebuilds`, "
        "then a refit from scratch without the rows (QSS-E) or with their labels removed "
        "(QSS-L, whose guarantee is label deletion); `numpy.array_equal` of the test-set "
        "`predict_proba` (`predict` for regression) and equality of `state_digest`.",
        "* **ρ sweep**: seed 0, both modes; t_rebuild there is the fit's per-instance build "
        f"time, t_fast the median of {SWEEP_FAST_FORGETS} single-id forgets, and the expected "
        "cost uses the measured |D°|/n as ρ; gap = accuracy − "
        "SISA's (pp; Pearson r × 100 for "
        "regression, not plotted). "
        f"Points with n·ρ below the schema minimum are skipped, except ρ = {rho_pc} %, which "
        "always runs: there the library's `min_schema_rows` tops D° up to max(50, 5k) rows "
        "(schema_rows says how many), so every set has a measured point at the paper's ρ.",
        "* **Width vs depth**: label mode, one instance (p = 1) so the codebook's shape is "
        "isolated from the ensemble, b and ℓ forced, seed 0. Level-1 purity = fraction of "
        "training rows sharing their level-1 cell's majority label (cells weighted by size).",
        "* **Cell purity** (every classification set, both modes, seed 0, training rows, "
        "cells from `engine_.schema_of(r).transform`): the fraction of rows whose label is "
        "the majority label of their cell, averaged over the p instances. For the RQ "
        "codebook the cells are its level-1 centroids; for a flat partition (random trees or "
        "hyperplanes; `partition='auto'` is trees in exact mode) each of the T tables cuts "
        "the whole space, so the column level1_purity holds the mean over the tables, and "
        "occupied_cells the mean occupied cells per table. majority_class_share is the purity "
        "of a single cell, for scale.",
        "* **Targets**: the QSS paper's claims (QSS ≥ g-only; QSS-L within 2 pp of SISA on "
        f"most low-k sets; a speedup above its {PAPER_SPEEDUP:.0f}×) and this package's own: "
        f"exact mode within {EXACT_GAP_LOW_K_PP:g} pp of SISA on every low-k (k ≤ {LOW_K}) "
        f"set and within {EXACT_GAP_HIGH_K_PP:g} pp on the k ≥ {HIGH_K} sets, never below "
        f"g-only; forget + first predict p50 ≤ {FAST_P50_MS:g} ms and at least "
        f"{FAST_VS_SHARD:,.0f}× below one SISA shard retrain of the same run; every deletion "
        "check bitwise equal to a refit. Each row's evidence is read off the tables above.",
        anchors_text(),
        *scaled_down(args, results),
        "",
    ]
    lines += findings(results)
    for title, path in figures.items():
        lines += [f"![{title}]({path})", ""]
    if results.skipped:
        lines += ["**Skipped**: " + "; ".join(results.skipped), ""]
    return "\n".join(lines)
