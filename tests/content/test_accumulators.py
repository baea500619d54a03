"""The sufficient statistics and their materialization, tested against row-level math."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from forgetting.content.accumulators import Accumulators, quantize_residuals
from forgetting.content.materialize import (
    SHRINKAGE_GRID,
    _out_of_fold,
    _stats,
    build_content,
    content_jobs,
    materialize,
    materialize_grid,
    out_of_fold_scores,
)


@st.composite
def rows(draw, max_rows=60):
    n_levels = draw(st.integers(1, 4))
    b = draw(st.sampled_from([2, 4, 8]))
    k = draw(st.integers(1, 3))
    n = draw(st.integers(1, max_rows))
    codes = draw(hnp.arrays(np.uint8, (n, n_levels), elements=st.integers(0, b - 1)))
    res = draw(hnp.arrays(np.float64, (n, k), elements=st.floats(-1, 1)))
    folds = draw(hnp.arrays(np.intp, n, elements=st.integers(0, 1)))
    return n_levels, b, k, codes, quantize_residuals(res, 32), folds


@settings(max_examples=60, deadline=None)
@given(rows(), st.randoms(use_true_random=False))
def test_add_then_subtract_any_subset_in_any_order_is_exact(data, rnd):
    n_levels, b, k, codes, res, folds = data
    n = len(codes)
    full = Accumulators.empty(n_levels, b, k, 32)
    full.add(codes, res, folds)
    order = list(range(n))
    rnd.shuffle(order)
    removed = sorted(order[: rnd.randint(0, n)])
    kept = [i for i in range(n) if i not in set(removed)]
    for i in removed[::-1]:
        full.subtract(codes[i : i + 1], res[i : i + 1], folds[i : i + 1])
    direct = Accumulators.empty(n_levels, b, k, 32)
    for chunk in np.array_split(np.array(kept[::-1], dtype=np.intp), 3):
        direct.add(codes[chunk], res[chunk], folds[chunk])
    assert full.equals(direct)
    assert full.n_rows == len(kept)


def _boost_rows(codes, residuals, b, lam):
    """Row-level boosting over levels: the definition that materialize must reproduce."""
    r = residuals.copy()
    means = []
    for m in range(codes.shape[1]):
        S = np.zeros((b, r.shape[1]))
        n = np.zeros(b)
        np.add.at(S, codes[:, m], r)
        np.add.at(n, codes[:, m], 1)
        denom = n + lam
        mu = np.where(denom[:, None] > 0, S / np.where(denom > 0, denom, 1)[:, None], 0.0)
        means.append(mu)
        r = r - mu[codes[:, m]]
    return np.array(means)


@settings(max_examples=60, deadline=None)
@given(rows(), st.sampled_from([0.0, 0.5, 4.0]))
def test_materialize_equals_row_level_boosting(data, lam):
    n_levels, b, k, codes, res, folds = data
    acc = Accumulators.empty(n_levels, b, k, 32)
    acc.add(codes, res, folds)
    means = materialize(*_stats(acc, slice(None)), lam)
    expected = _boost_rows(codes.astype(np.intp), np.ldexp(res.astype(np.float64), -32), b, lam)
    assert np.allclose(means, expected, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(rows(), st.sampled_from([0.5, 2.0]))
def test_out_of_fold_scores_equal_row_level_scores(data, lam):
    n_levels, b, k, codes, res, folds = data
    acc = Accumulators.empty(n_levels, b, k, 32)
    acc.add(codes, res, folds)
    means_a = materialize(*_stats(acc, 0), lam)
    cross, square = _out_of_fold(means_a, *_stats(acc, 1))
    scored = folds == 1
    r = np.ldexp(res[scored].astype(np.float64), -32)
    m = sum(means_a[lvl][codes[scored, lvl]] for lvl in range(n_levels))
    assert np.isclose(cross, float(np.sum(r * m)), atol=1e-9)
    assert np.isclose(square, float(np.sum(m * m)), atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(rows())
def test_the_shrinkage_grid_side_by_side_is_each_value_s_row_level_definition(data):
    """build_content computes the whole λ grid in one pass (materialize_grid: the values'
    means side by side in each product): every value's means and out-of-fold scores must
    still be the row-level ones of that value alone."""
    n_levels, b, k, codes, res, folds = data
    acc = Accumulators.empty(n_levels, b, k, 32)
    acc.add(codes, res, folds)
    lams = (0.0, 0.5, 2.0, 8.0)
    r = np.ldexp(res.astype(np.float64), -32)
    codes = codes.astype(np.intp)
    grid = materialize_grid(*_stats(acc, slice(None)), lams)
    assert grid.shape == (n_levels, b, len(lams), k)
    crosses, squares = out_of_fold_scores([_stats(acc, f) for f in (0, 1)], lams)
    for i, lam in enumerate(lams):
        assert np.allclose(grid[:, :, i], _boost_rows(codes, r, b, lam), atol=1e-9)
        cross = square = 0.0
        for train in (0, 1):
            mine = folds == train
            means = _boost_rows(codes[mine], r[mine], b, lam)
            scored = ~mine
            m = sum(means[lvl][codes[scored, lvl]] for lvl in range(n_levels))
            cross += float(np.sum(r[scored] * m))
            square += float(np.sum(m * m))
        assert np.isclose(crosses[i], cross, atol=1e-9)
        assert np.isclose(squares[i], square, atol=1e-9)


def test_auto_alpha_is_near_zero_on_pure_noise_and_near_one_on_signal():
    rng = np.random.default_rng(0)
    n, b = 4000, 8
    codes = rng.integers(0, b, size=(n, 2)).astype(np.uint8)
    folds = rng.integers(0, 2, size=n)
    signal = np.linspace(-0.5, 0.5, b)[codes[:, 0]][:, None]
    noisy = signal + rng.normal(scale=0.2, size=(n, 1))
    acc = Accumulators.empty(2, b, 1, 32)
    acc.add(codes, quantize_residuals(noisy, 32), folds)
    assert build_content(acc, "auto", "auto").alpha > 0.8
    noise = Accumulators.empty(2, b, 1, 32)
    noise.add(codes, quantize_residuals(rng.normal(scale=0.2, size=(n, 1)), 32), folds)
    assert build_content(noise, "auto", "auto").alpha < 0.2
    silent = Accumulators.empty(2, b, 1, 32)
    silent.add(codes, np.zeros((n, 1), dtype=np.int64), folds)
    assert build_content(silent, "auto", "auto").alpha == 0.0


def _rows_with_a_signal(seed: int, n_levels: int, b: int, k: int, n: int, level: int):
    """(accumulators, codes, residuals, folds) of n random rows whose residuals carry a signal
    in the cells of ``level``, so that α > 0 reads every fold's scores."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, b, size=(n, n_levels))
    signal = rng.uniform(-0.5, 0.5, size=(b, k))[codes[:, level]]
    res = quantize_residuals(signal + rng.uniform(-0.4, 0.4, size=(n, k)), 32)
    folds = rng.integers(0, 2, size=n)
    acc = Accumulators.empty(n_levels, b, k, 32)
    acc.add(codes, res, folds)
    return acc, codes, res, folds


