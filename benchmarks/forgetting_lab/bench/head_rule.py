"""Head or tables? The exact-mode rule that picks each instance's correction, on validation splits.

Run ``python -m forgetting_lab.bench.head_rule``. In exact mode each instance serves g(x)
plus either its flat tables' correction or its ridge head's
(content.tables.build_flat_content), chosen from statistics of the integer sums: the head's
out-of-fold gain and the tables' cross-fitted
gain (square term estimated on the D° probes; an exact per-table lower bound also exists).
This benchmark carves a validation split (20 %) from each set's *training* split — the test
split is never read — fits exact mode (default parameters) on the rest, and reports per
instance which correction is better on the validation rows (accuracy for classification,
squared error for regression), the statistics, and which the former rule (head gain >
geometric mean of the two tables' gains) and the current one (head gain > TABLES_GAIN_FACTOR ·
probe gain) pick. It also compares the head's gain with the exact fold gain (each fold's own
system factored) and with the two Richardson steps it replaced, and times those solves.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.linalg
from tqdm import tqdm

from forgetting._rowwise import one_blas_thread
from forgetting.content.heads import GramSystem, LinearHead, NewtonWeights, head_features
from forgetting.content.heads.gram import PENALTY
from forgetting.content.heads.solve import _POTRS
from forgetting.content.heads.solve import head_gain as _gain
from forgetting.content.heads.solve import solve_ridge as _solve
from forgetting.content.tables.flat_content import TABLES_GAIN_FACTOR
from forgetting.estimators import QSSClassifier, QSSRegressor

from .core import clustered_data
from .heads import synthetic_data
from .paper.data import Data, load_data
from .report import write_results

DEFAULT_SETS = "digits,mnist,fashion_mnist,adult,sentiment,letter,synthetic,diabetes,diamonds"
HELD_OUT = {
    # name: (generator, rows, k, ρ, keyword arguments)
    "mix-d64-k10": ("mixture", 50_000, 10, 0.005, {"d": 64, "seed": 5}),
    "mix-d128-k20": ("mixture", 60_000, 20, 0.005, {"d": 128, "seed": 6}),
    "mix-d32-k4": ("mixture", 20_000, 4, 0.01, {"d": 32, "seed": 7}),
    "mkclass-1": ("make_classification", 40_000, 5, 0.005, {"n_features": 40, "n_clusters": 1}),
    "mkclass-3": ("make_classification", 40_000, 5, 0.005, {"n_features": 40, "n_clusters": 3}),
    "mkclass-small": ("make_classification", 8_000, 3, 0.02, {"n_features": 20, "n_clusters": 2}),
}
"""Synthetic sets that played no part in choosing TABLES_GAIN_FACTOR, to see how the rule
does out of sample: bench.core's Gaussian mixture (4 sub-clusters per class) at other d, k
and n, and scikit-learn's make_classification (half the features informative, 1–3 clusters
per class; the small one with 5 % flipped labels)."""
VALIDATION_FRACTION = 0.2
INSTANCE_COLUMNS = [
    "dataset", "seed", "instance", "n_fit", "n_val", "better", "former_rule", "rule",
    "head_gain", "head_gain_exact", "head_gain_richardson", "tables_probe_gain",
    "tables_per_table_gain", "ratio", "val_gain_tables", "val_gain_head", "val_tables",
    "val_head",
]  # fmt: skip
SET_COLUMNS = [
    "dataset", "instances", "head_better", "former_rule_head", "former_rule_wrong",
    "rule_head", "rule_wrong", "ratio_min", "ratio_max", "val_former_rule", "val_rule",
    "val_tables", "val_head",
]  # fmt: skip
TIMING_COLUMNS = ["D", "columns", "solve", "p50_ms", "p10_ms"]


def exact_fold_gain(head: LinearHead) -> float:
    """The out-of-fold gain with each fold's own ridge solution (its system factored)."""
    H, H0, H1 = head.float_cross()
    scale = 2.0 ** (-28)
    G0 = head.gram[0].astype(np.float64) * scale
    G1 = head.gram[1].astype(np.float64) * scale
    D = G0.shape[0]
    s0 = PENALTY * float(np.trace(G0)) / D
    s1 = PENALTY * float(np.trace(G1)) / D
    W0 = scipy.linalg.solve(G0 + s0 * np.eye(D), H0, assume_a="pos")
    W1 = scipy.linalg.solve(G1 + s1 * np.eye(D), H1, assume_a="pos")
    return float(
        2.0 * np.sum(W0 * H1)
        - np.sum(W0 * (G1 @ W0))
        + 2.0 * np.sum(W1 * H0)
        - np.sum(W1 * (G0 @ W1))
    )


