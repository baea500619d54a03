"""Load test of `forgetting serve`: predict latency and forget throughput under concurrency.

What it does, and why each step:

1. Fits a small synthetic classifier into a fresh SQLite store (a temp dir), so the numbers
   include the durable path a real deployment pays (commit + fsync per forget).
2. Starts ``python -m forgetting serve`` as a separate process on 127.0.0.1 and a free port
   (loopback only), with a random bearer token passed through ``FORGETTING_TOKENS``.
3. Drives it with threads, each with its own keep-alive ``httpx.Client``, in phases that are
   bounded both in time (``--seconds``) and in requests (``--max-requests``):
   * ``predict``: only prediction clients (one row per request);
   * ``mixed-b1``: prediction clients plus forget clients deleting one id per request;
   * ``mixed-b100``: the same with 100 ids per forget request.
   Forget clients take disjoint ids from one shuffled queue, so no request is a retry.
4. Stops the server (SIGINT, then SIGKILL after a grace period), reopens the store and runs
   ``verify`` (a refit from the stored rows): the last column says whether the state after
   all those concurrent deletions is bit-for-bit the refit's.

Results: a Markdown table on stdout and in ``benchmarks/results/loadtest.md`` with the command.
Client threads and the server share the machine's cores, so latencies include that contention.
"""

from __future__ import annotations

import argparse
import os
import platform
import queue
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
from sklearn.datasets import make_classification

from forgetting import QSSClassifier
from forgetting.store.durable import DurableModel

from .bench.report import markdown_table

RESULTS = Path(__file__).resolve().parents[1] / "results" / "loadtest.md"
HOST = "127.0.0.1"  # loopback only, by design


@dataclass
class Tally:
    """Latencies and counts gathered by the client threads of one phase (under a lock)."""

    predict_ms: list[float] = field(default_factory=list)
    forget_ms: list[float] = field(default_factory=list)
    forgotten_rows: int = 0
    last_forget: float = 0.0  # time.monotonic() when the last forget answered
    rebuilds_started: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, what: str, example: str = "") -> None:
        with self.lock:
            self.errors[what] = self.errors.get(what, 0) + 1
            self.examples.setdefault(what, example[:200])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def build_store(path: Path, n: int, d: int, rho: float, seed: int) -> tuple[np.ndarray, list]:
    X, y = make_classification(
        n_samples=n,
        n_features=d,
        n_informative=min(d, 16),
        n_redundant=0,
        n_classes=5,
        n_clusters_per_class=2,
        random_state=seed,
    )
    ids = [f"user-{i}" for i in range(n)]
    model = DurableModel.create(
        str(path), QSSClassifier(rho=rho, n_instances=3, random_state=seed), X, y, ids
    )
    model.close()
    return X, ids


def start_server(store: Path, port: int, token: str, max_batch: int) -> subprocess.Popen:
    env = {**os.environ, "FORGETTING_TOKENS": token}
    command = [
        sys.executable, "-m", "forgetting", "serve", "--store", str(store),
        "--host", HOST, "--port", str(port), "--log-level", "warning",
        "--max-batch", str(max_batch),
        "--no-warmup",  # a warm-up process beside the server would skew the first phase
    ]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_until_up(base: str, server: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"server exited early: {server.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server did not answer /health within {timeout} s")


def stop_server(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def _timed_post(client, path, body, tally):
    """POST ``body`` to ``path``: (milliseconds, response) on 200, else None with the failure
    counted in ``tally`` (a transport error by type, an HTTP error by path and status)."""
    started = time.perf_counter()
    try:
        r = client.post(path, json=body)
    except httpx.HTTPError as err:
        tally.error(type(err).__name__)
        return None
    elapsed = (time.perf_counter() - started) * 1000
    if r.status_code != 200:
        tally.error(f"{path.strip('/')} {r.status_code}", r.text)
        return None
    return elapsed, r


def predict_client(base, X, deadline, budget, tally, seed):
    rng = np.random.default_rng(seed)
    with httpx.Client(base_url=base, timeout=30.0) as client:
        while time.monotonic() < deadline and budget.acquire(blocking=False):
            row = X[int(rng.integers(len(X)))]
            timed = _timed_post(client, "/predict", {"X": [row.tolist()]}, tally)
            if timed is None:
                continue
            elapsed, _ = timed
            with tally.lock:
                tally.predict_ms.append(elapsed)


def forget_client(base, token, ids, batch, deadline, budget, tally):
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, timeout=60.0, headers=headers) as client:
        while time.monotonic() < deadline and budget.acquire(blocking=False):
            chunk = []
            while len(chunk) < batch:
                try:
                    chunk.append(ids.get_nowait())
                except queue.Empty:
                    break
            if not chunk:
                return
            timed = _timed_post(client, "/forget", {"ids": chunk}, tally)
            if timed is None:
                continue
            elapsed, r = timed
            with tally.lock:
                tally.forget_ms.append(elapsed)
                tally.forgotten_rows += len(chunk)
                tally.last_forget = time.monotonic()
                tally.rebuilds_started += bool(r.json().get("rebuild_started"))


