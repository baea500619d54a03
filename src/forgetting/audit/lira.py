"""LiRA: the likelihood-ratio membership-inference attack (Carlini et al., IEEE S&P 2022).

Why this attack: it is the standard yardstick for "does the model leak which rows it was
trained on", strongest exactly where it matters (low false-positive rates), and it needs
nothing but ``fit`` and ``predict_proba`` — so one harness audits QSS, SISA and the retrain
oracle alike, and also audits *forgetting*: after ``forget(R)`` the rows R should look like
rows never seen.

The attack, as in the paper:

1. Shadow models. From a candidate pool of N labeled rows, train S shadow models, each on a
   random half of the pool (in complementary pairs: every row is in exactly S/2), plus optional
   *background* rows that every model gets (they are never audited; they give the models a
   realistic training size without N·S fits' worth of audited rows).
2. Scores. For every model and pool row, φ = log p_y − log(1 − p_y) of the true label y: the
   logit-scaled confidence, roughly Gaussian across models.
3. Per-row Gaussians. φ over the shadows that trained on the row (IN) and those that did not
   (OUT) give N(μ_in, σ_in²) and N(μ_out, σ_out²). The *online* attack scores a target's φ by
   the likelihood ratio log N(φ; in) − log N(φ; out); the *offline* attack (no IN models
   needed at attack time) by the one-sided log Φ((φ − μ_out)/σ_out). ``fix_variance`` uses one
   pooled σ per side, which the paper recommends when shadows are few.
4. Evaluation. Each shadow in turn is the target, attacked with the Gaussians of the other
   shadows (leave out the target and its complementary partner, see
   :func:`balanced_membership`): S·N decisions, labeled by the target's true membership. We report
   ROC AUC (with a bootstrap interval), TPR at 0.1 % and 1 % FPR and the ROC curve.

The unlearning audit (:func:`unlearning_audit`) trains fresh targets on random halves of the
pool, forgets a random subset R of each target's rows and attacks R against the pool rows the
target never saw, with the shadows' Gaussians. An exact unlearner is then *identical* to a
model that never saw R, so R and the unseen rows are exchangeable and the AUC is 0.5 in
expectation; the interval shows how close the data come.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import norm, rankdata

MIN_STD = 1e-4
"""Floor on the fitted standard deviations: a row whose φ is identical in every shadow (a
model that provably ignores it) must not turn rounding noise into infinite evidence."""
PROBA_FLOOR = 1e-12
"""Probabilities are clipped to [1e-12, 1 − 1e-12] before the logit (|φ| ≤ 27.6)."""
FPR_POINTS = (0.001, 0.01)

Factory = Callable[[], Any]


# -- scores ----------------------------------------------------------------------------------
def logit_confidence(proba: np.ndarray, model_classes: Sequence, y: np.ndarray) -> np.ndarray:
    """φ = log p_y − log Σ_{c≠y} p_c for each row (the paper's stable logit scaling).

    ``model_classes`` are the model's ``classes_`` (the columns of ``proba``); a true label
    the model never saw (a shadow whose half missed a rare class) has p_y = 0.
    """
    proba = np.array(proba, dtype=np.float64)
    classes = np.asarray(model_classes)
    bad = ~np.all(np.isfinite(proba), axis=1) | ~(proba.sum(axis=1) > 0)
    if np.any(bad):
        # A model that returns no distribution for a row (NaN, or all zeros) tells the
        # attacker nothing about it: score it as uniform, and say so.
        warnings.warn(
            f"{int(bad.sum())} rows had no valid predicted distribution (NaN or all zero); "
            "scored as uniform",
            RuntimeWarning,
            stacklevel=2,
        )
        proba[bad] = 1.0 / proba.shape[1]
    order = np.argsort(classes)
    pos = np.searchsorted(classes[order], y)
    pos = np.clip(pos, 0, len(classes) - 1)
    col = order[pos]
    known = classes[col] == y
    rows = np.arange(len(y))
    p_true = np.where(known, proba[rows, col], 0.0)
    total = proba.sum(axis=1)
    p_rest = total - p_true
    p_true = np.clip(p_true, PROBA_FLOOR, None)
    p_rest = np.clip(p_rest, PROBA_FLOOR, None)
    return np.log(p_true) - np.log(p_rest)


def _accepts_ids(model: Any) -> bool:
    try:
        return "ids" in inspect.signature(model.fit).parameters
    except (TypeError, ValueError):
        return False


def fit_model(
    factory: Factory,
    X: np.ndarray,
    y: np.ndarray,
    ids: np.ndarray,
) -> Any:
    """``factory()`` fitted on (X, y), with stable row ``ids`` when its ``fit`` takes them.

    Stable ids matter for QSS (D° membership and folds are keyed hashes of the id) and SISA
    (shards): a row keeps its role across shadows, as it would in one deployment.
    """
    model = factory()
    if _accepts_ids(model):
        model.fit(X, y, ids=[int(i) for i in ids])
    else:
        model.fit(X, y)
    return model


def model_phi(model: Any, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return logit_confidence(model.predict_proba(X), model.classes_, y)


# -- shadows ---------------------------------------------------------------------------------
@dataclass
class ShadowSet:
    """φ of every shadow on every pool row (S, N) and who trained on what (S, N)."""

    phi: np.ndarray
    keep: np.ndarray

    @property
    def n_shadow(self) -> int:
        return self.phi.shape[0]


def balanced_membership(n_shadow: int, n_pool: int, rng: np.random.Generator) -> np.ndarray:
    """(S, N) mask in complementary pairs: shadow 2j+1 holds exactly the rows 2j does not.

    Every row is then in exactly S/2 shadows, and leaving a target *and its partner* out
    leaves S/2 − 1 IN and S/2 − 1 OUT shadows for every row. Leaving out the target alone
    (S/2 − 1 on its own side, S/2 on the other) biases the AUC below 0.5 when shadows are
    few: the side with fewer models gets the narrower fitted Gaussian.
    """
    if n_shadow < 4 or n_shadow % 2:
        raise ValueError(f"n_shadow must be an even number ≥ 4, got {n_shadow}")
    half = rng.random((n_shadow // 2, n_pool)) < 0.5
    keep = np.empty((n_shadow, n_pool), dtype=bool)
    keep[0::2] = half
    keep[1::2] = ~half
    return keep


def training_set(
    X: np.ndarray,
    y: np.ndarray,
    keep_row: np.ndarray,
    background: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, ids) of the pool rows in ``keep_row`` plus the background (ids N, N+1, …)."""
    ids = np.flatnonzero(keep_row)
    Xs, ys = X[ids], y[ids]
    if background is not None:
        Xb, yb = background
        Xs = np.concatenate([Xs, Xb])
        ys = np.concatenate([ys, yb])
        ids = np.concatenate([ids, len(X) + np.arange(len(yb))])
    return Xs, ys, ids


def train_shadows(
    factory: Factory,
    X: np.ndarray,
    y: np.ndarray,
    *,
    n_shadow: int = 64,
    seed: int = 0,
    background: tuple[np.ndarray, np.ndarray] | None = None,
    progress: bool = False,
    desc: str = "shadows",
) -> ShadowSet:
    """Train ``n_shadow`` models on balanced random halves of the pool (X, y) (+ background).

    Pool rows have ids 0..N−1, background rows N..; every model scores every pool row.
    """
    X = np.asarray(X)
    y = np.asarray(y)
    keep = balanced_membership(n_shadow, len(y), np.random.default_rng(seed))
    phi = np.empty(keep.shape, dtype=np.float64)
    steps = range(n_shadow)
    if progress:
        from tqdm import tqdm

        steps = tqdm(steps, desc=desc, unit="model", leave=False)
    for s in steps:
        model = fit_model(factory, *training_set(X, y, keep[s], background))
        phi[s] = model_phi(model, X, y)
    return ShadowSet(phi=phi, keep=keep)


# -- the attack ------------------------------------------------------------------------------
@dataclass
class Gaussians:
    """Per-row IN and OUT Gaussians of φ (arrays broadcastable to the scored φ)."""

    mu_in: np.ndarray
    sd_in: np.ndarray
    mu_out: np.ndarray
    sd_out: np.ndarray


def _moments(phi: np.ndarray, mask: np.ndarray, loo: bool):
    """Mean and variance of φ over ``mask`` per row; with ``loo`` one pair per target s: the
    sums minus the terms of s and its complementary partner, shape (S, N)."""
    w = mask.astype(np.float64)
    terms = (w, w * phi, w * phi * phi)
    if loo:
        partner = np.arange(phi.shape[0]) ^ 1
        n, s1, s2 = (t.sum(0) - t - t[partner] for t in terms)
    else:
        n, s1, s2 = (t.sum(0) for t in terms)
    if np.any(n < 1):
        raise ValueError("too few shadows: a row has no IN or no OUT model left")
    mu = s1 / n
    var = np.maximum(s2 / n - mu * mu, 0.0)
    return mu, var


def fit_gaussians(shadows: ShadowSet, fix_variance: bool = False, loo: bool = False) -> Gaussians:
    """IN/OUT Gaussians per row from all shadows, or per target without its pair (``loo``)."""
    phi, keep = shadows.phi, shadows.keep
    mu_in, var_in = _moments(phi, keep, loo)
    mu_out, var_out = _moments(phi, ~keep, loo)
    if fix_variance:
        var_in = np.broadcast_to(var_in.mean(axis=-1, keepdims=True), var_in.shape)
        var_out = np.broadcast_to(var_out.mean(axis=-1, keepdims=True), var_out.shape)
    return Gaussians(
        mu_in=mu_in,
        sd_in=np.maximum(np.sqrt(var_in), MIN_STD),
        mu_out=mu_out,
        sd_out=np.maximum(np.sqrt(var_out), MIN_STD),
    )


def lira_scores(phi: np.ndarray, gaussians: Gaussians, online: bool = True) -> np.ndarray:
    """Membership scores (higher = more likely a member) of observed ``phi``."""
    g = gaussians
    if online:
        return norm.logpdf(phi, g.mu_in, g.sd_in) - norm.logpdf(phi, g.mu_out, g.sd_out)
    return norm.logcdf(phi, g.mu_out, g.sd_out)


# -- metrics ---------------------------------------------------------------------------------
def auc_score(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC by ranks (ties count one half): P(score of a member > score of a non-member)."""
    labels = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("AUC needs members and non-members")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def bootstrap_auc_interval(
    scores: np.ndarray,
    labels: np.ndarray,
    *,
    groups: np.ndarray | None = None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the AUC.

    With ``groups`` (e.g. the pool row of each decision) whole groups are resampled: the
    decisions about one row under several models are not independent, and resampling them
    one by one would make the interval too narrow.
    """
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels, dtype=bool).ravel()
    if groups is None:
        groups = np.arange(scores.size)
    _, group_index = np.unique(np.asarray(groups).ravel(), return_inverse=True)
    n_groups = int(group_index.max()) + 1
    rng = np.random.default_rng(seed)
    aucs = []
    for _ in range(n_boot):
        counts = np.bincount(rng.integers(0, n_groups, n_groups), minlength=n_groups)
        weights = counts[group_index]
        sample_labels = np.repeat(labels, weights)
        if sample_labels.all() or not sample_labels.any():
            continue
        aucs.append(auc_score(np.repeat(scores, weights), sample_labels))
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(np.asarray(aucs), [tail, 1.0 - tail])
    return float(lo), float(hi)


def roc_points(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.metrics import roc_curve

    fpr, tpr, _ = roc_curve(np.asarray(labels, dtype=bool), scores)
    return fpr, tpr


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, target: float) -> float:
    """Largest TPR with FPR ≤ ``target`` (the paper's low-FPR operating points)."""
    ok = fpr <= target
    return float(tpr[ok].max()) if np.any(ok) else 0.0


@dataclass
class AttackResult:
    """Scores, labels and the headline metrics of one attack."""

    scores: np.ndarray
    labels: np.ndarray
    auc: float
    auc_low: float
    auc_high: float
    tpr_at: dict[float, float]
    fpr: np.ndarray = field(repr=False)
    tpr: np.ndarray = field(repr=False)

    @classmethod
    def of(cls, scores, labels, groups=None, n_boot: int = 1000, seed: int = 0) -> AttackResult:
        """Metrics of ``scores`` against true membership ``labels``; ``groups`` names the
        pool row of each decision for the bootstrap (see :func:`bootstrap_auc_interval`)."""
        scores = np.asarray(scores, dtype=np.float64).ravel()
        labels = np.asarray(labels, dtype=bool).ravel()
        fpr, tpr = roc_points(scores, labels)
        lo, hi = bootstrap_auc_interval(scores, labels, groups=groups, n_boot=n_boot, seed=seed)
        return cls(
            scores=scores,
            labels=labels,
            auc=auc_score(scores, labels),
            auc_low=lo,
            auc_high=hi,
            tpr_at={t: tpr_at_fpr(fpr, tpr, t) for t in FPR_POINTS},
            fpr=fpr,
            tpr=tpr,
        )

    def row(self) -> dict[str, Any]:
        return {
            "AUC": round(self.auc, 4),
            "AUC 95% CI": f"[{self.auc_low:.3f}, {self.auc_high:.3f}]",
            "TPR@0.1%FPR": round(self.tpr_at[0.001], 4),
            "TPR@1%FPR": round(self.tpr_at[0.01], 4),
            "decisions": int(self.labels.size),
        }


def evaluate_shadows(
    shadows: ShadowSet,
    *,
    online: bool = True,
    fix_variance: bool = False,
    n_boot: int = 1000,
    seed: int = 0,
) -> AttackResult:
    """LiRA with every shadow as the target in turn, leave-one-out Gaussians (S·N decisions)."""
    gaussians = fit_gaussians(shadows, fix_variance=fix_variance, loo=True)
    scores = lira_scores(shadows.phi, gaussians, online=online)
    rows = np.broadcast_to(np.arange(shadows.phi.shape[1]), shadows.phi.shape)
    return AttackResult.of(scores, shadows.keep, groups=rows, n_boot=n_boot, seed=seed)


@dataclass
class LiRAResult:
    online: AttackResult
    offline: AttackResult
    shadows: ShadowSet


def run_lira(
    factory: Factory,
    X: np.ndarray,
    y: np.ndarray,
    *,
    n_shadow: int = 64,
    seed: int = 0,
    background: tuple[np.ndarray, np.ndarray] | None = None,
    fix_variance: bool = False,
    n_boot: int = 1000,
    progress: bool = False,
    desc: str = "shadows",
) -> LiRAResult:
    """Train shadows on the pool (X, y) and run the online and offline attacks on them."""
    shadows = train_shadows(
        factory,
        X,
        y,
        n_shadow=n_shadow,
        seed=seed,
        background=background,
        progress=progress,
        desc=desc,
    )
    kw = {"fix_variance": fix_variance, "n_boot": n_boot, "seed": seed}
    return LiRAResult(
        online=evaluate_shadows(shadows, online=True, **kw),
        offline=evaluate_shadows(shadows, online=False, **kw),
        shadows=shadows,
    )


# -- the unlearning audit --------------------------------------------------------------------
@dataclass
class UnlearningAudit:
    """LiRA on forgotten rows R vs never-seen rows U, before and after ``forget(R)``."""

    before: AttackResult
    """R (still members) vs U: the attack's power on these very rows."""
    after: AttackResult
    """R (forgotten) vs U: 0.5 in expectation for an exact unlearner."""
    retained: AttackResult
    """Rows kept after the forget vs U, on the same forgetting model (the attack still works)."""
    identical_to_refit: bool | None
    """Whether the forgetting model's predictions on the pool equal a refit without R (or with
    R unlabeled, for label-only forgetting) bit for bit (None: not checked)."""
    refit: str
    n_targets: int
    n_forget: int


def unlearning_audit(
    factory: Factory,
    X: np.ndarray,
    y: np.ndarray,
    shadows: ShadowSet,
    *,
    n_forget: int = 100,
    n_targets: int = 2,
    seed: int = 1,
    background: tuple[np.ndarray, np.ndarray] | None = None,
    fix_variance: bool = False,
    check_refit: bool = True,
    unlabeled: Any = None,
    n_boot: int = 1000,
) -> UnlearningAudit:
    """Fit fresh targets on random halves of the pool, ``forget`` R ⊂ members, attack R vs U.

    The IN/OUT Gaussians come from all shadows (the targets are not among them). Scores of
    every target are pooled; intervals resample pool rows (a row may be R under one target
    and U under another: a group holds both of its decisions). With ``check_refit`` each
    target is also compared with a model fitted without R (``numpy.array_equal`` of
    ``predict_proba``) — or, for label-only forgetting (QSS-L's ``forget``), with a model
    fitted on the same rows with R's labels replaced by ``unlabeled`` (e.g. −1), which is what
    that forget promises to equal.
    """
    X = np.asarray(X)
    y = np.asarray(y)
    gaussians = fit_gaussians(shadows, fix_variance=fix_variance, loo=False)
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("R0", "R1", "K1", "U0", "U1")}
    rows: dict[str, list[np.ndarray]] = {"R": [], "K": [], "U": []}
    identical: list[bool] = []
    for _ in range(n_targets):
        member = rng.random(len(y)) < 0.5
        members = np.flatnonzero(member)
        if n_forget >= len(members):
            raise ValueError(f"n_forget = {n_forget} is not below the {len(members)} members")
        forget = np.sort(rng.choice(members, n_forget, replace=False))
        kept = np.setdiff1d(members, forget)
        unseen = np.flatnonzero(~member)
        rows["R"].append(forget)
        rows["K"].append(kept)
        rows["U"].append(unseen)
        model = fit_model(factory, *training_set(X, y, member, background))
        score = lira_scores(model_phi(model, X, y), gaussians, online=True)
        parts["R0"].append(score[forget])
        parts["U0"].append(score[unseen])
        model.forget([int(i) for i in forget])
        if hasattr(model, "wait_for_rebuilds"):
            model.wait_for_rebuilds()
        proba_after = model.predict_proba(X)
        score = lira_scores(logit_confidence(proba_after, model.classes_, y), gaussians)
        parts["R1"].append(score[forget])
        parts["K1"].append(score[kept])
        parts["U1"].append(score[unseen])
        if check_refit:
            if unlabeled is None:
                keep_rows = member.copy()
                keep_rows[forget] = False
                refit = fit_model(factory, *training_set(X, y, keep_rows, background))
            else:
                y_unlabeled = y.copy()
                y_unlabeled[forget] = unlabeled
                refit = fit_model(factory, *training_set(X, y_unlabeled, member, background))
            identical.append(bool(np.array_equal(proba_after, refit.predict_proba(X))))

    def attack(pos_key: str, neg_key: str) -> AttackResult:
        pos, neg = np.concatenate(parts[pos_key]), np.concatenate(parts[neg_key])
        labels = np.concatenate([np.ones(len(pos), bool), np.zeros(len(neg), bool)])
        groups = np.concatenate([np.concatenate(rows[pos_key[0]]), np.concatenate(rows["U"])])
        return AttackResult.of(
            np.concatenate([pos, neg]), labels, groups=groups, n_boot=n_boot, seed=seed
        )

    return UnlearningAudit(
        before=attack("R0", "U0"),
        after=attack("R1", "U1"),
        retained=attack("K1", "U1"),
        identical_to_refit=all(identical) if check_refit else None,
        refit="R unlabeled" if unlabeled is not None else "without R",
        n_targets=n_targets,
        n_forget=n_forget,
    )


# -- figure ----------------------------------------------------------------------------------
def pyplot() -> Any:
    """pyplot on the Agg backend (no display), imported only when a figure is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Any, command: str) -> None:
    """Write ``fig`` to ``path`` with the command that made it in the footer, then close it."""
    import textwrap
    from pathlib import Path

    fig.tight_layout(rect=(0, 0.06, 1, 1))
    text = "\n".join(textwrap.wrap(f"Command: {command}", 110))
    fig.text(0.01, 0.005, text, fontsize=6, family="monospace", va="bottom", ha="left")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


def roc_figure(curves: dict[str, AttackResult], path: Any, title: str, command: str) -> None:
    """Log-log ROC curves (the paper's presentation: low FPR is where leaks show)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 5.2))
    floor = 1e-4
    for name, res in curves.items():
        ax.plot(
            np.maximum(res.fpr, floor),
            np.maximum(res.tpr, floor),
            label=f"{name} (AUC {res.auc:.3f})",
        )
    grid = np.logspace(math.log10(floor), 0, 50)
    ax.plot(grid, grid, "k--", linewidth=0.8, label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, 1)
    ax.set_ylim(floor, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    save_figure(fig, path, command)
