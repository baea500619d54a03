"""Exact random forests: extremely randomized trees on a D°-fixed bin grid whose splits are
chosen by Gini gain over all-row integer class counts (regression: squared-error gain over
all-row sums of quantized targets); forget and insert re-evaluate the
choices on a row's path and rebuild what changes exactly as a fit would (docs/forest.md)."""

from __future__ import annotations

from .core import ExactForest, ForestConfig
from .estimator import ExactForestClassifier, ExactForestRegressor

__all__ = ["ExactForest", "ExactForestClassifier", "ExactForestRegressor", "ForestConfig"]