def richardson_solve(system: GramSystem, H: np.ndarray, H0: np.ndarray, H1: np.ndarray):
    """The fold approximation content.heads.solve.solve_ridge used before: two preconditioned
    Richardson steps from W towards each fold's solution (three solves, three G_0 products),
    kept here as the reference it is compared with. Returns W and the per-column gains."""
    factor, G0, lam = system.factor, system.G0, system.lam
    s0 = PENALTY * float(np.trace(G0)) / G0.shape[0]
    with one_blas_thread():
        W, _ = _POTRS(factor, H, lower=1)
        G0W = G0 @ W
        R = H0 - (G0W + s0 * W)
        S, _ = _POTRS(factor, R, lower=1)
        G0S = G0 @ S
        R2 = R - 2.0 * (G0S + s0 * S)
        S2, _ = _POTRS(factor, R2, lower=1)
        G0S2 = G0 @ S2
    W0 = W + 2.0 * S + 2.0 * S2
    W1 = W - 2.0 * S + 2.0 * S2
    G0W1 = G0W - 2.0 * G0S + 2.0 * G0S2
    G1W0 = (H - lam * W - G0W) + 2.0 * (R - lam * S - G0S) + 2.0 * (R2 - lam * S2 - G0S2)
    gains = 2.0 * np.sum(W0 * H1, axis=0) - np.sum(W0 * G1W0, axis=0)
    gains += 2.0 * np.sum(W1 * H0, axis=0) - np.sum(W1 * G0W1, axis=0)
    return W, gains


