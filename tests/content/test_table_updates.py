"""The compiled incremental update (``update_cells``) and the compiled bulk refresh give the
numpy definitions' integers and floats bit for bit where it is hardest for them to.

``update_cells`` computes the probe terms once per touched fold-qualified cell and adds the
difference to every probe in it, changes the probes' per-fold norm totals by the new − old
terms of each changed probe (taken before its first change and after its last), and
prefetches; the bulk refresh skips cells whose terms are exactly zero and computes a cell's
probe terms once for all probes in it. These tests crowd many probes into few cells (so one
cell holds many probe entries and one probe sits in several touched cells), flip signs
(insert after forget), use both folds, both scale widths, and states whose terms leave
int64 (where the kernel must refuse and leave the tables as they were, so numpy decides).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import with_kernels as _with

from forgetting.content.accumulators import CLASSIFICATION_SCALE_BITS, REGRESSION_SCALE_BITS
from forgetting.content.tables import SHRINKAGE_GRID, FlatTables
from forgetting.content.tables import _refresh_kernels as refresh_kernels
from forgetting.content.tables import _serve_kernels as serve_kernels
from forgetting.content.tables import _update_kernels as update_kernels
from forgetting.content.tables.bundles import (
    CellArrays,
    ProbeArrays,
    ProbeIndex,
    RowChange,
    UpdateDeltas,
    term_units,
)
from forgetting.content.tables.probes import probe_norm_terms
from forgetting.content.tables.units import MEAN_BITS, norm_unit

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _rows(rng, n, T, C, k, scale_bits):
    codes = rng.integers(0, C, (n, T)).astype(np.uint16)
    bound = 2**scale_bits if scale_bits >= 32 else 2 ** (scale_bits + 10)
    residuals = rng.integers(-bound, bound, (n, k))
    folds = rng.integers(0, 2, n)
    return codes, residuals, folds


def _state(t: FlatTables):
    """Everything a prediction or a digest can read, as exact values."""
    return (
        t.sums.copy(),
        t.counts.copy(),
        list(t.cross),
        list(t.square),
        t.probe_sums.copy(),
        t.best("auto", "auto"),
        [t.probe_square(g) for g in range(len(t.grid))],
        t.n_rows,
    )


def _same(a, b) -> bool:
    pairs = zip(a, b, strict=True)
    return all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in pairs)


@pytest.mark.parametrize("scale_bits", [CLASSIFICATION_SCALE_BITS, REGRESSION_SCALE_BITS])
def test_crowded_probes_step_by_step(compiled, scale_bits: int) -> None:
    """T = 4 tables of 8 cells and 120 probes: every touched cell holds ~7 probe entries of
    its fold and every probe sits in several touched cells. After each one-row or few-row
    forget or insert, the compiled tables equal the numpy tables in every integer and every
    float a prediction reads."""
    rng = np.random.default_rng(scale_bits)
    T, C, k, n = 4, 8, 3, 1500
    codes, residuals, folds = _rows(rng, n, T, C, k, scale_bits)
    probes = rng.choice(n, 120, replace=False)
    steps = []
    order = rng.permutation(n)
    at = 0
    for size in (1, 1, 3, 1, 2, 1, 1, 3):
        steps.append(("subtract", order[at : at + size]))
        at += size
    steps.append(("add", order[:2]))  # the sign flips back: an insert of forgotten rows
    steps.append(("subtract", order[:1]))
    steps.append(("add", order[:1]))

    def history():
        t = FlatTables.empty(T, C, k, scale_bits)
        t.set_probes(codes[probes], folds[probes])
        t.add(codes, residuals, folds)
        states = [_state(t)]
        for how, part in steps:
            getattr(t, how)(codes[part], residuals[part], folds[part])
            states.append(_state(t))
        return states

    fast = history()
    slow = _with("numpy", history)
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert _same(a, b)
    # and the end state equals a fresh build of the rows left
    keep = np.setdiff1d(np.arange(n), order[2 : 2 + 11])
    ref = FlatTables.empty(T, C, k, scale_bits)
    ref.add(codes[keep], residuals[keep], folds[keep])
    ref.set_probes(codes[probes], folds[probes])
    assert _same(fast[-1], _state(ref))


def test_large_norm_terms_are_recounted(compiled) -> None:
    """Means of ~2^6 (residuals far past classification's bound): the probes' norm terms
    pass 2^50, so the kernel's per-fold deltas are flagged as untrusted and the totals are
    recounted from the probe sums — after every step the same floats as numpy and as the
    from-scratch formula (a kernel that kept adding its wrapped deltas fails here)."""
    rng = np.random.default_rng(41)
    T, C, k, n = 4, 8, 2, 300
    codes, residuals, folds = _rows(rng, n, T, C, k, 32)
    residuals = residuals * 2**6  # |μ| up to ~2^6: ‖m‖² · 2^40 ≥ 2^50
    probes = rng.choice(n, 40, replace=False)
    gone = np.setdiff1d(rng.permutation(n), probes)[:6]

    def history(compiled_run=False):
        t = FlatTables.empty(T, C, k, 32)
        t.set_probes(codes[probes], folds[probes])
        t.add(codes, residuals, folds)
        t.refresh()
        flags = []
        states = [_state(t)]
        for i in gone:
            t.subtract(codes[i : i + 1], residuals[i : i + 1], folds[i : i + 1])
            if compiled_run:
                flags.append(int(t._compiled.result[2]))  # the kernel's trust flag
            states.append(_state(t))
        return states, flags

    (fast, flags), (slow, _) = history(True), _with("numpy", history)
    assert 0 in flags  # the untrusted branch ran
    for a, b in zip(fast, slow, strict=True):
        assert _same(a, b)
    keep = np.setdiff1d(np.arange(n), gone)
    ref = FlatTables.empty(T, C, k, 32)
    ref.add(codes[keep], residuals[keep], folds[keep])
    ref.set_probes(codes[probes], folds[probes])
    assert _same(fast[-1], _state(ref))


def _kernel_args(t: FlatTables, codes, residuals, folds, sign: int):
    """The arguments ``FlatTables._update_compiled`` passes to ``update_cells`` (the bundles
    as plain tuples), and the deltas they write to."""
    T, C = t.n_tables, t.n_cells
    norms = t._probe_norms()
    start, probe_of = t._probe_csr()
    deltas = UpdateDeltas.empty(len(t.grid))
    args = (
        tuple(CellArrays.of(t.sums, t.counts)),
        tuple(term_units(t.grid, t.scale_bits, T)),
        tuple(ProbeArrays(start, probe_of, norms.records, norms.folds, norms.terms)),
        tuple(
            RowChange(
                np.ascontiguousarray(codes),
                np.ascontiguousarray(folds),
                np.ascontiguousarray(residuals, dtype=np.int64),
                sign < 0,
            )
        ),
        np.zeros(2 * T * C, dtype=np.uint8),
        tuple(deltas),
    )
    return args, deltas


def test_update_refuses_overflow_and_leaves_everything(compiled) -> None:
    """A row whose new terms leave int64: ``update_cells`` returns False with sums, counts
    and probe sums untouched; through ``FlatTables`` numpy then applies it, the
    same as a numpy-only history."""
    rng = np.random.default_rng(3)
    T, C, k, n = 4, 8, 2, 400
    codes, residuals, folds = _rows(rng, n, T, C, k, 32)
    big = np.full((1, k), 2**62, dtype=np.int64)  # |S|·|μ| · 2^24 far beyond 2^63

    def build():
        t = FlatTables.empty(T, C, k, 32)
        t.set_probes(codes[:60], folds[:60])
        t.add(codes, residuals, folds)
        t.refresh()
        return t

    t = build()
    norms = t._probe_norms()
    before = (t.sums.copy(), t.counts.copy(), norms.probe_sums.copy())
    args, _ = _kernel_args(t, codes[:1], big, folds[:1], 1)
    assert not update_kernels.update_cells(*args)[0]
    after = (t.sums, t.counts, norms.probe_sums)
    assert all(np.array_equal(x, y) for x, y in zip(before, after, strict=True))

    def history(t):
        t.add(codes[:1], big, folds[:1])
        t.subtract(codes[5:6], residuals[5:6], folds[5:6])
        return t

    a = history(t)
    b = _with("numpy", lambda: history(build()))
    assert a.equals(b)
    assert np.array_equal(a.sums, b.sums) and a.probe_sums.tolist() == b.probe_sums.tolist()


@pytest.mark.parametrize("scale_bits", [CLASSIFICATION_SCALE_BITS, REGRESSION_SCALE_BITS])
def test_update_cells_against_per_entry_terms(compiled, scale_bits: int) -> None:
    """The kernel's deltas equal the definition written out entry by entry: new − old probe
    terms of every probe entry in a touched cell (numpy's terms), added per probe with
    ``np.add.at``; the totals' change equals the touched cells' numpy terms, new − old."""
    rng = np.random.default_rng(scale_bits + 7)
    T, C, k, n = 6, 64, 4, 2000  # ≤ 3 rows per update stay below C/6: by difference
    codes, residuals, folds = _rows(rng, n, T, C, k, scale_bits)
    t = FlatTables.empty(T, C, k, scale_bits)
    t.set_probes(codes[:150], folds[:150])
    t.add(codes, residuals, folds)
    t.refresh()
    for trial in range(12):
        rows = rng.choice(n, 1 + trial % 3, replace=False)
        sign = -1 if trial % 4 else 1
        ref = t.copy()
        flat = ref._flat(codes[rows], folds[rows])
        touched = np.unique(flat % (T * C))
        probe, qual = ref._probe_hits(np.unique(flat))
        old_terms = ref._probe_terms_numpy(qual)
        old_cells = ref._terms_numpy(touched)
        values = residuals[rows] * sign
        np.add.at(ref.sums.reshape(2 * T * C, -1), flat, np.repeat(values, T, axis=0))
        np.add.at(ref.counts.reshape(-1), flat, sign)
        want_probes = ref._probe_sums.copy()
        np.add.at(want_probes, (slice(None), probe), ref._probe_terms_numpy(qual) - old_terms)
        new_cells = ref._terms_numpy(touched)
        args, out = _kernel_args(t, codes[rows], residuals[rows], folds[rows], sign)
        applied, ones, exact = update_kernels.update_cells(*args)
        assert applied
        G = len(t.grid)
        assert np.array_equal(out.cross, new_cells[0].sum(0) - old_cells[0].sum(0))
        assert np.array_equal(out.square, new_cells[1].sum(0) - old_cells[1].sum(0))
        assert np.array_equal(t.sums, ref.sums) and np.array_equal(t.counts, ref.counts)
        norms = t._norms
        assert np.array_equal(norms.probe_sums, want_probes)
        # the per-fold norm totals change by the definition's terms, new − old, per fold
        unit = norm_unit(T, scale_bits)
        d_norm = probe_norm_terms(want_probes, unit) - probe_norm_terms(ref._probe_sums, unit)
        d_last = want_probes[:, :, k] - ref._probe_sums[:, :, k]
        for b in (0, 1):
            mine = t.probe_folds == b
            assert out.norm[b].tolist() == d_norm[:, mine].sum(axis=1).astype(np.int64).tolist()
            assert out.last[b].tolist() == d_last[:, mine].sum(axis=1).tolist()
        assert exact
        # and each probe's kept terms are its current ones (the next change subtracts them)
        assert np.array_equal(norms.terms, probe_norm_terms(want_probes, unit).T)
        assert d_norm.any() and d_last.any()  # the rows moved some probe's terms
        # keep the Python-side totals in step, as _update_compiled does
        for g in range(G):
            t._cross[g] += int(out.cross[g])
            t._square[g] += int(out.square[g])
        t._fold_rows[0] += sign * (len(rows) - ones)
        t._fold_rows[1] += sign * ones
        norms.add(out.norm.tolist(), out.last.tolist())
        if sign > 0:  # undo so the rows stay forgettable
            t.subtract(codes[rows], residuals[rows], folds[rows])
        else:
            t.add(codes[rows], residuals[rows], folds[rows])
    fresh = FlatTables.empty(T, C, k, scale_bits)
    fresh.add(codes, residuals, folds)
    fresh.set_probes(codes[:150], folds[:150])
    assert t.equals(fresh)
    assert t.best("auto", "auto") == fresh.best("auto", "auto")


def test_grid_values_and_empty_folds(compiled) -> None:
    """Grids with λ = 0 (0/0 terms: numpy decides) and tiny λ, and cells with one fold
    empty, through a short history: compiled = numpy."""
    rng = np.random.default_rng(9)
    T, C, k, n = 4, 16, 2, 300
    codes, residuals, folds = _rows(rng, n, T, C, k, 32)
    folds[: n // 2] = 0  # many cells hold one fold only
    for grid in (SHRINKAGE_GRID, (0.0, 2.0), (1e-300, 3.0)):

        def history(grid=grid):
            t = FlatTables.empty(T, C, k, 32, grid)
            t.set_probes(codes[:40], folds[:40])
            t.add(codes, residuals, folds)
            states = [_state(t)]
            for i in (7, 8, 200):
                t.subtract(codes[i : i + 1], residuals[i : i + 1], folds[i : i + 1])
                states.append(_state(t))
            return states

        fast = history()
        slow = _with("numpy", history)
        for a, b in zip(fast, slow, strict=True):
            assert _same(a, b), grid


# -- the bulk refresh: totals and probe sums in one pass ----------------------------------


ODD = ("plain", "sum without count", "negative", "negative, fold 0 empty", "negative, fold 1 empty")


def _odd_tables(rng, scale_bits: int, grid, case: str, T=4, C=64, k=3) -> FlatTables:
    """Counts and sums a build could hold, with many one-fold-empty cells (their terms
    vanish and are skipped), plus three cells of one odd ``case`` the skip rule must not
    swallow: a sum without a count, a negative count, a negative count beside an empty fold
    (0 · (S / (−2 + λ)) is NaN at λ = 2, not 0). One odd case per table: one NaN anywhere
    hands the whole pass to numpy, which would hide a wrong skip elsewhere. Three cells, not
    two: numpy's int64 casts of NaN are −2^63, and those cancel in pairs."""
    t = FlatTables.empty(T, C, k, scale_bits, grid)
    shape = t.counts.shape
    per_row = 2**scale_bits if scale_bits >= 32 else 2 ** (scale_bits + 10)
    t.counts[:] = rng.integers(0, 5, size=shape) * (rng.random(shape) < 0.6)
    t.sums[:] = rng.integers(-per_row, per_row, size=t.sums.shape) * t.counts[..., None]
    flat_counts, flat_sums = t.counts.reshape(2, -1), t.sums.reshape(2, T * C, k)
    cells = rng.choice(T * C, 3, replace=False)
    if case == "sum without count":
        flat_counts[1, cells] = 0
        flat_sums[1, cells, 0] = 7
    elif case == "negative":
        flat_counts[0, cells] = -1
    elif case.startswith("negative, fold"):
        empty = int(case[len("negative, fold ")])
        flat_counts[1 - empty, cells] = -2
        flat_counts[empty, cells] = 0
        flat_sums[empty, cells] = 0
    return t


def _separately(t: FlatTables):
    """Totals and probe sums from the separate passes, in numpy."""

    def run():
        u = FlatTables(t.sums.copy(), t.counts.copy(), t.scale_bits, t.grid)
        u.rebuild_totals()
        u.set_probes(t.probe_cells - np.arange(t.n_tables) * t.n_cells, t.probe_folds)
        return list(u.cross), list(u.square), u.probe_sums.copy()

    return _with("numpy", run)


@pytest.mark.parametrize("scale_bits", [CLASSIFICATION_SCALE_BITS, REGRESSION_SCALE_BITS])
@pytest.mark.parametrize("grid", [SHRINKAGE_GRID, (0.0, 2.0), (1e-300, 3.0), (8.0,)])
@pytest.mark.parametrize("case", ODD)
def test_refresh_together_equals_separate_numpy(compiled, scale_bits: int, grid, case) -> None:
    """The one-pass refresh (skipping cells whose terms vanish, probe terms from the
    totals' means, probes in skipped cells computed on their own) gives numpy's totals and
    probe sums; probes are drawn inside cells of every kind above."""
    rng = np.random.default_rng([scale_bits, len(grid), int(grid[-1]), len(case)])
    for trial in range(3):
        t = _odd_tables(rng, scale_bits, grid, case)
        probes = rng.integers(0, t.n_cells, (80, t.n_tables))
        t.set_probes(probes, rng.integers(0, 2, 80))
        assert not t._totals_fresh and not t._probes_fresh
        got = (list(t.cross), list(t.square), t.probe_sums.copy())  # the fused pass
        want = _separately(t)
        assert got[0] == want[0] and got[1] == want[1], (grid, trial)
        assert np.array_equal(got[2], want[2]), (grid, trial)


def test_refresh_together_hands_each_part_to_numpy(compiled) -> None:
    """Terms beyond int64 in a cell with no probe: the totals go to numpy, the probe sums
    stay compiled; in a probe's cell: both go to numpy. Either way the numpy values."""
    rng = np.random.default_rng(5)
    for where in ("no probe", "probe cell"):
        t = FlatTables.empty(4, 64, 3, 32)
        t.counts[:] = rng.integers(0, 5, size=t.counts.shape)
        t.sums[:] = rng.integers(-(2**32), 2**32, size=t.sums.shape) * t.counts[..., None]
        probes = rng.integers(0, t.n_cells, (40, t.n_tables))
        folds = rng.integers(0, 2, 40)
        qualified = (1 - folds)[:, None] * (t.n_tables * t.n_cells) + probes
        qualified = qualified + np.arange(t.n_tables) * t.n_cells
        busy = set(qualified.ravel() % (t.n_tables * t.n_cells))
        free = [c for c in range(t.n_tables * t.n_cells) if c not in busy]
        cell = int(qualified[0, 0] % (t.n_tables * t.n_cells)) if where == "probe cell" else free[0]
        flat_sums, flat_counts = t.sums.reshape(2, -1, t.n_outputs), t.counts.reshape(2, -1)
        flat_sums[:, cell] = 2**62
        flat_counts[:, cell] = 1
        t.set_probes(probes, folds)
        module = refresh_kernels
        T, k, G = t.n_tables, t.n_outputs, len(t.grid)
        start, probe_of = t._probe_csr()
        done = module.refresh_terms(
            tuple(CellArrays.of(t.sums, t.counts)),
            1 << 16,
            tuple(term_units(t.grid, t.scale_bits, T)),
            tuple(ProbeIndex(start, probe_of)),
            (np.empty((1, G), np.int64), np.empty((1, G), np.int64)),
            np.empty((G, 40, k + 1), np.int64),
        )
        assert done == (False, where == "no probe")
        got = (list(t.cross), list(t.square), t.probe_sums.copy())
        want = _separately(t)
        assert got[0] == want[0] and got[1] == want[1]
        assert np.array_equal(got[2], want[2])


def test_refresh_after_a_batch_equals_step_by_step(compiled) -> None:
    """A batch forget (deferred, then the one-pass refresh) lands on the totals and probe
    sums that one-row updates reach, with probes crowded into few cells."""
    rng = np.random.default_rng(12)
    T, C, k, n = 4, 16, 3, 1200
    codes, residuals, folds = _rows(rng, n, T, C, k, 32)
    probes = rng.choice(n, 100, replace=False)
    bulk = FlatTables.empty(T, C, k, 32)
    bulk.set_probes(codes[probes], folds[probes])
    bulk.add(codes, residuals, folds)
    steps = bulk.copy()
    steps.refresh()
    gone = rng.choice(n, 300, replace=False)
    bulk.subtract(codes[gone], residuals[gone], folds[gone])  # ≥ C/6 rows: deferred
    assert not bulk._totals_fresh
    for i in gone:
        steps.subtract(codes[i : i + 1], residuals[i : i + 1], folds[i : i + 1])
    assert steps._totals_fresh and steps._probes_fresh
    assert _same(_state(bulk), _state(steps))


@pytest.mark.parametrize("n, ones", [(256, 3), (257, 40), (300, 299), (2000, 1000)])
def test_bulk_scatter_equals_add_at(compiled, n: int, ones: int) -> None:
    """The bulk scatter (≥ 256 rows, with its look-ahead prefetch) adds and subtracts the
    integers ``np.add.at`` does, whatever the split of rows between the folds (a fold with
    fewer rows than the look-ahead, or none ahead at the end of a table)."""
    rng = np.random.default_rng([n, ones])
    T, C, k = 5, 32, 3
    codes, residuals, _ = _rows(rng, n, T, C, k, 32)
    folds = np.zeros(n, dtype=np.int64)
    folds[rng.choice(n, ones, replace=False)] = 1
    sums = rng.integers(-(2**40), 2**40, (2, T * C, k))
    counts = rng.integers(0, 9, (2, T * C))
    flat = (folds[:, None] * (T * C) + np.arange(T) * C + codes.astype(np.int64)).ravel()
    for negate in (False, True):
        want_sums, want_counts = sums.copy(), counts.copy()
        sign = -1 if negate else 1
        np.add.at(want_sums.reshape(-1, k), flat, np.repeat(sign * residuals, T, axis=0))
        np.add.at(want_counts.reshape(-1), flat, sign)
        got_sums, got_counts = sums.copy(), counts.copy()
        tables = (got_sums, got_counts)  # CellArrays, as the kernels take it
        assert update_kernels.scatter_codes(tables, codes, folds, residuals, negate)
        assert np.array_equal(got_sums, want_sums) and np.array_equal(got_counts, want_counts)


@pytest.mark.parametrize("scale_bits", [CLASSIFICATION_SCALE_BITS, REGRESSION_SCALE_BITS])
def test_compiled_serving_correction_equals_the_numpy_definition(compiled, scale_bits: int):
    """FlatTables.correction through the compiled gather gives numpy's bits for every row,
    every shrinkage of the grid and a few off it; the cases the kernel refuses (an empty cell
    at λ = 0, a code outside its table) go to the numpy definition, which decides."""
    rng = np.random.default_rng(7)
    T, C, k, n = 8, 32, 3, 3000
    t = FlatTables.empty(T, C, k, scale_bits)
    codes = rng.integers(0, C, size=(n, T))
    limit = 2**scale_bits
    t.add(codes, rng.integers(-limit, limit, size=(n, k)), rng.integers(0, 2, n))
    t.counts[:, 0, 5] = 0  # one empty cell in table 0 (its sums zero too)
    t.sums[:, 0, 5] = 0
    probe = rng.integers(0, C, size=(500, T))
    probe[:7, 0] = 5
    for lam in (*SHRINKAGE_GRID, 0.37, 1e-9):
        fast = _with("numba", lambda lam=lam: t.correction(probe, lam))
        slow = t._correction_numpy(probe, lam)
        assert np.array_equal(fast, slow), lam
    assert not serve_kernels.serve_correction(  # λ = 0 on the empty cell: not an ordinary number
        tuple(CellArrays.of(t.sums, t.counts)),
        np.ascontiguousarray(probe, dtype=np.int64),
        2.0**-scale_bits,
        0.0,
        2.0**MEAN_BITS,
        2.0**-MEAN_BITS,
        np.empty((len(probe), k)),
    )
    with np.errstate(all="ignore"):
        assert np.array_equal(
            _with("numba", lambda: t.correction(probe, 0.0)), t._correction_numpy(probe, 0.0)
        )
    bad = probe.copy()
    bad[3, 2] = C  # outside its table: the kernel refuses, numpy's definition answers
    assert np.array_equal(
        _with("numba", lambda: t.correction(bad, 1.0)), t._correction_numpy(bad, 1.0)
    )
    bad[4, T - 1] = C  # past the last table: numpy's IndexError
    with pytest.raises(IndexError):
        _with("numba", lambda: t.correction(bad, 1.0))


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_probe_records_survive_pickle_and_deepcopy(compiled, how: str) -> None:
    """The probe sums the tables read are a view of the compiled update's per-probe records;
    a pickled or deep-copied table must not part the two (a copy whose updates went to
    records its reads no longer see would serve stale probe terms): the copy, changed
    further, equals a table changed the same way without the round trip."""
    import copy
    import pickle

    rng = np.random.default_rng(11)
    T, C, k, n = 6, 16, 3, 800  # C > 6: one-row changes go by difference (update_cells)
    codes, residuals, folds = _rows(rng, n, T, C, k, CLASSIFICATION_SCALE_BITS)

    def build():
        t = FlatTables.empty(T, C, k, CLASSIFICATION_SCALE_BITS)
        t.set_probes(codes[:40], folds[:40])
        t.add(codes, residuals, folds)
        t.refresh()
        t.subtract(codes[50:51], residuals[50:51], folds[50:51])  # the records in use
        return t

    t = build()
    records = t._probe_norms().records  # (re)built first: a numpy-path change drops them
    assert np.shares_memory(t.probe_sums, records)
    moved = pickle.loads(pickle.dumps(t)) if how == "pickle" else copy.deepcopy(t)
    for t_ in (moved, t):
        for i in range(60, 70):
            t_.subtract(codes[i : i + 1], residuals[i : i + 1], folds[i : i + 1])
    records = moved._probe_norms().records
    assert np.shares_memory(moved.probe_sums, records)
    assert _same(_state(moved), _state(t))
    fresh = FlatTables.empty(T, C, k, CLASSIFICATION_SCALE_BITS)
    keep = np.setdiff1d(np.arange(n), [50, *range(60, 70)])
    fresh.set_probes(codes[:40], folds[:40])
    fresh.add(codes[keep], residuals[keep], folds[keep])
    assert _same(_state(moved), _state(fresh))
