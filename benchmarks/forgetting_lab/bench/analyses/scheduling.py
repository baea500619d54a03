"""Rebuild scheduling: how often p redundant instances rebuild, and how rarely all p are down.

With p instances whose D°_r are independent keyed draws of rate ρ, a deletion hits instance r
with probability ρ and some instance with q = 1 − (1 − ρ)^p ≈ pρ. The paper's claims, checked
here with the library's real keyed membership (:mod:`forgetting.schema.membership`) on a long
deletion stream, next to the exact formulas:

* **Eager** rebuilding starts a rebuild round at every hit: 1/q ≈ 1/(pρ) deletions between
  rounds.
* The **offline optimum** (knowing the stream) waits until the last valid instance is about to
  be hit and rebuilds all p then: E[max of p Geometric(ρ)] = Σ_{j=1}^{p} (−1)^{j+1} C(p, j) /
  (1 − (1 − ρ)^j) ≈ H_p/ρ deletions between rounds — so eager does p·H_p/… times more rounds
  in the limit, the competitive ratio p·H_p.
* **Blocking**: a rebuild lasting D deletion intervals keeps its instance down; a deletion
  arrives with all p down with probability (1 − (1 − ρ)^D)^p, which is ρ^p for D = 1.

The simulation is then compared with a real :class:`~forgetting.QSSClassifier` ensemble: its
receipts' ``instances_hit`` on a stream of single-id deletions, hit for hit.
"""

from __future__ import annotations

import time
from math import comb
from typing import Any

import numpy as np
from tqdm import tqdm

from forgetting import QSSClassifier
from forgetting.schema.membership import derive_key, draws, id_bytes
from forgetting_lab.bench.plots import pyplot, save_figure

from .common import Settings, figure_path, write_tables

PS = (1, 2, 3, 4, 5)
RHOS = (0.005, 0.01, 0.02, 0.05)
DURATIONS = (1, 10, 100)
ROUND_COLUMNS = [
    "p", "rho", "deletions", "eager_rounds", "eager_gap_measured", "eager_gap_formula",
    "pq_approx", "optimum_rounds", "optimum_gap_measured", "optimum_gap_formula",
    "H_p_over_rho", "ratio_measured", "ratio_formula", "p_H_p",
]  # fmt: skip
BLOCK_COLUMNS = [
    "p", "rho", "rebuild_deletions", "all_down_measured", "all_down_formula", "deletions",
]  # fmt: skip
ENSEMBLE_COLUMNS = [
    "n", "rho", "p", "deletions", "hits_receipts", "hits_predicted", "hits_agree",
    "mean_gap_measured", "gap_formula", "instances_rebuilt", "seconds",
]  # fmt: skip


def harmonic(p: int) -> float:
    return float(sum(1.0 / j for j in range(1, p + 1)))


def expected_max_geometric(p: int, rho: float) -> float:
    """E[max of p iid Geometric(ρ)] (trials until success), by inclusion–exclusion."""
    return float(sum((-1) ** (j + 1) * comb(p, j) / (1 - (1 - rho) ** j) for j in range(1, p + 1)))


def keyed_draws(n: int, p: int, seed: int) -> np.ndarray:
    """The library's membership draws (n, p) for ids 0..n−1 under the key of ``seed``."""
    return draws(derive_key(None, seed), [id_bytes(i) for i in range(n)], p)[:, :p]


def eager_and_optimum(hits: np.ndarray) -> tuple[int, int]:
    """Rounds of eager rebuilding (every deletion that hits some instance) and of the offline
    optimum (one round each time all p instances have been hit since the last round)."""
    eager = int(hits.any(axis=1).sum())
    p = hits.shape[1]
    seen = np.zeros(p, dtype=bool)
    rounds = 0
    for row in np.flatnonzero(hits.any(axis=1)):
        seen |= hits[row]
        if seen.all():
            rounds += 1
            seen[:] = False
    return eager, rounds


def all_down_fraction(hits: np.ndarray, duration: int) -> float:
    """Fraction of deletions arriving while every instance is rebuilding, when a hit keeps
    its instance down for the next ``duration`` deletion intervals (a new hit restarts it)."""
    t = np.arange(len(hits))
    down = np.ones(len(hits), dtype=bool)
    for r in range(hits.shape[1]):
        last = np.where(hits[:, r], t, -(10**12))
        last = np.maximum.accumulate(last)
        before = np.concatenate([[-(10**12)], last[:-1]])  # hits strictly before arrival
        down &= (t - before) <= duration
    return float(down.mean())


