"""``forgetting``: fit, query, forget from, inspect, verify and serve a durable QSS model; run
the benchmarks and audits.

Every store command works on a *store* (a SQLite file or a ``postgresql://`` DSN) written by
:class:`forgetting.store.durable.DurableModel`, so a deletion acknowledged by ``forget``
survives any crash, and ``serve`` exposes the same store over HTTP. This package only parses,
calls the library and prints: table files are read by :mod:`forgetting.io.tables` (whose
docstring states the rules for ids, labels and features), an estimator option left out takes
the estimator's own default, and the store enforces one writer. One job per module:

* :mod:`.parser` -- the argparse tree: commands, options, help texts;
* :mod:`.commands` -- fit, predict, forget, insert, inspect, verify; :mod:`.serve` -- serve;
* :mod:`.inputs` -- data files and dataset directories (and the dask cluster that fits the
  latter), ids, the secret key file and the store, as the library takes them;
* :mod:`.estimator` -- the estimator options of ``fit`` and the defaults its help shows;
* :mod:`.render` -- what is printed: JSON, receipts, tables;
* :mod:`.errors` -- ``CLIError`` and the mapping of every expected error to a line and a code;
* :mod:`.plugins` -- the ``bench`` and ``audit`` registries and their dispatch.

**Help is instant.** :func:`main`, the parser and the error handling import no numpy,
scikit-learn or store: a command imports the library when it runs, and the names below that
need it (``cmd_fit``, ``open_store``, ...) are imported on first use (PEP 562).

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
* **A directory is a Parquet dataset.** ``--data DIR`` means what one Parquet file holding its
  files' rows (natural name order: ``part.2`` before ``part.10``) means. ``fit`` reads it
  lazily with dask and fits on a dask.distributed cluster (``--scheduler ADDRESS``, or a local
  one of ``--workers N`` processes), writing the store the in-memory fit of that one file
  writes, bit for bit; ``predict`` and ``insert`` read it into memory (pyarrow, no dask).
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

import importlib
import sys
from collections.abc import Sequence
from typing import Any

from .errors import CLIError, redact, run_command
from .estimator import ESTIMATOR_OPTIONS
from .parser import build_parser
from .plugins import (
    AUDITS,
    BENCHMARKS,
    available_audits,
    available_benchmarks,
    run_audit,
    run_bench,
)

#: Names imported on first use (their modules import numpy and the library): name -> module.
_LAZY = {
    "PREDICT_CHUNK": ".commands",
    "cmd_fit": ".commands",
    "cmd_forget": ".commands",
    "cmd_insert": ".commands",
    "cmd_inspect": ".commands",
    "cmd_predict": ".commands",
    "cmd_verify": ".commands",
    "cmd_serve": ".serve",
    "embed_texts": ".inputs",
    "open_store": ".inputs",
    "format_table": ".render",
    "render_stats": ".render",
}

__all__ = [
    "AUDITS",
    "BENCHMARKS",
    "ESTIMATOR_OPTIONS",
    "PREDICT_CHUNK",
    "CLIError",
    "available_audits",
    "available_benchmarks",
    "build_parser",
    "cmd_fit",
    "cmd_forget",
    "cmd_insert",
    "cmd_inspect",
    "cmd_predict",
    "cmd_serve",
    "cmd_verify",
    "embed_texts",
    "format_table",
    "main",
    "open_store",
    "redact",
    "render_stats",
    "run_audit",
    "run_bench",
]


def __getattr__(name: str) -> Any:
    """The names of :data:`_LAZY`, imported on first use (PEP 562)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``forgetting`` and ``python -m forgetting``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        return run_command("bench", lambda: run_bench(argv[1:]))
    if argv[:1] == ["audit"]:
        return run_command("audit", lambda: run_audit(argv[1:]))
    args = build_parser().parse_args(argv)
    return run_command(args.command, lambda: args.func(args), getattr(args, "store", None))
