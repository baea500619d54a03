"""Compile the library's kernels into numba's on-disk cache, once per machine.

Why: the compiled kernels (every module of :data:`forgetting.content.kernels.MODULES`) are
built by numba on first use and cached beside their source (or under ``NUMBA_CACHE_DIR``). On
a machine that has never run them, the first fit pays seconds of compilation and the first
``forget`` after it too — a freshly deployed service would hold its first deletion, and every
prediction waiting on the model's lock, that long. Running this once after installing
(``forgetting warmup``; ``make setup`` does) moves that cost out of the first requests;
``forgetting serve`` starts it in a background process unless told not to.

What it runs: small fits, predictions, forgets (outside D° and at a D° hit), batch forgets and
inserts in every mode whose path has kernels — exact and label mode, classification and
regression, the default flat partition and the RQ codebook — with the kernels forced on
(``kernels.use("numba", hashing="numba")``: at these sizes the library would otherwise run
numpy), and once with the head-vs-tables factor raised so that the tables serve and the gain
filter's kernels run, as they do on large data. Then the exact forest's (which always runs
compiled): classifier and regressor, one instance and three, on rows with NaNs — a fit grown
on the cores, one-row forgets outside D° and a D° hit, a batch forget, one-row and batch
inserts, predictions of one row (its paths built) and of more than
``FLUSH_PATH_ROWS`` (every stale subtree built), the structure digest and a compaction. The
models are thrown away.

It runs in a process of its own (:func:`warm_up` starts ``python -m forgetting.warmup``),
because forcing the kernels and raising the factor are process-wide settings that must never
touch a caller's models. ``benchmarks/tests/test_warmup_lab.py`` checks that after it, in a fresh
process, a default fit at 20k rows, its forgets (outside D°, a hit, a batch) and predictions compile
nothing — and the same where the tables serve and the gain filter runs, and for the forest's
fit, forgets, inserts and predictions of both tasks.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

import numpy as np

from .content import kernels

KERNEL_MODULES = kernels.MODULES
"""Every module of compiled kernels (each function with numba's ``signatures``)."""


def kernel_stats() -> dict[str, tuple[int, int]]:
    """Per loaded kernel, (signatures loaded from the cache, signatures compiled) so far in
    this process (numba's dispatcher statistics), named by the module that defines it: a
    kernel that several modules import is counted once."""
    out = {}
    seen = set()
    for name in KERNEL_MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        for attr, value in vars(module).items():
            stats = getattr(value, "stats", None)
            if stats is None or not hasattr(stats, "cache_misses") or id(value) in seen:
                continue
            seen.add(id(value))
            hits = sum(stats.cache_hits.values())
            misses = sum(stats.cache_misses.values())
            if hits or misses:
                home = getattr(getattr(value, "py_func", None), "__module__", None) or name
                out[f"{home.rsplit('.', 1)[1]}.{attr}"] = (hits, misses)
    return out


def _mixture(n: int = 3000, d: int = 16, k: int = 4, seed: int = 3):
    """A small Gaussian mixture (float32 features, k classes of 4 sub-clusters each)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k * 4, d)).astype(np.float32)
    component = rng.integers(0, k * 4, size=n)
    X = centers[component] + rng.normal(scale=1.2, size=(n, d)).astype(np.float32)
    return X, (component % k).astype(np.int64)


def _exercise(model, X, y) -> None:
    """Fit; predict one row and many; forget rows one by one (a prediction after each) until
    one hits a D° (the receipt says so) after at least three that did not; forget a batch;
    insert one small and one large batch: every serving and update path."""
    n = len(y) - 400
    ids = list(range(n))
    model.fit(X[:n], y[:n], ids)
    model.predict(X[:1])
    model.predict(X[:200])
    misses = hits = 0
    for row in ids[:600]:
        receipt = model.forget([row])
        model.predict(X[:1])
        if receipt.instances_hit:
            hits += 1
        else:
            misses += 1
        if hits and misses >= 3:
            break
    model.forget(ids[700:760])
    model.predict(X[:5])
    model.insert(X[n : n + 2], y[n : n + 2], [len(y) + 1, len(y) + 2])
    model.predict(X[:1])
    model.insert(X[n + 2 :], y[n + 2 :], list(range(len(y) + 3, len(y) + 401)))
    model.predict(X[:50])


def _exercise_forest(model, X, y) -> None:
    """The forest's every compiled path: a fit of ≥ 256 rows (trees grown on the cores and
    copied into one set of arrays); predictions of one row (its stale paths built) and of
    more than FLUSH_PATH_ROWS (every stale subtree built); one-row forgets outside D°, each
    with a one-row prediction, then a D° hit; a batch forget and the predictions after it
    (paths built node by node while much is stale); a one-row and a batch insert; the
    structure digest."""
    n = len(y) - 300
    ids = list(range(n))
    model.fit(X[:n], y[:n], ids)
    model.predict(X[:1])
    model.predict(X[:200])
    pool = set(model.pool_ids_)
    outside = [i for i in ids if i not in pool]
    for row in outside[:4]:
        model.forget([row])
        model.predict(X[:1])
    model.forget([min(pool)])
    model.wait_for_rebuilds()
    model.predict(X[:1])
    model.forget(outside[4:400])
    model.predict(X[:5])
    model.predict(X[:200])
    model.insert(X[n : n + 1], y[n : n + 1], [len(y)])
    model.predict(X[:1])
    model.insert(X[n + 1 :], y[n + 1 :], list(range(len(y) + 1, len(y) + 300)))
    model.predict(X[:3])
    model.structure_digest()


def _compact_forest(X, y) -> None:
    """A forest's compaction and one tree's serialization (a long-lived model's paths)."""
    from .forest import ExactForest, ForestConfig
    from .schema.membership import id_bytes

    config = ForestConfig(n_trees=2, n_candidates=4, min_bin_rows=50, cache_min_rows=8)
    forest = ExactForest(config, b"warm-up" * 4, X.shape[1], int(y.max()) + 1)
    ids = list(range(len(y)))
    forest.fit(ids, [id_bytes(i) for i in ids], X, y)
    pool = set(forest.pool_ids())
    forest.forget([i for i in ids if i not in pool][:20])
    forest.compact()
    forest.structure(0)


def _forest_rows(n: int = 1500, d: int = 8):
    """Float32 rows with 5 % NaNs (the forest's missing values), class labels and targets."""
    X, y = _mixture(n, d, 3, seed=5)
    X[np.random.default_rng(5).random(X.shape) < 0.05] = np.nan
    target = np.nan_to_num(X[:, 0]) * 2.0 - np.nan_to_num(X[:, 1])
    return X, y, target


def run(progress=None) -> dict[str, tuple[int, int]]:
    """The workloads, in this process (see the module docstring: a process of its own).
    ``progress(step, total, name, seconds)`` is called as each workload starts (seconds
    None) and ends."""
    kernels.use("numba", hashing="numba")
    from .content.tables import flat_content as tables_module
    from .estimators import (
        ExactForestClassifier,
        ExactForestRegressor,
        QSSClassifier,
        QSSRegressor,
    )

    X, y = _mixture()
    common = dict(n_instances=3, rebuild="sync", random_state=0, secret_key=b"warm-up" * 4)
    Xr = X.astype(np.float64)
    yr = Xr[:, 0] * 2.0 - Xr[:, 1] + np.sin(3.0 * Xr[:, 2])

    def tables_serve() -> None:
        factor = tables_module.TABLES_GAIN_FACTOR
        tables_module.TABLES_GAIN_FACTOR = 50.0  # the tables serve: the gain filter's kernels
        try:
            _exercise(QSSClassifier(**common), X, y)
        finally:
            tables_module.TABLES_GAIN_FACTOR = factor

    workloads = [
        ("exact classifier", lambda: _exercise(QSSClassifier(**common), X, y)),
        ("label mode", lambda: _exercise(QSSClassifier(mode="label", **common), X, y)),
        (
            "RQ codebook",
            lambda: _exercise(QSSClassifier(n_levels=2, n_centroids=16, **common), X, y),
        ),
        ("regressor", lambda: _exercise(QSSRegressor(**common), Xr, yr)),
        ("tables serving, gain filter", tables_serve),
    ]
    Xf, yf, tf = _forest_rows()
    forest = dict(n_estimators=6, max_features=4, min_bin_rows=60, random_state=0)
    forest["secret_key"] = b"warm-up" * 4
    for p in (1, 3):
        for cls, target in ((ExactForestClassifier, yf), (ExactForestRegressor, tf)):
            task = "classifier" if cls is ExactForestClassifier else "regressor"
            workloads.append(
                (
                    f"exact forest {task}, {p} instance{'s' if p > 1 else ''}",
                    lambda c=cls, t=target, p=p: _exercise_forest(
                        c(n_instances=p, **forest), Xf, t
                    ),
                )
            )
    workloads.append(("exact forest compaction", lambda: _compact_forest(Xf, yf)))
    for step, (name, workload) in enumerate(workloads, 1):
        if progress is not None:
            progress(step, len(workloads), name, None)
        started = time.perf_counter()
        workload()
        if progress is not None:
            progress(step, len(workloads), name, time.perf_counter() - started)
    return kernel_stats()


def warm_up(*, wait: bool = True, quiet: bool = False) -> subprocess.Popen | int:
    """Run the warm-up in a process of its own (``python -m forgetting.warmup``). With
    ``wait``, return its exit status; else the running process (``forgetting serve`` starts
    it in the background and goes on), which exits when this process does."""
    command = [sys.executable, "-m", "forgetting.warmup"] + (["--quiet"] if quiet else [])
    if not wait:
        command += ["--exit-with", str(os.getpid())]
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.call(command)


PARENT_POLL_S = 0.2
"""How often a background warm-up checks that the process that started it still runs."""


def exit_with(parent: int) -> None:
    """Exit this process once ``parent``, the process that started it, is gone (is no longer
    its parent: an orphan is re-parented). Why: ``forgetting serve``
    terminates its background warm-up when it stops, but a serve that is SIGKILLed cannot,
    and the orphan went on compiling for up to half a minute. Checked from a thread (the
    orphan's parent pid changes), at any point of the work: numba writes each cache file
    under a temporary name and renames it, so an exit mid-write leaves a stray temporary
    file at worst, never a half-written entry."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="warm-up-parent-watch").start()


def main(argv: list[str] | None = None, prog: str = "python -m forgetting.warmup") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Compile every kernel the library runs into numba's on-disk cache "
        "(beside the package, or NUMBA_CACHE_DIR), so that the first fit and the first "
        "forget on this machine do not wait seconds for compilation. Run it once after "
        "installing; it is quick when the cache is already complete.",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    parser.add_argument(
        "--exit-with",
        type=int,
        metavar="PID",
        help="stop once process PID, which started this one, is gone (how `forgetting serve` "
        "runs it in the background)",
    )
    args = parser.parse_args(argv)
    if args.exit_with is not None:
        exit_with(args.exit_with)
    started = time.perf_counter()

    def progress(step: int, total: int, name: str, seconds: float | None) -> None:
        if seconds is None:
            print(f"  warm-up {step}/{total}: {name} ...", end="", file=sys.stderr, flush=True)
        else:
            print(f" {seconds:.1f} s", file=sys.stderr, flush=True)

    if not args.quiet:
        print(
            "Compiling the kernels into numba's cache (once per machine; a few minutes on "
            "2 cores the first time, seconds after):",
            file=sys.stderr,
            flush=True,
        )
    stats = run(None if args.quiet else progress)
    seconds = time.perf_counter() - started
    if not args.quiet:
        compiled = sum(m for _, m in stats.values())
        cached = sum(h for h, _ in stats.values())
        print(
            f"{len(stats)} kernels ready in {seconds:.1f} s: {compiled} signatures compiled, "
            f"{cached} loaded from the cache"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
