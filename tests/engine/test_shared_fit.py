"""A fit computes the work its instances' shared input heads have in common once
(forgetting.engine.builds.build_instances): the head features v and the Gram sums
Σ v vᵀ, adopted by every instance. The model must be the one the per-instance builds make,
bit for bit, for every head — with several chunks running side by side, the last one short."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_model, schema_ids

from forgetting import QSSClassifier, QSSRegressor
from forgetting._rowwise import HEAD_BLOCK_ROWS
from forgetting.content.heads import LinearHead, fold_grams, head_features
from forgetting.engine import QSSEngine
from forgetting.engine import builds as chunks_module
from forgetting.engine.builds import LocalRowWork, build_instance
from forgetting.instance import build_instance as build_in_one_piece

N = 2600  # three chunks of 1,024 rows (the last one short), above PARALLEL_ROWS
PARAMS = dict(rho=0.1, n_instances=3, partition="trees", rebuild="sync", random_state=1)
HEADS = ["shared-ridge", "shared-rf", "ridge", "newton", "none"]


def data(task: str, n: int = N, d: int = 12, seed: int = 0):
    """Labels from a noisy score, linear plus a curved part: the heads have something to
    serve (and on some instances the tables win: both kinds of instance are compared)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    score = X @ rng.normal(size=(d, 3)) + np.tanh(X[:, :3]) * 2 + 0.7 * rng.normal(size=(n, 3))
    if task == "classification":
        return X, score.argmax(axis=1)
    return X, score[:, 0] * 10.0


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of BLOCK_ROWS rows in the shared pass: several per fit, run side by side."""
    monkeypatch.setattr(chunks_module, "PASS_CHUNK_BYTES", 1)


def one_by_one(monkeypatch):
    """Fits build every instance on its own, as before the shared pass: the reference."""

    def build_all(self, data, each):
        cfg = self.config
        built = [
            build_instance(
                cfg.schema, data, r, cfg.random_state, cfg.label_mode, work=LocalRowWork()
            )
            for r in range(cfg.n_instances)
        ]
        for instance, _, _ in built:
            instance.refresh()
        return built

    monkeypatch.setattr(QSSEngine, "_build_all", build_all)


def fit(cls, X, y, **params):
    return cls(**{**PARAMS, **params}).fit(X, y, list(range(len(y))))


CASES = [
    *(("classification", {"head": head}) for head in HEADS),
    *(("regression", {"head": head}) for head in HEADS if head != "newton"),
    ("classification", {"head": "none", "partition": "rq"}),  # a codebook's accumulators
    ("classification", {"head": "shared-rf", "mode": "label"}),
]


@pytest.mark.parametrize(
    ("task", "params"), CASES, ids=[f"{t[:3]}-{'-'.join(map(str, p.values()))}" for t, p in CASES]
)
def test_a_fit_equals_the_one_by_one_builds(monkeypatch, task, params):
    X, y = data(task)
    if params.get("mode") == "label":
        y = y.copy()
        y[::3] = -1  # a third of the rows unlabeled: only labeled rows are accumulated
    head = params["head"]
    cls = QSSClassifier if task == "classification" else QSSRegressor
    model = fit(cls, X, y, **params)
    engine = model.engine_
    rows = engine._row_data(copy=False)
    for r, inst in enumerate(engine.instances):
        one, pos, contrib = build_in_one_piece(
            engine.config.schema, rows, r, engine.config.random_state, engine.config.label_mode
        )
        assert inst.digest() == one.digest()
        assert inst.accumulators.equals(one.accumulators)
        assert (inst.head is None) == (head == "none")
        if inst.head is not None:
            assert inst.head.equals(one.head)
        stored = engine.rows.contributions(r, pos)  # what later deletions subtract
        for field in ("codes", "residuals", "digests"):
            assert np.array_equal(getattr(stored, field), getattr(contrib, field))
    with monkeypatch.context() as m:
        one_by_one(m)
        reference = fit(cls, X, y, **params)
    assert_same_model(model, reference, X[:400])
    # a D° hit afterwards: the rebuilt instance (adopting a sibling's Gram where the head is
    # shared) and the others equal the one-by-one model after the same deletion
    hit = schema_ids(model, 0)[:1]
    model.forget(hit)
    reference.forget(hit)
    assert_same_model(model, reference, X[:400])


@pytest.mark.parametrize("head", ["shared-ridge", "shared-rf"])
def test_every_instance_holds_the_gram_of_its_own_rows_once_computed(monkeypatch, head):
    """Each instance's Gram sums equal Σ v vᵀ recomputed from its own schema's head features
    over every row (what it would hold had it computed them), in arrays of its own; the pass
    computed them once — one Gram per chunk, not one per chunk and instance — and every
    instance adopted them."""
    X, y = data("classification")
    grams, adopted = [], []
    real_fold_grams, real_adopt = chunks_module.fold_grams, LinearHead.adopt_gram
    monkeypatch.setattr(
        chunks_module, "fold_grams", lambda v, f: grams.append(len(v)) or real_fold_grams(v, f)
    )
    monkeypatch.setattr(
        LinearHead, "adopt_gram", lambda self, g, c: adopted.append(self) or real_adopt(self, g, c)
    )
    model = fit(QSSClassifier, X, y, head=head)
    heads = [inst.head for inst in model.engine_.instances]
    assert sorted(grams) == sorted([1024, 1024, N - 2048])  # the chunks, each once
    assert len(adopted) == 3 and all(any(h is a for a in adopted) for h in heads)
    rows = model.engine_._row_data(copy=False)
    labeled = np.flatnonzero(rows.labeled)
    folds = rows.folds[labeled]
    Xl = np.asarray(X[labeled], dtype=np.float32)
    for inst in model.engine_.instances:
        v = head_features(inst.schema.head_inputs(Xl, HEAD_BLOCK_ROWS), np.float64)
        own = fold_grams(v, folds)
        for f in (0, 1):
            assert np.array_equal(inst.head.gram[f], own[f])
        assert np.array_equal(inst.head.counts, [np.sum(folds == 0), np.sum(folds == 1)])
    # shared (read-only) or not, a change of one head's sums is not another's
    heads[0]._own_gram()[0, 0, 0] += 1
    assert heads[1].gram[0, 0, 0] == heads[0].gram[0, 0, 0] - 1


def test_a_pass_refuses_a_gram_over_other_rows():
    """A rebuild's pass adopts a sibling's Gram only over the same rows (the counts check)."""
    X, y = data("classification")
    model = fit(QSSClassifier, X, y, head="shared-rf")
    engine = model.engine_
    rows = engine._row_data(copy=False)
    gram, counts = engine._sibling_gram(0)
    with pytest.raises(RuntimeError, match="not over this head's rows"):
        engine._build(0, rows, (gram, counts + np.array([1, 0])))
    rebuilt, _, _ = engine._build(0, rows, (gram, counts))
    assert rebuilt.digest() == engine.instances[0].digest()
    assert rebuilt.head.equals(engine.instances[0].head)


def test_a_fit_through_local_row_work_and_another_row_work_are_the_same_model(monkeypatch):
    """A model whose ``row_work`` is set: chunks of this process (LocalRowWork, its chunk
    size a cap on the pass's) still share; any other RowWork (a cluster's) builds each
    instance through it, as before. Both equal a plain fit."""
    X, y = data("classification")
    plain = fit(QSSClassifier, X, y, head="shared-rf")

    class Elsewhere:
        """A RowWork that is not this process's: the builds go through map_chunks."""

        def __init__(self):
            self.inner, self.calls = LocalRowWork(1024), 0

        def map_chunks(self, *args):
            self.calls += 1
            return self.inner.map_chunks(*args)

    real_init = QSSEngine.__init__
    for work in (LocalRowWork(2048), Elsewhere()):
        model = QSSClassifier(**{**PARAMS, "head": "shared-rf"})

        def init(self, *args, _work=work, **kwargs):
            real_init(self, *args, **kwargs)
            self.set_row_work(_work)

        with monkeypatch.context() as m:
            m.setattr(QSSEngine, "__init__", init)
            model.fit(X, y, list(range(len(y))))
        assert model.engine_.row_work is work
        assert_same_model(model, plain, X[:300])
    assert work.calls == 3  # one build per instance through the other RowWork
