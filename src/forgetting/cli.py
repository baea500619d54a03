"""``forgetting``: fit, query, forget from, inspect, verify and serve a durable QSS model.

Every command works on a *store* (a SQLite file or a ``postgresql://`` DSN) written by
:class:`forgetting.store.durable.DurableModel`, so a deletion acknowledged by ``forget``
survives any crash, and ``serve`` exposes the same store over HTTP.

Why the conventions below:

* **Ids.** Rows are addressed by stable external ids. On the command line every id is text,
  so one rule applies everywhere (data files and ``--ids``): a value written as a plain
  decimal integer (``42``, ``-7``; not ``042``) is the integer id 42, anything else is a
  string id. Fitting from a CSV and forgetting with ``--ids 42`` then address the same row.
* **Columns.** The store keeps the feature matrix, not the column names: ``predict`` and
  ``insert`` select features with the same options (and the same defaults) as ``fit``, and a
  different width is refused. ``fit`` prints the columns it used.
* **Errors.** Expected problems print one line saying what to do, never a traceback: exit
  code 2 for a usage error (bad option, missing file or column), 1 for a failure (the model
  refused the data, unknown ids, a database error, ``verify`` found a mismatch).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sqlite3
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from tqdm import tqdm

#: Rows per predict call: bounded memory and a progress bar that moves.
PREDICT_CHUNK = 4096

_INT_ID = re.compile(r"-?(0|[1-9][0-9]*)")


class CLIError(Exception):
    """An expected error: printed as one line, then exit with ``code`` (2 usage, 1 failure)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _usage(message: str) -> CLIError:
    return CLIError(message, code=2)


# -- locations and ids ----------------------------------------------------------------------


def redact(location: str) -> str:
    """A store location fit for printing: a DSN's password is replaced by ``***``."""
    return re.sub(r"^(postgres(?:ql)?://[^:/@]*:)[^@]*@", r"\1***@", location)


