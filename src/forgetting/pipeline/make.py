"""``make_pipeline``: a :class:`~.core.ForgettingPipeline` from bare steps, named as
scikit-learn's ``make_pipeline`` names them.

Why apart from :mod:`.core`: it is the front door (``forgetting.make_pipeline``) and the
one place scikit-learn's steps are translated at construction, so a step that cannot be
made exact is refused by name before any fit."""

from __future__ import annotations

from typing import Any

from sklearn.pipeline import _name_estimators

from ..preprocessing import exact
from .core import ForgettingPipeline


def make_pipeline(
    *steps: Any, rho: float | str = "auto", min_schema_rows: int = 200, memory: Any = None
) -> ForgettingPipeline:
    """A :class:`ForgettingPipeline` from steps, named as scikit-learn's ``make_pipeline``
    names them (lower-case class names).

    scikit-learn's steps are translated here to their exact equivalents
    (:func:`forgetting.preprocessing.exact`), so the pipeline shows what it will run; a step
    that cannot be made exact (PCA, an unknown transformer) is refused now, by name.
    """
    if memory is not None:
        raise ValueError("memory is not supported: a pipeline that forgets refits its own steps")
    if not steps:
        raise ValueError("make_pipeline needs at least the estimator")
    named = _name_estimators(steps)
    translated = [(name, exact(step, name)) for name, step in named[:-1]]
    pipeline = ForgettingPipeline(
        [*translated, named[-1]], rho=rho, min_schema_rows=min_schema_rows
    )
    pipeline._translated()
    return pipeline
