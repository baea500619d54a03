"""The estimator behind ``forgetting fit``, the parameters it exposes as options, and the
defaults ``fit --help`` shows for them.

An option left out is not passed, so the estimator's own default applies. The help shows those
defaults from :data:`DEFAULTS`, a copy written out here so that ``--help`` never imports the
estimators (and with them scikit-learn and numpy); tests/test_import_cost.py checks that it
equals ``get_params()`` of both estimators, so a default changed in
:mod:`forgetting.estimators` fails the tests until it is changed here too.
"""

from __future__ import annotations

from typing import Any

#: The estimator parameters ``fit`` exposes as options (``--n-instances`` -> ``n_instances``).
ESTIMATOR_OPTIONS = (
    "mode",
    "rho",
    "n_instances",
    "n_levels",
    "n_centroids",
    "rebuild",
    "random_state",
    "epsilon",
    "delta",
)

#: ``get_params()`` of a default QSSClassifier (``classification``) and QSSRegressor
#: (``regression``), restricted to :data:`ESTIMATOR_OPTIONS` (the two are equal today;
#: tests/test_import_cost.py checks each against its class). Only shown by ``--help``.
_SHARED_DEFAULTS: dict[str, Any] = {
    "mode": "exact",
    "rho": 0.005,
    "n_instances": 3,
    "n_levels": None,
    "n_centroids": None,
    "rebuild": "background",
    "random_state": 0,
    "epsilon": None,
    "delta": None,
}
DEFAULTS: dict[str, dict[str, Any]] = {
    "classification": _SHARED_DEFAULTS,
    "regression": _SHARED_DEFAULTS,
}


#: ``fit --model``: the QSS estimators, the exact forests (:mod:`forgetting.forest`), or
#: ``auto`` (the default), which picks one with :func:`resolve_model`.
MODELS = ("auto", "qss", "forest")

#: Options only the QSS estimators take: given to ``--model auto``, they choose QSS (and so
#: does ``--mode label``; ``--mode dp`` chooses by :func:`dp_model`).
QSS_ONLY_OPTIONS = ("n_levels", "n_centroids", "rebuild", "delta")

#: The parameters ``fit --model forest`` exposes as options besides :data:`SHARED_OPTIONS`.
FOREST_OPTIONS = (
    "n_estimators",
    "max_features",
    "min_samples_leaf",
    "n_instances",
    "mode",
    "epsilon",
)

#: Options only the forest takes: given to ``--model auto --mode dp``, they keep the forest.
FOREST_ONLY_OPTIONS = ("n_estimators", "max_features", "min_samples_leaf")

#: ``--mode dp`` with QSS and no ``--delta``: the δ of each release (QSS-DP's (ε, δ)).
QSS_DP_DELTA = 1e-5

#: Options both models take.
SHARED_OPTIONS = ("rho", "random_state")

#: ``get_params()`` of a default ExactForestClassifier and ExactForestRegressor (equal),
#: restricted to the forest's options (tests/test_import_cost.py checks it).
FOREST_DEFAULTS: dict[str, Any] = {
    "n_estimators": 30,
    "max_features": "sqrt",
    "min_samples_leaf": 1,
    "n_instances": 3,
    "mode": "exact",
    "epsilon": None,
    "rho": 0.005,
    "random_state": 0,
}


def resolve_model(
    model: str,
    *,
    given: set[str],
    dataset: bool,
    raw_table: bool,
    text: bool,
    mode: str | None = None,
) -> tuple[str, str]:
    """The model ``fit --model model`` fits, and for ``auto`` one line saying why.

    ``auto`` fits the exact forest: at its defaults it is within 1 pp of the best model
    retrained on all rows on 5 of the 7 tables of benchmarks/results/deployed-gap.md, QSS-E
    on 1 (QSS-E is ahead on one small, nearly linear table). It fits QSS where only QSS goes
    or QSS is the better model: ``--raw-table`` (QSS encodes categories exactly, dropping a
    category with its last row), ``--text-col`` (sentence embeddings, where QSS-E is ahead),
    or a QSS-only option (``given`` names the estimator options on the command line), or
    ``--mode label`` (QSS's). ``--mode dp`` keeps the forest here; once the rows are read,
    :func:`dp_model` may choose QSS-DP. A Parquet dataset directory (``dataset``) takes
    either: its files are read and checked on the dask cluster, and the forest grows its
    trees from the gathered rows here.
    """
    if model != "auto":
        return model, ""
    reasons = [
        reason
        for reason, present in (
            ("--raw-table", raw_table),
            ("--text-col (sentence embeddings)", text),
            *((f"--{name.replace('_', '-')}", name in given) for name in QSS_ONLY_OPTIONS),
            ("--mode label", mode == "label"),
        )
        if present
    ]
    if reasons:
        return "qss", f"--model auto chose QSS for {', '.join(reasons)}"
    return "forest", (
        "--model auto chose the exact forest, the more accurate exact model on most tables; "
        "--model qss for QSS"
    )


def dp_model(task: str, n_rows: int | None, labels, epsilon: float) -> tuple[str, str]:
    """``fit --model auto --mode dp``: the DP forest or QSS-DP for these rows, and why
    (:func:`forgetting.privacy.randomized_response.dp_model_for`, the measured rule)."""
    from ..privacy.randomized_response import dp_model_for

    n_classes = len(set(labels.tolist())) if task == "classification" else 0
    kind, why = dp_model_for(task, n_rows, n_classes, epsilon)
    return kind, f"--model auto --mode dp chose {why}"


def estimator_class(task: str, model: str = "qss"):
    """QSSClassifier for ``classification``, QSSRegressor otherwise; with ``model="forest"``
    ExactForestClassifier or ExactForestRegressor."""
    if model == "forest":
        from ..estimators import ExactForestClassifier, ExactForestRegressor

        return ExactForestClassifier if task == "classification" else ExactForestRegressor
    from ..estimators import QSSClassifier, QSSRegressor

    return QSSClassifier if task == "classification" else QSSRegressor


def options_of(model: str) -> tuple[str, ...]:
    """The estimator options ``fit --model model`` passes on (the others are refused)."""
    return ESTIMATOR_OPTIONS if model == "qss" else (*FOREST_OPTIONS, *SHARED_OPTIONS)


def estimator_defaults() -> dict[str, str]:
    """The estimators' defaults as --help shows them (``None`` means the estimator picks a
    value from the data: "auto"); a default the two tasks do not share shows both."""

    def shown(value: Any) -> str:
        return "auto" if value is None else str(value)

    clf, reg = DEFAULTS["classification"], DEFAULTS["regression"]
    return {
        name: shown(clf[name])
        if clf[name] == reg[name]
        else f"{shown(clf[name])} (classifier), {shown(reg[name])} (regressor)"
        for name in ESTIMATOR_OPTIONS
    }
