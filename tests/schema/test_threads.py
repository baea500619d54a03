"""A model's bits never depend on how many threads BLAS runs with.

Found by the README's demo: a background rebuild trained its schema (LDA, logistic g) while
the main thread was inside a prediction, which pins BLAS to one thread process-wide; LAPACK's
eigensolver and the logistic fit round differently on one thread than on two, so the rebuilt
schema — and the state digest — differed from a refit's. Schemas are now trained on one BLAS
thread always.
"""

import numpy as np
from threadpoolctl import threadpool_limits

from forgetting import QSSClassifier


def _data(n=600, d=256, k=10, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, d))
    y = rng.integers(0, k, n)
    return (centers[y] + rng.normal(scale=2.0, size=(n, d))).astype(np.float32), y


def test_schema_training_does_not_depend_on_the_blas_thread_count():
    X, y = _data()
    params = dict(rho=0.5, n_instances=2, random_state=0, lda=True, secret_key="threads")
    digests = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            model = QSSClassifier(**params).fit(X, y, list(range(len(y))))
        digests.append(model.state_digest())
    assert digests[0] == digests[1]


def test_a_schema_trained_in_a_background_thread_equals_the_main_thread_s():
    """Background rebuilds train schemas in a worker thread. threadpoolctl lets only the first
    thread that limited OpenBLAS change its (process-wide) thread count, so a worker's limit
    was silently ignored and its logistic g was fitted on two threads: different bits from a
    refit in the main thread."""
    import threading

    from forgetting.schema import SchemaConfig, train_schema

    X, y = _data(n=311, d=784)
    model = QSSClassifier(rho=0.5, n_instances=1, random_state=0, secret_key="t").fit(
        X[:200], y[:200], list(range(200))
    )
    config: SchemaConfig = model.engine_.config.schema
    folds = (np.arange(len(y)) % 2).astype(np.int64)
    main = train_schema(config, X, y, None, 7, folds)
    out = {}
    worker = threading.Thread(
        target=lambda: out.setdefault("schema", train_schema(config, X, y, None, 7, folds))
    )
    worker.start()
    worker.join()
    assert out["schema"].digest() == main.digest()
