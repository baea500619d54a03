"""Per-level sensitivity: how far one changed label moves each level's residual sums.

QSS-DP noises the raw sums T_m (what the accumulators hold) and materializes afterwards. In
exact mode g and the codebook depend on D° only, so changing the label of one D• row changes
its residual r = onehot(y) − g(x) by e_new − e_old (L2 norm √2) in exactly one cell per level:
‖ΔT_m‖ = √2 — the bound behind σ. The cascade S_m = T_m − Σ_{q<m} N_{q,m}·μ_q (each level fitted
to what the levels above left) is not what is noised, but the paper argues its empirical
sensitivity stays near the same √2 with depth, so a bound that compounds over levels would be
loose. Measured here: ‖ΔT_m‖/√2 and ‖ΔS_m‖/√2 per level over many random label changes, and,
through the estimator, that ``forget`` + ``insert`` with the new label equals a refit (digest)
and moves the model's own accumulators by √2 per level.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting.schema.membership import MembershipRule, derive_key, draws, id_bytes
from forgetting_lab.bench.plots import pyplot, save_figure

from .common import Settings, figure_path, instance_schemas, level_sums, onehot, write_tables

LEVELS = 8
CENTROIDS = 16
SETS = (("digits", None), ("mnist", 5_000))
QUICK_SETS = (("digits", 600),)
LEVEL_COLUMNS = [
    "dataset", "level", "occupied_cells", "trials", "T_ratio_min", "T_ratio_max", "S_ratio_mean",
    "S_ratio_median", "S_ratio_p95", "S_ratio_max",
]  # fmt: skip
ESTIMATOR_COLUMNS = [
    "dataset", "trial", "codes_unchanged", "forget_insert_digest_equals_refit",
    "accumulator_T_ratio_min", "accumulator_T_ratio_max",
]  # fmt: skip


def schema_rows_mask(n: int, rho: float, k: int) -> np.ndarray:
    """D° of instance 0 by the library's keyed membership (default key of seed 0, the
    estimator's default minimum of max(50, 5k) rows)."""
    d = draws(derive_key(None, 0), [id_bytes(i) for i in range(n)], 1)[:, 0]
    return MembershipRule(rho, max(50, 5 * k)).members(d, np.ones(n, dtype=bool))


def level_T(codes: np.ndarray, residuals: np.ndarray, b: int) -> list[np.ndarray]:
    out = []
    for m in range(codes.shape[1]):
        sums = np.zeros((b, residuals.shape[1]))
        np.add.at(sums, codes[:, m].astype(np.intp), residuals)
        out.append(sums)
    return out


def accumulator_T(model: Any) -> list[np.ndarray]:
    """Each level's sums T_m of instance 0, as floats (both folds added, fixed point undone)."""
    acc = model.engine_.instances[0].accumulators
    return [np.ldexp(acc.sums[:, m].sum(axis=0).astype(np.float64), -acc.scale_bits)
            for m in range(acc.sums.shape[1])]  # fmt: skip


