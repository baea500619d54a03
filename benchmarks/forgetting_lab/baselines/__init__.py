"""Unlearning baselines that benchmarks compare the exact QSS estimator against.

All share the estimator interface ``fit(X, y, ids=None)``, ``forget(ids) -> dict``,
``insert(X, y, ids) -> dict`` plus the usual sklearn ``predict`` / ``score``.

* :class:`SISAClassifier`, :class:`SISARegressor` -- sharded retraining
  (Bourtoule et al.); bitwise history independent given a deterministic
  per-shard estimator.
* :class:`RetrainClassifier`, :class:`RetrainRegressor` -- full retraining on every
  deletion (the oracle; SISA with one shard).
* :class:`ExactRidge`, :class:`ExactRidgeClassifier` -- sufficient-statistic
  ridge with rank-k down/up-dates ("ACU"); exact in real arithmetic only, equal
  to a refit up to floating-point rounding.
"""

from .retrain import RetrainClassifier, RetrainRegressor
from .ridge import ExactRidge, ExactRidgeClassifier
from .sisa import Shard, SISAClassifier, SISARegressor

__all__ = [
    "ExactRidge",
    "ExactRidgeClassifier",
    "RetrainClassifier",
    "RetrainRegressor",
    "SISAClassifier",
    "SISARegressor",
    "Shard",
]
