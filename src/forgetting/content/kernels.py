"""Which implementation runs the flat tables' hot loops: compiled (numba) or numpy.

Why: at n = 300k a fit spent most of its time in three loops that numpy runs as many passes
over large temporaries — the threshold tests of :meth:`ThresholdPartition.cells`, the
scatter of residuals into the cells (``_scatter_rows``) and the per-cell cross-fit terms
(``FlatTables._terms``) — and a batch forget runs the last two again. The compiled versions
(:mod:`forgetting.content._table_kernels`) perform the same float operations in the same
order and sum only integers, so they give the numpy versions' integers bit for bit; the numpy
code stays as the fallback and as the definition (``tests/test_table_kernels.py`` compares).
A forget of a few rows runs as one compiled call (``update_cells``: scatter, the touched cells'
terms and probe terms, old and new), where numpy's dozens of small calls cost ~0.4 ms.

Loading follows :mod:`forgetting.content.blake2`: numba is imported only for a batch big
enough to repay it (or once loaded), never by ``import forgetting``; without numba, or with
``FORGETTING_KERNELS=numpy`` in the environment, everything runs in numpy. Which one runs
changes timings only.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

_UNSET = object()


class LazyKernel:
    """A compiled module (``forgetting.content.<name>``) imported on first use by work big
    enough to repay numba's import, or forced on or off by an environment variable.

    ``env`` = ``off`` forces the pure-Python/numpy path, ``numba`` forces the kernel; unset,
    the kernel runs once loaded or when ``work ≥ min_work``. Without numba the module fails
    to import and the fallback runs, with the same results.
    """

    def __init__(self, name: str, env: str, off: str, min_work: int):
        self.name, self.env, self.off, self.min_work = name, env, off, min_work
        self._module: object = _UNSET
        self._env_key = env.encode()

    def get(self, work: int) -> ModuleType | None:
        if _ENV_DATA is not None and self._module is not _UNSET:
            # the usual case, once loaded: the variable unset (a one-row forget and its
            # prediction ask ~17 times; _environ and the lower-casing were ~1 µs each)
            if self._env_key not in _ENV_DATA:
                return self._module  # type: ignore[return-value]
        choice = _environ(self.env).lower()
        if choice == self.off:
            return None
        if self._module is _UNSET:
            if choice != "numba" and work < self.min_work:
                return None
            try:
                self._module = importlib.import_module(f"{__package__}.{self.name}")
            except ImportError:  # numba not installed: the fallback gives the same results
                self._module = None
        return self._module  # type: ignore[return-value]


_ENV_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None
"""os.environ's own dict of bytes on POSIX (what ``os.environ.get`` reads after encoding the
key and before decoding the value); None elsewhere."""


def _environ(name: str) -> str:
    """``os.environ.get(name, "")``, read from the environment's dict of bytes where there is
    one: a one-row forget and its prediction ask ~17 times which kernels to run, and the
    mapping's key encoding and value decoding were ~2 µs of each (a third of the
    deletion's Python overhead in this module). The same value: ``os.environ`` writes
    through to that dict (and ``monkeypatch.setenv`` goes through ``os.environ``)."""
    if _ENV_DATA is None:
        return os.environ.get(name, "")
    value = _ENV_DATA.get(name.encode())
    return "" if value is None else os.fsdecode(value)


LOAD_MIN_WORK = 1 << 20
"""Smallest piece of work (row × table entries, or cells × outputs) that loads the compiled
kernels when they are not loaded yet: numpy spends ≳ 50 ms on it, about what loading the
kernels from numba's disk cache costs once numba is imported (the first fit of ≥ 20k rows
imports it for the row hashes anyway). A process that only forgets a few rows never loads
them."""


_TABLE_KERNELS = LazyKernel("_table_kernels", "FORGETTING_KERNELS", "numpy", LOAD_MIN_WORK)

HEAD_KERNELS = LazyKernel("_head_kernels", "FORGETTING_KERNELS", "numpy", LOAD_MIN_WORK // 4)
"""The ridge heads' compiled pieces (content._head_kernels): loaded by the fixed-point
features of 2^18 random features or more (~2k rows at E = 128 — any fit that size), after
which a one-row change of a head's sums uses them too; FORGETTING_KERNELS=numpy keeps numpy."""


def table_kernels(work: int) -> ModuleType | None:
    """The compiled kernels for a piece of ``work``, or None for numpy.

    ``FORGETTING_KERNELS`` = ``numpy`` or ``numba`` forces one (tests and benchmarks use it);
    unset, the kernels are used once loaded or when ``work`` is big enough to load them.
    """
    return _TABLE_KERNELS.get(work)


def backend(work: int = LOAD_MIN_WORK) -> str:
    """``"numba"`` or ``"numpy"``: which implementation runs ``work`` now (asking may load
    the kernels, as running such work would)."""
    return "numpy" if table_kernels(work) is None else "numba"
