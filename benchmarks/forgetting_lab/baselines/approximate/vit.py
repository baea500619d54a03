"""The plain ViT that approximate-unlearning baselines start from, and its training loop.

Same backbone as MUNKEY (:class:`forgetting.munkey.TinyViT`) without the exemplar token, and
the same recipe (AdamW β = (0.9, 0.99), weight decay 0.05, 5 % warm-up then cosine decay,
same epochs and batch size), so that accuracy, unlearning quality and MUNKEY's training-time
overhead are compared at equal model size and budget.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from forgetting.munkey.backbone import TinyViT, ViTConfig
from forgetting.munkey.training import (
    check_images,
    cosine_schedule,
    deterministic_torch,
    random_hflip,
)

__all__ = ["FrozenViTEncoder", "TrainConfig", "ViTClassifier", "as_tensors", "run_epochs"]


@dataclass(frozen=True)
class TrainConfig:
    """Optimization recipe shared by training, retraining and the fine-tuning baselines."""

    epochs: int = 15
    batch_size: int = 128
    lr: float = 2e-3
    weight_decay: float = 0.05
    seed: int = 0
    n_threads: int = 1
    hflip: bool = False
    """Mirror training images left-right at random (MUNKEYClassifier's ``hflip``)."""


def as_tensors(X: Any, y: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Images ``(n, H, W[, C])`` in [0, 1] → ``(n, C, H, W)`` float32; labels → int64 tensor."""
    images = check_images(X)
    labels = torch.as_tensor(np.asarray(y, dtype=np.int64))
    if labels.ndim != 1 or len(labels) != len(images):
        raise ValueError(f"need one label per image, got {tuple(labels.shape)} for {len(images)}")
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(), labels


def run_epochs(
    net: TinyViT,
    images: torch.Tensor,
    labels: torch.Tensor,
    epochs: int,
    lr: float,
    config: TrainConfig,
    gen: torch.Generator,
    loss_fn=None,
) -> None:
    """Cross-entropy training (or ``loss_fn(net, images, labels)``) for ``epochs`` epochs.

    AdamW β = (0.9, 0.99) with the shared warm-up + cosine schedule over exactly these steps;
    ``config.hflip`` mirrors the batch's images at random first.
    """
    n = len(images)
    optimizer = torch.optim.AdamW(
        net.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=config.weight_decay
    )
    scheduler = cosine_schedule(optimizer, max(1, epochs * math.ceil(n / config.batch_size)))
    net.train()
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        for start in range(0, n, config.batch_size):
            batch = order[start : start + config.batch_size]
            x = random_hflip(images[batch], gen) if config.hflip else images[batch]
            if loss_fn is None:
                loss = F.cross_entropy(net(x), labels[batch])
            else:
                loss = loss_fn(net, x, labels[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
    net.eval()


class ViTClassifier:
    """A plain (exemplar-free) TinyViT classifier: ``fit``, ``predict_proba``, ``predict``.

    Labels must be ints ``0..n_classes-1`` (``classes_`` is ``arange(n_classes)``), so that a
    model retrained on a subset that lacks a class still has the same output columns.
    ``net_`` is the trained ``torch.nn.Module``; unlearning methods work on copies of it.
    """

    def __init__(
        self,
        vit: ViTConfig | None = None,
        train: TrainConfig | None = None,
        n_classes: int = 10,
    ) -> None:
        self.vit = replace(vit or ViTConfig(), exemplar_dim=0, n_classes=n_classes)
        self.train = train or TrainConfig()
        self.n_classes = n_classes
        self.classes_ = np.arange(n_classes)

    def fit(self, X: Any, y: Any) -> ViTClassifier:
        """Train from scratch (seeded by ``train.seed``) on images ``X`` and int labels ``y``."""
        images, labels = as_tensors(X, y)
        if labels.min() < 0 or labels.max() >= self.n_classes:
            raise ValueError(f"labels must lie in 0..{self.n_classes - 1}")
        if images.shape[2] != images.shape[3]:
            raise ValueError(f"images must be square, got {tuple(images.shape[2:])}")
        vit = replace(self.vit, image_size=images.shape[2], channels=images.shape[1])
        started, cpu = time.perf_counter(), time.process_time()
        with deterministic_torch(self.train.seed, self.train.n_threads) as gen:
            net = TinyViT(vit)
            run_epochs(net, images, labels, self.train.epochs, self.train.lr, self.train, gen)
        self.fit_seconds_ = time.perf_counter() - started
        self.fit_cpu_seconds_ = time.process_time() - cpu  # robust to other jobs' load
        self.vit = vit
        self.net_ = net
        return self

    def with_net(self, net: TinyViT) -> ViTClassifier:
        """A new classifier with the same settings around ``net`` (used by unlearning)."""
        other = copy.copy(self)
        other.net_ = net
        return other

    def logits(self, X: Any) -> torch.Tensor:
        images = torch.from_numpy(check_images(X)).permute(0, 3, 1, 2).contiguous()
        with deterministic_torch(self.train.seed, self.train.n_threads), torch.no_grad():
            self.net_.eval()
            return torch.cat([self.net_(images[s : s + 512]) for s in range(0, len(images), 512)])

    def features(self, X: Any) -> np.ndarray:
        """The normalized class token of each image, ``(n, width)`` float32."""
        images = torch.from_numpy(check_images(X)).permute(0, 3, 1, 2).contiguous()
        with deterministic_torch(self.train.seed, self.train.n_threads), torch.no_grad():
            self.net_.eval()
            chunks = [self.net_.features(images[s : s + 512]) for s in range(0, len(images), 512)]
        return torch.cat(chunks).numpy()

    def predict_proba(self, X: Any) -> np.ndarray:
        return torch.softmax(self.logits(X), dim=1).numpy().astype(np.float64)

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[self.logits(X).argmax(dim=1).numpy()]

    def score(self, X: Any, y: Any) -> float:
        return float(np.mean(self.predict(X) == np.asarray(y)))


class FrozenViTEncoder:
    """MUNKEY key encoder g_φ: the class-token features of a plain ViT trained elsewhere.

    Train the ViT on images disjoint from the ones MUNKEY memorizes (a held-out split), then
    wrap it: ``learned = False`` tells :class:`~forgetting.munkey.MUNKEYClassifier` that
    fitting never updates it, so a row's key depends on that image and the held-out split only.
    """

    learned = False

    def __init__(self, vit: ViTClassifier) -> None:
        if not hasattr(vit, "net_"):
            raise ValueError("FrozenViTEncoder needs a fitted ViTClassifier")
        self.vit = vit

    def transform(self, images: Any) -> np.ndarray:
        return self.vit.features(images)

    def __repr__(self) -> str:
        return f"FrozenViTEncoder(width={self.vit.vit.width}, stem={self.vit.vit.stem!r})"
