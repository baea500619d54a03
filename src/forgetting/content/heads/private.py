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

PENALTY_GRID = tuple(4.0**j for j in range(1, 7))
"""The penalties tried on the noisy folds, as multiples of the noise σ_H on each entry of H:
4 σ … 4096 σ (a factorization each). Why in units of σ, and not below 4 σ: there the
out-of-fold gain is dominated by the noise's products 4⟨N_a, A⁻¹N_b⟩ in G's weak directions,
whose spread grows like σ²/λ (digits, ε = 1: one instance chose 1e-3 · mean diag G with a
"gain" of 9·10⁴ and served 14 %, another σ with 3.6·10³ and served 33 %); on digits' splits
the penalties that served well lay between 4 σ and 160 σ."""


def private_solution(head: LinearHead, sigma: float) -> tuple[float, np.ndarray | None, float]:
    """(gain, W, penalty) of the noisy ``head`` (noise σ per entry of H, real units) at the
    cross-fitted penalty; W None when no penalty gives a positive out-of-fold gain or a fold
    has no rows. Rows of H whose feature is zero on every row (diag G = 0: an unused pixel or
    category) are zeroed first: the exact H is zero there, so what the release holds there is
    noise alone — removing it is post-processing on the public Gram."""
    gram = head.gram
    if not head_penalty(gram) > 0.0 or not all(int(np.trace(gram[f])) > 0 for f in (0, 1)):
        return -np.inf, None, 0.0
    G = np.add(gram[0], gram[1]).astype(np.float64) * 2.0**-28
    G0 = gram[0].astype(np.float64) * 2.0**-28
    H, H0, H1 = head.float_cross()
    unused = np.diagonal(gram[0]) + np.diagonal(gram[1]) == 0
    for part in (H, H0, H1):
        part[unused] = 0.0
    best: tuple[float, np.ndarray | None, float] = (-np.inf, None, 0.0)
    for multiplier in PENALTY_GRID:
        lam = max(float(sigma), 2.0**-30) * multiplier
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
    copy (noise ``sigma`` per entry of H): the served weights when its cross-fitted gain
    exceeds the tables' threshold."""

    def __init__(self, head: LinearHead, sigma: float) -> None:
        self.head = head
        self.sigma = float(sigma)

    def served_over(self, threshold: float):
        gain, W, _ = private_solution(self.head, self.sigma)
        if W is None or not gain > threshold:
            return None
        return self.head._served(W)
