"""The compiled table kernels give the numpy versions' integers bit for bit.

The compiled kernels of :mod:`forgetting.content.tables` and :mod:`forgetting.schema` replace
the numpy loops of ``ThresholdPartition.cells``, ``scatter_rows`` and ``FlatTables._terms`` /
``_probe_terms`` on the fit and forget paths. Any
difference in one integer would make a forget differ from a refit that ran the other
implementation (a small batch runs numpy, a big one compiled), so every comparison here is
``np.array_equal`` on random inputs and on the edges: empty and zero-count cells, negative
sums, magnitudes at the limits the code documents and beyond them (where the kernel must hand
over to numpy), every λ of the grid and off-grid ones, both scale bits, depths 1–14 and 17
(uint16 and uint32 codes), and a whole fit + forget with the kernels on and off.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import with_kernels as _with

from forgetting import QSSClassifier, QSSRegressor
from forgetting.content import kernels
from forgetting.content.accumulators import (
    CLASSIFICATION_SCALE_BITS,
    MAX_ROWS,
    REGRESSION_SCALE_BITS,
)
from forgetting.content.tables import SHRINKAGE_GRID, FlatTables
from forgetting.content.tables import _terms_kernels as terms_kernels
from forgetting.content.tables import _update_kernels as update_kernels
from forgetting.content.tables.bundles import CellArrays, term_units
from forgetting.content.tables.scatter import scatter_rows as _scatter_rows
from forgetting.content.tables.scatter import scatter_rows_sparse as _scatter_rows_sparse
from forgetting.schema.partitions import ThresholdPartition, fit_linear, to_grid

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_backend_switch(compiled, use_kernels) -> None:
    assert kernels.backend(1) == "numba"
    use_kernels("numpy")
    assert kernels.backend(1 << 30) == "numpy"
    use_kernels("auto")
    assert kernels.backend(1) == "numba"  # loaded, nothing forces numpy


def test_the_choice_is_read_once_and_changed_through_the_api(use_kernels) -> None:
    """The environment is read at import (unknown values mean "auto"); a later change of it
    has no effect, ``use`` refuses unknown choices, and ``using`` restores what it found."""
    code = (
        "import os\n"
        "from forgetting.content import kernels\n"
        "assert kernels.settings() == {'kernels': 'numpy', 'hashing': 'auto'}\n"
        "os.environ['FORGETTING_KERNELS'] = 'numba'\n"
        "assert kernels.backend(1 << 30) == 'numpy'\n"
        "with kernels.using('numba', hashing='hashlib'):\n"
        "    assert kernels.settings() == {'kernels': 'numba', 'hashing': 'hashlib'}\n"
        "assert kernels.settings() == {'kernels': 'numpy', 'hashing': 'auto'}\n"
    )
    env = {**os.environ, "FORGETTING_KERNELS": " NumPy ", "FORGETTING_HASH_BACKEND": "nümpy"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    with pytest.raises(ValueError, match="FORGETTING_KERNELS"):
        kernels.use("fast")
    with pytest.raises(ValueError, match="FORGETTING_HASH_BACKEND"):
        kernels.use(hashing="numpy")


def test_import_does_not_load_numba() -> None:
    """``import forgetting`` and small table work stay in numpy: numba is never imported."""
    code = (
        "import sys, numpy as np\n"
        "import forgetting\n"
        "from forgetting.content.tables import FlatTables\n"
        "t = FlatTables.empty(4, 8, 2, 32)\n"
        "t.add(np.zeros((3, 4), np.int64), np.ones((3, 2), np.int64), np.array([0, 1, 0]))\n"
        "t.rebuild_totals()\n"
        "assert 'numba' not in sys.modules, 'numba was imported'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "FORGETTING_KERNELS"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


# -- cells --------------------------------------------------------------------------------


def _partition(rng, depth: int, P: int, T: int, Y: np.ndarray, stage=None):
    features = rng.integers(0, P, size=(T, depth)).astype(np.intp)
    rows = rng.integers(0, Y.shape[0], size=(T, depth))
    thresholds = Y[rows, features].astype(np.float64)  # ties with real rows, as in fit_trees
    return ThresholdPartition(features=features, thresholds=thresholds, stage1=stage)


@pytest.mark.parametrize("depth", [*range(1, 15), 17])
def test_cells_equal_numpy(compiled, depth: int) -> None:
    rng = np.random.default_rng(depth)
    n, d, T = 600, 12, 9
    Z = rng.normal(size=(n, d))
    Z[::7] = np.round(Z[::7], 1)  # repeated grid values: threshold ties
    Z[5] = 1e9  # clipped rows
    Z[6] = -1e9
    Y = to_grid(Z)
    part = _partition(rng, depth, d, T, Y)
    assert part.cell_dtype == (np.uint16 if depth <= 16 else np.uint32)
    got = part.cells(Z)
    want = _with("numpy", lambda: part.cells(Z))
    assert got.dtype == want.dtype == part.cell_dtype
    assert np.array_equal(got, want)
    assert int(got.max()) < part.n_cells
    assert np.array_equal(part._codes_numpy(part.project(Z)), want)


def test_cells_through_a_projection_and_chunks(compiled) -> None:
    """More rows than one chunk, through an exact linear stage (the hyperplane path)."""
    rng = np.random.default_rng(3)
    n, d, P, T = 9000, 20, 6, 16
    Z = rng.normal(size=(n, d))
    Xg = to_grid(Z[:300])
    stage = fit_linear(rng.normal(size=(P, d)), np.rint(Xg.mean(axis=0)), Xg)
    part = _partition(rng, 12, P, T, stage.apply(Xg), stage)
    assert np.array_equal(part.cells(Z), _with("numpy", lambda: part.cells(Z)))


def test_cells_with_odd_feature_indices(compiled) -> None:
    """A negative feature index (numpy wraps it) is left to numpy: same codes either way."""
    rng = np.random.default_rng(4)
    Z = rng.normal(size=(50, 5))
    part = ThresholdPartition(
        features=np.array([[0, -1, 4]], dtype=np.intp),
        thresholds=np.zeros((1, 3)),
    )
    assert np.array_equal(part.cells(Z), _with("numpy", lambda: part.cells(Z)))


# -- scatter ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [600, 5000])
def test_scatter_equals_sparse_and_add_at(compiled, n: int) -> None:
    rng = np.random.default_rng(n)
    T, C, k = 64, 32, 5
    flat = (
        rng.integers(0, 2, n)[:, None] * (T * C)
        + np.arange(T)[None, :] * C
        + rng.integers(0, C, (n, T))
    ).ravel()
    # large magnitudes (and negatives) whose cell sums still fit: |v| · n < 2^63
    values = rng.integers(-(2**62) // n, 2**62 // n, size=(n, k), dtype=np.int64)
    start = rng.integers(-(2**40), 2**40, size=(2 * T * C, k), dtype=np.int64)
    by_kernel, by_sparse, by_add_at = start.copy(), start.copy(), start.copy()
    _scatter_rows(by_kernel, flat, values, T)
    _scatter_rows_sparse(by_sparse, flat, values, T)
    np.add.at(by_add_at, flat, np.repeat(values, T, axis=0))
    assert np.array_equal(by_kernel, by_sparse)
    assert np.array_equal(by_kernel, by_add_at)


def test_scatter_wraps_like_numpy(compiled) -> None:
    """int64 sums past 2^63 wrap as numpy's do (never reached by the tables, but defined)."""
    T, n = 64, 600
    flat = np.zeros(n * T, dtype=np.int64)
    values = np.full((n, 1), 2**62, dtype=np.int64)
    a, b = np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64)
    _scatter_rows(a, flat, values, T)
    np.add.at(b, flat, np.repeat(values, T, axis=0))
    assert np.array_equal(a, b)


