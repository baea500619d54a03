"""MUNKEYClassifier: an image classifier that forgets a training row by deleting its key.

Design (Machine UNlearning via KEY deletion, design.md §7): a frozen key encoder g maps each
training image to a key k_i; each row also owns a learnable exemplar v_i (128-d) that an
adapter h_ψ maps to one extra token of a small ViT f_θ. θ, ψ and all v_i are trained jointly
with cross-entropy under two regularizers that make the model useful *without* a row's own
exemplar:

* pathway dropout — per row, the image path (all patch tokens) or the exemplar path is
  replaced by a learnable null token, so neither path can be relied on alone;
* retrieval simulation — with probability ``retrieval_prob`` the row's own exemplar is
  replaced by the cosine-weighted mix of its ``retrieval_k`` nearest neighbours' exemplars
  (memory minus itself, neighbours detached), which is what the row will see at test time
  once its own pair is gone.

At inference the ``k`` nearest keys are retrieved and combined (``aggregation``, see
:data:`AGGREGATIONS`). ``forget(ids)`` deletes the rows' (k_i, v_i) pairs: no gradient step,
no parameter change, O(1) per row. The guarantee is therefore **approximate**: the backbone
and adapter were trained with the row and keep whatever they learnt from it; only the
row-specific memory is erased exactly. For exact unlearning use :class:`~forgetting.QSSClassifier`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from .._masked_repr import MaskedKeyRepr
from ..ids import listing
from ..schema.membership import canonical_id, derive_key, id_bytes, receipt_hash
from .backbone import STEMS, TinyViT, ViTConfig
from .memory import KeyMemory
from .training import (
    auto_patch,
    check_images,
    cosine_schedule,
    default_encoder,
    deterministic_torch,
    random_hflip,
)

__all__ = ["AGGREGATIONS", "MUNKEYClassifier", "MunkeyReceipt"]

AGGREGATIONS = ("ensemble", "softmax_fusion", "rank_fusion", "direct_key")
"""How retrieved neighbours are combined at inference.

* ``ensemble`` — the paper's default: K forward passes, one per retrieved exemplar, logits
  averaged with softmax(sim/τ) weights.
