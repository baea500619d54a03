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

from .base import Encoder, EncoderUnavailableError, IdentityEncoder
from .image import HOG_INSTALL, HOGEncoder
from .tabular import LIGHTGBM_INSTALL, LightGBMLeafContrib
from .text import MINILM_INSTALL, MiniLMEncoder

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
