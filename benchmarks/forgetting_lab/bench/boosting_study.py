"""Could gradient boosting be forgotten exactly and cheaply? A design study, not a model we ship.

Run ``python -m forgetting_lab.bench.boosting_study``. Issue 42's lead: the exact forest trails
a full-data HistGradientBoosting where boosting's additive stages matter (adult, diamonds), so
is there a boosted model whose forget is bitwise a refit *and* cheap? This module fits a
prototype, :class:`QuantizedBooster`, in which every quantity is an integer sum or a
deterministic function of one (so a refit is reproducible bit for bit and a deletion could be
applied by subtraction):

- the bin grid comes from D° (a seeded sample of ``pool`` training rows), as the forest's does;
- scores are integers times a quantum ``q``; gradients and hessians are rounded to integers
  (scale ``S``), histograms are int64 sums, a split is the first argmax of a gain computed
  from them, a leaf value is rounded to a multiple of ``q``;
- *structure* (which splits) is chosen from all rows' histograms (``structure="all"``, as
  HistGradientBoosting does) or from the D° rows' only (``structure="pool"``, as QSS fixes its
  cells from D°), with leaf sums over all rows either way.

For each design it reports (a) validation score beside a full-data HistGradientBoosting on the
same split (the test rows are never read), and (b) what a deletion would change: for
``--deletions`` random rows outside D°, the model refitted without the row is compared stage by
stage with the full one. A forget is cheap only if every stage keeps its structure and its
quantized leaf values — then it is the row's own terms subtracted along its path; once a stage
changes, every later stage sees other gradients and must be refitted. A deletion of a D° row
changes the structure's input (``structure="pool"``) and is a refit: its share is pool / n.

Binary log loss and squared loss only (multiclass would need k trees per stage).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

from forgetting.forest.binning import bin_edges, encode, n_bins

from .paper.data import load_data
from .report import write_results

EXPECTED_DURATION = "about 4 min on 2 cores"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

VALIDATION_FRACTION = 0.2
DESIGNS = (
    ("all", 2000),
    ("pool", 2000),
    ("pool", 5000),
    ("pool", 10000),
)
"""(structure, D° rows) per design; the grid always comes from the D° rows."""

NOTES = (
    "Validation split of the training rows only (the test rows are never read); one seed. "
    '"val": accuracy (adult) or RMSE (diamonds) of the prototype, 100 stages, '
    'HistGradientBoosting\'s defaults otherwise; "val HGB": a full-data '
    'HistGradientBoosting on the same split. "unchanged": of the deletions (random rows '
    "outside D°), how many left every stage's structure and quantized leaf values as they "
    "were — only those could be forgotten by subtracting the row's own terms; otherwise the "
    'first changed stage and every later one must be refitted, and "rows moved" counts the '
    'remaining rows whose score changed. "D° share": the share of deletions that change the '
    "structure's input (a refit). Squared loss keeps the score quantum at 1/4096 of the target "
    "(exact integer gradients), log loss at 1/16."
)

COLUMNS = [
    "dataset", "n", "structure", "D° rows", "val", "val HGB", "gap", "fit s", "deletions",
    "unchanged", "first changed stage (median)", "rows moved (median)", "D° share",
]  # fmt: skip


@njit(cache=True)
def _histogram(codes, rows, g, h):
    d = codes.shape[1]
    hist = np.zeros((d, 256, 3), dtype=np.int64)
    for r in rows:
        for f in range(d):
            b = codes[r, f]
            hist[f, b, 0] += g[r]
            hist[f, b, 1] += h[r]
            hist[f, b, 2] += 1
    return hist


@njit(cache=True)
def _best_split(hist, nbins, min_leaf, lam):
    """(feature, bin, gain) of the first best split ``code <= bin``; feature -1 if none."""
    g_all = 0
    h_all = 0
    n_all = 0
    for b in range(nbins[0]):
        g_all += hist[0, b, 0]
        h_all += hist[0, b, 1]
        n_all += hist[0, b, 2]
    parent = (g_all * 1.0) ** 2 / (h_all + lam)
    best, best_f, best_b = 0.0, -1, -1
    for f in range(hist.shape[0]):
        gl = 0
        hl = 0
        nl = 0
        for b in range(nbins[f] - 1):
            gl += hist[f, b, 0]
            hl += hist[f, b, 1]
            nl += hist[f, b, 2]
            if nl < min_leaf:
                continue
            if n_all - nl < min_leaf:
                break
            gr = g_all - gl
            gain = (gl * 1.0) ** 2 / (hl + lam) + (gr * 1.0) ** 2 / (h_all - hl + lam) - parent
            if gain > best:
                best, best_f, best_b = gain, f, b
    return best_f, best_b, best


@njit(cache=True)
def _grow(codes, rows, g, h, nbins, max_leaves, min_leaf, lam):
    """One tree grown best-first (HistGradientBoosting's order) on ``rows``' histograms."""
    size = 2 * max_leaves
    feature = -np.ones(size, np.int64)
    threshold = -np.ones(size, np.int64)
    left = -np.ones(size, np.int64)
    right = -np.ones(size, np.int64)
    hist0 = _histogram(codes, rows, g, h)
    f0, b0, gain0 = _best_split(hist0, nbins, min_leaf, lam)
    open_nodes, open_rows, open_hist = [0], [rows], [hist0]
    open_f, open_b, open_gain = [f0], [b0], [gain0]
    n_nodes, leaves = 1, 1
    while leaves < max_leaves:
        pick, pick_gain = -1, 0.0
        for j in range(len(open_nodes)):
            if open_f[j] >= 0 and open_gain[j] > pick_gain:
                pick, pick_gain = j, open_gain[j]
        if pick < 0:
            break
        node, f, b, r = open_nodes[pick], open_f[pick], open_b[pick], open_rows[pick]
        go_left = codes[r, f] <= b
        rows_l, rows_r = r[go_left], r[~go_left]
        feature[node], threshold[node] = f, b
        left[node], right[node] = n_nodes, n_nodes + 1
        if rows_l.size <= rows_r.size:
            hist_l = _histogram(codes, rows_l, g, h)
            hist_r = open_hist[pick] - hist_l
        else:
            hist_r = _histogram(codes, rows_r, g, h)
            hist_l = open_hist[pick] - hist_r
        fl, bl, gl = _best_split(hist_l, nbins, min_leaf, lam)
        fr, br, gr = _best_split(hist_r, nbins, min_leaf, lam)
        open_nodes[pick], open_rows[pick], open_hist[pick] = n_nodes, rows_l, hist_l
        open_f[pick], open_b[pick], open_gain[pick] = fl, bl, gl
        open_nodes.append(n_nodes + 1)
        open_rows.append(rows_r)
        open_hist.append(hist_r)
        open_f.append(fr)
        open_b.append(br)
        open_gain.append(gr)
        n_nodes += 2
        leaves += 1
    return feature[:n_nodes], threshold[:n_nodes], left[:n_nodes], right[:n_nodes]


@njit(cache=True)
def _leaf_of(codes, feature, threshold, left, right):
    out = np.empty(codes.shape[0], np.int64)
    for i in range(codes.shape[0]):
        j = 0
        while feature[j] >= 0:
            j = left[j] if codes[i, feature[j]] <= threshold[j] else right[j]
        out[i] = j
    return out


class QuantizedBooster:
    """Gradient boosting on integer sums (a study prototype; see the module docstring).

    ``loss`` "log" (binary, y in {0, 1}) or "squared"; HistGradientBoosting's defaults
    otherwise (100 stages, learning rate 0.1, 31 leaves, 20 rows a leaf, no L2). ``q`` is the
    score quantum; ``scale`` the integer scale of gradients and hessians (log loss) or of the
    target (squared loss, where q = 1 / scale and every gradient is an exact integer).
    """

    def __init__(self, loss="log", structure="all", n_stages=100, learning_rate=0.1,
                 max_leaves=31, min_leaf=20, q=1 / 16, scale=2**12):  # fmt: skip
        self.loss, self.structure, self.n_stages = loss, structure, n_stages
        self.learning_rate, self.max_leaves, self.min_leaf = learning_rate, max_leaves, min_leaf
        self.q, self.scale = q, scale

    def _gradients(self, k, y):
        if self.loss == "log":
            p = 1.0 / (1.0 + np.exp(-(k * self.q)))
            g = np.rint((p - y) * self.scale).astype(np.int64)
            h = np.maximum(np.rint(p * (1.0 - p) * self.scale).astype(np.int64), 1)
            return g, h
        return k - y, np.ones(k.shape, np.int64)

    def fit(self, codes, nbins, y, pool_rows):
        """Fit on uint8 ``codes``; ``pool_rows`` are the D° positions (structure="pool")."""
        n = codes.shape[0]
        if self.loss == "log":
            positives = int(np.sum(y))
            base = np.log(positives / (n - positives))
        else:
            self.q = 1.0 / self.scale
            y = np.rint(np.asarray(y) * self.scale).astype(np.int64)
            base = float(np.sum(y)) / n / self.scale
        self.k0_ = int(np.rint(base / self.q))
        k = np.full(n, self.k0_, np.int64)
        rows = np.arange(n) if self.structure == "all" else np.asarray(pool_rows, np.int64)
        self.stages_ = []
        for _ in range(self.n_stages):
            g, h = self._gradients(k, y)
            tree = _grow(codes, rows, g, h, nbins, self.max_leaves, self.min_leaf, 1e-9)
            leaf = _leaf_of(codes, *tree)
            g_sum = np.zeros(len(tree[0]), np.int64)
            h_sum = np.zeros(len(tree[0]), np.int64)
            np.add.at(g_sum, leaf, g)
            np.add.at(h_sum, leaf, h)
            value = np.zeros(len(tree[0]), np.int64)
            is_leaf = tree[0] < 0
            step = -self.learning_rate * g_sum[is_leaf] / np.maximum(h_sum[is_leaf], 1)
            if self.loss == "squared":
                step = step / self.scale
            value[is_leaf] = np.rint(step / self.q).astype(np.int64)
            self.stages_.append((*tree, value))
            k = k + value[leaf]
        return self

    def scores(self, codes):
        k = np.full(codes.shape[0], self.k0_, np.int64)
        for *tree, value in self.stages_:
            k += value[_leaf_of(codes, *tree)]
        return k

    def first_difference(self, other) -> int | None:
        """The first stage whose structure or quantized leaf values differ, else None."""
        for s, (a, b) in enumerate(zip(self.stages_, other.stages_, strict=True)):
            if len(a[0]) != len(b[0]) or not all(map(np.array_equal, a, b)):
                return s
        return None


def _fit_kept(params, codes, nbins, target, pool, keep) -> QuantizedBooster:
    """The booster fitted on the rows ``keep`` marks (D° = ``pool``'s rows among them)."""
    at = np.cumsum(keep) - 1
    return QuantizedBooster(**params).fit(codes[keep], nbins, target[keep], at[pool])


def study(name: str, deletions: int, seed: int) -> list[dict]:
    """Every design of :data:`DESIGNS` on ``name``'s validation split: one results row each."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.model_selection import train_test_split

    data = load_data(name, None)
    X, y = np.asarray(data.X_train, dtype=np.float64), np.asarray(data.y_train)
    regression = name in ("diamonds", "diabetes")
    fit, val = train_test_split(
        np.arange(len(y)), test_size=VALIDATION_FRACTION, random_state=seed,
        stratify=None if regression else y,
    )  # fmt: skip
    Xf, yf, Xv, yv = X[fit], y[fit], X[val], y[val]
    if regression:
        hgb = HistGradientBoostingRegressor(random_state=seed).fit(Xf, yf)
        val_hgb = float(np.sqrt(np.mean((hgb.predict(Xv) - yv) ** 2)))
    else:
        hgb = HistGradientBoostingClassifier(random_state=seed).fit(Xf, yf)
        val_hgb = float(np.mean(hgb.predict(Xv) == yv))
    n = len(yf)
    rows = []
    for structure, pool_size in DESIGNS:
        if structure == "pool" and 2 * pool_size > n:
            continue
        rng = np.random.default_rng(seed)
        pool = np.sort(rng.choice(n, min(pool_size, n), replace=False))
        edges = bin_edges(Xf[pool], 255)
        codes, codes_val = encode(Xf, edges), encode(Xv, edges)
        nbins = n_bins(edges).astype(np.int64)
        params = dict(loss="squared" if regression else "log", structure=structure)
        target = yf if regression else yf.astype(np.float64)

        everyone = np.ones(n, bool)
        started = time.perf_counter()
        full = _fit_kept(params, codes, nbins, target, pool, everyone)
        secs = time.perf_counter() - started
        k_val = full.scores(codes_val)
        if regression:
            score = float(np.sqrt(np.mean((k_val * full.q - yv) ** 2)))
        else:
            score = float(np.mean((k_val > 0) == yv))
        firsts, moved = [], []
        victims = rng.choice(np.setdiff1d(np.arange(n), pool), deletions, replace=False)
        for victim in victims:
            keep = everyone.copy()
            keep[victim] = False
            without = _fit_kept(params, codes, nbins, target, pool, keep)
            first = full.first_difference(without)
            firsts.append(first)
            moved.append(int(np.sum(full.scores(codes[keep]) != without.scores(codes[keep]))))
        changed = [f for f in firsts if f is not None]
        rows.append({
            "dataset": name, "n": n, "structure": structure, "D° rows": len(pool),
            "val": round(score, 4), "val HGB": round(val_hgb, 4),
            "gap": round(100 * (score - val_hgb), 2) if not regression
            else f"{100 * (score / val_hgb - 1):+.1f} % RMSE",
            "fit s": round(secs, 2), "deletions": deletions,
            "unchanged": sum(f is None for f in firsts),
            "first changed stage (median)": int(np.median(changed)) if changed else "",
            "rows moved (median)": int(np.median(moved)),
            "D° share": "0 (grid only)" if structure == "all" else round(len(pool) / n, 3),
        })  # fmt: skip
        print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m forgetting_lab.bench.boosting_study", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--datasets", default="adult,diamonds")
    parser.add_argument("--deletions", type=int, default=8, help="rows deleted per design")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--name", default="boosting-study")
    args = parser.parse_args(argv)
    rows = []
    for name in args.datasets.split(","):
        rows += study(name, args.deletions, args.seed)
    command = "python -m forgetting_lab.bench.boosting_study " + shlex.join(
        a for a in (argv if argv is not None else sys.argv[1:])
    )
    write_results(args.out, args.name, command.strip(), {"Designs": (rows, COLUMNS)}, NOTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
