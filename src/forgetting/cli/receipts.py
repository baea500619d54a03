"""``forgetting receipts find|list|export|public-key|verify-log``: the evidence of past
deletions, read-only.

Each command opens the store read-only (no lock, beside a running writer) and reads the
receipts through :class:`~forgetting.store.durable.DurableModel` (``lookup``, ``receipts``,
``iter_receipts``, ``iter_log``); the filters, paging and CSV escaping are the store's
(:mod:`forgetting.store.receipt_log`), so the CLI and the HTTP service answer alike.
``public-key`` and ``verify-log`` read the signed log's tables alone
(:mod:`forgetting.store.signed_log`): no model is loaded, no membership key is needed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..io import tables
from ..store.receipt_log import ReceiptFilter, csv_lines, json_chunks, parse_time
from .errors import CLIError, is_dsn, usage
from .inputs import open_store
from .render import print_json, receipt_summary

#: ``receipts find``'s exit code for each status of an id (STATUSES of receipt_log).
FIND_EXIT = {"forgotten": 0, "present": 3, "never_seen": 4, "absent": 5}
#: ``receipts verify-log``'s exit codes besides 0 (every receipt present, in order,
#: unmodified and signed), 1 (the store or file could not be read) and 2 (usage).
LOG_TAMPERED = 3
LOG_UNSIGNED = 4


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
    return FIND_EXIT[found["status"]]


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
        # JSON carries each receipt's seq, prev_hash and signature (`verify-log --export`)
        read = model.iter_receipts if args.format == "csv" else model.iter_log
        out = open(args.out, "w", newline="", encoding="utf-8") if args.out else sys.stdout  # noqa: SIM115
        count = 0

        def counted():
            nonlocal count
            for receipt in read(keep):
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


def _store_location(args: argparse.Namespace) -> str:
    location = args.store
    if not is_dsn(location) and not Path(location).is_file():
        raise usage(f"no store at {location!r}: create one with `forgetting fit --store ...`")
    return location


def cmd_public_key(args: argparse.Namespace) -> int:
    from ..store.sql import SQLStore

    store = SQLStore(_store_location(args), read_only=True)
    try:
        pem, _ = store.log_keys()
    finally:
        store.close()
    if pem is None:
        raise CLIError(
            "this store has no signing key yet (it was made before receipts were signed): "
            "open it once with a writer (`forgetting forget`/`insert`/`serve`) to make one",
            code=1,
        )
    sys.stdout.write(pem.decode("ascii"))
    return 0


def cmd_verify_log(args: argparse.Namespace) -> int:
    from ..store.reads import verify_store_log
    from ..store.signing import load_public_key, read_export, verify_log

    key = None
    if args.public_key is not None:
        try:
            key = Path(args.public_key).read_bytes()
        except OSError as err:
            raise usage(f"--public-key {args.public_key!r}: {err.strerror or err}") from None
    if (args.store is None) == (args.export is None):
        raise usage("give --store S or --export FILE (one of them)")
    if args.export is not None:
        if key is None:
            raise usage("--export needs --public-key FILE: an export holds no key to trust")
        entries = read_export(args.export)
        report = verify_log(entries, load_public_key(key, "--public-key"), None, whole=False)
        what = f"export {args.export}"
    else:
        report = verify_store_log(_store_location(args), key)
        what = "the store's receipt log"
    if args.json:
        print_json(report.to_dict())
    else:
        _print_report(report, what, against="--public-key" if key else "the store's own key")
    if report.problem is not None:
        return LOG_TAMPERED
    return LOG_UNSIGNED if report.unsigned else 0


def _print_report(report, what: str, against: str) -> None:
    print(
        f"{what}: {report.receipts} receipt(s), {report.signed} signed (checked against "
        f"{against}), {report.unsigned} unsigned"
    )
    if report.receipts:
        print(f"  sequence numbers {report.first_seq} to {report.last_seq}")
    if report.head_hash:
        print(f"  last hash: {report.head_hash}")
    for note in report.notes:
        print(f"  note: {note}")
    if report.problem is not None:
        print(f"FAILED: {report.problem}")
    elif report.unsigned:
        print(
            f"NOT FULLY VERIFIED: {report.unsigned} receipt(s) unsigned, written before the log "
            "was signed (nothing proves they are unchanged); "
            + ("every signed receipt checks" if report.signed else "no receipt is signed")
        )
    else:
        print("OK: every receipt is present, in order, unmodified and signed")
