"""forgetting.distributed: fit / insert / rebuild on a dask LocalCluster, bit for bit the local
model; and the chunked row work every build now runs (equal to instance.build_instance)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from helpers import assert_same_model, classification_data, outside_all_schemas, schema_ids

from forgetting import QSSClassifier, QSSRegressor
from forgetting.distributed import (
    LocalRowWork,
    check_chunk_rows,
    fit_distributed,
    insert_distributed,
    is_distributed_input,
    keep_rows_on_disk,
)
from forgetting.instance import build_instance
from forgetting.rows import DiskRows

N, CHUNK = 2100, 1024  # three chunks, the last one short


def _data(n=N, d=5, seed=0):
    X, y = classification_data(n=n, d=d, k=3, seed=seed)
    return X.astype(np.float32), y


# -- chunked builds (no dask needed) --------------------------------------------------------
@pytest.mark.parametrize(
    "params",
    [
        {},  # exact mode, random trees
        {"partition": "rq"},
        {"head": "ridge"},
        {"mode": "label"},
    ],
    ids=["trees", "rq", "head", "label"],
)
def test_chunked_build_equals_build_instance(params):
    X, y = _data(n=1500)
    model = QSSClassifier(random_state=0, **{"n_instances": 2, **params}).fit(X, y)
    engine = model.engine_
    data = engine._row_data(copy=False)
    engine.set_row_work(LocalRowWork(1024))  # two chunks, the second one short
    for r in range(model.n_instances):
        a, pos_a, ca = build_instance(
            engine.config.schema, data, r, engine.config.random_state, engine.config.label_mode
        )
        b, pos_b, cb = engine._build(r, data)
        assert a.digest() == b.digest()
        assert a.accumulators.equals(b.accumulators)
        if a.head is not None:
            assert np.array_equal(a.head.gram, b.head.gram)
            assert np.array_equal(a.head.cross, b.head.cross)
            assert np.array_equal(a.head.counts, b.head.counts)
        assert np.array_equal(pos_a, pos_b)
        for field in ("codes", "residuals", "digests"):
            assert np.array_equal(getattr(ca, field), getattr(cb, field))


def test_chunk_rows_must_be_block_multiples():
    assert check_chunk_rows(2048) == 2048
    for bad in (0, 1000, -1024, 1.5, True):
        with pytest.raises(ValueError, match="chunk_rows"):
            check_chunk_rows(bad)


def _build_transient_bytes(model) -> int:
    """Peak traced memory of rebuilding instance 0, minus what the build returns (the rows'
    contributions, O(n) by design: a deletion subtracts them)."""
    engine = model.engine_
    data = engine._row_data(copy=False)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    _, pos, contrib = engine._build(0, data)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    kept = pos.nbytes + contrib.codes.nbytes + contrib.residuals.nbytes + contrib.digests.nbytes
    return peak - kept


def test_rows_on_disk_bound_a_rebuilds_memory_and_keep_the_bits(tmp_path):
    rng = np.random.default_rng(2)
    # A small codebook and D° at its minimum size for both n: the accumulators' fixed size
    # stays far below the features' float64 intermediates, whose growth is what is measured.
    params = dict(
        rho=1e-4,
        n_instances=1,
        rebuild="sync",
        random_state=0,
        partition="rq",
        n_levels=2,
        n_centroids=16,
    )
    transient = {}
    for n in (4096, 16384):
        X = rng.normal(size=(n, 64)).astype(np.float32)
        y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
        model = QSSClassifier(**params).fit(X, y)
        in_ram = _build_transient_bytes(model)  # one chunk: X's float intermediates grow with n
        keep_rows_on_disk(model, tmp_path / str(n), chunk_rows=1024)
        assert isinstance(model.engine_.rows.X, DiskRows)
        transient[n] = (in_ram, _build_transient_bytes(model))
        gone = schema_ids(model, 0)[:1] + outside_all_schemas(model)[:2]
        model.forget(gone)  # a rebuild streamed from the file, in 1,024-row chunks
        keep = np.flatnonzero(~np.isin(np.arange(n), gone))
        assert_same_model(QSSClassifier(**params).fit(X[keep], y[keep], ids=keep), model, X[:300])
    growth_in_ram = transient[16384][0] - transient[4096][0]
    growth_on_disk = transient[16384][1] - transient[4096][1]
    # A local build now streams its rows in chunks too (engine.builds.build_instances),
    # so in RAM the transient memory grows by far less than the extra rows' float64 features
    # (12288 · 64 · 8 bytes); from disk it must barely grow at all.
    assert growth_on_disk < 12288 * 64 * 8 / 16, transient
    assert growth_on_disk < growth_in_ram / 4, transient


def test_disk_rows_reads_writes_and_zeroes(tmp_path):
    rows = DiskRows.create(tmp_path, 3, 5)
    values = np.arange(15, dtype=np.float32).reshape(5, 3)
    rows[0:5] = values
    assert np.array_equal(rows[[4, 0, 1]], values[[4, 0, 1]])
    assert np.array_equal(rows[np.array([False, True, False, True, False])], values[[1, 3]])
    assert np.array_equal(rows[2], values[2]) and rows.shape == (5, 3)
    rows[np.array([1, 2])] = values[[3, 4]]
    rows[3:5] = 0
    raw = np.fromfile(rows.path, dtype="<f4").reshape(5, 3)
    assert np.array_equal(raw, np.array([values[0], values[3], values[4], [0] * 3, [0] * 3]))
    path = rows.path
    rows.close()
    assert not path.exists()


def test_is_distributed_input_without_dask_objects():
    assert not is_distributed_input(np.zeros((3, 2)))
    assert not is_distributed_input([[1.0, 2.0]])


# -- on a LocalCluster of 2 worker processes --------------------------------------------------
@pytest.fixture(scope="module")
def client():
    pytest.importorskip("dask", reason='dask not installed: pip install "forgetting[distributed]"')
    distributed = pytest.importorskip(
        "distributed", reason='distributed not installed: pip install "forgetting[distributed]"'
    )
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def _dask(X, chunks=700):
    import dask.array as da

    return da.from_array(X, chunks=(chunks, X.shape[1]))  # misaligned: fit rechunks


def test_fit_equals_local_and_forget_after(client):
    X, y = _data()
    ids = [f"user-{i}" for i in range(N)]
    local = QSSClassifier(random_state=0, rebuild="sync").fit(X, y, ids=ids)
    dist = fit_distributed(
        QSSClassifier(random_state=0, rebuild="sync"),
        _dask(X),
        _dask(y[:, None])[:, 0],
        ids,
        client=client,
        chunk_rows=CHUNK,
    )
    assert is_distributed_input(_dask(X))
    assert_same_model(local, dist, X)
    assert dist.audit_content()
    assert dist.engine_.row_work.client is client
    # forget outside every D° (fast path) and inside one D° (a rebuild on the workers)
    gone = outside_all_schemas(local)[:3] + schema_ids(local, 0)[:1]
    receipt_local, receipt_dist = local.forget(gone), dist.forget(gone)
    assert receipt_dist.instances_hit == receipt_local.instances_hit
    assert receipt_dist.instances_hit  # the D° row hit an instance: it was rebuilt
    assert_same_model(local, dist, X)
    keep = [i for i, row_id in enumerate(ids) if row_id not in set(gone)]
    refit = QSSClassifier(random_state=0).fit(X[keep], y[keep], ids=[ids[i] for i in keep])
    assert_same_model(refit, dist, X)


def test_dataframe_regressor_insert_and_background_rebuild(client, tmp_path):
    """Features kept on disk (rows_dir): inserts append to the file, and the background
    rebuilds they start read a file snapshot, chunk by chunk, on the workers."""
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, 4)).astype(np.float32)
    y = X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.1 * rng.normal(size=N)
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    first, extra = slice(0, 1800), slice(1800, N)
    model = fit_distributed(
        QSSRegressor(random_state=3, n_instances=2),
        dd.from_pandas(frame.iloc[first], npartitions=3),
        dd.from_pandas(pd.Series(y[first]), npartitions=3),
        client=client,
        chunk_rows=CHUNK,
        rows_dir=tmp_path,
    )
    assert isinstance(model.engine_.rows.X, DiskRows)
    assert list(model.feature_names_in_) == ["a", "b", "c", "d"]
    local = QSSRegressor(random_state=3, n_instances=2).fit(frame.iloc[first], y[first])
    assert_same_model(local, model, frame)
    # insert the rest chunk by chunk; D° rows among them rebuild in the background on dask
    receipts = insert_distributed(
        model, _dask(X[extra], 256), y[extra], ids=range(1800, N), chunk_rows=CHUNK
    )
    assert sum(r.n_rows for r in receipts) == N - 1800
    assert any(r.rebuild_started for r in receipts)  # some new rows landed in a D°
    model.wait_for_rebuilds(timeout=60)
    everything = QSSRegressor(random_state=3, n_instances=2).fit(frame, y)
    assert_same_model(everything, model, frame)


def test_bad_input_keeps_previous_fit(client):
    X, y = _data(n=2100)
    model = fit_distributed(QSSClassifier(random_state=0), _dask(X), y, chunk_rows=CHUNK)
    before = model.state_digest()
    broken = X.copy()
    broken[1500, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fit_distributed(model, _dask(broken), y, chunk_rows=CHUNK)
    with pytest.raises(ValueError, match="chunk_rows"):
        fit_distributed(model, _dask(X), y, chunk_rows=1000)
    with pytest.raises(ValueError, match="unique"):
        fit_distributed(model, _dask(X), y, ids=[0] * len(y), chunk_rows=CHUNK)
    assert model.state_digest() == before


def test_closed_client_rebuilds_locally(client):
    """A model outlives its cluster: with the client gone, rebuilds run in this process."""
    X, y = _data(n=2100)
    model = fit_distributed(
        QSSClassifier(random_state=0, rebuild="sync", n_instances=2), _dask(X), y, client=client
    )

    class Closed:
        status = "closed"

    model.engine_.row_work.client = Closed()
    model.forget(schema_ids(model, 1)[:1])
    local = QSSClassifier(random_state=0, n_instances=2, rebuild="sync").fit(X, y)
    local.forget(schema_ids(local, 1)[:1])
    assert_same_model(local, model, X)


def test_estimator_fit_hook(client):
    """Through ``est.fit(dask_array)``: the estimator hands a dask input to the cluster."""
    X, y = _data(n=2100)
    model = QSSClassifier(random_state=0).fit(_dask(X), y)
    assert_same_model(QSSClassifier(random_state=0).fit(X, y), model, X)
    assert model.engine_.row_work.client is not None


def test_progress_sees_every_chunk_once_and_changes_no_bit(client):
    """A callable hears of every chunk of both passes exactly once (pass 1: every row; pass 2:
    the labeled rows, per instance, instances in order), a tqdm-like bar gets one update per
    chunk; the fitted model is the one fitted without progress, bit for bit."""
    X, y = _data()
    y = y.copy()
    y[::7] = -1  # label mode: unlabeled rows are in pass 1 but not in pass 2
    params = {"random_state": 0, "n_instances": 2, "mode": "label"}
    plain = fit_distributed(QSSClassifier(**params), _dask(X), y, client=client, chunk_rows=CHUNK)
    events = []
    seen = fit_distributed(
        QSSClassifier(**params),
        _dask(X),
        y,
        client=client,
        chunk_rows=CHUNK,
        progress=events.append,
    )
    assert seen.state_digest() == plain.state_digest()
    assert_same_model(plain, seen, X)
    n_labeled = int(np.count_nonzero(y != -1))
    expected = [("pass 1", None, s, min(s + CHUNK, N)) for s in range(0, N, CHUNK)]
    for r in range(2):
        expected += [
            ("pass 2", r, s, min(s + CHUNK, n_labeled)) for s in range(0, n_labeled, CHUNK)
        ]
    got = [(e.stage, e.instance, e.start, e.stop) for e in events]
    assert sorted(got, key=str) == sorted(expected, key=str)  # each chunk once
    assert [e.done for e in events] == list(range(1, len(expected) + 1))
    assert {e.total for e in events} == {len(expected)}
    stages = [(e.stage, e.instance) for e in events]
    assert stages == sorted(stages, key=lambda s: (s[0], -1 if s[1] is None else s[1]))

    class Bar:  # the slice of tqdm's interface the fit uses
        total, n, descriptions = None, 0, []

        def update(self, k):
            self.n += k

        def set_description(self, text, refresh=True):
            self.descriptions.append(text)

    from forgetting.distributed import fit_progress

    bar = Bar()
    with fit_progress(bar):  # the path of estimator.fit(dask input), as the CLI fits
        hooked = QSSClassifier(**params)
        fit_distributed(hooked, _dask(X), y, chunk_rows=CHUNK)
    assert bar.n == bar.total == len(expected)
    assert bar.descriptions == ["pass 1", "pass 2, instance 0", "pass 2, instance 1"]
    assert hooked.state_digest() == plain.state_digest()
    with pytest.raises(TypeError, match="progress"):
        fit_distributed(QSSClassifier(**params), _dask(X), y, chunk_rows=CHUNK, progress=3)


# -- the row store keeps a fit's gathered columns (no second copy) -----------------------------
def _store(n_features=3, p=2):
    from forgetting.rows import RowStore
    from forgetting.schema.membership import MembershipRule

    return RowStore(n_features, p, MembershipRule(0.2, 5), np.int64)


def _columns(n, d=3, p=2, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(n, d)).astype(np.float32),
        rng.integers(0, 3, n).astype(np.int64),
        rng.random((n, p + 1)),
        rng.integers(0, 256, (n, 32), dtype=np.uint8),
    )


def test_an_empty_store_keeps_handed_over_columns_and_copies_the_rest():
    from forgetting.rows import hand_over

    n = 200
    X, t, draws, hashes = _columns(n)
    kept, copied = _store(), _store()
    ids = list(range(n))
    kept.append(ids, None, hand_over(X), hand_over(t), hand_over(draws), row_hash=hand_over(hashes))
    copied.append(ids, None, X.copy(), t.copy(), draws.copy(), row_hash=hashes.copy())
    for name, given in (("X", X), ("targets", t), ("draws", draws), ("row_hash", hashes)):
        assert np.shares_memory(getattr(kept, name), given), name
        assert type(getattr(kept, name)) is np.ndarray
        assert np.array_equal(getattr(kept, name), getattr(copied, name))
    assert kept.multiset_hash == copied.multiset_hash
    assert np.array_equal(kept.thresholds, copied.thresholds)
    # the store owns them now: a removal and an insert behave as on copied columns
    for store in (kept, copied):
        store.remove(np.array([0, 5, n - 1]))
        X2, t2, d2, h2 = _columns(10, seed=1)
        store.append(list(range(n, n + 10)), None, X2, t2, d2, row_hash=h2)
    for name in ("X", "targets", "draws", "row_hash", "serial", "in_pool"):
        assert np.array_equal(
            getattr(kept, name)[: kept.size], getattr(copied, name)[: copied.size]
        )
    assert kept.multiset_hash == copied.multiset_hash and kept.ids == copied.ids
    # not kept: a plain array, a wrong dtype, a non-empty store, a capacity above the rows
    store = _store()
    store.append(ids, None, X, hand_over(t.astype(np.int32)), hand_over(draws), row_hash=hashes)
    assert not np.shares_memory(store.X, X) and not np.shares_memory(store.row_hash, hashes)
    assert np.shares_memory(store.draws, draws) and store.targets.dtype == np.int64
    small = _store()
    Xs, ts, ds, hs = _columns(20)
    small.append(list(range(20)), None, hand_over(Xs), ts, ds, row_hash=hs)  # capacity 64
    assert not np.shares_memory(small.X, Xs) and small.capacity == 64
    small.append([99], None, hand_over(Xs[:1]), ts[:1], ds[:1], row_hash=hs[:1])
    assert not np.shares_memory(small.X, Xs)


def test_set_instance_rows_adopts_a_whole_fresh_build_only():
    from forgetting.content.fingerprint import Contributions

    n = 100
    X, t, draws, hashes = _columns(n)
    store = _store()
    store.append(list(range(n)), None, X, t, draws, row_hash=hashes)
    codes = np.arange(2 * n, dtype=np.uint16).reshape(n, 2)
    contrib = Contributions(codes, np.ones((n, 3), dtype="<i8"), hashes.copy())
    store.set_instance_rows(0, np.arange(n), contrib, adopt=True)
    assert store.codes[0] is codes
    store.set_instance_rows(1, np.arange(n), contrib)  # not given away: copied
    assert not np.shares_memory(store.codes[1], codes)
    part = Contributions(codes[:10].copy(), np.ones((10, 3), "<i8"), hashes[:10].copy())
    store.set_instance_rows(1, np.arange(10, 20), part, adopt=True)  # not every row: copied
    assert not np.shares_memory(store.codes[1], part.codes)
    assert np.array_equal(store.codes[1][10:20], part.codes)
    shuffled = np.arange(n)[::-1].copy()
    store.set_instance_rows(1, shuffled, contrib, adopt=True)  # not in order: copied
    assert np.array_equal(store.codes[1], codes[::-1])


def test_a_distributed_fit_hands_its_columns_to_the_store_not_the_callers_targets(client):
    """The store keeps pass 1's gathered arrays (views of them, no second copy); a regressor's
    targets that are the caller's own y are copied, so a forget never writes into y."""
    X, y = _data(n=2100)
    model = fit_distributed(QSSClassifier(random_state=0), _dask(X), y, chunk_rows=CHUNK)
    rows = model.engine_.rows
    assert all(getattr(rows, c).base is not None for c in ("X", "draws", "row_hash"))
    assert_same_model(QSSClassifier(random_state=0).fit(X, y), model, X)
    local_rows = QSSClassifier(random_state=0).fit(X, y).engine_.rows
    assert local_rows.X.base is None  # a local fit copies (the caller's X is the caller's)
    yr = X[:, 0].astype(np.float64) * 2.0 + 0.5
    before = yr.copy()
    reg = fit_distributed(QSSRegressor(random_state=0), _dask(X), yr, chunk_rows=CHUNK)
    assert not np.shares_memory(reg.engine_.rows.targets, yr)
    reg.forget(list(range(0, 2100, 3)))
    assert np.array_equal(yr, before)


