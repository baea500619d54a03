"""MUNKEY benchmark: unlearning quality and cost of MUNKEY vs approximate baselines and QSS.

For each dataset and seed: train a plain TinyViT and a MUNKEY model of the same backbone size
on a subsample of the training split; then for each random-forgetting fraction, unlearn with
every method, score TA / RA / FA / MIA AUC against the test split (``forgetting.audit.
unlearning``), and compare each method with its **own** retrain oracle (plain-ViT baselines vs
a plain ViT retrained on the retain set; MUNKEY vs MUNKEY refitted on it; QSS-E / QSS-L on HOG
features vs their refit without the rows). Also: MUNKEY's aggregation ablation with the
pathway-sensitivity score P_s, training-time overhead over the plain ViT, and the cost of one
key deletion as the memory grows. Writes ``benchmarks/results/munkey.md``, one CSV per table
and ``munkey.png``.

Defaults fit a 2-core CPU in about 15–20 minutes (n_train 1000, 20 epochs, 3 seeds): the
paper's CIFAR-10 / ViT-Tiny / 100-epoch setting needs a GPU. ``--help`` lists every knob.
"""

from __future__ import annotations

import argparse
import copy
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

EXPECTED_DURATION = "about 13 min on 2 idle cores (results/munkey.md; 29 on a loaded machine)"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

DEFAULT_OUT = Path("benchmarks/results")
BASELINES = ("finetune", "neggrad_plus", "amnesiac", "scrub", "ssd")
LABELS = {
    "original": "Original ViT (no unlearning)",
    "retrain": "Retrain (oracle)",
    "finetune": "Fine-tune",
    "neggrad_plus": "NegGrad+",
    "amnesiac": "Amnesiac",
    "scrub": "SCRUB",
    "ssd": "SSD",
    "munkey_original": "MUNKEY before forget",
    "munkey_retrain": "MUNKEY retrain (its oracle)",
    "munkey": "MUNKEY (ensemble)",
    "qss_exact": "QSS-E",
    "qss_label": "QSS-L",
}
METRIC_COLS = ("TA", "RA", "FA", "MIA", "avg_gap", "forget_seconds")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m forgetting_lab.bench.munkey",
        description="MUNKEY vs approximate unlearning baselines and QSS (random forgetting).",
    )
    p.add_argument(
        "--datasets",
        nargs="+",
        default=["mnist", "fashion_mnist"],
        help="image datasets from forgetting_lab.datasets (28×28: mnist, fashion_mnist; "
        "8×8 digits for smoke runs)",
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=[0, 1, 2],
        help="seeds: training subsample, initialization, forget sets",
    )
    p.add_argument(
        "--fractions",
        nargs="+",
        type=float,
        default=[0.10, 0.02],
        help="random forgetting fractions of the training subsample",
    )
    p.add_argument(
        "--n-train",
        type=int,
        default=1000,
        help="training images per run (a seeded subsample: the 2-core budget)",
    )
    p.add_argument("--n-test", type=int, default=1000, help="first N test images scored")
    p.add_argument(
        "--n-retain-eval",
        type=int,
        default=500,
        help="retain rows scored for RA (a seeded subsample of the retain set)",
    )
    p.add_argument("--epochs", type=int, default=20, help="training epochs (ViT and MUNKEY)")
    p.add_argument("--batch-size", type=int, default=64, help="training batch size")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate of θ")
    p.add_argument("--width", type=int, default=64, help="backbone width")
    p.add_argument("--depth", type=int, default=3, help="transformer blocks")
    p.add_argument("--k", type=int, default=8, help="MUNKEY: neighbours retrieved at inference")
    p.add_argument(
        "--qss-rho",
        type=float,
        default=0.1,
        help="QSS schema fraction ρ (default larger than the package's 0.005: "
        "the training subsample is small)",
    )
    p.add_argument(
        "--memory-sizes",
        nargs="+",
        type=int,
        default=[1000, 10000, 100000],
        help="memory sizes for the key-deletion cost table",
    )
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="where results go")
    p.add_argument("--name", default="munkey", help="file name stem of the results")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    return p


