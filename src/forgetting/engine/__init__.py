"""The engine: p redundant QSS instances over one row store — deletions, insertions,
rebuilds, serving (design.md §4).

* :mod:`.core` — :class:`QSSEngine`, the state and its lock: fit, forget, insert, the
  rebuild threads, predictions, digests, receipts and snapshots;
* :mod:`.builds` — building instances from rows in chunks (here, or on a cluster through a
  row work: forgetting.distributed), reduced exactly;
* :mod:`.rebuilds` — a background rebuild's piecewise copy of the rows and its reconciliation
  with the rows present when it lands;
* :mod:`.serving` — what a prediction computes once the served contents are chosen;
* :mod:`.config` — the resolved configuration;
* :mod:`.validation` — a snapshot from a file or a store checked whole before a restore.
"""

from __future__ import annotations

from .config import EngineConfig, RebuildError, canonical_params
from .core import QSSEngine

__all__ = ["EngineConfig", "QSSEngine", "RebuildError", "canonical_params"]
