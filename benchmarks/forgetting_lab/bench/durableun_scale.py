"""DurableUn on a pretrained transformer, at a scale where one question is ≤ 0.25 pp of FA.

    python -m forgetting_lab.bench.durableun_scale

The base is all-MiniLM-L6-v2 (:mod:`forgetting_lab.durableun.minilm`): NF4 weights taught the
question format on the public authors, then LoRA adapters fine-tuned on every fictitious author
(and, for the oracle, on the retain authors only). Seven unlearning methods (and SAF stopped by
the baselines' fp32-only rule) start from the fine-tuned adapters, with ``--seeds`` unlearning
seeds; SAF's α is scanned on seed 0. Every model is audited with its adapters at fp32, BF16,
INT8 and INT4 on the trained questions **and on two held-out rewordings of each** (which no
training and no stopping rule ever sees): FA, RA and the (ε, P)-durability certificate on both.
QSS runs on the same questions (their MiniLM sentence embeddings → the answer) at the shipped
defaults, ``forget`` against the refit, both quantized the same way.

Intervals are 95 % percentile bootstraps resampling unlearning seeds and authors (forget and
retain authors separately: an author's questions move together). Each trained model is a job
whose exact-match vectors land in ``--work-dir/<setup tag>/`` when it finishes; jobs start as
soon as the jobs they need are done; a rerun (or ``--report-only``) reuses finished jobs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from forgetting.audit.quantization import PAPER_PRECISIONS, DurabilityReport, PrecisionResult

from .jobs import run_jobs, shown_command

EXPECTED_DURATION = "hours on 2 cores (the fine-tunes dominate); minutes with --quick"
"""How long a run at the defaults takes (`forgetting bench` lists it)."""

PRECISIONS = ("fp32", *PAPER_PRECISIONS)
SPLITS = ("forget", "retain", "forget_held_out", "retain_held_out")
UNLEARNING = ("GA", "GradDiff", "NPO", "SalUn", "SCRUB", "RMU", "SAF", "SAF-fp32stop")
DEFAULT_ALPHAS = (0.0, 0.5, 1.0, 3.0, 8.0, 16.0)
DEFAULT_WORK = Path.home() / ".cache" / "forgetting-lab" / "durableun-scale"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m forgetting_lab.bench.durableun_scale",
        description="DurableUn on the pretrained MiniLM (NF4 base + LoRA): seven unlearning "
        "methods, FA/RA at fp32/BF16/INT8/INT4 on trained and held-out reworded questions, "
        "the durability certificate, SAF's α scan, QSS on the same questions; bootstrap CIs.",
    )
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK, help="where jobs keep outputs")
    p.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    p.add_argument("--name", default="durableun_scale", help="file name stem of the results")
    p.add_argument("--n-fictitious", type=int, default=204, help="fictitious authors (6 Qs each)")
    p.add_argument("--n-public", type=int, default=120, help="public authors (the base's stage)")
    p.add_argument(
        "--forget-fraction",
        type=float,
        default=1 / 3,
        help="share of the fictitious authors to forget (default: 68 of 204 = 408 questions)",
    )
    p.add_argument("--public-steps", type=int, default=300)
    p.add_argument("--finetune-steps", type=int, default=2400)
    p.add_argument("--finetune-lr", type=float, default=3e-3)
    p.add_argument("--seeds", type=int, default=5, help="unlearning seeds 0..N-1")
    p.add_argument(
        "--finetune-seeds",
        type=int,
        default=1,
        help="fine-tunes (and oracles); unlearning seed s starts from fine-tune s mod this",
    )
    p.add_argument("--methods", default=",".join(UNLEARNING))
    p.add_argument("--alphas", default=",".join(map(str, DEFAULT_ALPHAS)), help="SAF α scan")
    p.add_argument("--alpha", type=float, default=3.0, help="SAF α in the method table (paper: 3)")
    p.add_argument("--lr", type=float, default=1e-4, help="Adam step size of unlearning")
    p.add_argument("--max-steps", type=int, default=300, help="unlearning step budget")
    p.add_argument("--eval-every", type=int, default=5, help="steps between stopping checks")
    p.add_argument("--forget-batch", type=int, default=64, help="forget rows per step")
    p.add_argument("--epsilon", type=float, default=0.05, help="certificate threshold ε")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates")
    p.add_argument("--jobs", type=int, default=2, help="jobs at once (one torch thread each)")
    p.add_argument("--report-only", action="store_true", help="score finished jobs only")
    p.add_argument("--quick", action="store_true", help="a tiny corpus and budget (smoke test)")
    return p


@dataclass(frozen=True)
class Setup:
    """What decides a job's result; its hashes name the work folders (:class:`Work`)."""

    n_fictitious: int
    n_public: int
    forget_fraction: float
    public_steps: int
    finetune_steps: int
    finetune_lr: float
    batch_size: int
    lora_rank: int
    lr: float
    max_steps: int
    eval_every: int
    forget_batch: int
    alpha: float
    epsilon: float
    finetune_seeds: int

    @classmethod
    def from_args(cls, args) -> Setup:
        setup = cls(
            args.n_fictitious,
            args.n_public,
            args.forget_fraction,
            args.public_steps,
            args.finetune_steps,
            args.finetune_lr,
            64,
            8,
            args.lr,
            args.max_steps,
            args.eval_every,
            args.forget_batch,
            args.alpha,
            args.epsilon,
            args.finetune_seeds,
        )
        if args.quick:  # 6 authors, a few steps of everything
            setup = replace(
                setup,
                n_fictitious=6,
                n_public=4,
                forget_fraction=0.34,
                public_steps=3,
                finetune_steps=6,
                batch_size=16,
                lora_rank=4,
                max_steps=4,
                eval_every=2,
                forget_batch=4,
                finetune_seeds=1,
            )
        return setup

    def tags(self) -> tuple[str, str]:
        """Hashes of what the fine-tunes depend on and of what unlearning adds (ε only changes
        the verdict, so neither): unlearning settings can change without refitting."""
        fields = asdict(self)
        first = {k: fields.pop(k) for k in FINETUNE_FIELDS}
        fields.pop("epsilon")
        return tuple(  # type: ignore[return-value]
            hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]
            for d in (first, fields)
        )

    def minilm(self, seed: int):
        from forgetting_lab.durableun.minilm import MiniLMConfig

        return MiniLMConfig(
            n_fictitious=self.n_fictitious,
            n_public=self.n_public,
            forget_fraction=self.forget_fraction,
            public_steps=self.public_steps,
            finetune_steps=self.finetune_steps,
            batch_size=self.batch_size,
            lr=self.finetune_lr,
            lora_rank=self.lora_rank,
            lora_alpha=2.0 * self.lora_rank,
            epsilon=self.epsilon,
            seed=seed,
        )

    def unlearning(self, method: str, seed: int, alpha: float | None = None):
        from forgetting_lab.durableun.methods import UnlearnConfig

        return UnlearnConfig(
            method="SAF" if method == "SAF-fp32stop" else method,
            lr=self.lr,
            max_steps=self.max_steps,
            eval_every=self.eval_every,
            forget_batch=self.forget_batch,
            alpha=self.alpha if alpha is None else alpha,
            stop_on_quant=method != "SAF-fp32stop",
            seed=seed,
        )

    def corpus(self):
        from forgetting_lab.durableun.corpus import make_corpus

        return make_corpus(
            self.n_fictitious, self.n_public, self.forget_fraction, seed=0, paraphrases=True
        )


