"""What every analysis shares: run settings, the data it reads, the writer, and the one place
an analysis looks inside a fitted model.

Why a single peek helper (:func:`instance_schemas`): the analyses measure things the public API
does not report (a row's cell codes, a level's statistics). Keeping that look in one function
means a change of the engine's layout breaks one line, and every other step stays on the public
surface: ``QSSClassifier``, ``forgetting.schema.membership``, ``forgetting_lab.datasets``,
``forgetting.encoders``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from forgetting.encoders import HOGEncoder, MiniLMEncoder
from forgetting_lab.bench.paper.data import IMAGE_SETS, Data, load_data
from forgetting_lab.bench.report import write_results
from forgetting_lab.datasets import load_dataset


@dataclass
class Settings:
    """One run of ``python -m forgetting_lab.bench.analyses``."""

    out: Path
    prefix: str
    command: str
    quick: bool = False
    seeds: int = 3
    data_cache: dict[tuple[str, int | None], Data] = field(default_factory=dict)
    scaled: list[str] = field(default_factory=list)
    """What this run scaled down from the paper's setting, and why (written into the files)."""

    def name(self, analysis: str) -> str:
        return f"{self.prefix}-{analysis}"

    def train_features(self, name: str, n_train: int) -> tuple[np.ndarray, np.ndarray, str]:
        """(X, y, feature label) of the first ``n_train`` training rows only, with the paper
        benchmark's features. Why not :meth:`data`: analyses that never score on the test
        split should not pay for encoding it (MiniLM is the slow step here)."""
        ds = load_dataset(name, n_train=n_train)
        X = ds.X_train
        if ds.modality == "text":
            X, label = MiniLMEncoder(progress=True).transform(X), "MiniLM-L6 embeddings"
        elif name in IMAGE_SETS:
            X, label = HOGEncoder(progress=True).transform(X), "HOG + 2×2-pooled pixels"
        else:
            label = "raw features"
        return np.ascontiguousarray(X, dtype=np.float32), ds.y_train, label

    def data(self, name: str, n_train: int | None) -> Data:
        """A dataset with the paper benchmark's features (HOG for MNIST, cached MiniLM for
        sentiment), loaded once per run."""
        key = (name, n_train)
        if key not in self.data_cache:
            self.data_cache[key] = load_data(name, n_train)
        return self.data_cache[key]


def write_tables(
    settings: Settings,
    analysis: str,
    tables: dict[str, tuple[list[dict], list[str]]],
    notes: str,
) -> Path:
    """``<prefix>-<analysis>.md`` with every table, one CSV per table, both with the command."""
    return write_results(settings.out, settings.name(analysis), settings.command, tables, notes)


def figure_path(settings: Settings, analysis: str, what: str = "") -> Path:
    return settings.out / f"{settings.name(analysis)}{'-' + what if what else ''}.png"


def instance_schemas(model: Any) -> list[Any]:
    """The frozen schema of each of the model's instances (the analyses' only look inside).

    Each schema's ``transform(X)`` gives the rows' cell codes (n, ℓ) and the base model's
    outputs g(x) (n, k): what the statistics are summed over.
    """
    return [inst.schema for inst in model.engine_.instances]


def onehot(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    return (np.asarray(y)[:, None] == np.asarray(classes)[None, :]).astype(np.float64)


def level_means(codes: np.ndarray, residuals: np.ndarray, n_centroids: int) -> list[np.ndarray]:
    """Level-by-level cell means of the running residual (boosting over levels, shrinkage 0).

    μ_m[j] = mean over rows in cell j of level m of r − Σ_{q<m} μ_q[c_q]: the quantity the
    materialization computes from the sufficient statistics (S_m = T_m − Σ N·μ, μ = S/n),
    here computed from the rows directly. Returns [μ_1, …, μ_ℓ], each (b, k).
    """
    e = np.array(residuals, dtype=np.float64)
    means = []
    for m in range(codes.shape[1]):
        c = codes[:, m].astype(np.intp)
        sums = np.zeros((n_centroids, e.shape[1]))
        np.add.at(sums, c, e)
        counts = np.bincount(c, minlength=n_centroids).astype(np.float64)
        mu = np.divide(sums, counts[:, None], out=np.zeros_like(sums), where=counts[:, None] > 0)
        means.append(mu)
        e = e - mu[c]
    return means


def level_sums(codes: np.ndarray, residuals: np.ndarray, n_centroids: int) -> list[np.ndarray]:
    """S_m[j] = Σ over rows in cell j of level m of the running residual before level m, with
    the μ of :func:`level_means`. S_1 = T_1; deeper levels cascade through the μ above."""
    e = np.array(residuals, dtype=np.float64)
    sums_out = []
    for m in range(codes.shape[1]):
        c = codes[:, m].astype(np.intp)
        sums = np.zeros((n_centroids, e.shape[1]))
        np.add.at(sums, c, e)
        counts = np.bincount(c, minlength=n_centroids).astype(np.float64)
        mu = np.divide(sums, counts[:, None], out=np.zeros_like(sums), where=counts[:, None] > 0)
        sums_out.append(sums)
        e = e - mu[c]
    return sums_out
