"""Where the exact forest's gap to HistGradientBoosting comes from: a validation study (issue 68).

Run ``python -m forgetting_lab.bench.split_study [--quick] [--datasets adult,credit]``. Only the
training rows are read: per seed, a stratified 20 % is the validation split, every model is
fitted on the rest. Per table and seed, on the forest's codes — edges from a D° sample of the
fitting rows (max(ρ·n, min_bin_rows), the estimator's defaults; the library draws D° by a keyed
hash, here a seeded sample) by the library's public ``forgetting.forest.binning`` — it scores:

1. *reference*: ``ExactForestClassifier`` at its defaults, at ``max_bins`` 63/127, and the
   validation-best of a cut of forest.md's grid (it bins its rows itself);
2. *split rule* (scikit-learn, ``bootstrap=False``, on the codes): ExtraTrees (a random
   threshold per drawn feature: close to our random (feature, threshold) pairs) against
   RandomForest (the best threshold of each drawn feature: HGB's splitter on bins), at more
   trees, candidates and leaf sizes, and on a 63-bin grid;
3. *categoricals*: HGB on the raw table with ``categorical_features="from_dtype"`` against the
   categories as ordinal codes (and the one-hot features the forest sees: *HGB floats*);
4. *second stages* (accuracy upper bounds): forest leaves one-hot → logistic regression,
   Newton-boosted leaf values over a forest's fixed partitions, HGB on the codes (what the
   grid costs) and HGB with 7 leaves per tree.

Then the price (``--flip-table``, adult by default): a numpy forest grown with the library's
rule (``max_features`` random (feature, threshold) pairs from the node's feasible code range,
best Gini over all rows' integer class counts, ties to the lower index) and the same forest
with the best threshold of ``max_features`` drawn features; for sampled rows, each tree's path
is re-decided with the row's class removed, and the first node whose choice (or leaf-ness)
changes is a *split flip*: the library makes that subtree stale and rebuilds it from its rows.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from forgetting.forest.binning import bin_edges, encode

from .paper.data import load_data
from .report import write_results

EXPECTED_DURATION = "about 40 min on one core (--quick: under a minute)"
"""How long a run at the defaults takes (`forgetting bench` lists it)."""

RESULTS, TREES = Path("benchmarks/results"), 30
DATASETS = ("adult", "credit", "letter", "satellite", "shuttle", "flights")
N_TRAIN = {"adult": 16000, "letter": 10000, "shuttle": 10000, "flights": 20000}
"""Training rows kept (a seeded subsample of the train split) where the table is larger."""
SEEDS = (0, 1)
VALIDATION_FRACTION = 0.2
RHO, MIN_BIN_ROWS = 0.005, 200
"""``ExactForestClassifier``'s defaults: D° holds max(ρ·n, min_bin_rows) rows."""
GRID = {"leaves": (1, 5), "factors": (1, 4), "trees": (30, 60)}
"""A cut of forest.md's grid (leaves 1/5/20 × factors 1..16 × trees 30/60/120)."""
QUICK = {"n_train": 1500, "seeds": (0,), "grid": {"leaves": (1,), "factors": (1,), "trees": (10,)}}
FLIP_ROWS, FLIP_TREES, FLIP_DELETIONS = 10000, 8, 300

ROW_COLUMNS = ["dataset", "seed", "family", "variant", "val", "fit_s"]
SUMMARY_COLUMNS = [
    "dataset", "family", "variant", "val", "vs forest defaults (pp)", "vs HGB floats (pp)",
    "seeds",
]  # fmt: skip
FLIP_COLUMNS = [
    "dataset", "rule", "min_samples_leaf", "candidates", "trees", "deletions", "val",
    "flips per 1,000 deletions per tree", "rows rebuilt per deletion (all trees)",
    "mean flip depth", "fit_s",
]  # fmt: skip


