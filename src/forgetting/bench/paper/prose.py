"""The prose under the paper benchmark's tables: how each number was measured.

Why generated: prose that quotes a measurement goes stale the moment the benchmark reruns, so
every figure quoted here is read from the results it describes (this run's tables, or the
result file of the experiment it cites) or from the settings that produced them, never typed
in. The QSS paper's own figures are citations, kept in :data:`PAPER_ANCHORS`.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from ... import QSSClassifier
from .data import (
    D0_BATCHES,
    EXACTNESS_BATCHES,
    MIN_SCHEMA_ROWS,
    N_FAST_FORGETS,
    N_SHARDS,
    N_TIMING_ROUNDS,
    PAPER_RHO,
    RHO_LADDER,
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
"""The feature-selection experiment's table (``python benchmarks/image_features.py``)."""


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
        "* **Seeds**: a seed is the estimators' `random_state` (moves D° and SISA's shards). "
        "The test split and every training subsample are fixed. ± is the sample std over "
        f"{args.seeds} seed(s). Exact ridge is deterministic (± 0).",
        "* **Models**: g-only = QSS with α = 0 (the schema's base model alone; computed from the "
        "QSS-E fit's own schemas, bit-identical to `alpha=0.0`); QSS-E = `mode='exact'`; "
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
        f"deletion left. t_fast = median of {N_FAST_FORGETS} such single-id deletions of rows "
        "outside every D° (forget_ms: the `forget` call alone, for reference). Then "
        f"{N_TIMING_ROUNDS} interleaved rounds, each timing one SISA forget (retraining one "
        "shard, a different shard each round), one exact-ridge forget and, per mode, one "
        "deletion of a row of instance 0's D°: d0_call_ms = forget + first predict at that "
        "hit, t_rebuild_s = wall time until `wait_for_rebuilds` returned; medians over the "
        "rounds, so load drifting on a shared machine hits both sides alike (load_1min: the "
        "1-minute load average when the stage started). build_at_fit_s = the fit's own "
        "per-instance builds, the same work. q_rebuild = 1 − (1 − ρ)^p, the chance that a "
        f"deletion hits some instance's D° (p = {p} independent keyed draws); expected = "
        "(1 − q)·t_fast + q·t_rebuild, the compute per deletion; speedup = SISA's shard "
        "retrain / expected; retrain_s = the seed-0 QSS fit of the same mode in this run, "
        "speedup_vs_retrain = retrain_s / expected. **Blocking latency** (what the caller "
        "waits while rebuilds run in the background): blocking_ms = (1 − q)·t_fast + "
        "q·d0_call. A call waits for a rebuild only when all p instances are rebuilding at "
        "once (≈ ρ^p per deletion burst). speedup_blocking_vs_blocking_sisa divides SISA's "
        "retrain by it, and **is not like for like**: our SISA blocks for its shard retrain, "
        "while a SISA that serves from its S − 1 untouched shards during the retrain would "
        "answer at once (with S − 1 shards' accuracy). The compute comparison (speedup) is "
        "the fair one. QSS-L's deletions remove labels (scope = label); its D° rebuild "
        "retrains the codebook on all inputs. b and ℓ are chosen from |D°|, so a rebuild "
        "after a D° deletion can pick a smaller b (the tables show the fit-time shape). "
        "Compare ratios, not absolute times.",
        "* **Exactness**: {n_exact} deletions in batches "
        f"{'+'.join(map(str, EXACTNESS_BATCHES))}, {len(D0_BATCHES)} of the rows forced into "
        f"some instance's D° (uniform sampling would hit D° ~{uniform_hits:.1f} times in "
        f"{n_exact} at ρ = {rho_pc} %); `wait_for_rebuilds`, "
        "then a refit from scratch without the rows (QSS-E) or with their labels removed "
        "(QSS-L, whose guarantee is label deletion); `numpy.array_equal` of the test-set "
        "`predict_proba` (`predict` for regression) and equality of `state_digest`.",
        "* **ρ sweep**: seed 0, both modes; t_rebuild there is the fit's per-instance build "
        f"time, t_fast the median of {SWEEP_FAST_FORGETS} single-id forgets; gap = accuracy − "
        "SISA's (pp; Pearson r × 100 for "
        "regression, not plotted). "
        "Points with n·ρ below the schema minimum are skipped.",
        "* **Width vs depth**: label mode, one instance (p = 1) so the codebook's shape is "
        "isolated from the ensemble, b and ℓ forced, seed 0. Level-1 purity = fraction of "
        "training rows sharing their level-1 cell's majority label (cells weighted by size).",
        "",
    ]
    for title, path in figures.items():
        lines += [f"![{title}]({path})", ""]
    if results.skipped:
        lines += ["**Skipped**: " + "; ".join(results.skipped), ""]
    return "\n".join(lines)
