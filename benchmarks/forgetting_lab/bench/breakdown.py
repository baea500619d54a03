"""Where a deletion's time goes: forget + first predict, split by the steps that run.

Run ``python -m forgetting_lab.bench.breakdown`` (issue 15: forget + first predict ≤ 1 ms at
n = 300k). It fits the core benchmark's model (:mod:`forgetting_lab.bench.core`: synthetic
clustered data, k = 10, d = 128, p = 3, library defaults), then times single deletions of
rows outside every D° together with a one-row prediction after each, with a timer around
each step of the path. Why a separate benchmark: bench.core says *how long* a user waits;
this says *what for*, so the README's account of the latency floor comes from a command,
and a change to one step shows up in its own row.

Times are inclusive (a step's row contains the steps it calls, named in ``inside``) and
divided by the number of deletions timed. The timers cost ~1 µs per call; the total with
them is reported beside the one without (``t_fast`` is measured first, uninstrumented).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting.content.heads import LinearHead
from forgetting.content.heads import linear as head_module
from forgetting.content.heads.gain_filter import GainFilter
from forgetting.content.tables import FlatTables
from forgetting.engine import QSSEngine
from forgetting.engine import core as engine_core
from forgetting.instance import Instance
from forgetting.rows import RowStore
from forgetting.schema import Schema
from forgetting.schema import serving as serving_module

from .core import SECRET_KEY, clustered_data
from .costs import schema_rank
from .report import write_results

EXPECTED_DURATION = "not recorded"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

COLUMNS = ["step", "inside", "calls_per_deletion", "ms_per_deletion", "share_of_t_fast"]

STEPS: list[tuple[str, object, str, str]] = [
    # (step, owner, attribute, the step it runs inside)
    ("forget", QSSClassifier, "forget", ""),
    ("engine forget", QSSEngine, "forget", "forget"),
    ("id lookup", RowStore, "positions_of", "engine forget"),
    ("instance subtract", QSSEngine, "_subtract", "engine forget"),
    ("tables: cell update", FlatTables, "subtract", "instance subtract"),
    ("head: sums update", LinearHead, "subtract", "instance subtract"),
    ("head features of the leaving rows", Instance, "head_inputs", "engine forget"),
    ("row removal", RowStore, "remove", "engine forget"),
    ("receipt", QSSEngine, "receipt", "engine forget"),
    ("predict", QSSClassifier, "predict", ""),
    ("head: stacked solve", engine_core, "solve_stacked", "predict"),
    ("head: Gram factorization", head_module.GramSystem, "of", "head: stacked solve"),
    ("instance content: (α, λ) and head choice", QSSEngine, "_content", "predict"),
    ("tables: (α, λ) choice", FlatTables, "best", "instance content: (α, λ) and head choice"),
    (
        "head: gain filter",
        GainFilter,
        "certainly_below",
        "instance content: (α, λ) and head choice",
    ),
    (
        "head: stacked solve the filter left",
        head_module,
        "solve_stacked",
        "instance content: (α, λ) and head choice",
    ),
    ("φ, g and cells of the predicted row (serving route)", serving_module, "encode", "predict"),
    ("  φ and g by a model's own arithmetic", Schema, "encode", "predict"),
    ("combine", engine_core, "combine", "predict"),
]
"""The steps timed; each name is a method (or module function) on the deletion path."""


class StepTimers:
    """Wraps each step's function with a wall-clock accumulator, and restores them."""

    def __init__(self, steps: list[tuple[str, object, str, str]]):
        self.steps = steps
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._saved: list[tuple[object, str, object, bool]] = []

    def __enter__(self) -> StepTimers:
        for name, owner, attr, _ in self.steps:
            own = attr in vars(owner)  # else inherited: restored by deleting the wrapper
            original = vars(owner)[attr] if own else getattr(owner, attr)
            self._saved.append((owner, attr, original, own))
            setattr(owner, attr, self._timed(name, original))
        return self

    def __exit__(self, *exc) -> None:
        for owner, attr, original, own in reversed(self._saved):
            if own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)
        self._saved.clear()

    def _timed(self, name: str, original) -> object:
        if isinstance(original, classmethod):
            inner = original.__func__

            def timed_cls(cls, *args, **kwargs):
                return self._run(name, lambda: inner(cls, *args, **kwargs))

            return classmethod(timed_cls)

        def timed(*args, **kwargs):
            return self._run(name, lambda: original(*args, **kwargs))

        return timed

    def _run(self, name: str, call: Callable[[], object]) -> object:
        started = time.perf_counter()
        try:
            return call()
        finally:
            self.seconds[name] += time.perf_counter() - started
            self.calls[name] += 1


