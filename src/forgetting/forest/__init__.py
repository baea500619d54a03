"""The exact forest, a model family: extremely randomized trees on a D°-fixed bin grid whose
splits are chosen by Gini gain over all-row integer class counts (regression: squared-error
gain over all-row sums of quantized targets); forget and insert re-evaluate the choices on a
row's path and rebuild what changes exactly as a fit would (docs/forest.md).

Its estimators are :class:`forgetting.ExactForestClassifier` and
:class:`forgetting.ExactForestRegressor` (:mod:`forgetting.estimators.forest`); this room
holds the model behind them: one forest's state (:class:`ExactForest`, core.py), its
instances and their background rebuilds (instances.py) and the engine interface the
estimators speak (:class:`ForestEngine`, engine.py)."""

from __future__ import annotations

from .core import ExactForest, ForestConfig
from .engine import ForestEngine

__all__ = ["ExactForest", "ForestConfig", "ForestEngine"]
