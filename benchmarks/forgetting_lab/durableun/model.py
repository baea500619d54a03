"""A small causal transformer with LoRA adapters over a frozen NF4 base (QLoRA's layout).

The paper deploys LLaMA-3-8B as a 4-bit NF4 base with BF16 LoRA adapters; unlearning trains
only the adapters, and the audit quantizes the adapters. The same structure at toy scale:
pre-LN transformer blocks whose every linear layer is a :class:`LoRALinear` — a frozen base
weight (after :meth:`TinyLM.freeze_base`, its NF4 quantize-dequantize value, exactly what a
bitsandbytes ``Linear4bit`` computes with on CPU) plus a trainable low-rank update
``(scaling) · B A``. Embeddings, norms and the output head are frozen in float32 (QLoRA also
keeps them out of NF4).

:attr:`LoRALinear.adapter_precision` switches the adapters' forward value to a straight-
through quantized one (:func:`forgetting.audit.quantization.ste`) — DURABLEUN-SAF's
``Q_STE(θ)`` — without copying the model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from forgetting.audit.quantization import fake_quant_nf4, ste

from .corpus import PAD


class LoRALinear(nn.Module):
    """``y = x Wᵀ + b + scaling · x Aᵀ Bᵀ`` with ``A`` (r × in) and ``B`` (out × r).

    ``B`` starts at zero (the adapter starts as the identity update, LoRA's rule), ``A`` with
    Kaiming-uniform rows. ``rank=0`` means no adapter (the pretraining phase).
    """

    def __init__(self, d_in: int, d_out: int, rank: int = 0, alpha: float = 16.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in))
        self.bias = nn.Parameter(torch.zeros(d_out))
        nn.init.normal_(self.weight, std=0.02)
        self.rank = 0
        self.scaling = 0.0
        self.adapter_precision: str | None = None
        if rank:
            self.add_adapter(rank, alpha)

    def add_adapter(self, rank: int, alpha: float) -> None:
        d_out, d_in = self.weight.shape
        self.rank = rank
        self.scaling = alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, d_in))
        self.lora_B = nn.Parameter(torch.zeros(d_out, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    @torch.no_grad()
    def merge_adapter(self) -> None:
        """Fold the adapter into the weight (``W += scaling · B A``) and drop it: what a
        fine-tuned model becomes when it is published as the next base."""
        if self.rank:
            self.weight += self.scaling * self.lora_B @ self.lora_A
            del self.lora_A, self.lora_B
            self.rank, self.scaling = 0, 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        if self.rank:
            a, b = self.lora_A, self.lora_B
            if self.adapter_precision is not None:
                a, b = ste(a, self.adapter_precision), ste(b, self.adapter_precision)
            y = y + self.scaling * F.linear(F.linear(x, a), b)
        return y


class Block(nn.Module):
    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = LoRALinear(d, 3 * d)
        self.proj = LoRALinear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = LoRALinear(d, 4 * d)
        self.fc2 = LoRALinear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.n_heads, d // self.n_heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class AdapterModel(nn.Module):
    """What unlearning and the audit need from a model whose linear layers are all
    :class:`LoRALinear`: freeze the base (NF4) and add adapters, read and write the adapter
    state, and switch the adapters' forward precision."""

    def lora_layers(self) -> Iterator[LoRALinear]:
        return (m for m in self.modules() if isinstance(m, LoRALinear))

    def freeze_base(self, rank: int = 8, alpha: float = 16.0, nf4: bool = True) -> None:
        """Freeze every parameter, replace each linear weight by its NF4 value (when ``nf4``)
        and add trainable LoRA adapters of ``rank`` to every linear layer."""
        for p in self.parameters():
            p.requires_grad_(False)
        for layer in list(self.lora_layers()):
            if nf4:
                with torch.no_grad():
                    layer.weight.copy_(fake_quant_nf4(layer.weight))
            layer.add_adapter(rank, alpha)

    def merge_adapters(self) -> None:
        """:meth:`LoRALinear.merge_adapter` on every layer (then ``freeze_base`` adds new ones)."""
        for layer in self.lora_layers():
            layer.merge_adapter()

    def adapter_parameters(self) -> list[nn.Parameter]:
        return [p for n, p in self.named_parameters() if "lora_" in n]

    def adapter_state(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.named_parameters() if "lora_" in n}

    def load_adapter_state(self, state: dict[str, torch.Tensor]) -> None:
        params = dict(self.named_parameters())
        with torch.no_grad():
            for n, v in state.items():
                params[n].copy_(v)

    @contextmanager
    def adapters_as(self, precision: str | None) -> Iterator[None]:
        """Adapters forward through ``ste(·, precision)`` inside the block (SAF's Q_STE)."""
        layers = list(self.lora_layers())
        old = [m.adapter_precision for m in layers]
        try:
            for m in layers:
                m.adapter_precision = precision
            yield
        finally:
            for m, p in zip(layers, old, strict=True):
                m.adapter_precision = p


class TinyLM(AdapterModel):
    """Decoder-only transformer LM (learned positions, pre-LN, untied head)."""

    def __init__(
        self, vocab_size: int, d: int = 128, n_layers: int = 2, n_heads: int = 4, ctx: int = 24
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d)
        self.pos = nn.Embedding(ctx, d)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(d, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab_size, bias=False)
        nn.init.normal_(self.head.weight, std=0.02)

    def forward(self, ids: torch.Tensor, return_hidden: int | None = None):
        """Logits (batch, time, vocab); with ``return_hidden=l`` also the residual stream after
        block ``l`` (RMU steers it)."""
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        hidden = None
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i == return_hidden:
                hidden = x
        logits = self.head(self.ln_f(x))
        return (logits, hidden) if return_hidden is not None else logits


class Batch:
    """Padded token ids with the answer mask: ``target[t] = ids[t+1]`` counts in the loss and in
    the exact-match check iff it is an answer token or the closing ``<eos>``."""

    def __init__(self, encoded: Sequence[tuple[list[int], int]]) -> None:
        width = max(len(ids) for ids, _ in encoded)
        self.ids = torch.full((len(encoded), width), PAD, dtype=torch.long)
        self.mask = torch.zeros(len(encoded), width - 1, dtype=torch.bool)
        for i, (ids, start) in enumerate(encoded):
            self.ids[i, : len(ids)] = torch.tensor(ids)
            self.mask[i, start - 1 : len(ids) - 1] = True
        self.inputs = self.ids[:, :-1]
        self.targets = self.ids[:, 1:]

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, rows: torch.Tensor) -> Batch:
        out = Batch.__new__(Batch)
        out.ids, out.mask = self.ids[rows], self.mask[rows]
        out.inputs, out.targets = out.ids[:, :-1], out.ids[:, 1:]
        return out