def deletion_loop(model, victims: np.ndarray, x1: np.ndarray) -> list[float]:
    """forget(one id) + predict(one row) per victim; the wall time of each."""
    waited = []
    for v in victims:
        started = time.perf_counter()
        model.forget([int(v)])
        model.predict(x1)
        waited.append(time.perf_counter() - started)
    return waited


def breakdown_rows(n: int, deletions: int, head: str) -> tuple[list[dict], dict]:
    X, y = clustered_data(n)
    ids = np.arange(n)
    params = dict(rho=0.005, n_instances=3, random_state=0, secret_key=SECRET_KEY, head=head)
    model = QSSClassifier(**params).fit(X, y, ids)
    order = np.argsort(schema_rank(ids.tolist(), 3, 0, SECRET_KEY))
    pool = np.setdiff1d(ids, order[: int(np.ceil(0.1 * n)) + 4])  # every D° row, with margin
    victims = np.random.default_rng(1).choice(pool, size=3 * deletions, replace=False)
    x1 = X[:1]
    deletion_loop(model, victims[:deletions], x1)  # warm-up: caches, compiled kernels
    plain = deletion_loop(model, tqdm(victims[deletions : 2 * deletions], desc="plain"), x1)
    with StepTimers(STEPS) as timers:
        timed = deletion_loop(model, tqdm(victims[2 * deletions :], desc="timed"), x1)
    t_fast = float(np.median(plain)) * 1e3
    mean_plain = float(np.mean(plain)) * 1e3
    rows = []
    for name, _, _, inside in STEPS:
        ms = timers.seconds[name] / deletions * 1e3
        rows.append(
            {
                "step": name,
                "inside": inside or "–",
                "calls_per_deletion": timers.calls[name] / deletions,
                "ms_per_deletion": ms,
                "share_of_t_fast": ms / mean_plain,
            }
        )
    summary = {
        "n": n,
        "head": head,
        "corrections": "/".join(c or "-" for c in model.corrections_),
        "t_fast_p50_ms": t_fast,
        "t_fast_mean_ms": mean_plain,
        "timed_mean_ms": float(np.mean(timed)) * 1e3,
    }
    return rows, summary


def main(
    argv: list[str] | None = None, prog: str = "python -m forgetting_lab.bench.breakdown"
) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n\n")[0] + " Writes Markdown + CSV to --out.",
    )
    parser.add_argument("--n", type=int, default=300_000, help="training rows (synthetic)")
    parser.add_argument("--deletions", type=int, default=300, help="single deletions timed")
    parser.add_argument(
        "--head", default="auto", help="the estimator's head parameter (default: the library's)"
    )
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--name", default="breakdown", help="results file name")
    args = parser.parse_args(argv)
    rows, summary = breakdown_rows(args.n, args.deletions, args.head)
    argv = sys.argv[1:] if argv is None else argv
    notes = (
        f"n = {summary['n']}, head={summary['head']!r} (instances serve: "
        f"{summary['corrections']}); t_fast p50 {summary['t_fast_p50_ms']:.3f} ms, mean "
        f"{summary['t_fast_mean_ms']:.3f} ms without timers, mean "
        f"{summary['timed_mean_ms']:.3f} ms with them. ms_per_deletion is inclusive (a step "
        "contains the steps listed as inside it) and averaged over the timed deletions; "
        "share_of_t_fast divides it by the uninstrumented mean. Steps run once per instance "
        "(p = 3) show ~3 calls per deletion."
    )
    path = write_results(
        Path(args.out),
        args.name,
        " ".join(["python -m forgetting_lab.bench.breakdown", *argv]),
        {"Where a deletion's time goes": (rows, COLUMNS)},
        notes,
    )
    print(path.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
