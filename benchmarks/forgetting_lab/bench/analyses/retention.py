"""Retention under deletion: accuracy after forgetting many rows, each checked against a refit.

The paper's Table 7 deletes rows at random and labels in bulk and reports how little accuracy
moves. The claim that matters more for us is that the forgotten model *is* the refit: after
each deletion we wait for rebuilds and compare ``predict_proba`` with ``numpy.array_equal``
and the state digests for equality against a model fitted from scratch without the rows
(exact mode) or with their labels removed (label mode).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting.encoders import EncoderUnavailableError
from forgetting_lab.datasets import DatasetUnavailableError

from .common import Settings, write_tables

FRACTIONS = (0.01, 0.10, 0.25, 0.50)
LABEL_FRACTION = 0.5
BURST_SHARE = 0.9
"""The one-class burst forgets this share of the largest class's rows."""
SETS = (("mnist", 5_000), ("adult", 10_000))
QUICK_SETS = (("digits", 600),)
UNLABELED = -1
COLUMNS = [
    "dataset", "mode", "scenario", "n_train", "deleted", "instances_rebuilt",
    "accuracy_before", "accuracy_after", "accuracy_refit", "class_accuracy_before",
    "class_accuracy_after", "predictions_equal", "digest_equal", "forget_s", "refit_s",
]  # fmt: skip


def scenario(
    data: Any, mode: str, label: str, gone: np.ndarray, focus: int | None = None
) -> dict[str, Any]:
    """Fit, forget ``gone`` (row ids = positions), wait, refit without them; compare bits."""
    n = data.n_train
    ids = np.arange(n)
    model = QSSClassifier(mode=mode, rho=data.rho).fit(data.X_train, data.y_train, ids)
    before = model.predict(data.X_test)
    started = time.perf_counter()
    receipt = model.forget(gone.tolist())
    model.wait_for_rebuilds()
    forget_s = time.perf_counter() - started
    after_proba = model.predict_proba(data.X_test)
    after = model.classes_[after_proba.argmax(1)]
    started = time.perf_counter()
    refit = QSSClassifier(mode=mode, rho=data.rho)
    if mode == "exact":
        keep = np.setdiff1d(ids, gone)
        refit.fit(data.X_train[keep], data.y_train[keep], keep)
    else:
        y = data.y_train.copy()
        y[gone] = UNLABELED
        refit.fit(data.X_train, y, ids)
    refit_s = time.perf_counter() - started
    refit_proba = refit.predict_proba(data.X_test)
    in_class = data.y_test == focus if focus is not None else None
    return {
        "dataset": data.key,
        "mode": "QSS-E" if mode == "exact" else "QSS-L",
        "scenario": label,
        "n_train": n,
        "deleted": int(gone.size),
        "instances_rebuilt": len(receipt.instances_hit),
        "accuracy_before": float(np.mean(before == data.y_test)),
        "accuracy_after": float(np.mean(after == data.y_test)),
        "accuracy_refit": float(np.mean(refit.classes_[refit_proba.argmax(1)] == data.y_test)),
        "class_accuracy_before": float(np.mean(before[in_class] == focus))
        if focus is not None
        else float("nan"),
        "class_accuracy_after": float(np.mean(after[in_class] == focus))
        if focus is not None
        else float("nan"),
        "predictions_equal": bool(np.array_equal(after_proba, refit_proba)),
        "digest_equal": model.state_digest() == refit.state_digest(),
        "forget_s": forget_s,
        "refit_s": refit_s,
    }


def run(settings: Settings) -> dict[str, Any]:
    quick = settings.quick
    rows, skipped = [], []
    for name, n in tqdm(QUICK_SETS if quick else SETS, desc="retention", leave=False):
        try:
            data = settings.data(name, n)
        except (DatasetUnavailableError, EncoderUnavailableError) as err:
            skipped.append(f"{name}: {err}")
            continue
        rng = np.random.default_rng(0)
        ids = np.arange(data.n_train)
        for frac in tqdm(FRACTIONS, desc=f"retention: {name}", leave=False):
            gone = rng.choice(ids, size=max(1, int(round(frac * data.n_train))), replace=False)
            rows.append(scenario(data, "exact", f"{frac:.0%} of rows at random", gone))
        gone = rng.choice(ids, size=int(round(LABEL_FRACTION * data.n_train)), replace=False)
        rows.append(scenario(data, "label", f"{LABEL_FRACTION:.0%} of labels at random", gone))
        values, counts = np.unique(data.y_train, return_counts=True)
        focus = values[np.argmax(counts)]
        members = np.flatnonzero(data.y_train == focus)
        gone = rng.choice(members, size=int(BURST_SHARE * members.size), replace=False)
        rows.append(
            scenario(
                data,
                "exact",
                f"burst: {BURST_SHARE:.0%} of class {focus}'s rows",
                gone,
                focus=int(focus),
            )
        )
    if not quick:
        settings.scaled.append(
            "retention: MNIST (HOG) subsampled to 5,000 training rows, Adult to 10,000"
        )
    notes = (
        "Each scenario fits a fresh model (library defaults, ρ from the paper benchmark's "
        "rule, seed 0), forgets the rows in one `forget` call, waits for the rebuilds of the "
        "instances whose D° was hit (instances_rebuilt, from the receipt), and compares with a "
        "refit from scratch: without the rows (QSS-E) or with their labels removed (QSS-L, "
        "whose guarantee is label deletion). predictions_equal: `numpy.array_equal` of the "
        "test-set `predict_proba`; digest_equal: equal `state_digest()`. The burst scenario "
        "reports the accuracy on the test rows of the class it deletes from "
        "(class_accuracy_*). forget_s includes the rebuilds.\n"
        + ("\n**Skipped**: " + "; ".join(skipped) + "\n" if skipped else "")
    )
    md = write_tables(
        settings,
        "retention",
        {"Retention: accuracy after deletions, bitwise against the refit": (rows, COLUMNS)},
        notes,
    )
    return {"md": md, "png": None, "rows": rows}
