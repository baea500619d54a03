"""The DurableUn pipeline at CPU scale: pretrain → NF4 base → LoRA fine-tune → unlearn → audit.

1. **Pretrain** a :class:`~.model.TinyLM` (all weights, float32) on the *public* authors: it
   learns the question format and the answer vocabulary, never the fictitious authors.
2. **Quantize and freeze the base** to NF4 and add LoRA adapters (QLoRA's deployment layout).
3. **Fine-tune the adapters** on every fictitious author (forget + retain), like TOFU's
   fine-tuning step. The *oracle* adapters are fine-tuned the same way on the retain authors
   only — what exact unlearning would give.
4. **Unlearn** the forget authors with one method (:mod:`.methods`), starting from the
   fine-tuned adapters.
5. **Audit**: FA and RA with the adapters at fp32 (as trained), BF16, INT8 and INT4 (row-wise
   symmetric), and the (ε, P)-durability certificate over P = {BF16, INT8, INT4}.

FA is the share of forget-set questions whose answer (and closing ``<eos>``) greedy decoding
still produces; RA the same on the retain set. Seeds: the corpus and the pretrained base are
fixed (seed 0: the "public model" everyone starts from); ``seed`` moves the adapters'
initialisation, the fine-tuning batches and the unlearning batches.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from forgetting.audit.quantization import (
    PAPER_PRECISIONS,
    DurabilityReport,
    PrecisionResult,
    is_adapter,
    quantized_weights,
)

from .corpus import Corpus, make_corpus
from .methods import UnlearnConfig, unlearn
from .model import AdapterModel, Batch, TinyLM, answer_nll, exact_match

AUDIT_PRECISIONS = ("fp32", *PAPER_PRECISIONS)
CHECKPOINT_EVERY = 100
"""Steps between the checkpoints of :func:`train_steps` (when it is given a file)."""


@dataclass(frozen=True)
class ExperimentConfig:
    """Sizes of the CPU-scale setting (defaults: ≈ 2 min to prepare on one busy core)."""

    n_fictitious: int = 40
    n_public: int = 60
    forget_fraction: float = 0.1
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    pretrain_steps: int = 600
    finetune_steps: int = 600
    batch_size: int = 64
    lr: float = 3e-3
    lora_rank: int = 8
    lora_alpha: float = 16.0
    nf4_base: bool = True
    epsilon: float = 0.05
    seed: int = 0
    paraphrases: bool = False
    """Public authors asked every wording; fictitious authors' reworded questions held out
    (:meth:`.corpus.Corpus.held_out`) and audited by ``audit(prep, held_out=True)``."""

    @classmethod
    def tiny(cls, **kw) -> ExperimentConfig:
        """A seconds-long configuration for smoke tests."""
        base = dict(
            n_fictitious=10,
            n_public=12,
            d_model=32,
            n_layers=1,
            n_heads=2,
            pretrain_steps=100,
            finetune_steps=150,
            batch_size=32,
            lr=1e-2,
            lora_rank=4,
        )
        return cls(**{**base, **kw})


@dataclass
class Prepared:
    """A fine-tuned model ready to unlearn, with its starting and oracle adapter states."""

    config: Any  # ExperimentConfig, or minilm.MiniLMConfig for the pretrained base
    corpus: Corpus
    model: AdapterModel
    forget: Batch
    retain: Batch
    finetuned: dict[str, torch.Tensor]
    oracle: dict[str, torch.Tensor]
    forget_held_out: Batch | None = None
    retain_held_out: Batch | None = None


def train_steps(
    model, params, data, steps: int, cfg, seed: int, checkpoint: Path | None = None
) -> None:
    """``steps`` AdamW steps (cosine-decayed from ``cfg.lr``) on random batches of
    ``cfg.batch_size`` rows of ``data`` (any batch with ``subset``), training ``params``.

    With ``checkpoint`` (a file path), the parameters, optimizer, schedule and both random
    streams are saved there every :data:`CHECKPOINT_EVERY` steps and a run finds and resumes
    it: a resumed run ends bit-identical to an uninterrupted one. The file is removed at the
    end."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, steps))
    done = 0
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=True)  # tensors and numbers only
        with torch.no_grad():
            for p, v in zip(params, state["params"], strict=True):
                p.copy_(v)
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        gen.set_state(state["gen"])
        torch.set_rng_state(state["torch"])
        done = int(state["step"])
    model.train()
    for step in range(done, steps):
        rows = torch.randperm(len(data), generator=gen)[: cfg.batch_size]
        loss = answer_nll(model, data.subset(rows))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if checkpoint is not None and (step + 1) % CHECKPOINT_EVERY == 0 and step + 1 < steps:
            state = {
                "params": [p.detach().clone() for p in params],
                "opt": opt.state_dict(),
                "sched": sched.state_dict(),
                "gen": gen.get_state(),
                "torch": torch.get_rng_state(),
                "step": step + 1,
            }
            torch.save(state, checkpoint.with_suffix(".tmp"))
            checkpoint.with_suffix(".tmp").replace(checkpoint)  # never a half-written file
    model.eval()
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)


