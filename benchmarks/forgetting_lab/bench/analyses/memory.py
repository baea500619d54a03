"""Memory: what a fitted model holds, by part, against the formula — up to a million rows.

The paper bounds its accumulators (≤ 51 MB even for ImageNet). Ours are, per instance and per
fold (two folds, for cross-fitting α and shrinkage), int64 arrays: sums T (ℓ·b·k), counts n
(ℓ·b) and pair counts N (ℓ(ℓ−1)/2 · b²), so

    statistics bytes = p · 2 · 8 · (ℓ·b·k + ℓ·b + ℓ(ℓ−1)/2 · b²),

independent of n. The schema (φ, g, codebook) is small and also independent of n; the row
store (inputs for rebuilds, codes and quantized residuals per instance, ids' hashes) grows
linearly in n. Every size here is measured with ``ndarray.nbytes`` over the arrays each part
holds (:func:`forgetting_lab.bench.costs.array_bytes`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting.content.materialize import SHRINKAGE_GRID
from forgetting_lab.bench.costs import array_bytes
from forgetting_lab.bench.plots import pyplot, save_figure

from .common import Settings, figure_path, write_tables

D = 32
DEFAULT = {"k": 10, "b": 256, "l": 4, "p": 3}
SIZES = (10_000, 100_000, 1_000_000)
VARY_AT = 100_000
VARY = {"k": (2, 50), "b": (64, 1024), "l": (2, 8), "p": (1, 5)}
COLUMNS = [
    "n", "k", "b", "l", "p", "statistics_mb", "statistics_formula_mb", "formula_matches",
    "float_copies_mb", "float_copies_formula_mb", "content_mb", "schema_mb", "row_store_mb",
    "row_store_bytes_per_row", "fit_s",
]  # fmt: skip


def statistics_formula(k: int, b: int, levels: int, p: int) -> int:
    """Bytes of the int64 statistics of p instances, two folds each."""
    return p * 2 * 8 * (levels * b * k + levels * b + levels * (levels - 1) // 2 * b * b)


def float_copies_formula(k: int, b: int, levels: int, p: int) -> int:
    """Bytes of what p instances' accumulators keep beside their integers once a prediction
    has materialized them (content.accumulators): float64 copies of both folds' T, n and N,
    of both folds' counts together, and each fold's cell means on the λ grid."""
    pairs = levels * (levels - 1) // 2 * b * b
    copies = statistics_formula(k, b, levels, 1) + 8 * (levels * b + pairs)
    grid_means = 2 * 8 * levels * b * len(SHRINKAGE_GRID) * k
    return p * (copies + grid_means)


def synthetic(n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(2 * k, D)).astype(np.float32)
    comp = rng.integers(0, 2 * k, size=n)
    X = centers[comp] + rng.normal(scale=1.0, size=(n, D)).astype(np.float32)
    return X, comp % k


def measure(n: int, k: int, b: int, levels: int, p: int) -> dict[str, Any]:
    X, y = synthetic(n, k)
    rho = max(0.005, min(0.5, 2.5 * b / n))  # D° holds enough rows for b centroids
    model = QSSClassifier(rho=rho, n_levels=levels, n_centroids=b, n_instances=p)
    started = time.perf_counter()
    model.fit(X, y, np.arange(n))
    fit_s = time.perf_counter() - started
    model.predict(X[:1])  # materialize the content
    instances = model.engine_.instances
    accumulators = [inst.accumulators for inst in instances]
    stats = sum(a.sums.nbytes + a.counts.nbytes + a.pair_counts.nbytes for a in accumulators)
    copies = sum(array_bytes(a) for a in accumulators) - stats
    copies_formula = float_copies_formula(k, b, levels, p)
    content = sum(array_bytes(inst.content) for inst in instances)
    schema = sum(array_bytes(inst.schema) for inst in instances)
    store = array_bytes(model.engine_.rows)
    formula = statistics_formula(k, b, levels, p)
    return {
        "n": n,
        "k": k,
        "b": b,
        "l": levels,
        "p": p,
        "statistics_mb": stats / 2**20,
        "statistics_formula_mb": formula / 2**20,
        "formula_matches": stats == formula and copies == copies_formula,
        "float_copies_mb": copies / 2**20,
        "float_copies_formula_mb": copies_formula / 2**20,
        "content_mb": content / 2**20,
        "schema_mb": schema / 2**20,
        "row_store_mb": store / 2**20,
        "row_store_bytes_per_row": store / n,
        "fit_s": fit_s,
    }


def run(settings: Settings) -> dict[str, Any]:
    quick = settings.quick
    sizes = (1_000, 2_000) if quick else SIZES
    vary_at = 1_000 if quick else VARY_AT
    base = {"k": 10, "b": 16, "l": 2, "p": 2} if quick else DEFAULT
    vary = {"b": (32,), "l": (3,)} if quick else VARY
    configs = [(n, base) for n in sizes]
    for key, values in vary.items():
        configs += [(vary_at, {**base, key: v}) for v in values]
    rows = []
    for n, c in tqdm(configs, desc="memory", leave=False):
        rows.append(measure(n, c["k"], c["b"], c["l"], c["p"]))
    if not quick:
        settings.scaled.append(
            f"memory: synthetic {D}-d data (the statistics do not depend on d; the row store "
            "does, linearly)"
        )
    png = figure_path(settings, "memory")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    by_n = sorted((r for r in rows if all(r[x] == base[x] for x in base)), key=lambda r: r["n"])
    for key, label in (
        ("statistics_mb", "statistics (T, n, N)"),
        ("float_copies_mb", "their float copies and kept grid means"),
        ("content_mb", "materialized content"),
        ("schema_mb", "schemas"),
        ("row_store_mb", "row store"),
    ):
        ax.plot([r["n"] for r in by_n], [r[key] for r in by_n], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n (rows)")
    ax.set_ylabel("MiB")
    ax.set_title(
        f"memory vs n (k = {base['k']}, b = {base['b']}, ℓ = {base['l']}, p = {base['p']}, d = {D})"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, png, settings.command)
    notes = (
        "Synthetic Gaussian-mixture data, exact mode, ρ = max(0.5 %, 2.5·b/n) so D° can hold "
        "b centroids. statistics_formula = p · 2 folds · 8 bytes · (ℓ·b·k + ℓ·b + "
        "ℓ(ℓ−1)/2 · b²); float_copies = what the accumulators keep beside their integers for "
        "the next materialization (float64 copies of both folds' T, n, N, of both folds' "
        "counts together, and each fold's cell means on the 4-value λ grid): statistics + "
        "p · 8 · (ℓ·b + ℓ(ℓ−1)/2 · b²) + p · 2 · 8 · ℓ·b·4·k; formula_matches: the measured "
        "bytes equal both formulas exactly. content = the "
        "materialized cell means (recomputed from the statistics; float64). schema = φ, g and "
        "the codebook of every instance. row_store = everything kept per row for rebuilds and "
        "deletion (inputs, per-instance codes and quantized residuals, keyed draws, hashes), "
        "including the store's spare capacity. Sizes are `ndarray.nbytes` of the arrays each "
        "part holds (Python object overhead not counted).\n\n"
        f"![memory]({png.name})\n"
    )
    md = write_tables(
        settings, "memory", {"Memory: measured bytes by part": (rows, COLUMNS)}, notes
    )
    return {"md": md, "png": png, "rows": rows}
