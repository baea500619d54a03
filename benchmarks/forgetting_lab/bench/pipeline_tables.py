"""Exact pipelines and raw-DataFrame estimators on real mixed tables, beside HistGradientBoosting.

Run ``python -m forgetting_lab.bench.pipeline_tables`` (issue 41, item 5). For each real table
with numeric and categorical columns and missing values (UCI Adult raw, modeldata's credit,
nycflights13; ggplot2's diamonds for regression, with 5 % of every column's values set missing
at random) it reports, in one run:

* test accuracy (RMSE) of a full-data ``HistGradientBoosting(categorical_features="from_dtype")``
  on the raw table, of the exact pipeline (``make_pipeline(ColumnTransformer([SimpleImputer +
  StandardScaler on the numbers, OneHotEncoder on the categories]), QSS…())``) and of the QSS
  estimator fitted on the raw DataFrame itself (its built-in exact table encoding);
* forget of one row + the first one-row prediction after it, p50/p90 over a sequence of single
  deletions: random rows plus forced rows of the pipeline's D°, of an estimator instance's D°
  and a category's last row when the table has one (the rare, slow kinds are in the sequence);
* forget ≡ refit after those deletions: the model refitted from scratch without them, compared
  bit for bit (predictions on test rows, state digest).

Test rows with a category no training row has are left out for every model (the QSS table
encoding refuses an unseen category, as scikit-learn's encoder does by default); the count is
reported. Rows are subsampled where a table is large (``--max-train``), said in the notes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

from forgetting import QSSClassifier, QSSRegressor
from forgetting.pipeline import make_pipeline
from forgetting.preprocessing import (
    Chain,
    ColumnTransformer,
    OneHotEncoder,
    SimpleImputer,
    StandardScaler,
)

from .core import SECRET_KEY
from .pipeline import estimator_schema_ids
from .report import write_results

TABLES = ("adult", "credit", "flights", "diamonds")
MISSING = 0.05
"""Fraction of every column's values set missing in diamonds (it has none of its own)."""


def load_table(name: str, max_train: int, max_test: int, seed: int = 0):
    """(raw train, y train, raw test, y test, task, note) of a table, subsampled."""
    from forgetting_lab import datasets as fd

    ds = getattr(fd, f"load_{name}")()
    rng = np.random.default_rng(seed)
    tr = np.sort(rng.permutation(len(ds.raw_train))[:max_train])
    te = np.sort(rng.permutation(len(ds.raw_test))[:max_test])
    Xtr = ds.raw_train.iloc[tr].reset_index(drop=True)
    Xte = ds.raw_test.iloc[te].reset_index(drop=True)
    ytr, yte = np.asarray(ds.y_train)[tr], np.asarray(ds.y_test)[te]
    note = f"{len(tr)} of {len(ds.raw_train)} train, {len(te)} of {len(ds.raw_test)} test rows"
    if name == "diamonds":
        for X, s in ((Xtr, 1), (Xte, 2)):
            r = np.random.default_rng(seed + s)
            for col in X.columns:
                X.loc[r.random(len(X)) < MISSING, col] = np.nan
        note += f"; {MISSING:.0%} of every column's values set missing (seeded)"
    known = known_rows(Xtr, Xte)
    if not known.all():
        note += f"; {int((~known).sum())} test rows with an unseen category left out"
        Xte, yte = Xte[known].reset_index(drop=True), yte[known]
    return Xtr, ytr, Xte, yte, ds.task, note


def known_rows(Xtr, Xte) -> np.ndarray:
    """Mask of the rows of ``Xte`` whose categories all occur in ``Xtr`` (the QSS table
    encoding refuses an unseen category)."""
    known = np.ones(len(Xte), dtype=bool)
    for col in Xte.columns:
        if str(Xte[col].dtype) == "category":
            seen = set(Xtr[col].dropna().astype(str))
            values = Xte[col].astype(object)
            known &= np.array([v != v or v is None or str(v) in seen for v in values])
    return known


