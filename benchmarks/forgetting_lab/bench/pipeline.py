"""Forget + first predict through a pipeline: exact preprocessing on a mixed table.

Run ``python -m forgetting_lab.bench.pipeline`` (issue 41). It builds a synthetic mixed table
(numeric columns with 5 % missing values, three categorical columns of 5, 40 and 400
categories, a binary label), fits ``make_pipeline(ColumnTransformer([imputer + scaler on the
numbers, one-hot on the categories]), QSSClassifier())`` with the library's defaults, and
times what a caller waits for: ``forget`` of one random row together with the first
one-row prediction after it. Beside it, in the same run: the bare estimator on the already
transformed matrix (the pipeline's overhead), and the rare forgets that refit the estimator —
a row of the pipeline's D° (the scaler and imputer are fitted on it) and a category's last
row. At the end it refits the pipeline from scratch without every forgotten row and compares
predictions and state digests (forget ≡ refit).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting.pipeline import make_pipeline
from forgetting.preprocessing import (
    ColumnTransformer,
    OneHotEncoder,
    OrdinalEncoder,
    SimpleImputer,
)
from forgetting.preprocessing import StandardScaler as ExactScaler
from forgetting.preprocessing.base import Chain

from .core import SECRET_KEY
from .report import write_results

NUMERIC = 8
CATEGORIES = (5, 40, 400)


def mixed_table(n: int, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Numbers (5 % missing) and categories with a skewed frequency (so some are rare)."""
    rng = np.random.default_rng(seed)
    cols: dict[str, object] = {}
    signal = np.zeros(n)
    for j in range(NUMERIC):
        x = rng.normal(size=n) * (1 + j) + j
        signal += x / (1 + j) * (1 if j % 2 else -1)
        x[rng.random(n) < 0.05] = np.nan
        cols[f"x{j}"] = x
    for j, k in enumerate(CATEGORIES):
        weights = 1.0 / np.arange(1, k + 1)
        codes = rng.choice(k, size=n, p=weights / weights.sum())
        effect = rng.normal(size=k)
        signal += effect[codes]
        values = np.array([f"c{j}-{c}" for c in range(k)], dtype=object)[codes]
        values[rng.random(n) < 0.02] = None
        if j == len(CATEGORIES) - 1:
            values[rng.choice(n, 3, replace=False)] = [f"c{j}-once-{i}" for i in range(3)]
        cols[f"cat{j}"] = pd.Categorical(values)
    y = (signal + rng.normal(size=n) > np.median(signal)).astype(int)
    return pd.DataFrame(cols), y


def make(encoder: str = "onehot", secret: bytes = SECRET_KEY):
    """The pipeline benchmarked: imputer + scaler on the numbers, an encoder on the categories
    ("onehot": one column per category; "ordinal": one code per column)."""
    numeric = [f"x{j}" for j in range(NUMERIC)]
    categorical = [f"cat{j}" for j in range(len(CATEGORIES))]
    if encoder == "onehot":
        codes = OneHotEncoder(handle_unknown="ignore")
    else:
        codes = OrdinalEncoder(
            handle_unknown="use_encoded_value", unknown_value=-1, encoded_missing_value=-2
        )
    prep = ColumnTransformer(
        [
            ("num", Chain([("impute", SimpleImputer()), ("scale", ExactScaler())]), numeric),
            ("cat", codes, categorical),
        ]
    )
    return make_pipeline(prep, QSSClassifier(secret_key=secret))


def timed_forgets(model, victims, x1) -> tuple[list[float], list]:
    waited, receipts = [], []
    for v in victims:
        started = time.perf_counter()
        receipts.append(model.forget([int(v)]))
        model.predict(x1)
        waited.append(time.perf_counter() - started)
    return waited, receipts


