"""The paper benchmark's measuring stages, per dataset: accuracy, exactness, deletion cost,
cell purity, the ρ sweep and the width × depth grid.

Why the order in :func:`evaluate`: accuracy and purity are read off freshly fitted models,
deletions (exactness) change those models, and timings come last so that nothing measured
earlier depends on them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from forgetting._rowwise import one_blas_thread
from forgetting_lab.bench.costs import (
    expected_cost,
    forget_and_predict,
    rebuild_rate,
    timed_rebuild,
)

from .data import (
    D0_BATCHES,
    EXACTNESS_BATCHES,
    FAST_FORGET_BUDGET_S,
    N_FAST_FORGETS,
    N_TIMING_ROUNDS,
    PAPER_RHO,
    QSS_MODES,
    STAGES,
    SWEEP_FAST_FORGETS,
    Data,
    load_data,
    min_schema_rows,
)
from .models import (
    anchor_scores,
    build_seconds,
    codebook_shape,
    g_only_outputs,
    make_qss,
    make_ridge,
    make_sisa,
    model_scores,
    score,
    timed_fit,
)


@dataclass
class SeedZero:
    """The seed-0 models, reused by the deletion, exactness, sweep and purity stages."""

    qss: dict[str, Any]
    sisa: Any
    ridge: Any
    scores: dict[str, dict[str, float]]
    shapes: dict[str, tuple[int, int, int]]
    """(b, ℓ, |D°|) of instance 0 at fit time, per mode."""
    fit_s: dict[str, float]
    """Seconds of each QSS mode's seed-0 fit: the retrain a deletion is compared with."""


def accuracy_stage(
    data: Data,
    seeds: Sequence[int],
    baselines: dict[tuple, tuple],
    modes: Sequence[str] = tuple(QSS_MODES),
) -> tuple[list[dict], SeedZero]:
    """Fit every model at every seed (QSS in ``modes``, the baselines and the anchors); per-run
    rows and the seed-0 models.

    ``baselines`` caches SISA, ridge and the anchors per (dataset, seed): the LightGBM variant
    of Adult shares them with the one-hot row (they see the same one-hot features).
    """
    runs: list[dict] = []
    seed0: SeedZero | None = None
    ridge_key = (data.dataset, -1)
    if ridge_key not in baselines:
        ridge = make_ridge(data)
        fit_seconds = timed_fit(ridge, data)
        baselines[ridge_key] = (ridge, model_scores(data, ridge), fit_seconds)
    qss_modes = [(QSS_MODES[m], m) for m in ("exact", "label") if m in modes]
    for seed in tqdm(seeds, desc=f"{data.key}: accuracy", unit="seed", leave=False):
        fitted: dict[str, Any] = {}
        fit_s: dict[str, float] = {}
        for label, mode in qss_modes:
            model = make_qss(data, mode, seed)
            fit_s[label] = timed_fit(model, data)
            fitted[label] = model
        results: dict[str, dict[str, float]] = {}
        if "QSS-E" in fitted:
            qe = fitted["QSS-E"]
            g0, cls = g_only_outputs(qe, data.X_test), data.classification
            results["g-only"] = score(data, g0, getattr(qe, "classes_", None), g0 if cls else None)
            fit_s["g-only"] = fit_s["QSS-E"]
        for label, model in fitted.items():
            results[label] = model_scores(data, model)
        key = (data.dataset, seed)
        if key not in baselines:
            sisa = make_sisa(data, seed)
            fit_seconds = timed_fit(sisa, data)
            baselines[key] = (sisa, model_scores(data, sisa), fit_seconds)
        sisa, results["SISA"], fit_s["SISA"] = baselines[key]
        ridge, results["exact ridge"], fit_s["exact ridge"] = baselines[ridge_key]
        anchors, anchor_fit_s = anchor_scores(data, seed, baselines)
        results.update(anchors)
        fit_s.update(anchor_fit_s)
        for label, metrics in results.items():
            runs.append(
                {
                    "dataset": data.key,
                    "seed": seed,
                    "model": label,
                    "n_train": data.n_train,
                    "rho": data.rho,
                    **metrics,
                    "fit_s": fit_s[label],
                }
            )
        if seed0 is None:
            shapes = {label: codebook_shape(m) for label, m in fitted.items()}
            seed0 = SeedZero(fitted, sisa, ridge, results, shapes, dict(fit_s))
    assert seed0 is not None
    return runs, seed0