FINETUNE_FIELDS = (
    "n_fictitious",
    "n_public",
    "forget_fraction",
    "public_steps",
    "finetune_steps",
    "finetune_lr",
    "batch_size",
    "lora_rank",
    "finetune_seeds",
)
FINETUNE_JOBS = ("base", "qss", "finetune", "oracle")


@dataclass(frozen=True)
class Work:
    """Where jobs keep their outputs: the base, fine-tunes, oracles and QSS under the fine-tune
    tag; unlearning runs one folder deeper, under the unlearning tag."""

    root: Path
    setup: Setup

    @property
    def finetunes(self) -> Path:
        return self.root / self.setup.tags()[0]

    @property
    def unlearning(self) -> Path:
        return self.finetunes / self.setup.tags()[1]

    def path(self, job: str, ext: str) -> Path:
        kind = job.partition("@")[0]
        folder = self.finetunes if kind in FINETUNE_JOBS else self.unlearning
        return folder / f"{job}.{ext}"

    def done(self, job: str) -> bool:
        return self.path(job, "json").exists()

    def create(self) -> None:
        self.unlearning.mkdir(parents=True, exist_ok=True)
        fields = asdict(self.setup)
        for folder, keys in (
            (self.finetunes, FINETUNE_FIELDS),
            (self.unlearning, [k for k in fields if k not in FINETUNE_FIELDS]),
        ):
            if not (folder / "setup.json").exists():
                text = json.dumps({k: fields[k] for k in keys}, indent=1)
                (folder / "setup.json").write_text(text)


