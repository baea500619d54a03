"""The QSS paper's analyses, regenerated on our data with one command.

    python -m forgetting_lab.bench.analyses --out benchmarks/results

Why: the paper backs its design with six experiments a careful user will want to see on their
own data. Each is a module here, measured through the public estimator API
(:class:`forgetting.QSSClassifier`, :mod:`forgetting.schema.membership` for the keyed draws,
:mod:`forgetting_lab.datasets`, :mod:`forgetting.encoders`), writing Markdown + CSV tables and PNG
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
import csv
import importlib
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from tqdm import tqdm

from forgetting_lab.bench.report import markdown_table

from .common import Settings

EXPECTED_DURATION = "about 45 min on 2 cores for all analyses (results/analyses.md)"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

INDEX_COLUMNS = ["analysis", "tables", "figure", "seconds", "date", "command"]

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
    argv: Sequence[str] | None = None, prog: str = "python -m forgetting_lab.bench.analyses"
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
                "seconds": round(time.perf_counter() - started, 1),
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "command": settings.command,
                "scaled": "; ".join(s for s in settings.scaled if s.startswith(name)),
            }
        )
    print(write_index(settings, index).read_text())
    return 0


def write_index(settings: Settings, index: list[dict]) -> Path:
    """``<name>.md`` + ``<name>-index.csv``: one row per analysis with the command that last
    produced it. Rows of analyses not run this time are kept from the previous index, so a run
    with ``--only`` updates its rows without dropping the others'."""
    csv_path = settings.out / f"{settings.prefix}-index.csv"
    rows = {r["analysis"]: r for r in index}
    if csv_path.is_file():
        with open(csv_path, newline="") as f:
            for old in csv.DictReader(f):
                if old.get("analysis") in ANALYSES and old["analysis"] not in rows:
                    rows[old["analysis"]] = old
    ordered = [rows[a] for a in ANALYSES if a in rows]
    settings.out.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*INDEX_COLUMNS, "scaled"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(ordered)
    scaled = [f"**{r['analysis']}**: {r['scaled']}" for r in ordered if r.get("scaled")]
    lines = [
        f"# {settings.prefix}",
        "",
        "The QSS paper's analyses on our data. Regenerate all of them with "
        "`python -m forgetting_lab.bench.analyses`; each row names the command that last wrote its "
        "files (the files repeat it).",
        "",
        markdown_table(ordered, ["analysis", "tables", "figure", "seconds", "date", "command"]),
        "",
        "Scaled down from the paper's setting (2 shared CPU cores): "
        + ("; ".join(scaled) if scaled else "nothing"),
        "",
    ]
    md = settings.out / f"{settings.prefix}.md"
    md.write_text("\n".join(lines))
    return md
