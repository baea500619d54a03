"""The price of a split rule in exact forgetting: split flips per deletion (issue 68).

:func:`flip_rows` (``python -m forgetting_lab.bench.split_study --flip-table adult``) grows a
numpy forest on the forest's codes with the library's rule — K random (feature, threshold)
pairs from the node's feasible code range, the first argmax of the Gini gain over all rows'
integer class counts — and the same forest with the best threshold of K drawn features
(HistGradientBoosting's splitter on bins, from the same integer sums: SPEC §5.12). For sampled
rows it re-decides each tree's path with the row's class removed: the first node whose choice
(or leaf-ness) changes is a *split flip*, where the library makes the subtree stale and rebuilds
it from its rows; the rest of the path only drops the row's counts.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .paper.data import load_data
from .split_study import grid_codes, validation_split

RULES = ("random", "best")


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


def flip_rows(name, n_rows, n_trees, deletions, seed, factors=(1,), n_train=None) -> list[dict]:
    """Validation accuracy and split flips per deletion of the two rules on ``name``'s codes."""
    data = load_data(name, n_train)
    _, y_all = np.unique(data.y_train, return_inverse=True)
    fit_idx, val_idx = validation_split(y_all, seed)
    fit_idx = np.random.default_rng(seed).permutation(fit_idx)[:n_rows]
    C, Cv, n_codes = grid_codes(data.X_train[fit_idx], data.X_train[val_idx], seed)
    C, Cv = C.astype(np.int64), Cv.astype(np.int64)
    y, yv, k = y_all[fit_idx], y_all[val_idx], int(y_all.max()) + 1
    victims = np.random.default_rng(seed + 1).choice(len(y), deletions, replace=False)
    tracked = np.zeros(len(y), bool)
    tracked[victims] = True
    out = []
    base = math.ceil(math.sqrt(C.shape[1]))
    settings = [(f * base, leaf, rule) for f in factors for leaf in (1, 5) for rule in RULES]
    for K, leaf, rule in settings:
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
