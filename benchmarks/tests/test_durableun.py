"""DurableUn at toy scale: corpus, LoRA-over-NF4 model, exact-match = greedy, unlearning smoke
run, the QSS durability audit and the benchmark's quick mode."""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace

import numpy as np
import pytest
import torch

from forgetting.audit.quantization import (
    audit_estimator,
    fake_quant_nf4,
    is_adapter,
    quantized_weights,
)
from forgetting_lab.durableun.corpus import EOS, make_corpus
from forgetting_lab.durableun.experiment import (
    ExperimentConfig,
    audit,
    audit_state,
    prepare,
    pretrain_base,
    run_method,
    train_steps,
)
from forgetting_lab.durableun.methods import UnlearnConfig
from forgetting_lab.durableun.model import Batch, TinyLM, exact_match, greedy_decode


@pytest.fixture(scope="module")
def prep():
    torch.set_num_threads(1)
    return prepare(ExperimentConfig.tiny())


def test_corpus_is_deterministic_and_splits_authors():
    a, b = make_corpus(12, 8, 0.25, seed=3), make_corpus(12, 8, 0.25, seed=3)
    assert a == b
    assert make_corpus(12, 8, 0.25, seed=4) != a
    assert len(a.forget_authors) == 3 and a.forget_authors <= set(range(12))
    fict_names = {q.question for q in a.fictitious}
    assert not fict_names & {q.question for q in a.public}
    assert len(a.forget) == 3 * 6 and len(a.retain) == 9 * 6
    ids, start = a.encode(a.fictitious[0])
    assert ids[-1] == EOS and [a.vocab[i] for i in ids[start:-1]] == list(a.fictitious[0].answer)
    batch = Batch([a.encode(q) for q in a.fictitious[:5]])
    for i, q in enumerate(a.fictitious[:5]):
        answer = [a.index[w] for w in q.answer] + [EOS]
        assert batch.targets[i][batch.mask[i]].tolist() == answer


def test_paraphrases_are_asked_of_public_authors_and_held_out_for_fictitious_ones():
    plain = make_corpus(12, 8, 0.25, seed=3)
    corpus = make_corpus(12, 8, 0.25, seed=3, paraphrases=True)
    assert corpus.fictitious == plain.fictitious and corpus.forget_authors == plain.forget_authors
    assert len(corpus.public) == 3 * len(plain.public)  # every wording, same facts
    assert set(plain.public) <= set(corpus.public)
    held = corpus.held_out(corpus.forget)
    assert len(held) == 2 * len(corpus.forget)
    trained = {q.question for q in corpus.fictitious}
    assert not trained & {q.question for q in held}  # no fine-tuning step sees a rewording
    for qa, (a, b) in zip(corpus.forget, zip(held[::2], held[1::2], strict=True), strict=True):
        assert a.answer == b.answer == qa.answer and a.author == qa.author
    for q in corpus.held_out(corpus.retain):
        corpus.encode(q)  # the vocabulary covers every reworded question
    with pytest.raises(ValueError, match="without paraphrases"):
        plain.held_out(plain.forget)


def test_held_out_audit_scores_the_rewordings():
    cfg = ExperimentConfig.tiny(paraphrases=True, pretrain_steps=20, finetune_steps=20)
    prep = prepare(cfg)
    assert len(prep.forget_held_out) == 2 * len(prep.forget)
    report = audit(prep, held_out=True)
    assert [r.precision for r in report.results] == [r.precision for r in audit(prep).results]
    plain = prepare(ExperimentConfig.tiny(pretrain_steps=20, finetune_steps=20))
    with pytest.raises(ValueError, match="paraphrases=True"):
        audit(plain, held_out=True)


