"""The exact forest's first file and store layout, read into a :class:`ModelSnapshot`.

Why it exists: forest files of the first format (container kind ``"forgetting-forest-file"``)
and forest stores keep a forest as a mapping — the class, its parameters (never
``secret_key``), fitted attributes (width, feature names as a list, categories, classes),
the key's public fingerprint and whether the key is derived, and the rows (ids, float32
features with NaN for missing values, class indices or float targets). A forest is a pure
function of those, so that mapping *is* its snapshot: :func:`forest_snapshot` turns it into
the :class:`~forgetting.snapshots.ModelSnapshot` every family restores from
(``from_snapshot`` then checks every field), and :func:`forest_state` writes the mapping of
a fitted forest (what a forest store keeps in its model entry). New forest files are model
files like QSS's (:func:`forgetting.persistence.save_model`); these are still read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..io.model_format import ModelFileError
from ..snapshots import EngineSnapshot, ModelSnapshot, RowsSnapshot

LEGACY_FOREST_KIND = "forgetting-forest-file"

PARAMS_ADDED = {"n_instances": 1}
"""Parameters added after forest files were first written, with the value that gives the
model those files hold."""


def forest_snapshot(cls: type, state: Any, what: str) -> ModelSnapshot:
    """The snapshot of the forest ``state`` describes (a mapping with ``params``, ``fitted``,
    ``key_derived``, ``key_fingerprint``, ``rows`` — ``ids``, ``X``, ``y`` — and, for
    ``mode="dp"``, ``privacy``: the ledger), its layout
    checked; ``cls.from_snapshot`` checks the values. :class:`ModelFileError` names ``what``
    and the field."""
    if not isinstance(state, dict):
        raise ModelFileError(f"{what}: the file holds no forest")
    params = state.get("params")
    if isinstance(params, dict):  # written before a parameter existed: its old value
        params = {**{k: v for k, v in PARAMS_ADDED.items() if k not in params}, **params}
    fitted = state.get("fitted")
    if not isinstance(fitted, dict):
        raise ModelFileError(f"{what}: fitted must be a mapping")
    fitted = dict(fitted)
    names = fitted.get("feature_names_in_")
    if isinstance(names, list):
        if len(set(map(str, names))) != len(names):
            raise ModelFileError(f"{what}: feature_names_in_ must be distinct strings")
        fitted["feature_names_in_"] = np.asarray(names, dtype=object)
    rows = state.get("rows")
    if not isinstance(rows, dict) or set(rows) != {"ids", "X", "y"}:
        raise ModelFileError(f"{what}: rows must hold exactly ids, X and y")
    ids, X, y = rows["ids"], rows["X"], rows["y"]
    if not isinstance(ids, list):
        raise ModelFileError(f"{what}: rows.ids must be a list")
    n = len(ids)
    derived = state.get("key_derived")
    if not isinstance(derived, bool):
        raise ModelFileError(f"{what}: key_derived must be true or false")
    p = _instances(params)
    privacy = state.get("privacy")
    if privacy is not None and not isinstance(privacy, dict):
        raise ModelFileError(f"{what}: privacy must be a mapping or absent")
    return ModelSnapshot(
        estimator=str(state.get("class", cls.__name__)),
        params=params,
        fitted=fitted,
        key_fingerprint=state.get("key_fingerprint"),
        key_derived=derived,
        engine=EngineSnapshot(
            rows=RowsSnapshot(ids=ids, X=X, targets=y, in_pool=np.zeros(n, dtype=bool)),
            instances=[None] * p,
            privacy=privacy,
        ),
    )


def _instances(params: Any) -> int:
    """How many instances a forest of ``params`` keeps (at most one per tree)."""
    try:
        return max(1, min(int(params["n_instances"]), int(params["n_estimators"])))
    except (TypeError, KeyError, ValueError):
        return 1  # the parameters' own check names the problem


def legacy_forest_state(cls: type, state: Any, what: str) -> dict:
    """A forest file of the first format as :func:`~forgetting.persistence.load_model`
    reads a model file: its snapshot, library versions, stored key and the structure digest
    the restored forest must have."""
    if not isinstance(state, dict):
        raise ModelFileError(f"{what}: the file holds no forest")
    return {
        "class": state.get("class"),
        "libraries": state.get("libraries"),
        "snapshot": forest_snapshot(cls, state, what),
        "secret_key": state.get("secret_key"),
        "structure_digest": state.get("structure_digest"),
    }


def forest_state(estimator: Any) -> dict:
    """A fitted forest as the mapping :func:`forest_snapshot` reads, without its rows: the
    class, parameters without the secret key, fitted attributes, the key's public
    fingerprint and whether it is derived (a forest store's model entry)."""
    snapshot = estimator.snapshot()
    fitted = dict(snapshot.fitted)
    if "feature_names_in_" in fitted:
        fitted["feature_names_in_"] = [str(c) for c in fitted["feature_names_in_"]]
    return {
        "class": snapshot.estimator,
        "params": snapshot.params,
        "fitted": fitted,
        "key_derived": snapshot.key_derived,
        "key_fingerprint": snapshot.key_fingerprint,
    }
