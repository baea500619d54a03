"""Approximate unlearning methods on a trained plain ViT: one call, ``unlearn(name, ...)``.

Each method takes the original :class:`ViTClassifier`, the forget set and the retain set, and
returns a **new** classifier (the original is never modified). Hyperparameters default to the
values of the methods' papers, scaled to our short schedules; every one can be overridden by
keyword. All run under :func:`forgetting.munkey.deterministic_torch`, so a call is
bit-reproducible.

* ``retrain`` — the oracle: train from scratch on the retain set with the original recipe.
* ``finetune`` — continue training on the retain set only (catastrophic forgetting).
* ``neggrad_plus`` — Kurmanji et al. (2023): minimize α·CE(retain) − (1 − α)·CE(forget).
* ``amnesiac`` — Graves et al. (2021): relabel forget rows with random wrong labels and
  train on them together with the retain set.
* ``scrub`` — Kurmanji et al. (2023): a student (copy) moves away from the teacher (the
  original) on the forget set (max-steps) while matching it and the labels on the retain set.
* ``ssd`` — Foster et al. (2024), Selective Synaptic Dampening: no training; parameters much
  more important (diagonal Fisher) to the forget set than to the whole training set are scaled
  down by min(λ·I_D / I_F, 1).

CoUn (contrastive unlearning) is not implemented: it needs a contrastive pre-training stage
that doubles the training budget, which the 2-core benchmark cannot afford.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from forgetting.munkey.training import cosine_schedule, deterministic_torch

from .vit import TrainConfig, ViTClassifier, as_tensors, run_epochs

__all__ = ["METHODS", "unlearn"]

Data = tuple[Any, Any]


def _retrain(model: ViTClassifier, forget, retain, gen, **_: Any) -> ViTClassifier:
    return ViTClassifier(model.vit, model.train, model.n_classes).fit(*retain)


def _finetune(model, forget, retain, gen, *, epochs: int = 3, lr: float = 1e-3):
    net = copy.deepcopy(model.net_)
    images, labels = as_tensors(*retain)
    run_epochs(net, images, labels, epochs, lr, model.train, gen)
    return model.with_net(net)


def _neggrad_plus(model, forget, retain, gen, *, epochs: int = 2, lr: float = 1e-3, alpha=0.95):
    net = copy.deepcopy(model.net_)
    r_img, r_lab = as_tensors(*retain)
    f_img, f_lab = as_tensors(*forget)
    state = {"i": 0}
    order = torch.randperm(len(f_img), generator=gen)
    bs = model.train.batch_size

    def loss_fn(net, images, labels):
        # cycle through the forget set alongside the retain batches
        start = state["i"] % len(f_img)
        idx = order[start : start + bs]
        state["i"] += len(idx)
        ascent = F.cross_entropy(net(f_img[idx]), f_lab[idx])
        return alpha * F.cross_entropy(net(images), labels) - (1 - alpha) * ascent

    run_epochs(net, r_img, r_lab, epochs, lr, model.train, gen, loss_fn)
    return model.with_net(net)


def _amnesiac(model, forget, retain, gen, *, epochs: int = 2, lr: float = 1e-3):
    net = copy.deepcopy(model.net_)
    r_img, r_lab = as_tensors(*retain)
    f_img, f_lab = as_tensors(*forget)
    shift = torch.randint(1, model.n_classes, (len(f_lab),), generator=gen)
    wrong = (f_lab + shift) % model.n_classes
    run_epochs(
        net, torch.cat([r_img, f_img]), torch.cat([r_lab, wrong]), epochs, lr, model.train, gen
    )
    return model.with_net(net)


def _kl(student_logits, teacher_logits, temperature: float) -> torch.Tensor:
    return F.kl_div(
        F.log_softmax(student_logits / temperature, dim=1),
        F.softmax(teacher_logits / temperature, dim=1),
        reduction="batchmean",
    )


def _scrub(
    model,
    forget,
    retain,
    gen,
    *,
    epochs: int = 3,
    max_epochs: int = 1,
    lr: float = 5e-4,
    alpha: float = 0.5,
    gamma: float = 1.0,
    temperature: float = 4.0,
):
    teacher = model.net_
    teacher.eval()
    student = copy.deepcopy(teacher)
    r_img, r_lab = as_tensors(*retain)
    f_img, _ = as_tensors(*forget)
    bs = model.train.batch_size
    steps = epochs * math.ceil(len(r_img) / bs) + max_epochs * math.ceil(len(f_img) / bs)
    opt = torch.optim.AdamW(student.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    sched = cosine_schedule(opt, steps)

    def step(loss: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()

    student.train()
    for epoch in range(epochs):
        if epoch < max_epochs:  # max-steps: move away from the teacher on the forget set
            order = torch.randperm(len(f_img), generator=gen)
            for s in range(0, len(f_img), bs):
                x = f_img[order[s : s + bs]]
                with torch.no_grad():
                    t = teacher(x)
                step(-_kl(student(x), t, temperature))
        order = torch.randperm(len(r_img), generator=gen)
        for s in range(0, len(r_img), bs):  # min-steps: stay close on the retain set
            idx = order[s : s + bs]
            x = r_img[idx]
            with torch.no_grad():
                t = teacher(x)
            out = student(x)
            step(gamma * F.cross_entropy(out, r_lab[idx]) + alpha * _kl(out, t, temperature))
    student.eval()
    return model.with_net(student)


def _fisher(net, images, labels, batch_size: int) -> dict[str, torch.Tensor]:
    """Diagonal Fisher estimate: mean over batches of the squared loss gradients."""
    out = {n: torch.zeros_like(p) for n, p in net.named_parameters()}
    batches = 0
    for s in range(0, len(images), batch_size):
        net.zero_grad(set_to_none=True)
        F.cross_entropy(net(images[s : s + batch_size]), labels[s : s + batch_size]).backward()
        for n, p in net.named_parameters():
            if p.grad is not None:
                out[n] += p.grad.detach() ** 2
        batches += 1
    return {n: v / max(batches, 1) for n, v in out.items()}


def _ssd(model, forget, retain, gen, *, alpha: float = 10.0, lam: float = 1.0):
    net = copy.deepcopy(model.net_)
    net.eval()
    f_img, f_lab = as_tensors(*forget)
    r_img, r_lab = as_tensors(*retain)
    bs = model.train.batch_size
    imp_f = _fisher(net, f_img, f_lab, bs)
    imp_d = _fisher(net, torch.cat([r_img, f_img]), torch.cat([r_lab, f_lab]), bs)
    net.zero_grad(set_to_none=True)
    with torch.no_grad():
        for n, p in net.named_parameters():
            selected = imp_f[n] > alpha * imp_d[n]
            beta = (lam * imp_d[n] / imp_f[n].clamp_min(1e-30)).clamp(max=1.0)
            p.mul_(torch.where(selected, beta, torch.ones_like(beta)))
    return model.with_net(net)


METHODS: dict[str, Callable[..., ViTClassifier]] = {
    "retrain": _retrain,
    "finetune": _finetune,
    "neggrad_plus": _neggrad_plus,
    "amnesiac": _amnesiac,
    "scrub": _scrub,
    "ssd": _ssd,
}


def unlearn(
    method: str,
    model: ViTClassifier,
    forget_data: Data,
    retain_data: Data,
    *,
    seed: int | None = None,
    **params: Any,
) -> ViTClassifier:
    """Apply an approximate unlearning method and return the unlearned (new) classifier.

    ``forget_data`` / ``retain_data`` are ``(images, int labels)`` with images shaped
    ``(n, H, W)`` or ``(n, H, W, C)`` in [0, 1]. ``seed`` (default: the model's training
    seed) drives batch order and random relabelling; ``params`` override the method's
    defaults (see each method's signature). The input ``model`` is left untouched.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {sorted(METHODS)}")
    if not hasattr(model, "net_"):
        raise ValueError("model must be a fitted ViTClassifier")
    train: TrainConfig = model.train
    with deterministic_torch(train.seed if seed is None else seed, train.n_threads) as gen:
        return METHODS[method](model, forget_data, retain_data, gen, **params)
