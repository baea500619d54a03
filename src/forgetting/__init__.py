"""forgetting: exact machine unlearning — a model forgets a row and is then, bit for bit, the
model a fit without that row builds.

Public API, one estimator per kind of data, on one base (:mod:`forgetting.estimators`):
:class:`ExactForestClassifier` / :class:`ExactForestRegressor` for tables (numeric and
categorical columns, missing values) and :class:`QSSClassifier` / :class:`QSSRegressor`
(quantized sufficient statistics) for embeddings, raw pixels, label mode and label-DP; the
:class:`Receipt` they return from ``forget``/``insert``, and :class:`ModelFileError` raised by
``load``; :func:`make_pipeline` and :class:`ForgettingPipeline` put exact preprocessing steps
(:mod:`forgetting.preprocessing`) in front of any of them and forget through every step.
``MUNKEYClassifier`` (approximate unlearning by key deletion, the optional ``munkey`` extra)
is one more model family.

Every public name is imported on first use (PEP 562), so ``import forgetting`` alone imports
nothing heavy: the command line (``python -m forgetting``, whose package this is) prints its
help without scikit-learn or numpy, and torch is loaded only by ``MUNKEYClassifier``.
Importing the estimators imports scikit-learn but not pandas (:mod:`._sklearn_pandas`): pandas
is the caller's, imported when a DataFrame arrives.
"""

from typing import TYPE_CHECKING, Any

from . import _sklearn_pandas

_sklearn_pandas.install()

if TYPE_CHECKING:
    from .estimators import (
        ExactForestClassifier,
        ExactForestRegressor,
        QSSClassifier,
        QSSRegressor,
    )
    from .io.model_format import ModelFileError
    from .munkey import MUNKEYClassifier
    from .pipeline import ForgettingPipeline, make_pipeline
    from .receipts import Receipt

__all__ = [
    "ExactForestClassifier",
    "ExactForestRegressor",
    "QSSClassifier",
    "QSSRegressor",
    "Receipt",
    "ModelFileError",
    "MUNKEYClassifier",
    "ForgettingPipeline",
    "make_pipeline",
]
__version__ = "0.1.0"

#: Each public name -> the module that defines it.
_HOMES = {
    "ExactForestClassifier": ".estimators",
    "ExactForestRegressor": ".estimators",
    "QSSClassifier": ".estimators",
    "QSSRegressor": ".estimators",
    "Receipt": ".receipts",
    "ModelFileError": ".io.model_format",
    "MUNKEYClassifier": ".munkey",
    "ForgettingPipeline": ".pipeline",
    "make_pipeline": ".pipeline",
}


def __getattr__(name: str) -> Any:
    """The public names, imported on first use (PEP 562) and kept as attributes."""
    if name in _HOMES:
        from importlib import import_module

        try:
            value = getattr(import_module(_HOMES[name], __name__), name)
        except ImportError as err:
            if name != "MUNKEYClassifier":
                raise
            raise ImportError(
                f'MUNKEYClassifier needs {err.name or err}: pip install "forgetting[munkey]" '
                "(torch's CPU wheel first)",
                name=err.name,
            ) from err
        globals()[name] = value
        return value
    raise AttributeError(f"module 'forgetting' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
