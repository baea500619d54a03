"""What the ``forgetting`` commands print: JSON for machines, short summaries and aligned tables
for people, notes and progress bars on stderr.

Results go to stdout and everything else (notes, progress, waits) to stderr, so that
``forgetting predict ... > out.csv`` or ``forgetting inspect --json | jq`` get only the result.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, TextIO

import numpy as np
from tqdm import tqdm

from .errors import redact


def progress(iterable, **kwargs):
    """tqdm on a terminal, silent otherwise (pipes, CI, tests)."""
    return tqdm(iterable, disable=None, file=sys.stderr, leave=False, **kwargs)


def note(message: str) -> None:
    """A remark for the person at the terminal (stderr): nothing went wrong."""
    print(f"note: {message}", file=sys.stderr)


def print_json(value: Any, out: TextIO | None = None) -> None:
    """``value`` as indented JSON with sorted keys (stable output a script can diff)."""
    json.dump(plain(value), out or sys.stdout, indent=2, sort_keys=True)
    (out or sys.stdout).write("\n")


def plain(value: Any) -> Any:
    """JSON-ready: tuples -> lists, numpy scalars -> Python, non-finite floats -> None."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def receipt_summary(receipt: dict) -> str:
    """A forget/insert receipt in a few lines: what happened, which instances it cost, the
    state digest and the first id hashes."""
    if receipt.get("already_forgotten"):
        head = f"already forgotten earlier ({receipt.get('timestamp')}): stored receipt"
    else:
        head = f"{receipt['operation']}: {receipt['n_rows']} row(s), scope {receipt['scope']}"
    hit = receipt.get("instances_hit") or []
    lines = [
        head,
        f"  instances hit: {list(hit) if hit else 'none (fast path)'}"
        + ("; rebuild started" if receipt.get("rebuild_started") else ""),
        f"  state digest:  {receipt['state_digest']}",
        *([f"  operator:      {receipt['operator']}"] if receipt.get("operator") else []),
        *([f"  reason:        {_shown(receipt['reason'])}"] if receipt.get("reason") else []),
        f"  took:          {receipt['seconds'] * 1000:.1f} ms",
        "  id hashes:     "
        + ", ".join(list(receipt.get("id_hashes", []))[:5])
        + (" ..." if len(receipt.get("id_hashes", [])) > 5 else ""),
    ]
    return "\n".join(lines)


def _shown(text: str) -> str:
    """Free text as one terminal-safe line (control characters escaped)."""
    return text if text.isprintable() else repr(text)


def report_receipt(receipt: Any, as_json: bool) -> None:
    """Print a forget/insert receipt: JSON for machines, a summary line for people."""
    if as_json:
        print_json(receipt)
    else:
        print(receipt_summary(receipt))


def format_table(rows: list[list[Any]], header: list[str]) -> str:
    """A plain aligned text table (no dependency, readable in any terminal or log)."""
    cells = [header] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def render_stats(stats: dict, location: str) -> str:
    """``inspect``'s readable view of ``DurableModel.stats()``."""
    mean = stats.get("mean_rebuild_seconds")
    classes = stats.get("classes")
    summary = [
        ["store", redact(location)],
        ["backend", stats.get("backend")],
        ["task", stats.get("task")],
        ["mode", stats.get("mode")],
        ["rows", stats.get("n_rows")],
        ["features", stats.get("n_features")],
        ["classes", None if classes is None else ", ".join(map(str, classes))],
        ["pending rebuilds", ", ".join(map(str, stats.get("pending_rebuilds") or [])) or "none"],
        ["rebuilds run", stats.get("rebuilds_run")],
        ["mean rebuild", None if mean is None else f"{mean:.3f} s"],
        ["state digest", stats.get("state_digest")],
    ]
    known = {row[0] for row in summary} | {
        "n_rows",
        "n_features",
        "pending_rebuilds",
        "rebuilds_run",
        "mean_rebuild_seconds",
        "state_digest",
        "instances",
    }
    summary += [[k, v] for k, v in stats.items() if k not in known and not isinstance(v, dict)]
    instances = stats.get("instances") or []
    keys: list[str] = []
    for inst in instances:
        keys += [k for k in inst if k not in keys]
    inst_rows = [
        [("yes" if inst.get(k) else "REBUILDING") if k == "valid" else inst.get(k) for k in keys]
        for inst in instances
    ]
    parts = [format_table(summary, ["property", "value"])]
    if instances:
        valid = sum(1 for inst in instances if inst.get("valid"))
        parts += [
            "",
            f"instances ({valid} of {len(instances)} valid):",
            format_table(inst_rows, keys),
        ]
    return "\n".join(parts)
