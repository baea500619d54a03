"""``forgetting audit durability``: does forgetting survive quantization?

Three modes (see docs/durability.md):

* ``--system qss`` (default): fit :class:`forgetting.QSSClassifier` on a dataset, forget a
  random share of the training rows, refit without them, quantize every float array of both
  models at each precision, and report FA (accuracy on the forgotten rows), RA, FA of the refit
  oracle and whether the quantized predictions are identical. The certificate is on
  FA − FA_oracle ≤ ε (default 0: exact unlearning must leave no excess at any precision).
* ``--system vision``: the approximate vision baselines (NegGrad+, Amnesiac, SCRUB, SSD) on a
  small ViT and MUNKEY after key deletion, each against its oracle (retrain / MUNKEY refit),
  weights and MUNKEY's memory quantized; certificate on FA − FA_oracle ≤ ε (default 0.05).
* ``--system lm``: the DurableUn LM setting for one seed (``--quick`` for a tiny model):
  unlearn with ``--methods`` and audit the LoRA adapters at fp32/BF16/INT8/INT4.
* ``--validate``: the simulators against real CPU quantizers (torch, torchao, bitsandbytes).

Exit status: 0 when every audited model passes its certificate (or for ``--validate``, when
every available library agrees bit for bit), 1 otherwise — so a compliance script can gate a
deployment on it.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

PRECISIONS_DEFAULT = "fp32,bf16,int8,int4,nf4"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the command's options to ``parser``."""
    parser.add_argument(
        "--system",
        choices=("qss", "vision", "lm"),
        default="qss",
        help="qss: QSSClassifier forget vs refit; vision: the approximate ViT baselines and "
        "MUNKEY vs their oracles; lm: the DurableUn LoRA LM setting",
    )
    parser.add_argument("--epochs", type=int, default=15, help="vision: ViT / MUNKEY epochs")
    parser.add_argument("--dataset", default="digits", help="dataset of the QSS audit")
    parser.add_argument(
        "--forget-fraction", type=float, default=0.1, help="share of rows (QSS) forgotten"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed (rows forgotten, LM adapters)")
    parser.add_argument(
        "--epsilon",
        type=float,
        default=None,
        help="certificate threshold ε (default: 0 for QSS's excess FA, 0.05 for the LM)",
    )
    parser.add_argument(
        "--methods",
        default="GradDiff,SAF",
        help="LM unlearning methods (GA,GradDiff,NPO,SalUn,SCRUB,RMU,SAF)",
    )
    parser.add_argument("--quick", action="store_true", help="LM: a tiny seconds-long model")
    parser.add_argument(
        "--validate",
        action="store_true",
        help="only compare the quantization simulators with real CPU quantizers",
    )


def _print_table(rows: list[dict], columns: list[str]) -> None:
    def fmt(v) -> str:
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    widths = [max(len(c), *(len(fmt(r.get(c, ""))) for r in rows)) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in rows:
        print("  ".join(fmt(r.get(c, "")).ljust(w) for c, w in zip(columns, widths, strict=True)))


def run(args: argparse.Namespace) -> int:
    """Run the audit described by ``args``; returns the exit status."""
    if args.validate:
        from forgetting.audit.quantization import validate_simulators

        rows = validate_simulators()
        _print_table(
            rows, ["precision", "library", "max_abs_diff", "codes_equal", "bit_equal", "note"]
        )
        return 0 if all(r["bit_equal"] in (True, "") for r in rows) else 1
    if args.system == "qss":
        from forgetting_lab.bench.durability import qss_rows

        eps = 0.0 if args.epsilon is None else args.epsilon
        rows, note = qss_rows(args.dataset, args.forget_fraction, args.seed, epsilon=eps)
        if not rows:
            print(note)
            return 1
        _print_table(
            rows,
            ["precision", "FA", "FA_oracle", "RA", "predictions_equal_oracle"],
        )
        print(note)
        return 0 if "PASS" in note else 1

    if args.system == "vision":
        from forgetting_lab.bench.durability import vision_rows

        eps = 0.05 if args.epsilon is None else args.epsilon
        rows, note = vision_rows(args.dataset, args.forget_fraction, args.seed, args.epochs, eps)
        if rows:
            _print_table(
                rows,
                ["model", "precision", "FA", "FA_oracle", "excess_FA", "RA", "in_P"],
            )
        print(note)
        return 0 if rows and "FAIL" not in note else 1

    import torch

    from forgetting_lab.durableun.experiment import (
        ExperimentConfig,
        audit_state,
        prepare,
        report_row,
        run_method,
    )
    from forgetting_lab.durableun.methods import UnlearnConfig

    torch.set_num_threads(1)
    eps = 0.05 if args.epsilon is None else args.epsilon
    cfg = ExperimentConfig.tiny() if args.quick else ExperimentConfig()
    cfg = replace(cfg, seed=args.seed, epsilon=eps)
    prep = prepare(cfg)
    rows = [report_row("fine-tuned", audit_state(prep, prep.finetuned))]
    rows.append(report_row("oracle", audit_state(prep, prep.oracle)))
    ok = True
    for m in [m for m in args.methods.split(",") if m]:
        report, info = run_method(prep, UnlearnConfig(method=m))
        rows.append(report_row(m, report, steps=info["steps"]))
        ok = ok and report.passed
    cols = ["method", "steps"] + [
        f"{k}_{p}" for p in ("fp32", "bf16", "int8", "int4") for k in ("FA", "RA")
    ]
    _print_table(rows, [*cols, "certified"])
    print(f"(ε, P)-durability, ε = {eps}, P = {{bf16, int8, int4}} adapters")
    return 0 if ok else 1