def health_monitor(base: str, done: threading.Event, samples: list[bool]) -> None:
    """Samples /health every 0.1 s: False while every instance rebuilds (predictions block)."""
    with httpx.Client(base_url=base, timeout=30.0) as client:
        while not done.wait(0.1):
            try:
                samples.append(bool(client.get("/health").json()["serving"]))
            except (httpx.HTTPError, ValueError, KeyError):
                pass


def run_phase(name, base, token, X, ids, args, forget_batch: int | None) -> dict:
    tally = Tally()
    budget = threading.Semaphore(args.max_requests)
    before = httpx.get(f"{base}/stats", timeout=60).json().get("service", {})
    started = time.monotonic()
    deadline = started + args.seconds
    threads = [
        threading.Thread(target=predict_client, args=(base, X, deadline, budget, tally, k))
        for k in range(args.clients)
    ]
    if forget_batch:
        threads += [
            threading.Thread(
                target=forget_client, args=(base, token, ids, forget_batch, deadline, budget, tally)
            )
            for _ in range(args.forget_clients)
        ]
    samples: list[bool] = []
    done = threading.Event()
    monitor = threading.Thread(target=health_monitor, args=(base, done, samples))
    monitor.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=args.seconds + 120)
    wall = time.monotonic() - started
    service = httpx.get(f"{base}/stats", timeout=60).json().get("service", {})
    done.set()
    monitor.join(timeout=10)
    pm, fm = np.array(tally.predict_ms), np.array(tally.forget_ms)

    def q(values, p):
        return float(np.percentile(values, p)) if len(values) else float("nan")

    return {
        "phase": name,
        "predict_clients": args.clients,
        "forget_clients": args.forget_clients if forget_batch else 0,
        "ids_per_forget": forget_batch or 0,
        "seconds": wall,
        "predict_requests": len(pm),
        "predict_rps": len(pm) / wall,
        "predict_p50_ms": q(pm, 50),
        "predict_p99_ms": q(pm, 99),
        "requests_per_model_call": (
            (service.get("predict_requests", 0) - before.get("predict_requests", 0))
            / max(1, service.get("predict_model_calls", 0) - before.get("predict_model_calls", 0))
        ),
        "forget_requests": len(fm),
        "forget_p50_ms": q(fm, 50),
        "forget_p99_ms": q(fm, 99),
        # over the time the forget clients were busy: they stop early once the ids run out
        "forget_rows_per_s": (
            tally.forgotten_rows / max(tally.last_forget - started, 1e-9)
            if forget_batch and tally.forgotten_rows
            else float("nan")
        ),
        "d0_hits": tally.rebuilds_started,
        "all_rebuilding_pct": 100.0 * samples.count(False) / max(1, len(samples)),
        "errors": sum(tally.errors.values()),
        "_errors": dict(tally.errors),
        "_examples": dict(tally.examples),
    }