@dataclass(frozen=True)
class Plan:
    """Which jobs a run has: seeds, methods and α values (not part of the tag: adding one
    reuses every finished job)."""

    seeds: int
    methods: tuple[str, ...]
    alphas: tuple[float, ...]

    def jobs(self, finetune_seeds: int) -> dict[str, tuple[str, ...]]:
        """Every job with the jobs it needs finished first, in the order they start; unlearning
        seed s starts from fine-tune s mod ``finetune_seeds``."""
        jobs: dict[str, tuple[str, ...]] = {"base": (), "qss": ()}
        for s in range(finetune_seeds):
            jobs[f"finetune@{s}"] = ("base",)
            jobs[f"oracle@{s}"] = ("base",)
        for s in range(self.seeds):
            for m in self.methods:
                jobs[f"{m}@{s}"] = (f"finetune@{s % finetune_seeds}",)
        for a in self.alphas:
            jobs[f"SAF-alpha{a:g}@0"] = ("finetune@0",)
        return jobs


# -- jobs ---------------------------------------------------------------------------------


def _save(work: Work, job: str, em: dict[str, np.ndarray], meta: dict) -> None:
    """Exact-match vectors (``{split}/{precision}``) then the JSON that marks the job done."""
    np.savez(work.path(job, "npz"), **{k.replace("/", "__"): v for k, v in em.items()})
    work.path(job, "json").write_text(json.dumps(meta, indent=1))


def _load_base(work: Work, corpus):
    from safetensors.torch import load_file

    from forgetting_lab.durableun.minilm import MiniLMQA

    model = MiniLMQA(corpus)
    model.load_state_dict(load_file(work.path("base", "safetensors")), strict=True)
    model.eval()
    return model


def _encoded(model, corpus) -> dict[str, Any]:
    return {
        "forget": model.encode(corpus.forget),
        "retain": model.encode(corpus.retain),
        "forget_held_out": model.encode(corpus.held_out(corpus.forget)),
        "retain_held_out": model.encode(corpus.held_out(corpus.retain)),
    }


