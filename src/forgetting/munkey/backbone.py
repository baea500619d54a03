"""A small Vision Transformer for 28×28 images, with an optional exemplar token (MUNKEY's f_θ).

The paper uses ViT-Tiny/16 (width 192, depth 12, 3 heads, 197 tokens) on 224×224 inputs and
trains for 100 epochs on a GPU. Here two shared CPU cores must train dozens of models in
minutes, so the same design is scaled down: 7×7 patches of a 28×28 image give 16 patch tokens,
plus a class token, plus (for MUNKEY) one exemplar token; width 64, depth 3, 4 heads. The plain
ViT that the approximate-unlearning baselines start from is this very module with
``exemplar_dim=0``, so MUNKEY and the baselines compare at equal backbone size.

``stem="conv"`` replaces the single patchifying convolution by a few stride-2 3×3
convolutions (Xiao et al., 2021, "Early convolutions help transformers see better"): the same
token grid, but each token sees its neighbourhood through overlapping receptive fields — at
equal epochs the more accurate backbone on the full Fashion-MNIST (docs/munkey.md).

Attention is written out (``scaled_dot_product_attention`` on CPU) instead of using
``nn.TransformerEncoderLayer``, whose inference fast path takes a different code path from
training and could make eval-mode bits depend on how the module was last used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["STEMS", "TinyViT", "ViTConfig", "conv_stem_sides"]

STEMS = ("patch", "conv")


def conv_stem_sides(image_size: int, patch: int) -> list[int]:
    """Sides after each stride-2 3×3 convolution (padding 1) of the conv stem: halve (rounding
    up) until the side is at most ``image_size // patch`` — at least one convolution."""
    target, sides = max(1, image_size // patch), [image_size]
    while len(sides) == 1 or sides[-1] > target:
        sides.append((sides[-1] + 1) // 2)
    return sides[1:]


def _conv_stem(config: ViTConfig) -> nn.Sequential:
    """Stride-2 3×3 convolutions with GELU between; channels 32, 64, … (capped at the width),
    the last one ``width``."""
    n = len(conv_stem_sides(config.image_size, config.patch))
    channels = [
        config.channels,
        *(min(config.width, 32 * 2**i) for i in range(n - 1)),
        config.width,
    ]
    layers: list[nn.Module] = []
    for i in range(n):
        layers.append(nn.Conv2d(channels[i], channels[i + 1], 3, stride=2, padding=1))
        if i < n - 1:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


@dataclass(frozen=True)
class ViTConfig:
    """Shape of the backbone. ``exemplar_dim = 0`` builds a plain ViT (no exemplar token).

    ``stem``: ``"patch"`` embeds each ``patch × patch`` square with one convolution;
    ``"conv"`` halves the image with stride-2 3×3 convolutions until the side is at most
    ``image_size // patch`` (28 with patch 7: 28 → 14 → 7 → 4, the same 4×4 grid).
    """

    image_size: int = 28
    channels: int = 1
    patch: int = 7
    width: int = 64
    depth: int = 3
    heads: int = 4
    mlp_ratio: float = 2.0
    n_classes: int = 10
    exemplar_dim: int = 0
    stem: str = "patch"

    def __post_init__(self) -> None:
        if self.stem not in STEMS:
            raise ValueError(f"stem must be one of {STEMS}, got {self.stem!r}")
        if self.image_size % self.patch:
            raise ValueError(f"patch {self.patch} must divide image_size {self.image_size}")
        if self.width % self.heads:
            raise ValueError(f"heads {self.heads} must divide width {self.width}")
        for name in ("image_size", "channels", "patch", "width", "depth", "heads", "n_classes"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.exemplar_dim < 0:
            raise ValueError(f"exemplar_dim must be ≥ 0, got {self.exemplar_dim}")

    @property
    def grid(self) -> int:
        """Side of the token grid: ``image_size // patch``, or where the conv stem stops."""
        return (
            conv_stem_sides(self.image_size, self.patch)[-1]
            if self.stem == "conv"
            else (self.image_size // self.patch)
        )

    @property
    def n_patches(self) -> int:
        return self.grid**2

    def to_dict(self) -> dict:
        return asdict(self)


class _Block(nn.Module):
    """Pre-norm transformer block: x + MHSA(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, width: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        hidden = int(width * mlp_ratio)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, w // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, w))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyViT(nn.Module):
    """Patch embedding + class token (+ exemplar token) → pre-norm blocks → linear head.

    ``forward(images, exemplars=None, drop_image=None, drop_exemplar=None)``:
    ``images`` is ``(B, C, H, W)``; ``exemplars`` ``(B, exemplar_dim)`` raw exemplar vectors
    (the adapter h_ψ maps them to the width inside). The boolean masks select rows whose image
    path (all patch tokens) or exemplar path is replaced by the learnable null tokens — pathway
    dropout during training, and the single-path accuracies of the pathway-sensitivity score.
    A row with ``exemplars=None`` gets the null exemplar token.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        if c.stem == "conv":
            self.patch_embed = _conv_stem(c)
        else:
            self.patch_embed = nn.Conv2d(c.channels, c.width, kernel_size=c.patch, stride=c.patch)
        n_tokens = 1 + c.n_patches + (1 if c.exemplar_dim else 0)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.width))
        self.pos_embed = nn.Parameter(torch.zeros(1, n_tokens, c.width))
        self.blocks = nn.ModuleList(_Block(c.width, c.heads, c.mlp_ratio) for _ in range(c.depth))
        self.norm = nn.LayerNorm(c.width)
        self.head = nn.Linear(c.width, c.n_classes)
        if c.exemplar_dim:
            self.adapter = nn.Sequential(
                nn.Linear(c.exemplar_dim, c.width), nn.GELU(), nn.Linear(c.width, c.width)
            )
            self.null_image = nn.Parameter(torch.zeros(1, 1, c.width))
            self.null_exemplar = nn.Parameter(torch.zeros(1, 1, c.width))
        self._init_weights()

    def _init_weights(self) -> None:
        """Truncated-normal(0.02) tokens and linear weights, zero biases (the ViT recipe)."""
        for p in (self.cls_token, self.pos_embed):
            nn.init.trunc_normal_(p, std=0.02)
        if self.config.exemplar_dim:
            nn.init.trunc_normal_(self.null_image, std=0.02)
            nn.init.trunc_normal_(self.null_exemplar, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(
        self,
        images: torch.Tensor,
        exemplars: torch.Tensor | None = None,
        drop_image: torch.Tensor | None = None,
        drop_exemplar: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.head(self.features(images, exemplars, drop_image, drop_exemplar))

    def features(
        self,
        images: torch.Tensor,
        exemplars: torch.Tensor | None = None,
        drop_image: torch.Tensor | None = None,
        drop_exemplar: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The normalized class token ``(B, width)`` that the head reads (same arguments as
        :meth:`forward`): what a frozen copy of a trained plain ViT offers as image keys."""
        c = self.config
        b = images.shape[0]
        patches = self.patch_embed(images).flatten(2).transpose(1, 2)
        if drop_image is not None:
            if not c.exemplar_dim:
                raise ValueError("a plain ViT has no null image token")
            patches = torch.where(drop_image[:, None, None], self.null_image, patches)
        tokens = [self.cls_token.expand(b, -1, -1), patches]
        if c.exemplar_dim:
            if exemplars is None:
                ex = self.null_exemplar.expand(b, -1, -1)
            else:
                ex = self.adapter(exemplars)[:, None, :]
                if drop_exemplar is not None:
                    ex = torch.where(drop_exemplar[:, None, None], self.null_exemplar, ex)
            tokens.append(ex)
        elif exemplars is not None:
            raise ValueError("a plain ViT (exemplar_dim=0) takes no exemplars")
        x = torch.cat(tokens, dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.norm(x[:, 0])