COLUMNS = [
    "phase",
    "predict_clients",
    "forget_clients",
    "ids_per_forget",
    "seconds",
    "predict_requests",
    "predict_rps",
    "predict_p50_ms",
    "predict_p99_ms",
    "requests_per_model_call",
    "forget_requests",
    "forget_p50_ms",
    "forget_p99_ms",
    "forget_rows_per_s",
    "d0_hits",
    "all_rebuilding_pct",
    "errors",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows in the store")
    parser.add_argument("--features", type=int, default=32, help="features per row")
    parser.add_argument("--rho", type=float, default=0.005, help="schema subset fraction")
    parser.add_argument("--clients", type=int, default=8, help="concurrent predict clients")
    parser.add_argument("--forget-clients", type=int, default=2, help="concurrent forget clients")
    parser.add_argument("--seconds", type=float, default=10.0, help="time bound per phase")
    parser.add_argument("--max-requests", type=int, default=20_000, help="request bound/phase")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--forgettable",
        type=float,
        default=0.5,
        help="fraction of the rows the forget clients may use up over the run",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="Markdown results file")
    args = parser.parse_args(argv)
    command = "python -m forgetting_lab.loadtest" + (
        " " + shlex.join(argv if argv is not None else sys.argv[1:])
        if (argv if argv is not None else sys.argv[1:])
        else ""
    )

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="forgetting-loadtest-") as tmp:
        store = Path(tmp) / "store.db"
        t0 = time.perf_counter()
        X, all_ids = build_store(store, args.rows, args.features, args.rho, args.seed)
        print(f"store: {args.rows} rows x {args.features} in {time.perf_counter() - t0:.1f} s")
        # at most --forgettable of the rows: the store never runs down to a handful of rows
        # (a class vanishing, a refit), whatever the forget rate
        ids: queue.Queue = queue.Queue()
        order = np.random.default_rng(args.seed).permutation(len(all_ids))
        for i in order[: int(args.forgettable * len(all_ids))]:
            ids.put(all_ids[int(i)])
        token = secrets.token_urlsafe(32)
        port = free_port()
        base = f"http://{HOST}:{port}"
        server = start_server(store, port, token, max_batch=1000)
        rows = []
        try:
            wait_until_up(base, server, timeout=120)
            for name, batch in (("predict", None), ("mixed-b1", 1), ("mixed-b100", 100)):
                row = run_phase(name, base, token, X, ids, args, batch)
                print(
                    f"  {name}: {row['predict_requests']} predicts, "
                    f"{row['forget_requests']} forgets, errors {row['_errors'] or 0}"
                )
                rows.append(row)
            stats = httpx.get(f"{base}/stats", timeout=30).json()
        finally:
            stop_server(server)
        model = DurableModel.open(str(store))
        try:
            model.wait_for_rebuilds()
            check = model.verify()
        finally:
            model.close()

    table = markdown_table(rows, COLUMNS)
    refusals = "".join(
        f" {row['phase']}: {n} x {kind} ({row['_examples'].get(kind, '')})."
        for row in rows
        for kind, n in row["_errors"].items()
    )
    forgotten = args.rows - check.get("n_rows", stats["n_rows"])
    notes = (
        f"Store: {args.rows} rows x {args.features} features, 5 classes, rho={args.rho}, "
        f"p=3 instances, background rebuilds, SQLite (synchronous=FULL). Each phase is bounded "
        f"by {args.seconds:g} s and {args.max_requests} requests; predict requests carry one row. "
        f"The forget clients draw from {args.forgettable:.0%} of the rows and stop when those are "
        f"used up; forget_rows_per_s is over the time they were busy. "
        f"After the run: {forgotten} rows forgotten in total; reopening the store and refitting "
        f"from its rows gave {'the same' if check['ok'] else 'a DIFFERENT'} state digest "
        f"(verify ok = {check['ok']}). Clients and server share {os.cpu_count()} CPUs (1-min "
        f"load average {load_before:.2f} before the run), so latencies include that contention. "
        f"Concurrent predict "
        f"requests are micro-batched by the server into one model call. d0_hits: forget "
        f"requests that hit a schema subset D° and started a background rebuild; "
        f"all_rebuilding_pct: share of /health samples (every 0.1 s) during which every "
        f"instance was rebuilding, so predictions had to wait."
        + (f" Errors:{refusals}" if refusals else " No request failed.")
    )
    text = "\n".join(
        [
            "# loadtest",
            "",
            f"Command: `{command}`",
            f"Date: {datetime.now(UTC).isoformat(timespec='seconds')}; machine: "
            f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "",
            table,
            "",
            notes,
            "",
        ]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print()
    print(table)
    print()
    print(notes)
    print(f"\nwrote {args.out}")
    return 0 if check["ok"] and not any(r["errors"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
