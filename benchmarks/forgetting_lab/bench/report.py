"""Writing benchmark tables: Markdown for people, CSV for machines, both with the command."""

from __future__ import annotations

import csv
import os
import platform
import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from forgetting import __version__
from forgetting.estimators import defaults_fingerprints


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    def fmt(v):
        if isinstance(v, float):
            if np.isnan(v):
                return "–"
            return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def cpu_model() -> str:
    """The processor's name as the OS reports it (Linux: /proc/cpuinfo's "model name"), or
    "unknown CPU": absolute times differ several-fold between machines (a forget + first
    predict at n = 300k took 1.3 ms on one CI-class machine and 3.5 ms on another), so a
    result names the machine it was measured on."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def library_line() -> str:
    """The results header's "Library:" line: the version and each model family's shipped
    defaults fingerprint (tests/test_results_staleness.py reads the QSS one as "shipped
    defaults fingerprint" and the forest's as "forest defaults fingerprint")."""
    prints = defaults_fingerprints()
    return (
        f"Library: forgetting {__version__}; shipped defaults fingerprint {prints['qss']} "
        "(forgetting.estimators.defaults_fingerprint: a QSS model built with the defaults "
        "here is the one the library ships while it matches); forest defaults fingerprint "
        f"{prints['forest']} (defaults_fingerprints()['forest']: the same for the exact "
        "forest)"
    )


def write_results(
    out_dir: Path,
    name: str,
    command: str,
    tables: dict[str, tuple[list[dict], list[str]]],
    notes: str = "",
) -> Path:
    """Write ``name.md`` (all tables) and ``name-<table>.csv`` per table; returns the .md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    header = [
        f"# {name}",
        "",
        f"Command: `{command}`",
        f"Date: {datetime.now(UTC).isoformat(timespec='seconds')}; machine: "
        f"{platform.machine()} ({cpu_model()}), {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; "
        f"1-min load average when written {os.getloadavg()[0]:.2f} "
        "(other jobs slow absolute times; ratios within a run are the point)",
        library_line(),
        "",
    ]
    body = []
    for title, (rows, columns) in tables.items():
        body += [f"## {title}", "", markdown_table(rows, columns), ""]
        slug = re.sub(r"[^a-z0-9]+", "_", title.lower().split(":")[0]).strip("_")
        with open(out_dir / f"{name}-{slug}.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    md = out_dir / f"{name}.md"
    md.write_text("\n".join(header + body + ([notes] if notes else [])) + "\n")
    return md
