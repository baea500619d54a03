"""The head-vs-tables rule (tests/content/test_head_rule.py) in the engine, on the lab's
clustered data (forgetting_lab.bench.core.clustered_data, where the tables win): the engine
serves what the rule says and it is the better model, and a forget equals a refit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_model, outside_all_schemas

from forgetting import QSSClassifier
from forgetting.content.tables import flat_content as tables_module
from forgetting.content.tables.flat_content import TABLES_GAIN_FACTOR
from forgetting_lab.bench.core import clustered_data


def linear_data(n=900, d=30, k=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=(d, k)) + 0.5 * rng.normal(size=(n, k))).argmax(axis=1)
    return X, y


def served_by_rule(model) -> list[str]:
    """What the rule says each instance serves, from the gains the engine computes."""
    picks = []
    for inst in model.engine_.instances:
        content = model.engine_._content(inst)
        _, _, tables_gain = content.tables.best("auto", "auto")
        head_gain, _ = inst.head.solution()
        picks.append("head" if head_gain > TABLES_GAIN_FACTOR * max(tables_gain, 0.0) else "tables")
    return picks


@pytest.mark.parametrize("data", ["linear", "mixture"])
def test_the_engine_serves_what_the_rule_says_and_it_is_the_better_model(data, monkeypatch):
    """A noisy linear score: the head; a mixture of 4 sub-clusters per class in 16
    dimensions: the tables (a linear head cannot carve sub-clusters). Either way the model
    served is more accurate on held-out rows than the other one, served by force. The head
    is the linear one the rule's factor was chosen for ("shared-ridge"); with "shared-rf" (the
    classifier's default) the rule serves the head on this mixture, 0.738 on the held-out
    rows against the tables' 0.770 — a known miss of the rule (docs/partitions.md)."""
    if data == "linear":
        X, y = linear_data(n=1400)
        expected, other = "head", "tables"
    else:
        X, y = clustered_data(3000, d=16, k=4)
        expected, other = "tables", "head"
    fit, held = slice(0, 2000 if data == "mixture" else 900), slice(-500, None)
    params = dict(mode="exact", rho=0.1, random_state=0, rebuild="sync", head="shared-ridge")
    model = QSSClassifier(**params).fit(X[fit], y[fit])
    assert model.corrections_ == served_by_rule(model) == [expected] * 3
    # the other correction, served by moving the threshold past every gain
    monkeypatch.setattr(tables_module, "TABLES_GAIN_FACTOR", 0.0 if other == "head" else np.inf)
    forced = QSSClassifier(**params).fit(X[fit], y[fit])
    assert forced.corrections_ == [other] * 3
    assert model.score(X[held], y[held]) > forced.score(X[held], y[held])


def test_forget_equals_refit_when_the_tables_win():
    """The choice is a function of the current sums: after a forget the instances serve what
    a refit on the remaining rows serves, bit for bit."""
    X, y = clustered_data(1500, d=16, k=4, seed=3)
    ids = list(range(len(y)))
    params = dict(mode="exact", rho=0.1, random_state=0, rebuild="sync")
    model = QSSClassifier(**params).fit(X, y, ids)
    model.predict(X[:2])
    gone = list(outside_all_schemas(model)[:25])
    model.forget(gone)
    keep = [i for i in ids if i not in set(gone)]
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    assert model.corrections_ == refit.corrections_
    assert_same_model(model, refit, X[:200])
