"""The head's out-of-fold gain (content.heads.solve.solve_ridge) and the head-vs-tables rule
(content.tables.build_flat_content): what is computed, and that the engine serves what the
rule says."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from helpers import assert_same_model, outside_all_schemas

from forgetting import QSSClassifier
from forgetting.content.heads import GramSystem, LinearHead, head_features
from forgetting.content.heads.gram import PENALTY
from forgetting.content.heads.solve import head_gain as _gain
from forgetting.content.heads.solve import solve_ridge as _solve
from forgetting.content.tables import flat_content as tables_module
from forgetting.content.tables.flat_content import TABLES_GAIN_FACTOR
from forgetting_lab.bench.core import clustered_data


def random_head(n: int, d: int, k: int, seed: int = 0) -> LinearHead:
    """A head on rows whose residuals depend linearly on the features, plus noise."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    r = Z @ rng.normal(size=(d, k)) + 0.3 * rng.normal(size=(n, k))
    head = LinearHead.empty(d, k, 32)
    residuals = np.rint(np.clip(r, -1, 1) * 2.0**32).astype(np.int64)
    head.add(head_features(Z), residuals, rng.integers(0, 2, n))
    return head


def fold_terms(head: LinearHead):
    H, H0, H1 = head.float_cross()
    G0 = head.gram[0].astype(np.float64) * 2.0**-28
    G1 = head.gram[1].astype(np.float64) * 2.0**-28
    return H, H0, H1, G0, G1


def oof_gain(W0, W1, H0, H1, G0, G1) -> float:
    return float(
        2 * np.sum(W0 * H1) - np.sum(W0 * (G1 @ W0)) + 2 * np.sum(W1 * H0) - np.sum(W1 * (G0 @ W1))
    )


def test_the_gain_scores_each_folds_half_gram_solution_on_the_other_fold():
    """W = A⁻¹H, and the gain is that of W_a = 2A⁻¹H_a (fold a's labels, half the full Gram)
    scored on the other fold's sums — computed here the slow way, with a dense solver."""
    head = random_head(3000, 12, 4)
    H, H0, H1, G0, G1 = fold_terms(head)
    G = G0 + G1
    # the penalty: c · mean diag G rounded to the nearest power of two (head_penalty)
    lam = PENALTY * 2.0 ** round(np.log2(np.trace(G) / len(G)))
    A = G + lam * np.eye(len(G))
    W, gains = _solve(GramSystem.of(head.gram), H, H0, H1)
    np.testing.assert_allclose(W, scipy.linalg.solve(A, H, assume_a="pos"), rtol=1e-9, atol=1e-12)
    W0 = 2 * scipy.linalg.solve(A, H0, assume_a="pos")
    W1 = 2 * scipy.linalg.solve(A, H1, assume_a="pos")
    assert _gain(gains) == pytest.approx(oof_gain(W0, W1, H0, H1, G0, G1), rel=1e-9)
    # a head's gain is the sum over its own columns
    assert _gain(gains, slice(0, 2)) + _gain(gains, slice(2, 4)) == pytest.approx(_gain(gains))


def test_the_gain_is_close_to_the_exact_fold_gain_on_many_rows():
    """With n ≫ d each fold's Gram is about half the full one, so the approximation is within
    a percent of the gain with each fold's own system factored."""
    head = random_head(20_000, 16, 3, seed=1)
    H, H0, H1, G0, G1 = fold_terms(head)
    D = len(G0)
    s0, s1 = (PENALTY * np.trace(Gf) / D for Gf in (G0, G1))
    W0 = scipy.linalg.solve(G0 + s0 * np.eye(D), H0, assume_a="pos")
    W1 = scipy.linalg.solve(G1 + s1 * np.eye(D), H1, assume_a="pos")
    exact = oof_gain(W0, W1, H0, H1, G0, G1)
    gain, _ = head.solution()
    assert exact > 0
    assert gain == pytest.approx(exact, rel=0.01)


def test_a_fold_without_rows_gives_no_head():
    head = LinearHead.empty(4, 2, 32)
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(20, 4))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    head.add(head_features(Z), rng.integers(-(2**31), 2**31, (20, 2)), np.zeros(20, int))
    assert GramSystem.of(head.gram).factor is None
    assert head.solution() == (-np.inf, None)


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


def test_head_rule_benchmark_on_digits_diabetes_and_a_held_out_set(tmp_path):
    """The benchmark runs end to end on validation splits of the training split, and the
    rule it reports is the one the engine served (it checks each instance)."""
    import csv

    from forgetting_lab.bench import head_rule

    sets = "digits,diabetes,mkclass-small"
    args = ["--datasets", sets, "--seeds", "1", "--no-timing", "--out", str(tmp_path)]
    code = head_rule.main(args)
    assert code == 0
    with open(tmp_path / "head_rule-per_instance.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["dataset"] for r in rows] == [s for s in sets.split(",") for _ in range(3)]
    for row in rows:
        assert row["better"] in ("head", "tables") and row["rule"] in ("head", "tables")
        # the training splits only: 1257 (digits), 309 (diabetes), all 8000 generated rows
        assert int(row["n_fit"]) + int(row["n_val"]) in (1257, 309, 8000)
    with open(tmp_path / "head_rule-per_set.csv") as f:
        by_set = {r["dataset"]: r for r in csv.DictReader(f)}
    assert 0.5 < float(by_set["digits"]["val_rule"]) <= 1.0
