"""Quantization-recovery audit: does forgetting survive INT8 / INT4 / NF4 deployment?

DurableUn (seed paper 004) shows that approximate unlearning can be undone by the deployment
step itself: an unlearned model whose forget accuracy (FA) is ≈ 0 in full precision answers
the forgotten questions again once its weights are quantized to 4 bits, because unlearning moved
the weights by less than half a quantization step and rounding snaps them back to where they
were before. This module is the measuring instrument:

* **Quantizers** (simulators, pure torch, deterministic): row-wise symmetric INT-k (INT8, INT4:
  the paper's simulator, ``scale = max|w_row| / (2^(k-1) − 1)``, round half to even), NF4
  (QLoRA's 16-level NormalFloat with block-wise absmax, the format of the frozen base) and a
  BF16 cast. Conventions are chosen to be *bit-identical* to real quantization paths that run on
  CPU — :func:`validate_simulators` measures it against ``torch.quantize_per_channel`` (INT8),
  torchao's affine primitives (INT8/INT4) and bitsandbytes (NF4).
* **Applying them** to any torch module (:func:`quantized_weights`, with a selector: adapters
  only or every weight matrix; the originals are restored on exit), as a straight-through
  estimator for training (:func:`ste`), or to every float array a non-torch model holds
  (:func:`quantize_arrays_`, used for QSS and scikit-learn models).
* **The (ε, P)-durability certificate** (:func:`certify`): FA ≤ ε at every precision in P.

Why simulate rather than call the libraries directly: the simulators are differentiable (STE),
run on any device and dtype, apply to numpy state, and have no optional dependency; the
libraries serve as the reference they are checked against.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

PRECISIONS = ("fp32", "bf16", "int8", "int4", "nf4")
"""Every precision the audit knows. ``fp32`` is the model as trained (no change)."""
PAPER_PRECISIONS = ("bf16", "int8", "int4")
"""The paper's certificate set P = {BF16, INT8, INT4} (adapter precision)."""

NF4_CODE = torch.tensor(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=torch.float32,
)
"""QLoRA's NF4 levels (quantiles of N(0, 1) scaled to [−1, 1], with an exact zero), as float32
— the same 16 numbers bitsandbytes uses."""
NF4_BLOCKSIZE = 64
"""QLoRA's block size: one absmax per 64 consecutive weights of the flattened tensor."""
_NF4_BOUNDS = (NF4_CODE[:-1] + NF4_CODE[1:]) / 2
_TINY = float(np.finfo(np.float32).tiny)


def int_levels(bits: int) -> int:
    """Largest code of symmetric signed INT-``bits``: 127 for INT8, 7 for INT4."""
    if not 2 <= bits <= 16:
        raise ValueError(f"bits must be in [2, 16], got {bits}")
    return 2 ** (bits - 1) - 1


def _as_rows(w: torch.Tensor) -> torch.Tensor:
    """A weight as rows: 2-D as is, N-D as (shape[0], rest), 1-D and 0-D as one row."""
    if w.dim() >= 2:
        return w.reshape(w.shape[0], -1)
    return w.reshape(1, -1)