def _images(X: np.ndarray) -> np.ndarray:
    side = int(round(np.sqrt(X.shape[1])))
    return X.reshape(len(X), side, side)


def run_one(args, name: str, seed: int, progress) -> tuple[list[dict], list[dict], list[dict]]:
    """All methods on one dataset and seed; returns (quality rows, ablation rows, timing rows)."""
    from forgetting.audit.unlearning import avg_gap, random_forget_split, score_model
    from forgetting.estimators import QSSClassifier
    from forgetting.munkey import AGGREGATIONS, MUNKEYClassifier, ViTConfig
    from forgetting.munkey.training import default_encoder
    from forgetting_lab.baselines.approximate import TrainConfig, ViTClassifier, unlearn
    from forgetting_lab.datasets import load_dataset

    ds = load_dataset(name, n_train=args.n_train, subsample_seed=seed)
    X, y = _images(ds.X_train), ds.y_train
    Xt, yt = _images(ds.X_test[: args.n_test]), ds.y_test[: args.n_test]
    side = X.shape[1]
    patch = 7 if side % 7 == 0 else 4
    ids = [f"{name}-{i}" for i in range(len(y))]
    vit_cfg = ViTConfig(
        image_size=side,
        patch=patch,
        width=args.width,
        depth=args.depth,
        heads=4,
        n_classes=ds.n_classes,
    )
    train = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=seed)
    mk_params = dict(
        width=args.width,
        depth=args.depth,
        patch=patch,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        k=args.k,
        random_state=seed,
    )
    encoder = default_encoder(side, side)
    feats, feats_t = encoder.transform(X), encoder.transform(Xt)

    # warm-up: the first torch training in a process pays one-off costs (allocator, kernels)
    # that would otherwise be charged to whichever model is timed first
    ViTClassifier(vit_cfg, replace(train, epochs=1), ds.n_classes).fit(X[:128], y[:128])
    MUNKEYClassifier(**{**mk_params, "epochs": 1}).fit(X[:128], y[:128])
    vit = ViTClassifier(vit_cfg, train, ds.n_classes).fit(X, y)
    progress.update(1)
    mk = MUNKEYClassifier(**mk_params).fit(X, y, ids)
    progress.update(1)
    timing = [
        {
            "dataset": name,
            "seed": seed,
            "vit_fit_s": vit.fit_seconds_,
            "munkey_fit_s": mk.fit_seconds_,
            "vit_fit_cpu_s": vit.fit_cpu_seconds_,
            "munkey_fit_cpu_s": mk.fit_cpu_seconds_,
        }
    ]
    quality, ablation = [], []
    for frac in args.fractions:
        f, r = random_forget_split(len(y), frac, seed=1000 + seed)
        r_eval = np.sort(np.random.default_rng(seed).permutation(r)[: args.n_retain_eval])
        splits = ((X[r_eval], y[r_eval]), (X[f], y[f]), (Xt, yt))
        base = {"dataset": name, "fraction": frac, "seed": seed, "n_forget": len(f)}

        def add(method, scores, oracle, seconds, rows=quality, base=base, **extra):
            rows.append(
                {
                    **base,
                    "method": method,
                    **{m: getattr(scores, m) for m in ("TA", "RA", "FA", "MIA")},
                    "avg_gap": avg_gap(scores, oracle),
                    "forget_seconds": seconds,
                    **extra,
                }
            )

        # plain ViT: retrain oracle, then each baseline against it
        started = time.perf_counter()
        oracle_model = unlearn("retrain", vit, (X[f], y[f]), (X[r], y[r]))
        oracle_s = time.perf_counter() - started
        oracle = score_model(oracle_model.predict_proba, oracle_model.classes_, *splits)
        add("original", score_model(vit.predict_proba, vit.classes_, *splits), oracle, 0.0)
        add("retrain", oracle, oracle, oracle_s)
        progress.update(1)
        for method in BASELINES:
            started = time.perf_counter()
            model = unlearn(method, vit, (X[f], y[f]), (X[r], y[r]))
            seconds = time.perf_counter() - started
            add(method, score_model(model.predict_proba, model.classes_, *splits), oracle, seconds)
            progress.update(1)

        # MUNKEY: forget = key deletion; oracle = MUNKEY refitted on the retain set
        forgot = copy.deepcopy(mk)
        started = time.perf_counter()
        receipt = forgot.forget([ids[i] for i in f])
        mk_seconds = time.perf_counter() - started
        assert receipt.n_removed == len(f) and not receipt.parameters_changed
        mk_oracle = MUNKEYClassifier(**mk_params).fit(X[r], y[r], [ids[i] for i in r])
        progress.update(1)
        for agg in AGGREGATIONS:

            def proba(m, agg=agg):
                return lambda Z: m.predict_proba(Z, aggregation=agg)

            s = score_model(proba(forgot), forgot.classes_, *splits)
            o = score_model(proba(mk_oracle), mk_oracle.classes_, *splits)
            ps = forgot.pathway_sensitivity(Xt, yt, aggregation=agg)
            add(
                agg,
                s,
                o,
                mk_seconds,
                rows=ablation,
                P_s=ps["P_s"],
                A_img=ps["A_img"],
                A_tok=ps["A_tok"],
                A_both=ps["A_both"],
            )
            if agg == "ensemble":
                add("munkey", s, o, mk_seconds)
                add("munkey_retrain", o, o, mk_oracle.fit_seconds_)
                before = score_model(proba(mk), mk.classes_, *splits)
                add("munkey_original", before, o, 0.0)
        progress.update(1)

        # QSS on HOG features of the same images: oracle = refit without the rows
        fsplits = ((feats[r_eval], y[r_eval]), (feats[f], y[f]), (feats_t, yt))
        for mode in ("exact", "label"):
            params = dict(mode=mode, rho=args.qss_rho, rebuild="sync", random_state=seed)
            model = QSSClassifier(**params).fit(feats, y, ids)
            kwargs = {"erase_inputs": True} if mode == "label" else {}
            started = time.perf_counter()
            model.forget([ids[i] for i in f], **kwargs)
            model.wait_for_rebuilds()
            seconds = time.perf_counter() - started
            refit = QSSClassifier(**params).fit(feats[r], y[r], [ids[i] for i in r])
            add(
                f"qss_{mode}",
                score_model(model.predict_proba, model.classes_, *fsplits),
                score_model(refit.predict_proba, refit.classes_, *fsplits),
                seconds,
            )
        progress.update(1)
    return quality, ablation, timing


