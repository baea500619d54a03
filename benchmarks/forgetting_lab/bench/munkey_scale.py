"""MUNKEY at full scale: every gap against a retrain-vs-retrain noise floor, with intervals.

The quick benchmark (:mod:`.munkey`) trains on 1,000 images, where a retrained oracle differs
from another seed's oracle by about as much as any method differs from either. This one trains
on the full training split, so a gap can be told from noise:

* **Splits** (seeded, fixed): the 60,000 training images are split into a *key split*
  (``--n-key``, default 5,000) and a *model split* (the other 55,000). MUNKEY's frozen key
  encoder is a plain ViT trained on the key split only; MUNKEY, the plain ViT, every baseline
  and every oracle train on the model split. The forget sets are nested random subsets of the
  model split (10 % ⊃ 2 %); RA is scored on ``--n-retain-eval`` model-split rows outside every
  forget set, TA on the full 10,000-image test split.
* **Oracles**: ``--oracle-seeds`` retrains per fraction for each family — a plain ViT on the
  retain set (the baselines' oracle) and a MUNKEY model refitted on it (MUNKEY's). The *noise
  floor* of a family is the mean Avg Gap between two of its oracles (seeds i ≠ j): what a
  perfect unlearner, itself one more retrain, would score.
* **Intervals**: 95 % percentile bootstrap that resamples both sources of noise at once — the
  oracle seeds and the evaluation rows (forget, retain and test rows, each within its split).
  The *excess* gap is gap − floor in the same replicate; its interval excluding 0 says the
  method is distinguishable from retraining.
* QSS-E and QSS-L (shipped defaults) on the key encoder's features of the same images, each
  against its refit without the rows (exact: gap 0 by construction, measured here).

Work is cut into jobs (one trained model each) whose outputs — predicted class and true-class
probability per evaluation row, timings — go to ``--work-dir`` as they finish; a rerun skips
finished jobs, so the run can be stopped and resumed across days, and ``--report-only`` writes
the tables from what is there (saying what is missing). ``--jobs`` processes train in parallel,
one torch thread each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from .jobs import run_jobs, selected, shown_command

EXPECTED_DURATION = (
    "about 2 h of 2 cores per dataset at the defaults (resumable; --report-only is seconds)"
)
"""How long a run at the defaults takes (`forgetting bench` lists it)."""

DEFAULT_OUT = Path("benchmarks/results")
DEFAULT_WORK = Path.home() / ".cache" / "forgetting-lab" / "munkey-scale"
BASELINES = ("neggrad_plus", "amnesiac", "scrub", "ssd")
PUBLISHED = {"scrub": {"epochs": 5, "max_epochs": 3}}
"""Where this benchmark departs from the lab's short-schedule defaults to run a baseline as its
paper's large-scale setting does (SCRUB: 5 epochs, max-steps in the first 3; its lr, α, γ and T
are the lab's defaults already). A finished job records these; one run with others is redone."""
LABELS = {
    "vit-original": "Original ViT (no unlearning)",
    "neggrad_plus": "NegGrad+",
    "amnesiac": "Amnesiac",
    "scrub": "SCRUB",
    "ssd": "SSD",
    "munkey-original": "MUNKEY before forget",
    "munkey-forget": "MUNKEY (key deletion)",
    "qss-exact": "QSS-E",
    "qss-label": "QSS-L",
}
SCORES = ("TA", "RA", "FA", "MIA")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m forgetting_lab.bench.munkey_scale",
        description="MUNKEY vs approximate baselines and QSS on the full MNIST / Fashion-MNIST, "
        "every Avg Gap against the oracle-vs-oracle noise floor (resumable).",
    )
    p.add_argument("--datasets", nargs="+", default=["fashion_mnist", "mnist"])
    p.add_argument("--fractions", nargs="+", type=float, default=[0.10, 0.02])
    p.add_argument("--oracle-seeds", type=int, default=5, help="retrains per fraction and family")
    p.add_argument("--n-key", type=int, default=5000, help="training images of the key encoder")
    p.add_argument("--n-retain-eval", type=int, default=5000, help="retain rows scored for RA")
    p.add_argument("--epochs", type=int, default=20, help="epochs of every ViT and MUNKEY fit")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--patch", type=int, default=7)
    p.add_argument("--stem", default="conv", choices=["patch", "conv"])
    p.add_argument(
        "--hflip",
        nargs="*",
        default=["fashion_mnist"],
        help="datasets whose training images are mirrored at random (not digits)",
    )
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates")
    p.add_argument("--jobs", type=int, default=2, help="parallel training processes")
    p.add_argument(
        "--only",
        nargs="+",
        metavar="JOB",
        help="train only these jobs and the ones they need (e.g. vit-original: the plain ViT's "
        "accuracy before hours of oracles); the report lists the rest as unfinished",
    )
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK, help="finished jobs go here")
    p.add_argument("--report-only", action="store_true", help="write tables from finished jobs")
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="where results go")
    p.add_argument("--name", default="munkey-scale", help="file name stem of the results")
    return p


