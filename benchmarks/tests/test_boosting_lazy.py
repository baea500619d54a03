"""forgetting_lab.bench.boosting_lazy: the lazy cascade forgets bitwise what a refit without the
rows gives (structures, leaf values, sums, statistics, every row's score), through stages whose
structure flips too, and a planted bug (one stage skips the moved rows) is caught."""

from __future__ import annotations

import numpy as np
import pytest

from forgetting_lab.bench import boosting_lazy_cascade as lazy


def _table(n: int = 700, d: int = 6, seed: int = 0) -> tuple[lazy.Data, np.ndarray]:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 12, (n, d)).astype(np.uint8)
    y = (codes[:, 0].astype(np.int64) + codes[:, 1] + rng.integers(0, 8, n)) > 14
    return lazy.Data(codes, y.astype(np.int64), np.ones(n, bool)), np.full(d, 12, np.int64)


CFGS = {
    "all-bins, coarse": lazy.Cfg(3, 0, 20, 1.0, 0.1, 1 / 16, 64.0),
    "K=5, fine": lazy.Cfg(3, 5, 10, 1.0, 0.1, 1 / 64, 4096.0),
    "depth 2, finest": lazy.Cfg(2, 0, 5, 1.0, 0.3, 1 / 256, 4096.0),
}


def _refit(data: lazy.Data, cfg: lazy.Cfg, geo: lazy.Geo) -> lazy.Model:
    return lazy.fit(lazy.Data(data.codes, data.y, data.alive.copy()), cfg, geo)


@pytest.mark.parametrize("name", list(CFGS))
def test_forget_equals_a_refit_without_the_rows(name):
    cfg = CFGS[name]
    data, nbins = _table()
    geo = lazy.make_geo(nbins, cfg, 25, seed=3)
    model = lazy.fit(data, cfg, geo)
    mv = lazy.new_moved(len(data.y))
    total = np.zeros(lazy.N_COUNTERS, np.int64)
    for row in np.random.default_rng(1).choice(len(data.y), 8, replace=False):
        total += lazy.forget(data, model, int(row), cfg, geo, mv)
        assert lazy.same_model(model, _refit(data, cfg, geo), data)
        assert mv.size[0] == 0 and not mv.inset.any()
    # the test exercised the cascade: leaf values changed and rows moved
    assert total[lazy.C_LEAF_CHANGES] > 0 and total[lazy.C_MOVED_SUM] > 0
    if name != "all-bins, coarse":
        assert total[lazy.C_REFITS] > 0  # and a stage whose structure flipped was refitted
    with pytest.raises(ValueError, match="not in the model"):
        lazy.forget(data, model, int(np.flatnonzero(~data.alive)[0]), cfg, geo, mv)


def test_a_stage_that_skips_the_moved_rows_is_caught():
    cfg = CFGS["K=5, fine"]
    data, nbins = _table()
    geo = lazy.make_geo(nbins, cfg, 25, seed=3)
    model = lazy.fit(data, cfg, geo)
    mv = lazy.new_moved(len(data.y))
    caught = 0
    for row in np.random.default_rng(1).choice(len(data.y), 6, replace=False):
        copy = lazy.Model(*[a.copy() for a in model])
        alive = data.alive.copy()
        honest = lazy.forget(lazy.Data(data.codes, data.y, alive), copy, int(row), cfg, geo, mv)
        if honest[lazy.C_MOVED_SUM] == 0:
            continue
        mv.skip[0] = 20  # a late stage: few later refits could hide the omission
        lazy.forget(data, model, int(row), cfg, geo, mv)
        mv.skip[0] = -1
        caught += not lazy.same_model(model, _refit(data, cfg, geo), data)
        model = copy
        data.alive[:] = alive
    assert caught > 0