def token_logprobs(model: TinyLM, batch: Batch) -> torch.Tensor:
    """log p(target token) at every position (batch, time − 1), zero outside the answers."""
    logits = model(batch.inputs)
    lp = torch.log_softmax(logits, dim=-1).gather(2, batch.targets.unsqueeze(2)).squeeze(2)
    return lp * batch.mask


def answer_nll(model: TinyLM, batch: Batch) -> torch.Tensor:
    """Mean negative log-likelihood per answer token (the fine-tuning loss)."""
    return -token_logprobs(model, batch).sum() / batch.mask.sum()


def sequence_logprob(model: TinyLM, batch: Batch) -> torch.Tensor:
    """log p(answer | question) per example (NPO's sequence likelihood)."""
    return token_logprobs(model, batch).sum(dim=1)


@torch.no_grad()
@torch.no_grad()  # a verdict, never a loss: no graph for the stopping checks to build
def exact_match(model: TinyLM, batch: Batch) -> torch.Tensor:
    """Per example: does greedy decoding from the prompt reproduce the answer and ``<eos>``?

    Greedy decoding emits the answer iff, at every answer position, the argmax given the
    *correct* previous tokens is the next answer token (by induction, the decoded prefix is the
    correct prefix up to the first miss). So one teacher-forced pass decides it exactly —
    :func:`greedy_decode` is the literal loop, kept for the test that checks this equivalence.
    """
    model.eval()
    hit = model(batch.inputs).argmax(dim=-1) == batch.targets
    return (hit | ~batch.mask).all(dim=1)


@torch.no_grad()
def greedy_decode(model: TinyLM, prompt: list[int], max_new: int = 6) -> list[int]:
    """Literal greedy decoding (stops after ``<eos>`` or ``max_new`` tokens)."""
    from .corpus import EOS

    model.eval()
    ids = list(prompt)
    for _ in range(max_new):
        nxt = int(model(torch.tensor([ids])).argmax(dim=-1)[0, -1])
        ids.append(nxt)
        if nxt == EOS:
            break
    return ids[len(prompt) :]