def test_lora_starts_as_the_base_and_base_is_nf4_frozen():
    torch.manual_seed(0)
    model = TinyLM(30, d=16, n_layers=1, n_heads=2)
    ids = torch.randint(0, 30, (3, 7))
    before = model(ids)
    weights = [layer.weight.detach().clone() for layer in model.lora_layers()]
    model.freeze_base(rank=2, nf4=False)
    assert torch.equal(model(ids), before)  # B = 0: the adapter is a zero update
    assert all(p.requires_grad == ("lora_" in n) for n, p in model.named_parameters())
    model2 = TinyLM(30, d=16, n_layers=1, n_heads=2)
    model2.load_state_dict({k: v for k, v in model.state_dict().items() if "lora_" not in k})
    model2.freeze_base(rank=2, nf4=True)
    for layer, w in zip(model2.lora_layers(), weights, strict=True):
        assert torch.equal(layer.weight, fake_quant_nf4(w))


def test_exact_match_is_greedy_decoding(prep):
    model, corpus = prep.model, prep.corpus
    model.load_adapter_state(prep.finetuned)
    qas = corpus.fictitious[:30]
    hits = exact_match(model, Batch([corpus.encode(q) for q in qas]))
    for qa, hit in zip(qas, hits.tolist(), strict=True):
        ids, start = corpus.encode(qa)
        assert (greedy_decode(model, ids[:start], len(ids) - start) == ids[start:]) == hit
    assert 0 < int(hits.sum())  # the fine-tuned toy model knows some answers


def test_ste_adapters_equal_quantized_adapters(prep):
    model = prep.model
    model.load_adapter_state(prep.finetuned)
    ids = prep.forget.inputs
    with model.adapters_as("int4"):
        a = model(ids)
    with quantized_weights(model, "int4", is_adapter):
        b = model(ids)
    assert torch.allclose(a, b, atol=1e-6)
    assert torch.equal(
        model.adapter_state()["blocks.0.qkv.lora_A"], prep.finetuned["blocks.0.qkv.lora_A"]
    )


def test_unlearning_smoke_end_to_end(prep):
    base_before = {n: p.clone() for n, p in prep.model.named_parameters() if "lora_" not in n}
    ft = audit_state(prep, prep.finetuned)
    assert [r.precision for r in ft.results] == ["fp32", "bf16", "int8", "int4"]
    ucfg = UnlearnConfig(method="GradDiff", lr=3e-3, max_steps=40)
    r1, info = run_method(prep, ucfg)
    assert 1 <= info["steps"] <= 40
    assert info["stopped"] == (r1.fa["fp32"] <= ucfg.stop_fa)
    if info["stopped"]:
        assert r1.fa["fp32"] < ft.fa["fp32"] or ft.fa["fp32"] <= ucfg.stop_fa
    r2, _ = run_method(prep, ucfg)  # runs restart from the fine-tuned adapters: same result
    assert r1.fa == r2.fa and r1.ra == r2.ra
    saf, info = run_method(prep, replace(ucfg, method="SAF", alpha=3.0, warmup=5))
    if info["stopped"]:  # SAF's rule checks the INT4 model too
        assert saf.fa["int4"] <= ucfg.stop_fa
    for method in ("GA", "NPO", "SalUn", "SCRUB", "RMU"):
        report, _ = run_method(prep, replace(ucfg, method=method, max_steps=3))
        assert set(report.fa) == {"fp32", "bf16", "int8", "int4"}
    for n, p in prep.model.named_parameters():
        if "lora_" not in n:
            assert torch.equal(p, base_before[n]), n
    with pytest.raises(ValueError):
        run_method(prep, replace(ucfg, method="AlphaEdit"))
    assert audit(prep).precisions == ("bf16", "int8", "int4")


def test_pretrain_base_is_reproducible():
    cfg = ExperimentConfig.tiny(pretrain_steps=5)
    corpus = make_corpus(cfg.n_fictitious, cfg.n_public, cfg.forget_fraction)
    a, b = pretrain_base(cfg, corpus), pretrain_base(cfg, corpus)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(p, q), n


