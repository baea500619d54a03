"""What a prediction needs from flat tables, and the rule that chooses between the tables and
the instance's ridge head: the head serves when its exact out-of-fold gain exceeds
:data:`TABLES_GAIN_FACTOR` times the tables'. Both gains are deterministic functions of the
current integer sums, so a refit makes the same choice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..heads import FixedWeights, LinearHead, NewtonWeights, head_features
from ..heads.certified import UNSURE, BoundedWeights
from ..heads.newton import BoundedLogits
from .flat import FlatTables

TABLES_GAIN_FACTOR = 0.65
"""An instance serves its head when the head's out-of-fold gain exceeds this fraction of the
tables' (their cross-fitted gain with the D°-probe square term, ``FlatTables.best``): the rule
of :func:`forgetting.content.tables.build_flat_content`.

Why this statistic, and why below 1: on validation splits carved from the training sets
(benchmarks/results/head_rule.md: `python -m forgetting_lab.bench.head_rule`, 4 splits × 3
instances per set) the ratio head gain / tables' probe gain separates, instance by instance,
the sets where the head is the better model on validation (digits ≥ 0.70, MNIST-HOG ≥ 1.05,
Fashion-HOG, Adult and sentiment ≥ 1.18) from those where the tables are (bench.core's Gaussian
mixture ≤ 0.61, diamonds ≤ 0.59, letter ≤ 0.42); 0.65 is the geometric middle of that gap
(0.606 … 0.704 — narrow: a set between the two groups could fall either way). It is below 1
because the probe estimate is optimistic (the tables' gain on the validation rows is below it
on 81 of 96 instances, median 0.93 times it) and because squared error is not accuracy: on
digits the tables' squared-error gain on the validation rows exceeds the head's on 10 of 12
instances while the head is the more accurate on every one. A rule comparing the head with
the geometric mean of the probe estimate and the exact per-table gain serves the head on the
Gaussian mixture (every instance; tables 0.993 vs 0.984 on validation) and on a third of
diamonds' instances, and no constant factor on that mean separates the sets. On diabetes (247
fitting rows, 62 validation rows) no rule of these statistics tracks the validation winner
(both get 8–9 of 12 wrong; squared errors within 1 %).

Out of sample — synthetic sets that played no part in choosing it
(benchmarks/results/head_rule_heldout.md) — it picks the better model on 61 of 72 instances
where the geometric-mean rule picks it on 31, and it is not a complete answer: on
make_classification with 3 clusters per class the tables are better while the ratio
(0.59–0.92) overlaps digits',
and a per-instance rule cannot see that averaging p instances' tables (each built on its own
D°) cancels much of their noise while the instances' heads are nearly one model (bench.core's
mixture at k = 20: the head is the better instance on 10 of 12, the tables' average the better
ensemble, 0.998 vs 0.978 on validation). A deterministic function of the current integer sums,
like both gains."""


@dataclass(frozen=True)
class FlatContent:
    """What a prediction needs from flat tables: (α, λ) chosen from the exact totals, and the
    tables themselves (read at prediction time: nothing is materialized) — or, when the
    instance's ridge head corrects g better out of fold, the head's weights instead."""

    tables: FlatTables
    alpha: float
    shrinkage: float
    head: FixedWeights | NewtonWeights | None = None

    def correction(self, codes: np.ndarray, Z: np.ndarray | None = None) -> np.ndarray:
        """The correction added to g(x) for rows with cell ``codes`` and features ``Z`` (φ)
        (a ridge head's output, or the tables'); a Newton head is served by :meth:`outputs`."""
        if isinstance(self.head, NewtonWeights):
            raise TypeError("a Newton head is not added to g: serve it with outputs()")
        if self.head is not None:
            return self.head.apply(head_features(Z, np.float64))
        return self.alpha * self.tables.correction(codes, self.shrinkage)

    def outputs(self, codes: np.ndarray, g: np.ndarray, Z: np.ndarray | None) -> np.ndarray:
        """What the instance serves: softmax(log g + δᵀv) with a Newton head (one Newton step
        of logistic regression from g, content.heads.NewtonHead), else g + the correction."""
        if isinstance(self.head, NewtonWeights):
            return self.head.outputs(head_features(Z, np.float64), g)
        return g + self.correction(codes, Z)


def certified_flat_content(
    tables: FlatTables, alpha: float | str, shrinkage: float | str, head: LinearHead
) -> tuple[FlatContent | None, BoundedWeights | BoundedLogits | None] | None:
    """:func:`build_flat_content` with "auto" (α, λ) and a ridge head in a slot, without the
    head's exact solve where the gain filter is certain of the choice (LinearHead.
    certified_over): (the content, None) when the tables serve — that content is exact — or
    (None, the tracked weights with their bound) when the head serves; None when unsure."""
    if not (alpha == "auto" and shrinkage == "auto"):
        return None
    a, lam, gain = tables.best(alpha, shrinkage)
    choice = head.certified_over(TABLES_GAIN_FACTOR * max(gain, 0.0))
    if choice is UNSURE:
        return None
    if choice is None:
        return FlatContent(tables, a, lam), None
    return None, choice


def build_flat_content(
    tables: FlatTables,
    alpha: float | str,
    shrinkage: float | str,
    head: LinearHead | None = None,
) -> FlatContent:
    """O(|grid|) after any change: the totals are maintained per cell, exactly.

    With a ridge head (content.heads) the head is served instead of the tables when its exact
    out-of-fold gain exceeds :data:`TABLES_GAIN_FACTOR` (0.65) times the tables' — both falls
    in the squared error of the same residuals on the same rows, the tables' with the square
    term of their average estimated on the D° probes. The factor was chosen on validation
    splits carved from the training sets (benchmarks/results/head_rule.md): it picks the model
    that is better on validation on every instance of every classification set there and on
    diamonds. Both gains are deterministic functions of the current integer sums, so a refit
    makes the same choice. The head costs one (d + 1)² factorization after each change plus
    one solve and one product over 2k columns (LinearHead.solution) — unless the engine's
    gain filter is certain the head's gain is below the threshold (content.heads.gain_filter:
    the same choice, no solve).
    """
    a, lam, gain = tables.best(alpha, shrinkage)
    if head is not None and alpha == "auto" and shrinkage == "auto":
        threshold = TABLES_GAIN_FACTOR * max(gain, 0.0)
        weights = head.served_over(threshold)
        if weights is not None:  # the head's gain beat the tables'
            return FlatContent(tables, a, lam, weights)
    return FlatContent(tables, a, lam)
