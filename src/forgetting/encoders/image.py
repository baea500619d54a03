"""HOG + pooled pixels: the frozen image encoder f of design.md §2 for small grey-scale images.

Why not raw pixels: a nearest-centroid codebook on 784 raw pixels splits digits by stroke
position and thickness rather than shape, so at ρ = 0.5 % (~150–300 schema rows) its cells are
impure and QSS-E trails SISA by 5–7 pp on them (the paper benchmark with
``--image-features pixels``). Histograms of oriented gradients (Dalal & Triggs) describe local
edge directions, which is what separates the classes, and are invariant to small shifts and to
contrast.

Why HOG and this setting, not a network: the paper uses CLIP on an A100; nothing pretrained for
images installs offline here, and a 2-core CPU must encode 70,000 images in seconds, which
scikit-image's HOG does. The setting -- 9 orientations, 7×7-pixel cells, 2×2-cell blocks
(324 values), plus the image average-pooled over 2×2 pixels (196 values), 520 in all -- was
chosen on a validation split carved from the *training* images
(``python -m forgetting_lab.image_features``, results and encode times in
benchmarks/results/image_features.md): logistic-regression accuracy 0.975 vs 0.914 raw on
MNIST and 0.886 vs 0.845 on Fashion-MNIST, the best on Fashion-MNIST of six candidates. HOG
alone barely beats raw pixels on Fashion-MNIST (0.847): the pooled pixels bring back the
silhouette. 4-pixel cells score 0.977 on MNIST but are 2.5× wider and slower to encode.

Why frozen (``learned = False``): nothing is fitted; each row's features are a pure function of
that image alone (HOG's block normalization sees one image only), so deleting rows never
requires re-encoding the others, and encoding is independent of batch composition.

>>> import numpy as np
>>> HOGEncoder().transform(np.zeros((2, 784))).shape
(2, 520)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Encoder, EncoderUnavailableError

__all__ = ["HOG_INSTALL", "HOGEncoder"]

HOG_INSTALL = 'pip install "forgetting[image]"'

# Module-level so tests can simulate a missing install.
_SKIMAGE_FEATURE_MODULE = "skimage.feature"


def _import_hog() -> Any:
    """scikit-image's ``hog``, or :class:`EncoderUnavailableError` with the install command."""
    import importlib

    try:
        return importlib.import_module(_SKIMAGE_FEATURE_MODULE).hog
    except ImportError as exc:
        raise EncoderUnavailableError(
            f"HOGEncoder needs scikit-image ({exc}); install it with: {HOG_INSTALL}"
        ) from exc


class HOGEncoder(Encoder):
    """HOG descriptors plus average-pooled pixels of grey-scale images (frozen).

    Args:
        image_shape: (height, width) of each image; rows of ``X`` are flattened row-major, or
            ``X`` may already be ``(n, height, width)``.
        orientations: gradient-orientation bins per cell.
        pixels_per_cell: side of a square HOG cell, in pixels.
        cells_per_block: side of a square normalization block, in cells.
        pool: side of the pixel-averaging window appended after the HOG values; 0 appends no
            pixels. Must divide both image sides.
        progress: show a tqdm progress bar over the images.
    """

    learned = False

    def __init__(
        self,
        image_shape: tuple[int, int] = (28, 28),
        orientations: int = 9,
        pixels_per_cell: int = 7,
        cells_per_block: int = 2,
        pool: int = 2,
        progress: bool = False,
    ) -> None:
        self.image_shape = image_shape
        self.orientations = orientations
        self.pixels_per_cell = pixels_per_cell
        self.cells_per_block = cells_per_block
        self.pool = pool
        self.progress = progress
        self._check_params()

    def _check_params(self) -> None:
        """Reject settings HOG cannot apply to ``image_shape``, with the reason."""
        h, w = (int(s) for s in self.image_shape)
        for name in ("orientations", "pixels_per_cell", "cells_per_block"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        cells_h, cells_w = h // self.pixels_per_cell, w // self.pixels_per_cell
        if min(cells_h, cells_w) < self.cells_per_block:
            raise ValueError(
                f"a {h}×{w} image has {cells_h}×{cells_w} cells of {self.pixels_per_cell} pixels, "
                f"fewer than one {self.cells_per_block}×{self.cells_per_block}-cell block: use "
                "smaller pixels_per_cell or cells_per_block"
            )
        if self.pool < 0 or (self.pool and (h % self.pool or w % self.pool)):
            raise ValueError(f"pool must be 0 or divide both sides of {h}×{w}, got {self.pool}")

    @property
    def hog_dim(self) -> int:
        """Number of HOG values per image."""
        h, w = self.image_shape
        blocks_h = h // self.pixels_per_cell - self.cells_per_block + 1
        blocks_w = w // self.pixels_per_cell - self.cells_per_block + 1
        return blocks_h * blocks_w * self.cells_per_block**2 * self.orientations

    @property
    def output_dim(self) -> int:
        """Width of :meth:`transform`'s output: HOG values, then the pooled pixels."""
        h, w = self.image_shape
        pooled = (h // self.pool) * (w // self.pool) if self.pool else 0
        return self.hog_dim + pooled

    def _images(self, X: Any) -> np.ndarray:
        """``X`` as a float64 ``(n, h, w)`` array, or a ValueError saying what was expected."""
        X = np.asarray(X)
        h, w = self.image_shape
        if X.ndim == 2 and X.shape[1] == h * w:
            X = X.reshape(len(X), h, w)
        if X.ndim != 3 or X.shape[1:] != (h, w):
            raise ValueError(
                f"HOGEncoder expects (n, {h * w}) flattened or (n, {h}, {w}) images, got shape "
                f"{X.shape}; set image_shape for other sizes"
            )
        if not np.issubdtype(X.dtype, np.number):
            raise ValueError(f"images must be numeric, got dtype {X.dtype}")
        X = X.astype(np.float64, copy=False)
        if not np.isfinite(X).all():
            raise ValueError("images contain NaN or infinite values")
        return X

    def transform(self, X: Any) -> np.ndarray:
        """Encode images as a fresh C-contiguous float32 ``(n, output_dim)`` matrix."""
        hog = _import_hog()
        images = self._images(X)
        out = np.empty((len(images), self.output_dim), dtype=np.float32)
        if not len(images):
            return out
        from tqdm.auto import tqdm

        cell, block = (self.pixels_per_cell,) * 2, (self.cells_per_block,) * 2
        for i, image in enumerate(
            tqdm(images, desc="HOG", unit="image", disable=not self.progress)
        ):
            out[i, : self.hog_dim] = hog(
                image,
                orientations=self.orientations,
                pixels_per_cell=cell,
                cells_per_block=block,
                block_norm="L2-Hys",
                feature_vector=True,
            )
        if self.pool:
            # Window offsets are summed in one fixed order by elementwise adds, so a row's
            # bits never depend on how numpy would order a reduction for a given batch shape.
            p = self.pool
            pooled = np.zeros_like(images[:, ::p, ::p])
            for dy in range(p):
                for dx in range(p):
                    pooled += images[:, dy::p, dx::p]
            out[:, self.hog_dim :] = (pooled / (p * p)).reshape(len(images), -1)
        return out

    def __repr__(self) -> str:
        return (
            f"HOGEncoder(image_shape={tuple(self.image_shape)}, orientations={self.orientations}, "
            f"pixels_per_cell={self.pixels_per_cell}, cells_per_block={self.cells_per_block}, "
            f"pool={self.pool})"
        )
