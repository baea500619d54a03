"""Privacy benchmark: LiRA membership inference, the unlearning audit, accuracy under QSS-DP.

    python -m forgetting_lab.bench.privacy --out benchmarks/results

Why: "forgotten" and "private" are claims; this module attacks them. Three parts, one run:

1. **LiRA** (Carlini et al. 2022, :mod:`forgetting.audit.lira`) on QSS-E, QSS-L, SISA, the
   retrain oracle — and QSS-DP at ``--dp-epsilons`` when ``QSSClassifier(mode="dp")`` exists;
   with ``--models`` also the exact forest and a random forest (:mod:`.privacy_forest`)
   — on Adult and MNIST (HOG features): ROC AUC with a row-clustered bootstrap interval,
   TPR at 0.1 % and 1 % FPR, online and offline, log-log ROC plots.
2. **Unlearning audit**: fresh targets forget R ⊂ their rows; LiRA then attacks R against
   rows never seen (AUC 0.5 in expectation for exact unlearning), next to the same attack
   before the forget and on the rows kept, and a bit-for-bit check against a refit.
3. **Accuracy vs ε** (ε ∈ {0.1, 0.5, 1, 2, 4, 8, ∞}, 3 seeds) of QSS-DP on Adult, MNIST-HOG
   (10 classes) and sentiment (MiniLM), with g alone (α = 0) as the floor; skipped with a note
   when the estimators have no ``mode="dp"``.

Sizes are scaled to a shared 2-core machine (the paper uses 64 shadows and 1,000 audited
points): see ``--help`` and the notes written with the results.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from forgetting_lab.audits.lira import AuditData, audit_model, load_audit_data, result_rows

from .privacy_forest import audit_tree_model, is_tree_model
from .privacy_forest import notes as tree_notes
from .report import write_results

EXPECTED_DURATION = "about 19 min on 2 cores (results/privacy.md)"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

NAME = "privacy"
DEFAULT_LIRA_DATASETS = "adult=1000+2000,mnist=500+1000"
"""NAME=POOL+BACKGROUND: audited rows (each shadow trains on half) and rows every model gets."""
DEFAULT_MODELS = "qss-e,qss-e-ridge,qss-e-tables,qss-l,sisa,retrain,retrain-hgb"
DEFAULT_DP_EPSILONS = "1,8"
DEFAULT_ACC_DATASETS = "adult,mnist=10000,sentiment=6000"
EPSILONS = "0.1,0.5,1,2,4,8,inf"
DELTA = 1e-5
ATTACK_COLUMNS = [
    "dataset",
    "model",
    "attack",
    "AUC",
    "AUC 95% CI",
    "TPR@0.1%FPR",
    "TPR@1%FPR",
    "decisions",
    "test accuracy",
]
AUDIT_COLUMNS = [
    "dataset",
    "model",
    "comparison",
    "AUC",
    "AUC 95% CI",
    "TPR@1%FPR",
    "decisions",
    "identical to refit",
    "refit",
]
ACCURACY_COLUMNS = [
    "dataset",
    "epsilon",
    "accuracy (mean ± std)",
    "g only (α = 0)",
    "sigma",
    "composed epsilon",
    "seeds",
]


def dp_available() -> bool:
    """Whether ``QSSClassifier`` takes ``mode="dp"`` with ``epsilon``/``delta``/``secret_key``."""
    from forgetting import QSSClassifier

    try:
        model = QSSClassifier(mode="dp", epsilon=1.0, delta=DELTA, secret_key="x" * 16)
        model._check_params()
    except (TypeError, ValueError, AttributeError):
        return False
    return True


def parse_lira_datasets(text: str) -> list[tuple[str, int, int]]:
    """``"adult=500+2500,mnist"`` → [("adult", 500, 2500), ("mnist", 500, 1000)]."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, sizes = item.partition("=")
        pool, _, background = (sizes or "500+1000").partition("+")
        out.append((name.strip(), int(pool), int(background or 1000)))
    return out