def quantize_rowwise(w: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise symmetric INT-``bits`` codes and scales of ``w`` (rows as in :func:`_as_rows`).

    ``scale = max|w_row| / qmax`` (floored at float32's smallest normal, so an all-zero row
    gets codes 0), ``code = clamp(round(w · (1/scale)), −qmax, qmax)`` with round half to even.
    Multiplying by the reciprocal (rather than dividing) is torchao's convention, which makes the
    codes bit-identical to its ``quantize_affine``. Codes are int8 (INT ≤ 8) or int16.
    """
    qmax = int_levels(bits)
    rows = _as_rows(w)
    scale = (rows.abs().amax(dim=1, keepdim=True) / qmax).clamp(min=_TINY)
    codes = torch.clamp(torch.round(rows * (1.0 / scale)), -qmax, qmax)
    return codes.to(torch.int8 if bits <= 8 else torch.int16), scale


def dequantize_rowwise(
    codes: torch.Tensor, scale: torch.Tensor, like: torch.Tensor
) -> torch.Tensor:
    """``codes · scale`` in ``scale``'s dtype, shaped and typed like ``like``."""
    return (codes.to(scale.dtype) * scale).reshape(like.shape).to(like.dtype)


def fake_quant_rowwise(w: torch.Tensor, bits: int) -> torch.Tensor:
    """Quantize-dequantize ``w`` with row-wise symmetric INT-``bits`` (the paper's simulator)."""
    codes, scale = quantize_rowwise(w.detach(), bits)
    return dequantize_rowwise(codes, scale, w)


def quantize_nf4(
    w: torch.Tensor, blocksize: int = NF4_BLOCKSIZE
) -> tuple[torch.Tensor, torch.Tensor]:
    """NF4 codes (uint8 in 0..15, one per weight, unpacked) and per-block absmax of ``w``.

    The flattened tensor is cut into blocks of ``blocksize`` (the last may be shorter); each
    block is scaled by ``1/absmax`` (absmax floored at 1e-38 as in bitsandbytes), clamped to
    [−1, 1], and each value takes the nearest NF4 level; a value exactly halfway between two
    levels takes the lower one (bitsandbytes' ``bucketize`` convention).
    """
    flat = w.detach().reshape(-1).float()
    n = flat.numel()
    n_blocks = max(1, math.ceil(n / blocksize))
    padded = torch.nn.functional.pad(flat, (0, n_blocks * blocksize - n))
    blocks = padded.reshape(n_blocks, blocksize)
    absmax = blocks.abs().amax(dim=1)
    scaled = torch.clamp(blocks * (1.0 / absmax.clamp(min=1e-38)).unsqueeze(1), -1, 1)
    codes = torch.bucketize(scaled.reshape(-1)[:n], _NF4_BOUNDS.to(flat.device))
    return codes.to(torch.uint8), absmax


def dequantize_nf4(
    codes: torch.Tensor, absmax: torch.Tensor, like: torch.Tensor, blocksize: int = NF4_BLOCKSIZE
) -> torch.Tensor:
    """NF4 level × block absmax (float32), shaped and typed like ``like``."""
    values = NF4_CODE.to(codes.device)[codes.long()]
    n = values.numel()
    scale = absmax.repeat_interleave(blocksize)[:n]
    return (values * scale).reshape(like.shape).to(like.dtype)


def fake_quant_nf4(w: torch.Tensor, blocksize: int = NF4_BLOCKSIZE) -> torch.Tensor:
    """Quantize-dequantize ``w`` to NF4 (QLoRA's base-weight format)."""
    codes, absmax = quantize_nf4(w, blocksize)
    return dequantize_nf4(codes, absmax, w, blocksize)


def fake_quant(w: torch.Tensor, precision: str) -> torch.Tensor:
    """``w`` as it is after deployment at ``precision`` (one of :data:`PRECISIONS`)."""
    if precision == "fp32":
        return w.detach().clone()
    if precision == "bf16":
        return w.detach().to(torch.bfloat16).to(w.dtype)
    if precision == "int8":
        return fake_quant_rowwise(w, 8)
    if precision == "int4":
        return fake_quant_rowwise(w, 4)
    if precision == "nf4":
        return fake_quant_nf4(w)
    raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")


def ste(w: torch.Tensor, precision: str) -> torch.Tensor:
    """Straight-through estimator: the forward value is ``fake_quant(w)``, the gradient with
    respect to ``w`` is the identity (rounding has zero gradient almost everywhere, so the true
    gradient would carry no signal)."""
    return w + (fake_quant(w, precision) - w).detach()


def is_weight_matrix(name: str, param: torch.nn.Parameter) -> bool:
    """Default selector: every parameter with ≥ 2 dimensions (linear / embedding weights).
    Biases and norm gains stay in full precision, as in weight-only PTQ."""
    return param.dim() >= 2


def is_adapter(name: str, param: torch.nn.Parameter) -> bool:
    """Selector for LoRA adapter matrices (parameters named ``lora_A`` / ``lora_B``)."""
    return "lora_" in name


@contextmanager
def quantized_weights(
    module: torch.nn.Module,
    precision: str,
    select: Callable[[str, torch.nn.Parameter], bool] = is_weight_matrix,
) -> Iterator[list[str]]:
    """Within the block, the selected parameters of ``module`` hold their ``precision``
    quantize-dequantize values; on exit the originals are put back (bit for bit). Yields the
    names of the parameters it quantized."""
    saved: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
    names: list[str] = []
    try:
        with torch.no_grad():
            for name, param in module.named_parameters():
                if select(name, param):
                    saved.append((param, param.detach().clone()))
                    param.copy_(fake_quant(param, precision))
                    names.append(name)
        yield names
    finally:
        with torch.no_grad():
            for param, original in saved:
                param.copy_(original)


# --- non-torch models (QSS, scikit-learn): quantize every float array they hold -------------


def quantize_array(a: np.ndarray, precision: str) -> np.ndarray:
    """A float numpy array through :func:`fake_quant` (same dtype; rows as in torch)."""
    return fake_quant(torch.from_numpy(np.ascontiguousarray(a)), precision).numpy()


def quantize_arrays_(obj: Any, precision: str, min_size: int = 2, min_ndim: int = 1) -> int:
    """Quantize, in place, every floating numpy array and torch tensor (parameters, buffers,
    memory tables) of ≥ ``min_size`` elements and ≥ ``min_ndim`` dimensions reachable from
    ``obj`` through attributes, dataclass fields, dicts, lists and tuples. Returns how many it
    changed in place. ``min_ndim=2`` is weight-only PTQ (matrices and tables; biases and norm
    gains stay in full precision).

    Why everything: "what prediction uses" differs per model (QSS: base-model coefficients,
    codebook centroids, materialized cell means; scikit-learn: ``coef_``, ``coefs_``...), and
    quantizing every float array is a superset that needs no knowledge of the model's layout.
    Integer state (QSS's fixed-point sums) is left alone — it is already exact. Apply it to a
    copy: the model is changed. Non-writeable arrays are skipped.
    """
    seen: set[int] = set()
    count = 0

    def visit(x: Any, depth: int) -> None:
        nonlocal count
        if depth > 40 or id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            if x.is_floating_point() and x.numel() >= min_size and x.dim() >= min_ndim:
                with torch.no_grad():
                    x.copy_(fake_quant(x, precision))
                count += 1
            return
        if isinstance(x, np.ndarray):
            if (
                x.dtype.kind == "f"
                and x.size >= min_size
                and x.ndim >= min_ndim
                and x.flags.writeable
            ):
                np.copyto(x, quantize_array(x, precision))
                count += 1
            elif x.dtype == object:
                for item in x.ravel():
                    visit(item, depth + 1)
            return
        if isinstance(x, str | bytes | int | float | bool | type(None)):
            return
        if isinstance(x, Mapping):
            for v in x.values():
                visit(v, depth + 1)
            return
        if isinstance(x, list | tuple | set | frozenset):
            for v in x:
                visit(v, depth + 1)
            return
        attrs = getattr(x, "__dict__", None)
        if isinstance(attrs, dict):
            for v in attrs.values():
                visit(v, depth + 1)
        for slot in getattr(type(x), "__slots__", ()):
            if hasattr(x, slot):
                visit(getattr(x, slot), depth + 1)

    visit(obj, 0)
    return count


# --- the certificate ----------------------------------------------------------------------


@dataclass(frozen=True)
class PrecisionResult:
    """Forget and retain accuracy of one model at one precision."""

    precision: str
    fa: float
    ra: float


@dataclass(frozen=True)
class DurabilityReport:
    """FA/RA per precision and the (ε, P)-durability verdict.

    ``passed`` is true when FA ≤ ε at every precision in P (the paper's definition). When
    ``reference_fa`` is given (FA of the retrain-from-scratch oracle at the same precision),
    the certificate is on the *excess* FA − FA_ref instead: a classifier generalizes to rows it
    never saw, so its FA on forgotten rows is not 0 even after perfect forgetting.
    """

    results: tuple[PrecisionResult, ...]
    epsilon: float
    precisions: tuple[str, ...]
    reference_fa: Mapping[str, float] | None = field(default=None)

    @property
    def fa(self) -> dict[str, float]:
        return {r.precision: r.fa for r in self.results}

    @property
    def ra(self) -> dict[str, float]:
        return {r.precision: r.ra for r in self.results}

    @property
    def passed(self) -> bool:
        return certify(self.fa, self.epsilon, self.precisions, self.reference_fa)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for r in self.results:
            row: dict[str, Any] = {"precision": r.precision, "FA": r.fa, "RA": r.ra}
            if self.reference_fa is not None:
                row["FA_oracle"] = self.reference_fa.get(r.precision, float("nan"))
            row["in_P"] = r.precision in self.precisions
            out.append(row)
        return out


def certify(
    fa: Mapping[str, float],
    epsilon: float,
    precisions: Sequence[str] = PAPER_PRECISIONS,
    reference_fa: Mapping[str, float] | None = None,
) -> bool:
    """(ε, P)-durability: ``fa[p] (− reference_fa[p]) ≤ ε`` for every ``p`` in ``precisions``.

    A precision of P that was not measured is an error, not a pass: a certificate must not hold
    by omission. NaN FA fails.
    """
    if not precisions:
        raise ValueError("the certificate needs at least one precision in P")
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be ≥ 0, got {epsilon}")
    missing = [p for p in precisions if p not in fa]
    if missing:
        raise KeyError(f"FA was not measured at {missing}")
    for p in precisions:
        value = fa[p]
        if reference_fa is not None:
            value = value - reference_fa[p]
        if not value <= epsilon:  # NaN fails
            return False
    return True


def audit_module(
    module: torch.nn.Module,
    evaluate: Callable[[torch.nn.Module], tuple[float, float]],
    precisions: Sequence[str] = ("fp32", *PAPER_PRECISIONS),
    certificate: Sequence[str] = PAPER_PRECISIONS,
    epsilon: float = 0.05,
    select: Callable[[str, torch.nn.Parameter], bool] = is_weight_matrix,
) -> DurabilityReport:
    """Audit a torch model: ``evaluate(module) -> (FA, RA)`` at every precision, the selected
    weights quantized (e.g. ``select=is_adapter`` for adapters only), and the certificate over
    ``certificate`` (⊆ ``precisions``)."""
    results = []
    for p in precisions:
        with quantized_weights(module, p, select):
            fa, ra = evaluate(module)
        results.append(PrecisionResult(p, float(fa), float(ra)))
    return DurabilityReport(tuple(results), float(epsilon), tuple(certificate))


def audit_estimator(
    model: Any,
    copy_model: Callable[[Any], Any],
    X_forget: np.ndarray,
    y_forget: np.ndarray,
    X_retain: np.ndarray,
    y_retain: np.ndarray,
    precisions: Sequence[str] = ("fp32", *PAPER_PRECISIONS, "nf4"),
    certificate: Sequence[str] = ("fp32", *PAPER_PRECISIONS),
    epsilon: float = 0.0,
    oracle: Any = None,
    min_ndim: int = 1,
) -> tuple[DurabilityReport, dict[str, bool]]:
    """Audit a fitted numpy model (anything with ``predict``): FA = accuracy on the forgotten
    rows, RA = accuracy on retained rows, after :func:`quantize_arrays_` on a fresh copy
    (``copy_model(model)``) per precision. With ``oracle`` (the model refit without the rows)
    it is quantized the same way; the certificate is on FA − FA_oracle and the second return
    value says, per precision, whether the quantized model's predictions on forget + retain
    rows equal the quantized oracle's exactly. ``min_ndim`` as in :func:`quantize_arrays_`
    (2 for torch models: weight-only PTQ)."""
    X_all = np.concatenate([X_forget, X_retain])
    nf = len(X_forget)
    results, ref, equal = [], {}, {}
    for p in precisions:
        q = copy_model(model)
        quantize_arrays_(q, p, min_ndim=min_ndim)
        pred = np.asarray(q.predict(X_all))
        fa = float(np.mean(pred[:nf] == y_forget)) if nf else float("nan")
        ra = float(np.mean(pred[nf:] == y_retain)) if len(X_retain) else float("nan")
        results.append(PrecisionResult(p, fa, ra))
        if oracle is not None:
            qo = copy_model(oracle)
            quantize_arrays_(qo, p, min_ndim=min_ndim)
            pred_o = np.asarray(qo.predict(X_all))
            ref[p] = float(np.mean(pred_o[:nf] == y_forget)) if nf else float("nan")
            equal[p] = bool(np.array_equal(pred, pred_o))
    report = DurabilityReport(
        tuple(results), float(epsilon), tuple(certificate), ref if oracle is not None else None
    )
    return report, equal


# --- validation against real quantization libraries -----------------------------------------


def validate_simulators(
    weights: Sequence[torch.Tensor] | None = None, seed: int = 0
) -> list[dict[str, Any]]:
    """Compare the simulators with real CPU quantization paths, on ``weights`` (default: a
    few Gaussian and heavy-tailed matrices). One row per (precision, library) with the
    largest absolute difference of the dequantized weights, whether the integer codes are
    identical and whether the dequantized tensors are bit-equal.

    References: ``torch.quantize_per_channel`` (qint8, per-row scale; INT8); torchao
    ``quantize_affine`` with a (1, n_cols) block (INT8, INT4); bitsandbytes
    ``quantize_4bit(quant_type="nf4")`` (NF4). A library that is not installed gives a row
    saying so (the ``durability`` extra installs both).
    """
    if weights is None:
        weights = _sample_weights(seed)
    weights = [w.float() for w in weights]
    rows: list[dict[str, Any]] = []
    _compare_torch_int8(weights, rows)
    _compare_torchao(weights, rows)
    _compare_bitsandbytes(weights, rows)
    return rows


def _sample_weights(seed: int) -> list[torch.Tensor]:
    """:func:`validate_simulators`' default weights: Gaussian, heavy-tailed and sparse rows."""
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(64, 128, generator=g) * 0.02,
        torch.randn(96, 256, generator=g),
        torch.randn(32, 200, generator=g) ** 3,  # heavy-tailed rows
        torch.randn(16, 64, generator=g).masked_fill(torch.rand(16, 64, generator=g) < 0.3, 0),
    ]