def _content_bits(content):
    return content.means.tobytes(), content.alpha, content.shrinkage


def test_kept_fold_statistics_follow_every_change():
    """build_content keeps each fold's float statistics and grid means until a change
    touches that fold (Accumulators.fold_kept): after changes in one fold, the other, both,
    a merge and an unpickle, the content is the bits of a fresh copy's (which keeps
    nothing yet), and what is kept cannot be written to."""
    import pickle

    n_levels, b, k, n = 3, 8, 3, 400
    acc, codes, res, folds = _rows_with_a_signal(0, n_levels, b, k, n, level=0)

    def check(acc):
        kept = build_content(acc, "auto", "auto")
        assert _content_bits(kept) == _content_bits(build_content(acc.copy(), "auto", "auto"))
        return kept

    first = check(acc)
    assert first.alpha > 0.0
    in0, in1 = np.flatnonzero(folds == 0), np.flatnonzero(folds == 1)
    singles = [[in0[0]], [in1[0]], [in0[1], in1[1]]]
    bulk = np.setdiff1d(np.arange(100, 160), np.concatenate(singles))
    for rows in [*singles, bulk]:
        acc.subtract(codes[rows], res[rows], folds[rows])
        assert _content_bits(check(acc)) != _content_bits(first)
    part = Accumulators.empty(n_levels, b, k, 32)
    part.add(codes[bulk], res[bulk], folds[bulk])
    acc.merge(part)
    check(acc)
    for rows in singles:
        acc.add(codes[rows], res[rows], folds[rows])
        check(acc)
    assert _content_bits(check(acc)) == _content_bits(first)  # every row back: the same bits
    again = pickle.loads(pickle.dumps(acc))
    assert "_kept" not in acc.__getstate__()
    assert _content_bits(check(again)) == _content_bits(first)
    T, _, N = acc.fold_kept(0, "stats", lambda: _stats(acc, 0))
    assert not T.flags.writeable and not N.flags.writeable
    # α and λ given: the float copies' totals, the bits of converting the summed integers
    given = build_content(acc, 0.7, 2.0)
    assert given.means.tobytes() == materialize(*_stats(acc, slice(None)), 2.0).tobytes()


