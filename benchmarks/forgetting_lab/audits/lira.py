"""``forgetting audit lira``: membership inference (LiRA) and the unlearning audit from the CLI.

    forgetting audit lira --dataset adult --model qss-e --n-shadow 64 --pool 1000

Trains ``--n-shadow`` models of the chosen kind on random halves of a pool of training rows
(plus ``--background`` rows every model gets), runs the online and offline attacks of
:mod:`forgetting.audit.lira`, and — for models that can forget — the unlearning audit: fresh
targets forget ``--forget`` of their rows, which are then attacked against rows never seen.
Prints one table; ``--plot`` writes the ROC curves, ``--json`` the figures.

The model factories and data preparation here are shared with ``python -m
forgetting_lab.bench.privacy``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MODELS = (
    "qss-e", "qss-e-ridge", "qss-e-tables", "qss-l", "qss-dp", "sisa", "retrain", "retrain-hgb",
)  # fmt: skip
"""qss-e: the shipped default; qss-e-ridge / qss-e-tables: exact mode with the other head
("shared-ridge") or none (tables only); retrain: one logistic regression (g's family);
retrain-hgb: one HistGradientBoostingClassifier, the model a user would otherwise deploy."""
_HEADS = {"qss-e-ridge": "shared-ridge", "qss-e-tables": "none"}
SISA_SHARDS = 5
DP_SECRET_PREFIX = "lira-audit-secret-"
"""QSS-DP needs a secret key; the audit uses a fixed per-seed one (the attacker never sees
it, which is all the guarantee needs) so that runs are reproducible."""


@dataclass
class AuditData:
    """A pool of audited rows, background rows every model trains on, and a test split."""

    name: str
    features: str
    X_pool: np.ndarray
    y_pool: np.ndarray
    X_background: np.ndarray
    y_background: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    rho: float

    @property
    def background(self) -> tuple[np.ndarray, np.ndarray]:
        return self.X_background, self.y_background

    @property
    def n_classes(self) -> int:
        return int(np.unique(np.concatenate([self.y_pool, self.y_background])).size)


def load_audit_data(
    name: str, pool: int, background: int, seed: int = 0, rho: float | None = None
) -> AuditData:
    """``pool + background`` training rows of ``name`` (features as in the paper benchmark:
    HOG for MNIST/Fashion-MNIST, MiniLM for sentiment), split at random with ``seed``.

    ρ (unless given) follows the paper benchmark's rule on the training size a model sees:
    pool/2 + background rows.
    """
    from forgetting_lab.bench.paper import load_data, resolve_rho

    if pool < 20 or background < 0:
        raise ValueError("need pool ≥ 20 and background ≥ 0 rows")
    data = load_data(name, pool + background)
    if data.task != "classification":
        raise ValueError(f"LiRA here audits classifiers; {name} is a {data.task} set")
    if len(data.y_train) < pool + background:
        raise ValueError(f"{name} has only {len(data.y_train)} training rows")
    order = np.random.default_rng(seed).permutation(len(data.y_train))
    p, b = order[:pool], order[pool : pool + background]
    if rho is None:
        rho, _ = resolve_rho(pool // 2 + background, data.n_classes)
    return AuditData(
        name=name,
        features=data.features,
        X_pool=data.X_train[p],
        y_pool=data.y_train[p],
        X_background=data.X_train[b],
        y_background=data.y_train[b],
        X_test=data.X_test,
        y_test=data.y_test,
        rho=float(rho),
    )


def make_factory(
    model: str,
    *,
    rho: float,
    seed: int = 0,
    epsilon: float | None = None,
    delta: float = 1e-5,
):
    """A zero-argument factory of fresh, unfitted estimators of kind ``model``.

    QSS models are synchronous (``rebuild="sync"``) so that a forget is complete when it
    returns; SISA uses 5 shards of logistic regression (g's family), the oracle one.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    if model.startswith("qss-"):
        from forgetting import QSSClassifier

        mode = {"qss-l": "label", "qss-dp": "dp"}.get(model, "exact")
        params: dict[str, Any] = {"mode": mode, "rho": rho, "random_state": seed}
        if model in _HEADS:
            params["head"] = _HEADS[model]
        params["rebuild"] = "sync"
        if model == "qss-dp":
            if epsilon is None:
                raise ValueError("qss-dp needs --epsilon")
            params.update(epsilon=epsilon, delta=delta, secret_key=f"{DP_SECRET_PREFIX}{seed}")
            try:
                QSSClassifier(**params)
            except TypeError as err:
                raise ValueError(
                    "this version of QSSClassifier has no mode='dp' (epsilon/delta)"
                ) from err
        return lambda: QSSClassifier(**params)
    from forgetting_lab.baselines import RetrainClassifier, SISAClassifier

    if model == "sisa":
        return lambda: SISAClassifier(n_shards=SISA_SHARDS, random_state=seed)
    if model == "retrain-hgb":
        from sklearn.ensemble import HistGradientBoostingClassifier

        return lambda: RetrainClassifier(
            estimator=HistGradientBoostingClassifier(random_state=seed), random_state=seed
        )
    return lambda: RetrainClassifier(random_state=seed)


def audit_model(
    data: AuditData,
    model: str,
    *,
    n_shadow: int,
    seed: int = 0,
    epsilon: float | None = None,
    delta: float = 1e-5,
    n_forget: int = 100,
    n_targets: int = 2,
    fix_variance: bool = False,
    n_boot: int = 1000,
    progress: bool = True,
) -> dict[str, Any]:
    """LiRA (online + offline) and, if ``n_forget`` > 0, the unlearning audit of one model.

    QSS-L's ``forget`` removes labels only, so its refit check compares with a fit in which
    R's labels are −1 (unlabeled), the model that forget promises to equal.

    Returns the attack results and test accuracy of a model trained on the whole pool half
    of the first shadow (a representative fit).
    """
    factory = make_factory(model, rho=data.rho, seed=seed, epsilon=epsilon, delta=delta)
    label = model if model != "qss-dp" else f"qss-dp ε={epsilon:g}"
    return audit_factory(
        data,
        factory,
        label,
        n_shadow=n_shadow,
        seed=seed,
        n_forget=n_forget,
        n_targets=n_targets,
        fix_variance=fix_variance,
        n_boot=n_boot,
        progress=progress,
        unlabeled=-1 if model == "qss-l" else None,
    )


def audit_factory(
    data: AuditData,
    factory: Callable[[], Any],
    label: str,
    *,
    n_shadow: int,
    seed: int,
    n_forget: int,
    n_targets: int,
    fix_variance: bool,
    n_boot: int,
    progress: bool,
    unlabeled: int | None = None,
) -> dict[str, Any]:
    """LiRA and the unlearning audit of the models ``factory`` makes (the body of
    :func:`audit_model`, shared with the tree models of ``bench/privacy_forest.py``);
    ``unlabeled`` is the label a refit gives forgotten rows (QSS-L's −1), else None."""
    from forgetting.audit.lira import fit_model, run_lira, training_set, unlearning_audit

    result = run_lira(
        factory,
        data.X_pool,
        data.y_pool,
        n_shadow=n_shadow,
        seed=seed,
        background=data.background,
        fix_variance=fix_variance,
        n_boot=n_boot,
        progress=progress,
        desc=f"{data.name} {label} shadows",
    )
    member = result.shadows.keep[0]
    fitted = fit_model(factory, *training_set(data.X_pool, data.y_pool, member, data.background))
    accuracy = float(np.mean(fitted.predict(data.X_test) == data.y_test))
    out: dict[str, Any] = {"label": label, "lira": result, "accuracy": accuracy, "audit": None}
    if n_forget > 0:
        out["audit"] = unlearning_audit(
            factory,
            data.X_pool,
            data.y_pool,
            result.shadows,
            n_forget=n_forget,
            n_targets=n_targets,
            seed=seed + 1,
            background=data.background,
            fix_variance=fix_variance,
            unlabeled=unlabeled,
            n_boot=n_boot,
        )
    return out


def result_rows(data: AuditData, out: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """Table rows: one per attack (online/offline), one per unlearning-audit comparison."""
    base = {"dataset": data.name, "model": out["label"], "test accuracy": round(out["accuracy"], 4)}
    lira = out["lira"]
    attacks = [
        {**base, "attack": "online", **lira.online.row()},
        {**base, "attack": "offline", **lira.offline.row()},
    ]
    audits = []
    audit = out["audit"]
    if audit is not None:
        for what, res in (
            ("R before forget vs unseen", audit.before),
            ("R after forget vs unseen", audit.after),
            ("kept rows vs unseen (same model)", audit.retained),
        ):
            audits.append(
                {
                    "dataset": data.name,
                    "model": out["label"],
                    "comparison": what,
                    **res.row(),
                    "identical to refit": audit.identical_to_refit,
                    "refit": audit.refit,
                }
            )
    return attacks, audits


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of ``forgetting audit lira``."""
    parser.add_argument("--dataset", default="adult", help="dataset name (default adult)")
    parser.add_argument(
        "--model", choices=MODELS, default="qss-e", help="model family to attack (default qss-e)"
    )
    parser.add_argument(
        "--epsilon", type=float, default=None, help="ε of qss-dp (required for --model qss-dp)"
    )
    parser.add_argument("--delta", type=float, default=1e-5, help="δ of qss-dp (default 1e-5)")
    parser.add_argument(
        "--n-shadow", type=int, default=64, help="shadow models, even, ≥ 4 (default 64)"
    )
    parser.add_argument(
        "--pool", type=int, default=1000, help="audited rows; each shadow trains on half"
    )
    parser.add_argument(
        "--background",
        type=int,
        default=4000,
        help="rows every model also trains on (never audited; default 4000)",
    )
    parser.add_argument(
        "--forget",
        type=int,
        default=100,
        help="rows each unlearning-audit target forgets (0 skips the audit; default 100)",
    )
    parser.add_argument(
        "--targets", type=int, default=2, help="unlearning-audit target models (default 2)"
    )
    parser.add_argument(
        "--fix-variance",
        action="store_true",
        help="one pooled σ per side instead of per-row σ (better with few shadows)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of splits and models")
    parser.add_argument(
        "--rho", type=float, default=None, help="QSS schema fraction (default: by training size)"
    )
    parser.add_argument(
        "--bootstrap", type=int, default=1000, help="bootstrap resamples of the AUC interval"
    )
    parser.add_argument("--plot", type=Path, default=None, help="write the ROC curves (PNG)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces ``args`` (for figure footers)."""
    parts = ["forgetting audit lira"]
    for name, value in sorted(vars(args).items()):
        if name in ("plot", "json", "quiet", "func", "command", "audit") or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif value is not False:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    """Run the audit described by ``args``; prints the table, returns the exit status."""
    from forgetting_lab.bench.report import markdown_table

    try:
        data = load_audit_data(args.dataset, args.pool, args.background, args.seed, args.rho)
        out = audit_model(
            data,
            args.model,
            n_shadow=args.n_shadow,
            seed=args.seed,
            epsilon=args.epsilon,
            delta=args.delta,
            n_forget=args.forget,
            n_targets=args.targets,
            fix_variance=args.fix_variance,
            n_boot=args.bootstrap,
            progress=not args.quiet,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    attacks, audits = result_rows(data, out)
    print(
        f"LiRA on {data.name} ({data.features}), {args.n_shadow} shadows, pool {args.pool}, "
        f"background {args.background}, ρ = {data.rho:g}"
    )
    cols = ["dataset", "model", "attack", "AUC", "AUC 95% CI", "TPR@0.1%FPR", "TPR@1%FPR"]
    print(markdown_table(attacks, cols + ["test accuracy"]))
    if audits:
        print()
        cols = ["comparison", "AUC", "AUC 95% CI", "identical to refit", "refit"]
        print(markdown_table(audits, cols))
    if args.plot is not None:
        from forgetting.audit.lira import roc_figure

        lira = out["lira"]
        roc_figure(
            {f"{out['label']} online": lira.online, f"{out['label']} offline": lira.offline},
            args.plot,
            f"LiRA, {data.name}",
            command_line(args),
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"attacks": attacks, "unlearning": audits}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m forgetting_lab.audits.lira``)."""
    parser = argparse.ArgumentParser(prog="forgetting audit lira", description=__doc__)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