def _comparison(precision: str, library: str, pairs: list[tuple[Any, ...]] | str) -> dict:
    """One row of :func:`validate_simulators`: ``pairs`` of (simulated, reference dequantized
    weights, simulated, reference codes), or a note saying why there are none."""
    if isinstance(pairs, str):
        return {
            "precision": precision,
            "library": library,
            "max_abs_diff": float("nan"),
            "codes_equal": "",
            "bit_equal": "",
            "note": pairs,
        }
    diff = max(float((a - b).abs().max()) for a, b, _, _ in pairs)
    codes = all(torch.equal(ca.to(torch.int64), cb.to(torch.int64)) for _, _, ca, cb in pairs)
    bit = all(torch.equal(a, b) for a, b, _, _ in pairs)
    n = sum(a.numel() for a, _, _, _ in pairs)
    return {
        "precision": precision,
        "library": library,
        "max_abs_diff": diff,
        "codes_equal": codes,
        "bit_equal": bit,
        "note": f"{len(pairs)} tensors, {n} weights",
    }


def _compare_torch_int8(weights: Sequence[torch.Tensor], rows: list[dict[str, Any]]) -> None:
    """INT8 against torch's own per-channel quantizer (deprecated in torch 2.13 but still the
    framework's reference qint8 path; the warning is silenced here, not elsewhere)."""
    pairs = []
    for w in weights:
        codes, scale = quantize_rowwise(w, 8)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            qt = torch.quantize_per_channel(
                _as_rows(w),
                scale.reshape(-1).double(),
                torch.zeros(len(scale), dtype=torch.long),
                0,
                torch.qint8,
            )
        pairs.append(
            (
                dequantize_rowwise(codes, scale, w),
                qt.dequantize().reshape(w.shape),
                codes,
                qt.int_repr(),
            )
        )
    rows.append(_comparison("int8", f"torch {torch.__version__} quantize_per_channel", pairs))


