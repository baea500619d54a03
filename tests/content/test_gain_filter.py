"""The gain filter (content.heads.gain_filter): "the head is not served" decided without a solve
only when certain, so the served model stays the refit's bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from forgetting.content.accumulators import CLASSIFICATION_SCALE_BITS
from forgetting.content.heads import (
    GramCache,
    LinearHead,
    head_features,
    head_penalty,
    solve_stacked,
)
from forgetting.content.heads import gram as gram_module
from forgetting.content.heads import linear as linear_module
from forgetting.content.heads.gain_filter import LOG_ROWS, TOLERANCE

D_IN, K, P = 24, 4, 3


def _rows(n, seed):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, D_IN)) + rng.normal(size=D_IN)
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    v = head_features(Z, np.float64)
    residuals = [rng.integers(-(2**31), 2**31, size=(n, K)) for _ in range(P)]
    return v, residuals, rng.integers(0, 2, size=n)


def _stacked_heads(n=4000, seed=0, slots=range(P)):
    cache = GramCache()
    v, residuals, folds = _rows(n, seed)
    heads = {}
    for r in slots:
        head = LinearHead.empty(D_IN, K, CLASSIFICATION_SCALE_BITS)
        head.add(v, residuals[r], folds)
        head.share_solves(cache, (r, P))
        heads[r] = head
    solve_stacked(list(heads.values()), cache)
    for head in heads.values():
        cache.gains.decided(head, False)  # the exact route chose the tables for every slot
    return cache, heads


def _exact_gain(head: LinearHead) -> float:
    """The exact route's gain on a standalone copy of the head's sums."""
    copy = LinearHead(head.gram.copy(), head.cross.copy(), head.counts.copy(), head.scale_bits)
    return copy.solution()[0]


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
@pytest.mark.parametrize("slots", [range(P), (0, 2)], ids=["all-slots", "one-rebuilding"])
def test_the_tracked_gain_follows_the_exact_gain_through_forgets_and_inserts(
    slots, kernels, use_kernels
):
    """Both paths (the compiled kernel and numpy) stay within 10⁻⁴ of the tolerance."""
    use_kernels(kernels)
    cache, heads = _stacked_heads(slots=slots)
    v, residuals, folds = _rows(200, seed=1)
    rng = np.random.default_rng(2)
    worst = 0.0
    for i in range(120):
        rows = slice(i, i + 1 + (i % 3 == 0))  # one row, or two
        adding = bool(rng.integers(2))
        for r, head in heads.items():
            change = head.add if adding else head.subtract
            change(v[rows], residuals[r][rows], folds[rows])
        lam = head_penalty(next(iter(heads.values())).gram)
        for head in heads.values():
            estimate = cache.gains.estimate(head, lam)
            assert estimate is not None, f"the filter gave up at change {i}"
            gain, scale = estimate
            worst = max(worst, abs(gain - _exact_gain(head)) / scale)
    # the tolerance is ≥ 10⁴× the error seen (module docstring)
    assert worst < TOLERANCE * 1e-4, worst


@pytest.mark.parametrize("first, then", [("numba", "numpy"), ("numpy", "numba")])
def test_the_tracked_state_carries_over_between_the_paths(first, then, use_kernels):
    """The compiled update holds A⁻¹ and G_0 as packed triangles and leaves rank-one terms
    pending (a few rows at a time); when numpy takes over mid-way (FORGETTING_KERNELS
    switched) it unpacks them and adds the terms first, and the compiled path packs what
    numpy held: the tracked gain stays on the exact one either way (a numpy step on the
    arrays alone misses by far more than the tolerance)."""
    use_kernels(first)
    cache, heads = _stacked_heads()
    v, residuals, folds = _rows(40, seed=3)
    worst = 0.0
    for i in range(30):
        if i == 13:  # 13 rows in: some terms wait (8 per flush), from both folds
            use_kernels(then)
        for r, head in heads.items():
            head.subtract(v[i : i + 1], residuals[r][i : i + 1], folds[i : i + 1])
        lam = head_penalty(next(iter(heads.values())).gram)
        for head in heads.values():
            estimate = cache.gains.estimate(head, lam)
            assert estimate is not None
            worst = max(worst, abs(estimate[0] - _exact_gain(head)) / estimate[1])
    assert worst < TOLERANCE * 1e-4, worst


def test_certain_only_outside_the_tolerance():
    cache, heads = _stacked_heads()
    v, residuals, folds = _rows(3, seed=3)
    for r, head in heads.items():
        head.subtract(v[:1], residuals[r][:1], folds[:1])
    head = heads[1]
    lam = head_penalty(head.gram)
    gain, scale = cache.gains.estimate(head, lam)
    exact = _exact_gain(head)
    assert cache.gains.certainly_below(head, exact + 2 * TOLERANCE * scale, lam)
    assert not cache.gains.certainly_below(head, exact + 0.5 * TOLERANCE * scale, lam)
    assert not cache.gains.certainly_below(head, exact, lam)
    assert not cache.gains.certainly_below(head, exact - abs(exact), lam)
    # another λ than the tracked one (the penalty's bucket moved): unknown
    assert not cache.gains.certainly_below(head, exact + abs(exact) + scale, 2 * lam)


def test_the_penalty_asked_as_a_function_is_computed_once_per_change_and_tracks_its_bucket():
    """served_over hands the filter each head's penalty as a function: it is called once per
    change for the p heads (their sums are the same integers), and when the rows move it to
    another power-of-two bucket than the tracked solution's, every head gets "unknown"."""
    cache, heads = _stacked_heads(n=400)  # adding 400 rows doubles the trace: a bucket moves
    base_lam = head_penalty(heads[0].gram)
    v, residuals, folds = _rows(400, seed=5)
    calls = []

    def counted(head):
        def penalty():
            calls.append(head)
            return head.penalty()

        return penalty

    moved = False
    for i in range(400):
        for r, head in heads.items():
            head.add(v[i : i + 1], residuals[r][i : i + 1], folds[i : i + 1])
        calls.clear()
        lam = head_penalty(heads[0].gram)
        for head in heads.values():
            estimate = cache.gains.estimate(head, counted(head))
            assert (estimate is None) == (lam != base_lam), i
        assert len(calls) == 1, i
        if lam != base_lam:
            moved = True
            break
    assert moved


