"""``forgetting receipts find|list|export``: the evidence of past deletions, read-only.

Each command opens the store read-only (no lock, beside a running writer) and reads the
receipts through :class:`~forgetting.store.durable.DurableModel` (``lookup``, ``receipts``,
``iter_receipts``); the filters, paging and CSV escaping are the store's
(:mod:`forgetting.store.receipt_log`), so the CLI and the HTTP service answer alike.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..io import tables
from ..store.receipt_log import ReceiptFilter, csv_lines, json_chunks, parse_time
from .errors import usage
from .inputs import open_store
from .render import print_json, receipt_summary


def _filter(args: argparse.Namespace) -> ReceiptFilter:
    """The filter options as a ReceiptFilter, or a usage error naming the bad one."""
    try:
        return ReceiptFilter(
            since=None if args.since is None else parse_time(args.since),
            until=None if args.until is None else parse_time(args.until, end=True),
            operation=args.operation,
            scope=args.scope,
            instance=args.instance,
        )
    except ValueError as err:
        raise usage(str(err)) from None


def cmd_find(args: argparse.Namespace) -> int:
    row_id = tables.parse_ids([args.id], args.id_type)[0]
    with open_store(args, read_only=True) as model:
        found = model.lookup(row_id)
    if args.json:
        print_json(found)
    else:
        print(f"id hash: {found['id_hash']}")
        print(f"status:  {found['explanation']}")
        if found["status"] == "forgotten":
            pending = "yes" if found["rebuild_pending"] else "no"
            print(f"rebuild pending: {pending}")
        for receipt in found["receipts"]:
            print(f"{receipt.get('timestamp')}  " + receipt_summary(receipt))
    return 0 if found["receipts"] else 1


def cmd_list(args: argparse.Namespace) -> int:
    if args.cursor < 0:
        raise usage(f"--cursor must be 0 or more, got {args.cursor}")
    keep = _filter(args)
    with open_store(args, read_only=True) as model:
        items, cursor = model.receipts(keep, after=args.cursor, limit=args.limit)
    if args.json:
        print_json({"receipts": items, "next_cursor": cursor})
    else:
        header = ("seq", "timestamp", "operation", "scope", "rows", "instances hit", "digest")
        print("  ".join(header))
        for r in items:
            hit = ",".join(str(i) for i in r.get("instances_hit") or []) or "-"
            print(
                f"{r['seq']}  {r.get('timestamp')}  {r.get('operation')}  {r.get('scope')}  "
                f"{r.get('n_rows')}  {hit}  {str(r.get('state_digest'))[:16]}"
            )
    if cursor is not None:
        print(f"more receipts may follow: add --cursor {cursor}", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    keep = _filter(args)
    if args.out and Path(args.out).is_dir():
        raise usage(f"-o {args.out!r} is a directory: name a file")
    chunks = csv_lines if args.format == "csv" else json_chunks
    with open_store(args, read_only=True) as model:
        out = open(args.out, "w", newline="", encoding="utf-8") if args.out else sys.stdout  # noqa: SIM115
        count = 0

        def counted():
            nonlocal count
            for receipt in model.iter_receipts(keep):
                count += 1
                yield receipt

        try:
            for chunk in chunks(counted()):
                out.write(chunk)
        finally:
            if args.out:
                out.close()
    if args.out:
        print(f"wrote {count} receipts to {args.out}", file=sys.stderr)
    return 0
