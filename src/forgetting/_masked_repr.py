"""One ``__repr__`` for estimators holding a ``secret_key``: the key must never reach a log."""

from __future__ import annotations

import copy

from sklearn.base import BaseEstimator


class MaskedKeyRepr:
    """Mixin: scikit-learn's repr with ``secret_key`` shown as ``***``. The mask goes on a
    shallow copy, so a concurrent ``fit`` never sees it. Put it before ``BaseEstimator``."""

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        if getattr(self, "secret_key", None) is None:
            return BaseEstimator.__repr__(self, N_CHAR_MAX)
        masked = copy.copy(self)
        masked.secret_key = "***"
        return BaseEstimator.__repr__(masked, N_CHAR_MAX)