def test_scatter_rejects_bad_cells(compiled) -> None:
    T, n = 64, 600
    flat = np.zeros(n * T, dtype=np.int64)
    flat[-1] = 10
    target = np.zeros((10, 2), np.int64)
    with pytest.raises(IndexError):
        _scatter_rows(target, flat, np.ones((n, 2), np.int64), T)
    assert not target.any()  # nothing written before the check


# -- cross-fit terms ----------------------------------------------------------------------


def _random_tables(rng, scale_bits: int, grid, kind: str, T=4, C=64, k=3) -> FlatTables:
    t = FlatTables.empty(T, C, k, scale_bits, grid)
    shape = t.sums.shape
    if kind == "typical":  # counts and sums a real build could hold
        t.counts[:] = rng.integers(0, 6, size=t.counts.shape)
        per_row = 2**scale_bits if scale_bits >= 32 else 2 ** (scale_bits + 10)
        t.sums[:] = rng.integers(-per_row, per_row, size=shape) * t.counts[..., None]
    elif kind == "limits":  # at the documented limits: 2^28 rows, |r| at its bound
        t.counts[:] = rng.choice([0, 1, MAX_ROWS - 1, MAX_ROWS], size=t.counts.shape)
        bound = 2**scale_bits if scale_bits >= 32 else 2 ** (scale_bits + 10)
        t.sums[:] = rng.choice([-1, 0, 1], size=shape) * t.counts[..., None] * bound
    elif kind == "beyond":  # inconsistent and huge: terms leave int64, numpy decides
        t.counts[:] = rng.integers(-3, 3, size=t.counts.shape)
        t.sums[:] = rng.integers(-(2**63), 2**63 - 1, size=shape, dtype=np.int64)
    else:  # sparse: most cells empty, a few negative sums
        t.counts[:] = rng.integers(0, 3, size=t.counts.shape) * (rng.random(t.counts.shape) < 0.2)
        t.sums[:] = rng.integers(-(2**33), 2**20, size=shape) * (t.counts[..., None] > 0)
    return t