class EstimatorClock:
    """Times the estimator's own forget/insert/fit/predict calls made by a pipeline (instance
    attributes shadow the methods while it is entered), so the pipeline's own share of a
    forget + first predict is the wall time minus this."""

    def __init__(self, estimator):
        self.estimator = estimator
        self.spent = 0.0

    def __enter__(self) -> EstimatorClock:
        for name in ("forget", "insert", "fit", "predict"):
            method = getattr(self.estimator, name)
            setattr(self.estimator, name, self._timed(method))
        return self

    def _timed(self, method):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - started

        return timed

    def __exit__(self, *exc) -> None:
        for name in ("forget", "insert", "fit", "predict"):
            del self.estimator.__dict__[name]


def pipeline_share(model, victims, x1) -> list[float]:
    """Per forget + first predict, the seconds spent outside the estimator's own calls."""
    own = []
    with EstimatorClock(model.steps[-1][1]) as clock:
        for v in victims:
            clock.spent = 0.0
            started = time.perf_counter()
            model.forget([int(v)])
            model.predict(x1)
            own.append(time.perf_counter() - started - clock.spent)
    return own


def estimator_schema_ids(estimator) -> set:
    """Ids in some instance's D° (the benchmark holds the key)."""
    rows = estimator.engine_.rows
    inside = np.zeros(rows.size, dtype=bool)
    for r in range(estimator.n_instances):
        inside |= rows.members(r)
    return {rows.ids[i] for i in np.flatnonzero(inside)}


