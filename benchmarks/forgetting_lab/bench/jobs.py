"""A resumable job graph for benchmarks whose models take minutes to hours each.

A job is a name; it is done when its output marker exists (``is_done``). :func:`run_jobs`
starts every unfinished job as soon as the jobs it needs are done, ``n_workers`` at a time in
spawned processes (torch is not fork-safe), so a killed run restarts where it stopped.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context

__all__ = ["run_jobs", "selected", "shown_command"]


def run_jobs(
    jobs: Mapping[str, tuple[str, ...]],
    is_done: Callable[[str], bool],
    work: Callable[[str], str],
    n_workers: int,
    desc: str,
) -> None:
    """Run ``work(job)`` (picklable; returns the job's name) for every job of ``jobs`` (name →
    the names it needs, in start order) that ``is_done`` does not report done."""
    from tqdm.auto import tqdm

    pending = {j: needs for j, needs in jobs.items() if not is_done(j)}
    running: dict = {}
    with (
        tqdm(total=len(pending), desc=desc) as bar,
        ProcessPoolExecutor(n_workers, mp_context=get_context("spawn")) as pool,
    ):
        while pending or running:
            ready = [j for j, needs in pending.items() if all(is_done(n) for n in needs)]
            for job in ready[: max(0, n_workers - len(running))]:
                del pending[job]
                running[pool.submit(work, job)] = job
            if not running:
                raise RuntimeError(f"jobs wait on jobs that did not finish: {sorted(pending)}")
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                bar.set_postfix_str(future.result())
                bar.update(1)
                del running[future]


def selected(
    jobs: Mapping[str, tuple[str, ...]], only: list[str] | None
) -> dict[str, tuple[str, ...]]:
    """``jobs`` cut down to ``only`` and what those need (all of them when ``only`` is None)."""
    if only is None:
        return dict(jobs)
    unknown = sorted(set(only) - set(jobs))
    if unknown:
        raise ValueError(f"unknown job(s) {', '.join(unknown)}; jobs are: {', '.join(jobs)}")
    keep, todo = set(), list(only)
    while todo:
        job = todo.pop()
        if job not in keep:
            keep.add(job)
            todo.extend(jobs[job])
    return {job: needs for job, needs in jobs.items() if job in keep}


def shown_command(module: str, argv: list[str]) -> str:
    """The command line a result file names: ``python -m module`` and its arguments, less
    ``--work-dir`` and ``--report-only`` (where the jobs live and whether this call trained
    say nothing of the result)."""
    shown, skip = [], False
    for a in argv:
        if skip or a == "--report-only" or a.startswith("--work-dir"):
            skip = a == "--work-dir"
            continue
        shown.append(a)
    return f"python -m {module}" + (f" {shlex.join(shown)}" if shown else "")