GRIDS = [SHRINKAGE_GRID, *[(g,) for g in SHRINKAGE_GRID], (0.0,), (1e-300, 3.0)]


@pytest.mark.parametrize("scale_bits", [CLASSIFICATION_SCALE_BITS, REGRESSION_SCALE_BITS])
@pytest.mark.parametrize("kind", ["typical", "limits", "beyond", "sparse"])
@pytest.mark.parametrize("grid", GRIDS)
def test_terms_equal_numpy(compiled, scale_bits: int, kind: str, grid) -> None:
    rng = np.random.default_rng([scale_bits, len(kind), len(grid), int(grid[0] * 8)])
    t = _random_tables(rng, scale_bits, grid, kind)
    cells = np.concatenate([np.arange(t.n_tables * t.n_cells), rng.integers(0, 256, 50)])
    got = t._terms(cells)
    want = t._terms_numpy(cells)
    assert got[0].shape == want[0].shape == (len(cells), len(grid))
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # the numpy dispatch (with its early exit for empty cells) agrees too
    by_numpy = _with("numpy", lambda: t._terms(cells))
    assert np.array_equal(by_numpy[0], want[0]) and np.array_equal(by_numpy[1], want[1])


@pytest.mark.parametrize("grid", [SHRINKAGE_GRID, (0.0,)])
def test_terms_of_empty_cells(compiled, grid) -> None:
    """The early exit for cells with nothing in them returns what the arithmetic gives."""
    t = FlatTables.empty(2, 4096, 3, 32, grid)
    cells = np.arange(8192)  # enough cells for the emptiness check on both paths
    for backend in ("numba", "numpy"):
        got = _with(backend, lambda: t._terms(cells))
        want = t._terms_numpy(cells)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    t.sums[1, 0, 3, 1] = -5  # a sum without a count is not empty
    got, want = t._terms(cells), t._terms_numpy(cells)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("scale_bits", [CLASSIFICATION_SCALE_BITS, REGRESSION_SCALE_BITS])
@pytest.mark.parametrize("kind", ["typical", "limits", "beyond", "sparse"])
def test_probe_terms_equal_numpy(compiled, scale_bits: int, kind: str) -> None:
    rng = np.random.default_rng([scale_bits, len(kind), 7])
    for grid in GRIDS:
        t = _random_tables(rng, scale_bits, grid, kind)
        qualified = rng.integers(0, 2 * t.n_tables * t.n_cells, 400)
        got = t._probe_terms(np.arange(400), qualified)
        want = t._probe_terms_numpy(qualified)
        assert np.array_equal(got, want)


def test_rebuild_totals_and_history(compiled) -> None:
    """Totals and probe sums after adds and subtracts are those of numpy, step by step."""
    rng = np.random.default_rng(11)
    T, C, k, n = 16, 64, 3, 4000
    codes = rng.integers(0, C, (n, T))
    residuals = rng.integers(-(2**32), 2**32, (n, k))
    folds = rng.integers(0, 2, n)

    def history() -> FlatTables:
        t = FlatTables.empty(T, C, k, 32)
        t.set_probes(codes[:40], folds[:40])
        t.add(codes, residuals, folds)
        t.subtract(codes[:1500], residuals[:1500], folds[:1500])
        t.subtract(codes[1500:1501], residuals[1500:1501], folds[1500:1501])
        t.add(codes[:3], residuals[:3], folds[:3])
        return t

    a = history()
    b = _with("numpy", history)
    assert a.equals(b)
    totals = (list(a.cross), list(a.square))
    a.rebuild_totals()
    assert (a.cross, a.square) == totals