def audit_vectors(model, data: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per question, whether the model answers it exactly, with its adapters at each precision
    (the base is NF4 already): ``{"split/precision": bool array}``."""
    import torch

    from forgetting.audit.quantization import is_adapter, quantized_weights
    from forgetting_lab.durableun.model import exact_match

    out = {}
    with torch.no_grad():
        for p in PRECISIONS:
            with quantized_weights(model, p, is_adapter):
                for split, batch in data.items():
                    out[f"{split}/{p}"] = exact_match(model, batch).numpy().astype(bool)
    return out


def run_job(work: Work, job: str) -> str:
    """Train, unlearn or score what ``job`` names and write its outputs; returns ``job``."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    from safetensors.torch import load_file, save_file

    from forgetting_lab.durableun.methods import unlearn
    from forgetting_lab.durableun.minilm import adapted_copy, finetune, public_base

    torch.set_num_threads(1)
    setup = work.setup
    corpus = setup.corpus()
    kind, _, seed_text = job.partition("@")
    started, cpu = time.perf_counter(), time.process_time()
    if kind == "base":
        model = public_base(setup.minilm(0), corpus)
        save_file(model.state_dict(), work.path(job, "safetensors"))
        work.path(job, "json").write_text(json.dumps({"fit_cpu_s": time.process_time() - cpu}))
        return job
    if kind == "qss":
        em, meta = _qss(corpus)
        _save(work, job, em, meta)
        return job
    seed = int(seed_text)
    base = _load_base(work, corpus)
    if kind in ("finetune", "oracle"):
        qas = corpus.fictitious if kind == "finetune" else corpus.retain
        model = finetune(setup.minilm(seed), base, qas, work.path(job, "checkpoint"))
        save_file(model.adapter_state(), work.path(job, "safetensors"))
        meta: dict[str, Any] = {"fit_cpu_s": time.process_time() - cpu}
    else:
        ft_seed = seed % setup.finetune_seeds
        model = adapted_copy(setup.minilm(ft_seed), base)
        model.load_adapter_state(load_file(work.path(f"finetune@{ft_seed}", "safetensors")))
        if kind.startswith("SAF-alpha"):
            ucfg = setup.unlearning("SAF", seed, alpha=float(kind.removeprefix("SAF-alpha")))
        else:
            ucfg = setup.unlearning(kind, seed)
        data = _encoded(model, corpus)
        info = unlearn(model, data["forget"], data["retain"], ucfg)
        meta = {**info, "unlearn_cpu_s": time.process_time() - cpu, "alpha": ucfg.alpha}
    model.eval()
    em = audit_vectors(model, _encoded(model, corpus))
    meta["wall_s"] = time.perf_counter() - started
    _save(work, job, em, meta)
    return job


def _qss(corpus) -> tuple[dict[str, np.ndarray], dict]:
    """QSS on the same questions: MiniLM sentence embedding → the answer, at the shipped
    defaults; ``forget`` of the forget authors' questions vs the refit without them, each
    quantized at every precision (float arrays; the integer sums are exact)."""
    from forgetting import QSSClassifier
    from forgetting.audit.quantization import quantize_arrays_
    from forgetting.encoders.text import MiniLMEncoder

    encoder = MiniLMEncoder(cache=False, progress=False)
    answers = sorted({" ".join(qa.answer) for qa in corpus.fictitious})
    code = {a: i for i, a in enumerate(answers)}

    def xy(qas):
        X = encoder.transform([" ".join(qa.question) for qa in qas]).astype(np.float64)
        return X, np.array([code[" ".join(qa.answer)] for qa in qas])

    X, y = xy(corpus.fictitious)
    ids = [f"q{i}" for i in range(len(y))]
    forget_authors = corpus.forget_authors
    is_forget = np.array([qa.author in forget_authors for qa in corpus.fictitious])
    started = time.perf_counter()
    model = QSSClassifier(random_state=0).fit(X, y, ids)
    fit_s = time.perf_counter() - started
    started = time.perf_counter()
    model.forget([i for i, f in zip(ids, is_forget, strict=True) if f])
    model.wait_for_rebuilds()
    forget_s = time.perf_counter() - started
    keep = ~is_forget
    kept_ids = [i for i, k in zip(ids, keep, strict=True) if k]
    refit = QSSClassifier(random_state=0).fit(X[keep], y[keep], kept_ids)
    splits = {
        "forget": xy(corpus.forget),
        "retain": xy(corpus.retain),
        "forget_held_out": xy(corpus.held_out(corpus.forget)),
        "retain_held_out": xy(corpus.held_out(corpus.retain)),
    }
    em, equal = {}, {}
    tmp = tempfile.mkdtemp(prefix="durableun-qss-")
    for p in PRECISIONS:
        preds = {}
        for name, m in (("forgot", model), ("refit", refit)):
            path = os.path.join(tmp, f"{name}.qss")
            m.save(path)  # a fresh copy through the model file, cell means materialized
            q = QSSClassifier.load(path)
            q.predict(X[:1])
            quantize_arrays_(q, p)
            preds[name] = {s: q.predict(Xs) for s, (Xs, _) in splits.items()}
        for s, (_, ys) in splits.items():
            em[f"{s}/{p}"] = preds["forgot"][s] == ys
            em[f"refit:{s}/{p}"] = preds["refit"][s] == ys
        equal[p] = all(np.array_equal(preds["forgot"][s], preds["refit"][s]) for s in splits)
    return em, {"fit_s": fit_s, "forget_s": forget_s, "predictions_equal_refit": equal}


def run_all(args, work: Work, plan: Plan) -> None:
    work.create()
    run_jobs(
        plan.jobs(work.setup.finetune_seeds),
        work.done,
        partial(run_job, work),
        args.jobs,
        "durableun-scale",
    )


# -- scoring ------------------------------------------------------------------------------


@dataclass
class Rows:
    """Which author each audited question belongs to, per split (rewordings follow their
    question), and the bootstrap's row weights drawn from resampling authors."""

    authors: dict[str, np.ndarray]

    @classmethod
    def of(cls, corpus) -> Rows:
        qas = {
            "forget": corpus.forget,
            "retain": corpus.retain,
            "forget_held_out": corpus.held_out(corpus.forget),
            "retain_held_out": corpus.held_out(corpus.retain),
        }
        return cls({s: np.array([qa.author for qa in q]) for s, q in qas.items()})

    def weights(self, n_boot: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """``(n_boot, n_rows)`` per split; a split and its rewordings share one author draw."""
        out = {}
        for group in ("forget", "retain"):
            people = np.unique(self.authors[group])
            counts = rng.multinomial(len(people), np.full(len(people), 1 / len(people)), n_boot)
            for split in (group, f"{group}_held_out"):
                out[split] = counts[:, np.searchsorted(people, self.authors[split])].astype(float)
        return out

    def unit_weights(self) -> dict[str, np.ndarray]:
        """``(1, n_rows)`` ones per split: the point estimate through :func:`_accuracies`."""
        return {s: np.ones((1, len(a))) for s, a in self.authors.items()}


def _accuracies(em: dict[str, np.ndarray], weights: dict[str, np.ndarray], prefix: str = ""):
    """Exact-match rate per ``split/precision`` under row weights ``(B, n)`` → ``(B,)``."""
    out = {}
    for split, w in weights.items():
        for p in PRECISIONS:
            hits = em[f"{prefix}{split}/{p}"].astype(float)
            out[f"{split}/{p}"] = (w @ hits) / w.sum(1)
    return out


def _point_accuracies(em: dict[str, np.ndarray], rows: Rows, prefix: str = "") -> dict[str, float]:
    """Exact-match rate per ``split/precision`` over every question (no resampling)."""
    return {k: float(v[0]) for k, v in _accuracies(em, rows.unit_weights(), prefix).items()}


def _certified(acc: dict[str, float], split: str, epsilon: float) -> bool:
    results = tuple(PrecisionResult(p, acc[f"{split}/{p}"], float("nan")) for p in PRECISIONS)
    return DurabilityReport(results, epsilon, PAPER_PRECISIONS).passed


def _load(work: Work, job: str) -> tuple[dict[str, np.ndarray], dict] | None:
    if not work.done(job):
        return None
    with np.load(work.path(job, "npz")) as z:
        em = {k.replace("__", "/"): z[k] for k in z.files}
    return em, json.loads(work.path(job, "json").read_text())


METRICS = {
    "FA": "forget/fp32",
    "Q-BF16": "forget/bf16",
    "Q-INT8": "forget/int8",
    "Q-INT4": "forget/int4",
    "RA": "retain/fp32",
    "RA-INT4": "retain/int4",
}


def score(
    label: str, runs: list[tuple[dict, dict]], rows: Rows, setup: Setup, n_boot: int, **extra
) -> dict[str, dict]:
    """Trained-question and held-out rows for one method over its runs (seeds): point value =
    mean over runs; 95 % interval resampling runs and authors together."""
    rng = np.random.default_rng(2024)
    weights = rows.weights(n_boot, rng)
    prefix = extra.pop("prefix", "")
    points = [_point_accuracies(em, rows, prefix) for em, _ in runs]
    boots = [_accuracies(em, weights, prefix) for em, _ in runs]
    pick = rng.integers(0, len(runs), size=(n_boot, len(runs)))
    out = {}
    for table, suffix in (("trained", ""), ("held_out", "_held_out")):
        row: dict[str, Any] = {"method": label, "runs": len(runs), **extra}
        for name, key in METRICS.items():
            split, p = key.split("/")
            key = f"{split}{suffix}/{p}"
            point = float(np.mean([pt[key] for pt in points]))
            per_run = np.stack([b[key] for b in boots])  # (runs, B)
            boot = per_run[pick, np.arange(n_boot)[:, None]].mean(1)
            lo, hi = np.percentile(boot, [2.5, 97.5])
            row[name] = f"{point:.3f} [{lo:.3f}, {hi:.3f}]"
            row[f"_{name}"] = (point, float(lo), float(hi))
        passed = sum(_certified(pt, f"forget{suffix}", setup.epsilon) for pt in points)
        row["certified"] = f"{passed}/{len(runs)}"
        out[table] = row
    metas = [m for _, m in runs]
    if "steps" in metas[0]:
        out["trained"]["steps"] = float(np.mean([m["steps"] for m in metas]))
        out["trained"]["stopped"] = f"{sum(m['stopped'] for m in metas)}/{len(metas)}"
        out["trained"]["cpu_s"] = float(np.mean([m["unlearn_cpu_s"] for m in metas]))
    return out


def report(args, work: Work, plan: Plan, command: str) -> Path:
    from .durability import pareto_plot, trilemma
    from .report import write_results

    setup = work.setup
    rows = Rows.of(setup.corpus())
    trained, held, per_seed, sweep, qss = [], [], [], [], []

    def add(label: str, jobs: list[str], **extra) -> None:
        runs = [r for r in (_load(work, j) for j in jobs) if r is not None]
        if runs:
            scored = score(label, runs, rows, setup, args.bootstrap, **extra)
            trained.append(scored["trained"])
            held.append(scored["held_out"])

    ft = range(setup.finetune_seeds)
    add("fine-tuned (before unlearning)", [f"finetune@{s}" for s in ft])
    add("oracle (fine-tuned on the retain authors)", [f"oracle@{s}" for s in ft])
    for m in plan.methods:
        add(m, [f"{m}@{s}" for s in range(plan.seeds)])
        for s in range(plan.seeds):
            run = _load(work, f"{m}@{s}")
            if run is not None:
                per_seed.append(_seed_row(m, s, run, rows, setup.epsilon))
    for a in plan.alphas:
        run = _load(work, f"SAF-alpha{a:g}@0")
        if run is not None:
            sweep.append({**_seed_row("SAF", 0, run, rows, setup.epsilon), "alpha": a})
    if (q := _load(work, "qss")) is not None:
        add("QSS forget (exact)", ["qss"])
        add("QSS refit without the forget authors", ["qss"], prefix="refit:")
        qss = [
            {"precision": p, "predictions_equal_refit": q[1]["predictions_equal_refit"][p]}
            for p in PRECISIONS
        ]
    metric_cols = ["method", "runs", *METRICS, "certified"]
    tables = {
        "Trained questions: FA / RA with the adapters at each precision (95 % CI)": (
            trained,
            [*metric_cols, "steps", "stopped", "cpu_s"],
        ),
        "Held-out rewordings: no training or stopping rule saw them": (held, metric_cols),
        "Per seed: point values, trained | held-out": (
            per_seed,
            [
                "method",
                "seed",
                "steps",
                "stopped",
                "FA_fp32",
                "FA_int4",
                "RA_fp32",
                "FA_ho_fp32",
                "FA_ho_int4",
                "RA_ho_fp32",
                "certified",
                "certified_ho",
            ],
        ),
        "SAF alpha scan (seed 0)": (
            sweep,
            [
                "alpha",
                "steps",
                "stopped",
                "FA_fp32",
                "FA_int4",
                "RA_fp32",
                "RA_int4",
                "FA_ho_fp32",
                "FA_ho_int4",
                "RA_ho_fp32",
                "certified",
                "certified_ho",
            ],
        ),
        "Trilemma: FA <= 0.05, RA >= 0.50 and Q-INT4 <= 0.05 at once (trained questions)": (
            trilemma(per_seed + sweep),
            ["method", "seed", "alpha", "FA", "RA", "Q-INT4", "all_three"],
        ),
        "QSS: forget vs refit predictions, both quantized": (
            qss,
            ["precision", "predictions_equal_refit"],
        ),
    }
    if not plan.alphas:
        del tables["SAF alpha scan (seed 0)"]
    missing = [j for j in plan.jobs(work.setup.finetune_seeds) if not work.done(j)]
    if missing:
        tables["Unfinished: jobs not yet run"] = (
            [{"unfinished_jobs": len(missing), "first": ", ".join(missing[:6])}],
            ["unfinished_jobs", "first"],
        )
    md = write_results(args.out_dir, args.name, command, tables, _notes(setup, plan, rows))
    if per_seed or sweep:
        pareto_plot(per_seed, sweep, args.out_dir / f"{args.name}-pareto.png", command)
    if trained:
        held_out_figure(trained, held, args.out_dir / f"{args.name}-held-out.png", command)
    print(f"wrote {md}")
    return md


def held_out_figure(trained: list[dict], held: list[dict], path: Path, command: str) -> None:
    """FA at fp32 and with INT4 adapters, and RA, per method: on the trained questions beside
    their held-out rewordings, with 95 % intervals; the dashed line is the certificate's ε."""
    from .plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 0.45 * len(trained) + 1.6), sharey=True)
    y = np.arange(len(trained))
    for ax, metric in zip(axes, ("FA", "Q-INT4", "RA"), strict=True):
        for offset, rows, label in ((-0.2, trained, "trained"), (0.2, held, "held-out")):
            point, lo, hi = (np.array([r[f"_{metric}"][i] for r in rows]) for i in range(3))
            ax.errorbar(
                point,
                y + offset,
                xerr=[point - lo, hi - point],
                fmt="o",
                ms=4,
                capsize=2,
                label=label,
            )
        if metric != "RA":
            ax.axvline(0.05, ls="--", c="r", lw=0.8)
        ax.set_xlim(-0.02, 1.02)
        ax.set_title(metric, fontsize=10)
    axes[0].set_yticks(y, [r["method"] for r in trained], fontsize=8)
    axes[0].invert_yaxis()
    axes[0].legend(fontsize=8)
    save_figure(fig, path, command)