@dataclass(frozen=True)
class Setup:
    """What every job of one run shares; its hash names the work folder (a changed setting
    never reuses another setting's models)."""

    fractions: tuple[float, ...]
    oracle_seeds: int
    n_key: int
    n_retain_eval: int
    epochs: int
    width: int
    depth: int
    patch: int
    stem: str
    hflip: tuple[str, ...]
    batch_size: int
    lr: float

    @classmethod
    def from_args(cls, args) -> Setup:
        return cls(
            tuple(sorted(args.fractions, reverse=True)),
            args.oracle_seeds,
            args.n_key,
            args.n_retain_eval,
            args.epochs,
            args.width,
            args.depth,
            args.patch,
            args.stem,
            tuple(sorted(args.hflip)),
            args.batch_size,
            args.lr,
        )

    @property
    def tag(self) -> str:
        text = json.dumps(self.__dict__, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


# -- data ---------------------------------------------------------------------------------


@dataclass
class Data:
    """One dataset cut into the key split, the model split and its evaluation rows."""

    name: str
    X_key: np.ndarray
    y_key: np.ndarray
    X: np.ndarray  # model split (n, H, W)
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    forget: dict[float, np.ndarray]  # model-split positions, nested
    retain_eval: np.ndarray  # model-split positions outside every forget set
    eval_rows: np.ndarray  # sorted union of the largest forget set and retain_eval
    n_classes: int

    def ids(self, rows: np.ndarray) -> list[str]:
        return [f"{self.name}-{i}" for i in rows]

    def retain(self, fraction: float) -> np.ndarray:
        keep = np.ones(len(self.y), dtype=bool)
        keep[self.forget[fraction]] = False
        return np.flatnonzero(keep)


def load(name: str, setup: Setup) -> Data:
    """The splits of ``name`` (seeds 0 and 1: the same on every machine)."""
    from forgetting_lab.datasets import load_dataset

    ds = load_dataset(name)
    side = int(round(np.sqrt(ds.X_train.shape[1])))
    images = ds.X_train.reshape(-1, side, side).astype(np.float32)
    test = ds.X_test.reshape(-1, side, side).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(images))
    key_rows, model_rows = np.sort(order[: setup.n_key]), np.sort(order[setup.n_key :])
    n = len(model_rows)
    q = np.random.default_rng(1).permutation(n)
    sizes = {f: max(1, int(round(f * n))) for f in setup.fractions}
    largest = max(sizes.values())
    forget = {f: np.sort(q[:k]) for f, k in sizes.items()}
    retain_eval = np.sort(q[largest : largest + setup.n_retain_eval])
    return Data(
        name,
        images[key_rows],
        ds.y_train[key_rows],
        images[model_rows],
        ds.y_train[model_rows],
        test,
        ds.y_test,
        forget,
        retain_eval,
        np.union1d(q[:largest], retain_eval),
        ds.n_classes,
    )


# -- jobs ---------------------------------------------------------------------------------


def _vit_config(setup: Setup, data: Data):
    from forgetting.munkey import ViTConfig

    return ViTConfig(
        image_size=data.X.shape[1],
        patch=setup.patch,
        width=setup.width,
        depth=setup.depth,
        heads=4,
        n_classes=data.n_classes,
        stem=setup.stem,
    )


def _train_config(setup: Setup, data: Data, seed: int, epochs: int | None = None):
    from forgetting_lab.baselines.approximate import TrainConfig

    return TrainConfig(
        epochs=setup.epochs if epochs is None else epochs,
        batch_size=setup.batch_size,
        lr=setup.lr,
        seed=seed,
        n_threads=1,
        hflip=data.name in setup.hflip,
    )


