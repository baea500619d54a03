"""What a deletion costs the caller, measured one way for every benchmark.

Why one module: the core benchmark, the paper benchmark and the analyses must mean the same
thing by "t_fast" and "expected cost", or their figures could not be compared. The rules:

* **t_fast** is a ``forget`` *together with the first* ``predict`` *after it*: whatever the
  deletion leaves to recompute (re-materializing the content, say) is paid by that prediction,
  and the caller waits for both.
* A deletion starts a rebuild when its row is in some instance's D°: with p instances, each
  holding a row with probability ρ independently (keyed draws), that happens with probability
  **q = 1 − (1 − ρ)^p** per deletion. The expected compute per deletion is then
  **(1 − q)·t_fast + q·t_rebuild**.
* Whatever this is divided into (a full retrain, a SISA shard retrain) is measured in the same
  run.

Everything here goes through the public estimator API (``forget`` and its receipt,
``predict``, ``wait_for_rebuilds``) and :mod:`forgetting.schema.membership` (the key holder's
view of who is in D°), so it measures whatever partition and serving path the model uses.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from forgetting.schema.membership import derive_key, draws, id_bytes


def rebuild_rate(rho: float, n_instances: int) -> float:
    """q = 1 − (1 − ρ)^p: the probability that one deletion hits some instance's D°."""
    return 1.0 - (1.0 - float(rho)) ** int(n_instances)


def expected_cost(t_fast: float, t_rebuild: float, rho: float, n_instances: int) -> float:
    """(1 − q)·t_fast + q·t_rebuild, in the unit of the two times (pass both in the same)."""
    q = rebuild_rate(rho, n_instances)
    return (1.0 - q) * t_fast + q * t_rebuild


def schema_rank(
    ids: Sequence[Hashable],
    n_instances: int,
    random_state: int = 0,
    secret_key: bytes | str | None = None,
) -> np.ndarray:
    """Each row's smallest keyed membership draw over the p instances.

    A row is in instance r's D° when its draw r falls below the membership threshold, so rows
    sorted by this value are the likeliest D° members first, whatever the exact threshold.
    Only the key holder can compute it (with ``secret_key=None`` the key is derived from
    ``random_state`` and is not secret). Callers confirm a hit with the receipt's
    ``instances_hit``.
    """
    key = derive_key(secret_key, int(random_state))
    d = draws(key, [id_bytes(i) for i in ids], int(n_instances))
    return d[:, : int(n_instances)].min(axis=1)


def forget_and_predict(model: Any, row_ids: Sequence[Hashable], X: np.ndarray) -> tuple:
    """One deletion as the caller sees it: ``forget(row_ids)`` then ``predict(X)``.

    Returns (seconds of the forget call, seconds of forget + predict, the receipt).
    """
    t0 = time.perf_counter()
    receipt = model.forget(list(row_ids))
    t1 = time.perf_counter()
    model.predict(X)
    return t1 - t0, time.perf_counter() - t0, receipt


def timed_rebuild(model: Any, row_id: Hashable, X: np.ndarray) -> tuple[float, float, bool]:
    """Forget a (presumed) D° row, predict, wait for the background rebuilds.

    Returns (forget + first predict in s — what the caller waits at a hit, seconds until
    ``wait_for_rebuilds`` returned counted from the forget — the rebuild's wall time, whether
    the receipt reported a hit).
    """
    model.wait_for_rebuilds()
    started = time.perf_counter()
    _, waited, receipt = forget_and_predict(model, [row_id], X)
    model.wait_for_rebuilds()
    return waited, time.perf_counter() - started, bool(receipt.instances_hit)


def array_bytes(obj: Any) -> int:
    """Bytes of every numpy array reachable from ``obj`` (attributes of this package's
    objects, lists, tuples, dicts), each array counted once.

    Structure-agnostic on purpose: it sizes whatever state the model holds, whichever
    partition family built it. Views of an array already counted are skipped.
    """
    seen: set[int] = set()
    total = 0
    stack = [obj]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, str | bytes | int | float) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, np.ndarray):
            base = item.base
            if isinstance(base, np.ndarray):
                if id(base) in seen:
                    continue
                seen.add(id(base))
                total += base.nbytes
            else:
                total += item.nbytes
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        elif type(item).__module__.startswith("forgetting"):
            if hasattr(item, "__dict__"):
                stack.extend(vars(item).values())
            for name in getattr(type(item), "__slots__", ()):
                stack.append(getattr(item, name, None))
    return total