def test_float_copies_are_the_conversions_of_the_integers_after_any_change():
    """fold_floats and total_count_floats after small changes (entries converted again
    one by one), a large one (all converted), a merge and a replaced array equal
    content.materialize's conversion of the integers, bit for bit, and cannot be written."""
    rng = np.random.default_rng(1)
    n_levels, b, k, n = 4, 8, 2, 500
    codes = rng.integers(0, b, size=(n, n_levels))
    res = quantize_residuals(rng.uniform(-1, 1, size=(n, k)), 32)
    folds = rng.integers(0, 2, size=n)
    acc = Accumulators.empty(n_levels, b, k, 32)
    acc.add(codes[:300], res[:300], folds[:300])

    def check():
        for f in (0, 1):
            for mine, theirs in zip(acc.fold_floats(f), _stats(acc, f), strict=True):
                assert mine.tobytes() == theirs.tobytes() and not mine.flags.writeable
        n_all, N_all = acc.total_count_floats()
        _, n_ref, N_ref = _stats(acc, slice(None))
        assert n_all.tobytes() == n_ref.tobytes() and N_all.tobytes() == N_ref.tobytes()

    check()
    for rows in ([0], [1, 2], [3, 3], list(range(4, 80)), [299]):
        rows = np.array(rows)
        acc.subtract(codes[rows], res[rows], folds[rows])
        check()
    acc.add(codes[300:303], res[300:303], folds[300:303])
    check()
    part = Accumulators.empty(n_levels, b, k, 32)
    part.add(codes[303:], res[303:], folds[303:])
    acc.merge(part)
    check()
    acc.sums = acc.sums * 2  # a replaced array (mode="dp" noises a copy's sums this way)
    check()


def _serial_definition(acc, alpha, shrinkage):
    """build_content as one serial computation: out_of_fold_scores over both directions,
    the grid's best (α, λ), the means on all rows at that λ."""
    grid = SHRINKAGE_GRID if shrinkage == "auto" else (float(shrinkage),)
    folds = [_stats(acc, f) for f in (0, 1)]
    crosses, squares = out_of_fold_scores(folds, grid)
    best = (-np.inf, 0.0, grid[0])
    for lam, cross, square in zip(grid, crosses.tolist(), squares.tolist(), strict=True):
        a = (cross / square if cross > 0.0 and square > 0.0 else 0.0) if alpha == "auto" else alpha
        gain = 2.0 * a * cross - a * a * square
        if gain > best[0]:
            best = (gain, a, lam)
    means = materialize(*_stats(acc, slice(None)), best[2])
    return means.tobytes(), best[1], best[2]


