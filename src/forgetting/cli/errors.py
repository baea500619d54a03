"""How the ``forgetting`` command fails: expected problems become one line on stderr and an
exit code (2 usage, 1 failure), never a traceback.

Kept apart from the commands so that every command, and ``bench``/``audit``, fails the same
way: a command raises (``CLIError`` or the library's own exceptions) and :func:`run_command`
alone decides the message and the code. Messages pass through :func:`redact`, so a DSN's
password never reaches a terminal or a log.

Light by design: ``main`` imports this module before any command runs, so it imports neither
the store nor numpy (the store's errors are looked up only once something failed).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from ..io.table_types import TableError, TableUsageError

#: The commands that change a store (the others open it read-only): only their failures can
#: leave a change unacknowledged.
WRITERS = ("fit", "forget", "insert", "serve")

#: The extra that installs each optional package (top-level import name): of ``forgetting``,
#: or, for the benchmarks' own needs, of the lab (``forgetting-lab``, in benchmarks/).
_EXTRAS = {
    "fastapi": "forgetting[service]",
    "uvicorn": "forgetting[service]",
    "psycopg": "forgetting[postgres]",
    "pyarrow": "forgetting[parquet]",
    "dask": "forgetting[distributed]",
    "distributed": "forgetting[distributed]",
    "lightgbm": "forgetting[tabular]",
    "skimage": "forgetting[image]",
    "torch": "forgetting[text]",
    "sentence_transformers": "forgetting[text]",
    "transformers": "forgetting[text]",
    "dp_accounting": "forgetting[privacy]",
    "bitsandbytes": "forgetting[durability]",
    "torchao": "forgetting[durability]",
    "matplotlib": "forgetting-lab[plots]",
    "pandas": "forgetting[pandas]",
    "safetensors": "forgetting[munkey]",
}


class CLIError(Exception):
    """An expected error: printed as one line, then exit with ``code`` (2 usage, 1 failure)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def usage(message: str) -> CLIError:
    """A usage error (exit code 2): a bad option, a missing file or column."""
    return CLIError(message, code=2)


def redact(location: str) -> str:
    """Text fit for printing: every DSN's password in it is replaced by ``***``."""
    return re.sub(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@", r"\1***@", location)


def is_dsn(location: str) -> bool:
    """Whether a ``--store`` names a PostgreSQL database rather than a SQLite file."""
    return location.startswith(("postgresql://", "postgres://"))


def one_line(text: Any) -> str:
    """Messages are one line: nested errors may carry newlines."""
    return " ".join(str(text).split())


def install_hint(err: ImportError) -> str:
    """One line naming what to install for a missing optional package."""
    missing = (err.name or "").split(".")[0]
    if missing in _EXTRAS:
        return f"install it: pip install '{_EXTRAS[missing]}'"
    return f"install the missing package: pip install {missing or err}"


def _database_error(err: BaseException) -> bool:
    import sqlite3

    return isinstance(err, sqlite3.Error) or type(err).__module__.startswith("psycopg")


def _store_errors() -> Any:
    """:mod:`forgetting.store.errors`, or None while it was never imported: then none of its
    errors can have been raised, and the store (which imports the whole library) stays
    unimported, so a usage error of ``bench`` or ``audit`` answers at once."""
    return sys.modules.get(importlib.util.resolve_name("..store.errors", __package__))


def _failure(command: str, err: Exception, where: str) -> tuple[Any, int] | None:
    """The message and exit code of an expected error; None for anything else (a bug, raised
    as is)."""
    store = _store_errors()
    if isinstance(err, CLIError):
        return err, err.code
    if isinstance(err, TableUsageError):
        return err, 2
    if isinstance(err, TableError):
        return err, 1
    if store is not None and isinstance(err, store.StoreBusy):
        return (
            f"the store is busy: {err}; nothing was changed (a running `forgetting serve` "
            "takes changes over HTTP)",
            1,
        )
    if store is not None and isinstance(err, store.StoreUnusable):
        return err, 1  # the message says what to change: retrying would not help
    if store is not None and isinstance(err, store.StoreCorrupt):
        return f"unreadable store: {err}", 1
    if store is not None and isinstance(err, store.StoreError):
        unacknowledged = "the change was not acknowledged; " if command in WRITERS else ""
        retry = "" if "retry" in str(err) else "retry later"  # said once, not twice
        return f"{err}; {unacknowledged}{retry}".rstrip("; "), 1
    if isinstance(err, KeyError):
        message = err.args[0] if err.args else "unknown key"
        return f"{message}; nothing was changed", 1
    if isinstance(err, FileExistsError | FileNotFoundError):
        return err, 2
    if isinstance(err, ValueError | TypeError):
        return err, 1
    if isinstance(err, ImportError):
        return f"{err}; {install_hint(err)}", 1
    if isinstance(err, MemoryError):
        unacknowledged = "; the change was not acknowledged" if command in WRITERS else ""
        return (
            f"out of memory ({err or 'MemoryError'}){unacknowledged}; use a machine with more "
            "memory, or smaller inputs",
            1,
        )
    if _database_error(err):
        return (
            f"database error ({type(err).__name__}): {err}; is {where!r} a "
            "forgetting store, and reachable?",
            1,
        )
    return None


def run_command(command: str, call: Callable[[], int], store: str | None = None) -> int:
    """Run a command, turning every expected error into one line on stderr and an exit code."""
    try:
        return call()
    except BrokenPipeError:
        # The reader went away (`forgetting predict ... | head`): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"forgetting {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        failure = _failure(command, err, redact(store) if store else "the store")
        if failure is None:
            raise
        message, code = failure
        print(f"forgetting {command}: error: {redact(one_line(message))}", file=sys.stderr)
        return code