def run(settings: Settings) -> dict[str, Any]:
    quick = settings.quick
    n_trials = 20 if quick else 300
    n_est = 1 if quick else 3
    level_rows, est_rows, ratios_by_set = [], [], {}
    for name, n in tqdm(QUICK_SETS if quick else SETS, desc="sensitivity", leave=False):
        data = settings.data(name, n)
        X, y = data.X_train, data.y_train
        ids = np.arange(len(y))
        params = dict(n_instances=1, n_levels=LEVELS, n_centroids=CENTROIDS, rho=data.rho)
        model = QSSClassifier(**params).fit(X, y, ids)
        schema = instance_schemas(model)[0]
        codes, g = schema.transform(X)
        classes = model.classes_
        r = onehot(y, classes) - g
        d0 = schema_rows_mask(len(y), data.rho, len(classes))
        outside = np.flatnonzero(~d0)
        rng = np.random.default_rng(0)
        T0, S0 = level_T(codes, r, CENTROIDS), level_sums(codes, r, CENTROIDS)
        t_ratios, s_ratios = [], []
        for _ in tqdm(range(n_trials), desc=f"sensitivity: {name}", leave=False):
            i = int(rng.choice(outside))
            new = rng.choice(classes[classes != y[i]])
            r2 = r.copy()
            r2[i] = (classes == new).astype(np.float64) - g[i]
            T1, S1 = level_T(codes, r2, CENTROIDS), level_sums(codes, r2, CENTROIDS)
            t_ratios.append(
                [np.linalg.norm(a - b) / np.sqrt(2) for a, b in zip(T1, T0, strict=True)]
            )
            s_ratios.append(
                [np.linalg.norm(a - b) / np.sqrt(2) for a, b in zip(S1, S0, strict=True)]
            )
        t_ratios, s_ratios = np.array(t_ratios), np.array(s_ratios)
        ratios_by_set[name] = s_ratios
        for m in range(LEVELS):
            level_rows.append(
                {
                    "dataset": name,
                    "level": m + 1,
                    "occupied_cells": int(np.unique(codes[:, m]).size),
                    "trials": n_trials,
                    "T_ratio_min": float(t_ratios[:, m].min()),
                    "T_ratio_max": float(t_ratios[:, m].max()),
                    "S_ratio_mean": float(s_ratios[:, m].mean()),
                    "S_ratio_median": float(np.median(s_ratios[:, m])),
                    "S_ratio_p95": float(np.percentile(s_ratios[:, m], 95)),
                    "S_ratio_max": float(s_ratios[:, m].max()),
                }
            )
        before = accumulator_T(model)
        for trial in range(n_est):
            i = int(rng.choice(outside))
            new = rng.choice(classes[classes != y[i]])
            y2 = y.copy()
            y2[i] = new
            refit = QSSClassifier(**params).fit(X, y2, ids)
            same_codes = np.array_equal(instance_schemas(refit)[0].transform(X)[0], codes)
            edited = QSSClassifier(**params).fit(X, y, ids)
            edited.forget([i])
            edited.insert(X[i : i + 1], np.array([new]), [i])
            edited.wait_for_rebuilds()
            after = accumulator_T(refit)
            ratio = [np.linalg.norm(a - b) / np.sqrt(2) for a, b in zip(after, before, strict=True)]
            est_rows.append(
                {
                    "dataset": name,
                    "trial": trial,
                    "codes_unchanged": same_codes,
                    "forget_insert_digest_equals_refit": edited.state_digest()
                    == refit.state_digest(),
                    "accumulator_T_ratio_min": float(min(ratio)),
                    "accumulator_T_ratio_max": float(max(ratio)),
                }
            )
    if not quick:
        settings.scaled.append(
            f"sensitivity: MNIST (HOG) subsampled to 5,000 rows; ℓ = {LEVELS}, b = {CENTROIDS} "
            "(exact mode: b is capped by |D°|), one instance"
        )
    png = figure_path(settings, "sensitivity")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for name, s in ratios_by_set.items():
        levels = np.arange(1, s.shape[1] + 1)
        line = ax.plot(levels, s.mean(axis=0), marker="o", label=f"{name}: mean")[0]
        ax.plot(levels, s.max(axis=0), ls="--", color=line.get_color(), label=f"{name}: max")
    ax.axhline(1.0, color="black", lw=0.8, label="‖ΔT_m‖/√2 (= 1 in every trial)")
    ax.set_xlabel("level m")
    ax.set_ylabel("‖ΔS_m‖ / √2")
    ax.set_title("one D• label changed: cascade residual sums per level")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, png, settings.command)
    notes = (
        f"Exact mode, one instance, ℓ = {LEVELS}, b = {CENTROIDS}, ρ from the paper "
        "benchmark's rule, seed 0. Trials: a random D• row (outside D° by the library's keyed "
        "membership) gets a random other label; codes and g are unchanged (the schema depends "
        "on D° only), so T_m and S_m are recomputed from the rows with the changed residual. "
        "T_m = level-m cell sums of r (what the accumulators hold, what QSS-DP noises); S_m = "
        "level-m cell sums of the running residual r − Σ_{q<m} μ_q[c_q] with plain cell means "
        "μ (shrinkage 0), i.e. the cascade. Ratios are Frobenius norms of the change over √2. "
        "occupied_cells = distinct level-m codes among the training rows: where a level puts "
        "every row in one cell (the exact-mode codebook, learned on a few dozen D° rows, has "
        "no residual left to split), S_m is the sum of a residual that already sums to zero "
        "over the cells above, so its change is zero up to rounding, while T_m still moves "
        "by √2. "
        "Estimator: a refit with the changed label keeps every code (codes_unchanged), "
        "`forget([i])` + `insert` with the new label gives the refit's `state_digest`, and the "
        "model's own integer accumulators (fixed point undone) move by ‖ΔT_m‖/√2 per level.\n\n"
        f"![per-level sensitivity]({png.name})\n"
    )
    md = write_tables(
        settings,
        "sensitivity",
        {
            "Sensitivity per level: random D• label changes": (level_rows, LEVEL_COLUMNS),
            "Estimator: forget + insert vs refit, and the accumulators' change": (
                est_rows,
                ESTIMATOR_COLUMNS,
            ),
        },
        notes,
    )
    return {"md": md, "png": png, "levels": level_rows, "estimator": est_rows}
