"""Tree models for the privacy benchmark: the exact forest and a retrained random forest.

``python -m forgetting_lab.bench.privacy --models forest,retrain-rf,...`` attacks them beside
the models of :mod:`forgetting_lab.audits.lira` (QSS, SISA, retrained LR and HGB), through the
same LiRA and unlearning audit (:mod:`forgetting.audit.lira`) on the same rows:

- ``forest``: ``ExactForestClassifier(secret_key=..., random_state=seed)``, nothing else set —
  the model ``forgetting fit`` ships for tables, trees grown down to one-row leaves;
- ``forest-leafN``: the same with ``min_samples_leaf=N`` (a setting that should memorise less);
- ``retrain-rf``: one scikit-learn ``RandomForestClassifier`` at its defaults
  (``random_state=seed``), retrained without the rows on ``forget`` (the oracle).
"""

from __future__ import annotations

import re
from typing import Any

FOREST_SECRET_PREFIX = "lira-forest-audit-secret-"
"""The forest's membership key (D° rows) is keyed; the audit uses a fixed per-seed secret so
that runs are reproducible (the attacker never uses it)."""
_LEAF = re.compile(r"forest-leaf(\d+)$")


def is_tree_model(model: str) -> bool:
    """Whether ``model`` is one of this module's names (else it is :mod:`audits.lira`'s)."""
    return model in ("forest", "retrain-rf") or _LEAF.match(model) is not None


def make_tree_factory(model: str, *, seed: int = 0):
    """A zero-argument factory of fresh, unfitted estimators of kind ``model``."""
    if model == "retrain-rf":
        from sklearn.ensemble import RandomForestClassifier

        from forgetting_lab.baselines import RetrainClassifier

        return lambda: RetrainClassifier(
            estimator=RandomForestClassifier(random_state=seed), random_state=seed
        )
    from forgetting import ExactForestClassifier

    params: dict[str, Any] = {"secret_key": f"{FOREST_SECRET_PREFIX}{seed}", "random_state": seed}
    leaf = _LEAF.match(model)
    if leaf is not None:
        params["min_samples_leaf"] = int(leaf.group(1))
    elif model != "forest":
        raise ValueError(f"not a tree model of the privacy benchmark: {model!r}")
    return lambda: ExactForestClassifier(**params)


def audit_tree_model(
    data: Any,
    model: str,
    *,
    n_shadow: int,
    seed: int = 0,
    n_forget: int = 100,
    n_targets: int = 2,
    fix_variance: bool = False,
    n_boot: int = 1000,
    progress: bool = True,
) -> dict[str, Any]:
    """LiRA (online + offline) and, if ``n_forget`` > 0, the unlearning audit of one tree
    model: what :func:`forgetting_lab.audits.lira.audit_model` does for its models, with the
    same shadows' membership (same ``seed``), and the same output for ``result_rows``.

    The forest's ``forget`` may rebuild an instance in the background; the audit waits for it
    (``wait_for_rebuilds``) before scoring, so the model attacked is the one a refit gives.
    """
    from ..audits.lira import audit_factory

    return audit_factory(
        data,
        make_tree_factory(model, seed=seed),
        model,
        n_shadow=n_shadow,
        seed=seed,
        n_forget=n_forget,
        n_targets=n_targets,
        fix_variance=fix_variance,
        n_boot=n_boot,
        progress=progress,
    )


def notes() -> str:
    """What the tree models are, with the forest's defaults read from the installed library
    (the shipped-defaults fingerprint of the results header covers QSS only)."""
    from forgetting import ExactForestClassifier

    params = ExactForestClassifier().get_params(deep=False)
    shown = ", ".join(
        f"{k}={v!r}" for k, v in params.items() if k not in ("secret_key", "random_state")
    )
    return (
        "**Tree models**: 'forest' is ExactForestClassifier at its shipped defaults "
        f"({shown}; only secret_key and random_state set), the model `forgetting fit` picks "
        "on tables; 'forest-leafN' the same with min_samples_leaf=N; its forget waits for "
        "background rebuilds (wait_for_rebuilds) before the audit scores it. 'retrain-rf' is "
        "one scikit-learn RandomForestClassifier at its defaults (100 trees, one-row leaves, "
        "bootstrap), 'retrain-hgb' one HistGradientBoostingClassifier at its defaults, "
        "'retrain' one logistic regression; each is refitted without R on forget."
    )