def in_any_schema(model: Any) -> np.ndarray:
    """Mask of rows in some instance's D° (benchmark-only peek at secret membership)."""
    rows = model.engine_.rows
    inside = np.zeros(rows.size, dtype=bool)
    for r in range(model.n_instances):
        inside |= rows.members(r)
    return inside


def exactness_check(
    data: Data, model: Any, mode: str, seed: int, rng: np.random.Generator
) -> dict[str, Any]:
    """Forget 100 random rows in 5 batches (3 forced into D°), wait, refit without them.

    Exact mode compares with ``fit`` on the remaining rows; label mode (whose guarantee is
    label deletion) with ``fit`` where those rows' labels are unlabeled (−1 / NaN), the
    refit the README promises. Returns booleans measured with ``numpy.array_equal`` on the
    test predictions and state-digest equality.
    """
    rows = model.engine_.rows
    ids = np.asarray(rows.ids[: rows.size])
    inside = in_any_schema(model)
    total = sum(EXACTNESS_BATCHES)
    n_d0 = min(len(D0_BATCHES), int(inside.sum()))
    d0 = rng.choice(ids[inside], size=n_d0, replace=False)
    others = rng.choice(ids[~inside], size=total - n_d0, replace=False)
    batches, start = [], 0
    for b, size in enumerate(EXACTNESS_BATCHES):
        batch = []
        if b in D0_BATCHES[:n_d0]:
            batch.append(int(d0[D0_BATCHES.index(b)]))
        take = size - len(batch)
        batch += [int(i) for i in others[start : start + take]]
        start += take
        batches.append(batch)
    rebuilds = 0
    for batch in tqdm(batches, desc=f"{data.key}: forget ({mode})", leave=False):
        rebuilds += len(model.forget(batch).instances_hit)
    model.wait_for_rebuilds()
    gone = np.array([i for b in batches for i in b])
    started = time.perf_counter()
    refit = make_qss(data, mode, seed)
    if mode == "exact":
        keep = ~np.isin(np.arange(data.n_train), gone)
        refit.fit(data.X_train[keep], data.y_train[keep], np.arange(data.n_train)[keep])
    else:
        y = data.y_train.copy()
        y[gone] = -1 if data.classification else np.nan
        refit.fit(data.X_train, y, np.arange(data.n_train))
    refit_s = time.perf_counter() - started
    predict = (lambda m: m.predict_proba(data.X_test)) if data.classification else None
    predict = predict or (lambda m: m.predict(data.X_test))
    return {
        "dataset": data.key,
        "mode": "QSS-E" if mode == "exact" else "QSS-L",
        "scope": "instance" if mode == "exact" else "label",
        "deleted": int(gone.size),
        "batches": "+".join(str(len(b)) for b in batches),
        "d0_rows": n_d0,
        "instance_rebuilds": rebuilds,
        "predictions_equal": bool(np.array_equal(predict(model), predict(refit))),
        "digest_equal": model.state_digest() == refit.state_digest(),
        "refit_s": refit_s,
    }


def fast_forget_ms(
    model: Any,
    n: int,
    rng: np.random.Generator,
    X: np.ndarray,
    budget_s: float | None = None,
    at_least: int = SWEEP_FAST_FORGETS,
) -> tuple[list[float], list[float]]:
    """``n`` single-id deletions of labeled rows outside every D°, as the caller sees them.

    Returns (ms of each ``forget`` call alone, ms of each forget + the first ``predict(X)``
    after it): the second is t_fast, since that prediction pays whatever re-materialization
    the deletion left behind. A row whose receipt reports a D° hit after all is not counted
    (its rebuild is waited for, so it does not disturb the next timing). With ``budget_s``,
    stop early once ``at_least`` deletions are timed and their forget + predict times add up
    to more than the budget: an RQ model re-materializing for ~0.5 s per deletion (label mode
    on 26 classes) would otherwise spend a minute on 100 samples of the same number.
    """
    model.wait_for_rebuilds()
    rows = model.engine_.rows
    ok = ~in_any_schema(model) & rows.labeled()
    ids = np.asarray(rows.ids[: rows.size])[ok]
    calls, totals = [], []
    for row_id in rng.choice(ids, size=min(n, ids.size), replace=False):
        call, total, receipt = forget_and_predict(model, [int(row_id)], X)
        if receipt.instances_hit:
            model.wait_for_rebuilds()
            continue
        calls.append(call * 1e3)
        totals.append(total * 1e3)
        if budget_s is not None and len(totals) >= at_least and sum(totals) > 1e3 * budget_s:
            break
    return calls, totals