def _changed_unseen(cache, heads):
    """Ways a head's sums change without the filter seeing the rows: each must make it
    answer "unknown" until the next exact solve of every head."""
    v, residuals, folds = _rows(LOG_ROWS + 1, seed=4)
    yield "bulk change", lambda: [h.subtract(v, residuals[r], folds) for r, h in heads.items()]
    yield "merge", lambda: heads[0].merge(LinearHead.empty(D_IN, K, CLASSIFICATION_SCALE_BITS))
    yield (
        "replaced",
        lambda: LinearHead.empty(D_IN, K, CLASSIFICATION_SCALE_BITS).share_solves(cache, (1, P)),
    )
    yield "released", lambda: cache.release(2)
    yield "served", lambda: cache.gains.decided(heads[0], True)
    yield "one head missed a change", lambda: heads[0].subtract(v[:1], residuals[0][:1], folds[:1])


@pytest.mark.parametrize("case", range(6))
def test_an_unseen_change_sends_every_head_to_the_exact_route(case):
    cache, heads = _stacked_heads()
    name, change = list(_changed_unseen(cache, heads))[case]
    change()
    lam = head_penalty(heads[0].gram)
    assert cache.gains.estimate(heads[0], lam) is None, name
    assert not cache.gains.certainly_below(heads[0], np.inf, lam), name


