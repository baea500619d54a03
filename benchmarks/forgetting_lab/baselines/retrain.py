"""Full retraining, the oracle every unlearning method is measured against.

It is SISA with a single shard and a single slice: one model on all rows in canonical
(hash) order, and ``forget`` retrains it from scratch on the rest. Reusing the SISA machinery
gives it the same ids, validation and history independence for free.
"""

from __future__ import annotations

from typing import Any

from .sisa import SISAClassifier, SISARegressor


class RetrainClassifier(SISAClassifier):
    """One classifier on all rows; ``forget`` refits it without the rows (the oracle)."""

    def __init__(self, estimator: Any = None, random_state: int = 0) -> None:
        super().__init__(n_shards=1, estimator=estimator, random_state=random_state, n_slices=1)


class RetrainRegressor(SISARegressor):
    """One regressor on all rows; ``forget`` refits it without the rows (the oracle)."""

    def __init__(self, estimator: Any = None, random_state: int = 0) -> None:
        super().__init__(n_shards=1, estimator=estimator, random_state=random_state, n_slices=1)
