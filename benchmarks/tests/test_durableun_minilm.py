"""DurableUn on the pretrained MiniLM: slot encoding, NF4 base + LoRA, merge, and the unlearning
methods running on it unchanged."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from forgetting.audit.quantization import fake_quant_nf4  # noqa: E402
from forgetting.encoders.text import EncoderUnavailableError, locate_minilm  # noqa: E402
from forgetting_lab.durableun.corpus import make_corpus  # noqa: E402
from forgetting_lab.durableun.experiment import audit, run_method  # noqa: E402
from forgetting_lab.durableun.methods import UnlearnConfig, unlearn  # noqa: E402
from forgetting_lab.durableun.minilm import MiniLMConfig, MiniLMQA, prepare_minilm  # noqa: E402
from forgetting_lab.durableun.model import answer_nll, exact_match  # noqa: E402

try:
    locate_minilm()
except EncoderUnavailableError as err:  # pragma: no cover - the full setup installs it
    pytest.skip(str(err), allow_module_level=True)


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(4, 3, 0.25, seed=0, paraphrases=True)


@pytest.fixture(scope="module")
def model(corpus):
    torch.manual_seed(0)
    return MiniLMQA(corpus)


def test_slots_hold_the_answer_pieces_then_pad(corpus, model):
    batch = model.encode(corpus.fictitious)
    tok = model.tokenizer
    assert batch.mask.sum(1).tolist() == [model.slots] * len(corpus.fictitious)
    for i, qa in enumerate(corpus.fictitious):
        row = batch.inputs[i]
        assert row[batch.mask[i]].tolist() == [tok.mask_token_id] * model.slots
        pieces = model.answer_ids[batch.targets[i][batch.mask[i]]].tolist()
        text = tok.decode([p for p in pieces if p != tok.pad_token_id])
        assert text == " ".join(qa.answer)
        assert pieces[-1] == tok.pad_token_id or len(pieces) == model.slots
    held = model.encode(corpus.held_out(corpus.forget))  # rewordings encode too
    assert len(held) == 2 * len(corpus.forget)


def test_base_is_nf4_and_frozen_and_adapters_start_as_zero(corpus):
    torch.manual_seed(0)
    model = MiniLMQA(corpus)
    model.eval()
    batch = model.encode(corpus.fictitious[:6])
    weights = [layer.weight.detach().clone() for layer in model.lora_layers()]
    model.freeze_base(rank=4, alpha=8.0)
    assert all(p.requires_grad == ("lora_" in n) for n, p in model.named_parameters())
    assert len(weights) == 6 * 6 + 1  # every encoder linear (no pooler) + the head
    assert len(model.adapter_parameters()) == 2 * len(weights)
    for layer, w in zip(model.lora_layers(), weights, strict=True):
        assert torch.equal(layer.weight, fake_quant_nf4(w))
    assert torch.equal(model.head.weight, torch.eye(model.head.weight.shape[0]))  # NF4-exact
    with torch.no_grad():
        before = model(batch.inputs)
        model.merge_adapters()  # B = 0: merging a fresh adapter changes nothing
        assert torch.equal(model(batch.inputs), before)


def test_training_fits_and_unlearning_methods_run_unchanged(corpus):
    torch.manual_seed(0)
    model = MiniLMQA(corpus)
    model.freeze_base(rank=4, alpha=8.0)
    data = model.encode(corpus.fictitious)
    opt = torch.optim.Adam(model.adapter_parameters(), lr=5e-3)
    first = None
    for _ in range(8):
        model.train()
        loss = answer_nll(model, data)
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert answer_nll(model, data).item() < first
    hits = exact_match(model, data)
    logits = model(data.inputs)
    slot_hits = (logits.argmax(-1) == data.targets) | ~data.mask
    assert torch.equal(hits, slot_hits.all(1))  # exact match = every slot's argmax
    forget = model.encode(corpus.forget)
    retain = model.encode(corpus.retain)
    state = model.adapter_state()
    for method in ("GA", "GradDiff", "NPO", "SalUn", "SCRUB", "RMU", "SAF"):
        model.load_adapter_state(state)
        info = unlearn(model, forget, retain, UnlearnConfig(method=method, max_steps=2, lr=1e-3))
        assert 1 <= info["steps"] <= 2


def test_prepare_merges_the_public_stage_and_audits_held_out_rewordings():
    prep = prepare_minilm(MiniLMConfig.tiny())
    assert len(prep.forget_held_out) == 2 * len(prep.forget)
    assert all(layer.rank == prep.config.lora_rank for layer in prep.model.lora_layers())
    assert not torch.equal(prep.finetuned["head.lora_B"], prep.oracle["head.lora_B"])
    trained, held = audit(prep), audit(prep, held_out=True)
    assert [r.precision for r in trained.results] == [r.precision for r in held.results]
    report, info = run_method(prep, UnlearnConfig(method="GradDiff", max_steps=1))
    assert info["steps"] == 1 and len(report.results) == len(trained.results)