# -- end to end ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [QSSClassifier, QSSRegressor])
def test_fit_and_forget_are_the_same_with_and_without_kernels(cls) -> None:
    rng = np.random.default_rng(5)
    n, d, k = 3000, 16, 4
    centers = rng.normal(size=(k, d)) * 2
    y = rng.integers(0, k, n)
    X = centers[y] + rng.normal(size=(n, d))
    params = dict(rho=0.05, n_instances=2, random_state=0, rebuild="sync", partition="trees")

    def run(model):
        model.fit(X, y if isinstance(model, QSSClassifier) else X[:, 0] + y, ids=range(n))
        before = model.state_digest()
        model.forget(list(range(100, 700)))
        model.forget([900])
        out = model.predict_proba(X) if isinstance(model, QSSClassifier) else model.predict(X)
        return before, model.state_digest(), out

    compiled_run = _with("numba", lambda: run(cls(**params)))
    numpy_run = _with("numpy", lambda: run(cls(**params)))
    assert compiled_run[:2] == numpy_run[:2]
    assert np.array_equal(compiled_run[2], numpy_run[2])


def test_kernel_hands_over_only_out_of_range(compiled) -> None:
    """Tables a build can hold stay on the compiled path; int64-overflowing terms go to numpy."""
    rng = np.random.default_rng(2)
    for kind, expected in (("typical", True), ("limits", True), ("beyond", False)):
        t = _random_tables(rng, 32, SHRINKAGE_GRID, kind)
        m, G = t.n_tables * t.n_cells, len(SHRINKAGE_GRID)
        cross, square = np.empty((m, G), np.int64), np.empty((m, G), np.int64)
        ok = terms_kernels.cell_terms(
            tuple(CellArrays.of(t.sums, t.counts)),
            np.arange(m, dtype=np.int64),
            tuple(term_units(SHRINKAGE_GRID, 32, t.n_tables)),
            cross,
            square,
        )
        assert ok is expected, kind


def test_probe_sums_scatter_equals_add_at(compiled) -> None:
    rng = np.random.default_rng(8)
    target = rng.integers(-(2**40), 2**40, size=(4, 30, 6), dtype=np.int64)
    index = rng.integers(0, 30, 500)  # repeats
    values = rng.integers(-(2**50), 2**50, size=(4, 500, 6), dtype=np.int64)
    want = target.copy()
    np.add.at(want, (slice(None), index), values)
    assert update_kernels.add_rows_at(target, index, values)
    assert np.array_equal(target, want)
    index[3] = 30
    assert not update_kernels.add_rows_at(target, index, values)
    assert np.array_equal(target, want)  # untouched


@pytest.mark.parametrize("grid", [SHRINKAGE_GRID, (0.0,)])
def test_probe_terms_of_empty_cells(compiled, grid) -> None:
    """The early exit for probe entries of empty cells returns what the arithmetic gives."""
    t = FlatTables.empty(4, 2048, 3, 32, grid)
    qualified = np.arange(2 * 4 * 2048)
    for backend in ("numba", "numpy"):
        got = _with(backend, lambda: t._probe_terms(qualified, qualified))
        assert np.array_equal(got, t._probe_terms_numpy(qualified))
    t.sums[0, 1, 5, 2] = 9  # a sum without a count is not empty
    got = t._probe_terms(qualified, qualified)
    assert np.array_equal(got, t._probe_terms_numpy(qualified))
    assert got.any()


# -- incremental and deferred updates ------------------------------------------------------