def test_content_jobs_in_any_order_give_the_serial_definition():
    """content_jobs splits build_content into the cross-fit's two directions (run on any
    thread, in any order) and a last step: the same bits as the serial definition, after
    changes in either fold, with the kept means of the untouched fold."""
    acc, codes, res, folds = _rows_with_a_signal(4, 3, 8, 2, 500, level=1)
    for step, rows in enumerate([[0], [1], [2, 3], list(range(10, 40))]):
        acc.subtract(codes[rows], res[rows], folds[rows])
        jobs, finish = content_jobs(acc, "auto", "auto")
        assert len(jobs) == 2
        results = [None, None]
        for i in (1, 0) if step % 2 else (0, 1):  # either direction first
            results[i] = jobs[i]()
        content = finish(results)
        assert _content_bits(content) == _serial_definition(acc, "auto", "auto")
        assert content.alpha > 0.0
        # a guessed λ: its means computed by a third job, used only when the cross-fit
        # chooses that λ (a right guess, a wrong one, one off the grid: the same bits)
        wrong = next(lam for lam in SHRINKAGE_GRID if lam != content.shrinkage)
        for likely in (content.shrinkage, wrong, 3.0):
            jobs, finish = content_jobs(acc, "auto", "auto", likely)
            assert len(jobs) == (2 if likely == 3.0 else 3)
            results = [job() for job in reversed(jobs)][::-1]
            assert _content_bits(finish(results)) == _serial_definition(acc, "auto", "auto")
    jobs, finish = content_jobs(acc, 0.5, 8.0)  # α and λ given: nothing to cross-fit
    assert jobs == [] and _content_bits(finish([])) == _serial_definition(acc, 0.5, 8.0)


def test_engine_builds_rq_contents_in_jobs_with_each_instance_s_own_bits():
    """After a forget, the engine builds the p RQ contents as 2p jobs on the pool's threads
    (engine.serving.contents_in_jobs): each is the bits of that instance's content built
    alone."""
    from forgetting import QSSClassifier
    from forgetting.engine.serving import contents_in_jobs

    rng = np.random.default_rng(5)
    X = rng.normal(size=(900, 8)).astype(np.float32)
    y = (X[:, 0] + 0.3 * rng.normal(size=900) > 0).astype(int) + (X[:, 1] > 0.5)
    model = QSSClassifier(
        partition="rq", n_instances=3, rho=0.2, n_levels=2, n_centroids=8, random_state=0
    ).fit(X, y, np.arange(900))
    engine = model.engine_
    candidates = iter(range(900))

    def forget_outside_every_d0() -> list:
        """Forget rows until one lies in no instance's D° (no rebuild): the p instances
        are then current, each with its content to build again."""
        while True:
            receipt = model.forget([next(candidates)])
            model.wait_for_rebuilds()
            if not receipt.instances_hit:
                served = [inst for inst in engine.instances if inst is not None]
                assert len(served) == 3 and all(inst.content is None for inst in served)
                return served

    served = forget_outside_every_d0()
    for _ in range(2):  # the first build guesses no λ, the next the one chosen before
        contents = contents_in_jobs(served, "auto", "auto")
        for inst, content in zip(served, contents, strict=True):
            alone = build_content(inst.accumulators.copy(), "auto", "auto")
            assert content is inst.content
            assert _content_bits(content) == _content_bits(alone)
            assert inst.likely_shrinkage == content.shrinkage
        served = forget_outside_every_d0()
