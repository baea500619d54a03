"""The gain filter (content.heads.gain_filter): "the head is not served" decided without a solve
only when certain, so the served model stays the refit's bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_model, schema_ids

from forgetting import QSSClassifier
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
from forgetting.content.heads import solve as solve_module
from forgetting.content.heads.gain_filter import LOG_ROWS, TOLERANCE
from forgetting.content.tables import flat_content as tables_module
from forgetting_lab.bench.core import clustered_data

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


@pytest.fixture
def tables_serve(monkeypatch):
    """Make the tables win the head-vs-tables rule (the rule reads the factor when it runs);
    counts the exact solves."""
    monkeypatch.setattr(tables_module, "TABLES_GAIN_FACTOR", 50.0)
    solves = []
    exact = solve_module._solve_columns

    def counted(*args):
        solves.append(1)
        return exact(*args)

    monkeypatch.setattr(solve_module, "_solve_columns", counted)
    return solves


def test_forgets_and_inserts_decided_by_the_filter_serve_the_refit(tables_serve):
    X, y = clustered_data(3000, d=16, k=4, seed=3)
    X, y = X.astype(np.float32), y
    ids = list(range(len(X)))
    params = dict(n_instances=3, rebuild="sync", random_state=0)
    model = QSSClassifier(**params).fit(X[:2800], y[:2800], ids[:2800])
    assert model.engine_.corrections() == ["tables"] * 3
    rng = np.random.default_rng(0)
    gone = set()
    hit = schema_ids(model, 1)[0]  # one D° hit: a rebuild, then the filter re-bases
    order = [int(i) for i in rng.choice(2800, 30, replace=False) if i != hit]
    order.insert(12, hit)
    del tables_serve[:]
    for step, row_id in enumerate(order):
        model.forget([row_id])
        gone.add(row_id)
        if step % 10 == 5:
            new = 2800 + step
            model.insert(X[new : new + 1], y[new : new + 1], [new])
        model.predict_proba(X[:5])
    solves = len(tables_serve)
    assert solves < len(order) // 3, f"{solves} exact solves for {len(order)} changes"
    keep = [i for i in ids[:2800] if i not in gone] + [2800 + s for s in range(5, 31, 10)]
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    assert_same_model(model, refit, X[:300])


def test_a_close_call_goes_to_the_exact_route_and_matches_the_refit(tables_serve, monkeypatch):
    """Deletions decided by the filter (tables), then one whose result puts instance 0's head
    gain a hair (10⁻⁹) above the threshold — inside the filter's tolerance: the filter must
    not decide it, the exact route serves the head, as a refit does."""
    X, y = clustered_data(3000, d=16, k=4, seed=3)
    params = dict(n_instances=3, rebuild="sync", random_state=0)
    model = QSSClassifier(**params).fit(X, y)
    inside = set(schema_ids(model, 0) + schema_ids(model, 1) + schema_ids(model, 2))
    rng = np.random.default_rng(1)
    gone = [int(i) for i in rng.choice(len(X), 12, replace=False) if int(i) not in inside]
    for row_id in gone[:-1]:
        model.forget([row_id])
        model.predict_proba(X[:3])
    keep = np.setdiff1d(np.arange(len(X)), gone)
    final = QSSClassifier(**params).fit(X[keep], y[keep], keep).engine_.instances[0]
    head_gain, _ = final.head.solution()
    _, _, tables_gain = final.accumulators.best("auto", "auto")
    assert head_gain > 0 and tables_gain > 0
    monkeypatch.setattr(tables_module, "TABLES_GAIN_FACTOR", head_gain * (1 - 1e-9) / tables_gain)
    del tables_serve[:]
    model.forget([gone[-1]])
    assert model.engine_.corrections()[0] == "head"
    assert tables_serve, "the close call was not solved"
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    assert refit.engine_.corrections()[0] == "head"
    assert_same_model(model, refit, X[:300])


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


def test_save_load_and_pickle_with_pending_rows_and_a_tracked_solution(tables_serve, tmp_path):
    """One-row forgets leave Gram terms pending and the filter tracking; a save/load and a
    pickle round trip at that point keep the model, and forgets after them (filter re-based
    on the loaded model) still land on the refit."""
    import pickle

    X, y = clustered_data(2400, d=16, k=4, seed=5)
    ids = list(range(len(X)))
    params = dict(n_instances=3, rebuild="sync", random_state=0)
    model = QSSClassifier(**params).fit(X, y, ids)
    inside = set(schema_ids(model, 0) + schema_ids(model, 1) + schema_ids(model, 2))
    outside = [i for i in ids if i not in inside]
    for row_id in outside[:6]:
        model.forget([row_id])
        model.predict_proba(X[:2])
    assert model.engine_._gram_cache.gains.engaged()
    assert any(inst.head._pending for inst in model.engine_.instances)
    path = tmp_path / "m.qss"
    model.save(path)
    for copy in (QSSClassifier.load(path), pickle.loads(pickle.dumps(model))):
        assert_same_model(model, copy, X[:200])
        for row_id in outside[6:10]:
            copy.forget([row_id])
            copy.predict_proba(X[:2])
        keep = [i for i in ids if i not in outside[:10]]
        refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
        assert_same_model(copy, refit, X[:200])


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
