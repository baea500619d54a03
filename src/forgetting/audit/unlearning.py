"""Unlearning quality, measured the same way for every method (exact or approximate).

For a model after forgetting a set F from training data D = R ∪ F, and a test set T:

* TA, RA, FA — accuracy (%) on T, on R (retain) and on F (forget);
* MIA — AUC (%) of a loss-threshold membership attack (Yeom et al., 2018) telling F from T:
  the score of a row is the model's probability of its true label (equivalently minus its
  cross-entropy loss); AUC 50 % means forgotten rows look like rows never seen. A threshold
  attack needs no shadow models, so it applies unchanged to a ViT, MUNKEY or QSS;
* Avg Gap — mean |difference| to the method's **own** retrain oracle (the same method fitted on
  R only) over TA, RA, FA and MIA, in percentage points: 0 means indistinguishable from
  retraining by these four numbers;
* seconds — wall time of the forgetting call itself (timed by the caller).

Everything works through ``predict_proba`` and ``classes_``, so QSS, MUNKEY and the plain-ViT
baselines are scored by one code path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

__all__ = [
    "METRICS",
    "UnlearningScores",
    "avg_gap",
    "mia_auc",
    "random_forget_split",
    "score_model",
    "timed",
]

METRICS = ("TA", "RA", "FA", "MIA")


@dataclass(frozen=True)
class UnlearningScores:
    """TA, RA, FA and MIA AUC in percent; ``seconds`` the forgetting time."""

    TA: float
    RA: float
    FA: float
    MIA: float
    seconds: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def random_forget_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted positions of a uniformly random forget set (``round(fraction·n)`` rows, ≥ 1)
    and of the retain set, from ``numpy.random.default_rng(seed)``."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    k = max(1, int(round(fraction * n)))
    forget = np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))
    keep = np.ones(n, dtype=bool)
    keep[forget] = False
    return forget, np.flatnonzero(keep)


def _true_prob(proba: np.ndarray, classes: np.ndarray, y: np.ndarray) -> np.ndarray:
    col = np.searchsorted(classes, y)
    col = col.clip(max=len(classes) - 1)
    p = proba[np.arange(len(y)), col]
    return np.where(classes[col] == y, p, 0.0)  # a label the model lacks has probability 0


def mia_auc(p_forget: np.ndarray, p_test: np.ndarray) -> float:
    """AUC (%) of the threshold attack "member if p(true label) is high": F positive, T negative."""
    scores = np.concatenate([p_forget, p_test])
    members = np.concatenate([np.ones(len(p_forget)), np.zeros(len(p_test))])
    return 100.0 * float(roc_auc_score(members, scores))


def score_model(
    predict_proba: Callable[[Any], np.ndarray],
    classes: np.ndarray,
    retain: tuple[Any, np.ndarray],
    forget: tuple[Any, np.ndarray],
    test: tuple[Any, np.ndarray],
    seconds: float = 0.0,
) -> UnlearningScores:
    """Score one model: ``predict_proba`` is called once per split (X in the model's format)."""
    classes = np.asarray(classes)
    out = {}
    probs = {}
    for name, (X, y) in (("RA", retain), ("FA", forget), ("TA", test)):
        y = np.asarray(y)
        proba = np.asarray(predict_proba(X))
        out[name] = 100.0 * float(np.mean(classes[proba.argmax(axis=1)] == y))
        probs[name] = _true_prob(proba, classes, y)
    return UnlearningScores(
        TA=out["TA"],
        RA=out["RA"],
        FA=out["FA"],
        MIA=mia_auc(probs["FA"], probs["TA"]),
        seconds=seconds,
    )


def avg_gap(scores: UnlearningScores, oracle: UnlearningScores) -> float:
    """Mean |scores − oracle| over TA, RA, FA, MIA, in percentage points."""
    return float(np.mean([abs(getattr(scores, m) - getattr(oracle, m)) for m in METRICS]))


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``(fn(*args, **kwargs), wall seconds)``."""
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started
