"""Variance decay: how much each residual-quantization level still explains ("width beats depth").

The paper's Proposition 5: if every level explains at least a fraction γ of the remaining
residual variance, the error decays as (1 − γ)^ℓ. In practice the explained fraction η_m of
level m collapses with depth, so accuracy saturates after a few levels while more centroids
per level (width) keep helping. Measured here per level, on the training rows (what the
statistics fit) and on the test rows (what generalizes), and as test accuracy vs ℓ and b.

η_m = 1 − ‖e_m‖² / ‖e_{m−1}‖², where e_0 = r = y − g(x) (one-hot minus g's probabilities) and
e_m = e_{m−1} − μ_m[c_m(x)], μ_m the level-m cell means of e_{m−1} over the training rows
(shrinkage 0). Test rows use the training μ.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting.encoders import EncoderUnavailableError
from forgetting_lab.bench.plots import pyplot, save_figure
from forgetting_lab.datasets import DatasetUnavailableError

from .common import Settings, figure_path, instance_schemas, level_means, onehot, write_tables

WIDTHS = (16, 64, 256)
DEPTHS = (1, 2, 4, 8)
MAX_DEPTH = 8
SETS = (("digits", None), ("letter", 5_000), ("mnist", 2_000))
QUICK_SETS = (("digits", 800),)
ETA_COLUMNS = ["dataset", "k", "n_train", "b", "level", "eta_train", "eta_test"]
ACC_COLUMNS = ["dataset", "k", "n_train", "b", "l", "accuracy", "g_only_accuracy", "fit_s"]


def explained(codes: np.ndarray, residuals: np.ndarray, means: list[np.ndarray]) -> list[float]:
    """η_m per level for rows with ``codes`` and ``residuals``, given level means ``means``."""
    e = residuals.astype(np.float64)
    out = []
    for m, mu in enumerate(means):
        before = float(np.sum(e**2))
        e = e - mu[codes[:, m].astype(np.intp)]
        out.append(1.0 - float(np.sum(e**2)) / before if before > 0 else 0.0)
    return out


def run(settings: Settings) -> dict[str, Any]:
    quick = settings.quick
    sets = QUICK_SETS if quick else SETS
    widths = (16,) if quick else WIDTHS
    depths = (1, 2) if quick else DEPTHS
    max_depth = 2 if quick else MAX_DEPTH
    eta_rows, acc_rows, skipped = [], [], []
    for name, n in tqdm(sets, desc="variance: datasets", leave=False):
        try:
            data = settings.data(name, n)
        except (DatasetUnavailableError, EncoderUnavailableError) as err:  # say so, go on
            skipped.append(f"{name}: {err}")
            continue
        for b in tqdm(widths, desc=f"variance: {name}", leave=False):
            for levels in sorted(set(depths) | {max_depth}):
                model = QSSClassifier(
                    mode="label", n_instances=1, n_levels=levels, n_centroids=b, rho=data.rho
                )
                started = time.perf_counter()
                model.fit(data.X_train, data.y_train)
                fit_s = time.perf_counter() - started
                schema = instance_schemas(model)[0]
                if levels in depths:
                    g_test = schema.transform(data.X_test)[1]
                    g_acc = float(np.mean(model.classes_[g_test.argmax(1)] == data.y_test))
                    acc_rows.append(
                        {
                            "dataset": name,
                            "k": data.n_classes,
                            "n_train": data.n_train,
                            "b": b,
                            "l": levels,
                            "accuracy": float(model.score(data.X_test, data.y_test)),
                            "g_only_accuracy": g_acc,
                            "fit_s": fit_s,
                        }
                    )
                if levels != max_depth:
                    continue
                codes, g = schema.transform(data.X_train)
                r = onehot(data.y_train, model.classes_) - g
                means = level_means(codes, r, b)
                codes_t, g_t = schema.transform(data.X_test)
                r_t = onehot(data.y_test, model.classes_) - g_t
                for m, (tr, te) in enumerate(
                    zip(explained(codes, r, means), explained(codes_t, r_t, means), strict=True)
                ):
                    eta_rows.append(
                        {
                            "dataset": name,
                            "k": data.n_classes,
                            "n_train": data.n_train,
                            "b": b,
                            "level": m + 1,
                            "eta_train": tr,
                            "eta_test": te,
                        }
                    )
    if not quick:
        settings.scaled.append(
            "variance: letter subsampled to 5,000 training rows and MNIST (HOG) to 2,000; "
            "sentiment left out (encoding its test split with MiniLM on the loaded shared "
            "machine would have outlasted this run's budget); label mode, one instance"
        )
    png = figure_path(settings, "variance")
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    colors = plt.get_cmap("tab10")
    names = sorted({r["dataset"] for r in eta_rows})
    for i, name in enumerate(names):
        for j, b in enumerate(widths):
            mine = [r for r in eta_rows if r["dataset"] == name and r["b"] == b]
            style = ("-", "--", ":")[j % 3]
            levels = [r["level"] for r in mine]
            axes[0].plot(
                levels,
                [r["eta_train"] for r in mine],
                style,
                marker="o",
                color=colors(i),
                label=f"{name} b={b}",
            )
            axes[1].plot(levels, [r["eta_test"] for r in mine], style, marker="o", color=colors(i))
            acc = sorted(
                (r for r in acc_rows if r["dataset"] == name and r["b"] == b),
                key=lambda r: r["l"],
            )
            axes[2].plot(
                [r["l"] for r in acc], [r["accuracy"] for r in acc], style, marker="o",
                color=colors(i),
            )  # fmt: skip
    axes[0].set_title("η_m on training rows (what the statistics fit)")
    axes[1].set_title("η_m on test rows (training μ)")
    axes[2].set_title("test accuracy vs ℓ (label mode, p = 1)")
    for ax in axes[:2]:
        ax.set_xlabel("level m")
        ax.set_ylabel("explained fraction η_m")
        ax.axhline(0, color="black", lw=0.7)
    axes[2].set_xlabel("ℓ (levels)")
    axes[2].set_ylabel("test accuracy")
    axes[2].set_xscale("log", base=2)
    axes[0].legend(fontsize=6, ncol=2)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    save_figure(fig, png, settings.command)
    notes = (
        "Label mode (the codebook sees all training inputs, so b is not capped by |D°|), one "
        "instance, ρ from the paper benchmark's rule, seed 0. η per level comes from one fit "
        f"with ℓ = {max_depth} per b; accuracy vs ℓ from separate fits (α and shrinkage are "
        "chosen per fit from the statistics). g_only_accuracy: the same fit's base model g "
        "alone. μ are plain cell means (shrinkage 0), so η_train ≥ 0 always and a level with "
        "η_test ≤ 0 only fits noise.\n\n"
        + ("**Skipped**: " + "; ".join(skipped) + "\n\n" if skipped else "")
        + f"![variance decay]({png.name})\n"
    )
    md = write_tables(
        settings,
        "variance",
        {
            "Explained fraction per level": (eta_rows, ETA_COLUMNS),
            "Accuracy vs depth and width": (acc_rows, ACC_COLUMNS),
        },
        notes,
    )
    return {"md": md, "png": png, "eta": eta_rows, "accuracy": acc_rows}
