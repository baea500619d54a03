"""``python -m forgetting_lab.bench.head_latency --table flights``: the default
``QSSClassifier`` on the flight table, forget + next ``predict_proba``, code against code.

Each library source runs in a process of its own (``PYTHONPATH`` = that source first), which
reads the table from one ``.npz`` written here and uses the public surface only (``fit``,
``forget``, ``predict_proba``, ``engine_.rows.members``): an older commit's worktree runs
as it is. Sources alternate round by round (A B, B A, A B, ...), so both meet the same load.
Per forget, the time in the engine's ``_solve_heads`` (the heads' Gram flush, factorization
and stacked solve: content.heads) is recorded beside the whole call.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from .core import SECRET_KEY
from .report import write_results

ROUND_COLUMNS = [
    "table", "source", "round", "d", "D", "corrections", "forgets", "p50_ms", "p90_ms",
    "p99_ms", "forget_p50_ms", "head_solve_p50_ms", "potrf_ms", "potrs_gemm_ms", "fit_s",
    "load",
]  # fmt: skip
SUMMARY_COLUMNS = [
    "table", "source", "rounds", "p50_ms", "p50_min", "p50_max", "forget_p50_ms",
    "head_solve_p50_ms", "head_share", "potrf_ms", "potrs_gemm_ms",
]  # fmt: skip
CHECK_COLUMNS = ["table", "source", "check", "rows", "equal"]
GRID_COLUMNS = [
    "table", "source", "D", "columns", "grid_step_relative", "radius", "radius_relative",
    "entries_undecided", "columns_undecided",
]  # fmt: skip
WARM_FORGETS = 50
"""Forgets before the timed ones (numba's first calls, caches)."""

_WORKER = r"""
import json, os, sys, time
import numpy as np
from forgetting import QSSClassifier

spec = json.loads(sys.argv[1])
data = np.load(spec["data"])
X, y, X_test = data["X"], data["y"], data["X_test"]
ids = np.arange(len(y))
params = dict(secret_key=spec["key"], random_state=spec["seed"])
started = time.perf_counter()
model = QSSClassifier(**params).fit(X, y, ids)
fit_s = time.perf_counter() - started
engine = model.engine_
rows = engine.rows
inside = np.zeros(rows.size, dtype=bool)
for r in range(model.n_instances):
    inside |= rows.members(r)
outside = ids[~inside[: len(ids)]]
rng = np.random.default_rng(spec["seed"] + 1)
victims = rng.choice(outside, size=spec["warm"] + spec["forgets"], replace=False)
probe = X_test[:1]
solve = type(engine)._solve_heads
spent = [0.0]

def timed(self, instances):
    began = time.perf_counter()
    try:
        return solve(self, instances)
    finally:
        spent[0] += time.perf_counter() - began

type(engine)._solve_heads = timed
model.predict_proba(probe)
total, forget_only, head = [], [], []
for i, victim in enumerate(victims):
    spent[0] = 0.0
    t0 = time.perf_counter()
    model.forget([int(victim)])
    t1 = time.perf_counter()
    model.predict_proba(probe)
    t2 = time.perf_counter()
    if i >= spec["warm"]:
        total.append(t2 - t0)
        forget_only.append(t1 - t0)
        head.append(spent[0])
type(engine)._solve_heads = solve
heads = [getattr(inst, "head", None) for inst in engine.instances if inst is not None]
D = max((h.cross.shape[1] for h in heads if h is not None), default=0)
out = dict(fit_s=fit_s, corrections=list(model.corrections_), D=D, total=total,
           forget=forget_only, head=head, load=os.getloadavg()[0])
if D:  # the LAPACK/BLAS calls of one exact head solve alone, on a (D, D) system like it
    from scipy.linalg.lapack import dpotrf, dpotrs
    try:
        from forgetting._rowwise import one_blas_thread
    except ImportError:
        from contextlib import nullcontext as one_blas_thread
    columns = 2 * sum(h.cross.shape[2] for h in heads if h is not None)
    rng = np.random.default_rng(0)
    V = rng.normal(size=(4 * D, D))
    A = V.T @ V + np.eye(D)
    B = np.asfortranarray(rng.normal(size=(D, columns)))
    factor = np.linalg.cholesky(A)
    floor = {"potrf": [], "solve": []}
    with one_blas_thread():
        for _ in range(30):
            M = A.copy()
            t0 = time.perf_counter()
            dpotrf(M, lower=1, clean=0, overwrite_a=1)
            t1 = time.perf_counter()
            dpotrs(factor, B, lower=1)
            A @ B[:, : columns // 2 * 2]
            t2 = time.perf_counter()
            floor["potrf"].append(t1 - t0)
            floor["solve"].append(t2 - t1)
    out["floor_potrf"] = float(np.median(floor["potrf"]))
    out["floor_solve"] = float(np.median(floor["solve"]))
try:  # how close the exact weights lie to their fixed point's rounding boundaries
    from forgetting.content.heads.certified import weight_tolerance
    from forgetting.content.heads.fixed_point import weight_bits

    model.predict_proba(probe)
    Ws = [h.solved[1] for h in heads if h is not None and h.solved is not None]
    Ws = [W for W in Ws if W is not None]
    if Ws:
        W = np.concatenate(Ws, axis=1)
        peak = np.max(np.abs(W), axis=0)
        peak[peak == 0.0] = 1.0
        e = weight_bits(W.shape[0]) - np.ceil(np.log2(peak)).astype(np.int64) - 1
        scaled = np.ldexp(W, e[None, :])
        gap = np.abs(scaled - np.floor(scaled) - 0.5)
        norms = np.linalg.norm(W, axis=0)
        out["grid_relative"] = float(np.median(np.exp2(-e.astype(float)) / norms))
        undecided = {}
        radii = [("tolerance", weight_tolerance(W.shape[0]))]
        radii += [(f"1e-{p}", 10.0**-p) for p in (11, 12, 13)]
        for name, eps in radii:
            radius = eps * norms * np.exp2(e.astype(float))
            near = gap < radius[None, :]
            undecided[name] = (eps, float(np.mean(near)), float(np.mean(np.any(near, axis=0))))
        out["undecided"] = undecided
except Exception as error:  # an older source: no such pieces
    out["undecided_error"] = repr(error)
if spec["check"]:
    keep = np.setdiff1d(ids, victims)
    refit = QSSClassifier(**params).fit(X[keep], y[keep], keep)
    out["proba_equal"] = bool(
        np.array_equal(model.predict_proba(X_test), refit.predict_proba(X_test)))
    out["digest_equal"] = model.state_digest() == refit.state_digest()
    out["kept"] = int(len(keep))
print("RESULT " + json.dumps(out))
"""


def _sources(spec: str) -> list[tuple[str, Path]]:
    """``LABEL=SRC,...`` (default: the library imported here, as "working tree")."""
    if not spec:
        import forgetting

        return [("working tree", Path(forgetting.__file__).resolve().parents[1])]
    out = []
    for item in spec.split(","):
        label, _, path = item.partition("=")
        if not path or not (Path(path) / "forgetting" / "__init__.py").exists():
            raise SystemExit(f"--sources: {item!r} is not LABEL=<a folder holding forgetting/>")
        out.append((label, Path(path).resolve()))
    return out


def _run(source: Path, spec: dict) -> dict:
    env = dict(os.environ, FORGETTING_THREADS="1", PYTHONPATH=str(source))
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"worker on {source} failed:\n{done.stderr[-3000:]}")