def _is_dsn(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def parse_id(token: Any) -> int | str:
    """An id from text: canonical decimal integers become ints, anything else stays a string
    (see the module docstring for why one rule everywhere)."""
    if isinstance(token, bool):
        raise CLIError(f"ids must be integers or strings, got {token!r}")
    if isinstance(token, int | np.integer):
        return int(token)
    if isinstance(token, float | np.floating):
        if float(token).is_integer():
            return int(token)
        raise CLIError(f"ids must be integers or strings, got the number {token!r}")
    if isinstance(token, bytes):
        token = token.decode("utf-8")
    text = str(token).strip()
    if not text:
        raise CLIError("empty id")
    return int(text) if _INT_ID.fullmatch(text) else text


def parse_ids(tokens: Sequence[Any]) -> list[int | str]:
    return [parse_id(t) for t in tokens]


# -- reading data ---------------------------------------------------------------------------


@dataclass
class Table:
    """Columns by name. CSV columns are lists of strings; NPZ/Parquet columns are arrays
    (an NPZ array may be 2-D: then it is a whole feature matrix)."""

    path: str
    columns: dict[str, Any]
    n_rows: int
    kind: str


def _progress(iterable, **kwargs):
    """tqdm on a terminal, silent otherwise (pipes, CI, tests)."""
    return tqdm(iterable, disable=None, file=sys.stderr, leave=False, **kwargs)


def read_table(path: str) -> Table:
    """Read a CSV (with a header row), Parquet or NPZ file into columns."""
    file = Path(path)
    if not file.is_file():
        raise _usage(f"data file {path!r} does not exist")
    suffix = file.suffix.lower()
    if suffix in (".csv", ".tsv", ".txt"):
        return _read_csv(file, "\t" if suffix == ".tsv" else ",")
    if suffix in (".parquet", ".pq"):
        return _read_parquet(file)
    if suffix == ".npz":
        return _read_npz(file)
    raise _usage(f"cannot tell the format of {path!r}: use a .csv, .tsv, .parquet or .npz file")


def _read_csv(file: Path, delimiter: str) -> Table:
    with open(file, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            raise _usage(f"{file} is empty; a CSV needs a header row") from None
        header = [h.strip() for h in header]
        if len(set(header)) != len(header) or not all(header):
            raise _usage(f"{file}: the header row must name every column once: {header}")
        values: list[list[str]] = [[] for _ in header]
        for line_no, row in enumerate(_progress(reader, desc="reading", unit=" rows"), 2):
            if not row:
                continue
            if len(row) != len(header):
                raise _usage(
                    f"{file}, line {line_no}: {len(row)} fields, the header has {len(header)}"
                )
            for column, value in zip(values, row, strict=True):
                column.append(value)
    n = len(values[0]) if values else 0
    return Table(str(file), dict(zip(header, values, strict=True)), n, "csv")


def _read_parquet(file: Path) -> Table:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CLIError(
            "reading Parquet needs pyarrow: pip install pyarrow (or convert the file to CSV)"
        ) from None
    table = pq.read_table(file)
    columns = {
        name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names
    }
    return Table(str(file), columns, table.num_rows, "parquet")


def _read_npz(file: Path) -> Table:
    try:
        with np.load(file, allow_pickle=False) as archive:
            columns = {name: archive[name] for name in archive.files}
    except ValueError as err:
        raise _usage(f"{file}: cannot read its arrays ({err}); save them without objects") from None
    lengths = {name: len(a) for name, a in columns.items() if a.ndim >= 1}
    if not lengths:
        raise _usage(f"{file} holds no arrays")
    n = max(lengths.values())
    return Table(str(file), columns, n, "npz")


def _as_float_column(table: Table, name: str) -> np.ndarray:
    """A numeric column as float64, with an error that names the first bad cell."""
    values = table.columns[name]
    if table.kind == "csv":
        out = np.empty(len(values), dtype=np.float64)
        for i, value in enumerate(values):
            try:
                out[i] = float(value)
            except ValueError:
                raise CLIError(
                    f"column {name!r}, data row {i + 1}: {value!r} is not a number"
                ) from None
        return out
    array = np.asarray(values)
    if array.dtype.kind not in "biuf":
        raise CLIError(f"column {name!r} is not numeric (dtype {array.dtype})")
    return array.astype(np.float64)


def _is_numeric(table: Table, name: str) -> bool:
    values = table.columns[name]
    if table.kind != "csv":
        array = np.asarray(values)
        return array.dtype.kind in "iuf" and array.ndim == 1
    for value in values:
        try:
            float(value)
        except ValueError:
            return False
    return True


@dataclass
class Columns:
    """Which columns hold ids, labels, features or text (the options of fit/predict/insert)."""

    id_col: str | None
    label_col: str | None
    feature_cols: list[str] | None
    text_col: str | None


def _columns(args: argparse.Namespace) -> Columns:
    features = None
    if getattr(args, "feature_cols", None):
        features = [c.strip() for c in args.feature_cols.split(",") if c.strip()]
        if not features:
            raise _usage("--feature-cols is empty")
    if features and args.text_col:
        raise _usage("give --feature-cols or --text-col, not both")
    return Columns(args.id_col, getattr(args, "label_col", None), features, args.text_col)


def _require(table: Table, name: str, option: str) -> None:
    if name not in table.columns:
        raise _usage(
            f"{table.path} has no column {name!r} (set {option}); it has: "
            + ", ".join(sorted(table.columns))
        )


def select_ids(table: Table, cols: Columns, required: bool) -> list | None:
    """Ids from the id column, or None when it is absent and not required."""
    name = cols.id_col or ("ids" if table.kind == "npz" else "id")
    if name not in table.columns:
        if required or cols.id_col is not None:
            _require(table, name, "--id-col")
        return None
    values = table.columns[name]
    if np.ndim(values) != 1:
        raise _usage(f"id column {name!r} must be 1-D")
    return parse_ids(list(values))


def select_labels(table: Table, cols: Columns, task: str) -> np.ndarray:
    """Labels: numbers for regression; for classification integers when every label is a
    (canonical) integer, else strings."""
    name = cols.label_col or ("y" if table.kind == "npz" else "label")
    _require(table, name, "--label-col")
    values = table.columns[name]
    if task == "regression":
        return _as_float_column(table, name)
    if table.kind == "csv":
        texts = [v.strip() for v in values]
        if all(_INT_ID.fullmatch(t) for t in texts):
            return np.array([int(t) for t in texts], dtype=np.int64)
        if any(not t for t in texts):
            raise CLIError(f"label column {name!r} has empty values")
        return np.array(texts, dtype=object).astype(str)
    array = np.asarray(values)
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise CLIError(f"label column {name!r} has non-integer numbers: use --task regression")
        return array.astype(np.int64)
    if array.dtype.kind == "O":
        return array.astype(str)
    return array


def feature_names(table: Table, cols: Columns) -> list[str]:
    """The feature columns: as given, or every numeric column but the id and label ones."""
    if cols.feature_cols:
        for name in cols.feature_cols:
            _require(table, name, "--feature-cols")
        return cols.feature_cols
    if table.kind == "npz":
        return ["X"]
    skip = {
        cols.id_col or "id",
        cols.label_col or "label",
    }
    names = [n for n in table.columns if n not in skip and _is_numeric(table, n)]
    if not names:
        raise _usage(
            f"{table.path} has no numeric feature columns besides the id and label: name them "
            "with --feature-cols, or embed a text column with --text-col"
        )
    return names


def select_features(table: Table, cols: Columns) -> tuple[np.ndarray, list[str]]:
    """The feature matrix (float64) and the names of the columns it came from."""
    if cols.text_col:
        _require(table, cols.text_col, "--text-col")
        return embed_texts([str(t) for t in table.columns[cols.text_col]]), [cols.text_col]
    names = feature_names(table, cols)
    if table.kind == "npz" and len(names) == 1 and np.ndim(table.columns[names[0]]) == 2:
        _require(table, names[0], "--feature-cols")
        matrix = np.asarray(table.columns[names[0]])
        if matrix.dtype.kind not in "biuf":
            raise CLIError(f"array {names[0]!r} is not numeric (dtype {matrix.dtype})")
        return matrix.astype(np.float64), names
    if table.kind == "npz":
        for name in names:
            _require(table, name, "--feature-cols")
    matrix = np.column_stack([_as_float_column(table, n) for n in names])
    return matrix, names


def embed_texts(texts: list[str]) -> np.ndarray:
    """Embed texts with all-MiniLM-L6-v2 (``forgetting.encoders.text``), imported lazily
    because it pulls in torch; a missing install is an error that says what to install."""
    try:
        from .encoders.text import MiniLMEncoder
    except ImportError as err:
        raise CLIError(
            f"--text-col needs the MiniLM text encoder, which is not available ({err}); "
            "install its dependencies (see forgetting.encoders.text), or embed the texts "
            "yourself and pass numeric columns"
        ) from None
    try:
        return np.asarray(MiniLMEncoder(progress=sys.stderr.isatty()).transform(texts))
    except RuntimeError as err:  # EncoderUnavailableError names the install command
        raise CLIError(str(err)) from None


# -- the store ------------------------------------------------------------------------------


def _durable_class():
    try:
        from .store.durable import DurableModel
    except ImportError as err:
        raise CLIError(f"the durable store is not available: {err}") from None
    if not hasattr(DurableModel, "open"):
        raise CLIError("this build of forgetting has no DurableModel implementation")
    return DurableModel


def open_store(location: str):
    """Open an existing store, or say how to create one."""
    if not _is_dsn(location) and not Path(location).exists():
        raise _usage(f"no store at {location!r}: create one with `forgetting fit --store ...`")
    return _durable_class().open(location)


def _print_json(value: Any, out: TextIO | None = None) -> None:
    json.dump(_plain(value), out or sys.stdout, indent=2, sort_keys=True)
    (out or sys.stdout).write("\n")


def _plain(value: Any) -> Any:
    """JSON-ready: tuples -> lists, numpy scalars -> Python, non-finite floats -> None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _receipt_summary(receipt: dict) -> str:
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
        f"  took:          {receipt['seconds'] * 1000:.1f} ms",
        "  id hashes:     "
        + ", ".join(list(receipt.get("id_hashes", []))[:5])
        + (" ..." if len(receipt.get("id_hashes", [])) > 5 else ""),
    ]
    return "\n".join(lines)


# -- commands -------------------------------------------------------------------------------


def cmd_fit(args: argparse.Namespace) -> int:
    from .estimators import QSSClassifier, QSSRegressor

    cols = _columns(args)
    table = read_table(args.data)
    ids = select_ids(table, cols, required=True)
    y = select_labels(table, cols, args.task)
    X, used = select_features(table, cols)
    estimator_cls = QSSClassifier if args.task == "classification" else QSSRegressor
    params: dict[str, Any] = dict(
        mode=args.mode,
        rho=args.rho,
        n_instances=args.n_instances,
        random_state=args.random_state,
        rebuild=args.rebuild,
    )
    if args.n_levels is not None:
        params["n_levels"] = args.n_levels
    if args.n_centroids is not None:
        params["n_centroids"] = args.n_centroids
    if args.secret_key_file:
        try:
            params["secret_key"] = Path(args.secret_key_file).read_bytes().strip()
        except OSError as err:
            raise _usage(f"cannot read --secret-key-file: {err.strerror}") from None
    if not _is_dsn(args.store) and Path(args.store).exists() and not args.overwrite:
        raise _usage(f"{args.store!r} exists: pass --overwrite to replace it, or another --store")
    estimator = estimator_cls(**params)
    print(
        f"fitting {estimator_cls.__name__} on {X.shape[0]} rows x {X.shape[1]} features "
        f"from {', '.join(used) if len(used) <= 8 else f'{len(used)} columns'} ...",
        file=sys.stderr,
    )
    started = time.perf_counter()
    store = _durable_class().create(args.store, estimator, X, y, ids, overwrite=args.overwrite)
    with store as model:
        stats = model.stats()
    print(
        f"wrote {redact(args.store)}: {stats.get('n_rows')} rows, "
        f"{len(stats.get('instances', []))} instances, in {time.perf_counter() - started:.2f} s"
    )
    print(f"feature columns: {','.join(used)}")
    print(f"state digest: {stats.get('state_digest')}")
    return 0


def _model_features(table: Any, cols: Any, model: Any) -> np.ndarray:
    """The feature matrix of ``table``, refused unless as wide as the model's fit-time X."""
    X, _ = select_features(table, cols)
    if X.shape[1] != model.n_features:
        raise _usage(
            f"the data has {X.shape[1]} feature columns, the model was fitted with "
            f"{model.n_features}: select the same columns as at fit time (--feature-cols)"
        )
    return X


def cmd_predict(args: argparse.Namespace) -> int:
    cols = _columns(args)
    table = read_table(args.data)
    ids = select_ids(table, cols, required=False)
    with open_store(args.store) as model:
        X = _model_features(table, cols, model)
        classification = model.task == "classification"
        labels, probas = [], []
        for start in _progress(range(0, len(X), PREDICT_CHUNK), desc="predicting", unit="chunk"):
            chunk = X[start : start + PREDICT_CHUNK]
            labels.append(np.asarray(model.predict(chunk)))
            if classification and not args.no_proba:
                probas.append(np.asarray(model.predict_proba(chunk)))
        classes = model.classes
    predictions = np.concatenate(labels) if labels else np.empty(0)
    header = (["id"] if ids is not None else []) + ["prediction"]
    if probas:
        header += [f"proba_{c}" for c in classes or []]
    out_handle = open(args.out, "w", newline="") if args.out else sys.stdout  # noqa: SIM115
    try:
        writer = csv.writer(out_handle)
        writer.writerow(header)
        proba = np.concatenate(probas) if probas else None
        for i, label in enumerate(predictions.tolist()):
            row = ([ids[i]] if ids is not None else []) + [label]
            if proba is not None:
                row += [repr(float(p)) for p in proba[i]]
            writer.writerow(row)
    finally:
        if args.out:
            out_handle.close()
    if args.out:
        print(f"wrote {len(predictions)} predictions to {args.out}", file=sys.stderr)
    return 0


def _read_ids_arg(args: argparse.Namespace) -> list[int | str]:
    if bool(args.ids) == bool(args.ids_file):
        raise _usage("give exactly one of --ids a,b,c or --ids-file FILE")
    if args.ids:
        tokens = [t for t in args.ids.split(",") if t.strip()]
    else:
        try:
            text = Path(args.ids_file).read_text(encoding="utf-8")
        except OSError as err:
            raise _usage(f"cannot read --ids-file {args.ids_file!r}: {err.strerror}") from None
        tokens = [
            line.strip()
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
    if not tokens:
        raise _usage("no ids given")
    return parse_ids(tokens)


def _settle(model: Any, no_wait: bool) -> None:
    """Let background rebuilds land and reach the store before the process exits.

    The change itself is already durable; a rebuild that dies with the process would only be
    redone by the next ``open``, so waiting here makes the next command fast.
    """
    if no_wait:
        return
    if model.stats().get("pending_rebuilds"):
        print("waiting for background rebuilds to land in the store ...", file=sys.stderr)
    model.wait_for_rebuilds()


def _report_receipt(receipt: Any, as_json: bool) -> None:
    """Print a forget/insert receipt: JSON for machines, a summary line for people."""
    if as_json:
        _print_json(receipt)
    else:
        print(_receipt_summary(receipt))


def cmd_forget(args: argparse.Namespace) -> int:
    ids = _read_ids_arg(args)
    with open_store(args.store) as model:
        receipt = model.forget(ids, erase_inputs=args.erase_inputs)
        _settle(model, args.no_wait)
    _report_receipt(receipt, args.json)
    return 0


def cmd_insert(args: argparse.Namespace) -> int:
    cols = _columns(args)
    table = read_table(args.data)
    ids = select_ids(table, cols, required=True)
    with open_store(args.store) as model:
        y = select_labels(table, cols, model.task)
        X = _model_features(table, cols, model)
        receipt = model.insert(X, y, ids)
        _settle(model, args.no_wait)
    _report_receipt(receipt, args.json)
    return 0


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


def cmd_inspect(args: argparse.Namespace) -> int:
    with open_store(args.store) as model:
        stats = model.stats()
    if args.json:
        _print_json(stats)
    else:
        print(render_stats(stats, args.store))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    with open_store(args.store) as model:
        print("refitting from the stored rows to compare digests ...", file=sys.stderr)
        result = model.verify()
    if args.json:
        _print_json(result)
    else:
        verdict = "OK: identical" if result["ok"] else "MISMATCH"
        print(f"{verdict} ({result.get('seconds', float('nan')):.2f} s)")
        print(f"  state digest: {result['state_digest']}")
        print(f"  refit digest: {result['refit_digest']}")
    return 0 if result["ok"] else 1


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .service import ConfigError, ServiceConfig, create_app
    except ImportError as err:
        raise CLIError(
            f"`serve` needs FastAPI and uvicorn ({err}); install them: pip install fastapi uvicorn"
        ) from None
    try:
        config = ServiceConfig.load(
            token_file=args.token_file, open_reads=args.open_reads, max_batch=args.max_batch
        )
    except ConfigError as err:
        raise _usage(str(err)) from None
    if not config.tokens:
        raise _usage(
            "no bearer token configured: pass --token-file FILE or set FORGETTING_TOKENS "
            "(comma separated); without one nobody could forget anything"
        )
    with open_store(args.store) as model:
        app = create_app(model, config)
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            print(
                f"note: listening on {args.host}, beyond this machine; put TLS in front of it",
                file=sys.stderr,
            )
        print(
            f"serving {redact(args.store)} on http://{args.host}:{args.port} "
            f"(docs at /docs; {config!r})",
            file=sys.stderr,
        )
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


# -- the parser -----------------------------------------------------------------------------


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


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} must be in (0, 1]")
    return value


_NO_WAIT_HELP = (
    "exit as soon as the change is committed, without waiting for background rebuilds to "
    "land (the next command that opens the store then redoes them)"
)
_STORE_HELP = "the store: a SQLite file path, or a postgresql://user:pass@host/db DSN"


def _add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", required=True, metavar="PATH_OR_DSN", help=_STORE_HELP)


def _add_columns(
    parser: argparse.ArgumentParser,
    id_help: str,
    label_help: str = "column of labels/targets (default: label; NPZ: y)",
) -> None:
    group = parser.add_argument_group(
        "columns",
        "CSV/TSV (header row), Parquet or NPZ. In an NPZ the 'columns' are its arrays: the "
        "features may be one 2-D array (default X), labels default to y, ids to ids.",
    )
    group.add_argument("--data", required=True, metavar="FILE", help="the data file")
    group.add_argument("--id-col", metavar="NAME", help=id_help)
    group.add_argument("--label-col", metavar="NAME", help=label_help)
    group.add_argument(
        "--feature-cols",
        metavar="A,B,...",
        help="feature columns, comma separated (default: every other numeric column; "
        "NPZ: the 2-D array X). Use the same columns for fit, predict and insert",
    )
    group.add_argument(
        "--text-col",
        metavar="NAME",
        help="a text column to embed with all-MiniLM-L6-v2 instead of numeric features "
        "(needs forgetting.encoders.text and its dependencies)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forgetting",
        description=(
            "Exact machine unlearning with a durable store. `fit` a model from a data file "
            "into a store, `predict` with it, `forget` rows by id (exact: the model equals "
            "one trained without them, and the deletion survives crashes), `insert` rows, "
            "`inspect` and `verify` the store, or `serve` it over HTTP."
        ),
        epilog="Run `forgetting COMMAND --help` for a command's options. Exit codes: 0 ok, "
        "1 failure (refused data, unknown ids, verify mismatch, database error), 2 usage error.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    fit = sub.add_parser(
        "fit",
        help="fit a model on a data file and write a new store",
        description="Fit a QSS classifier or regressor on a CSV, Parquet or NPZ file and write "
        "it to a new store. Every row needs a stable id (--id-col): forget addresses rows by it.",
    )
    _add_columns(fit, id_help="column of unique row ids (default: id; NPZ: ids)")
    _add_store(fit)
    fit.add_argument("--overwrite", action="store_true", help="replace an existing store file")
    est = fit.add_argument_group("estimator")
    est.add_argument(
        "--task",
        choices=("classification", "regression"),
        default="classification",
        help="classification (default) or regression",
    )
    est.add_argument(
        "--mode",
        choices=("exact", "label"),
        default="exact",
        help="exact: forget erases rows exactly (default); label: forget erases labels "
        "exactly, inputs still shaped the codebook (more accurate)",
    )
    est.add_argument(
        "--rho",
        type=_fraction,
        default=0.005,
        help="fraction of rows in each instance's schema subset (default 0.005); a deletion "
        "hitting it costs a rebuild",
    )
    est.add_argument(
        "--n-instances",
        type=_positive_int,
        default=3,
        help="redundant instances p (default 3): requests block only if all p rebuild",
    )
    est.add_argument("--n-levels", type=_positive_int, help="codebook levels (default: auto)")
    est.add_argument(
        "--n-centroids", type=_positive_int, help="centroids per level, a power of 2 (auto)"
    )
    est.add_argument(
        "--rebuild",
        choices=("background", "sync"),
        default="background",
        help="rebuild in the background (default) or before forget returns",
    )
    est.add_argument("--random-state", type=int, default=0, help="seed (default 0)")
    est.add_argument(
        "--secret-key-file",
        metavar="FILE",
        help="file holding the secret membership key (recommended in production: without "
        "it, anyone who knows --random-state can aim deletions at the schema subset)",
    )
    fit.set_defaults(func=cmd_fit)

    predict = sub.add_parser(
        "predict",
        help="predict the rows of a data file",
        description="Predict every row of a data file; writes CSV with the id (when the data "
        "has an id column), the prediction and, for classifiers, one proba_<class> column per "
        "class.",
    )
    _add_store(predict)
    _add_columns(
        predict,
        id_help="id column copied to the output (default: id)",
        label_help="label column, if the file has one: never used as a feature (default: label)",
    )
    predict.add_argument("--out", metavar="CSV", help="output file (default: standard output)")
    predict.add_argument(
        "--no-proba", action="store_true", help="classifiers: only the predicted class"
    )
    predict.set_defaults(func=cmd_predict)

    forget = sub.add_parser(
        "forget",
        help="forget rows by id (exact, durable), printing the receipt",
        description="Forget rows by id. When this returns, the deletion is committed to the "
        "store and the model equals one trained without the rows. Ids written as plain "
        "integers are integer ids. Forgetting ids already forgotten prints their stored "
        "receipt; unknown ids fail and change nothing.",
    )
    _add_store(forget)
    forget.add_argument("--ids", metavar="A,B,C", help="comma-separated ids")
    forget.add_argument(
        "--ids-file", metavar="FILE", help="file with one id per line (# comments allowed)"
    )
    forget.add_argument(
        "--erase-inputs",
        action="store_true",
        help="label mode only: also erase the rows' inputs (rebuilds every instance)",
    )
    forget.add_argument("--json", action="store_true", help="print the receipt as JSON")
    forget.add_argument("--no-wait", action="store_true", help=_NO_WAIT_HELP)
    forget.set_defaults(func=cmd_forget)

    insert = sub.add_parser(
        "insert",
        help="add labeled rows from a data file",
        description="Learn new labeled rows (new unique ids) from a data file with the same "
        "columns as at fit time.",
    )
    _add_store(insert)
    _add_columns(insert, id_help="column of new unique row ids (default: id)")
    insert.add_argument("--json", action="store_true", help="print the receipt as JSON")
    insert.add_argument("--no-wait", action="store_true", help=_NO_WAIT_HELP)
    insert.set_defaults(func=cmd_insert)

    for name, func, help_, description, json_help in (
        (
            "inspect",
            cmd_inspect,
            "show rows, instances, validity and rebuild statistics",
            "Show what the store holds: rows, task and mode, each instance's validity and "
            "schema size, rebuild counts and the state digest.",
            "print the statistics as JSON",
        ),
        (
            "verify",
            cmd_verify,
            "refit from the stored rows and compare state digests (exit 0 only if equal)",
            "Audit: fit a fresh model on the rows in the store and compare its state digest "
            "with the stored model's. Exit code 0 only if they are identical.",
            "print the result as JSON",
        ),
    ):
        read_only = sub.add_parser(name, help=help_, description=description)
        _add_store(read_only)
        read_only.add_argument("--json", action="store_true", help=json_help)
        read_only.set_defaults(func=func)

    serve = sub.add_parser(
        "serve",
        help="serve the store over HTTP (FastAPI; docs at /docs)",
        description="Serve the store over HTTP: POST /predict, /forget, /insert; GET "
        "/receipts/{id_hash}, /stats, /health; OpenAPI docs at /docs. Mutations need "
        "'Authorization: Bearer <token>' with a token from --token-file and/or the "
        "FORGETTING_TOKENS environment variable (comma separated, 16+ characters each).",
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
        help="predict, receipts and stats need no token (default)",
    )
    reads.add_argument(
        "--closed-reads",
        dest="open_reads",
        action="store_false",
        help="predict, receipts and stats need a token too",
    )
    serve.add_argument(
        "--max-batch",
        type=_positive_int,
        default=10_000,
        help="most rows or ids per request (default 10000); larger requests get 413",
    )
    serve.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        default="info",
        help="server log level (default info)",
    )
    serve.set_defaults(func=cmd_serve)

    # Listed here for `forgetting --help`; main() forwards `bench ...` whole to the benchmark,
    # which owns its options (`forgetting bench --help` prints them).
    sub.add_parser(
        "bench",
        help="reproduce the QSS paper's evaluation on real data (`forgetting bench --help`)",
        description="Accuracy vs g-only, SISA and exact ridge over seeds, deletion cost and "
        "speedup over SISA, bitwise exactness after 100 deletions, a rho sweep and width vs "
        "depth, on digits, MNIST, Fashion-MNIST, Adult, sentiment and diabetes; writes "
        "Markdown, CSV and PNG. Same as `python -m forgetting.bench.paper`.",
        add_help=False,
    )
    return parser


def _database_error(err: BaseException) -> bool:
    return isinstance(err, sqlite3.Error) or type(err).__module__.startswith("psycopg")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``forgetting`` and ``python -m forgetting``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        from .bench.paper import main as bench_main

        return bench_main(argv[1:], prog="forgetting bench")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CLIError as err:
        print(f"forgetting {args.command}: error: {err}", file=sys.stderr)
        return err.code
    except KeyError as err:
        message = err.args[0] if err.args else "unknown key"
        print(f"forgetting {args.command}: error: {message}; nothing was changed", file=sys.stderr)
        return 1
    except (FileExistsError, FileNotFoundError) as err:
        print(f"forgetting {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as err:
        print(f"forgetting {args.command}: error: {err}", file=sys.stderr)
        return 1
    except ImportError as err:
        hint = (
            "PostgreSQL stores need psycopg: pip install 'psycopg[binary]'"
            if "psycopg" in str(err)
            else f"install the missing package ({err.name or err})"
        )
        print(f"forgetting {args.command}: error: {err}; {hint}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`forgetting predict ... | head`): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"forgetting {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if _database_error(err):
            print(
                f"forgetting {args.command}: database error ({type(err).__name__}): "
                f"{redact(str(err))}; is {redact(getattr(args, 'store', ''))!r} a forgetting "
                "store, and reachable?",
                file=sys.stderr,
            )
            return 1
        raise
