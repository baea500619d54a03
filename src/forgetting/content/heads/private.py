"""The ridge head of mode="dp": solved from noisy cross sums at a cross-fitted penalty.

In mode="dp" a head's cross sums H_f = Σ v rᵀ carry Gaussian noise (forgetting.privacy; the
Gram sums carry no labels and stay exact). The exact head's fixed penalty (1e-3 · mean diag G,
:data:`.gram.PENALTY`) was chosen for noise-free sums: with noise of σ per entry the solve
fits the noise, and the right penalty grows with σ (on digits' validation split, ε = 8:
0.5 at 1e-3, 0.9 at 1). So the penalty is cross-fitted on the noisy folds: for each
multiplier of :data:`PENALTY_GRID`, each fold's approximate solution is scored on the other
fold's sums (:func:`.solve._solve_columns`, the exact head's out-of-fold gain). The two folds'
noise arrays are independent, so the score of fold a's solution on fold b's noisy H_b is an
unbiased estimate of its score on the exact H_b. The best multiplier serves, its gain decides
head vs tables. A deterministic float function of the exact Gram and the noisy cross sums —
post-processing of the release, and the same bits after any history.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg.lapack import dpotrf as _POTRF

from ..._rowwise import one_blas_thread
from .gram import GramSystem, head_penalty
from .linear import LinearHead
from .solve import _solve_columns, head_gain

PENALTY_GRID = tuple(4.0**j for j in range(9))
"""Multipliers of the exact head's penalty tried on the noisy folds: 1e-3 … 65 times mean
diag G (a factorization each; chosen to span digits' validation optimum at ε = 1 … 8)."""


def private_solution(head: LinearHead) -> tuple[float, np.ndarray | None, float]:
    """(gain, W, penalty) of the noisy ``head`` at the cross-fitted penalty (W None when no
    penalty gives a positive out-of-fold gain, or a fold has no rows)."""
    gram = head.gram
    base = head_penalty(gram)
    if not base > 0.0 or not all(int(np.trace(gram[f])) > 0 for f in (0, 1)):
        return -np.inf, None, 0.0
    G = np.add(gram[0], gram[1]).astype(np.float64) * 2.0**-28
    G0 = gram[0].astype(np.float64) * 2.0**-28
    H, H0, H1 = head.float_cross()
    best: tuple[float, np.ndarray | None, float] = (-np.inf, None, 0.0)
    for multiplier in PENALTY_GRID:
        lam = base * multiplier
        A = G.copy()
        A[np.diag_indices_from(A)] += lam
        with one_blas_thread():
            factor, info = _POTRF(A.T, lower=1, clean=0, overwrite_a=1)
        if info != 0:
            continue
        system = GramSystem(gram, G0, lam, factor)
        _, W, gains = _solve_columns(system, H, H0, H1)
        gain = head_gain(gains)
        if gain > best[0]:
            best = (gain, np.array(W), lam)
    return best


class PrivateHead:
    """What :func:`forgetting.content.tables.build_flat_content` asks of a head, for a noisy
    copy: the served weights when its cross-fitted gain exceeds the tables' threshold."""

    def __init__(self, head: LinearHead) -> None:
        self.head = head

    def served_over(self, threshold: float):
        gain, W, _ = private_solution(self.head)
        if W is None or not gain > threshold:
            return None
        return self.head._served(W)