def _compare_torchao(weights: Sequence[torch.Tensor], rows: list[dict[str, Any]]) -> None:
    """INT8 and INT4 against torchao's affine primitives, or a row saying it is missing."""
    try:
        from torchao.quantization import quant_primitives as qp

        version = _version("torchao")
        for bits in (8, 4):
            qmax = int_levels(bits)
            pairs = []
            for w in weights:
                rows_w = _as_rows(w)
                block = (1, rows_w.shape[1])
                s, zp = qp.choose_qparams_affine(
                    rows_w,
                    qp.MappingType.SYMMETRIC,
                    block,
                    torch.int8,
                    quant_min=-qmax,
                    quant_max=qmax,
                )
                qa = qp.quantize_affine(rows_w, block, s, zp, torch.int8, -qmax, qmax)
                da = qp.dequantize_affine(qa, block, s, zp, torch.int8, -qmax, qmax)
                codes, scale = quantize_rowwise(w, bits)
                pairs.append((dequantize_rowwise(codes, scale, w), da.reshape(w.shape), codes, qa))
            rows.append(_comparison(f"int{bits}", f"torchao {version} quantize_affine", pairs))
    except ImportError as err:
        rows.append(
            _comparison(
                "int4", "torchao", f"not installed ({err}); pip install 'forgetting[durability]'"
            )
        )


def _compare_bitsandbytes(weights: Sequence[torch.Tensor], rows: list[dict[str, Any]]) -> None:
    """NF4 against bitsandbytes' ``quantize_4bit``, or a row saying it is missing."""
    try:
        import bitsandbytes.functional as bnbf

        version = _version("bitsandbytes")
        pairs = []
        for w in weights:
            packed, state = bnbf.quantize_4bit(w, blocksize=NF4_BLOCKSIZE, quant_type="nf4")
            deq = bnbf.dequantize_4bit(packed, state)
            flat = packed.reshape(-1)
            ref_codes = torch.stack([flat >> 4, flat & 0xF], dim=1).reshape(-1)[: w.numel()]
            codes, absmax = quantize_nf4(w)
            pairs.append(
                (dequantize_nf4(codes, absmax, w), deq.reshape(w.shape).float(), codes, ref_codes)
            )
        rows.append(
            _comparison("nf4", f"bitsandbytes {version} quantize_4bit(nf4, blocksize 64)", pairs)
        )
    except ImportError as err:
        rows.append(
            _comparison(
                "nf4",
                "bitsandbytes",
                f"not installed ({err}); pip install 'forgetting[durability]'",
            )
        )


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)
