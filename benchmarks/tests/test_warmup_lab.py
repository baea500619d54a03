"""forgetting.warmup (tests/warmup/test_warmup.py) checked on workloads: after the warm-up, a
fresh process's first fits, forgets and predictions (bench.core's shape from the lab, and the
exact forest's every family) compile nothing: every kernel they run is in numba's on-disk
cache. The warm-up compiles every kernel from scratch here: minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

WORKLOAD = r"""
import json, numpy as np
from forgetting import QSSClassifier
from forgetting_lab.bench.core import SECRET_KEY, clustered_data
from forgetting_lab.bench.costs import schema_rank
from forgetting.warmup import kernel_stats

# bench.core's shape at a size where the library picks its kernels by itself (no forcing)
X, y = clustered_data(20000, d=32)
ids = list(range(len(y)))
model = QSSClassifier(random_state=0, secret_key=SECRET_KEY).fit(X, y, ids)
model.predict(X[:1])
order = np.argsort(schema_rank(ids, 3, 0, SECRET_KEY))
for row in order[-3:].tolist() + order[:1].tolist():
    model.forget([row])
    model.predict(X[:1])
model.wait_for_rebuilds()
model.forget(order[-600:-100].tolist())
model.predict(X[:100])

# where the tables beat the head (large data, e.g. bench.core at 300k) the gain filter's
# kernels run: the same here with the rule's factor raised
from forgetting.content.tables import flat_content
flat_content.TABLES_GAIN_FACTOR = 50.0
model = QSSClassifier(random_state=0, secret_key=SECRET_KEY).fit(X, y, ids)
for row in order[-10:-5].tolist():
    model.forget([row])
    model.predict(X[:1])
assert model.engine_._gram_cache.gains.engaged(), "the filter did not engage: nothing checked"
print(json.dumps({k: v[1] for k, v in kernel_stats().items()}))
"""


FOREST_WORKLOAD = r"""
import json, numpy as np
from forgetting import ExactForestClassifier, ExactForestRegressor
from forgetting.warmup import kernel_stats

# the forest's every family at sizes and settings other than the warm-up's, NaNs included
rng = np.random.default_rng(11)
X = rng.normal(size=(3000, 12))
X[rng.random(X.shape) < 0.03] = np.nan
y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 0).astype(int)
t = np.nan_to_num(X[:, 0]) * 3.0 - np.nan_to_num(X[:, 2])
for p in (1, 3):
    for cls, target in ((ExactForestClassifier, y), (ExactForestRegressor, t)):
        model = cls(n_estimators=10, n_instances=p, random_state=1, secret_key=b"k" * 16)
        model.fit(X[:2800], target[:2800], list(range(2800)))
        model.predict(X[:1])
        pool = set(model.pool_ids_)
        outside = [i for i in range(2800) if i not in pool]
        for row in outside[:3] + [min(pool)]:  # three one-row forgets, then a D° hit
            model.forget([row])
            model.predict(X[:1])
        model.wait_for_rebuilds()
        model.forget(outside[3:500])  # a batch
        model.predict(X[:2])
        model.predict(X[:500])
        model.insert(X[2800:2801], target[2800:2801], ["new"])
        model.predict(X[:1])
        model.insert(X[2801:], target[2801:], [f"n{i}" for i in range(2801, 3000)])
        model.predict(X[:100])
print(json.dumps(kernel_stats()))
"""


@pytest.mark.slow  # compiles every kernel from scratch: minutes
def test_after_the_warm_up_a_fresh_process_compiles_no_kernel(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    for name in ("FORGETTING_KERNELS", "FORGETTING_HASH_BACKEND"):
        env.pop(name, None)
    warm = subprocess.run(
        [sys.executable, "-m", "forgetting.warmup"], env=env, capture_output=True, text=True
    )
    assert warm.returncode == 0, warm.stderr
    assert "signatures compiled" in warm.stdout
    # progress: one line per workload, each with its time, on stderr
    steps = [line for line in warm.stderr.splitlines() if "warm-up " in line]
    assert len(steps) == 10 and steps[-1].startswith("  warm-up 10/10")
    assert all(step.endswith(" s") for step in steps)
    assert any("exact forest regressor, 3 instances" in step for step in steps)
    run = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    compiled = json.loads(run.stdout.strip().splitlines()[-1])
    assert compiled, "the workload ran no kernel: it checks nothing"
    assert {k: v for k, v in compiled.items() if v} == {}
    # the exact forest: fit, forgets, inserts and predictions of each family compile nothing
    run = subprocess.run(
        [sys.executable, "-c", FOREST_WORKLOAD], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    stats = json.loads(run.stdout.strip().splitlines()[-1])
    ran = {name.split(".")[0] for name in stats}
    assert {"_grower", "_updates", "_batches", "_stale", "_predictor"} <= ran, stats
    assert {name: misses for name, (_, misses) in stats.items() if misses} == {}