def pretrain_base(cfg: ExperimentConfig, corpus: Corpus) -> TinyLM:
    """Full-precision pretraining on the public authors (seed 0: one public base for all)."""
    torch.manual_seed(0)
    model = TinyLM(len(corpus.vocab), cfg.d_model, cfg.n_layers, cfg.n_heads)
    public = Batch([corpus.encode(q) for q in corpus.public])
    train_steps(model, list(model.parameters()), public, cfg.pretrain_steps, cfg, seed=0)
    return model


def prepare(cfg: ExperimentConfig, base: TinyLM | None = None) -> Prepared:
    """Steps 1–3; ``base`` (a pretrained model from :func:`pretrain_base` with the same
    config) is reused when given, so seeds share one public base."""
    corpus = make_corpus(
        cfg.n_fictitious, cfg.n_public, cfg.forget_fraction, seed=0, paraphrases=cfg.paraphrases
    )
    if base is None:
        base = pretrain_base(cfg, corpus)
    model = copy.deepcopy(base)
    torch.manual_seed(cfg.seed)
    model.freeze_base(cfg.lora_rank, cfg.lora_alpha, nf4=cfg.nf4_base)
    forget = Batch([corpus.encode(q) for q in corpus.forget])
    retain = Batch([corpus.encode(q) for q in corpus.retain])
    start = model.adapter_state()

    oracle_data = retain
    train_steps(model, model.adapter_parameters(), oracle_data, cfg.finetune_steps, cfg, cfg.seed)
    oracle = model.adapter_state()

    model.load_adapter_state(start)
    everything = Batch([corpus.encode(q) for q in corpus.fictitious])
    train_steps(model, model.adapter_parameters(), everything, cfg.finetune_steps, cfg, cfg.seed)
    held_out = (
        [
            Batch([corpus.encode(q) for q in corpus.held_out(qas)])
            for qas in (corpus.forget, corpus.retain)
        ]
        if cfg.paraphrases
        else [None, None]
    )
    return Prepared(cfg, corpus, model, forget, retain, model.adapter_state(), oracle, *held_out)


def audit(prep: Prepared, precisions=AUDIT_PRECISIONS, held_out: bool = False) -> DurabilityReport:
    """FA / RA of ``prep.model``'s current adapters at each precision (adapters only are
    quantized; the base is already NF4) and the certificate over P = {BF16, INT8, INT4} — on
    the trained questions, or (``held_out``) on their reworded forms that nothing trained on
    or stopped by."""
    if held_out and prep.forget_held_out is None:
        raise ValueError("held-out questions need ExperimentConfig(paraphrases=True)")
    forget, retain = (
        (prep.forget_held_out, prep.retain_held_out) if held_out else (prep.forget, prep.retain)
    )
    results = []
    for p in precisions:
        with quantized_weights(prep.model, p, is_adapter):
            fa = float(exact_match(prep.model, forget).float().mean())
            ra = float(exact_match(prep.model, retain).float().mean())
        results.append(PrecisionResult(p, fa, ra))
    return DurabilityReport(tuple(results), prep.config.epsilon, PAPER_PRECISIONS)


def report_row(name: str, report: DurabilityReport, **extra) -> dict:
    """One table row: FA/RA per precision, the certificate verdict and ``extra`` columns."""
    row: dict = {"method": name, **extra}
    for r in report.results:
        row[f"FA_{r.precision}"] = r.fa
        row[f"RA_{r.precision}"] = r.ra
    row["certified"] = report.passed
    return row


def run_method(prep: Prepared, ucfg: UnlearnConfig) -> tuple[DurabilityReport, dict]:
    """Unlearn from the fine-tuned adapters with ``ucfg`` and audit; the model's adapters are
    reset to the fine-tuned state first (so runs are independent)."""
    prep.model.load_adapter_state(prep.finetuned)
    info = unlearn(prep.model, prep.forget, prep.retain, replace(ucfg, seed=prep.config.seed))
    return audit(prep), info


def audit_state(prep: Prepared, state: dict[str, torch.Tensor]) -> DurabilityReport:
    """Audit a stored adapter state (e.g. the fine-tuned or the oracle adapters)."""
    prep.model.load_adapter_state(state)
    return audit(prep)