* ``softmax_fusion`` — one pass with the softmax(sim/τ)-weighted mean of the K exemplars.
* ``rank_fusion`` — one pass with the reciprocal-rank (1/(r+1))-weighted mean of the exemplars.
* ``direct_key`` — one pass with the exemplar of the single nearest key (K = 1).
"""

_CHUNK = 256


@dataclass(frozen=True)
class MunkeyReceipt:
    """What one ``forget`` call did.

    ``id_hashes`` are keyed hashes of the ids removed now; ``already_forgotten`` those of ids
    that an earlier call had removed (reported, not counted again). ``parameters_changed`` is
    always False: MUNKEY forgets by deleting memory rows only.
    """

    operation: str
    scope: str
    n_removed: int
    id_hashes: tuple[str, ...]
    already_forgotten: tuple[str, ...]
    n_remaining: int
    parameters_changed: bool
    seconds: float
    timestamp: str

    def to_dict(self) -> dict:
        """A JSON-ready dict (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


class MUNKEYClassifier(MaskedKeyRepr, ClassifierMixin, BaseEstimator):
    """Unlearning-by-design image classifier: ViT + exemplar token + deletable key memory.

    Parameters
    ----------
    width, depth, heads : int
        Backbone shape (paper: ViT-Tiny/16, width 192, depth 12; here 64/3/4 — see
        docs/munkey.md).
    patch : int or "auto"
        Side of the square patches; it must divide the image side. ``"auto"`` takes the
        largest divisor of the side that is at most a quarter of it, so an image becomes at
        least 4×4 patch tokens: 7 for 28×28 (16 tokens), 2 for 8×8, 8 for 32×32. The choice
        is kept in ``patch_``.
    stem : {"patch", "conv"}
        How images become tokens: one ``patch × patch`` convolution, or stride-2 3×3
        convolutions down to the same grid (:class:`~forgetting.munkey.ViTConfig`): more
        compute per image, and the more accurate backbone on the full Fashion-MNIST
        (docs/munkey.md).
    exemplar_dim : int
        Width of each row's exemplar v_i (paper: 128).
    epochs, batch_size, lr, weight_decay : training schedule
        AdamW with β = (0.9, 0.99), cosine decay after a 5 % linear warm-up.
    exemplar_lr : float
        Learning rate of the exemplars. Each v_i receives a gradient only when its row is in
        the batch (once per epoch), so with few epochs it needs a larger step than θ.
    hflip : bool
        Mirror each training image left-right with probability ½ (a fresh draw per batch):
        augmentation for images whose class survives a mirror (clothing, photos — not digits).
        Keys are computed once, from the unflipped images.
    pathway_dropout : float
        Probability that a training row has one path replaced by its null token (image and
        exemplar path equally likely; never both).
    retrieval_prob, retrieval_k : float, int
        p_r and K′ of retrieval simulation.
    k, tau, aggregation : int, float, str
        K retrieved neighbours, temperature τ of softmax(sim/τ), and how they are combined
        (one of :data:`AGGREGATIONS`).
    encoder : frozen encoder or None
        g_φ: any object with ``transform(images) -> (n, d)`` and ``learned = False``. None
        uses :class:`forgetting.encoders.HOGEncoder` on the grey-scale image (frozen, fitted
        on nothing, so a row's key is a function of that image alone).
    random_state, n_threads : int
        Seed of initialization, batch order and all masks; torch thread count during fit and
        predict (results are bit-reproducible for a fixed thread count).
    secret_key : bytes, str or None
        Key of the keyed hashes in receipts (None derives it from ``random_state``: not secret).
    """

    def __init__(
        self,
        *,
        width: int = 64,
        depth: int = 3,
        heads: int = 4,
        patch: int | str = "auto",
        stem: str = "patch",
        exemplar_dim: int = 128,
        epochs: int = 15,
        batch_size: int = 128,
        lr: float = 2e-3,
        exemplar_lr: float = 1e-2,
        weight_decay: float = 0.05,
        hflip: bool = False,
        pathway_dropout: float = 0.3,
        retrieval_prob: float = 0.3,
        retrieval_k: int = 8,
        k: int = 8,
        tau: float = 0.05,
        aggregation: str = "ensemble",
        encoder: Any = None,
        random_state: int = 0,
        n_threads: int = 1,
        secret_key: bytes | str | None = None,
        progress: bool = False,
    ) -> None:
        self.width = width
        self.depth = depth
        self.heads = heads
        self.patch = patch
        self.stem = stem
        self.exemplar_dim = exemplar_dim
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.exemplar_lr = exemplar_lr
        self.weight_decay = weight_decay
        self.hflip = hflip
        self.pathway_dropout = pathway_dropout
        self.retrieval_prob = retrieval_prob
        self.retrieval_k = retrieval_k
        self.k = k
        self.tau = tau
        self.aggregation = aggregation
        self.encoder = encoder
        self.random_state = random_state
        self.n_threads = n_threads
        self.secret_key = secret_key
        self.progress = progress

    # -- validation ----------------------------------------------------------------------
    def _check_params(self) -> None:
        ints = ("width", "depth", "heads", "exemplar_dim", "epochs", "batch_size")
        if self.patch != "auto" and not (
            isinstance(self.patch, int | np.integer) and self.patch >= 1
        ):
            raise ValueError(f'patch must be a positive int or "auto", got {self.patch!r}')
        if self.stem not in STEMS:
            raise ValueError(f"stem must be one of {STEMS}, got {self.stem!r}")
        for name in (*ints, "retrieval_k", "k", "n_threads"):
            value = getattr(self, name)
            if not (isinstance(value, int | np.integer) and value >= 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name in ("lr", "exemplar_lr", "tau"):
            value = getattr(self, name)
            if not (isinstance(value, float | int) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not isinstance(self.hflip, bool | np.bool_):
            raise ValueError(f"hflip must be True or False, got {self.hflip!r}")
        if not (isinstance(self.weight_decay, float | int) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be ≥ 0, got {self.weight_decay!r}")
        for name in ("pathway_dropout", "retrieval_prob"):
            value = getattr(self, name)
            if not (isinstance(value, float | int) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        self._check_aggregation(self.aggregation)
        if not isinstance(self.random_state, int | np.integer):
            raise ValueError(f"random_state must be an int, got {self.random_state!r}")
        if self.encoder is not None and (
            getattr(self.encoder, "learned", False) or not hasattr(self.encoder, "transform")
        ):
            raise ValueError(
                "encoder must be frozen (learned=False) with a transform(images) method: a "
                "learned key encoder would carry the training rows beyond their keys"
            )

    @staticmethod
    def _check_aggregation(aggregation: str) -> None:
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")

    @staticmethod
    def _check_ids(ids: Any, n: int | None) -> list:
        if ids is None:
            if n is None:
                raise ValueError("ids are required")
            ids = range(n)
        if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
            raise TypeError("ids must be a sequence of ints or strings")
        ids = [canonical_id(i) for i in ids]
        if n is not None and len(ids) != n:
            raise ValueError(f"got {len(ids)} ids for {n} rows")
        if not ids:
            raise ValueError("no ids given")
        if len(set(ids)) != len(ids):
            seen: set = set()
            dupes = [i for i in ids if i in seen or seen.add(i)]
            raise ValueError(f"duplicate ids: {dupes[:5]}")
        return ids

    def _key_encoder(self, shape: tuple[int, ...]):
        return self.encoder if self.encoder is not None else default_encoder(shape[0], shape[1])

    def _keys(self, images: np.ndarray) -> torch.Tensor:
        """L2-normalized keys g(x)/‖g(x)‖ of ``(n, H, W, C)`` images (float32)."""
        if self.encoder is None:
            feats = self._key_encoder(images.shape[1:]).transform(images.mean(axis=3))
        else:
            raw = images[..., 0] if images.shape[3] == 1 else images
            feats = self.encoder.transform(raw)
        feats = torch.as_tensor(np.ascontiguousarray(feats, dtype=np.float32))
        if feats.ndim != 2 or len(feats) != len(images) or not torch.isfinite(feats).all():
            raise ValueError(f"the key encoder returned {tuple(feats.shape)} or non-finite keys")
        return F.normalize(feats, dim=1)

    @staticmethod
    def _to_tensor(images: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()

    # -- fit -----------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, ids: Sequence[Hashable] | None = None) -> MUNKEYClassifier:
        """Train backbone, adapter and one exemplar per row; store (key, exemplar) per id.

        ``X``: images ``(n, H, W)`` or ``(n, H, W, C)`` with values in [0, 1], H = W divisible
        by ``patch`` (``"auto"`` picks one: :func:`auto_patch`). ``ids`` default to
        ``range(n)``. On any validation error nothing changes.
        """
        self._check_params()
        images = check_images(X)
        n, h, w, c = images.shape
        if h != w:
            raise ValueError(f"images must be square, got {h}×{w}")
        patch = auto_patch(h) if self.patch == "auto" else int(self.patch)
        if h % patch:
            raise ValueError(
                f"patch={patch} must divide the image side {h}: pass a divisor of {h} or "
                'patch="auto"'
            )
        if self.width % self.heads:
            raise ValueError(f"heads={self.heads} must divide width={self.width}")
        y = np.asarray(y)
        if y.ndim != 1 or len(y) != n:
            raise ValueError(f"y must be 1-D with {n} labels, got shape {y.shape}")
        if y.dtype.kind == "f" and not (np.isfinite(y).all() and np.all(y == np.round(y))):
            raise ValueError("labels must be integers or strings (no NaN)")
        if y.dtype.kind not in "biuUSf":
            raise ValueError(f"labels must be integers or strings, got dtype {y.dtype}")
        classes, targets = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(f"need at least 2 classes, got {classes.tolist()}")
        id_list = self._check_ids(ids, n)
        keys = self._keys(images)
        config = ViTConfig(
            image_size=h,
            channels=c,
            patch=patch,
            width=int(self.width),
            depth=int(self.depth),
            heads=int(self.heads),
            n_classes=int(classes.size),
            exemplar_dim=int(self.exemplar_dim),
            stem=self.stem,
        )
        started, cpu = time.perf_counter(), time.process_time()
        with deterministic_torch(int(self.random_state), int(self.n_threads)) as gen:
            net = TinyViT(config)
            init = torch.randn(n, config.exemplar_dim, generator=gen) * 0.02
            exemplars = torch.nn.Parameter(init)
            tensor, labels = self._to_tensor(images), torch.as_tensor(targets)
            self._train(net, exemplars, tensor, labels, keys, gen)
        self.patch_ = patch
        self.fit_seconds_ = time.perf_counter() - started
        self.fit_cpu_seconds_ = time.process_time() - cpu  # robust to other jobs' load
        net.eval()
        self.net_ = net
        self.memory_ = KeyMemory(keys, exemplars.detach(), id_list)
        self.classes_ = classes
        self.image_shape_ = images.shape[1:]
        self.tombstones_: set[str] = set()
        self.n_features_in_ = h * w * c
        return self

    def _neighbours(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K′ nearest other rows of each row (by key) and their cosine weights (sum to 1)."""
        n = len(keys)
        kk = min(int(self.retrieval_k), n - 1)
        idx = torch.empty(n, kk, dtype=torch.long)
        weights = torch.empty(n, kk)
        for start in range(0, n, 1024):
            sims = keys[start : start + 1024] @ keys.T
            rows = torch.arange(len(sims))
            sims[rows, rows + start] = -math.inf
            top, slot = torch.topk(sims, kk, dim=1)
            w = top.clamp_min(0.0) + 1e-6
            idx[start : start + 1024] = slot
            weights[start : start + 1024] = w / w.sum(dim=1, keepdim=True)
        return idx, weights

    def _train(self, net, exemplars, images, targets, keys, gen) -> None:
        """Joint cross-entropy training of θ, ψ and the exemplars (design.md §7)."""
        n = len(images)
        nbr_idx, nbr_w = self._neighbours(keys)
        optimizer = torch.optim.AdamW(
            [
                {"params": list(net.parameters()), "lr": float(self.lr)},
                {"params": [exemplars], "lr": float(self.exemplar_lr)},
            ],
            betas=(0.9, 0.99),
            weight_decay=float(self.weight_decay),
        )
        scheduler = cosine_schedule(optimizer, int(self.epochs) * math.ceil(n / self.batch_size))
        p_drop, p_r = float(self.pathway_dropout), float(self.retrieval_prob)
        from tqdm.auto import tqdm

        net.train()
        for _ in tqdm(range(int(self.epochs)), desc="MUNKEY fit", disable=not self.progress):
            order = torch.randperm(n, generator=gen)
            for start in range(0, n, int(self.batch_size)):
                batch = order[start : start + int(self.batch_size)]
                u = torch.rand(len(batch), generator=gen)
                simulate = torch.rand(len(batch), generator=gen) < p_r
                v = exemplars[batch]
                if nbr_idx.shape[1] and bool(simulate.any()):
                    mixed = (nbr_w[batch, :, None] * exemplars.detach()[nbr_idx[batch]]).sum(1)
                    v = torch.where(simulate[:, None], mixed, v)
                drop_image = u < p_drop / 2
                drop_exemplar = (u >= p_drop / 2) & (u < p_drop)
                x = random_hflip(images[batch], gen) if self.hflip else images[batch]
                logits = net(x, v, drop_image, drop_exemplar)
                loss = F.cross_entropy(logits, targets[batch])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()

    # -- inference -----------------------------------------------------------------------
    def _logits(
        self,
        X: Any,
        aggregation: str | None = None,
        *,
        path: str = "both",
    ) -> torch.Tensor:
        """Combined logits ``(n, classes)``; ``path`` = both | image (null exemplar) | token."""
        check_is_fitted(self, "net_")
        aggregation = self.aggregation if aggregation is None else aggregation
        self._check_aggregation(aggregation)
        images = check_images(X, self.image_shape_)
        keys = self._keys(images) if path != "image" else None
        out = []
        with deterministic_torch(int(self.random_state), int(self.n_threads)), torch.no_grad():
            tensor = self._to_tensor(images)
            for start in range(0, len(images), _CHUNK):
                part = tensor[start : start + _CHUNK]
                q = None if keys is None else keys[start : start + _CHUNK]
                out.append(self._combine(part, q, aggregation, path))
        return torch.cat(out)

    def _combine(self, images, queries, aggregation: str, path: str) -> torch.Tensor:
        net, memory = self.net_, self.memory_
        m = len(images)
        drop_image = torch.ones(m, dtype=torch.bool) if path == "token" else None
        k = 1 if aggregation == "direct_key" else int(self.k)
        if queries is None or memory.size == 0:
            return net(images, None, drop_image)
        sims, slots = memory.search(queries, k)
        exemplars = memory.exemplars[slots]  # (m, k, e)
        if aggregation == "ensemble":
            weights = torch.softmax(sims / float(self.tau), dim=1)
            kk = slots.shape[1]
            rep = images.repeat_interleave(kk, dim=0)
            drop = None if drop_image is None else drop_image.repeat_interleave(kk)
            logits = net(rep, exemplars.reshape(m * kk, -1), drop).reshape(m, kk, -1)
            return (weights[:, :, None] * logits).sum(dim=1)
        if aggregation == "rank_fusion":
            ranks = torch.arange(slots.shape[1], dtype=torch.float32)
            weights = (1.0 / (ranks + 1.0)).expand(m, -1)
            weights = weights / weights.sum(dim=1, keepdim=True)
        else:  # softmax_fusion, direct_key (k = 1: weight 1)
            weights = torch.softmax(sims / float(self.tau), dim=1)
        fused = (weights[:, :, None] * exemplars).sum(dim=1)
        return net(images, fused, drop_image)

    def predict_proba(self, X: Any, aggregation: str | None = None) -> np.ndarray:
        """Class probabilities (softmax of the combined logits), columns in ``classes_``."""
        return torch.softmax(self._logits(X, aggregation), dim=1).numpy().astype(np.float64)

    def predict(self, X: Any, aggregation: str | None = None) -> np.ndarray:
        return self.classes_[self._logits(X, aggregation).argmax(dim=1).numpy()]

    def retrieve(self, X: Any, k: int | None = None) -> list[list]:
        """Ids of the ``k`` (default ``self.k``) nearest keys of each image, nearest first."""
        check_is_fitted(self, "net_")
        keys = self._keys(check_images(X, self.image_shape_))
        _, slots = self.memory_.search(keys, int(self.k if k is None else k))
        return [[self.memory_.ids[s] for s in row] for row in slots.tolist()]

    def pathway_sensitivity(
        self, X: Any, y: Any, aggregation: str | None = None, eps: float = 1e-8
    ) -> dict[str, float]:
        """P_s = |A_img − A_tok| / (A_both + ε) with the three path accuracies on (X, y).

        A_img: exemplar token replaced by its null token (image only); A_tok: patch tokens
        replaced by the null image token (retrieved exemplars only); A_both: the full model.
        Low P_s means neither pathway dominates — the paper's hyperparameter criterion.
        """
        y = np.asarray(y)
        acc = {}
        for path in ("both", "image", "token"):
            pred = self.classes_[self._logits(X, aggregation, path=path).argmax(dim=1).numpy()]
            acc[path] = float(np.mean(pred == y))
        ps = abs(acc["image"] - acc["token"]) / (acc["both"] + eps)
        return {"A_both": acc["both"], "A_img": acc["image"], "A_tok": acc["token"], "P_s": ps}

    # -- forgetting ----------------------------------------------------------------------
    def _hash_key(self) -> bytes:
        return derive_key(self.secret_key, int(self.random_state))

    def forget(self, ids: Sequence[Hashable]) -> MunkeyReceipt:
        """Delete the rows' keys and exemplars; no parameter changes (approximate unlearning).

        Ids forgotten earlier are reported in ``already_forgotten``; ids never fitted raise
        KeyError naming them, duplicates ValueError — on any error nothing changes.
        """
        started = time.perf_counter()
        check_is_fitted(self, "net_")
        id_list = self._check_ids(ids, None)
        key = self._hash_key()
        memory = self.memory_
        hashes = [receipt_hash(key, id_bytes(i)) for i in id_list]
        present, again, unknown = [], [], []
        for row_id, digest in zip(id_list, hashes, strict=True):
            if row_id in memory:
                present.append((row_id, digest))
            elif digest in self.tombstones_:
                again.append(digest)
            else:
                unknown.append(row_id)
        if unknown:
            raise KeyError(f"unknown ids (never fitted): {listing(unknown)}")
        for row_id, digest in present:
            memory.delete(row_id)
            self.tombstones_.add(digest)
        return MunkeyReceipt(
            operation="forget",
            scope="keys+exemplars",
            n_removed=len(present),
            id_hashes=tuple(d for _, d in present),
            already_forgotten=tuple(again),
            n_remaining=memory.size,
            parameters_changed=False,
            seconds=time.perf_counter() - started,
            timestamp=datetime.now(UTC).isoformat(),
        )

    @property
    def n_rows_(self) -> int:
        check_is_fitted(self, "memory_")
        return self.memory_.size

    @property
    def ids_(self) -> list:
        check_is_fitted(self, "memory_")
        return list(self.memory_.ids)

    # -- persistence ---------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the model atomically: safetensors tensors + a JSON manifest, checksummed."""
        from .io import save_munkey

        check_is_fitted(self, "net_")
        save_munkey(self, path)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        encoder: Any = None,
        secret_key: bytes | str | None = None,
        allow_version_mismatch: bool = False,
    ) -> MUNKEYClassifier:
        """Read a model written by :meth:`save`; any damaged file raises ModelFileError.

        ``encoder`` must be given again if the model was fitted with a custom encoder;
        ``secret_key`` if it was fitted with one (checked against the stored fingerprint).
        """
        from .io import load_munkey

        return load_munkey(cls, path, encoder, secret_key, allow_version_mismatch)