def measured_rebuild(model: Any, rng: np.random.Generator, X: np.ndarray) -> tuple[float, float]:
    """Forget one row of instance 0's D° (and no other's), predict, wait for the rebuild.

    Returns (forget + first predict in ms — what the caller waits at a D° hit, the wall time
    in s from the forget until ``wait_for_rebuilds`` returned — the rebuild as a user sees it).
    """
    model.wait_for_rebuilds()
    rows = model.engine_.rows
    only0 = rows.members(0) & rows.labeled()
    for r in range(1, model.n_instances):
        only0 &= ~rows.members(r)
    candidates = np.flatnonzero(only0) if only0.any() else np.flatnonzero(rows.members(0))
    row_id = int(rows.ids[int(rng.choice(candidates))])
    waited, rebuild_s, _ = timed_rebuild(model, row_id, X)
    return waited * 1e3, rebuild_s


def baseline_picks(model: Any, n: int, rng: np.random.Generator) -> list[Any]:
    """``n`` ids to forget from SISA (each from a different shard, so each forget retrains a
    different shard) or from exact ridge."""
    if hasattr(model, "shards_"):
        shards = [s for s in model.shards_ if len(s) > 1]
        return [s.ids[int(rng.integers(len(s)))] for s in shards[:n]]
    return list(rng.choice(np.asarray(model.ids_), size=n, replace=False))