def _munkey(setup: Setup, data: Data, seed: int, encoder):
    from forgetting.munkey import MUNKEYClassifier

    return MUNKEYClassifier(
        width=setup.width,
        depth=setup.depth,
        patch=setup.patch,
        stem=setup.stem,
        epochs=setup.epochs,
        batch_size=setup.batch_size,
        lr=setup.lr,
        encoder=encoder,
        hflip=data.name in setup.hflip,
        random_state=seed,
        n_threads=1,
    )


def _save_net(net, path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))


def _load_vit(setup: Setup, data: Data, path: Path, seed: int):
    """A plain ViTClassifier around weights saved by :func:`_save_net` (no pickle)."""
    from safetensors.torch import load_file

    from forgetting.munkey import TinyViT
    from forgetting_lab.baselines.approximate import ViTClassifier

    model = ViTClassifier(
        _vit_config(setup, data), _train_config(setup, data, seed), data.n_classes
    )
    net = TinyViT(model.vit)
    net.load_state_dict(load_file(str(path)))
    net.eval()
    model.net_ = net
    return model


def _key_encoder(setup: Setup, data: Data, folder: Path):
    from forgetting_lab.baselines.approximate import FrozenViTEncoder

    return FrozenViTEncoder(_load_vit(setup, data, folder / "keys.safetensors", seed=100))


def _write(folder: Path, job: str, data: Data, proba_eval, proba_test, meta: dict) -> None:
    """What scoring needs of a model's class probabilities on the evaluation rows and the test
    split: the predicted class and the true class's probability per row (6 bytes a row, so a
    finished run is small enough to keep beside its results); ``job.json`` last (a job counts
    as finished only once its JSON exists)."""
    out = {}
    for split, proba, y in (
        ("eval", proba_eval, data.y[data.eval_rows]),
        ("test", proba_test, data.y_test),
    ):
        proba = np.asarray(proba, np.float32)
        out[f"pred_{split}"] = proba.argmax(1).astype(np.int16)
        out[f"true_p_{split}"] = proba[np.arange(len(y)), y]
    tmp = folder / f"{job}.tmp.npz"
    np.savez(tmp, **out)
    os.replace(tmp, folder / f"{job}.npz")
    (folder / f"{job}.json.tmp").write_text(json.dumps(meta, indent=1))
    os.replace(folder / f"{job}.json.tmp", folder / f"{job}.json")


def _write_model(folder: Path, job: str, data: Data, predict_proba, meta: dict) -> None:
    """:func:`_write` for an image model: predicts the evaluation rows and the test split."""
    _write(
        folder, job, data, predict_proba(data.X[data.eval_rows]), predict_proba(data.X_test), meta
    )


