"""Figures of the paper benchmark (matplotlib, Agg backend: no display needed).

Why a separate module: matplotlib is only needed to draw, so importing the measuring code never
pulls it in, and a missing matplotlib is one clear error at the end of a run instead of a crash
before it. Every figure carries the exact command that produced it in its footer, like the
tables do in their header.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

MATPLOTLIB_INSTALL = "pip install matplotlib==3.11.2"


def pyplot() -> Any:
    """pyplot on the Agg backend, or an ImportError that names the install command."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(
            f"the figures need matplotlib; install it with: {MATPLOTLIB_INSTALL}"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, command: str) -> None:
    """Lay out, stamp the command that made the figure at its foot, write the PNG, close."""
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    text = "\n".join(textwrap.wrap(f"Command: {command}", 150))
    fig.text(0.01, 0.005, text, fontsize=6.5, family="monospace", va="bottom", ha="left")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


def rho_sweep_figure(rows: list[dict], path: Path, command: str) -> bool:
    """Accuracy gap to SISA (pp) against expected-cost speedup, one curve per dataset and mode.

    Classification only: a regression gap is in Pearson-r points, another unit. Returns False
    (and writes nothing) when there is nothing to plot.
    """
    rows = [r for r in rows if "accuracy" in r]
    if not rows:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 6))
    datasets = sorted({r["dataset"] for r in rows})
    colors = plt.get_cmap("tab10")
    for i, name in enumerate(datasets):
        for mode, style, marker in (("QSS-E", "-", "o"), ("QSS-L", "--", "s")):
            pts = sorted(
                (r for r in rows if r["dataset"] == name and r["mode"] == mode),
                key=lambda r: r["rho"],
            )
            if not pts:
                continue
            xs = [r["speedup"] for r in pts]
            ys = [r["gap_pp"] for r in pts]
            ax.plot(xs, ys, style, marker=marker, color=colors(i % 10), label=f"{name} {mode}")
            for r in pts:
                ax.annotate(
                    f"{100 * r['rho']:g}%",
                    (r["speedup"], r["gap_pp"]),
                    fontsize=6,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
    ax.axhline(0.0, color="black", lw=0.8)
    ax.axhline(-2.0, color="grey", lw=0.8, ls=":", label="−2 pp")
    ax.axvline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel(
        "expected-cost speedup over SISA  [SISA shard retrain / ((1−q)·t_fast + q·t_rebuild), "
        "q = 1−(1−ρ)^p]"
    )
    ax.set_ylabel("test accuracy − SISA's (pp)")
    ax.set_title("ρ sweep (labels: ρ): accuracy gap vs deletion speedup, seed 0")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="best")
    save_figure(fig, path, command)
    return True


def width_depth_figure(grid: list[dict], purity: list[dict], path: Path, command: str) -> bool:
    """Three panels: accuracy vs b per ℓ, level-1 purity vs b (the grid's datasets), and the
    level-1 purity of every dataset's main models. Returns False when both inputs are empty."""
    if not grid and not purity:
        return False
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    colors = plt.get_cmap("tab10")
    ax_acc, ax_pur, ax_bar = axes
    for i, name in enumerate(sorted({r["dataset"] for r in grid})):
        mine = [r for r in grid if r["dataset"] == name]
        for j, depth in enumerate(sorted({r["l"] for r in mine})):
            pts = sorted((r for r in mine if r["l"] == depth), key=lambda r: r["b"])
            ax_acc.plot(
                [r["b"] for r in pts],
                [r["accuracy"] for r in pts],
                marker="o",
                ls=("-", "--", ":", "-.")[j % 4],
                color=colors(i % 10),
                label=f"{name} ℓ={depth}",
            )
        by_b = {r["b"]: r["level1_purity"] for r in mine}
        ax_pur.plot(
            sorted(by_b),
            [by_b[b] for b in sorted(by_b)],
            marker="o",
            color=colors(i % 10),
            label=name,
        )
    for ax in (ax_acc, ax_pur):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("b (centroids per level)")
        ax.grid(True, alpha=0.3)
    ax_acc.set_ylabel("test accuracy")
    ax_acc.set_title("width vs depth (label mode, p = 1)")
    ax_pur.set_ylabel("level-1 purity")
    ax_pur.set_title("level-1 cell purity vs b")
    if grid:
        ax_acc.legend(fontsize=7)
        ax_pur.legend(fontsize=7)
    labels = [f"{r['dataset']}\n{r['mode']} b={r['b']}" for r in purity]
    ax_bar.bar(
        range(len(purity)),
        [r["level1_purity"] for r in purity],
        color="tab:blue",
        label="level-1 purity",
    )
    ax_bar.scatter(
        range(len(purity)),
        [r["majority_class_share"] for r in purity],
        color="tab:red",
        marker="_",
        s=200,
        label="majority-class share",
        zorder=3,
    )
    ax_bar.set_xticks(range(len(purity)), labels, fontsize=6, rotation=60, ha="right")
    ax_bar.set_ylim(0, 1)
    ax_bar.set_title("level-1 purity of the main models (seed 0)")
    if purity:
        ax_bar.legend(fontsize=7, loc="lower right")
    save_figure(fig, path, command)
    return True