def deletion_rows(data: Data, seed0: SeedZero, rng: np.random.Generator) -> list[dict]:
    """Deletion-cost rows (QSS-E and QSS-L) timed on the seed-0 models, side by side.

    Why interleaved: what sets the speedup is SISA's shard retrain against QSS's rebuild
    (q·t_rebuild ≫ t_fast), and a shared machine's load drifts within minutes. So each of
    :data:`N_TIMING_ROUNDS` rounds times one SISA forget, one ridge forget and one measured
    D° rebuild per mode back to back, and the tables report medians over the rounds (with
    the 1-minute load average, so a disturbed row can be recognized). Every QSS time includes
    the first prediction after the forget (one test row), see :mod:`forgetting_lab.bench.costs`.
    """
    load = os.getloadavg()[0]
    labels = tuple(seed0.qss)
    x1 = data.X_test[:1]
    fast = {
        label: fast_forget_ms(seed0.qss[label], N_FAST_FORGETS, rng, x1, FAST_FORGET_BUDGET_S)
        for label in labels
    }
    sisa_ids = baseline_picks(seed0.sisa, N_TIMING_ROUNDS, rng)
    ridge_ids = baseline_picks(seed0.ridge, N_TIMING_ROUNDS, rng)
    sisa_s, ridge_s = [], []
    calls: dict[str, list[float]] = {label: [] for label in labels}
    rebuilds: dict[str, list[float]] = {label: [] for label in labels}
    for sisa_id, ridge_id in zip(sisa_ids, ridge_ids, strict=False):
        # the courtesy QSS takes: one BLAS thread (unpinned, OpenBLAS's threads contend on a
        # busy machine: SISA's fit ran 30× slower in bench.core)
        with one_blas_thread():
            sisa_s.append(float(seed0.sisa.forget([sisa_id])["seconds"]))
            ridge_s.append(float(seed0.ridge.forget([ridge_id])["seconds"]))
        for label in labels:
            call_ms, rebuild = measured_rebuild(seed0.qss[label], rng, x1)
            calls[label].append(call_ms)
            rebuilds[label].append(rebuild)
    sisa = float(np.median(sisa_s))
    out = []
    for label in labels:
        model = seed0.qss[label]
        forget_only, t_fast_all = fast[label]
        t_fast = float(np.median(t_fast_all))
        t_rebuild = float(np.median(rebuilds[label]))
        p = model.n_instances
        # The hit probability a deletion really faces: |D°|/n per instance (ρ on large data,
        # more where D° keeps its minimum size), not the nominal ρ.
        rho_eff = float(model.effective_rho_)
        q = rebuild_rate(rho_eff, p)
        expected = expected_cost(t_fast, t_rebuild * 1e3, rho_eff, p)
        # What a caller waits: a D° hit returns once the other instances are marked and the
        # rebuild is queued (it runs in the background), so it costs d0_call, not t_rebuild.
        d0_call = float(np.median(calls[label]))
        blocking = (1 - q) * t_fast + q * d0_call
        b, levels, _ = seed0.shapes[label]
        out.append(
            {
                "dataset": data.key,
                "mode": label,
                "scope": "instance" if label == "QSS-E" else "label",
                "n_train": data.n_train,
                "rho": data.rho,
                "effective_rho": rho_eff,
                "p": p,
                "q_rebuild": q,
                "b": b,
                "l": levels,
                "forget_ms": float(np.median(forget_only)),
                "fast_forgets": len(t_fast_all),
                "t_fast_ms": t_fast,
                "t_fast_p95_ms": float(np.percentile(t_fast_all, 95)),
                "t_fast_p99_ms": float(np.percentile(t_fast_all, 99)),
                "d0_call_ms": d0_call,
                "t_rebuild_s": t_rebuild,
                "build_at_fit_s": build_seconds(model),
                "expected_ms": expected,
                "retrain_s": seed0.fit_s[label],
                "speedup_vs_retrain": seed0.fit_s[label] * 1e3 / expected,
                "sisa_s": sisa,
                "speedup": sisa * 1e3 / expected,
                "t_fast_vs_sisa_shard": sisa * 1e3 / t_fast,
                "blocking_ms": blocking,
                "speedup_blocking_vs_blocking_sisa": sisa * 1e3 / blocking,
                "ridge_forget_ms": 1e3 * float(np.median(ridge_s)),
                "rounds": len(sisa_s),
                "load_1min": load,
            }
        )
    return out


def level1_purity(codes: np.ndarray, labels: np.ndarray) -> float:
    """Σ over level-1 cells of the majority-label count, over all rows: the fraction of rows
    sharing their cell's majority label, each cell weighted by its size."""
    cells = codes.astype(np.int64)
    k = int(labels.max()) + 1
    table = np.zeros((int(cells.max()) + 1, k), dtype=np.int64)
    np.add.at(table, (cells, labels.astype(np.int64)), 1)
    return float(table.max(axis=1).sum() / labels.size)


def cell_purity(codes: np.ndarray, labels: np.ndarray) -> float:
    """Mean over the columns of ``codes`` (one column per flat table) of :func:`level1_purity`:
    each table cuts the whole space, so each is scored like a codebook's first level."""
    codes = np.asarray(codes)
    if codes.ndim == 1:
        codes = codes[:, None]
    return float(np.mean([level1_purity(codes[:, t], labels) for t in range(codes.shape[1])]))


def partition_name(model: Any) -> str:
    """The partition a fitted QSS model uses: "rq" when its schemas hold a codebook, else the
    flat family it was asked for ("auto" resolves to trees in exact mode, see the README).

    A fitted ``partition_`` attribute wins when the estimator has one; without it, what
    ``partition="auto"`` resolved to is only visible in private code, so the name says "auto".
    """
    resolved = getattr(model, "partition_", None)
    if resolved is not None:
        return str(resolved)
    schema = model.engine_.schema_of(0)
    if schema is not None and schema.partition is None:
        return "rq"
    return "auto (flat)" if model.partition == "auto" else str(model.partition)