def test_the_penalty_is_a_power_of_two_times_the_constant_and_stays_while_rows_change():
    _, heads = _stacked_heads()
    head = heads[0]
    lam = head_penalty(head.gram)
    mantissa = lam / gram_module.PENALTY
    assert mantissa == 2.0 ** round(np.log2(mantissa))
    mean = np.trace(head.gram[0] + head.gram[1]) * 2.0**-28 / head.gram.shape[-1]
    assert mean / np.sqrt(2) <= mantissa <= mean * np.sqrt(2)
    v, residuals, folds = _rows(5, seed=5)
    head.subtract(v, residuals[0], folds)
    assert head_penalty(head.gram) == lam
    assert gram_module.GramSystem.of(head.gram).lam == lam


def test_pending_gram_rows_give_the_eager_sums_and_penalty(monkeypatch):
    """Small changes leave their Gram terms pending (LinearHead.gram adds them when read):
    the same integers as adding them at once, in any mix of signs and folds, also past the
    pending cap; the penalty read from the diagonal sees the pending rows."""
    v, residuals, folds = _rows(300, seed=6)
    lazy = LinearHead.empty(D_IN, K, CLASSIFICATION_SCALE_BITS)
    eager = LinearHead.empty(D_IN, K, CLASSIFICATION_SCALE_BITS)
    lazy.add(v, residuals[0], folds)
    eager.add(v, residuals[0], folds)
    monkeypatch.setattr(linear_module, "PENDING_ROWS", 40)  # a flush on the way
    monkeypatch.setattr(gram_module, "LAZY_ROWS", 0)  # `eager` adds at once
    rng = np.random.default_rng(7)
    for i in rng.permutation(120):
        rows = slice(i, i + 1 + int(i % 4 == 0))
        change = "add" if i % 3 == 0 else "subtract"
        monkeypatch.setattr(gram_module, "LAZY_ROWS", 16)
        getattr(lazy, change)(v[rows], residuals[0][rows], folds[rows])
        monkeypatch.setattr(gram_module, "LAZY_ROWS", 0)
        getattr(eager, change)(v[rows], residuals[0][rows], folds[rows])
        if i % 17 == 0:
            assert lazy.penalty() == head_penalty(eager.gram)
    assert lazy.penalty() == head_penalty(eager.gram)
    assert lazy.equals(eager)
    assert lazy.solution()[0] == eager.solution()[0]


def test_the_penalty_of_a_shared_gram_follows_the_sums(monkeypatch):
    """penalty() of a head whose Gram array is shared (read-only, after a stacked solve or a
    flush): as one-row changes flush into new shared arrays and the mean diagonal triples
    (the penalty moves up a power of two on the way), it is the penalty of the sums every
    time — those of a twin head without a cache, given the same rows."""
    cache, heads = _stacked_heads(n=300)
    monkeypatch.setattr(linear_module, "PENDING_ROWS", 5)  # a flush every few rows
    v, residuals, folds = _rows(600, seed=9)
    head = heads[0]
    twin = LinearHead(head.gram.copy(), head.cross.copy(), head.counts.copy(), head.scale_bits)
    assert not head._gram.flags.writeable  # shared after the solve
    first = head.penalty()
    for i in range(600):
        head.add(v[i : i + 1], residuals[0][i : i + 1], folds[i : i + 1])
        twin.add(v[i : i + 1], residuals[0][i : i + 1], folds[i : i + 1])
        if i % 7 == 0:
            assert head.penalty() == head_penalty(twin.gram), i
    assert head.penalty() == head_penalty(twin.gram) == 2 * first
    assert not head._gram.flags.writeable  # flushed into shared arrays all along


def test_the_packed_layout_is_the_lower_triangle_column_by_column():
    """The compiled path's A⁻¹ and G_0: S[j:, j] for each j in turn, and back."""
    from forgetting.content.heads.gain_filter import packed, unpacked

    rng = np.random.default_rng(5)
    S = rng.normal(size=(7, 7))
    S = S + S.T
    P = packed(S)
    assert np.array_equal(P, np.concatenate([S[j:, j] for j in range(7)]))
    back = unpacked(P)
    assert np.array_equal(back, S) and back.flags.f_contiguous