def _tables(rows_limit: int, n_test: int) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    from ..datasets import load_flights
    from ..datasets.flights import FLIGHTS_NUMERIC

    ds = load_flights()
    X, y, X_test = ds.X_train, ds.y_train, ds.X_test[:n_test]
    if rows_limit:
        X, y = X[:rows_limit], y[:rows_limit]
    numeric = len(FLIGHTS_NUMERIC)  # the encoded table's first columns (datasets._tables)
    return {
        f"flights, {X.shape[1]} columns": (X, y, X_test),
        f"flights, {numeric} numeric columns": (
            np.ascontiguousarray(X[:, :numeric]),
            y,
            np.ascontiguousarray(X_test[:, :numeric]),
        ),
    }


def tables_main(args, argv: list[str] | None) -> int:
    sources = _sources(args.sources)
    checked = sources[-1][0]  # the last source (the working tree, as listed) checks exactness
    forgets = args.table_forgets
    rounds, checks, grid = [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        for table, (X, y, X_test) in _tables(args.rows_limit, args.test).items():
            path = Path(scratch) / "table.npz"
            np.savez(path, X=X, y=y, X_test=X_test)
            for r in range(args.rounds):
                order = sources if r % 2 == 0 else sources[::-1]
                for label, source in order:
                    spec = dict(
                        data=str(path),
                        key=SECRET_KEY,
                        seed=args.seed,
                        warm=WARM_FORGETS,
                        forgets=forgets,
                        check=label == checked and r == 0,
                    )
                    got = _run(source, spec)
                    ms = np.asarray(got["total"]) * 1e3
                    rounds.append(dict(
                        table=table, source=label, round=r + 1, d=X.shape[1], D=got["D"],
                        corrections="/".join(c or "-" for c in got["corrections"]),
                        forgets=len(ms), p50_ms=float(np.median(ms)),
                        p90_ms=float(np.percentile(ms, 90)),
                        p99_ms=float(np.percentile(ms, 99)),
                        forget_p50_ms=float(np.median(got["forget"]) * 1e3),
                        head_solve_p50_ms=float(np.median(got["head"]) * 1e3),
                        potrf_ms=got.get("floor_potrf", float("nan")) * 1e3,
                        potrs_gemm_ms=got.get("floor_solve", float("nan")) * 1e3,
                        fit_s=got["fit_s"], load=f"{got['load']:.2f}",
                    ))  # fmt: skip
                    last = rounds[-1]
                    print(f"{table} | {label} | round {r + 1}: p50 {last['p50_ms']:.3f} ms, "
                          f"head solve {last['head_solve_p50_ms']:.3f} ms", flush=True)  # fmt: skip
                    if "undecided" in got and not any(g["table"] == table for g in grid):
                        for name, (eps, entries, columns) in got["undecided"].items():
                            grid.append(dict(
                                table=table, source=label, D=got["D"],
                                columns=len(got["corrections"]) * int(y.max() + 1),
                                grid_step_relative=got["grid_relative"],
                                radius="weight_tolerance(D)" if name == "tolerance" else name,
                                radius_relative=eps, entries_undecided=entries,
                                columns_undecided=columns,
                            ))  # fmt: skip
                    if "proba_equal" in got:
                        checks += [
                            dict(table=table, source=label, check="predict_proba",
                                 rows=len(X_test), equal=got["proba_equal"]),
                            dict(table=table, source=label, check="state digest",
                                 rows=got["kept"], equal=got["digest_equal"]),
                        ]  # fmt: skip
    summary = []
    for table in dict.fromkeys(row["table"] for row in rounds):
        for label, _ in sources:
            mine = [row for row in rounds if row["table"] == table and row["source"] == label]
            p50 = [row["p50_ms"] for row in mine]
            head = float(np.median([row["head_solve_p50_ms"] for row in mine]))
            summary.append(dict(
                table=table, source=label, rounds=len(mine), p50_ms=float(np.median(p50)),
                p50_min=min(p50), p50_max=max(p50),
                forget_p50_ms=float(np.median([row["forget_p50_ms"] for row in mine])),
                head_solve_p50_ms=head, head_share=f"{head / float(np.median(p50)):.2f}",
                potrf_ms=float(np.median([row["potrf_ms"] for row in mine])),
                potrs_gemm_ms=float(np.median([row["potrs_gemm_ms"] for row in mine])),
            ))  # fmt: skip
    notes = (
        f"The default QSSClassifier (random_state {args.seed}) on the flight table's training "
        "split, each source in a process of its own with FORGETTING_THREADS=1, sources "
        f"alternating round by round; per round {WARM_FORGETS} warm-up forgets, then "
        f"{forgets} single-id forgets of rows outside every D°, each followed by a one-row "
        "predict_proba (p50/p90/p99 of the pair). head_solve: the time inside the engine's "
        "_solve_heads per pair (the heads' pending Gram rows added, the Gram factored, the "
        "stacked solve of every instance's head), its median; head_share = head_solve p50 / "
        "p50. D: the head's system size (features and random features + 1). potrf_ms, "
        "potrs_gemm_ms: the LAPACK/BLAS calls of one exact solve alone, on one BLAS thread, "
        "timed in the same process on a random (D, D) positive definite system (median of "
        "30): a Cholesky factorization, and a triangular solve of 2·p·k columns plus a "
        "product with a (D, D) matrix (content.heads.solve). "
        f"forget = refit: the source {checked!r}, first round: a fit without the forgotten "
        "rows, predict_proba on the test rows and the state digest compared bit for bit. "
        "load: the 1-min load average when the round ended. "
        "Could a tracked solution give the served bits: after the timed forgets, the exact "
        "weights W of every head (the stacked solve's, before the per-class logistic step) "
        "on their fixed-point grid (content.heads.fixed_point.FixedWeights: 2^-e per column, "
        "grid_step_relative = 2^-e / ‖W_c‖₂, median over columns); a W̃ known to within "
        "radius_relative · ‖W_c‖₂ of W rounds to the same integers only where every entry "
        "lies farther than that from a rounding boundary (x.5 on the grid). "
        "entries_undecided / columns_undecided: the share of entries within that distance, "
        "and of columns holding at least one (a column with one is a class whose served "
        "probabilities a dense row's features cannot certify). weight_tolerance(D): the "
        "bound the certified labels rely on (content.heads.certified)."
    )
    command = "python -m forgetting_lab.bench.head_latency " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    path = write_results(
        args.out,
        args.name if args.name != "head-latency" else "qss-tables-latency",
        command.strip(),
        {
            "forget + next predict_proba, by source (medians over rounds)": (
                summary,
                SUMMARY_COLUMNS,
            ),
            "every round": (rounds, ROUND_COLUMNS),
            "forget = refit": (checks, CHECK_COLUMNS),
            "could a tracked solution give the served bits?": (grid, GRID_COLUMNS),
        },
        notes,
    )
    print(f"wrote {path}")
    return 0 if all(check["equal"] for check in checks) else 1
