"""The QSS paper's analyses, regenerated on our data with one command.

    python -m forgetting.bench.analyses --out benchmarks/results

Why: the paper backs its design with six experiments a careful user will want to see on their
own data. Each is a module here, measured through the public estimator API
(:class:`forgetting.QSSClassifier`, :mod:`forgetting.schema.membership` for the keyed draws,
:mod:`forgetting.datasets`, :mod:`forgetting.encoders`), writing Markdown + CSV tables and PNG
figures to ``--out`` as ``<name>-<analysis>.*``, each with the command that made it:

1. :mod:`.instability` — codebook flips after one deletion: all-rows k-means/RQ vs the
   exact-mode codebook on keyed D° (which must flip nothing).
2. :mod:`.scheduling` — rebuild rounds (eager ≈ 1/(pρ), offline optimum H_p/ρ, ratio p·H_p),
   time with all p instances rebuilding and blocking probability vs p and ρ; simulated with
   the real keyed membership and checked against an ensemble's receipts on a deletion stream.
3. :mod:`.variance` — per-level explained fraction η_m and accuracy vs ℓ and b.
4. :mod:`.retention` — accuracy after deleting 1–50 % of rows, 50 % of labels, a one-class
   burst; each bitwise equal to the refit.
5. :mod:`.memory` — bytes of statistics, schemas and row store vs n, k, b, ℓ, p, formula and
   measurement up to n = 1M.
6. :mod:`.sensitivity` — per-level L2 change of the residual sums when one D• label changes,
   against the √2 bound behind the DP noise.

``--quick`` runs everything on tiny data (for tests); ``--only`` picks analyses.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from ..report import markdown_table
from .common import Settings

ANALYSES = ("instability", "scheduling", "variance", "retention", "memory", "sensitivity")


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Regenerate the QSS paper's analyses on our data: codebook instability, "
        "rebuild scheduling, variance decay, retention under deletion, memory, per-level "
        "sensitivity. Writes Markdown + CSV + PNG to --out, each with this command.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--only", default=",".join(ANALYSES), help=f"comma-separated subset of {ANALYSES}"
    )
    parser.add_argument(
        "--seeds", type=int, default=3, help="seeds for the analyses that repeat over seeds"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes for tests (minutes → seconds)"
    )
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--name", default="analyses", help="file name prefix")
    return parser


def main(
    argv: Sequence[str] | None = None, prog: str = "python -m forgetting.bench.analyses"
) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    chosen = [a.strip() for a in args.only.split(",") if a.strip()]
    unknown = sorted(set(chosen) - set(ANALYSES))
    if unknown:
        raise SystemExit(f"unknown analyses {unknown}; choose from {ANALYSES}")
    settings = Settings(
        out=Path(args.out),
        prefix=args.name,
        command=" ".join([prog, *argv]),
        quick=args.quick,
        seeds=args.seeds,
    )
    index = []
    for name in tqdm(chosen, desc="analyses", unit="analysis"):
        started = time.perf_counter()
        module = importlib.import_module(f".{name}", __name__)
        result = module.run(settings)
        index.append(
            {
                "analysis": name,
                "tables": result["md"].name,
                "figure": result["png"].name if result.get("png") else "–",
                "seconds": time.perf_counter() - started,
            }
        )
    lines = [
        f"# {args.name}",
        "",
        f"Command: `{settings.command}`",
        "",
        markdown_table(index, ["analysis", "tables", "figure", "seconds"]),
        "",
        "**Scaled down from the paper's setting** (2 shared CPU cores; each file says more): "
        + ("; ".join(settings.scaled) if settings.scaled else "nothing"),
        "",
    ]
    path = settings.out / f"{args.name}.md"
    path.write_text("\n".join(lines))
    print(path.read_text())
    return 0
