"""Shared fixtures and helpers of the library's and the lab's tests: small, fast datasets,
helpers to reach D° membership, stores on each backend. `from helpers import ...` from any
test folder (`tests/` is on pytest's `pythonpath`); the conftest.py files register its
fixtures. The lab's own helpers are in benchmarks/tests/lab_helpers.py."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from sklearn.datasets import make_classification, make_regression

FAST = dict(rho=0.25, n_instances=3, n_levels=2, n_centroids=8, rebuild="sync", random_state=0)


def source_missing(err: Exception) -> None:
    """Skip a test whose data source or encoder package is not installed -- or fail it when CI
    asked for every source (FORGETTING_REQUIRE_DATA=1), so a broken install never turns into
    silently skipped coverage."""
    if os.environ.get("FORGETTING_REQUIRE_DATA") == "1":
        pytest.fail(f"FORGETTING_REQUIRE_DATA=1 but a source is missing: {err}")
    pytest.skip(str(err))


def classification_data(n=240, d=6, k=3, seed=0):
    X, y = make_classification(
        n_samples=n,
        n_features=d,
        n_informative=4,
        n_redundant=0,
        n_classes=k,
        n_clusters_per_class=1,
        random_state=seed,
    )
    return X, y


def regression_data(n=240, d=5, seed=0):
    X, y = make_regression(n_samples=n, n_features=d, noise=5.0, random_state=seed)
    return X, y


def schema_ids(model, instance):
    """Ids currently in D° of ``instance`` (tests only: this is secret in production)."""
    rows = model.engine_.rows
    members = rows.members(instance)
    return [rows.ids[i] for i in np.flatnonzero(members)]


def outside_all_schemas(model):
    rows = model.engine_.rows
    inside = np.zeros(rows.size, dtype=bool)
    for r in range(model.n_instances):
        inside |= rows.members(r)
    return [rows.ids[i] for i in np.flatnonzero(~inside)]


def assert_same_model(a, b, X):
    """Bitwise equality of predictions (every instance) and of the state digest."""
    assert a.state_digest() == b.state_digest()
    for r in range(a.n_instances):
        pa = a.engine_.predict_outputs(np.asarray(X, np.float32), instance=r)
        pb = b.engine_.predict_outputs(np.asarray(X, np.float32), instance=r)
        assert np.array_equal(pa, pb), f"instance {r} differs"
    if hasattr(a, "predict_proba"):
        assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    assert np.array_equal(a.predict(X), b.predict(X))


def raw_table(n: int = 600, seed: int = 0):
    """A raw DataFrame (numeric, boolean, categorical and string columns, missing values, a
    category with one row) and its class and regression targets (tests/estimators/
    test_estimator_tables.py, tests/store/test_store_tables.py)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "age": rng.normal(40, 12, n),
            "visits": rng.integers(0, 9, n).astype(float),
            "city": pd.Categorical(rng.choice(["Oslo", "Paris", "Rome"], n)),
            "plan": rng.choice(["basic", "plus", "pro", "team"], n).astype(object),
            "member": rng.random(n) < 0.4,
        }
    )
    df.loc[rng.random(n) < 0.05, "age"] = np.nan
    df.loc[rng.random(n) < 0.05, "plan"] = None
    df.loc[11, "plan"] = "only-once"  # a category with one row
    df.loc[12, "visits"] = np.nan  # the only missing value of "visits"
    signal = (df["age"].fillna(40) > 40).to_numpy() ^ (df["city"] == "Oslo").to_numpy()
    y_class = np.where(signal, "yes", "no")
    y_reg = df["age"].fillna(40).to_numpy() / 10 + (df["plan"] == "pro").to_numpy() * 2.0
    return df, y_class, y_reg + rng.normal(0, 0.1, n)


def assert_same(model, other, X):
    """``model`` (after its rebuilds) and ``other``: the same state digest and outputs on ``X``."""
    model.wait_for_rebuilds()
    assert model.state_digest() == other.state_digest()
    out = model.predict_proba if hasattr(other, "predict_proba") else model.predict
    ref = other.predict_proba if hasattr(other, "predict_proba") else other.predict
    assert np.array_equal(out(X), ref(X))


@pytest.fixture
def clf_data():
    return classification_data()


@pytest.fixture
def reg_data():
    return regression_data()


