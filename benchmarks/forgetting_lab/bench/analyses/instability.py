"""Codebook instability: why exact mode keeps the partition off deletable rows.

A codebook learned on all rows (k-means, or the residual quantizer QSS-L uses) is a function of
every row, so deleting one row and learning it again moves centroids, and rows far from the
deleted one change cells ("flip"). Statistics are indexed by cell, so a flipped row would have
to be moved between cells — the update is no longer a subtraction. Exact mode learns the
partition on D° only (rows chosen by a keyed hash of their id), so deleting a D• row leaves the
partition bit-identical: zero flips. This module measures both, on 2-D points (the paper's
picture) and on real embeddings (HOG of MNIST, MiniLM of the sentiment sentences).

A flip is counted on the rows that remain, as a change of their code (any level). On 2-D points
we also count flips *after matching* the new centroids to the old ones (Hungarian assignment),
so a mere renumbering of cells is not called a flip.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting.schema.codebook import train_codebook
from forgetting.schema.membership import MembershipRule, derive_key, draws, id_bytes
from forgetting_lab.bench.plots import pyplot, save_figure

from .common import Settings, figure_path, instance_schemas, write_tables

B_2D = 20
N_2D = 300
RHO_2D = 0.25
"""ρ for the 2-D exact-mode arm: with 300 points D° needs enough rows for b = 20 centroids."""
EMBED_LEVELS, EMBED_CENTROIDS = 2, 32
EMBED_RHO = 0.1
COLUMNS = [
    "data", "codebook", "trained_on", "b", "l", "n", "seeds", "deletions", "d0_deletions",
    "flip_rate_mean", "flip_rate_median", "flip_rate_max", "matched_flip_rate_mean",
    "deletions_with_any_flip",
]  # fmt: skip
ESTIMATOR_COLUMNS = [
    "data", "mode", "b", "l", "p", "deletions", "d0_skipped", "rows_compared", "flipped_rows",
    "codes_equal",
]  # fmt: skip


def two_d_points(seed: int, n: int = N_2D) -> np.ndarray:
    """n points from 8 Gaussian blobs in the unit square (a fixed generator per seed)."""
    rng = np.random.default_rng(1000 + seed)
    centers = rng.uniform(0.15, 0.85, size=(8, 2))
    labels = rng.integers(0, 8, size=n)
    return (centers[labels] + rng.normal(scale=0.07, size=(n, 2))).astype(np.float64)


def kmeans(Z: np.ndarray, b: int, seed: int) -> np.ndarray:
    """Lloyd's k-means (k-means++ init, one start, fixed seed): centroids (b, d)."""
    return KMeans(n_clusters=b, n_init=1, random_state=seed).fit(Z).cluster_centers_