def make_exact_pipeline(X, task: str):
    numbers = [c for c in X.columns if str(X[c].dtype) != "category"]
    categories = [c for c in X.columns if str(X[c].dtype) == "category"]
    prep = ColumnTransformer(
        [
            ("num", Chain([("impute", SimpleImputer()), ("scale", StandardScaler())]), numbers),
            ("cat", OneHotEncoder(handle_unknown="ignore"), categories),
        ]
    )
    return make_pipeline(prep, make_estimator(task))


def make_estimator(task: str):
    cls = QSSClassifier if task == "classification" else QSSRegressor
    return cls(secret_key=SECRET_KEY)


def score(model, X, y, task: str) -> float:
    pred = model.predict(X)
    if task == "classification":
        return float(np.mean(pred == y))
    return float(np.sqrt(np.mean((pred - y) ** 2)))


def victims(model, X, ids, estimator, deletions: int, seed: int) -> list[int]:
    """``deletions`` single rows: two of the pipeline's (or the table encoding's) D°, two of an
    estimator instance's D°, a category's last row (if any), the rest random."""
    rng = np.random.default_rng(seed)
    inside = estimator_schema_ids(estimator)
    forced: list[int] = []
    if hasattr(model, "_members"):  # the pipeline's D°
        members = np.array(model.ids_)[model._members]
        forced += rng.choice(members, 2, replace=False).tolist()
    elif hasattr(model, "table_"):  # the raw-DataFrame encoding's D°
        buf = model.table_.buffer
        members = buf.get("ids")[buf.get("member")]
        forced += rng.choice(members, 2, replace=False).tolist()
    forced += rng.choice(sorted(inside - set(forced)), 2, replace=False).tolist()
    for col in X.columns:
        if str(X[col].dtype) == "category":
            counts = X[col].value_counts()
            once = counts[counts == 1].index
            if len(once):
                forced.append(int(np.flatnonzero((X[col] == once[0]).to_numpy())[0]))
                break
    forced = list(dict.fromkeys(forced))
    rest = rng.permutation(np.setdiff1d(ids, forced))[: deletions - len(forced)].tolist()
    order = rest + forced
    return [int(v) for v in rng.permutation(order)]


def forget_run(model, gone: list[int], x1) -> tuple[list[float], int]:
    waited, refits = [], 0
    for v in gone:
        started = time.perf_counter()
        receipt = model.forget([v])
        model.predict(x1)
        waited.append(time.perf_counter() - started)
        refits += bool(getattr(receipt, "refitted", False)) or len(receipt.instances_hit) > 0
    model.wait_for_rebuilds()
    return waited, refits


