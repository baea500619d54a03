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

Then the price (``--flip-table``): a numpy forest with the library's rule (K random
(feature, threshold) pairs from the node's feasible code range, best Gini over all rows'
integer class counts) and with the best threshold of K drawn features; per sampled row and
tree, the first node whose choice changes without the row is a *split flip* (the library
makes that subtree stale and rebuilds it from its rows).
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

EXPECTED_DURATION = "about 12 min per half of the tables, 2 halves in parallel (--quick: 20 s)"
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
        ("second stage", HGB_CODES, *fit_score(_hgb(), C, y, Cv, yv)),
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


FINDING_COLUMNS = [
    "dataset", "forest defaults", "forest validation-best", "HGB floats",
    "gap validation-best to HGB (pp)", "best − random threshold (pp), mean of 6 settings",
    "its range (pp)", "best split-rule variant", "its val", "HGB codes − floats (pp)",
    "native − ordinal categoricals (pp)", "best second stage (upper bound)", "its val ",
]  # fmt: skip


HGB_CODES = "HGB on the forest's codes"


def findings(summary: list[dict]) -> list[dict]:
    """One row per table from the summary's means: the references, random against best
    thresholds at the same (trees, K, leaf, bins), and what binning, native categoricals and
    the exact second stages' upper bounds give."""
    out = []
    for ds in dict.fromkeys(r["dataset"] for r in summary):
        v = {r["variant"]: r["val"] for r in summary if r["dataset"] == ds}
        et = [k for k in v if k.startswith("ET (random threshold)")]
        diff = [100 * (v["RF (best threshold)" + k[21:]] - v[k]) for k in et]
        split = max((k for k in v if " threshold) " in k), key=v.__getitem__)
        stage = max((k for k in v if "→ LR" in k or "boosted" in k), key=v.__getitem__, default="")
        cats = ("HGB raw, native categoricals", "HGB raw, categories as ordinal codes")
        hgb, best = v["HGB floats (full-data reference)"], v["forest validation-best of the grid"]
        out.append({
            "dataset": ds, "forest defaults": v["forest defaults"],
            "forest validation-best": best, "HGB floats": hgb,
            "gap validation-best to HGB (pp)": f"{100 * (best - hgb):+.2f}",
            "best − random threshold (pp), mean of 6 settings": f"{np.mean(diff):+.2f}",
            "its range (pp)": f"{min(diff):+.2f} … {max(diff):+.2f}",
            "best split-rule variant": split, "its val": v[split],
            "HGB codes − floats (pp)": f"{100 * (v[HGB_CODES] - hgb):+.2f}",
            "native − ordinal categoricals (pp)": (
                f"{100 * (v[cats[0]] - v[cats[1]]):+.2f}" if cats[0] in v else "–"),
            "best second stage (upper bound)": stage, "its val ": v.get(stage, "–"),
        })  # fmt: skip
    return out


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
            from .split_flips import flip_rows  # it reads this module's grid and split

            factors = tuple(int(f) for f in args.flip_factors.split(","))
            flips = flip_rows(args.flip_table, args.flip_rows, args.flip_trees, args.flip_deletions,
                              seeds[0], factors, N_TRAIN.get(args.flip_table))  # fmt: skip
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
    p.add_argument("--flip-factors", default="1", help="K = factor·⌈√d⌉ (comma-separated)")
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
        "Findings: per table": (findings(summary), FINDING_COLUMNS),
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