def _seed_row(method: str, seed: int, run: tuple[dict, dict], rows: Rows, epsilon: float) -> dict:
    em, meta = run
    acc = _point_accuracies(em, rows)
    row: dict[str, Any] = {
        "method": method,
        "seed": seed,
        "steps": meta["steps"],
        "stopped": meta["stopped"],
        "certified": _certified(acc, "forget", epsilon),
        "certified_ho": _certified(acc, "forget_held_out", epsilon),
    }
    for tag, split in (("", ""), ("_ho", "_held_out")):
        for p in PRECISIONS:
            row[f"FA{tag}_{p}"] = acc[f"forget{split}/{p}"]
            row[f"RA{tag}_{p}"] = acc[f"retain{split}/{p}"]
    return row


def _notes(setup: Setup, plan: Plan, rows: Rows) -> str:
    n_f = len(rows.authors["forget"])
    return "\n".join(
        [
            "## What was run",
            "",
            f"- Corpus: {setup.n_fictitious} fictitious authors × 6 facts; "
            f"{len(np.unique(rows.authors['forget']))} forgotten = {n_f} forget questions (one "
            f"is {100 / n_f:.2f} pp of FA), {len(rows.authors['retain'])} retain questions; two "
            "held-out rewordings of every fictitious question. "
            f"{setup.n_public} public authors (every wording) teach the base the format.",
            "- Model: all-MiniLM-L6-v2 (6 layers, 384 wide), every linear layer NF4 "
            f"(blocksize 64) + LoRA rank {setup.lora_rank}; answers fill slots scored against "
            f"the frozen word embeddings. Public stage {setup.public_steps} steps (merged, "
            f"re-quantized); fine-tune {setup.finetune_steps} steps, batch {setup.batch_size}, "
            f"AdamW lr {setup.finetune_lr} cosine; {setup.finetune_seeds} fine-tune seed(s), "
            f"{plan.seeds} unlearning seeds (seed s starts from fine-tune s mod "
            f"{setup.finetune_seeds}).",
            f"- Unlearning: Adam lr {setup.lr}, ≤ {setup.max_steps} steps, {setup.forget_batch} "
            f"forget + 32 retain questions per step, stopped as soon as FA ≤ 0.05 on the "
            f"trained forget questions (checked every {setup.eval_every} steps; SAF also under "
            f"INT4-STE unless SAF-fp32stop). SAF α = {setup.alpha} in the table.",
            f"- Certificate: FA ≤ ε = {setup.epsilon} with the adapters at BF16, INT8 and INT4; "
            "on the trained questions and, separately, on the held-out rewordings.",
            "- Intervals: 95 % percentile bootstrap resampling runs (seeds) and authors.",
            "- QSS: the questions' MiniLM sentence embeddings (float64) → the answer, "
            "QSSClassifier at the shipped defaults; forget of the forget authors' questions vs "
            "the refit without them, each quantized (float arrays) at every precision.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    argv = argv if argv is not None else sys.argv[1:]
    command = shown_command("forgetting_lab.bench.durableun_scale", argv)
    setup = Setup.from_args(args)
    methods = tuple(m for m in args.methods.split(",") if m)
    unknown = [m for m in methods if m not in UNLEARNING]
    if unknown:
        _parser().error(f"unknown methods {unknown}; choose from {', '.join(UNLEARNING)}")
    alphas = tuple(float(a) for a in args.alphas.split(",") if a)
    if args.quick and args.methods == ",".join(UNLEARNING):
        methods, alphas = ("GradDiff", "SAF"), alphas[:2]
    plan = Plan(1 if args.quick else args.seeds, methods, alphas)
    work = Work(args.work_dir, setup)
    if not args.report_only:
        run_all(args, work, plan)
    report(args, work, plan, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