def run_table(name: str, args) -> tuple[list[dict], list[dict], str]:
    Xtr, ytr, Xte, yte, task, note = load_table(name, args.max_train, args.max_test)
    metric = "accuracy" if task == "classification" else "RMSE"
    ids = np.arange(len(Xtr))
    hgb_cls = (
        HistGradientBoostingClassifier
        if task == "classification"
        else (HistGradientBoostingRegressor)
    )
    t0 = time.perf_counter()
    hgb = hgb_cls(categorical_features="from_dtype", random_state=0).fit(Xtr, ytr)
    hgb_s = time.perf_counter() - t0
    quality = [
        {
            "table": name,
            "model": "HistGradientBoosting (from_dtype, full data)",
            "metric": metric,
            "test": score(hgb, Xte, yte, task),
            "fit_s": hgb_s,
        }
    ]
    timing, exact = [], []
    for label, build in (
        (
            "exact pipeline (imputer + scaler + one-hot, QSS)",
            lambda: make_exact_pipeline(Xtr, task),
        ),
        ("QSS on the raw DataFrame", lambda: make_estimator(task)),
    ):
        t0 = time.perf_counter()
        model = build().fit(Xtr, ytr, ids=ids.tolist())
        fit_s = time.perf_counter() - t0
        quality.append(
            {
                "table": name,
                "model": label,
                "metric": metric,
                "test": score(model, Xte, yte, task),
                "fit_s": fit_s,
            }
        )
        estimator = model.steps[-1][1] if hasattr(model, "steps") else model
        gone = victims(model, Xtr, ids, estimator, args.deletions, seed=1)
        x1 = Xte.iloc[:1]
        waited, slow = forget_run(model, gone, x1)
        keep = np.setdiff1d(ids, gone)
        probe = Xte[known_rows(Xtr.iloc[keep], Xte)].iloc[:2000]
        t0 = time.perf_counter()
        refit = build().fit(Xtr.iloc[keep], ytr[keep], ids=keep.tolist())
        refit_s = time.perf_counter() - t0
        out = model.predict_proba if task == "classification" else model.predict
        ref = refit.predict_proba if task == "classification" else refit.predict
        timing.append(
            {
                "table": name,
                "model": label,
                "deletions": len(gone),
                "p50_ms": 1e3 * float(np.median(waited)),
                "p90_ms": 1e3 * float(np.percentile(waited, 90)),
                "max_ms": 1e3 * float(np.max(waited)),
                "refit_or_rebuild": slow,
                "refit_s": refit_s,
                "same_predictions": bool(np.array_equal(out(probe), ref(probe))),
                "same_digest": model.state_digest() == refit.state_digest(),
            }
        )
        exact.append(label)
    width = model.engine_.snapshot().rows.X.shape[1]
    note = f"**{name}** ({task}): {note}; the raw-DataFrame encoding has {width} columns."
    return quality, timing, note


def main(
    argv: list[str] | None = None, prog: str = "python -m forgetting_lab.bench.pipeline_tables"
) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.split("\n\n")[0] + " Writes Markdown + CSV to --out."
    )
    parser.add_argument("--tables", default=",".join(TABLES), help="tables, comma-separated")
    parser.add_argument("--max-train", type=int, default=30_000, help="training rows at most")
    parser.add_argument("--max-test", type=int, default=10_000, help="test rows at most")
    parser.add_argument("--deletions", type=int, default=100, help="single deletions per model")
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--name", default="pipeline-tables", help="results file name")
    args = parser.parse_args(argv)
    quality, timing, notes = [], [], []
    for name in args.tables.split(","):
        q, t, n = run_table(name, args)
        quality += q
        timing += t
        notes.append(n)
        print(n, flush=True)
    intro = (
        "QSS defaults (rho = 0.005, p = 3, a secret key). The exact pipeline's scaler and "
        "imputer are fitted on its D° (the default), its one-hot encoder ignores unknown "
        "categories; the raw-DataFrame estimator's built-in encoding is the same on the "
        "numbers (mean imputer and scaler on the table's own D°, at least 200 rows) plus a "
        "missing indicator per column with a missing value, and one-hot on the categories "
        "(missing: its own category; an unseen category is refused). "
        "Deletions: single rows, random plus forced rows of the pipeline's (the encoding's) D°, "
        "an estimator instance's D° and a category's last row; `refit_or_rebuild` counts the "
        "deletions that refitted the estimator or started an instance rebuild. After them the "
        "model is compared with a fit from scratch on the remaining rows (predictions on up to "
        "2,000 test rows, state digest)."
    )
    argv = sys.argv[1:] if argv is None else argv
    command = "python -m forgetting_lab.bench.pipeline_tables " + " ".join(argv)
    path = write_results(
        Path(args.out),
        args.name,
        command.strip(),
        {
            "test quality": (quality, ["table", "model", "metric", "test", "fit_s"]),
            "forget + first predict, and forget = refit": (
                timing,
                [
                    "table",
                    "model",
                    "deletions",
                    "p50_ms",
                    "p90_ms",
                    "max_ms",
                    "refit_or_rebuild",
                    "refit_s",
                    "same_predictions",
                    "same_digest",
                ],
            ),
        },
        "\n\n".join([intro, *notes]),
    )
    print(path.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
