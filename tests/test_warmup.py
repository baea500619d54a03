"""forgetting.warmup: after it, the first fit, forget and prediction on a machine compile
nothing (every kernel they run is in numba's on-disk cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

WORKLOAD = r"""
import json, numpy as np
from forgetting import QSSClassifier
from forgetting.bench.core import SECRET_KEY, clustered_data
from forgetting.bench.costs import schema_rank
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
from forgetting.content import head
head.TABLES_GAIN_FACTOR = 50.0
model = QSSClassifier(random_state=0, secret_key=SECRET_KEY).fit(X, y, ids)
for row in order[-10:-5].tolist():
    model.forget([row])
    model.predict(X[:1])
assert model.engine_._gram_cache.gains.engaged(), "the filter did not engage: nothing checked"
print(json.dumps({k: v[1] for k, v in kernel_stats().items()}))
"""


def test_after_the_warm_up_a_fresh_process_compiles_no_kernel(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    for name in ("FORGETTING_KERNELS", "FORGETTING_HASH_BACKEND"):
        env.pop(name, None)
    warm = subprocess.run(
        [sys.executable, "-m", "forgetting.warmup"], env=env, capture_output=True, text=True
    )
    assert warm.returncode == 0, warm.stderr
    assert "signatures compiled" in warm.stdout
    run = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    compiled = json.loads(run.stdout.strip().splitlines()[-1])
    assert compiled, "the workload ran no kernel: it checks nothing"
    assert {k: v for k, v in compiled.items() if v} == {}


def test_the_warmup_command_explains_itself(capsys):
    import pytest

    from forgetting.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["warmup", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "forgetting warmup" in out and "NUMBA_CACHE_DIR" in out and len(out) > 300
    listed = subprocess.run(
        [sys.executable, "-m", "forgetting", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "warmup" in listed.stdout
