"""Unlearning methods on the LoRA adapters, and DURABLEUN-SAF.

Every method minimises a loss over the adapter parameters with Adam, one forget batch (the whole
forget set, or ``forget_batch`` random rows of it) and a random retain batch per step, and stops
by one rule shared by all: as soon as the forget terms of *its own loss* are satisfied — FA ≤
``stop_fa`` at the precisions the loss trains (full precision for the baselines; full precision
and the straight-through INT4 model for SAF) — or after ``max_steps``. That is how unlearning is
run in practice ("until the forget set looks forgotten"), and it is what makes quantization
recovery possible: the run stops as soon as the full-precision model stops answering, having
moved the weights by as little as it could.

Losses (``f`` = forget batch, ``r`` = retain batch, NLL per answer token, ``ref`` = the model
before unlearning, frozen):

* **GA**: −NLL_f (gradient ascent on the forget answers).
* **GradDiff**: −NLL_f + λ·NLL_r.
* **NPO** (+RT, as TOFU runs it): (2/β)·mean log(1 + (π/π_ref)^β) on f + λ·NLL_r.
* **SalUn**: GradDiff on the adapter entries whose forget-loss gradient is in the top
  ``salun_fraction`` by magnitude (the saliency mask, computed once at the start).
* **SCRUB** (single-loop form): KL(ref‖θ)_r + λ·NLL_r − KL(ref‖θ)_f.
* **RMU**: ‖h_f − c·u‖² + ``rmu_alpha``·‖h_r − h_r^ref‖² on the residual stream after block
  ``rmu_layer`` (u a fixed random unit vector, c = ``rmu_coeff`` × the mean reference norm).
* **SAF** (DURABLEUN-SAF): L_f(θ) + α_t·L_f(Q_STE(θ)) + λ(α)·NLL_r with L_f NPO's forget term,
  Q_STE the straight-through INT4 adapters, α_t = α·min(1, t/warm-up) and λ(α) = λ·(1 + α) —
  the retain term grows with the quantization pressure so that it is not drowned out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from .model import Batch, TinyLM, answer_nll, exact_match, sequence_logprob

METHODS = ("GA", "GradDiff", "NPO", "SalUn", "SCRUB", "RMU", "SAF")


@dataclass(frozen=True)
class UnlearnConfig:
    """One unlearning run. ``lr`` is Adam's step size on the adapters."""

    method: str = "GradDiff"
    lr: float = 1e-4
    max_steps: int = 300
    eval_every: int = 1
    stop_fa: float = 0.05
    retain_batch: int = 32
    forget_batch: int | None = None
    """Forget rows per step: ``None`` = the whole forget set (the CPU-scale setting); a number
    draws that many at random each step (hundreds of forget questions on a pretrained model).
    The stopping rule always checks the whole forget set."""
    lam: float = 1.0
    beta: float = 0.1
    alpha: float = 3.0
    warmup: int = 20
    quant: str = "int4"
    salun_fraction: float = 0.5
    rmu_layer: int = 0
    rmu_coeff: float = 3.0
    rmu_alpha: float = 5.0
    stop_on_quant: bool = True
    """SAF only: its stopping rule also checks FA of the INT4-STE model (the term its loss
    trains). False gives the baselines' rule (fp32 only) — the ablation that shows what the loss
    term alone buys."""
    seed: int = 0


def _npo_forget(model: TinyLM, ref_lp: torch.Tensor, forget: Batch, beta: float) -> torch.Tensor:
    log_ratio = sequence_logprob(model, forget) - ref_lp
    return (2.0 / beta) * F.softplus(beta * log_ratio).mean()


def _kl_to_ref(model: TinyLM, ref: TinyLM, batch: Batch) -> torch.Tensor:
    """Mean KL(ref ‖ model) of the next-token distributions at the answer positions."""
    logp = torch.log_softmax(model(batch.inputs), dim=-1)[batch.mask]
    with torch.no_grad():
        ref_logp = torch.log_softmax(ref(batch.inputs), dim=-1)[batch.mask]
    return F.kl_div(logp, ref_logp, log_target=True, reduction="batchmean")


def forget_accuracy(model: TinyLM, batch: Batch, precision: str | None = None) -> float:
    with model.adapters_as(precision):
        return float(exact_match(model, batch).float().mean())