def validation_split(y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (fit, validation) positions of the training rows, 80/20 (forest.py's split)."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    return train_test_split(idx, test_size=VALIDATION_FRACTION, stratify=y, random_state=seed)


def grid_codes(X_fit: np.ndarray, X_val: np.ndarray, seed: int, max_bins: int = 255):
    """The forest's grid reproduced: edges from a seeded D° sample of the fitting rows. Returns
    both splits' uint8 codes (NaN: one past the finite bins) and (d,) codes per feature (the
    finite bins and the NaN code: the root's feasible range)."""
    n = len(X_fit)
    pool = min(n, max(math.ceil(RHO * n), MIN_BIN_ROWS))
    rows = np.random.default_rng(seed).choice(n, pool, replace=False)
    edges = bin_edges(X_fit[rows], max_bins)
    n_codes = np.array([e.size + 2 for e in edges], dtype=np.int64)
    return encode(X_fit, edges), encode(X_val, edges), n_codes


def codes(X_fit: np.ndarray, X_val: np.ndarray, seed: int, max_bins: int = 255):
    """:func:`grid_codes`' codes of both splits as float32, for scikit-learn."""
    C, Cv, _ = grid_codes(X_fit, X_val, seed, max_bins)
    return C.astype(np.float32), Cv.astype(np.float32)


def fit_score(model, X, y, Xv, yv) -> tuple[float, float]:
    """(validation accuracy, fit seconds) of ``model`` fitted on (X, y), scored on (Xv, yv)."""
    started = time.perf_counter()
    model.fit(X, y)
    secs = time.perf_counter() - started
    return float(model.score(Xv, yv)), secs


def _forest(X, y, Xv, yv, seed, **params):
    from forgetting import ExactForestClassifier

    return fit_score(ExactForestClassifier(random_state=seed, **params), X, y, Xv, yv)


def reference_rows(X, y, Xv, yv, seed, grid) -> list[tuple[str, str, float, float]]:
    """ExactForestClassifier at its defaults, at max_bins 63/127, and over the small grid."""
    out = [("reference", "forest defaults", *_forest(X, y, Xv, yv, seed))]
    if grid is not QUICK["grid"]:
        for bins in (63, 127):
            scored = _forest(X, y, Xv, yv, seed, max_bins=bins)
            out.append(("reference", f"forest max_bins={bins}", *scored))
    base = math.ceil(math.sqrt(X.shape[1]))
    scores = {}
    first = grid["trees"][0]
    for leaf in grid["leaves"]:
        for factor in grid["factors"]:
            m = min(16 * X.shape[1], factor * base)
            scores[(leaf, m, first)] = _forest(
                X, y, Xv, yv, seed, n_estimators=first, max_features=m, min_samples_leaf=leaf
            )
    leaf, m, _ = max(scores, key=lambda p: scores[p][0])
    for trees in grid["trees"][1:]:
        scores[(leaf, m, trees)] = _forest(
            X, y, Xv, yv, seed, n_estimators=trees, max_features=m, min_samples_leaf=leaf
        )
    for (leaf, m, trees), (val, secs) in scores.items():
        out.append(("reference", f"forest grid leaf={leaf} K={m} trees={trees}", val, secs))
    best = max(scores, key=lambda p: (scores[p][0], -p[2]))
    out.append(("reference", "forest validation-best of the grid", *scores[best]))
    return out


def _sk(kind: str, trees: int, m: int, leaf: int, seed: int, **kw):
    from sklearn.ensemble import ExtraTreesClassifier, RandomForestClassifier

    cls = ExtraTreesClassifier if kind == "ET" else RandomForestClassifier
    kw.update(max_features=m, min_samples_leaf=leaf, bootstrap=False, n_jobs=1)
    return cls(trees, random_state=seed, **kw)


def split_rule_rows(C, y, Cv, yv, C63, Cv63, seed, quick) -> list[tuple]:
    """ExtraTrees (random thresholds) against RandomForest (best threshold per drawn feature),
    both without bootstrap, on the forest's codes."""
    d = C.shape[1]
    m = math.ceil(math.sqrt(d))
    settings = [(TREES, m, 1), (TREES, m, 5)]
    if not quick:
        settings += [
            (TREES, min(d, 4 * m), 1),
            (TREES, min(d, 4 * m), 5),
            (120, m, 1),
            (120, min(d, 4 * m), 5),
        ]
    out = []
    for kind, rule in (("ET", "random threshold"), ("RF", "best threshold")):
        for trees, mf, leaf in settings:
            val, secs = fit_score(_sk(kind, trees, mf, leaf, seed), C, y, Cv, yv)
            out.append(
                ("split rule", f"{kind} ({rule}) trees={trees} K={mf} leaf={leaf}", val, secs)
            )
        if not quick:
            val, secs = fit_score(_sk(kind, TREES, m, 1, seed), C63, y, Cv63, yv)
            out.append(
                (
                    "split rule",
                    f"{kind} ({rule}) trees={TREES} K={m} leaf=1, max_bins=63",
                    val,
                    secs,
                )
            )
    return out


def _hgb(**kw):
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(random_state=0, **kw)


def categorical_rows(raw, fit_idx, val_idx, y, yv) -> list[tuple]:
    """HGB on the raw table: native category splits against the categories as ordinal codes."""
    if raw is None or not any(str(t) == "category" for t in raw.dtypes):
        return []
    R, Rv = raw.iloc[fit_idx], raw.iloc[val_idx]
    native = _hgb(categorical_features="from_dtype")
    out = [("categoricals", "HGB raw, native categoricals", *fit_score(native, R, y, Rv, yv))]

    def ordinal(frame):
        frame = frame.copy()
        for col in frame.columns:
            if str(frame[col].dtype) == "category":
                frame[col] = frame[col].cat.codes.where(frame[col].notna(), np.nan).astype(float)
        return frame.to_numpy(dtype=np.float64)

    scored = fit_score(_hgb(), ordinal(R), y, ordinal(Rv), yv)
    out.append(("categoricals", "HGB raw, categories as ordinal codes", *scored))
    return out


def partition_boost(L, Lv, y, k, passes=2, rate=0.3, l2=1.0) -> np.ndarray:
    """Softmax scores of Newton-boosted leaf values over fixed partitions: for each tree in
    turn (``passes`` sweeps), each leaf takes −rate·G/(H + l2) of its fitting rows' gradient
    sums. ``L``/``Lv``: (n, T) leaf ids of the fitting/validation rows; returns (n_val, k)."""
    Y = np.eye(k)[y]
    F, Fv = np.zeros((len(y), k)), np.zeros((len(Lv), k))
    for _ in range(passes):
        for t in range(L.shape[1]):
            _, inv = np.unique(np.concatenate([L[:, t], Lv[:, t]]), return_inverse=True)
            ids, ids_v = inv[: len(y)], inv[len(y) :]
            P = np.exp(F - F.max(1, keepdims=True))
            P /= P.sum(1, keepdims=True)
            G, H, n_leaves = P - Y, P * (1 - P), int(inv.max()) + 1
            Gs = np.stack([np.bincount(ids, G[:, c], n_leaves) for c in range(k)], 1)
            Hs = np.stack([np.bincount(ids, H[:, c], n_leaves) for c in range(k)], 1)
            v = -rate * Gs / (Hs + l2)
            F, Fv = F + v[ids], Fv + v[ids_v]
    return Fv


def second_stage_rows(X, C, y, Xv, Cv, yv, k, seed, quick) -> list[tuple]:
    """Upper bounds of exact second stages, and HGB on the codes against HGB on the floats."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import OneHotEncoder

    out = [
        ("second stage", "HGB floats (full-data reference)", *fit_score(_hgb(), X, y, Xv, yv)),
        ("second stage", "HGB on the forest's codes", *fit_score(_hgb(), C, y, Cv, yv)),
    ]
    if quick:
        return out
    small = fit_score(_hgb(max_leaf_nodes=7), C, y, Cv, yv)
    out.append(("second stage", "HGB codes, max_leaf_nodes=7", *small))
    m = math.ceil(math.sqrt(C.shape[1]))
    for kind, leaf in (("ET", 5), ("RF", 5), ("ET", 20)):
        started = time.perf_counter()
        trees = _sk(kind, TREES, m, leaf, seed).fit(C, y)
        L, Lv = trees.apply(C), trees.apply(Cv)
        base = time.perf_counter() - started
        enc = OneHotEncoder(handle_unknown="ignore").fit(L)
        lr = LogisticRegression(C=1.0, max_iter=300)
        val, secs = fit_score(lr, enc.transform(L), y, enc.transform(Lv), yv)
        out.append(("second stage", f"{kind} leaf={leaf} leaves one-hot → LR", val, base + secs))
        started = time.perf_counter()
        Fv = partition_boost(L, Lv, y, k)
        val = float(np.mean(Fv.argmax(1) == yv))
        secs = base + time.perf_counter() - started
        out.append(
            ("second stage", f"{kind} leaf={leaf} partitions, boosted leaf values", val, secs)
        )
    return out


def run_table(name: str, n_train: int | None, seeds, quick: bool) -> list[dict]:
    """Every variant's validation accuracy on ``name``, one row per (variant, seed)."""
    data = load_data(name, n_train)
    classes, y_all = np.unique(data.y_train, return_inverse=True)
    grid = QUICK["grid"] if quick else GRID
    rows = []
    for seed in seeds:
        fit_idx, val_idx = validation_split(y_all, seed)
        X, Xv = data.X_train[fit_idx], data.X_train[val_idx]
        y, yv = y_all[fit_idx], y_all[val_idx]
        C, Cv = codes(X, Xv, seed)
        C63, Cv63 = codes(X, Xv, seed, 63) if not quick else (C, Cv)
        found = reference_rows(X, y, Xv, yv, seed, grid)
        found += split_rule_rows(C, y, Cv, yv, C63, Cv63, seed, quick)
        found += categorical_rows(data.raw_train, fit_idx, val_idx, y, yv)
        found += second_stage_rows(X, C, y, Xv, Cv, yv, len(classes), seed, quick)
        for family, variant, val, secs in found:
            rows.append({"dataset": name, "seed": seed, "family": family, "variant": variant,
                         "val": round(val, 4), "fit_s": round(secs, 2)})  # fmt: skip
            print(rows[-1], flush=True)
    return rows


def findings(summary: list[dict]) -> list[dict]:
    """Per table and family, the variant with the best mean validation accuracy."""
    best: dict = {}
    for r in summary:
        key = (r["dataset"], r["family"])
        if key not in best or r["val"] > best[key]["val"]:
            best[key] = r
    return list(best.values())


def summarize(rows: list[dict]) -> list[dict]:
    """Mean validation accuracy per (dataset, variant) over seeds, against the forest at its
    defaults and against HGB on the floats (same seeds)."""
    out = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == dataset]
        mean = {}
        for r in mine:
            mean.setdefault((r["family"], r["variant"]), []).append(r["val"])
        ref = np.mean(mean[("reference", "forest defaults")])
        hgb = np.mean(mean[("second stage", "HGB floats (full-data reference)")])
        for (family, variant), vals in mean.items():
            out.append({
                "dataset": dataset, "family": family, "variant": variant,
                "val": round(float(np.mean(vals)), 4),
                "vs forest defaults (pp)": f"{100 * (np.mean(vals) - ref):+.2f}",
                "vs HGB floats (pp)": f"{100 * (np.mean(vals) - hgb):+.2f}",
                "seeds": len(vals),
            })  # fmt: skip
    return out


class NumpyForest:
    """Trees grown on uint8 codes with the library's count rules; ``rule="random"`` draws
    ``K`` (feature, threshold) pairs from the node's feasible code range (the library's),
    ``rule="best"`` draws ``K`` feasible features and tries every threshold of each. A node's
    candidates depend on (seed, tree, node path) only; its choice is the first argmax of the
    Gini gain over its rows' integer class counts (a gain must exceed 1e-12·n). Nodes holding
    a ``tracked`` row keep their candidates' left counts so a deletion can be re-decided."""

    def __init__(self, rule: str, K: int, leaf: int, seed: int):
        self.rule, self.K, self.leaf, self.seed = rule, K, leaf, seed

    def fit(self, C, y, k, n_codes, tracked, n_trees):
        """Grow ``n_trees`` trees on codes ``C`` (n, d) int64 and classes ``y`` (n,) in
        0..k-1; ``n_codes`` (d,): codes per feature, the root's feasible range; ``tracked``
        (n,) bool: the rows whose paths keep their candidates' counts."""
        self.C, self.y, self.k, self.hi = C, y, k, np.asarray(n_codes, np.int64)
        self.tracked, self.trees = tracked, []
        for t in range(n_trees):
            self.grow(t)
        return self

    def grow(self, t: int):
        nodes: list[dict] = []
        lo, hi = np.zeros_like(self.hi), self.hi.copy()
        self._grow(nodes, np.arange(len(self.y)), lo, hi, (self.seed, t, 1), 0)
        self.trees.append(nodes)

    def _candidates(self, rng, lo, hi):
        feasible = np.flatnonzero(hi - lo >= 2)
        if feasible.size == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        if self.rule == "random":
            f = feasible[rng.integers(0, feasible.size, self.K)]
            return f, lo[f] + rng.integers(0, hi[f] - lo[f] - 1)
        f = rng.choice(feasible, min(self.K, feasible.size), replace=False)
        fs = np.concatenate([np.full(hi[g] - lo[g] - 1, g) for g in f])
        ts = np.concatenate([np.arange(lo[g], hi[g] - 1) for g in f])
        return fs, ts

    def _left(self, rows, fs, ts):
        """(candidates, k) class counts of ``rows`` with code <= threshold."""
        y, k, left = self.y[rows], self.k, np.zeros((fs.size, self.k), np.int64)
        for g in np.unique(fs):
            sel = np.flatnonzero(fs == g)
            hist = np.bincount(
                self.C[rows, g].astype(np.int64) * k + y, minlength=(int(self.hi[g]) + 1) * k
            )
            cum = np.cumsum(hist.reshape(-1, k), axis=0)
            left[sel] = cum[ts[sel]]
        return left

    def decide(self, P, left) -> int:
        """The chosen candidate's index, or -1 (a leaf), from parent and left counts."""
        n = int(P.sum())
        if n < 2 * self.leaf or (P > 0).sum() <= 1 or left.shape[0] == 0:
            return -1
        R = P - left
        nL, nR = left.sum(1), R.sum(1)
        ok = (nL >= self.leaf) & (nR >= self.leaf)
        if not ok.any():
            return -1
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = (left**2).sum(1) / nL + (R**2).sum(1) / nR - (P**2).sum() / n
        gain = np.where(ok, gain, -np.inf)
        best = int(np.argmax(gain))
        return best if gain[best] > 1e-12 * n else -1

    def _grow(self, nodes, rows, lo, hi, path, depth) -> int:
        me = len(nodes)
        P = np.bincount(self.y[rows], minlength=self.k)
        node = {
            "n": len(rows),
            "P": P,
            "depth": depth,
            "feat": -1,
            "thr": -1,
            "value": P / len(rows),
        }
        nodes.append(node)
        if len(rows) < 2 * self.leaf or (P > 0).sum() <= 1:
            return me
        rng = np.random.default_rng(path)
        fs, ts = self._candidates(rng, lo, hi)
        left = self._left(rows, fs, ts)
        best = self.decide(P, left)
        if self.tracked[rows].any():
            node.update(fs=fs, ts=ts, left=left)
        if best < 0:
            return me
        f, t = int(fs[best]), int(ts[best])
        node.update(feat=f, thr=t)
        go = self.C[rows, f] <= t
        hi_l, lo_r = hi.copy(), lo.copy()
        hi_l[f], lo_r[f] = t + 1, t + 1
        node["l"] = self._grow(nodes, rows[go], lo, hi_l, (*path[:2], 2 * path[2]), depth + 1)
        node["r"] = self._grow(nodes, rows[~go], lo_r, hi, (*path[:2], 2 * path[2] + 1), depth + 1)
        return me

    def proba(self, Cv) -> np.ndarray:
        out = np.zeros((len(Cv), self.k))
        for nodes in self.trees:
            feat = np.array([nd["feat"] for nd in nodes])
            thr = np.array([nd["thr"] for nd in nodes])
            kids = np.array([(nd.get("l", -1), nd.get("r", -1)) for nd in nodes])
            value = np.stack([nd["value"] for nd in nodes])
            at = np.zeros(len(Cv), np.int64)
            while (inner := feat[at] >= 0).any():
                i = np.flatnonzero(inner)
                goes_left = Cv[i, feat[at[i]]] <= thr[at[i]]
                at[i] = np.where(goes_left, kids[at[i], 0], kids[at[i], 1])
            out += value[at]
        return out / len(self.trees)

    def flip(self, nodes, r: int) -> tuple[int, int] | None:
        """(rows, depth) of the first node on row ``r``'s path whose choice changes when the
        row is removed, or None: the rest of the path just drops the row's counts."""
        i, x, c = 0, self.C[r], self.y[r]
        while True:
            nd = nodes[i]
            P = nd["P"].copy()
            P[c] -= 1
            if "fs" not in nd:  # a leaf by the count rules (too few rows, pure) stays one
                return None
            left = nd["left"].copy()
            left[x[nd["fs"]] <= nd["ts"], c] -= 1
            before = -1 if nd["feat"] < 0 else self.decide(nd["P"], nd["left"])
            if self.decide(P, left) != before:
                return nd["n"], nd["depth"]
            if nd["feat"] < 0:
                return None
            i = nd["l"] if x[nd["feat"]] <= nd["thr"] else nd["r"]


def flip_rows(name: str, n_rows: int, n_trees: int, deletions: int, seed: int) -> list[dict]:
    """Validation accuracy and split flips per deletion of the two rules on ``name``'s codes."""
    data = load_data(name, None)
    _, y_all = np.unique(data.y_train, return_inverse=True)
    fit_idx, val_idx = validation_split(y_all, seed)
    fit_idx = np.random.default_rng(seed).permutation(fit_idx)[:n_rows]
    C, Cv, n_codes = grid_codes(data.X_train[fit_idx], data.X_train[val_idx], seed)
    C, Cv = C.astype(np.int64), Cv.astype(np.int64)
    y, yv, k = y_all[fit_idx], y_all[val_idx], int(y_all.max()) + 1
    victims = np.random.default_rng(seed + 1).choice(len(y), deletions, replace=False)
    tracked = np.zeros(len(y), bool)
    tracked[victims] = True
    K = math.ceil(math.sqrt(C.shape[1]))
    out = []
    for leaf in (1, 5):
        for rule in ("random", "best"):
            started = time.perf_counter()
            forest = NumpyForest(rule, K, leaf, seed).fit(C, y, k, n_codes, tracked, n_trees)
            secs = time.perf_counter() - started
            val = float(np.mean(forest.proba(Cv).argmax(1) == yv))
            flips = [forest.flip(nodes, int(r)) for r in victims for nodes in forest.trees]
            hit = [f for f in flips if f is not None]
            out.append({
                "dataset": name, "rule": f"{rule} threshold", "min_samples_leaf": leaf,
                "candidates": K if rule == "random" else f"{K} features × all thresholds",
                "trees": n_trees, "deletions": deletions, "val": round(val, 4),
                "flips per 1,000 deletions per tree": round(1000 * len(hit) / len(flips), 1),
                "rows rebuilt per deletion (all trees)": round(
                    sum(h[0] for h in hit) / deletions, 1),
                "mean flip depth": round(float(np.mean([h[1] for h in hit])), 1) if hit else "–",
                "fit_s": round(secs, 1),
            })  # fmt: skip
            print(out[-1], flush=True)
    return out


NOTES = """## How to read it

* **val**: accuracy on the validation split (20 % of the training rows, stratified, per seed;
  fitted on the other 80 %; test rows never read), averaged over the seeds; `vs ...`:
  differences of those means.
* **ET** (ExtraTreesClassifier) and **RF** (RandomForestClassifier) run with `bootstrap=False`
  on the forest's codes (a D° grid, max(0.005·n, 200) rows, 255 bins unless stated): ET draws
  one random threshold per drawn feature, close to the library's random (feature, threshold)
  pairs; RF takes the best threshold of each of K drawn features — HGB's splitter on bins.
* **HGB** is scikit-learn's HistGradientBoostingClassifier at its defaults (random_state 0);
  *floats* = the one-hot/numeric features the forest is given, *codes* = the forest's codes.
  *leaves one-hot → LR*: logistic regression (C = 1) on the one-hot leaf ids of 30 trees;
  *boosted leaf values*: Newton steps (rate 0.3, L2 1) of every tree's leaf values in turn,
  over the same fixed partitions: upper bounds of exact second stages.
* **Split flips** (numpy forest, one table): per (deleted row, tree), whether some node on the
  row's path chooses another candidate (or turns leaf / internal) once the row's class is
  removed from its counts; *rows rebuilt* sums, over all trees, the rows under the first
  flipped node (the subtree the library makes stale and rebuilds).
"""


def run(args) -> tuple[list[dict], list[dict], str]:
    """Fit every variant on the tables ``args`` names: (per-seed rows, flip rows, a header)."""
    os.environ.setdefault("FORGETTING_THREADS", "1")
    from threadpoolctl import threadpool_limits

    if args.quick:
        args.flip_rows, args.flip_trees, args.flip_deletions = 1000, 2, 30
    seeds = QUICK["seeds"] if args.quick else tuple(int(s) for s in args.seeds.split(","))
    rows, flips = [], []
    started = time.perf_counter()
    with threadpool_limits(limits=1):
        for name in [d for d in args.datasets.split(",") if d]:
            n_train = QUICK["n_train"] if args.quick else N_TRAIN.get(name)
            rows += run_table(name, n_train, seeds, args.quick)
        if args.flip_table:
            flips = flip_rows(
                args.flip_table, args.flip_rows, args.flip_trees, args.flip_deletions, seeds[0]
            )
    scaled = (
        ", ".join(f"{k} {v:,} training rows" for k, v in N_TRAIN.items())
        if not args.quick
        else f"every table {QUICK['n_train']:,} training rows"
    )
    header = (
        f"Study wall time {time.perf_counter() - started:.0f} s, one thread "
        f"(FORGETTING_THREADS={os.environ['FORGETTING_THREADS']}, BLAS/OpenMP limited to 1); "
        f"seeds {', '.join(map(str, seeds))}; scaled down: {scaled} (seeded subsample of the "
        f"train split); split flips on {args.flip_rows:,} fitting rows of "
        f"{args.flip_table or '–'}.\n\n"
    )
    return rows, flips, header


def merge(out: Path, names: list[str]) -> tuple[list[dict], list[dict], str]:
    """The per-seed and flip rows of partial runs written to ``out`` under ``names`` (fits
    nothing), and a header quoting each part's command, date, load and wall time."""
    rows, flips, lines = [], [], []
    for name in names:
        with open(out / f"{name}-per_seed.csv", newline="") as f:
            for r in csv.DictReader(f):
                rows.append({**r, "seed": int(r["seed"]), "val": float(r["val"])})
        path = out / f"{name}-split_flips_per_deletion.csv"
        if path.exists():
            with open(path, newline="") as f:
                flips += list(csv.DictReader(f))
        text = (out / f"{name}.md").read_text().splitlines()
        kept = [x for x in text if x.startswith(("Command:", "Date:", "Study wall time"))]
        lines.append(f"* part `{name}`: " + "; ".join(kept))
    return rows, flips, "Merged from partial runs:\n\n" + "\n".join(lines) + "\n\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m forgetting_lab.bench.split_study",
        description="Validation study of the exact forest's split rule, bins, categoricals and "
        "second stages against HGB, and the split flips per deletion (issue 68).",
    )
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    p.add_argument("--quick", action="store_true", help="tiny subsamples, one seed, few variants")
    p.add_argument("--flip-table", default="adult", help="'' skips the split-flip study")
    p.add_argument("--flip-rows", type=int, default=FLIP_ROWS)
    p.add_argument("--flip-trees", type=int, default=FLIP_TREES)
    p.add_argument("--flip-deletions", type=int, default=FLIP_DELETIONS)
    p.add_argument("--merge", default="", help="names of partial runs in --out to combine")
    p.add_argument("--conclusion", type=Path, help="a prose file appended to the results")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--name", default="split-study")
    args = p.parse_args(argv)
    command = "python -m forgetting_lab.bench.split_study " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    if args.merge:
        rows, flips, header = merge(args.out, args.merge.split(","))
    else:
        rows, flips, header = run(args)
    summary = summarize(rows)
    tables = {
        "Findings: the best variant of each family per table": (findings(summary), SUMMARY_COLUMNS),
        "Summary: mean validation accuracy per variant": (summary, SUMMARY_COLUMNS),
        "Per seed": (rows, ROW_COLUMNS),
    }
    if flips:
        tables["Split flips per deletion: random against best thresholds"] = (flips, FLIP_COLUMNS)
    notes = header + NOTES + ("\n" + args.conclusion.read_text() if args.conclusion else "")
    md = write_results(args.out, args.name, command.strip(), tables, notes=notes)
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