@pytest.mark.parametrize("head", ["ridge", "newton", "shared-ridge"])
def test_a_large_insert_runs_on_the_workers_and_keeps_the_bits(client, monkeypatch, head):
    """An insert of ≥ REMOTE_INSERT_ROWS rows into a model fitted on the cluster computes its
    rows' contributions and head sums on the workers (only the head's (D, D) sums per chunk
    come back): the model equals a local fit on the same rows, and forgets like it after.
    The inserted rows are rows forgotten first (outside every D°), so no instance rebuilds
    and every instance takes the workers' path."""
    from forgetting.engine import core

    monkeypatch.setattr(core, "REMOTE_INSERT_ROWS", 64)
    X, y = _data()
    ids = list(range(N))
    params = dict(random_state=0, rebuild="sync", head=head)
    model = fit_distributed(
        QSSClassifier(**params), _dask(X), y, ids, client=client, chunk_rows=CHUNK
    )
    back = outside_all_schemas(model)[:300]
    model.forget(back)
    work = model.engine_.row_work
    calls = []
    original = work.map_chunks
    monkeypatch.setattr(
        work, "map_chunks", lambda *a: calls.append(len(a[-1])) or original(*a), raising=False
    )
    receipt = model.insert(X[back], y[back], back)
    assert not receipt.instances_hit
    assert calls == [len(back)] * model.n_instances  # every instance's rows went out
    local = QSSClassifier(**params).fit(X, y, ids)
    assert_same_model(local, model, X)
    gone = outside_all_schemas(local)[300:304]
    local.forget(gone)
    model.forget(gone)
    assert_same_model(local, model, X)