def postgres_dsn() -> str:
    """The throwaway PostgreSQL the store tests run against (``.ci/postgres.sh``); skipped
    without one, or failed when CI requires it (FORGETTING_REQUIRE_POSTGRES=1)."""
    dsn = os.environ.get("FORGETTING_TEST_POSTGRES_DSN")
    if dsn:
        return dsn
    if os.environ.get("FORGETTING_REQUIRE_POSTGRES") == "1":
        pytest.fail("FORGETTING_TEST_POSTGRES_DSN is not set; start one with .ci/postgres.sh")
    pytest.skip('no PostgreSQL: eval "$(bash .ci/postgres.sh)" to run these tests too')


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path):
    """A store location for each backend (the same tests run on both)."""
    if request.param == "postgres":
        return postgres_dsn()
    return str(tmp_path / "model.db")


def user_ids(n: int) -> list[str]:
    return [f"user-{i:05d}" for i in range(n)]


@pytest.fixture
def compiled():
    """The compiled kernels forced on for the test (numba is a core dependency: they must
    load)."""
    from forgetting.content import kernels

    with kernels.using("numba"):
        assert kernels.backend(1) == "numba"
        yield


@pytest.fixture
def use_kernels():
    """``forgetting.content.kernels.use`` for the test (``use_kernels("numpy")``,
    ``use_kernels(hashing="hashlib")``); the previous choices are restored after it."""
    from forgetting.content import kernels

    before = kernels.settings()
    yield kernels.use
    kernels.use(before["kernels"], hashing=before["hashing"])


def with_kernels(backend: str, fn):
    """``fn()`` with the kernels set to ``backend`` ("numba" or "numpy"), restored after."""
    from forgetting.content import kernels

    with kernels.using(backend):
        return fn()


def wait_until(condition, seconds: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


WRITES = {"forgetting rows", "inserting rows", "writing forgets and inserts"}
"""What DurableModel's write transactions say they are doing (forgets, inserts, both)."""


class HeldCommits:
    """Counts the write transactions and holds the first one open until ``release``: the
    callers that come meanwhile queue behind it (DurableModel.forget's group commit)."""

    def __init__(self, monkeypatch, fail_after_first: bool = False):
        from forgetting.store.errors import StoreError
        from forgetting.store.sql import SQLStore

        self.entered, self.release = threading.Event(), threading.Event()
        self.commits = 0
        original = SQLStore.transaction

        def counted(store, doing="writing to the store"):
            if doing in WRITES:
                self.commits += 1
                if self.commits == 1:
                    self.entered.set()
                    assert self.release.wait(30)
                elif fail_after_first:
                    raise StoreError("simulated: the disk is full")
            return original(store, doing)

        monkeypatch.setattr(SQLStore, "transaction", counted)


ARRAY_API_CHECK = "check_array_api_input"
"""scikit-learn's check that array-API dispatch changes nothing: it runs only when
SCIPY_ARRAY_API=1 was set before scipy was imported, a process-wide switch the rest of the suite
must not see, so in the suite's process it would always skip."""


def _check_name(value) -> str:
    check = (value.values if hasattr(value, "values") else value)[1]
    return getattr(check, "func", check).__name__


def sklearn_checks(estimators, **kwargs):
    """``parametrize_with_checks(estimators, **kwargs)`` less :data:`ARRAY_API_CHECK`, which
    :func:`array_api_checks_run` runs in a fresh interpreter instead."""
    from sklearn.utils.estimator_checks import parametrize_with_checks

    marker = parametrize_with_checks(estimators, **kwargs)
    argnames, argvalues = marker.args
    kept = [value for value in argvalues if _check_name(value) != ARRAY_API_CHECK]
    return pytest.mark.parametrize(argnames, kept, **marker.kwargs)


def array_api_checks_run(setup: str, estimators: str) -> tuple[int, int]:
    """(how many :data:`ARRAY_API_CHECK` scikit-learn yields for ``estimators``, how many of them
    pass in a fresh interpreter with SCIPY_ARRAY_API=1). ``estimators``: a Python expression
    for the list, evaluated after the statements ``setup``."""
    from sklearn.utils.estimator_checks import estimator_checks_generator

    namespace: dict = {}
    exec(setup, namespace)
    expected = sum(
        _check_name(pair) == ARRAY_API_CHECK
        for estimator in eval(estimators, namespace)
        for pair in estimator_checks_generator(estimator)
    )
    code = (
        f"{setup}\n"
        "from sklearn.utils.estimator_checks import estimator_checks_generator\n"
        "ran = 0\n"
        f"for estimator in {estimators}:\n"
        "    for est, check in estimator_checks_generator(estimator):\n"
        f"        if getattr(check, 'func', check).__name__ == {ARRAY_API_CHECK!r}:\n"
        "            check(est)\n"
        "            ran += 1\n"
        "print(ran)\n"
    )
    env = {**os.environ, "SCIPY_ARRAY_API": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return expected, int(done.stdout.split()[-1])
