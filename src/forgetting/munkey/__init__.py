"""MUNKEY (Machine UNlearning via KEY deletion, design.md §7): approximate unlearning by design.

:class:`MUNKEYClassifier` trains a small ViT whose extra token is a per-row exemplar looked up
by a frozen key; ``forget`` deletes the rows' (key, exemplar) pairs, O(1) per row. The
backbone still saw the rows, so the guarantee is approximate — see docs/munkey.md.

Names load lazily (PEP 562): importing :mod:`forgetting` must not pull in torch, so
this package's names (and ``forgetting.MUNKEYClassifier``) import their module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AGGREGATIONS": "classifier",
    "KeyMemory": "memory",
    "MUNKEYClassifier": "classifier",
    "MunkeyReceipt": "classifier",
    "TinyViT": "backbone",
    "ViTConfig": "backbone",
    "deterministic_torch": "training",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