def unlearn(model: TinyLM, forget: Batch, retain: Batch, cfg: UnlearnConfig) -> dict:
    """Run ``cfg.method`` on ``model``'s adapters in place; returns steps taken and whether the
    stopping rule fired."""
    if cfg.method not in METHODS:
        raise ValueError(f"unknown method {cfg.method!r}; expected one of {METHODS}")
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    params = model.adapter_parameters()
    opt = torch.optim.Adam(params, lr=cfg.lr)
    with torch.no_grad():
        ref_lp_f = sequence_logprob(ref, forget)
    loss_fn = _loss(cfg, model, ref, forget)
    mask = _saliency_mask(model, forget, cfg.salun_fraction) if cfg.method == "SalUn" else None
    stop_precisions: list[str | None] = [None]
    if cfg.method == "SAF" and cfg.stop_on_quant:
        stop_precisions.append(cfg.quant)

    steps, stopped = 0, False
    for step in range(1, cfg.max_steps + 1):
        model.train()
        rows = torch.randperm(len(retain), generator=gen)[: cfg.retain_batch]
        f, lp_f = forget, ref_lp_f
        if cfg.forget_batch is not None:
            picked = torch.randperm(len(forget), generator=gen)[: cfg.forget_batch]
            f, lp_f = forget.subset(picked), ref_lp_f[picked]
        loss = loss_fn(retain.subset(rows), f, lp_f, step)
        opt.zero_grad()
        loss.backward()
        if mask is not None:
            for p, m in zip(params, mask, strict=True):
                p.grad.mul_(m)
        opt.step()
        steps = step
        if step % cfg.eval_every == 0 and all(
            forget_accuracy(model, forget, p) <= cfg.stop_fa for p in stop_precisions
        ):
            stopped = True
            break
    model.eval()
    return {"steps": steps, "stopped": stopped}


def _loss(
    cfg: UnlearnConfig, model: TinyLM, ref: TinyLM, forget: Batch
) -> Callable[[Batch, Batch, torch.Tensor, int], torch.Tensor]:
    """The method's loss as a function of (retain batch, forget batch, the reference model's
    log-probabilities of that forget batch's answers, step)."""
    m = cfg.method
    if m == "GA":
        return lambda r, f, lp, t: -answer_nll(model, f)
    if m in ("GradDiff", "SalUn"):
        return lambda r, f, lp, t: -answer_nll(model, f) + cfg.lam * answer_nll(model, r)
    if m == "NPO":
        return lambda r, f, lp, t: (
            _npo_forget(model, lp, f, cfg.beta) + cfg.lam * answer_nll(model, r)
        )
    if m == "SCRUB":
        return lambda r, f, lp, t: (
            _kl_to_ref(model, ref, r) + cfg.lam * answer_nll(model, r) - _kl_to_ref(model, ref, f)
        )
    if m == "RMU":
        return _rmu_loss(cfg, model, ref, forget)

    lam = cfg.lam * (1.0 + cfg.alpha)

    def saf(r: Batch, f: Batch, lp: torch.Tensor, t: int) -> torch.Tensor:
        alpha_t = cfg.alpha * min(1.0, t / max(1, cfg.warmup))
        loss = _npo_forget(model, lp, f, cfg.beta)
        if alpha_t > 0:
            with model.adapters_as(cfg.quant):
                loss = loss + alpha_t * _npo_forget(model, lp, f, cfg.beta)
        return loss + lam * answer_nll(model, r)

    return saf


def _rmu_loss(cfg: UnlearnConfig, model: TinyLM, ref: TinyLM, forget: Batch):
    layer = cfg.rmu_layer
    g = torch.Generator().manual_seed(cfg.seed + 1)
    with torch.no_grad():
        _, h_ref_f = ref(forget.inputs, return_hidden=layer)
        norm = h_ref_f[forget.inputs != 0].norm(dim=-1).mean()
        u = torch.rand(h_ref_f.shape[-1], generator=g)
        control = cfg.rmu_coeff * norm * u / u.norm()

    def loss(r: Batch, f: Batch, lp: torch.Tensor, t: int) -> torch.Tensor:
        _, h_f = model(f.inputs, return_hidden=layer)
        _, h_r = model(r.inputs, return_hidden=layer)
        with torch.no_grad():
            _, h_r_ref = ref(r.inputs, return_hidden=layer)
        valid_r = r.inputs != 0
        steer = ((h_f[f.inputs != 0] - control) ** 2).sum(-1).mean()
        keep = ((h_r[valid_r] - h_r_ref[valid_r]) ** 2).sum(-1).mean()
        return steer + cfg.rmu_alpha * keep

    return loss


def _saliency_mask(model: TinyLM, forget: Batch, fraction: float) -> list[torch.Tensor]:
    """SalUn's weight saliency: 1 for the top ``fraction`` of |∂NLL_f/∂θ| in each adapter
    tensor, 0 elsewhere."""
    params = model.adapter_parameters()
    grads = torch.autograd.grad(answer_nll(model, forget), params)
    masks = []
    for g in grads:
        k = max(1, int(round(fraction * g.numel())))
        threshold = g.abs().flatten().kthvalue(g.numel() - k + 1).values
        masks.append((g.abs() >= threshold).float())
    return masks
