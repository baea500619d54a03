"""Which implementation runs the library's hot loops: compiled (numba) or the numpy/hashlib
code that defines them — chosen once per process, changed only through :func:`use`.

Every compiled kernel has a twin in numpy (hashlib for the row hashes) that defines its
results: the kernels perform the same float operations in the same order and sum only
integers (the gain filter's stay within its tolerance, content.heads.gain_filter), and the
tests compare the two, so the choice changes timings only.

Two settings, each read from the environment once, when this module is first imported:

``FORGETTING_KERNELS``
    ``auto`` (the default; any value other than the two below means it), ``numba`` or
    ``numpy``: the flat tables', the heads', the gain filter's and the schema's loops.
``FORGETTING_HASH_BACKEND``
    ``auto``, ``numba`` or ``hashlib``: the batched BLAKE2b of content.blake2.

``auto`` imports numba only for a piece of work big enough to repay the import (never on
``import forgetting``), and from then on runs every kernel of that group compiled, whatever
the size; ``numba`` compiles at first use whatever the size; ``numpy``/``hashlib`` never
loads numba. Without numba installed, everything runs the fallback. Inside a process,
:func:`use` changes a setting and :func:`using` changes it for a ``with`` block (the tests,
the warm-up); the environment is not read again.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

AUTO, NUMBA = "auto", "numba"


class Setting:
    """One process-wide choice: ``auto``, ``numba`` or the fallback's name (``off``)."""

    def __init__(self, env: str, off: str):
        self.env, self.off = env, off
        self.choices = (AUTO, NUMBA, off)
        value = os.environ.get(env, "").strip().lower()
        self.value = value if value in (NUMBA, off) else AUTO


KERNELS = Setting("FORGETTING_KERNELS", "numpy")
HASHING = Setting("FORGETTING_HASH_BACKEND", "hashlib")


class KernelGroup:
    """Compiled modules loaded together: once one of them is loaded (by work of at least
    ``min_work``, or forced), the others run for any work too — a process that fitted
    large data predicts its single rows compiled as well."""

    def __init__(self, setting: Setting, min_work: int):
        self.setting = setting
        self.min_work = min_work
        self.loaded = False
        self.unavailable = False  # numba failed to import: the fallback from then on


class LazyKernel:
    """A compiled module of a :class:`KernelGroup`, imported on its first use once the group
    is loaded. :meth:`get` is the call every hot path makes: one attribute read once the
    module runs."""

    def __init__(self, module: str, group: KernelGroup):
        self.module_name = module
        self.group = group
        self._module: ModuleType | None = None
        self._ready: ModuleType | None = None  # what get returns without deciding
        _ALL.append(self)

    def get(self, work: int) -> ModuleType | None:
        """The compiled module for a piece of ``work``, or None for the fallback."""
        ready = self._ready
        if ready is not None:
            return ready
        return self._decide(work)

    def _decide(self, work: int) -> ModuleType | None:
        group = self.group
        choice = group.setting.value
        if choice == group.setting.off or group.unavailable:
            return None
        if not group.loaded:
            if choice != NUMBA and work < group.min_work:
                return None
            group.loaded = True
        if self._module is None:
            try:
                self._module = importlib.import_module(self.module_name)
            except ImportError:  # numba not installed: the fallback gives the same results
                group.unavailable = True
                return None
        self._ready = self._module
        return self._module

    def unload(self) -> None:
        """Forget the module and the group's loading, as in a fresh process (tests)."""
        self._module = self._ready = None
        self.group.loaded = False


_ALL: list[LazyKernel] = []


def use(kernels: str | None = None, *, hashing: str | None = None) -> None:
    """Choose, for this process from now on, what runs the hot loops: ``kernels`` one of
    ``"auto"``, ``"numba"``, ``"numpy"``; ``hashing`` one of ``"auto"``, ``"numba"``,
    ``"hashlib"`` (None leaves a setting as it is). The models' bits do not depend on it."""
    for setting, value in ((KERNELS, kernels), (HASHING, hashing)):
        if value is None:
            continue
        if value not in setting.choices:
            raise ValueError(f"{setting.env}: expected one of {setting.choices}, got {value!r}")
        setting.value = value
        for kernel in _ALL:
            if kernel.group.setting is setting:
                kernel._ready = None  # decided again on the next use