def ensemble_stream(n: int, rho: float, p: int, n_deletions: int, seed: int) -> dict:
    """A real ensemble: fit, then forget a random stream of single ids; compare each receipt's
    ``instances_hit`` with the hits predicted from the keyed draws (threshold ρ)."""
    rng = np.random.default_rng(seed)
    d = 16
    centers = rng.normal(size=(20, d))
    comp = rng.integers(0, 20, size=n)
    X = (centers[comp] + rng.normal(scale=1.0, size=(n, d))).astype(np.float32)
    y = comp % 5
    params = dict(rho=rho, n_instances=p, n_levels=2, n_centroids=16, random_state=seed)
    model = QSSClassifier(**params).fit(X, y, np.arange(n))
    predicted = keyed_draws(n, p, seed) < rho
    stream = rng.permutation(n)[:n_deletions]
    hits, agree, rebuilt = [], 0, 0
    started = time.perf_counter()
    for row_id in tqdm(stream, desc="scheduling: ensemble stream", leave=False):
        receipt = model.forget([int(row_id)])
        got = np.zeros(p, dtype=bool)
        got[list(receipt.instances_hit)] = True
        hits.append(got.any())
        agree += bool(np.array_equal(got, predicted[row_id]))
        rebuilt += len(receipt.instances_hit)
    model.wait_for_rebuilds()
    seconds = time.perf_counter() - started
    hit_idx = np.flatnonzero(hits)
    q = 1 - (1 - rho) ** p
    return {
        "n": n,
        "rho": rho,
        "p": p,
        "deletions": n_deletions,
        "hits_receipts": int(np.sum(hits)),
        "hits_predicted": int(predicted[stream].any(axis=1).sum()),
        "hits_agree": f"{agree}/{n_deletions}",
        "mean_gap_measured": float(np.diff(hit_idx).mean()) if len(hit_idx) > 1 else float("nan"),
        "gap_formula": 1 / q,
        "instances_rebuilt": rebuilt,
        "seconds": seconds,
    }


def figure(rounds: list[dict], blocking: list[dict], path, command: str) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    colors = plt.get_cmap("tab10")
    for i, rho in enumerate(sorted({r["rho"] for r in rounds})):
        mine = sorted((r for r in rounds if r["rho"] == rho), key=lambda r: r["p"])
        ps = [r["p"] for r in mine]
        ax1.plot(ps, [r["eager_gap_formula"] for r in mine], "-", color=colors(i))
        ax1.plot(ps, [r["eager_gap_measured"] for r in mine], "o", color=colors(i))
        ax1.plot(ps, [r["optimum_gap_formula"] for r in mine], "--", color=colors(i))
        ax1.plot(
            ps,
            [r["optimum_gap_measured"] for r in mine],
            "s",
            color=colors(i),
            label=f"ρ = {rho:g}",
        )
    ax1.set_yscale("log")
    ax1.set_xlabel("p (instances)")
    ax1.set_ylabel("deletions between rebuild rounds")
    ax1.set_title("eager (—, ●: 1/q) vs offline optimum (--, ■: ≈ H_p/ρ)")
    ax1.legend(fontsize=8)
    ax1.grid(True, which="both", alpha=0.3)
    for i, (rho, dur) in enumerate(sorted({(r["rho"], r["rebuild_deletions"]) for r in blocking})):
        mine = sorted(
            (r for r in blocking if r["rho"] == rho and r["rebuild_deletions"] == dur),
            key=lambda r: r["p"],
        )
        ps = [r["p"] for r in mine]
        ax2.plot(ps, [r["all_down_formula"] for r in mine], "-", color=colors(i % 10))
        measured = [(r["p"], r["all_down_measured"]) for r in mine if r["all_down_measured"] > 0]
        if measured:
            ax2.plot(*zip(*measured, strict=True), "o", color=colors(i % 10))
        ax2.plot([], [], "-o", color=colors(i % 10), label=f"ρ = {rho:g}, D = {dur}")
    ax2.set_yscale("log")
    ax2.set_xlabel("p (instances)")
    ax2.set_ylabel("P(all p rebuilding when a deletion arrives)")
    ax2.set_title("blocking: formula (1−(1−ρ)^D)^p (—) and simulation (●, where > 0)")
    ax2.legend(fontsize=6, ncol=2)
    ax2.grid(True, which="both", alpha=0.3)
    save_figure(fig, path, command)


