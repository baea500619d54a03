"""Exact preprocessing: steps whose fitted state a forget updates exactly (SPEC §5 decision 11).

Each step mirrors a scikit-learn transformer and is fitted by one of three rules: from integer
sums or counts over all rows (a forget subtracts), on the pipeline's schema rows D° only (a
forget that hits D° refits it), or as a deterministic function of the current set of rows
(the categories present). :class:`forgetting.pipeline.ForgettingPipeline` drives them and
refits its estimator only when a step's output for the remaining rows changed; see
docs/pipelines.md.

* :class:`StandardScaler`, :class:`MinMaxScaler` — statistics on D° (default) or all rows;
* :class:`SimpleImputer` — mean, median, most frequent or constant;
* :class:`MissingIndicator` — a 0/1 column per column with a missing value among the rows;
* :class:`OneHotEncoder`, :class:`OrdinalEncoder` — the categories present;
* :class:`ColumnTransformer`, :class:`Chain`, :class:`Passthrough`;
* :class:`OnSchemaRows` — any transformer, fitted on D° only (PCA, a learned encoder);
* :class:`Frozen` — any transformer that never learns from the rows (a pretrained encoder);
* :func:`exact` — scikit-learn's step → its exact equivalent, or :class:`NotExactError`.
"""

from .base import Chain, ExactStep, Frozen, OnSchemaRows, Passthrough
from .compose import ColumnTransformer
from .encoding import OneHotEncoder, OrdinalEncoder
from .impute import MissingIndicator, SimpleImputer
from .scaling import MinMaxScaler, StandardScaler
from .translate import NotExactError, exact

__all__ = [
    "Chain",
    "ColumnTransformer",
    "ExactStep",
    "Frozen",
    "MinMaxScaler",
    "MissingIndicator",
    "NotExactError",
    "OnSchemaRows",
    "OneHotEncoder",
    "OrdinalEncoder",
    "Passthrough",
    "SimpleImputer",
    "StandardScaler",
    "exact",
]