def run_job(name: str, setup: Setup, folder: Path, job: str) -> str:
    """Train (or unlearn) what ``job`` names and write its outputs; returns ``job``."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import copy

    from forgetting_lab.baselines.approximate import ViTClassifier, unlearn

    data = load(name, setup)
    cfg = _vit_config(setup, data)
    kind, *rest = job.split("@")
    if kind == "keys":
        vit = ViTClassifier(cfg, _train_config(setup, data, 100), data.n_classes).fit(
            data.X_key, data.y_key
        )
        _save_net(vit.net_, folder / "keys.safetensors")
        feats = {"model": vit.features(data.X), "test": vit.features(data.X_test)}
        np.savez(folder / "keys-features.npz", **feats)
        meta = {
            "fit_cpu_s": vit.fit_cpu_seconds_,
            "test_accuracy": vit.score(data.X_test, data.y_test),
        }
        _write_model(folder, job, data, vit.predict_proba, meta)
    elif kind == "vit-original":
        vit = ViTClassifier(cfg, _train_config(setup, data, 0), data.n_classes).fit(data.X, data.y)
        _save_net(vit.net_, folder / "vit-original.safetensors")
        meta = {"fit_s": vit.fit_seconds_, "fit_cpu_s": vit.fit_cpu_seconds_}
        _write_model(folder, job, data, vit.predict_proba, meta)
    elif kind == "vit-oracle":
        fraction, seed = float(rest[0]), int(rest[1])
        r = data.retain(fraction)
        vit = ViTClassifier(cfg, _train_config(setup, data, seed), data.n_classes).fit(
            data.X[r], data.y[r]
        )
        meta = {"fit_s": vit.fit_seconds_, "fit_cpu_s": vit.fit_cpu_seconds_}
        _write_model(folder, job, data, vit.predict_proba, meta)
    elif kind in BASELINES:
        fraction = float(rest[0])
        f, r = data.forget[fraction], data.retain(fraction)
        vit = _load_vit(setup, data, folder / "vit-original.safetensors", seed=0)
        params = PUBLISHED.get(kind, {})
        started, cpu = time.perf_counter(), time.process_time()
        model = unlearn(kind, vit, (data.X[f], data.y[f]), (data.X[r], data.y[r]), **params)
        meta = {
            "forget_s": time.perf_counter() - started,
            "forget_cpu_s": time.process_time() - cpu,
            "params": params,
        }
        _write_model(folder, job, data, model.predict_proba, meta)
    elif kind == "munkey-original":
        encoder = _key_encoder(setup, data, folder)
        rows = np.arange(len(data.y))
        mk = _munkey(setup, data, 0, encoder).fit(data.X, data.y, data.ids(rows))
        meta = {"fit_s": mk.fit_seconds_, "fit_cpu_s": mk.fit_cpu_seconds_}
        for fraction in setup.fractions:  # forgetting: delete the keys, score again
            forgot = copy.deepcopy(mk)
            started = time.perf_counter()
            receipt = forgot.forget(data.ids(data.forget[fraction]))
            seconds = time.perf_counter() - started
            assert receipt.n_removed == len(data.forget[fraction])
            assert not receipt.parameters_changed
            _write_model(
                folder,
                f"munkey-forget@{fraction}",
                data,
                forgot.predict_proba,
                {"forget_s": seconds},
            )
        _write_model(folder, job, data, mk.predict_proba, meta)
    elif kind == "munkey-oracle":
        fraction, seed = float(rest[0]), int(rest[1])
        r = data.retain(fraction)
        mk = _munkey(setup, data, seed, _key_encoder(setup, data, folder))
        mk.fit(data.X[r], data.y[r], data.ids(r))
        meta = {"fit_s": mk.fit_seconds_, "fit_cpu_s": mk.fit_cpu_seconds_}
        _write_model(folder, job, data, mk.predict_proba, meta)
    elif kind == "qss":
        _qss_jobs(setup, data, folder)
    else:
        raise ValueError(f"unknown job {job!r}")
    return job


def _qss_jobs(setup: Setup, data: Data, folder: Path) -> None:
    """QSS-E / QSS-L at the shipped defaults on the key features: forget vs refit, per fraction."""
    import copy

    from forgetting.estimators import QSSClassifier

    feats = np.load(folder / "keys-features.npz")
    X, Xt = feats["model"].astype(np.float64), feats["test"].astype(np.float64)
    ids = data.ids(np.arange(len(data.y)))

    for mode in ("exact", "label"):
        fitted = QSSClassifier(mode=mode, random_state=0).fit(X, data.y, ids)
        for fraction in setup.fractions:
            f, r = data.forget[fraction], data.retain(fraction)
            model = copy.deepcopy(fitted)
            started = time.perf_counter()
            model.forget([ids[i] for i in f], **({"erase_inputs": True} if mode == "label" else {}))
            model.wait_for_rebuilds()
            seconds = time.perf_counter() - started
            refit = QSSClassifier(mode=mode, random_state=0)
            refit.fit(X[r], data.y[r], [ids[i] for i in r])
            for job, m, meta in (
                (f"qss-{mode}@{fraction}", model, {"forget_s": seconds}),
                (f"qss-{mode}-refit@{fraction}", refit, {}),
            ):
                proba_eval, proba_test = m.predict_proba(X[data.eval_rows]), m.predict_proba(Xt)
                _write(folder, job, data, proba_eval, proba_test, meta)
    (folder / "qss.json").write_text("{}")


def plan(setup: Setup) -> dict[str, tuple[str, ...]]:
    """Every job, in the order they start, with the jobs it needs finished first."""
    jobs: dict[str, tuple[str, ...]] = {"keys": (), "vit-original": ()}
    jobs["munkey-original"] = ("keys",)
    jobs["qss"] = ("keys",)
    for fraction in setup.fractions:
        for method in BASELINES:
            jobs[f"{method}@{fraction}"] = ("vit-original",)
    for seed in range(setup.oracle_seeds):
        for fraction in setup.fractions:
            jobs[f"vit-oracle@{fraction}@{seed}"] = ()
            jobs[f"munkey-oracle@{fraction}@{seed}"] = ("keys",)
    return jobs


def _meta(folder: Path, job: str) -> dict:
    return json.loads((folder / f"{job}.json").read_text())


def _done(folder: Path, job: str) -> bool:
    """The job's JSON exists (and a baseline ran with today's :data:`PUBLISHED` settings)."""
    path = folder / f"{job}.json"
    if not path.exists():
        return False
    kind = job.split("@")[0]
    return kind not in BASELINES or _meta(folder, job).get("params", {}) == PUBLISHED.get(kind, {})


def run_all(args, setup: Setup, jobs: dict[str, tuple[str, ...]]) -> None:
    root = args.work_dir / setup.tag
    for name in args.datasets:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        (root / "setup.json").write_text(json.dumps(setup.__dict__, indent=1))
        run_jobs(
            jobs,
            partial(_done, folder),
            partial(run_job, name, setup, folder),
            args.jobs,
            f"munkey-scale {name}",
        )


# -- scoring ------------------------------------------------------------------------------


def weighted_auc(positive: np.ndarray, negative: np.ndarray, wp: np.ndarray, wn: np.ndarray):
    """ROC AUC of ``positive`` over ``negative`` scores with row weights (ties count half):
    ``roc_auc_score`` with ``sample_weight``, for many weightings of one set of scores.

    ``wp`` ``(B, len(positive))`` and ``wn`` ``(B, len(negative))``; returns ``(B,)``. Ranks
    are computed once, so a bootstrap of B replicates costs B bincounts, not B sorts.
    """
    values, inverse = np.unique(np.concatenate([positive, negative]), return_inverse=True)
    ip, ineg = inverse[: len(positive)], inverse[len(positive) :]
    out = np.empty(len(wp))
    for b in range(len(wp)):
        pos = np.bincount(ip, weights=wp[b], minlength=len(values))
        neg = np.bincount(ineg, weights=wn[b], minlength=len(values))
        below = np.cumsum(neg) - neg
        out[b] = float(pos @ (below + 0.5 * neg)) / (pos.sum() * neg.sum())
    return out


@dataclass
class Outcomes:
    """Per-row correctness and true-class probability of one model on one setting's rows."""

    correct: dict[str, np.ndarray]  # split -> bool per row
    true_p: dict[str, np.ndarray]

    def scores(self, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """TA / RA / FA / MIA (%) under row weights ``(B, n_split)`` per split."""
        out = {
            metric: 100 * (weights[split] @ self.correct[split]) / weights[split].sum(1)
            for metric, split in (("TA", "test"), ("RA", "retain"), ("FA", "forget"))
        }
        out["MIA"] = 100 * weighted_auc(
            self.true_p["forget"], self.true_p["test"], weights["forget"], weights["test"]
        )
        return out


def outcomes(folder: Path, job: str, data: Data, fraction: float) -> Outcomes | None:
    if not _done(folder, job):
        return None
    with np.load(folder / f"{job}.npz") as npz:
        saved = {name: npz[name] for name in npz.files}
    pos = {r: i for i, r in enumerate(data.eval_rows)}
    rows = {
        "forget": np.array([pos[r] for r in data.forget[fraction]]),
        "retain": np.array([pos[r] for r in data.retain_eval]),
    }
    correct, true_p = {}, {}
    for split, source, at, y in (
        ("forget", "eval", rows["forget"], data.y[data.forget[fraction]]),
        ("retain", "eval", rows["retain"], data.y[data.retain_eval]),
        ("test", "test", slice(None), data.y_test),
    ):
        correct[split] = saved[f"pred_{source}"][at] == y
        true_p[split] = saved[f"true_p_{source}"][at].astype(np.float64)
    return Outcomes(correct, true_p)


def _gap(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> np.ndarray:
    return np.mean([np.abs(a[m] - b[m]) for m in SCORES], axis=0)


def _mean_gap_over(boot_m: dict, boot_o: list[dict], seeds: np.ndarray) -> np.ndarray:
    """Per replicate: the mean Avg Gap to the oracles that replicate drew (``seeds`` (B, k))."""
    per = np.stack([_gap(boot_m, bo) for bo in boot_o])  # (k, B)
    return per[seeds, np.arange(seeds.shape[0])[:, None]].mean(1)


def _forget_seconds(meta: dict) -> float:
    """CPU seconds where a job recorded them (retrains, baselines: a paused run inflates their
    wall clock), else wall seconds (key deletion and QSS: sub-second to seconds)."""
    return float(meta.get("forget_cpu_s", meta.get("forget_s", 0.0)))


def _bounds(values: np.ndarray) -> tuple[float, float]:
    lo, hi = np.nanpercentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def _interval(values: np.ndarray) -> str:
    lo, hi = _bounds(values)
    return f"[{lo:.2f}, {hi:.2f}]"


def score_setting(folder: Path, data: Data, fraction: float, setup: Setup, n_boot: int):
    """Rows of the quality table for one (dataset, fraction): point estimates on all rows,
    intervals from ``n_boot`` replicates that resample oracle seeds and evaluation rows."""
    rng = np.random.default_rng(12345)
    sizes = {
        "forget": len(data.forget[fraction]),
        "retain": len(data.retain_eval),
        "test": len(data.y_test),
    }
    weights = {
        s: rng.multinomial(n, np.full(n, 1 / n), size=n_boot).astype(float)
        for s, n in sizes.items()
    }
    full = {s: np.ones((1, n)) for s, n in sizes.items()}
    families = {
        "vit": ["vit-original", *(f"{m}@{fraction}" for m in BASELINES)],
        "munkey": ["munkey-original", f"munkey-forget@{fraction}"],
    }
    rows = []
    for family, jobs in families.items():
        oracle_jobs = [f"{family}-oracle@{fraction}@{s}" for s in range(setup.oracle_seeds)]
        oracles = [o for o in (outcomes(folder, j, data, fraction) for j in oracle_jobs) if o]
        k = len(oracles)
        if k < 2:
            continue
        point_o = [o.scores(full) for o in oracles]
        boot_o = [o.scores(weights) for o in oracles]
        seeds = rng.integers(0, k, size=(n_boot, k))  # resampled oracle seeds per replicate

        pair_point = [_gap(point_o[i], point_o[j])[0] for i in range(k) for j in range(k) if i != j]
        pair_boot = np.full((k, k, n_boot), np.nan)
        for i in range(k):
            for j in range(k):
                if i != j:
                    pair_boot[i, j] = _gap(boot_o[i], boot_o[j])
        chosen = pair_boot[seeds[:, :, None], seeds[:, None, :], np.arange(n_boot)[:, None, None]]
        with warnings.catch_warnings():  # a replicate that drew one seed k times has no pair
            warnings.simplefilter("ignore", RuntimeWarning)
            floor_boot = np.nanmean(chosen.reshape(n_boot, -1), axis=1)
        floor = float(np.mean(pair_point))
        rows.append(
            {
                "dataset": data.name,
                "fraction": fraction,
                "method": f"Retrain (oracle, {family}): noise floor",
                "oracles": k,
                **{m: np.mean([p[m][0] for p in point_o]) for m in SCORES},
                "avg_gap": floor,
                "gap_95ci": _interval(floor_boot),
                "excess": 0.0,
                "excess_95ci": "",
                "forget_s": float(
                    np.mean(
                        [_meta(folder, j)["fit_cpu_s"] for j in oracle_jobs if _done(folder, j)]
                    )
                ),
            }
        )
        for job in jobs:
            out = outcomes(folder, job, data, fraction)
            if out is None:
                continue
            point = out.scores(full)
            gap = float(np.mean([_gap(point, p)[0] for p in point_o]))
            boot = _mean_gap_over(out.scores(weights), boot_o, seeds)
            meta = _meta(folder, job)
            rows.append(
                {
                    "dataset": data.name,
                    "fraction": fraction,
                    "method": LABELS[job.split("@")[0]],
                    "oracles": k,
                    **{m: float(point[m][0]) for m in SCORES},
                    "avg_gap": gap,
                    "gap_95ci": _interval(boot),
                    "excess": gap - floor,
                    "excess_95ci": _interval(boot - floor_boot),
                    "_excess_bounds": _bounds(boot - floor_boot),
                    "forget_s": _forget_seconds(meta),
                }
            )
    for mode in ("exact", "label"):
        out = outcomes(folder, f"qss-{mode}@{fraction}", data, fraction)
        ref = outcomes(folder, f"qss-{mode}-refit@{fraction}", data, fraction)
        if out is None or ref is None:
            continue
        point, refp = out.scores(full), ref.scores(full)
        meta = json.loads((folder / f"qss-{mode}@{fraction}.json").read_text())
        rows.append(
            {
                "dataset": data.name,
                "fraction": fraction,
                "method": LABELS[f"qss-{mode}"],
                "oracles": 1,
                **{m: float(point[m][0]) for m in SCORES},
                "avg_gap": float(_gap(point, refp)[0]),
                "gap_95ci": _interval(_gap(out.scores(weights), ref.scores(weights))),
                "excess": float(_gap(point, refp)[0]),
                "excess_95ci": "",
                "forget_s": _forget_seconds(meta),
            }
        )
    return rows


def overhead_rows(folder: Path, name: str, setup: Setup) -> list[dict]:
    """MUNKEY's training CPU time over the plain ViT's, fit by fit on the same rows."""
    pairs = [("vit-original", "munkey-original")] + [
        (f"vit-oracle@{f}@{s}", f"munkey-oracle@{f}@{s}")
        for f in setup.fractions
        for s in range(setup.oracle_seeds)
    ]
    ratios, vit_s, mk_s = [], [], []
    for v, m in pairs:
        if _done(folder, v) and _done(folder, m):
            a = json.loads((folder / f"{v}.json").read_text())["fit_cpu_s"]
            b = json.loads((folder / f"{m}.json").read_text())["fit_cpu_s"]
            ratios.append(b / a - 1)
            vit_s.append(a)
            mk_s.append(b)
    if not ratios:
        return []
    r = 100 * np.array(ratios)
    return [
        {
            "dataset": name,
            "fit_pairs": len(r),
            "vit_fit_cpu_s": float(np.mean(vit_s)),
            "munkey_fit_cpu_s": float(np.mean(mk_s)),
            "overhead_pct": float(r.mean()),
            "overhead_range_pct": f"[{r.min():.1f}, {r.max():.1f}]",
        }
    ]


def _missing(folder: Path, setup: Setup) -> list[str]:
    return [j for j in plan(setup) if not _done(folder, j)]


def report(args, setup: Setup, command: str) -> Path:
    from .report import write_results

    root = args.work_dir / setup.tag
    quality, overhead, keys, missing = [], [], [], []
    for name in args.datasets:
        folder = root / name
        data = load(name, setup)
        for fraction in setup.fractions:
            quality += score_setting(folder, data, fraction, setup, args.bootstrap)
        overhead += overhead_rows(folder, name, setup)
        if _done(folder, "keys"):
            meta = json.loads((folder / "keys.json").read_text())
            keys.append(
                {
                    "dataset": name,
                    "model": "key encoder (trained on the key split)",
                    "train_images": setup.n_key,
                    "test_accuracy": meta["test_accuracy"],
                }
            )
        if _done(folder, "vit-original"):  # the key split is the backbone's validation set
            vit = _load_vit(setup, data, folder / "vit-original.safetensors", seed=0)
            keys.append(
                {
                    "dataset": name,
                    "model": "plain ViT original (trained on the model split)",
                    "train_images": len(data.y),
                    "key_split_accuracy": vit.score(data.X_key, data.y_key),
                    "test_accuracy": vit.score(data.X_test, data.y_test),
                }
            )
        left = _missing(folder, setup)
        if left:
            missing.append(
                {"dataset": name, "unfinished_jobs": len(left), "first": ", ".join(left[:4])}
            )
    cols = [
        "dataset",
        "fraction",
        "method",
        "oracles",
        *SCORES,
        "avg_gap",
        "gap_95ci",
        "excess",
        "excess_95ci",
        "forget_s",
    ]
    tables = {
        "Unlearning quality: Avg Gap to the family's retrain oracles, and above its noise floor": (
            quality,
            cols,
        ),
        "Training time: MUNKEY overhead over the plain ViT (CPU seconds, fit by fit)": (
            overhead,
            [
                "dataset",
                "fit_pairs",
                "vit_fit_cpu_s",
                "munkey_fit_cpu_s",
                "overhead_pct",
                "overhead_range_pct",
            ],
        ),
        "Backbones: the frozen key encoder, and the plain ViT scored on the key split": (
            keys,
            ["dataset", "model", "train_images", "key_split_accuracy", "test_accuracy"],
        ),
    }
    if missing:
        tables["Unfinished: jobs not yet run"] = (missing, ["dataset", "unfinished_jobs", "first"])
    tables = {title: table for title, table in tables.items() if table[0]}  # e.g. with --only
    md = write_results(args.out_dir, args.name, command, tables, _notes(setup))
    if any("_excess_bounds" in r for r in quality):
        excess_figure(quality, args.out_dir / f"{args.name}-excess.png", command)
    print(f"wrote {md}")
    return md


def excess_figure(rows: list[dict], path: Path, command: str) -> None:
    """Each method's Avg Gap above its family's noise floor with its 95 % interval, one panel
    per (dataset, fraction): a bar whose interval crosses 0 is not told from a retrain."""
    from .plots import pyplot, save_figure

    plt = pyplot()
    settings = list(dict.fromkeys((r["dataset"], r["fraction"]) for r in rows))
    fig, axes = plt.subplots(1, len(settings), figsize=(4.2 * len(settings), 3.6), squeeze=False)
    for ax, (name, fraction) in zip(axes[0], settings, strict=True):
        mine = [r for r in rows if (r["dataset"], r["fraction"]) == (name, fraction)]
        mine = [r for r in mine if "_excess_bounds" in r]
        y = np.arange(len(mine))
        lo = [r["excess"] - r["_excess_bounds"][0] for r in mine]
        hi = [r["_excess_bounds"][1] - r["excess"] for r in mine]
        colors = ["tab:green" if "MUNKEY" in r["method"] else "tab:grey" for r in mine]
        ax.barh(y, [r["excess"] for r in mine], xerr=[lo, hi], color=colors, capsize=3)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_yticks(y, [r["method"] for r in mine], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("Avg Gap − noise floor (pp)")
        ax.set_title(f"{name}, forget {fraction:.0%}", fontsize=9)
    save_figure(fig, path, command)


def _notes(setup: Setup) -> str:
    fractions = " and ".join(f"{f:.0%}" for f in setup.fractions)
    return "\n".join(
        [
            "## What was run",
            "",
            f"- Splits: {setup.n_key:,} training images train the key encoder only; the "
            f"rest of the training split trains every model. Forget sets: {fractions} of it "
            "(nested, "
            f"seeded); RA on {setup.n_retain_eval:,} retain rows; TA on the 10,000 test images.",
            f"- Backbone (plain ViT and MUNKEY alike): width {setup.width}, depth {setup.depth}, "
            f"4 heads, {setup.stem} stem to a 4×4 grid (patch {setup.patch}); "
            f"{setup.epochs} epochs, "
            f"batch {setup.batch_size}, AdamW (0.9, 0.99), wd 0.05, peak lr {setup.lr}, warm-up + "
            "cosine; one torch thread per fit; training images of "
            f"{', '.join(setup.hflip) or 'no dataset'} mirrored left-right at random (hflip; "
            "never digits). MUNKEY at its defaults otherwise (exemplars "
            "128-d, K = 8, ensemble).",
            f"- Oracles: {setup.oracle_seeds} retrains per fraction and family (seeds 0–"
            f"{setup.oracle_seeds - 1}; seed 0 shares the original's initialization). Avg Gap = "
            "mean |Δ| over TA, RA, FA, MIA (pp), averaged over the family's oracles; noise floor = "
            "mean Avg Gap between two different oracles; excess = Avg Gap − floor.",
            "- 95 % intervals: percentile bootstrap over oracle seeds and evaluation rows "
            "together; an excess interval that excludes 0 means the method is told apart from "
            "one more retrain.",
            "- forget_s: what forgetting cost — one-thread CPU seconds of a retrain (the oracle "
            "rows) or of the baseline's unlearning run; wall seconds of MUNKEY's key deletion "
            "and of QSS's forget (including its rebuilds).",
            "- MIA: AUC of the loss-threshold attack (true-class probability) separating forget "
            "rows from test rows; 50 = indistinguishable.",
            "- Baselines start from the original plain ViT with the settings of "
            "forgetting_lab.baselines.approximate (each paper's values, epochs scaled to the "
            "schedule); QSS runs at the shipped defaults on the frozen key features.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    argv = argv if argv is not None else sys.argv[1:]
    command = shown_command("forgetting_lab.bench.munkey_scale", argv)
    setup = Setup.from_args(args)
    try:
        jobs = selected(plan(setup), args.only)
    except ValueError as err:
        parser.error(str(err))
    if not args.report_only:
        run_all(args, setup, jobs)
    report(args, setup, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