def parse_sizes(text: str) -> list[tuple[str, int | None]]:
    """``"adult,mnist=10000"`` → [("adult", None), ("mnist", 10000)]."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, n = item.partition("=")
        out.append((name.strip(), int(n) if eq else None))
    return out


def parse_epsilons(text: str) -> list[float]:
    return [math.inf if s.strip() in ("inf", "∞") else float(s) for s in text.split(",") if s]


# -- part 1 + 2 -------------------------------------------------------------------------------
def lira_stage(args: argparse.Namespace, dp: bool, figures: dict[str, str], command: str):
    from forgetting.audit.lira import roc_figure

    attacks: list[dict] = []
    audits: list[dict] = []
    models = [(m, None) for m in args.models.split(",") if m]
    if dp and args.dp_epsilons.strip().lower() not in ("", "none"):
        models += [("qss-dp", e) for e in parse_epsilons(args.dp_epsilons)]
    for name, pool, background in parse_lira_datasets(args.lira_datasets):
        data: AuditData = load_audit_data(name, pool, background, seed=args.seed)
        curves = {}
        # MODEL@DATASET attacks MODEL on that dataset only (e.g. retrain-hgb@adult).
        chosen = [(m.split("@")[0], e) for m, e in models if m.split("@")[-1] in (m, name)]
        for model, epsilon in tqdm(chosen, desc=f"LiRA {name}", unit="model"):
            started = time.perf_counter()
            common = {
                "n_shadow": args.n_shadow,
                "seed": args.seed,
                "n_forget": args.forget,
                "n_targets": args.targets,
                "fix_variance": args.fix_variance,
                "n_boot": args.bootstrap,
            }
            if is_tree_model(model):
                out = audit_tree_model(data, model, **common)
            else:
                out = audit_model(data, model, epsilon=epsilon, delta=DELTA, **common)
            rows, audit_rows = result_rows(data, out)
            seconds = time.perf_counter() - started
            for r in rows + audit_rows:
                r["seconds"] = round(seconds, 1)
            attacks += rows
            audits += audit_rows
            curves[out["label"]] = out["lira"].online
        path = Path(args.out) / f"{args.name}-roc-{name}.png"
        roc_figure(
            curves,
            path,
            f"LiRA (online), {name}: {args.n_shadow} shadows, pool {pool}, "
            f"background {background}, ρ = {data.rho:g}",
            command,
        )
        figures[name] = path.name
    return attacks, audits


# -- part 3 -----------------------------------------------------------------------------------
def accuracy_stage(args: argparse.Namespace) -> list[dict]:
    from forgetting import QSSClassifier

    from .paper import load_data

    rows = []
    epsilons = parse_epsilons(args.epsilons)
    for name, n_train in parse_sizes(args.accuracy_datasets):
        data = load_data(name, n_train)
        results: dict[float, list[float]] = {e: [] for e in epsilons}
        g_only: list[float] = []
        extras: dict[float, list[tuple[float, float]]] = {e: [] for e in epsilons}
        steps = [(s, e) for s in range(args.seeds) for e in [None, *epsilons]]
        for seed, epsilon in tqdm(steps, desc=f"accuracy vs ε, {name}", unit="fit"):
            common = {"rho": data.rho, "random_state": seed}
            if epsilon is None:
                model = QSSClassifier(mode="exact", alpha=0.0, **common)
            elif math.isinf(epsilon):
                model = QSSClassifier(mode="exact", **common)
            else:
                model = QSSClassifier(
                    mode="dp",
                    epsilon=epsilon,
                    delta=DELTA,
                    secret_key=f"accuracy-vs-epsilon-{seed}",
                    **common,
                )
            model.fit(data.X_train, data.y_train)
            acc = float(np.mean(model.predict(data.X_test) == data.y_test))
            if epsilon is None:
                g_only.append(acc)
                continue
            results[epsilon].append(acc)
            report = getattr(model, "privacy_", None)
            if report is not None:
                extras[epsilon].append((report.sigma, report.composed_epsilon))
        for epsilon in epsilons:
            accs = np.asarray(results[epsilon])
            ext = extras[epsilon]
            rows.append(
                {
                    "dataset": name,
                    "epsilon": "∞ (QSS-E)" if math.isinf(epsilon) else f"{epsilon:g}",
                    "eps": epsilon,
                    "accuracy": float(accs.mean()),
                    "std": float(accs.std()),
                    "accuracy (mean ± std)": f"{accs.mean():.4f} ± {accs.std():.4f}",
                    "g only (α = 0)": f"{np.mean(g_only):.4f} ± {np.std(g_only):.4f}",
                    "g_only": float(np.mean(g_only)),
                    "sigma": f"{np.mean([s for s, _ in ext]):.4g}" if ext else "–",
                    "composed epsilon": f"{np.mean([c for _, c in ext]):.4g}" if ext else "–",
                    "seeds": len(accs),
                    "n_train": data.n_train,
                    "rho": data.rho,
                }
            )
    return rows


def leakage_figure(attacks: list[dict], path: Path, command: str) -> None:
    """LiRA AUC (online, with its bootstrap interval) against test accuracy, one panel per
    dataset: what each model leaks for what it gets right."""
    from forgetting.audit.lira import pyplot, save_figure

    plt = pyplot()
    rows = [r for r in attacks if r["attack"] == "online"]
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(5.2 * len(names), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for r in (r for r in rows if r["dataset"] == name):
            low, high = (float(v) for v in r["AUC 95% CI"].strip("[]").split(","))
            ax.errorbar(
                r["test accuracy"], r["AUC"], yerr=[[r["AUC"] - low], [high - r["AUC"]]],
                marker="o", capsize=3, label=r["model"],
            )  # fmt: skip
        ax.axhline(0.5, color="grey", linestyle=":", linewidth=0.9)
        ax.set_xlabel("test accuracy")
        ax.set_ylabel("LiRA AUC, online (95 % CI)")
        ax.set_title(f"{name}: membership leakage against accuracy", fontsize=10)
        ax.legend(fontsize=7)
    save_figure(fig, path, command)


def accuracy_figure(rows: list[dict], path: Path, command: str) -> None:
    from forgetting.audit.lira import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.4))
    finite = sorted({r["eps"] for r in rows if not math.isinf(r["eps"])})
    inf_x = max(finite) * 4 if finite else 1.0
    for name in dict.fromkeys(r["dataset"] for r in rows):
        rs = sorted((r for r in rows if r["dataset"] == name), key=lambda r: r["eps"])
        x = [inf_x if math.isinf(r["eps"]) else r["eps"] for r in rs]
        line = ax.errorbar(
            x, [r["accuracy"] for r in rs], yerr=[r["std"] for r in rs], marker="o", label=name
        )
        ax.axhline(rs[0]["g_only"], color=line[0].get_color(), linestyle=":", linewidth=0.9)
    ax.set_xscale("log")
    ticks = [*finite, inf_x]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in finite] + ["∞"])
    ax.set_xlabel("ε (δ = 1e-5); ∞ = QSS-E without noise")
    ax.set_ylabel("test accuracy (mean ± std over seeds)")
    ax.set_title("QSS-DP accuracy vs ε (dotted: g alone, α = 0)", fontsize=10)
    ax.legend(fontsize=8)
    save_figure(fig, path, command)


# -- notes and main ---------------------------------------------------------------------------
def notes(args: argparse.Namespace, dp: bool, figures: dict[str, str], seconds: float) -> str:
    lines = ["## Notes", "", f"Wall time: {seconds / 60:.1f} min.", ""]
    if not args.skip_lira:
        lines += [
            "**Scaled down** to fit a shared 2-core machine (~20 min): "
            f"{args.n_shadow} shadow models (the paper: 64), audited pools of "
            f"{args.lira_datasets} rows as POOL+BACKGROUND (the paper: 1,000 audit points). "
            "Every model trains on a random half of the pool plus all background rows; only "
            "pool rows are attacked. With few shadows the per-row Gaussians are noisy, which "
            "weakens the attack (TPR at 0.1 % FPR is resolved only to 1/(shadows·pool/2)). Each "
            "shadow is the target once, attacked with the Gaussians of the others minus its "
            "complementary partner (balanced IN/OUT counts). AUC intervals are 95 % bootstrap "
            "intervals that resample pool rows (all decisions about a row move together). "
            "'test accuracy' is one model trained like a shadow (half the pool + background).",
            "",
            "**Unlearning audit**: "
            f"{args.targets} fresh targets per model, each trained on a random half of the pool "
            f"(+ background), forget {args.forget} random members R; LiRA (online, Gaussians "
            "from the shadows) scores R against the pool rows the target never saw. 'identical "
            "to refit' compares predict_proba on the pool with a model fitted without R "
            "(numpy.array_equal) — for QSS-L, whose forget removes labels only, with a model "
            "fitted with R's labels removed (y = −1), which is what that forget promises.",
            "",
            "QSS models use rebuild='sync' (a forget is complete when it returns) and ρ from "
            "the paper benchmark's rule on the training size. QSS-DP: δ = 1e-5, a fixed audit "
            "secret key per seed. SISA: 5 shards of logistic regression; retrain: one logistic "
            "regression (the oracle).",
            "",
        ]
        if any(is_tree_model(m.split("@")[0]) for m in args.models.split(",")):
            lines += [tree_notes(), ""]
    if not args.skip_accuracy and dp:
        lines += [
            "**Accuracy vs ε**: "
            f"{args.seeds} seeds (random_state: moves D°, the folds and the noise key), "
            f"training sets {args.accuracy_datasets} (NAME=N subsamples the fixed train split; "
            "full test splits), ρ from the paper benchmark's rule, δ = 1e-5, default "
            "n_instances = 3. ε = ∞ is QSS-E (mode='exact', no noise); 'g only' is QSS-E with "
            "α = 0 (the base model alone, the floor a well-chosen α never goes below). 'sigma' "
            "is the noise standard deviation per cell in residual units and 'composed epsilon' "
            "the accountant's ε after fit (p releases), both as reported by model.privacy_.",
            "",
        ]
    lines += [
        "BLAS is limited to one thread per fit (threadpoolctl) unless --all-threads: "
        "oversubscribed BLAS threads made logistic-regression fits ~20× slower here.",
        "",
    ]
    if not dp:
        lines += [
            "**QSS-DP not measured**: this checkout's QSSClassifier has no mode='dp' yet, so the "
            "QSS-DP LiRA rows and the accuracy-vs-ε part were skipped.",
            "",
        ]
    for name, fig in figures.items():
        lines += [f"![{name}]({fig})", ""]
    return "\n".join(lines)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--lira-datasets",
        default=DEFAULT_LIRA_DATASETS,
        help="NAME=POOL+BACKGROUND list for LiRA (default %(default)s)",
    )
    parser.add_argument(
        "--models",
        default=DEFAULT_MODELS,
        help="models to attack (default %(default)s); also forest, forest-leafN (the exact "
        "forest at its defaults / with min_samples_leaf=N) and retrain-rf (a random forest); "
        "MODEL@DATASET attacks MODEL on that dataset only",
    )
    parser.add_argument(
        "--dp-epsilons",
        default=DEFAULT_DP_EPSILONS,
        help="ε values of QSS-DP to attack, if mode='dp' exists; 'none' attacks no QSS-DP "
        "(default %(default)s)",
    )
    parser.add_argument("--n-shadow", type=int, default=32, help="shadow models (default 32)")
    parser.add_argument(
        "--forget", type=int, default=100, help="rows each audit target forgets (default 100)"
    )
    parser.add_argument("--targets", type=int, default=2, help="audit targets (default 2)")
    parser.add_argument(
        "--fix-variance", action="store_true", help="pooled σ per side in the LiRA Gaussians"
    )
    parser.add_argument(
        "--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)"
    )
    parser.add_argument(
        "--accuracy-datasets",
        default=DEFAULT_ACC_DATASETS,
        help="NAME[=N_TRAIN] list for accuracy vs ε (default %(default)s)",
    )
    parser.add_argument(
        "--epsilons", default=EPSILONS, help="ε grid, 'inf' = QSS-E (default %(default)s)"
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds for accuracy vs ε (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the LiRA part")
    parser.add_argument("--skip-lira", action="store_true", help="skip parts 1 and 2")
    parser.add_argument("--skip-accuracy", action="store_true", help="skip part 3")
    parser.add_argument(
        "--out", default="benchmarks/results", help="output folder (default %(default)s)"
    )
    parser.add_argument(
        "--name",
        default=NAME,
        help="base name of the result files (default %(default)s; e.g. privacy-dp for a "
        "QSS-DP-only run next to the main one)",
    )
    parser.add_argument(
        "--all-threads",
        dest="threads_one",
        action="store_false",
        help="let BLAS use all threads (default: one per fit, see the notes)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny smoke run: digits only, 4 shadows, 1 seed (for tests)",
    )
    return parser


PROG = "python -m forgetting_lab.bench.privacy"


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.quick:
        args.lira_datasets, args.models = "digits=80+300", "qss-e,retrain"
        args.n_shadow, args.forget, args.targets, args.bootstrap = 4, 10, 1, 50
        args.accuracy_datasets, args.epsilons, args.seeds = "digits", "1,inf", 1
        args.dp_epsilons = "1"
    command = " ".join([prog, *(argv if argv is not None else sys.argv[1:])])
    started = time.perf_counter()
    dp = dp_available()
    figures: dict[str, str] = {}
    tables: dict[str, tuple[list[dict], list[str]]] = {}
    out_dir = Path(args.out)

    def checkpoint() -> Path:
        return write_results(
            out_dir,
            args.name,
            command,
            tables,
            notes(args, dp, figures, time.perf_counter() - started),
        )

    # One BLAS thread per fit: on a shared 2-core machine oversubscribed BLAS threads made
    # logistic-regression fits several times slower; every model gets the same limit.
    limits = threadpool_limits(limits=1) if args.threads_one else None
    if not args.skip_lira:
        attacks, audits = lira_stage(args, dp, figures, command)
        path = out_dir / f"{args.name}-auc-vs-accuracy.png"
        leakage_figure(attacks, path, command)
        figures["AUC vs accuracy"] = path.name
        tables["LiRA membership inference"] = (attacks, ATTACK_COLUMNS + ["seconds"])
        tables["Unlearning audit: forgotten rows vs rows never seen"] = (audits, AUDIT_COLUMNS)
        checkpoint()
    if not args.skip_accuracy and dp:
        rows = accuracy_stage(args)
        tables["Accuracy vs epsilon"] = (rows, ACCURACY_COLUMNS)
        path = out_dir / f"{args.name}-accuracy-vs-epsilon.png"
        accuracy_figure(rows, path, command)
        figures["accuracy vs ε"] = path.name
    md = checkpoint()
    if limits is not None:
        limits.unregister()
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
