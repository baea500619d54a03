"""DaRE-RF (Brophy & Lowd, ICML 2021; jjbrophy47/dare_rf): random forests with exact data
deletion — the peer of :class:`forgetting.ExactForestClassifier`, measured beside it.

Not in the lock: its PyPI sdists do not build, so the benchmark uses it when it is importable
and says so when it is not. Built from the repository's source (benchmarks/README.md, "DaRE-RF"):
Cython and numpy in a scratch virtual environment, ``pip install --no-build-isolation .``, and
the installed ``dare`` package's folder put on ``PYTHONPATH`` of the lab's interpreter (the
same Python and numpy versions). Binary classification only; it takes float32 features and
int32 labels, and deletes training rows by their position in the fitted data.

Its hyperparameters get the courtesy ours get: chosen on the same validation split of the
training rows, over the grid its paper tunes (:data:`GRID`: ``max_depth`` and ``k``, the
thresholds sampled per attribute; ``topd`` = 0, the exact G-DaRE variant), with as many trees
as the exact forest chose.
"""

from __future__ import annotations

import time
from itertools import product

import numpy as np

GRID = {"max_depth": (10, 20), "k": (5, 25)}


def available() -> bool:
    """Whether the ``dare`` package imports here."""
    try:
        import dare  # noqa: F401
    except ImportError:
        return False
    return True


def _forest(max_depth: int, k: int, trees: int, seed: int):
    import dare

    return dare.Forest(n_estimators=trees, max_depth=max_depth, k=k, topd=0, random_state=seed)


def fit(X: np.ndarray, y: np.ndarray, max_depth: int, k: int, trees: int, seed: int):
    """A fitted DaRE forest and its fit seconds."""
    model = _forest(max_depth, k, trees, seed)
    started = time.perf_counter()
    model.fit(np.ascontiguousarray(X, dtype=np.float32), np.asarray(y, dtype=np.int32))
    return model, time.perf_counter() - started


def accuracy(model, X: np.ndarray, y: np.ndarray) -> float:
    proba = model.predict_proba(np.ascontiguousarray(X, dtype=np.float32))
    return float(np.mean(np.argmax(proba, axis=1) == y))


def choose(X, y, fit_idx, val_idx, trees: int, seed: int) -> tuple[dict, float, list[dict]]:
    """The :data:`GRID` point most accurate on the validation rows (ties: the shallower, then
    fewer thresholds), its validation accuracy, and one row per point."""
    rows, best, best_val = [], None, -1.0
    for max_depth, k in product(GRID["max_depth"], GRID["k"]):
        model, secs = fit(X[fit_idx], y[fit_idx], max_depth, k, trees, seed)
        val = accuracy(model, X[val_idx], y[val_idx])
        rows.append({"max_depth": max_depth, "k": k, "n_estimators": trees,
                     "val": round(val, 4), "fit_s": round(secs, 2)})  # fmt: skip
        print({"DaRE": rows[-1]}, flush=True)
        if val > best_val:
            best, best_val = {"max_depth": max_depth, "k": k}, val
    return best, best_val, rows  # type: ignore[return-value]


def latency(model, victims: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Milliseconds of ``delete`` of each victim (a training row's position) together with a
    ``predict_proba`` of the row ``x`` after it."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    model.predict_proba(x)
    waited = []
    for v in victims:
        started = time.perf_counter()
        model.delete(int(v))
        model.predict_proba(x)
        waited.append(time.perf_counter() - started)
    return np.asarray(waited) * 1e3