def run(n: int, deletions: int, encoder: str) -> tuple[list[dict], dict]:
    X_all, y_all = mixed_table(n + 10_000)
    X, y = X_all.iloc[:n], y_all[:n]
    X_test, y_test = X_all.iloc[n:], y_all[n:]
    ids = np.arange(n)
    started = time.perf_counter()
    model = make(encoder).fit(X, y, ids)
    fit_s = time.perf_counter() - started
    accuracy = model.score(X_test, y_test)
    members = set(np.array(model.ids_)[model._members].tolist())
    est_members = estimator_schema_ids(model.steps[-1][1])
    counts = X["cat2"].value_counts()
    single = set(X.index[X["cat2"].isin(counts[counts == 1].index)].tolist())
    pool = np.array(sorted(set(ids.tolist()) - members - est_members - single))
    victims = np.random.default_rng(1).choice(
        pool, size=2 * deletions + 10 + deletions // 2, replace=False
    )
    x1 = X.iloc[:1]
    timed_forgets(model, victims[:5], x1)  # warm-up
    waited, receipts = timed_forgets(model, tqdm(victims[5 : deletions + 5], desc="pipeline"), x1)
    share = pipeline_share(model, victims[-deletions // 2 :], x1)

    bare = QSSClassifier(secret_key=SECRET_KEY).fit(model.preprocess(X), y, ids)
    xt1 = model.preprocess(x1)
    timed_forgets(bare, victims[deletions + 5 : deletions + 10], xt1)  # warm-up
    bare_waited, _ = timed_forgets(bare, victims[deletions + 10 : 2 * deletions + 10], xt1)

    rare = []
    special = (
        sorted(est_members - members - single)[0],
        sorted(members - est_members - single)[0],
        sorted(single - members - est_members)[0],
    )
    for label, victim in zip(
        (
            "a row of an estimator instance's D° (background rebuild)",
            "a row of the pipeline's D° (scaler, imputer: refit)",
            "a category's last row (refit)",
        ),
        special,
        strict=True,
    ):
        model.wait_for_rebuilds()
        t0 = time.perf_counter()
        receipt = model.forget([int(victim)])
        model.predict(x1)
        rare.append((label, time.perf_counter() - t0, receipt))

    model.wait_for_rebuilds()
    gone = set(victims[: deletions + 5].tolist()) | set(victims[-deletions // 2 :].tolist())
    gone |= set(special)
    keep = ~np.isin(ids, sorted(gone))
    t0 = time.perf_counter()
    refit = make(encoder).fit(X.loc[keep], y[keep], ids[keep])
    refit_s = time.perf_counter() - t0
    test = X.iloc[:2000]
    same_proba = bool(np.array_equal(model.predict_proba(test), refit.predict_proba(test)))
    same_digest = model.state_digest() == refit.state_digest()

    def ms(v):
        return float(v) * 1e3

    def timing(what, values, refitted):
        return {
            "encoder": encoder,
            "what": what,
            "count": len(values),
            "p50_ms": ms(np.median(values)),
            "p90_ms": ms(np.percentile(values, 90)) if len(values) > 1 else float("nan"),
            "p99_ms": ms(np.percentile(values, 99)) if len(values) > 1 else float("nan"),
            "refitted": refitted,
        }

    rows = [
        timing("pipeline: forget 1 row + predict 1 row", waited, sum(r.refitted for r in receipts)),
        timing("  of which the pipeline's own work (outside the estimator's calls)", share, 0),
        timing("bare QSSClassifier on the transformed matrix", bare_waited, 0),
    ]
    rows += [timing(f"pipeline: {label}", [sec], int(r.refitted)) for label, sec, r in rare]
    summary = {
        "encoder": encoder,
        "accuracy": accuracy,
        "n": n,
        "width": model.preprocess(x1).shape[1],
        "fit_s": fit_s,
        "refit_s": refit_s,
        "schema_rho": model.schema_rho_,
        "same_proba": same_proba,
        "same_digest": same_digest,
        "forgotten": int((~keep).sum()),
    }
    return rows, summary


def main(
    argv: list[str] | None = None, prog: str = "python -m forgetting_lab.bench.pipeline"
) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.split("\n\n")[0] + " Writes Markdown + CSV to --out."
    )
    parser.add_argument("--n", type=int, default=50_000, help="training rows (synthetic)")
    parser.add_argument("--deletions", type=int, default=200, help="single deletions timed")
    parser.add_argument(
        "--encoders", default="onehot,ordinal", help="category encoders compared (onehot, ordinal)"
    )
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--name", default="pipeline", help="results file name")
    args = parser.parse_args(argv)
    rows, notes = [], []
    for encoder in args.encoders.split(","):
        r, s = run(args.n, args.deletions, encoder)
        rows += r
        notes.append(
            f"**{encoder}**: {s['width']} estimator features, test accuracy "
            f"{s['accuracy']:.4f} (10,000 held-out rows); pipeline fit {s['fit_s']:.2f} s, a "
            f"refit from scratch without the {s['forgotten']} forgotten rows "
            f"{s['refit_s']:.2f} s; the pipeline's D° holds {s['schema_rho']:.4f} of the rows; "
            f"forget ≡ refit after all deletions: predict_proba on 2,000 rows bitwise equal "
            f"{s['same_proba']}, equal state digest {s['same_digest']}."
        )
    argv = sys.argv[1:] if argv is None else argv
    intro = (
        f"n = {args.n} rows, {NUMERIC} numeric columns (5 % missing) and categorical columns of "
        f"{', '.join(map(str, CATEGORIES))} values (2 % missing, three values seen once); "
        "QSSClassifier defaults (rho = 0.005, p = 3) behind ColumnTransformer([SimpleImputer + "
        "StandardScaler on the numbers (fitted on the pipeline's D°), the encoder on the "
        "categories]). The random victims lie outside every D° (the pipeline's and the "
        "estimator's instances') and hold no value seen once; each rarer kind of forget is timed "
        "once below them, after any rebuild landed (a background rebuild competes for the "
        "interpreter with whatever runs beside it, and a refit runs before forget returns). "
        "The bare estimator is fitted on the pipeline's output for the same rows, with the "
        "same key, and forgets other such rows, in the same run."
    )
    command = "python -m forgetting_lab.bench.pipeline " + " ".join(argv)
    columns = [
        "encoder",
        "what",
        "count",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "refitted",
    ]
    path = write_results(
        Path(args.out),
        args.name,
        command.strip(),
        {"forget + first predict": (rows, columns)},
        "\n\n".join([intro, *notes]),
    )
    print(path.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