def purity_row(data: Data, mode: str, model: Any) -> dict[str, Any]:
    """Cell purity of the training rows, averaged over the p instances.

    RQ codebook: the first level's cells (as in the width × depth grid). Flat partitions
    (random trees, hyperplanes): every table's cells, averaged over the T tables — each table
    is one cut of the whole space, the analogue of the codebook's first level. Purity = the
    fraction of rows whose label is the majority label of their cell (cells weighted by
    size). Cells come from the public path ``engine_.schema_of(r).transform(X)`` (the same
    exact codes the statistics use), on the freshly fitted seed-0 model.
    """
    classes = np.asarray(model.classes_)
    labels = np.searchsorted(classes, data.y_train)
    purities, occupied = [], []
    for r in range(model.n_instances):
        schema = model.engine_.schema_of(r)
        if schema is None:  # rebuilding: never the case right after fit, but do not wait
            continue
        codes, _ = schema.transform(data.X_train)
        flat = schema.partition is not None
        cells = codes if flat else codes[:, :1]
        purities.append(cell_purity(cells, labels))
        occupied.append(np.mean([np.unique(cells[:, t]).size for t in range(cells.shape[1])]))
    b, levels, _ = codebook_shape(model)
    return {
        "dataset": data.key,
        "mode": "QSS-E" if mode == "exact" else "QSS-L",
        "partition": partition_name(model),
        "b": b,
        "l": levels,
        "occupied_cells": float(np.mean(occupied)),
        "level1_purity": float(np.mean(purities)),
        "majority_class_share": float(np.bincount(labels).max() / labels.size),
    }


def sweep_rows(
    data: Data,
    seed0: SeedZero,
    rhos: Sequence[float],
    t_fast0: dict[str, float],
    sisa_s: float,
    rng: np.random.Generator,
) -> list[dict]:
    """Accuracy gap to SISA and expected-cost speedup at each ρ (seed 0, both modes).

    The accuracy table's ρ reuses its seed-0 models; other ρ are fitted here. t_rebuild is
    the fit's per-instance build time (the same work a rebuild does; the deletion table
    shows both agree), t_fast the median of :data:`SWEEP_FAST_FORGETS` single-id forgets.
    """
    metric = "accuracy" if data.classification else "pearson_r"
    sisa_score = seed0.scores["SISA"][metric]
    out = []
    need = min_schema_rows(data.n_classes)
    grid = sorted(set(rhos) | {data.rho, PAPER_RHO})
    for rho in tqdm(grid, desc=f"{data.key}: ρ sweep", leave=False):
        # The paper's ρ always runs: where n·ρ is below the schema minimum, the library's own
        # min_schema_rows tops D° up (schema_rows shows by how much), so the exact-mode target
        # "at ρ = 0.5 %" has a measured point on every set. Other infeasible ρ are skipped.
        if data.n_train * rho < need and rho != PAPER_RHO:
            continue
        for label, mode in ((QSS_MODES[m], m) for m in QSS_MODES if QSS_MODES[m] in seed0.qss):
            if rho == data.rho:
                # The seed-0 model, scored before the deletion stages changed its rows.
                model, t_fast = seed0.qss[label], t_fast0[label]
                acc = seed0.scores[label][metric]
                b, levels, schema_rows = seed0.shapes[label]
            else:
                model = make_qss(data, mode, 0, rho=rho)
                timed_fit(model, data)
                acc = model_scores(data, model)[metric]
                b, levels, schema_rows = codebook_shape(model)
                _, totals = fast_forget_ms(model, SWEEP_FAST_FORGETS, rng, data.X_test[:1])
                t_fast = float(np.median(totals))
            t_rebuild = build_seconds(model)
            # The measured |D°|/n, not the nominal ρ: where the library tops D° up to its
            # minimum, deletions hit it more often than ρ says.
            rho_eff = float(model.effective_rho_)
            expected = expected_cost(t_fast, t_rebuild * 1e3, rho_eff, model.n_instances)
            out.append(
                {
                    "dataset": data.key,
                    "mode": label,
                    "rho": rho,
                    "n_train": data.n_train,
                    "schema_rows": schema_rows,
                    "b": b,
                    "l": levels,
                    metric: acc,
                    f"sisa_{metric}": sisa_score,
                    "gap_pp": 100 * (acc - sisa_score),
                    "t_fast_ms": t_fast,
                    "t_rebuild_s": t_rebuild,
                    "expected_ms": expected,
                    "speedup": sisa_s * 1e3 / expected,
                }
            )
            if rho != data.rho:
                del model
    return out


