"""Encoders f: the map from raw inputs to the feature vectors QSS works on (design.md §2).

Why a protocol with a ``learned`` flag: exact instance deletion (QSS-E) needs everything that
shapes the features of a row to depend on the schema subset D° only. A *frozen* encoder
(``learned = False``: the identity, a pretrained text model, HOG image descriptors) does not
look at the training data at all, so it can be applied to every row freely. A *learned*
encoder (``learned = True``: the LightGBM leaf-contribution map) is fitted on data, so the
caller must fit it on D° only -- and a deletion that hits D° must refit it. Callers read the
flag instead of knowing each class.

The protocol every encoder follows (:class:`Encoder`):

* ``learned: bool`` -- a class attribute, see above;
* ``fit(X, y=None, seed=0) -> self`` -- learns the map (learned encoders; deterministic for a
  fixed ``seed`` and data); frozen encoders accept the call and ignore the data, so pipelines
  can call ``fit`` uniformly;
* ``transform(X) -> np.ndarray`` -- a fresh C-contiguous float32 ``(n, d)`` matrix, a pure
  function of each row (so a row's features never depend on which other rows were encoded with
  it: that is what makes deleting rows exact).

Heavy dependencies (torch, sentence-transformers, LightGBM, scikit-image) are imported only
when an encoder first needs them; a missing one raises :class:`EncoderUnavailableError` with
the install command.

>>> import numpy as np
>>> IdentityEncoder().fit(None).transform(np.eye(2)).dtype
dtype('float32')
"""

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


# Imported last: these modules subclass Encoder and raise EncoderUnavailableError from above.
from .image import HOG_INSTALL, HOGEncoder  # noqa: E402
from .tabular import LIGHTGBM_INSTALL, LightGBMLeafContrib  # noqa: E402
from .text import MINILM_INSTALL, MiniLMEncoder  # noqa: E402

__all__ = [
    "HOG_INSTALL",
    "LIGHTGBM_INSTALL",
    "MINILM_INSTALL",
    "Encoder",
    "EncoderUnavailableError",
    "HOGEncoder",
    "IdentityEncoder",
    "LightGBMLeafContrib",
    "MiniLMEncoder",
]
