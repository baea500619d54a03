"""How the ``forgetting`` command fails: expected problems become one line on stderr and an
exit code (2 usage, 1 failure), never a traceback.

Kept apart from the commands so that every command, and ``bench``/``audit``, fails the same
way: a command raises (``CLIError`` or the library's own exceptions) and :func:`run_command`
alone decides the message and the code. Messages pass through :func:`redact`, so a DSN's
password never reaches a terminal or a log.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from ..io.tables import TableError, TableUsageError
from ..store.errors import StoreBusy, StoreCorrupt, StoreError

#: The commands that change a store (the others open it read-only): only their failures can
#: leave a change unacknowledged.
WRITERS = ("fit", "forget", "insert", "serve")

#: The extra of ``forgetting`` that installs each optional package (top-level import name).
_EXTRAS = {
    "fastapi": "service",
    "uvicorn": "service",
    "psycopg": "postgres",
    "pyarrow": "parquet",
    "dask": "distributed",
    "distributed": "distributed",
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
        return f"install it: pip install 'forgetting[{_EXTRAS[missing]}]'"
    return f"install the missing package: pip install {missing or err}"


def _database_error(err: BaseException) -> bool:
    return isinstance(err, sqlite3.Error) or type(err).__module__.startswith("psycopg")


def run_command(command: str, call: Callable[[], int], store: str | None = None) -> int:
    """Run a command, turning every expected error into one line on stderr and an exit code."""
    where = redact(store) if store else "the store"

    def fail(message: Any, code: int) -> int:
        print(f"forgetting {command}: error: {redact(one_line(message))}", file=sys.stderr)
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
        unacknowledged = "the change was not acknowledged; " if command in WRITERS else ""
        return fail(f"{err}; {unacknowledged}retry later", 1)
    except KeyError as err:
        message = err.args[0] if err.args else "unknown key"
        return fail(f"{message}; nothing was changed", 1)
    except (FileExistsError, FileNotFoundError) as err:
        return fail(err, 2)
    except (ValueError, TypeError) as err:
        return fail(err, 1)
    except ImportError as err:
        return fail(f"{err}; {install_hint(err)}", 1)
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