def run(settings: Settings) -> dict[str, Any]:
    quick = settings.quick
    length = 20_000 if quick else 400_000
    ps = (1, 3) if quick else PS
    rhos = (0.05,) if quick else RHOS
    hits_all = keyed_draws(length, max(ps), seed=0)
    rounds, blocking = [], []
    for p in tqdm(ps, desc="scheduling: simulation", leave=False):
        for rho in rhos:
            hits = hits_all[:, :p] < rho
            eager, opt = eager_and_optimum(hits)
            q = 1 - (1 - rho) ** p
            gap_opt = expected_max_geometric(p, rho)
            rounds.append(
                {
                    "p": p,
                    "rho": rho,
                    "deletions": length,
                    "eager_rounds": eager,
                    "eager_gap_measured": length / max(eager, 1),
                    "eager_gap_formula": 1 / q,
                    "pq_approx": 1 / (p * rho),
                    "optimum_rounds": opt,
                    "optimum_gap_measured": length / max(opt, 1),
                    "optimum_gap_formula": gap_opt,
                    "H_p_over_rho": harmonic(p) / rho,
                    "ratio_measured": eager / max(opt, 1),
                    "ratio_formula": gap_opt * q,
                    "p_H_p": p * harmonic(p),
                }
            )
            for dur in DURATIONS:
                blocking.append(
                    {
                        "p": p,
                        "rho": rho,
                        "rebuild_deletions": dur,
                        "all_down_measured": all_down_fraction(hits, dur),
                        "all_down_formula": (1 - (1 - rho) ** dur) ** p,
                        "deletions": length,
                    }
                )
    n, n_del = (3000, 300) if quick else (20_000, 3000)
    stream = [ensemble_stream(n, 0.01 if not quick else 0.05, 3, n_del, seed=0)]
    if not quick:
        settings.scaled.append(
            f"scheduling: the real ensemble stream has {n_del} single-id deletions on "
            f"n = {n:,} (ρ = 1 %, so hits are frequent enough to count); the simulation uses "
            f"{length:,} deletions of the keyed draws"
        )
    png = figure_path(settings, "scheduling")
    figure(rounds, blocking, png, settings.command)
    notes = (
        "Simulation: ids 0..L−1 are deleted one by one (their keyed draws are independent "
        "uniforms, so the order is immaterial); a deletion hits "
        "instance r when the library's keyed draw (`forgetting.schema.membership.draws`, key "
        "of seed 0) is below ρ — D° membership per row, independent of every other row. "
        "Eager: a rebuild round at every hit; gap = L / rounds, formula 1/q with q = "
        "1 − (1 − ρ)^p (≈ 1/(pρ), column pq_approx). Offline optimum: one round each time all "
        "p instances have been hit since the last round (it rebuilds all p just before the "
        "last valid one is hit, so never blocks); formula E[max of p Geometric(ρ)] by "
        "inclusion–exclusion, ≈ H_p/ρ. ratio = eager rounds / optimum rounds, formula "
        "E[max]·q → p·H_p as ρ → 0. Blocking: a hit keeps its instance rebuilding for D "
        "deletion intervals (a new hit restarts it); all_down = fraction of deletions that "
        "arrive while all p are rebuilding, formula (1 − (1 − ρ)^D)^p (ρ^p at D = 1). Values "
        "below 1/L cannot be seen in the simulation (measured 0). Ensemble: a real "
        "`QSSClassifier` (synthetic 16-d data, ℓ = 2, b = 16) forgets a random stream of "
        "single ids; hits_agree counts deletions whose receipt's `instances_hit` equals the "
        "prediction from the keyed draws, instance for instance.\n\n"
        f"![rebuild scheduling]({png.name})\n"
    )
    md = write_tables(
        settings,
        "scheduling",
        {
            "Rebuild rounds: eager vs offline optimum (simulation with keyed draws)": (
                rounds,
                ROUND_COLUMNS,
            ),
            "Blocking: all p instances rebuilding": (blocking, BLOCK_COLUMNS),
            "Ensemble: receipts on a deletion stream vs the keyed prediction": (
                stream,
                ENSEMBLE_COLUMNS,
            ),
        },
        notes,
    )
    return {"md": md, "png": png, "rounds": rounds, "blocking": blocking, "stream": stream}
