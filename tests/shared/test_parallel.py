"""Per-instance work on threads (forgetting._parallel): same bits as one after the other."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from forgetting import QSSClassifier, _parallel


@pytest.fixture
def threads(monkeypatch):
    """Force a given number of pool threads whatever this machine's cores (CI has 2)."""

    def use(workers: int) -> None:
        monkeypatch.setattr(_parallel, "worker_count", lambda: workers)

    return use


def test_map_keeps_order_and_runs_on_several_threads(threads):
    threads(2)
    seen: set[str] = set()
    barrier = threading.Barrier(2, timeout=10)

    def work(i: int) -> int:
        seen.add(threading.current_thread().name)
        if i < 2:
            barrier.wait()  # both first items must run at the same time, or this times out
        return i * i

    assert _parallel.map_instances(work, range(7)) == [i * i for i in range(7)]
    assert len(seen) == 2


def test_map_reraises_the_first_error_after_the_others_end(threads):
    threads(2)
    finished = []

    def work(i: int) -> int:
        if i == 1:
            raise ValueError("item 1 failed")
        finished.append(i)
        return i

    with pytest.raises(ValueError, match="item 1 failed"):
        _parallel.map_instances(work, range(3))


def test_a_map_does_not_wait_behind_other_work_on_the_pool(threads):
    """With every pool thread busy elsewhere (a background rebuild's fit), the caller runs
    all the items itself and returns: its queued helper is cancelled, not waited for."""
    threads(1)
    pool = _parallel._pool(1)
    release = threading.Event()
    busy = [pool.submit(release.wait, 30) for _ in range(pool._max_workers)]
    try:
        done = []
        caller = threading.Thread(
            target=lambda: done.append(_parallel.map_instances(abs, [-1, -2, -3]))
        )
        caller.start()
        caller.join(5)
        assert done == [[1, 2, 3]]
        assert not any(f.done() for f in busy)  # the other work still holds the pool
    finally:
        release.set()
        for f in busy:
            f.result(30)


def test_nested_calls_run_inline(threads):
    threads(1)  # one pool thread: a nested call that waited on the pool would deadlock

    def outer(i: int) -> list[int]:
        return _parallel.map_instances(lambda j: i * 10 + j, range(3))

    assert _parallel.map_instances(outer, range(3)) == [[0, 1, 2], [10, 11, 12], [20, 21, 22]]


def _data(n: int = 3000, d: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(6, d))
    label = rng.integers(0, 6, size=n)
    X = (centers[label] + rng.normal(scale=1.0, size=(n, d))).astype(np.float32)
    return X, label % 3


def _run(X, y, ids, gone, new_ids):
    model = QSSClassifier(rho=0.05, random_state=0).fit(X[:-400], y[:-400], ids[:-400])
    model.insert(X[-400:], y[-400:], new_ids)  # ≥ PARALLEL_ROWS rows: per-instance threads
    model.forget(gone)
    model.wait_for_rebuilds()
    return model


def test_parallel_fit_insert_forget_equal_serial_and_refit(threads):
    X, y = _data()
    ids = np.arange(len(X))
    rng = np.random.default_rng(3)
    gone = rng.choice(ids, size=600, replace=False)  # hits D° rows too: rebuilds
    assert len(gone) >= _parallel.PARALLEL_ROWS
    new_ids = ids[-400:]
    threads(0)
    serial = _run(X, y, ids, gone, new_ids)
    threads(2)
    parallel = _run(X, y, ids, gone, new_ids)
    keep = np.setdiff1d(ids, gone)
    refit = QSSClassifier(rho=0.05, random_state=0).fit(X[keep], y[keep], keep)
    assert parallel.state_digest() == serial.state_digest() == refit.state_digest()
    probe = X[:500]  # ≥ PARALLEL_ROWS rows: encoded and combined one instance per thread
    assert np.array_equal(parallel.predict_proba(probe), serial.predict_proba(probe))
    assert np.array_equal(parallel.predict_proba(probe), refit.predict_proba(probe))
    threaded = parallel.predict_proba(probe)
    threads(0)
    assert np.array_equal(parallel.predict_proba(probe), threaded)  # the same bits inline


def test_a_forked_child_gets_its_own_pool(threads):
    """A child forked after the pool started has none of its threads: it must start a new
    pool, not queue work on the parent's (which would never run)."""
    import multiprocessing

    threads(1)
    assert _parallel.map_instances(lambda i: i + 1, range(3)) == [1, 2, 3]  # pool started
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        result = pool.apply_async(_child_map).get(timeout=30)
    assert result == [0, 2, 4]


def _child_map() -> list[int]:
    _parallel.worker_count = lambda: 1  # the child's own count (the fixture's patch is gone)
    return _parallel.map_instances(lambda i: 2 * i, range(3))