def width_depth_rows(
    name: str,
    n_train: int | None,
    widths: Sequence[int],
    depths: Sequence[int],
    image_features: str = "hog",
) -> list[dict]:
    """Accuracy over b × ℓ in label mode with one instance, and level-1 purity per b.

    Label mode trains the codebook on all inputs, so b is not capped by |D°|; one instance
    (p = 1) isolates the codebook's shape from the ensemble average over instances.
    """
    data = load_data(name, n_train, image_features=image_features)
    out = []
    cells = [(b, levels) for b in widths for levels in depths]
    for b, levels in tqdm(cells, desc=f"{name}: width × depth", leave=False):
        model = make_qss(data, "label", 0, n_centroids=b, n_levels=levels, n_instances=1)
        fit_s = timed_fit(model, data)
        codes, _ = model.engine_.schema_of(0).transform(data.X_train)
        labels = np.searchsorted(np.asarray(model.classes_), data.y_train)
        out.append(
            {
                "dataset": name,
                "n_train": data.n_train,
                "rho": data.rho,
                "b": b,
                "l": levels,
                "accuracy": model_scores(data, model)["accuracy"],
                "level1_purity": level1_purity(codes[:, 0], labels),
                "fit_s": fit_s,
            }
        )
    return out


@dataclass
class Results:
    """Everything one run measured, table by table."""

    datas: list[Data] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)
    deletion: list[dict] = field(default_factory=list)
    exact: list[dict] = field(default_factory=list)
    purity: list[dict] = field(default_factory=list)
    sweep: list[dict] = field(default_factory=list)
    width_depth: list[dict] = field(default_factory=list)
    runtime: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def evaluate(
    data: Data,
    seeds: Sequence[int],
    rhos: Sequence[float],
    baselines: dict,
    results: Results,
    modes: Sequence[str] = tuple(QSS_MODES),
    stages: Sequence[str] = STAGES,
) -> None:
    """The per-dataset ``stages``, in an order that keeps each measurement clean: accuracy
    (with the anchors) and purity on freshly fitted models, then exactness (deletions), then
    timings, then the ρ sweep (which needs the timings). QSS is fitted in ``modes`` only. The
    seed-0 models are dropped at the end to bound memory."""
    rng = np.random.default_rng(12345)
    clock = {"dataset": data.key}
    t = time.perf_counter()
    runs, seed0 = accuracy_stage(data, seeds, baselines, modes)
    results.runs += runs
    clock["accuracy_s"] = time.perf_counter() - t
    fitted = [(QSS_MODES[m], m) for m in QSS_MODES if m in modes]
    if data.classification:
        results.purity += [purity_row(data, mode, seed0.qss[label]) for label, mode in fitted]
    if "exactness" in stages:
        t = time.perf_counter()
        for label, mode in fitted:
            results.exact.append(exactness_check(data, seed0.qss[label], mode, 0, rng))
        clock["exactness_s"] = time.perf_counter() - t
    if "deletion" in stages:
        t = time.perf_counter()
        rows = deletion_rows(data, seed0, rng)
        results.deletion += rows
        t_fast = {row["mode"]: row["t_fast_ms"] for row in rows}
        sisa_s = rows[0]["sisa_s"]
        clock["deletion_s"] = time.perf_counter() - t
        if "sweep" in stages:
            t = time.perf_counter()
            results.sweep += sweep_rows(data, seed0, rhos, t_fast, sisa_s, rng)
            clock["sweep_s"] = time.perf_counter() - t
    clock["total_s"] = sum(v for k, v in clock.items() if k.endswith("_s"))
    results.runtime.append(clock)


def variants(names: Sequence[str], lgbm: bool) -> list[tuple[str, bool]]:
    """(dataset, learned encoder?) pairs: Adult gets a second row with LightGBM."""
    out = []
    for name in names:
        out.append((name, False))
        if name == "adult" and lgbm:
            out.append((name, True))
    return out