def settings() -> dict[str, str]:
    """The current choices: ``{"kernels": ..., "hashing": ...}``."""
    return {"kernels": KERNELS.value, "hashing": HASHING.value}


@contextmanager
def using(kernels: str | None = None, *, hashing: str | None = None) -> Iterator[None]:
    """:func:`use` for the ``with`` block; the previous choices are restored after it."""
    before = settings()
    use(kernels, hashing=hashing)
    try:
        yield
    finally:
        use(before["kernels"], hashing=before["hashing"])


LOAD_MIN_WORK = 1 << 20
"""Smallest piece of work (row × table entries, or cells × outputs) that loads the compiled
kernels when they are not loaded yet: numpy spends about as long on it as loading the
kernels from numba's disk cache costs once numba is imported (the first fit of ≥ 20k rows
imports it for the row hashes anyway). A process that only forgets a few rows never loads
them."""
LOAD_MIN_ROWS = 20_000
"""Smallest batch of rows that loads the compiled row hasher when it is not loaded yet:
loading costs about a second once per process (importing numba, reading its cache) while
``hashlib`` costs a few µs a row, so a short-lived process that only forgets or inserts a few
rows never pays for numba."""

TABLES = KernelGroup(KERNELS, LOAD_MIN_WORK)
"""The flat tables' kernels and the schema's (cells, codebook codes, serving's φ and g)."""
HEADS = KernelGroup(KERNELS, LOAD_MIN_WORK // 4)
"""The ridge heads' compiled pieces: loaded by the fixed-point features of 2^18 random
features or more (~2k rows at E = 128 — any fit that size), after which a one-row change of a
head's sums uses them too."""
GAIN_FILTER = KernelGroup(KERNELS, LOAD_MIN_WORK)
"""The gain filter's row updates: loaded when the work the filter may do before its next
exact solve (REFRESH_ROWS · D² per tracked solution) reaches LOAD_MIN_WORK — D ≥ 46."""
HASHES = KernelGroup(HASHING, LOAD_MIN_ROWS)
"""The batched BLAKE2b."""

TABLE_TERMS = LazyKernel("forgetting.content.tables._terms_kernels", TABLES)
TABLE_REFRESH = LazyKernel("forgetting.content.tables._refresh_kernels", TABLES)
TABLE_UPDATES = LazyKernel("forgetting.content.tables._update_kernels", TABLES)
TABLE_SERVING = LazyKernel("forgetting.content.tables._serve_kernels", TABLES)
SCHEMA_KERNELS = LazyKernel("forgetting.schema._kernels", TABLES)
HEAD_KERNELS = LazyKernel("forgetting.content.heads._kernels", HEADS)
GAIN_FILTER_KERNELS = LazyKernel("forgetting.content.heads._gain_filter_kernel", GAIN_FILTER)
HASH_KERNELS = LazyKernel("forgetting.content._blake2_kernel", HASHES)

FOREST_MODULES = tuple(
    f"forgetting.forest._{role}"
    for role in (
        "arrays",
        "splitting",
        "grower",
        "stale",
        "updates",
        "batches",
        "predictor",
        "copying",
    )
)
"""The exact forest's compiled kernels, by role (docs/forest.md). They have no numpy twin
and no setting here: the forest always runs them compiled."""

MODULES = tuple(kernel.module_name for kernel in _ALL) + FOREST_MODULES
"""Every module of compiled kernels (what the warm-up compiles)."""


def backend(work: int = LOAD_MIN_WORK) -> str:
    """``"numba"`` or ``"numpy"``: which implementation runs the tables' ``work`` now (asking
    may load the kernels, as running such work would)."""
    return "numpy" if TABLE_UPDATES.get(work) is None else "numba"