def split(data: Data, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(fit rows, validation rows) of the training split: a seeded 20 % for validation."""
    order = np.random.default_rng(1000 + seed).permutation(data.n_train)
    n_val = int(round(VALIDATION_FRACTION * data.n_train))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def instance_rows(
    data: Data, seed: int, head_kind: str = "auto"
) -> tuple[list[dict], dict[str, float]]:
    """Per instance: the statistics, both rules' picks and the validation comparison; and
    the served ensemble's validation score under each pick (mean over instances)."""
    fit, val = split(data, seed)
    cls = QSSClassifier if data.classification else QSSRegressor
    model = cls(mode="exact", rho=data.rho, random_state=seed, head=head_kind)
    model.fit(data.X_train[fit], data.y_train[fit], np.arange(len(fit)))
    X = model._check_X(data.X_train[val])
    y = data.y_train[val]
    engine = model.engine_
    rows, outputs = [], {"former_rule": 0.0, "rule": 0.0, "tables": 0.0, "head": 0.0}
    for r, inst in enumerate(engine.instances):
        content = engine._content(inst)
        tables, head = content.tables, inst.head
        _, _, probe = tables.best("auto", "auto")
        per_table = tables.per_table_gain()
        gain, weights = head.solution()
        H, H0, H1 = head.float_cross()
        old_gain = _gain(richardson_solve(GramSystem.of(head.gram), H, H0, H1)[1])
        codes, g, Z = inst.schema.serve(X)
        with_tables = g + content.alpha * tables.correction(codes, content.shrinkage)
        v = head_features(Z, np.float64)
        if isinstance(weights, NewtonWeights):  # a logistic step from g's logits (shared-rf)
            with_head = weights.outputs(v, g)
        else:
            with_head = g + weights.apply(v)
        if data.classification:
            target = (model.classes_[None, :] == y[:, None]).astype(np.float64)
        else:
            base = inst.schema.base_model  # residuals are in D°'s standardized units
            target = ((y - base.y_mean) / base.y_scale)[:, None]
        scale = len(fit) / len(val)  # validation falls on the fit rows' scale, as the gains
        before = float(np.sum((target - g) ** 2))
        if data.classification:
            val_t = float(np.mean(np.argmax(with_tables, 1) == np.argmax(target, 1)))
            val_h = float(np.mean(np.argmax(with_head, 1) == np.argmax(target, 1)))
            better = "head" if val_h > val_t else "tables"
        else:
            val_t = float(np.mean((target - with_tables) ** 2))
            val_h = float(np.mean((target - with_head) ** 2))
            better = "head" if val_h < val_t else "tables"
        former = gain > np.sqrt(max(probe, 0.0) * per_table)
        rule = gain > TABLES_GAIN_FACTOR * max(probe, 0.0)
        served = model.corrections_[r]
        if served != ("head" if rule else "tables"):
            raise RuntimeError(f"{data.key}: the engine served {served}, the rule says {rule}")
        for key, pick in (("former_rule", former), ("rule", rule), ("tables", 0), ("head", 1)):
            outputs[key] = outputs[key] + (with_head if pick else with_tables)
        rows.append(
            {
                "dataset": data.key,
                "seed": seed,
                "instance": r,
                "n_fit": len(fit),
                "n_val": len(val),
                "better": better,
                "former_rule": "head" if former else "tables",
                "rule": "head" if rule else "tables",
                "head_gain": gain,
                "head_gain_exact": exact_fold_gain(head),
                "head_gain_richardson": old_gain,
                "tables_probe_gain": probe,
                "tables_per_table_gain": per_table,
                "ratio": gain / probe if probe > 0 else float("nan"),
                "val_gain_tables": (before - float(np.sum((target - with_tables) ** 2))) * scale,
                "val_gain_head": (before - float(np.sum((target - with_head) ** 2))) * scale,
                "val_tables": val_t,
                "val_head": val_h,
            }
        )
    p = len(engine.instances)
    scores = {}
    for key, total in outputs.items():
        mean = total / p
        if data.classification:
            scores[key] = float(np.mean(np.argmax(mean, 1) == np.argmax(target, 1)))
        else:
            scores[key] = float(np.mean((target - mean) ** 2))
    return rows, scores


def set_row(name: str, rows: list[dict], scores: list[dict[str, float]]) -> dict:
    ratios = np.asarray([r["ratio"] for r in rows])

    def count(key, value="head"):
        return sum(r[key] == value for r in rows)

    return {
        "dataset": name,
        "instances": len(rows),
        "head_better": count("better"),
        "former_rule_head": count("former_rule"),
        "former_rule_wrong": sum(r["former_rule"] != r["better"] for r in rows),
        "rule_head": count("rule"),
        "rule_wrong": sum(r["rule"] != r["better"] for r in rows),
        "ratio_min": float(np.nanmin(ratios)),
        "ratio_max": float(np.nanmax(ratios)),
        **{f"val_{k}": float(np.mean([s[k] for s in scores])) for k in scores[0]},
    }


def timing_rows(reps: int = 200) -> list[dict]:
    """solve p = 3 stacked heads of k = 10 (30 columns) at D = 129 and 521, factor given:
    the current fold approximation against the Richardson steps it replaced."""
    rng = np.random.default_rng(0)
    out = []
    for d in (128, 520):
        n = 4 * (d + 1)
        Z = rng.normal(size=(n, d))
        Z /= np.linalg.norm(Z, axis=1, keepdims=True)
        head = LinearHead.empty(d, 30, 32)
        head.add(head_features(Z), rng.integers(-(2**31), 2**31, (n, 30)), rng.integers(0, 2, n))
        system = GramSystem.of(head.gram)
        H, H0, H1 = head.float_cross()
        solves = {"2A⁻¹H_a (current)": _solve, "Richardson ×2 (former)": richardson_solve}
        times: dict[str, list[float]] = {name: [] for name in solves}
        for _ in range(reps if d < 256 else reps // 4):
            for name, solve in solves.items():  # alternating: load drifts hit both
                started = time.perf_counter()
                solve(system, H, H0, H1)
                times[name].append(time.perf_counter() - started)
        for name, ts in times.items():
            ms = np.asarray(ts) * 1e3
            out.append(
                {
                    "D": d + 1,
                    "columns": 30,
                    "solve": name,
                    "p50_ms": float(np.median(ms)),
                    "p10_ms": float(np.percentile(ms, 10)),
                }
            )
    return out


def dataset(name: str) -> Data:
    """A paper-benchmark set, bench.heads' 'synthetic', or one of :data:`HELD_OUT` (all rows
    as the training split: only validation splits carved from it are read)."""
    if name == "synthetic":
        return synthetic_data()
    if name not in HELD_OUT:
        return load_data(name, None)
    kind, n, k, rho, kw = HELD_OUT[name]
    if kind == "mixture":
        X, y = clustered_data(n, d=kw["d"], k=k, seed=kw["seed"])
    else:
        from sklearn.datasets import make_classification

        small = n < 10_000
        X, y = make_classification(
            n,
            n_features=kw["n_features"],
            n_informative=kw["n_features"] // 2,
            n_classes=k,
            n_clusters_per_class=kw["n_clusters"],
            flip_y=0.05 if small else 0.01,
            random_state=1 if small else 0,
        )
    X = np.asarray(X, dtype=np.float64)
    return Data(
        key=name,
        dataset=name,
        task="classification",
        features=f"synthetic ({kind})",
        X_train=X,
        y_train=np.asarray(y),
        X_test=X[:0],
        y_test=np.asarray(y)[:0],
        n_classes=k,
        rho=rho,
    )


def main(
    argv: list[str] | None = None, prog: str = "python -m forgetting_lab.bench.head_rule"
) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.split("\n\n")[0] + " Writes Markdown + CSV to --out."
    )
    parser.add_argument(
        "--datasets",
        default=DEFAULT_SETS,
        help="comma-separated sets of the paper benchmark, 'synthetic' (bench.core's "
        f"Gaussian mixture, 100k training rows), or held-out synthetic sets: {', '.join(HELD_OUT)}",
    )
    parser.add_argument("--seeds", type=int, default=4, help="validation splits and fits 0..N-1")
    parser.add_argument(
        "--head",
        default="auto",
        help="the estimators' head parameter (e.g. shared-rf, to choose its factor)",
    )
    parser.add_argument("--no-timing", action="store_true", help="skip the solve timings")
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--name", default="head_rule", help="results file name")
    args = parser.parse_args(argv)
    instances, sets = [], []
    for name in filter(None, (s.strip() for s in args.datasets.split(","))):
        data = dataset(name)
        rows, scores = [], []
        for seed in tqdm(range(args.seeds), desc=name, unit="split", leave=False):
            got, score = instance_rows(data, seed, args.head)
            rows += got
            scores.append(score)
        instances += rows
        sets.append(set_row(name, rows, scores))
    tables = {"per set": (sets, SET_COLUMNS), "per instance": (instances, INSTANCE_COLUMNS)}
    if not args.no_timing:
        tables["solve timings"] = (timing_rows(), TIMING_COLUMNS)
    notes = (
        f"Validation: {VALIDATION_FRACTION:.0%} of each training split (seeded), exact mode "
        f"(default parameters, head={args.head!r}) fitted on the rest; the test split is "
        "never read. "
        "better: the correction more accurate on the validation rows (classification) or with "
        "the lower squared error (regression), instance by instance (g + that correction). "
        "head_gain: the head's out-of-fold gain as served (W_a ≈ 2A⁻¹H_a); head_gain_exact: "
        "with each fold's system factored; head_gain_richardson: the two Richardson steps it "
        "replaced. tables_probe_gain: the tables' cross-fitted gain with the D°-probe square "
        "term; tables_per_table_gain: the exact per-table lower bound. ratio = head_gain / "
        "tables_probe_gain (– where the tables' gain is 0). former_rule: head iff head_gain > "
        "√(probe · per-table); rule: head "
        f"iff head_gain > {TABLES_GAIN_FACTOR} · probe (what the engine serves; checked). "
        "val_gain_*: the fall in squared error of g's residuals on the validation rows, scaled "
        "to the fit rows' count (the gains' scale). Per set: instances (seeds × 3), how many "
        "each rule serves the head on and gets wrong, and the served ensemble's validation "
        "accuracy (classification) or squared error in D°-standardized units (regression) "
        "under each rule, tables only and head only (mean over seeds). Solve timings: one "
        "stacked right-hand side of 30 columns (p = 3 heads, k = 10), factor given, p50/p10 "
        "over alternating calls."
    )
    argv = sys.argv[1:] if argv is None else argv
    command = " ".join([prog, *argv])
    md = write_results(Path(args.out), args.name, command, tables, notes)
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
