"""The encoder protocol (:class:`Encoder`), the identity encoder, and the error a missing
optional package raises; the package docstring (:mod:`forgetting.encoders`) says why."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Self

import numpy as np


class EncoderUnavailableError(RuntimeError):
    """An encoder's package (or its bundled model) is not installed.

    Raised instead of a bare ``ImportError`` because the fix is always an install command, and
    the message says exactly which one. Nothing is ever downloaded at run time.
    """


class Encoder(ABC):
    """Base class of the encoders f (see the module docstring for the protocol and why)."""

    #: Whether ``fit`` learns from data (then it must see D° only for exact deletion).
    learned: ClassVar[bool] = False

    def fit(self, X: Any, y: Any = None, seed: int = 0) -> Self:
        """Frozen encoders learn nothing: return ``self`` unchanged (data and seed ignored)."""
        return self

    @abstractmethod
    def transform(self, X: Any) -> np.ndarray:
        """Encode ``X`` as a fresh C-contiguous float32 ``(n, d)`` matrix."""


class IdentityEncoder(Encoder):
    """f = identity, for inputs that already are embeddings (or plain numeric features)."""

    learned = False

    def transform(self, X: Any) -> np.ndarray:
        """Return a float32 C-contiguous *copy* of the 2-D matrix ``X`` (never a view of it)."""
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"IdentityEncoder expects a 2-D matrix, got shape {X.shape}")
        return np.array(X, dtype=np.float32, order="C", copy=True)