def forget_cost(sizes: list[int], seed: int = 0, n_delete: int = 1000) -> list[dict]:
    """Median and 90th-percentile microseconds of one ``KeyMemory.delete`` at each memory size.

    Keys are 520-d (the HOG width), exemplars 128-d. Each deletion is timed on its own, and the
    median reported, because a loaded shared machine adds long outliers to any single timing.
    """
    import torch

    from forgetting.munkey import KeyMemory

    rows = []
    gen = torch.Generator().manual_seed(seed)
    for n in sizes:
        keys = torch.nn.functional.normalize(torch.rand(n, 520, generator=gen), dim=1)
        memory = KeyMemory(keys, torch.randn(n, 128, generator=gen), list(range(n)))
        victims = torch.randperm(n, generator=gen)[: min(n_delete, n)].tolist()
        times = np.empty(len(victims))
        for i, v in enumerate(victims):
            started = time.perf_counter_ns()
            memory.delete(v)
            times[i] = time.perf_counter_ns() - started
        rows.append(
            {
                "memory_rows": n,
                "deleted": len(victims),
                "median_us": float(np.median(times) / 1e3),
                "p90_us": float(np.percentile(times, 90) / 1e3),
            }
        )
    return rows


def _summarize(rows: list[dict], keys: tuple[str, ...], cols: tuple[str, ...]) -> list[dict]:
    """Mean ± std over seeds of ``cols`` for each distinct ``keys`` group (first-seen order)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    out = []
    for key, members in groups.items():
        summary = dict(zip(keys, key, strict=True))
        summary["seeds"] = len(members)
        for col in cols:
            values = np.array([m[col] for m in members], dtype=float)
            digits = 4 if col == "forget_seconds" else 2
            summary[col] = (
                f"{values.mean():.{digits}f} ± {values.std():.{digits}f}"
                if len(values) > 1
                else f"{values.mean():.{digits}f}"
            )
        out.append(summary)
    return out


def plot(quality: list[dict], path: Path, command: str) -> None:
    """Avg Gap (left) and forgetting time (right, log) per method, one bar group per setting."""
    from .plots import pyplot, save_figure

    plt = pyplot()
    methods = [
        LABELS[m]
        for m in LABELS
        if m not in ("original", "munkey_original", "retrain", "munkey_retrain")
    ]
    settings = sorted({(r["dataset"], r["fraction"]) for r in quality})
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    width = 0.8 / len(settings)
    for j, (name, frac) in enumerate(settings):
        gaps, secs = [], []
        for m in methods:
            sel = [
                r for r in quality if (r["dataset"], r["fraction"], r["method"]) == (name, frac, m)
            ]
            gaps.append(np.mean([r["avg_gap"] for r in sel]) if sel else np.nan)
            secs.append(max(np.mean([r["forget_seconds"] for r in sel]), 1e-6) if sel else np.nan)
        x = np.arange(len(methods)) + j * width
        axes[0].bar(x, gaps, width, label=f"{name}, {frac:.0%} forgotten")
        axes[1].bar(x, secs, width, label=f"{name}, {frac:.0%} forgotten")
    for ax, title in (
        (axes[0], "Avg Gap to own retrain oracle (pp, lower is better)"),
        (axes[1], "Forgetting time (s, log scale)"),
    ):
        ax.set_xticks(np.arange(len(methods)) + 0.4 - width / 2)
        ax.set_xticklabels(methods, rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7)
    save_figure(fig, path, command)


def _notes(args, n_runs: int, wall: float, cpu: float) -> str:
    return "\n".join(
        [
            "## What was run, and what was scaled down",
            "",
            f"- This run: {wall / 60:.1f} min wall, {cpu / 60:.1f} min CPU of this process "
            "(torch on 1 thread; the difference is time other jobs took from the 2 cores).",
            f"- Data: {', '.join(args.datasets)} stand in for CIFAR-10 (no CIFAR or DermaMNIST "
            "installs offline: the `medmnist` wheel on PyPI is 25 KB of code that downloads the "
            "arrays from Zenodo at run time). Each run trains on a seeded subsample of "
            f"{args.n_train} training images (2-core budget) and scores the first {args.n_test} "
            f"test images; RA is scored on {args.n_retain_eval} retain rows.",
            f"- Models: TinyViT width {args.width}, depth {args.depth}, 4 heads, 7×7 patches "
            f"(16 patch tokens) for both the plain ViT and MUNKEY's backbone; {args.epochs} "
            f"epochs, batch {args.batch_size}, AdamW β=(0.9, 0.99), wd 0.05, peak lr {args.lr}, "
            "warm-up + cosine (paper: ViT-Tiny/16, 100 epochs, lr 1.5e-4). MUNKEY keys: frozen "
            f"HOG + pooled pixels (520-d), exemplars 128-d, K={args.k}, τ=0.05, p_r=0.3, K′=8, "
            "pathway dropout 0.3.",
            f"- {len(args.seeds)} seeds × {len(args.fractions)} forgetting fractions × "
            f"{len(args.datasets)} datasets = {n_runs} settings per method; tables give mean ± "
            "std over seeds (population std).",
            "- Avg Gap: mean |Δ| over TA, RA, FA, MIA (pp) to the method's own retrain oracle — "
            "plain-ViT baselines vs a plain ViT retrained on the retain set, MUNKEY vs MUNKEY "
            "refitted on it, QSS vs its refit on the retain set (measured, not assumed).",
            "- MIA: AUC of the loss-threshold attack (true-label probability) separating the "
            "forget set from the test set; 50 = indistinguishable.",
            "- QSS-E/QSS-L run on HOG features of the same images with ρ="
            f"{args.qss_rho}, rebuild=sync (rebuild time counted as forgetting time); QSS-L "
            "forgets with erase_inputs=True so that its oracle is the refit without the rows.",
            "- CoUn is not implemented (needs a contrastive pre-training stage: twice the budget).",
            "- Absolute seconds are inflated by other jobs on the shared machine; compare ratios.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    from tqdm.auto import tqdm

    from .report import write_results

    command = "python -m forgetting_lab.bench.munkey" + (
        " " + shlex.join(argv if argv is not None else sys.argv[1:])
        if (argv if argv is not None else sys.argv[1:])
        else ""
    )
    steps_per_run = 2 + len(args.fractions) * (len(BASELINES) + 4)
    quality, ablation, timing = [], [], []
    with tqdm(total=len(args.datasets) * len(args.seeds) * steps_per_run, desc="munkey") as bar:
        for name in args.datasets:
            for seed in args.seeds:
                q, a, t = run_one(args, name, seed, bar)
                quality += q
                ablation += a
                timing += t
    for row in quality:
        row["method"] = LABELS[row["method"]]
    for row in ablation:
        row["aggregation"] = row.pop("method")
    fit = []
    for name in args.datasets:
        sel = [t for t in timing if t["dataset"] == name]
        row = {"dataset": name, "seeds": len(sel)}
        for kind in ("fit_s", "fit_cpu_s"):
            v = np.array([t[f"vit_{kind}"] for t in sel])
            m = np.array([t[f"munkey_{kind}"] for t in sel])
            row[f"vit_{kind}"] = float(v.mean())
            row[f"munkey_{kind}"] = float(m.mean())
            row[f"overhead_{kind.removeprefix('fit_')}_pct"] = float(100 * (m.sum() / v.sum() - 1))
        fit.append(row)
    cost = forget_cost(args.memory_sizes)
    key = ("dataset", "fraction", "method")
    tables = {
        "Unlearning quality: mean ± std over seeds": (
            _summarize(quality, key, METRIC_COLS),
            [*key, "seeds", *METRIC_COLS],
        ),
        "Aggregation ablation: MUNKEY after forgetting, P_s on the test images": (
            _summarize(
                ablation,
                ("dataset", "fraction", "aggregation"),
                ("TA", "RA", "FA", "MIA", "avg_gap", "P_s", "A_img", "A_tok"),
            ),
            [
                "dataset",
                "fraction",
                "aggregation",
                "seeds",
                "TA",
                "RA",
                "FA",
                "MIA",
                "avg_gap",
                "P_s",
                "A_img",
                "A_tok",
            ],
        ),
        "Training time: MUNKEY overhead over the plain ViT": (
            fit,
            [
                "dataset",
                "seeds",
                "vit_fit_cpu_s",
                "munkey_fit_cpu_s",
                "overhead_cpu_s_pct",
                "vit_fit_s",
                "munkey_fit_s",
                "overhead_s_pct",
            ],
        ),
        "Key deletion cost: one delete vs memory size": (
            cost,
            ["memory_rows", "deleted", "median_us", "p90_us"],
        ),
        "Per seed": (quality, [*key, "seed", "n_forget", *METRIC_COLS]),
        "Per seed ablation": (
            ablation,
            [
                "dataset",
                "fraction",
                "aggregation",
                "seed",
                "TA",
                "RA",
                "FA",
                "MIA",
                "avg_gap",
                "P_s",
                "A_img",
                "A_tok",
                "A_both",
            ],
        ),
    }
    n_runs = len(args.datasets) * len(args.fractions)
    md = write_results(
        args.out_dir,
        args.name,
        command,
        tables,
        _notes(args, n_runs, time.perf_counter() - wall0, time.process_time() - cpu0),
    )
    if not args.no_plot:
        plot(quality, args.out_dir / f"{args.name}.png", command)
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
