"""What training MUNKEY (and the plain ViT it is measured beside) needs besides the model:
checked images, a deterministic torch block, the patch size and default key encoder for an
image size, augmentation and the learning-rate schedule.

Why apart from :mod:`.classifier`: the lab's baselines (the plain ViT, the approximate
unlearners) train with the same pieces, so they import them from here rather than from the
classifier."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


@contextlib.contextmanager
def deterministic_torch(seed: int, n_threads: int) -> Iterator[torch.Generator]:
    """Run a block with a fixed thread count, deterministic kernels and a seeded RNG.

    The global RNG state, thread count and determinism flag are restored afterwards, so
    fitting a model never perturbs the caller's torch state. Yields a generator seeded with
    ``seed`` for the block's own draws (batch order, dropout masks).
    """
    threads = torch.get_num_threads()
    det = torch.are_deterministic_algorithms_enabled()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.set_num_threads(n_threads)
        torch.use_deterministic_algorithms(True)
        try:
            yield torch.Generator().manual_seed(seed)
        finally:
            torch.use_deterministic_algorithms(det)
            torch.set_num_threads(threads)


def check_images(X: Any, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``X`` as float32 ``(n, H, W, C)`` in [0, 1], or one ValueError/TypeError saying why not."""
    try:
        X = np.asarray(X, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise TypeError(f"X must be numeric images: {err}") from err
    if X.ndim == 3:
        X = X[..., None]
    if X.ndim != 4:
        raise ValueError(
            f"X must be images shaped (n, H, W) or (n, H, W, C), got shape {X.shape}; "
            "reshape flattened rows first, e.g. X.reshape(-1, 28, 28)"
        )
    if X.shape[0] == 0:
        raise ValueError("X has no images")
    if shape is not None and X.shape[1:] != shape:
        raise ValueError(f"images have shape {X.shape[1:]}, the model was fitted on {shape}")
    if not np.isfinite(X).all():
        raise ValueError("X contains NaN or infinity")
    if X.min() < 0.0 or X.max() > 1.0:
        raise ValueError(f"pixel values must lie in [0, 1], got [{X.min()}, {X.max()}]")
    return np.ascontiguousarray(X)


def auto_patch(side: int) -> int:
    """The largest divisor of ``side`` that is at most ``side // 4`` (1 for sides under 8):
    at least a 4×4 grid of patch tokens, each patch as large as that allows."""
    return max(p for p in range(1, max(1, side // 4) + 1) if side % p == 0)


def default_encoder(height: int, width: int):
    """The package's frozen HOG + pooled-pixel encoder, sized for ``height × width`` images."""
    from ..encoders import HOGEncoder

    cell = max(1, min(height, width) // 4)
    pool = 2 if height % 2 == 0 and width % 2 == 0 else 0
    return HOGEncoder(image_shape=(height, width), pixels_per_cell=cell, pool=pool)


def random_hflip(images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``(B, C, H, W)`` images, each mirrored left-right with probability ½ (draws from ``gen``)."""
    flip = torch.rand(len(images), generator=gen) < 0.5
    return torch.where(flip[:, None, None, None], images.flip(3), images)


def cosine_schedule(optimizer: torch.optim.Optimizer, total_steps: int, warmup: float = 0.05):
    """Linear warm-up over ``warmup`` of the steps, then cosine decay to zero."""
    warm = max(1, int(round(warmup * total_steps)))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        progress = (step - warm) / max(1, total_steps - warm)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
