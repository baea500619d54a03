"""The estimator behind ``forgetting fit`` and the parameters it exposes as options.

Defaults are never repeated here: an option left out is not passed, so the estimator's own
default applies, and ``--help`` shows the values read from ``get_params()``. Changing a default
in :mod:`forgetting.estimators` therefore changes the CLI and its help with it.
"""

from __future__ import annotations

from typing import Any

#: The estimator parameters ``fit`` exposes as options (``--n-instances`` -> ``n_instances``).
#: Their defaults are the estimator's own (an option left out is not passed), never repeated.
ESTIMATOR_OPTIONS = (
    "mode",
    "rho",
    "n_instances",
    "n_levels",
    "n_centroids",
    "rebuild",
    "random_state",
)


def estimator_class(task: str):
    """QSSClassifier for ``classification``, QSSRegressor otherwise."""
    from ..estimators import QSSClassifier, QSSRegressor

    return QSSClassifier if task == "classification" else QSSRegressor


def estimator_defaults() -> dict[str, str]:
    """The estimators' own defaults as --help shows them (``None`` means the estimator picks
    a value from the data: "auto"); a default the two tasks do not share shows both."""

    def shown(value: Any) -> str:
        return "auto" if value is None else str(value)

    clf, reg = (estimator_class(task)().get_params() for task in ("classification", "regression"))
    return {
        name: shown(clf[name])
        if clf[name] == reg[name]
        else f"{shown(clf[name])} (classifier), {shown(reg[name])} (regressor)"
        for name in clf
    }