def test_an_interrupted_training_resumes_bit_identically(tmp_path, monkeypatch):
    monkeypatch.setattr("forgetting_lab.durableun.experiment.CHECKPOINT_EVERY", 3)
    cfg = ExperimentConfig.tiny(batch_size=8)
    corpus = make_corpus(cfg.n_fictitious, cfg.n_public, cfg.forget_fraction)
    data = Batch([corpus.encode(q) for q in corpus.public])

    def fresh():
        torch.manual_seed(0)
        return TinyLM(len(corpus.vocab), cfg.d_model, cfg.n_layers, cfg.n_heads)

    whole = fresh()
    train_steps(whole, list(whole.parameters()), data, 10, cfg, seed=3)

    class Killed(Exception):
        pass

    class DiesAtStep7:  # the process dies inside step 7, after the checkpoint of step 6
        calls = 0

        def __len__(self):
            return len(data)

        def subset(self, rows):
            DiesAtStep7.calls += 1
            if DiesAtStep7.calls == 7:
                raise Killed
            return data.subset(rows)

    ckpt = tmp_path / "run.checkpoint"
    first = fresh()
    with pytest.raises(Killed):
        train_steps(first, list(first.parameters()), DiesAtStep7(), 10, cfg, 3, ckpt)
    assert ckpt.exists()
    resumed = fresh()
    torch.manual_seed(123)  # the new process's own random state does not matter
    train_steps(resumed, list(resumed.parameters()), data, 10, cfg, 3, ckpt)
    assert not ckpt.exists()
    for (n, p), (_, q) in zip(whole.named_parameters(), resumed.named_parameters(), strict=True):
        assert torch.equal(p, q), n


def test_qss_is_durable_by_construction():
    from sklearn.datasets import make_classification

    from forgetting import QSSClassifier

    X, y = make_classification(400, 8, n_informative=5, n_classes=3, random_state=0)
    ids = np.arange(len(X))
    forget = ids[::10]
    keep = np.setdiff1d(ids, forget)
    params = dict(rho=0.25, n_instances=1, n_levels=2, n_centroids=8, rebuild="sync")
    model = QSSClassifier(**params).fit(X, y, ids=ids)
    model.forget(forget.tolist())
    oracle = QSSClassifier(**params).fit(X[keep], y[keep], ids=keep)
    tmp = tempfile.mkdtemp()

    def copy_model(m):
        path = os.path.join(tmp, "m.qss")
        m.save(path)
        c = QSSClassifier.load(path)
        c.predict(X[:1])
        return c

    report, equal = audit_estimator(
        model, copy_model, X[forget], y[forget], X[keep], y[keep], oracle=oracle
    )
    assert all(equal.values()) and set(equal) == {"fp32", "bf16", "int8", "int4", "nf4"}
    assert report.passed
    assert report.fa == report.reference_fa
    # Quantization really changed the model (else the equality above would be vacuous).
    q = copy_model(model)
    from forgetting.audit.quantization import quantize_arrays_

    assert quantize_arrays_(q, "int4") > 0


def test_bench_quick_writes_tables_and_plot(tmp_path):
    from forgetting_lab.bench.durability import main

    assert main(["--quick", "--out", str(tmp_path), "--qss-dataset", "", "--alphas", "0,3"]) == 0
    md = (tmp_path / "durability.md").read_text()
    assert "Command: `python -m forgetting_lab.bench.durability --quick" in md
    assert (tmp_path / "durability-pareto.png").stat().st_size > 0
    per_seed = (tmp_path / "durability-per_seed.csv").read_text().splitlines()
    assert per_seed[0].startswith("method,seed") and len(per_seed) == 1 + 4


def test_audit_durability_command_lm_quick(capsys):
    import argparse

    from forgetting_lab.audits import durability as durability_command

    parser = argparse.ArgumentParser()
    durability_command.configure(parser)
    args = parser.parse_args(["--system", "lm", "--quick", "--methods", "GradDiff"])
    rc = durability_command.run(args)
    out = capsys.readouterr().out
    assert rc in (0, 1)
    assert "fine-tuned" in out and "oracle" in out and "GradDiff" in out
    assert "P = {bf16, int8, int4}" in out
    with pytest.raises(SystemExit):
        parser.parse_args(["--system", "nope"])
