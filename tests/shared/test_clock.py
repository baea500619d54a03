"""A receipt's seconds measure the operation, not numba compiling a kernel meanwhile
(forgetting._clock; issue 72: a first forget on a fresh machine kept "took: 218581.3 ms").
No wall-clock thresholds: the tests check how the clock's figures relate to each other."""

from __future__ import annotations

import threading
import time

import numba
import numpy as np

from forgetting import QSSClassifier, _clock
from forgetting.engine import core as engine_core


def _fresh_kernel():
    """A kernel no process has compiled (a new function object: numba compiles it on its
    first call, without a disk cache)."""

    @numba.njit(cache=False)
    def kernel(x):
        total = 0.0
        for i in range(x.shape[0]):
            total += np.sin(x[i]) * np.cos(x[i])
        return total

    return kernel


def test_elapsed_leaves_out_this_threads_compilations():
    kernel = _fresh_kernel()
    before = _clock.compiling_seconds()
    wall = time.perf_counter()
    started = _clock.start()
    kernel(np.arange(4.0))
    took = _clock.elapsed(started)
    total = time.perf_counter() - wall
    compiled = _clock.compiling_seconds() - before
    assert compiled > 0.0
    assert 0.0 <= took < total - compiled + 1e-9
    again = _clock.start()
    kernel(np.arange(4.0))  # compiled now: nothing left out
    assert _clock.compiling_seconds() - before == compiled
    assert _clock.elapsed(again) > 0.0


def test_another_threads_compilation_is_not_this_threads():
    mine = _clock.compiling_seconds()
    thread = threading.Thread(target=lambda: _fresh_kernel()(np.arange(3.0)))
    thread.start()
    thread.join()
    assert _clock.compiling_seconds() == mine


def test_a_forget_whose_kernel_compiles_reports_the_operation(monkeypatch):
    X = np.random.default_rng(0).normal(size=(300, 5))
    y = (X[:, 0] > 0).astype(int)
    model = QSSClassifier(rho=0.2, rebuild="sync", random_state=0).fit(X, y)
    kernel = _fresh_kernel()
    real = engine_core.QSSEngine._hits

    def hits(self, *args, **kwargs):
        kernel(np.arange(5.0))  # a compilation inside the forget, as on a fresh machine
        return real(self, *args, **kwargs)

    monkeypatch.setattr(engine_core.QSSEngine, "_hits", hits)
    before = _clock.compiling_seconds()
    wall = time.perf_counter()
    receipt = model.forget([7])
    total = time.perf_counter() - wall
    compiled = _clock.compiling_seconds() - before
    assert compiled > 0.0
    assert receipt.seconds < total - compiled + 1e-9