def assign(Z: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    d = ((Z[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
    return np.argmin(d, axis=1)


def matched(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Permutation mapping each new centroid to the old one it best replaces (Hungarian)."""
    cost = ((after[:, None, :] - before[None, :, :]) ** 2).sum(axis=2)
    rows, cols = linear_sum_assignment(cost)
    perm = np.empty(len(after), dtype=np.intp)
    perm[rows] = cols
    return perm


def keyed_schema_mask(ids: np.ndarray, rho: float, min_rows: int, seed: int) -> np.ndarray:
    """D° of one instance by the library's keyed membership (key derived from the seed)."""
    d = draws(derive_key(None, seed), [id_bytes(int(i)) for i in ids], 1)[:, 0]
    return MembershipRule(rho, min_rows).members(d, np.ones(len(ids), dtype=bool))


def flips_2d(seed: int, n_deletions: int, rng: np.random.Generator) -> tuple[list[dict], dict]:
    """Per deletion on one 2-D point set: flips of k-means on all rows and of the keyed-D°
    codebook. Returns the rows and the data of the first deletion (for the picture)."""
    Z = two_d_points(seed)
    ids = np.arange(len(Z))
    full = kmeans(Z, B_2D, seed)
    codes = assign(Z, full)
    d0 = keyed_schema_mask(ids, RHO_2D, 2 * B_2D, seed)
    exact = kmeans(Z[d0], B_2D, seed)
    exact_codes = assign(Z, exact)
    out, picture = [], {}
    for victim in rng.choice(ids, size=n_deletions, replace=False):
        keep = ids != victim
        after = kmeans(Z[keep], B_2D, seed)
        new = assign(Z[keep], after)
        flipped = new != codes[keep]
        matched_flips = matched(full, after)[new] != codes[keep]
        d0_after = keyed_schema_mask(ids[keep], RHO_2D, 2 * B_2D, seed)
        exact_after = kmeans(Z[keep][d0_after], B_2D, seed)
        exact_flipped = assign(Z[keep], exact_after) != exact_codes[keep]
        hit = bool(d0[victim])
        out.append(
            {
                "flip": float(flipped.mean()),
                "matched": float(matched_flips.mean()),
                "exact_flip": float(exact_flipped.mean()),
                "d0_hit": hit,
            }
        )
        if not picture and not hit:
            picture = {
                "Z": Z,
                "victim": int(victim),
                "before": full,
                "after": after,
                "flipped": np.flatnonzero(keep)[flipped],
                "matched_flipped": np.flatnonzero(keep)[matched_flips],
                "exact": exact,
                "exact_after": exact_after,
                "exact_flipped": np.flatnonzero(keep)[exact_flipped],
                "d0": d0,
            }
    return out, picture


def l2_normalize(X: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return (X / np.maximum(norms, 1e-12)).astype(np.float32)


def flips_embeddings(
    Z: np.ndarray, seed: int, n_deletions: int, rng: np.random.Generator
) -> list[dict]:
    """Per deletion: flips of the library's RQ codebook trained on all rows vs on keyed D°."""
    ids = np.arange(len(Z))
    full = train_codebook(Z, EMBED_LEVELS, EMBED_CENTROIDS, seed)
    codes = full.encode(Z)
    d0 = keyed_schema_mask(ids, EMBED_RHO, 2 * EMBED_CENTROIDS, seed)
    exact_codes = train_codebook(Z[d0], EMBED_LEVELS, EMBED_CENTROIDS, seed).encode(Z)
    out = []
    for victim in rng.choice(ids, size=n_deletions, replace=False):
        keep = ids != victim
        new = train_codebook(Z[keep], EMBED_LEVELS, EMBED_CENTROIDS, seed).encode(Z[keep])
        d0_after = keyed_schema_mask(ids[keep], EMBED_RHO, 2 * EMBED_CENTROIDS, seed)
        cb = train_codebook(Z[keep][d0_after], EMBED_LEVELS, EMBED_CENTROIDS, seed)
        exact_new = cb.encode(Z[keep])
        out.append(
            {
                "flip": float(np.any(new != codes[keep], axis=1).mean()),
                "matched": float("nan"),
                "exact_flip": float(np.any(exact_new != exact_codes[keep], axis=1).mean()),
                "d0_hit": bool(d0[victim]),
            }
        )
    return out


def summary_rows(name: str, n: int, b: int, levels: int, seeds: int, trials: list[dict]) -> list:
    """Two rows per data set: the all-rows codebook and the keyed-D° codebook (D• deletions;
    D° deletions are counted, since those make the instance rebuild)."""
    rows = []
    all_flips = np.array([t["flip"] for t in trials])
    matched_flips = np.array([t["matched"] for t in trials])
    d0_hits = sum(t["d0_hit"] for t in trials)
    exact = np.array([t["exact_flip"] for t in trials if not t["d0_hit"]])
    base = {"data": name, "b": b, "l": levels, "n": n, "seeds": seeds}
    rows.append(
        {
            **base,
            "codebook": "k-means" if levels == 1 and name.startswith("2-D") else "RQ (faiss)",
            "trained_on": "all rows (label mode)",
            "deletions": len(trials),
            "d0_deletions": "–",
            "flip_rate_mean": float(all_flips.mean()),
            "flip_rate_median": float(np.median(all_flips)),
            "flip_rate_max": float(all_flips.max()),
            "matched_flip_rate_mean": float(np.nanmean(matched_flips))
            if not np.all(np.isnan(matched_flips))
            else float("nan"),
            "deletions_with_any_flip": int((all_flips > 0).sum()),
        }
    )
    rows.append(
        {
            **base,
            "codebook": rows[0]["codebook"],
            "trained_on": "keyed D° only (exact mode); D• deletions",
            "deletions": len(exact),
            "d0_deletions": d0_hits,
            "flip_rate_mean": float(exact.mean()) if exact.size else float("nan"),
            "flip_rate_median": float(np.median(exact)) if exact.size else float("nan"),
            "flip_rate_max": float(exact.max()) if exact.size else float("nan"),
            "matched_flip_rate_mean": float("nan"),
            "deletions_with_any_flip": int((exact > 0).sum()),
        }
    )
    return rows


def _codes(model: Any, X: np.ndarray) -> list[np.ndarray]:
    return [s.transform(X)[0] for s in instance_schemas(model)]


EXACT_PARTITIONS = ("rq", "trees", "hyperplanes")
"""Every exact-mode partition the package ships: each must flip 0 codes on D• deletions."""


def _exact_arm(name: str, X, y, n_deletions: int, partition: str) -> dict:
    """QSS-E with one partition: forget D• rows one at a time; each instance's codes of the
    remaining rows before the forget, after it, and in a fresh fit without the row."""
    params = dict(rho=EMBED_RHO, partition=partition)
    if partition == "rq":
        params.update(n_levels=EMBED_LEVELS, n_centroids=EMBED_CENTROIDS)
    ids = np.arange(len(X))
    model = QSSClassifier(mode="exact", **params).fit(X, y, ids)
    compared = flipped = done = d0_hits = 0
    for victim in np.random.default_rng(7).permutation(len(X)):
        if done == n_deletions:
            break
        keep = ids != victim
        before = _codes(model, X)
        receipt = model.forget([int(victim)])
        if receipt.instances_hit:  # a D° row: that instance rebuilds (not a D• deletion)
            model.wait_for_rebuilds()
            d0_hits += 1
        else:
            refit = QSSClassifier(mode="exact", **params).fit(X[keep], y[keep], ids[keep])
            pairs = zip(before, _codes(model, X[keep]), _codes(refit, X[keep]), strict=True)
            for b_codes, forgot, fresh in pairs:
                diff = np.any(b_codes[keep] != forgot, axis=1) | np.any(forgot != fresh, axis=1)
                compared += int(keep.sum())
                flipped += int(diff.sum())
            done += 1
        ids, X, y = ids[keep], X[keep], y[keep]
    shape = _codes(model, X[:1])[0].shape[1]
    return {
        "data": name,
        "mode": f"QSS-E ({partition}): before/after forget(i) and fit(D \\ {{i}}), i ∈ D•",
        "b": EMBED_CENTROIDS if partition == "rq" else "–",
        "l": EMBED_LEVELS if partition == "rq" else f"{shape} tables",
        "p": model.n_instances,
        "deletions": done,
        "d0_skipped": d0_hits,
        "rows_compared": compared,
        "flipped_rows": flipped,
        "codes_equal": flipped == 0,
    }


def estimator_check(name: str, X: np.ndarray, y: np.ndarray, n_deletions: int) -> list[dict]:
    """Through the estimator. QSS-E, for every shipped exact-mode partition: forget D• rows one
    at a time (a receipt without ``instances_hit``); each instance's codes of the remaining
    rows before the forget, after it, and in a fresh ``fit`` without the row must agree.
    QSS-L: ``forget(erase_inputs=True)`` relearns the codebook on the remaining inputs; count
    the codes that change."""
    out = [_exact_arm(name, X, y, n_deletions, partition) for partition in EXACT_PARTITIONS]
    params = dict(n_levels=EMBED_LEVELS, n_centroids=EMBED_CENTROIDS, rho=EMBED_RHO)
    ids = np.arange(len(X))
    label = QSSClassifier(mode="label", n_instances=1, **params).fit(X, y, ids)
    codes = _codes(label, X)[0]
    compared = flipped = 0
    for victim in np.random.default_rng(8).choice(ids, size=n_deletions, replace=False):
        keep = ids != victim
        label.forget([int(victim)], erase_inputs=True)
        label.wait_for_rebuilds()
        new = _codes(label, X[keep])[0]
        compared += int(keep.sum())
        flipped += int(np.any(new != codes[keep], axis=1).sum())
        ids, X, y, codes = ids[keep], X[keep], y[keep], new
    out.append(
        {
            "data": name,
            "mode": "QSS-L (rq): forget(erase_inputs=True) relearns the codebook",
            "b": EMBED_CENTROIDS,
            "l": EMBED_LEVELS,
            "p": 1,
            "deletions": n_deletions,
            "d0_skipped": 0,
            "rows_compared": compared,
            "flipped_rows": flipped,
            "codes_equal": flipped == 0,
        }
    )
    return out


def picture(pic: dict, path, command: str) -> None:
    """Voronoi cells before/after one deletion (all-rows k-means) and the keyed-D° codebook."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.6))
    Z = pic["Z"]
    gx, gy = np.meshgrid(np.linspace(0, 1, 400), np.linspace(0, 1, 400))
    grid = np.c_[gx.ravel(), gy.ravel()]
    panels = (
        (axes[0], pic["before"], [], "k-means on all 300 points (b = 20)", None),
        (
            axes[1],
            pic["after"],
            pic["flipped"],
            f"after deleting one point: {len(pic['flipped'])} of {len(Z) - 1} codes flip "
            f"({len(pic['matched_flipped'])} after matching cells)",
            pic["matched_flipped"],
        ),
        (
            axes[2],
            pic["exact_after"],
            pic["exact_flipped"],
            f"exact mode: codebook on keyed D° ({int(pic['d0'].sum())} rows), same deletion: "
            f"{len(pic['exact_flipped'])} flips",
            None,
        ),
    )
    for ax, centroids, flipped, title, matched_flipped in panels:
        cells = assign(grid, centroids)
        if ax is axes[1]:  # colour each new cell like the old cell it replaces
            cells = matched(pic["before"], centroids)[cells]
        cells = cells.reshape(gx.shape)
        ax.imshow(
            cells,
            origin="lower",
            extent=(0, 1, 0, 1),
            cmap="tab20",
            alpha=0.35,
            interpolation="nearest",
        )
        ax.scatter(Z[:, 0], Z[:, 1], s=7, c="black", lw=0)
        if ax is axes[2]:
            d0 = pic["d0"]
            ax.scatter(Z[d0, 0], Z[d0, 1], s=14, facecolors="none", edgecolors="blue", lw=0.8)
        ax.scatter(centroids[:, 0], centroids[:, 1], marker="+", s=70, c="black", lw=1.5)
        if len(flipped):
            ax.scatter(
                Z[flipped, 0],
                Z[flipped, 1],
                s=40,
                facecolors="none",
                edgecolors="red",
                lw=1.0,
                label="code flipped",
            )
        if matched_flipped is not None and len(matched_flipped):
            ax.scatter(
                Z[matched_flipped, 0],
                Z[matched_flipped, 1],
                s=12,
                c="red",
                lw=0,
                label="flipped after matching cells",
            )
        if ax is not axes[0]:
            v = pic["victim"]
            ax.scatter(Z[v, 0], Z[v, 1], marker="X", s=140, c="magenta", label="deleted point")
            ax.legend(fontsize=7, loc="lower right")
        ax.set_title(title, fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")
    axes[2].set_xlabel("blue rings: D° rows (keyed hash of the id)", fontsize=8)
    save_figure(fig, path, command)


def run(settings: Settings) -> dict[str, Any]:
    """Measure flip rates (2-D and embeddings) and draw the 2-D picture."""
    quick = settings.quick
    n_del_2d = 5 if quick else 30
    seeds = 1 if quick else max(settings.seeds, 5)
    rng = np.random.default_rng(0)
    trials, pic = [], {}
    for seed in tqdm(range(seeds), desc="instability: 2-D", leave=False):
        rows, p = flips_2d(seed, n_del_2d, rng)
        trials += rows
        pic = pic or p
    summary = summary_rows("2-D mixture", N_2D, B_2D, 1, seeds, trials)
    n_embed = 400 if quick else 3000
    n_del = 2 if quick else 10
    embed_seeds = 1 if quick else settings.seeds
    estimator_rows = []
    sets = (("digits", 1000),) if quick else (("mnist", n_embed), ("sentiment", n_embed))
    for name, n in sets:
        X, y, features = settings.train_features(name, n)
        Z = l2_normalize(X)
        trials = []
        for seed in tqdm(range(embed_seeds), desc=f"instability: {name}", leave=False):
            trials += flips_embeddings(Z, seed, n_del, rng)
        label = f"{name} ({features}, d = {Z.shape[1]})"
        summary += summary_rows(label, len(Z), EMBED_CENTROIDS, EMBED_LEVELS, embed_seeds, trials)
        estimator_rows += estimator_check(label, X, y, 2 if quick else 3)
    if not quick:
        settings.scaled.append(
            f"instability: embeddings subsampled to {n_embed} training rows, b = "
            f"{EMBED_CENTROIDS}, ℓ = {EMBED_LEVELS}, {n_del} deletions × {embed_seeds} seeds "
            "per set (each deletion retrains the codebook twice)"
        )
    png = figure_path(settings, "instability")
    if pic:
        picture(pic, png, settings.command)
    notes = (
        "Flip = a remaining row whose code (any level) differs after deleting one row and "
        "learning the codebook again with the same seed. 2-D: sklearn k-means (one k-means++ "
        f"start) on {N_2D} points of 8 blobs, b = {B_2D}; matched = flips after mapping new "
        "cells to old ones by a Hungarian assignment of centroids (a renumbering alone is not "
        "a flip). Embeddings: the library's RQ trainer (`forgetting.schema.codebook.train_"
        "codebook`, faiss, beam 1) on L2-normalized features. Exact-mode arm: the same trainer "
        "on D° chosen by the library's keyed membership (`forgetting.schema.membership`, ρ = "
        f"{RHO_2D} for 2-D, {EMBED_RHO} for embeddings, so D° can hold b centroids); deleting "
        "a D• row leaves D° and so the codebook unchanged, measured here by retraining; a "
        "deletion that hits D° (d0_deletions) makes that instance rebuild instead. Estimator "
        "check: every instance's codes of the remaining rows from `QSSClassifier(mode='exact')` "
        "with each shipped partition (RQ codebook, random trees, random hyperplanes) fitted "
        "with and without D• rows, and from `mode='label'` after `forget(..., "
        "erase_inputs=True)`, which relearns the codebook on the remaining inputs.\n\n"
        + (f"![codebook instability]({png.name})\n" if pic else "")
    )
    md = write_tables(
        settings,
        "instability",
        {
            "Flip rates: one deletion, codebook learned again": (summary, COLUMNS),
            "Estimator: codes of the remaining rows across deletions": (
                estimator_rows,
                ESTIMATOR_COLUMNS,
            ),
        },
        notes,
    )
    return {"md": md, "png": png if pic else None, "summary": summary, "estimator": estimator_rows}
