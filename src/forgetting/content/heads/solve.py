"""The ridge heads' solve: from one Cholesky factor of the Gram system, the served weights
W = A⁻¹H and the out-of-fold gain that decides head vs tables — for one head's columns, or for
p heads' stacked side by side in a fixed layout (:func:`solve_stacked`), so that a head's bits
do not depend on which siblings are solved with it.

Every step is a fixed float function of the integer sums (content.heads.gram.GramSystem), so
the weights and the gain — and the choice the gain drives — are the same after any history.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.linalg.lapack import dpotrs as _POTRS

from ..._rowwise import one_blas_thread
from .certified import weight_tolerance
from .gram import GramCache, GramSystem, SharedHead


def _solve_columns(system: GramSystem, H: np.ndarray, H0: np.ndarray, H1: np.ndarray):
    """W = A⁻¹H and, per column of ``H``, the out-of-fold gain of approximate fold solutions
    (one head's k columns, or p heads' stacked side by side: every step is column by column).

    W_a, fold a's ridge solution A_a⁻¹H_a (A_a = G_a + s_a I), is approximated by
    W_a ≈ 2A⁻¹H_a: fold a's penalized Gram replaced by half the full one (the folds are a
    random halving of the rows, so A_a ≈ A/2; the labels fold a's head sees are still H_a
    alone, so the gain stays out of fold). Then everything comes from one triangular solve of
    the stacked columns [H | H_0] and one product with G_0:

        X = A⁻¹[H | H_0]:  W = X[:, :m],  W_0 = 2X[:, m:],  W_1 = 2W − W_0;
        P = G_0 [W_0 | W_1];  G_1 W_0 = G W_0 − G_0 W_0 = 2H_0 − λW_0 − G_0 W_0 (A W_0 = 2H_0).

    Why not the fold solutions themselves, or Richardson steps towards them: factoring each
    fold's system would triple the factorizations after every change, and two preconditioned
    Richardson steps from W cost three solves and three G_0 products. Against the exact fold
    gain, on validation splits carved from the benchmark's training sets
    (benchmarks/results/head_rule.md): within −0.8 … +0.2 % of it on the sets with n ≥ 12k
    rows but sentiment (−0.9 … −3.3 %), and −2.4 … −4.5 % on digits' 1k rows (the steps:
    0 … +1.6 %); on diabetes' 247 rows the gains are near zero and both approximations miss
    the exact one by more than its size. The head-vs-tables choice is the same with any of the
    three gains on every instance there (content.tables.build_flat_content). What exactness
    needs is determinism, not an exact W_a: every step here is a fixed float function of the
    integer sums. LAPACK's potrs is called directly (what scipy's ``cho_solve`` calls, without its
    wrapper) on a Fortran-order right-hand side it overwrites (no copies).

    Returns X = A⁻¹[H | H_0] (what the gain filter tracks, content.heads.gain_filter), W (a view of
    X) and the per-column gain Σ_b 2⟨W_a, H_b⟩ − ⟨W_a, G_b W_a⟩ (summed over a head's
    columns by :func:`head_gain`).
    """
    factor, G0, lam = system.factor, system.G0, system.lam
    D, m = H.shape
    # the right-hand side in Fortran order, solved in place (no copies inside the wrapper)
    rhs = np.empty((D, 2 * m), order="F")
    rhs[:, :m] = H
    rhs[:, m:] = H0
    # One BLAS thread: a (d + 1)² system is too small to gain from threads, and on a busy
    # machine oversubscribed threads made it many times slower.
    with one_blas_thread():
        X, _ = _POTRS(factor, rhs, lower=1, overwrite_b=1)
        W = X[:, :m]
        folds = np.empty((D, 2 * m))  # [W_0 | W_1]
        W0, W1 = folds[:, :m], folds[:, m:]
        np.multiply(X[:, m:], 2.0, out=W0)
        np.multiply(W, 2.0, out=W1)
        W1 -= W0
        P = G0 @ folds  # [G_0 W_0 | G_0 W_1]
    # fold 0's head on fold 1: 2⟨W_0, H_1⟩ − ⟨W_0, G_1 W_0⟩ = ⟨W_0, 2H_1 − 2H_0 + λW_0 + G_0 W_0⟩
    score0 = np.subtract(H1, H0)
    score0 *= 2.0
    score0 += lam * W0
    score0 += P[:, :m]
    score0 *= W0
    # fold 1's head on fold 0: 2⟨W_1, H_0⟩ − ⟨W_1, G_0 W_1⟩
    score1 = 2.0 * H0
    score1 -= P[:, m:]
    score1 *= W1
    score0 += score1
    return X, W, np.sum(score0, axis=0)


def solve_ridge(system: GramSystem, H: np.ndarray, H0: np.ndarray, H1: np.ndarray):
    """(W, per-column gains) of :func:`_solve_columns`."""
    _, W, gains = _solve_columns(system, H, H0, H1)
    return W, gains


def head_gain(gains: np.ndarray, columns: slice = slice(None)) -> float:
    """The out-of-fold gain of one head: :func:`solve_ridge`'s per-column gains summed over the
    head's ``columns`` — the fall in squared error of each fold's head on the other fold's
    rows."""
    return float(np.sum(gains[columns]))


def solve_stacked(heads: Sequence[SharedHead], cache: GramCache | None = None) -> None:
    """Solve every head of ``heads`` placed in a slot and not solved since its last change,
    in the stacked layout: slot r of p holds its H in columns [r·k, (r + 1)·k) of one
    (D, p·k) right-hand side, the other columns its siblings' H (zero for a sibling that is
    absent, rebuilding or already solved); heads with the same Gram sums share one stacked
    solve (design.md §5.13).

    Why the fixed layout: a head's bits must not depend on which siblings happen to be
    solved with it (a rebuilding instance, a refit where all p are there). Every step of
    :func:`solve_ridge` treats columns independently — a triangular solve or a product does
    not mix columns, elementwise operations do not — but a BLAS kernel may pick its blocking,
    and so its summation order, from the matrix's shape; with the shape (D, p·k) and the
    slot's position fixed, a head's columns get the same operations whatever the other
    columns hold. Two BLAS/LAPACK calls (a triangular solve of 2·p·k columns, a product with
    G_0) for p heads instead of 2p: after a one-row change the p solves cost about what one
    did.
    """
    for system, members in _by_system(heads, cache):
        if system.factor is None:  # no rows, or a fold without rows: no penalty, no head
            for head in members:
                head.keep_solved(-np.inf, None)
            continue
        _solve_group(system, members, cache)


def _by_system(
    heads: Sequence[SharedHead], cache: GramCache | None
) -> list[tuple[GramSystem, list[SharedHead]]]:
    """The heads in a slot and not solved yet, grouped by the system of their Gram sums."""
    groups: list[tuple[GramSystem, list[SharedHead]]] = []
    for head in heads:
        if head.slot is None or head.solved is not None:
            continue
        system = GramSystem.of(head.gram) if cache is None else cache.system_for(head)
        for known, members in groups:
            if known is system or known.serves(head.gram):
                members.append(head)
                break
        else:
            groups.append((system, [head]))
    return groups


def _solve_group(system: GramSystem, members: list[SharedHead], cache: GramCache | None) -> None:
    """One stacked solve of ``members`` (heads of one system); when they are every slot of
    ``cache``, the gain filter tracks the solution from here on."""
    p = members[0].slot[1]  # type: ignore[index]
    D, k = members[0].cross.shape[1], members[0].cross.shape[2]
    H, H0, H1 = (np.zeros((D, p * k)) for _ in range(3))
    for head in members:
        r, slots = head.slot  # type: ignore[misc]
        if slots != p or head.cross.shape[1:] != (D, k):
            raise ValueError("heads solved together must share one layout")
        at = slice(r * k, (r + 1) * k)
        H[:, at], H0[:, at], H1[:, at] = head.float_cross()
    X, W, gains = _solve_columns(system, H, H0, H1)
    for head in members:
        r = head.slot[0]  # type: ignore[index]
        at = slice(r * k, (r + 1) * k)
        head.keep_solved(head_gain(gains, at), np.ascontiguousarray(W[:, at]))
    if cache is not None and cache.complete(members):
        slots = [h.slot[0] for h in members]  # type: ignore[index]
        B = np.concatenate([H, H0], axis=1)
        tolerance = weight_tolerance(X.shape[0])
        cache.gains.rebase(members, slots, system.factor, X, B, system.G0, system.lam, tolerance)
