"""The flat tables' probes are at most MAX_PROBES of D°'s rows, chosen from D° alone."""

import numpy as np
import pytest
from helpers import classification_data

from forgetting import QSSClassifier
from forgetting.schema import MAX_PROBES, probe_rows


def test_probe_rows_keep_small_schemas_whole_and_space_large_ones_evenly():
    assert np.array_equal(probe_rows(10), np.arange(10))
    assert np.array_equal(probe_rows(MAX_PROBES), np.arange(MAX_PROBES))
    rows = probe_rows(3 * MAX_PROBES + 7)
    assert len(rows) == MAX_PROBES and rows[0] == 0 and rows[-1] == 3 * MAX_PROBES + 6
    assert np.all(np.diff(rows) > 0)


@pytest.mark.parametrize("cap", [8, 4096])
def test_forget_equals_refit_with_capped_probes(monkeypatch, cap):
    """With the cap below |D°| (forced small here), forgets — outside D° and one in it — still
    give the refit's model bit for bit."""
    import forgetting.schema as schema

    monkeypatch.setattr(schema, "MAX_PROBES", cap)
    X, y = classification_data()
    ids = list(range(len(y)))
    params = dict(rho=0.3, random_state=0, secret_key="probes")
    model = QSSClassifier(**params).fit(X, y, ids)
    for inst in model.engine_.instances:
        assert len(inst.schema.probe_codes) == min(cap, inst.schema.n_schema_rows)
    gone = ids[:7]
    for i in gone:
        model.forget([i])
    model.wait_for_rebuilds()
    keep = ids[7:]
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    assert model.state_digest() == refit.state_digest()
    assert np.array_equal(model.predict_proba(X), refit.predict_proba(X))