def _probe_square_by_masks(t: FlatTables, g: int) -> float | None:
    """``FlatTables.probe_square`` counted from scratch (boolean masks over the probe sums):
    the totals the updates keep by difference must give these very floats. A probe's norm
    term is rint(Σ_j float64(S_j)² · 2^(s − 80 − 2⌈log2 T⌉)) over its k mean sums S, the
    outputs in order; the fold's terms and its last-column sums are summed as exact ints."""
    if t.probe_cells is None:
        return None
    from forgetting.content.tables.units import MEAN_BITS, loss_bits, square_bits

    k, T = t.n_outputs, t.n_tables
    s = square_bits(t.scale_bits)
    tb = (T - 1).bit_length()
    unit = 2.0 ** (s - 2 * MEAN_BITS - 2 * tb)
    average = per_table = 0.0
    for b in (0, 1):
        mine = t.probe_folds == b
        n_probes = int(mine.sum())
        if n_probes == 0:
            return None
        weight = float(t.counts[b, 0].sum()) / n_probes
        S = t.probe_sums[g][mine]  # (m_b, k + 1) int64
        acc = np.zeros(n_probes)
        for j in range(k):
            x = S[:, j].astype(np.float64)
            acc = acc + x * x
        terms = sum(int(v) for v in np.rint(acc * unit).tolist())
        average += float(terms) * (2.0 ** (2 * tb - s) / (T * T)) * weight
        last = sum(int(v) for v in S[:, k].tolist())
        per_table += float(last) * (2.0**-s / T) * weight
    exact_per_table = float(t.square[g]) * 2.0 ** -loss_bits(t.scale_bits) / T
    if per_table <= 0.0:
        return average
    return exact_per_table * average / per_table


def _history_rows(rng, n, T, C, k, scale_bits=32):
    codes = rng.integers(0, C, (n, T)).astype(np.uint16)
    bound = 2**scale_bits if scale_bits >= 32 else 2 ** (scale_bits + 10)
    residuals = rng.integers(-bound, bound, (n, k))
    folds = rng.integers(0, 2, n)
    return codes, residuals, folds


@pytest.mark.parametrize("scale_bits", [CLASSIFICATION_SCALE_BITS, REGRESSION_SCALE_BITS])
def test_incremental_updates_equal_numpy_and_a_fresh_build(compiled, scale_bits: int) -> None:
    """Single rows, small batches and bulk batches (deferred totals) in any mix: the compiled
    update, the numpy update and a build from the remaining rows hold the same integers, and
    (α, λ), the gain and every probe square are the same floats as the mask formula's."""
    rng = np.random.default_rng(scale_bits)
    T, C, k, n = 16, 256, 3, 6000
    codes, residuals, folds = _history_rows(rng, n, T, C, k, scale_bits)
    probes = rng.choice(n, 60, replace=False)

    def history():
        t = FlatTables.empty(T, C, k, scale_bits)
        t.set_probes(codes[probes], folds[probes])
        t.add(codes, residuals, folds)
        states = []
        gone = rng_h = np.random.default_rng(1).permutation(n)
        start = 0
        for size in (1, 1, 2, 7, 64, 1, 200, 1, 3, 3000, 1, 5):
            part = gone[start : start + size]
            t.subtract(codes[part], residuals[part], folds[part])
            states.append((t.best("auto", "auto"), [t.probe_square(g) for g in range(4)]))
            start += size
        back = gone[:9]
        t.add(codes[back], residuals[back], folds[back])
        states.append((t.best("auto", "auto"), [t.probe_square(g) for g in range(4)]))
        del rng_h
        return t, states, np.sort(np.concatenate([gone[start:], back]))

    a, states_a, keep = history()
    b, states_b, _ = _with("numpy", history)
    assert a.equals(b)
    assert states_a == states_b
    ref = FlatTables.empty(T, C, k, scale_bits)
    ref.add(codes[keep], residuals[keep], folds[keep])
    ref.set_probes(codes[probes], folds[probes])
    assert a.equals(ref)
    for g in range(4):
        assert a.probe_square(g) == _probe_square_by_masks(ref, g)
        assert b.probe_square(g) == _probe_square_by_masks(ref, g)
    assert a.best("auto", "auto") == ref.best("auto", "auto")


def test_probe_squares_follow_every_step(compiled) -> None:
    """After each one-row change the kept per-fold totals give the from-scratch floats."""
    rng = np.random.default_rng(21)
    T, C, k, n = 8, 64, 4, 3000
    codes, residuals, folds = _history_rows(rng, n, T, C, k)
    t = FlatTables.empty(T, C, k, 32)
    t.add(codes, residuals, folds)
    t.set_probes(codes[:80], folds[:80])
    for i in range(100, 160):
        t.subtract(codes[i : i + 1], residuals[i : i + 1], folds[i : i + 1])
        assert [t.probe_square(g) for g in range(4)] == [
            _probe_square_by_masks(t, g) for g in range(4)
        ]


