"""Quantizers bit-exact on crafted tensors, the certificate's logic, and the audits' plumbing."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from forgetting.audit.quantization import (
    NF4_CODE,
    DurabilityReport,
    PrecisionResult,
    certify,
    dequantize_nf4,
    dequantize_rowwise,
    fake_quant,
    is_adapter,
    quantize_arrays_,
    quantize_nf4,
    quantize_rowwise,
    quantized_weights,
    ste,
)


def test_int8_known_codes_and_ties_round_half_to_even():
    w = torch.tensor([[127.0, -63.5, 0.5, 1.5, 2.5, -2.5]])
    codes, scale = quantize_rowwise(w, 8)
    assert codes.dtype == torch.int8
    assert scale.item() == 1.0
    assert codes.tolist() == [[127, -64, 0, 2, 2, -2]]
    assert torch.equal(dequantize_rowwise(codes, scale, w), codes.float())


def test_int4_known_codes_per_row_scales():
    w = torch.tensor([[7.0, -7.0, 3.5, 2.5, -0.5, 0.0], [14.0, 5.0, -3.0, 1.0, 0.0, -14.0]])
    codes, scale = quantize_rowwise(w, 4)
    assert scale.flatten().tolist() == [1.0, 2.0]
    assert codes.tolist() == [[7, -7, 4, 2, 0, 0], [7, 2, -2, 0, 0, -7]]
    deq = fake_quant(w, "int4")
    assert deq.tolist() == [[7.0, -7.0, 4.0, 2.0, 0.0, 0.0], [14.0, 4.0, -4.0, 0.0, 0.0, -14.0]]


def test_int_zero_row_and_extremes():
    w = torch.tensor([[0.0, 0.0, 0.0], [-3.0, 1.0, 3.0], [1e-30, -1e-30, 0.0]])
    codes, scale = quantize_rowwise(w, 4)
    assert codes[0].tolist() == [0, 0, 0]
    assert codes[1].tolist() == [-7, 2, 7]  # ±max map to ±qmax exactly
    assert torch.all(torch.isfinite(scale))
    deq = fake_quant(w, "int4")
    assert deq[0].tolist() == [0.0, 0.0, 0.0]
    assert deq[1, 0].item() == pytest.approx(-3.0, rel=1e-6)
    # A 3-D tensor is quantized per leading index (rows = first dimension).
    w3 = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    assert torch.equal(
        fake_quant(w3, "int8"), fake_quant(w3.reshape(2, 12), "int8").reshape(w3.shape)
    )


def test_nf4_known_codes_ties_go_down_and_blocks():
    mid = float((NF4_CODE[7] + NF4_CODE[8]) / 2)
    above = float(np.nextafter(np.float32(mid), np.float32(1)))
    w = torch.tensor([1.0, -1.0, 0.0, float(NF4_CODE[8]), mid, above, -0.5, 0.25])
    codes, absmax = quantize_nf4(w, blocksize=8)
    assert absmax.tolist() == [1.0]
    # -0.5 is nearest to -0.5250730514526367 (level 2); 0.25 to 0.24611230194568634 (level 10).
    assert codes.tolist() == [15, 0, 7, 8, 7, 8, 2, 10]
    assert torch.equal(dequantize_nf4(codes, absmax, w, 8), NF4_CODE[codes.long()])


def test_nf4_blockwise_absmax_partial_last_block_and_zero_block():
    w = torch.tensor([[2.0, -1.0, 0.0, 0.0], [0.0, 0.0, 4.0, -4.0], [0.0, 0.0, 0.5, 0.0]])
    codes, absmax = quantize_nf4(w, blocksize=5)  # blocks: 5, 5, 2 values
    assert absmax.tolist() == [2.0, 4.0, 0.5]
    deq = fake_quant(w.reshape(-1), "nf4")  # default blocksize 64: one block, absmax 4
    assert deq.abs().max().item() == 4.0
    zero = torch.zeros(2, 64)
    c0, a0 = quantize_nf4(zero)
    assert c0.unique().tolist() == [7] and a0.tolist() == [0.0, 0.0]
    assert torch.equal(fake_quant(zero, "nf4"), zero)
    assert dequantize_nf4(codes, absmax, w, 5)[0, 0].item() == 2.0


def test_bf16_and_fp32():
    w = torch.tensor([1.0 + 2.0**-9, 1.0 + 2.0**-7, 3.0])
    assert fake_quant(w, "bf16").tolist() == [1.0, 1.0 + 2.0**-7, 3.0]
    assert torch.equal(fake_quant(w, "fp32"), w)
    with pytest.raises(ValueError):
        fake_quant(w, "int3")


def test_ste_forward_is_quantized_and_gradient_is_identity():
    w = torch.tensor([[7.0, 2.5, -1.2]], requires_grad=True)
    out = ste(w, "int4")
    assert torch.equal(out.detach(), fake_quant(w, "int4"))
    (out * torch.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    assert w.grad.tolist() == [[1.0, 2.0, 3.0]]


def test_quantized_weights_selects_and_restores_bit_for_bit():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.base = torch.nn.Linear(8, 8)
            self.lora_A = torch.nn.Parameter(torch.randn(2, 8))

    torch.manual_seed(0)
    m = M()
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    with quantized_weights(m, "int4", is_adapter) as names:
        assert names == ["lora_A"]
        assert torch.equal(m.lora_A, fake_quant(before["lora_A"], "int4"))
        assert torch.equal(m.base.weight, before["base.weight"])
    with quantized_weights(m, "int4") as names:  # default: every ≥2-D weight
        assert set(names) == {"base.weight", "lora_A"}
        assert torch.equal(m.base.bias, before["base.bias"])
    for n, p in m.named_parameters():
        assert torch.equal(p, before[n])


def test_quantize_arrays_walks_nested_state_and_leaves_integers():
    @dataclass
    class Inner:
        coef: np.ndarray
        counts: np.ndarray

    obj = {
        "inner": Inner(np.array([[7.0, 2.5, -1.0]]), np.array([3, 5])),
        "list": [np.array([14.0, 5.0], dtype=np.float32)],
        "scalar": np.array([1.3]),  # below min_size: left alone
    }
    assert quantize_arrays_(obj, "int4") == 2
    assert obj["inner"].coef.tolist() == [[7.0, 2.0, -1.0]]
    assert obj["inner"].counts.tolist() == [3, 5]
    assert obj["list"][0].dtype == np.float32 and obj["list"][0].tolist() == [14.0, 4.0]
    assert obj["scalar"].tolist() == [1.3]


def test_certificate_logic():
    fa = {"fp32": 0.0, "bf16": 0.01, "int8": 0.05, "int4": 0.2}
    assert certify(fa, 0.05, ("bf16", "int8"))
    assert not certify(fa, 0.05, ("bf16", "int8", "int4"))
    assert certify(fa, 0.2, ("bf16", "int8", "int4"))  # ≤, not <
    with pytest.raises(KeyError):
        certify(fa, 0.05, ("nf4",))  # never passes by omission
    with pytest.raises(ValueError):
        certify(fa, 0.05, ())
    assert not certify({"int4": math.nan}, 1.0, ("int4",))
    assert certify({"int4": 0.3}, 0.05, ("int4",), reference_fa={"int4": 0.27})
    report = DurabilityReport(
        (PrecisionResult("bf16", 0.0, 0.9), PrecisionResult("int4", 0.1, 0.8)), 0.05, ("bf16",)
    )
    assert report.passed and report.fa == {"bf16": 0.0, "int4": 0.1}
    assert [r["in_P"] for r in report.rows()] == [True, False]


def test_simulators_match_real_cpu_quantizers_bit_for_bit():
    pytest.importorskip("torchao", reason="the durability extra is not installed")
    pytest.importorskip("bitsandbytes", reason="the durability extra is not installed")
    from forgetting.audit.quantization import validate_simulators

    g = torch.Generator().manual_seed(1)
    weights = [torch.randn(8, 128, generator=g), torch.randn(4, 70, generator=g) ** 3]
    rows = validate_simulators(weights)
    assert {r["precision"] for r in rows} == {"int8", "int4", "nf4"}
    for r in rows:
        assert r["bit_equal"] is True and r["codes_equal"] is True, r
        assert r["max_abs_diff"] == 0.0


def test_quantize_arrays_reaches_torch_modules_weight_only():
    torch.manual_seed(0)
    holder = {"net": torch.nn.Linear(6, 3), "table": torch.randn(4, 6)}
    w, b, t = (
        holder["net"].weight.detach().clone(),
        holder["net"].bias.detach().clone(),
        holder["table"].clone(),
    )
    assert quantize_arrays_(holder, "int4", min_ndim=2) == 2
    assert torch.equal(holder["net"].weight, fake_quant(w, "int4"))
    assert torch.equal(holder["net"].bias, b)  # 1-D: left in full precision
    assert torch.equal(holder["table"], fake_quant(t, "int4"))
