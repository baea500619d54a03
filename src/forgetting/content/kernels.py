"""Which implementation runs the flat tables' hot loops: compiled (numba) or numpy.

Why: at n = 300k a fit spent most of its time in three loops that numpy runs as many passes
over large temporaries — the threshold tests of :meth:`ThresholdPartition.cells`, the
scatter of residuals into the cells (``_scatter_rows``) and the per-cell cross-fit terms
(``FlatTables._terms``) — and a batch forget runs the last two again. The compiled versions
(:mod:`forgetting.content._table_kernels`) perform the same float operations in the same
order and sum only integers, so they give the numpy versions' integers bit for bit; the numpy
code stays as the fallback and as the definition (``tests/test_table_kernels.py`` compares).

Loading follows :mod:`forgetting.content.blake2`: numba is imported only for a batch big
enough to repay it (or once loaded), never by ``import forgetting``; without numba, or with
``FORGETTING_KERNELS=numpy`` in the environment, everything runs in numpy. Which one runs
changes timings only.
"""

from __future__ import annotations

import os
from types import ModuleType

_UNSET = object()
_module: object = _UNSET
LOAD_MIN_WORK = 1 << 20
"""Smallest piece of work (row × table entries, or cells × outputs) that loads the compiled
kernels when they are not loaded yet: numpy spends ≳ 50 ms on it, about what loading the
kernels from numba's disk cache costs once numba is imported (the first fit of ≥ 20k rows
imports it for the row hashes anyway). A process that only forgets a few rows never loads
them."""


def table_kernels(work: int) -> ModuleType | None:
    """The compiled kernels for a piece of ``work``, or None for numpy.

    ``FORGETTING_KERNELS`` = ``numpy`` or ``numba`` forces one (tests and benchmarks use it);
    unset, the kernels are used once loaded or when ``work`` is big enough to load them.
    """
    global _module
    choice = os.environ.get("FORGETTING_KERNELS", "").lower()
    if choice == "numpy":
        return None
    if _module is _UNSET:
        if choice != "numba" and work < LOAD_MIN_WORK:
            return None
        try:
            from . import _table_kernels as module
        except ImportError:  # numba not installed: numpy gives the same integers
            module = None
        _module = module
    return _module  # type: ignore[return-value]


def backend(work: int = LOAD_MIN_WORK) -> str:
    """``"numba"`` or ``"numpy"``: which implementation runs ``work`` now (asking may load
    the kernels, as running such work would)."""
    return "numpy" if table_kernels(work) is None else "numba"