def test_bulk_updates_defer_the_totals(compiled) -> None:
    """A fit's add (and a batch of ≥ C/6 rows) only scatters; the totals computed when read
    are those of updating them step by step."""
    rng = np.random.default_rng(22)
    T, C, k, n = 8, 64, 3, 2000
    codes, residuals, folds = _history_rows(rng, n, T, C, k)
    t = FlatTables.empty(T, C, k, 32)
    t.set_probes(codes[:30], folds[:30])
    t.add(codes, residuals, folds)
    assert not t._totals_fresh and not t._probes_fresh
    stepwise = FlatTables.empty(T, C, k, 32)
    stepwise.rebuild_totals()  # fresh: every add below is incremental
    stepwise.set_probes(codes[:30], folds[:30])
    for i in range(0, n, 10):  # 10 < C/6: by difference
        stepwise.add(codes[i : i + 10], residuals[i : i + 10], folds[i : i + 10])
    assert stepwise._totals_fresh and stepwise._probes_fresh
    assert t.equals(stepwise)
    t.subtract(codes[:40], residuals[:40], folds[:40])  # 40 ≥ C/6: deferred again
    assert not t._totals_fresh
    stepwise.subtract(codes[:40], residuals[:40], folds[:40])
    assert t.equals(stepwise)
    assert t.n_rows == stepwise.n_rows == n - 40


def test_scatter_codes_rejects_bad_cells_and_folds(compiled) -> None:
    T, C, k = 4, 8, 2
    for codes, folds in (
        (np.full((3, T), C, np.int64), np.zeros(3, np.int64)),
        (np.full((3, T), -1, np.int64), np.zeros(3, np.int64)),
        (np.zeros((3, T), np.int64), np.array([0, 2, 1])),
    ):
        for fresh in (False, True):
            t = FlatTables.empty(T, C, k, 32)
            if fresh:
                t.rebuild_totals()
            with pytest.raises(IndexError):
                t.add(codes, np.ones((3, k), np.int64), folds)
            assert not t.sums.any() and not t.counts.any()


def test_all_terms_and_probe_sums_equal_numpy(compiled) -> None:
    """The one-pass totals and probe sums (compiled) equal numpy's terms summed."""
    rng = np.random.default_rng(23)
    for scale_bits in (CLASSIFICATION_SCALE_BITS, REGRESSION_SCALE_BITS):
        for kind in ("typical", "limits", "sparse", "beyond"):
            t = _random_tables(rng, scale_bits, SHRINKAGE_GRID, kind)
            t.set_probes(rng.integers(0, t.n_cells, (50, t.n_tables)), rng.integers(0, 2, 50))
            compiled_state = (list(t.cross), list(t.square), t.probe_sums.copy())
            u = _with("numpy", lambda t=t: _recomputed(t))
            assert compiled_state[0] == u.cross and compiled_state[1] == u.square, kind
            assert np.array_equal(compiled_state[2], u.probe_sums), kind


def _recomputed(t: FlatTables) -> FlatTables:
    u = FlatTables(t.sums.copy(), t.counts.copy(), t.scale_bits, t.grid)
    u.rebuild_totals()
    u.set_probes(t.probe_cells - np.arange(t.n_tables) * t.n_cells, t.probe_folds)
    _ = u.probe_sums
    return u


def test_copy_keeps_what_was_computed(compiled) -> None:
    rng = np.random.default_rng(24)
    codes, residuals, folds = _history_rows(rng, 500, 4, 32, 2)
    t = FlatTables.empty(4, 32, 2, 32)
    t.set_probes(codes[:10], folds[:10])
    t.add(codes, residuals, folds)
    stale = t.copy()
    assert t.best("auto", "auto") == stale.best("auto", "auto")
    fresh = t.copy()
    assert fresh._totals_fresh and fresh.equals(t)
    fresh.subtract(codes[:1], residuals[:1], folds[:1])
    assert not fresh.equals(t)


def test_refresh_computes_what_a_bulk_change_left(compiled) -> None:
    rng = np.random.default_rng(25)
    codes, residuals, folds = _history_rows(rng, 400, 4, 32, 2)
    t = FlatTables.empty(4, 32, 2, 32)
    t.set_probes(codes[:10], folds[:10])
    t.add(codes, residuals, folds)
    assert not t._totals_fresh and not t._probes_fresh
    t.refresh()
    assert t._totals_fresh and t._probes_fresh and t._norms is not None
    bare = FlatTables.empty(4, 32, 2, 32)
    bare.add(codes, residuals, folds)
    bare.refresh()
    assert bare._totals_fresh and bare.cross == t.cross
